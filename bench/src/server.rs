//! What the harness asks the server (command counts, CPU), and every place where the
//! harness depends on distlock's lock layout or on its scripts' commands.
//!
//! The second half of this file is the one to adapt when the layout or the scripts
//! change: the script sources, the keys and channel of a lock, the commands the
//! scripts run inside Redis, the prefill of held locks, the requests a first
//! acquisition and a release send, and `redis-benchmark`'s command lines for the
//! reference. Beside it, the same for rslock's commands (the minimal protocol), so
//! that both references are measured the same way.

use std::collections::HashMap;
use std::time::Duration;

use distlock_testkit::RedisServer;

use crate::error::BoxError;
use crate::kinds::Kind;

/// `INFO commandstats`: command name to calls; while [`log_every_command`] is on, also
/// the clients' own requests as the slow log tells them ([`CLIENT_REQUESTS`],
/// [`CLIENT_ACQUIRES`]).
pub(crate) fn command_stats(server: &RedisServer) -> Result<HashMap<String, u64>, BoxError> {
    let info = server.cmd_timeout(&["INFO", "commandstats"], Duration::from_secs(30))?;
    let mut stats = parse_command_stats(&info, "calls=");
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    let threshold: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query(&mut conn)?;
    if threshold.1 == "0" {
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG").arg("GET").arg(-1).query(&mut conn)?;
        count_logged_requests(&log, &mut stats);
    }
    Ok(stats)
}

/// [`command_stats`] over an async connection, for a snapshot in the middle of a run
/// without blocking its tasks.
pub(crate) async fn command_stats_async(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<HashMap<String, u64>, BoxError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut stats = parse_command_stats(&info, "calls=");
    let threshold: (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("slowlog-log-slower-than")
        .query_async(conn)
        .await?;
    if threshold.1 == "0" {
        let log: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(conn)
            .await?;
        count_logged_requests(&log, &mut stats);
    }
    Ok(stats)
}

/// The pseudo-command under which [`command_stats`] counts the requests that
/// clients sent (not the harness's own looks), from the slow log.
pub(crate) const CLIENT_REQUESTS: &str = "(client requests)";

/// The pseudo-command under which [`command_stats`] counts distlock's acquire
/// attempts that clients sent: plain `SET`s and runs of acquire.lua.
pub(crate) const CLIENT_ACQUIRES: &str = "(client acquires)";

/// The commands the harness sends to look at the server: never a client's request.
const LOOKS: [&str; 4] = ["slowlog", "config", "info", "client"];

/// Has the server log every command in its slow log (emptied first), so that a
/// client's `SET` can be told from one a script runs: `INFO commandstats` counts
/// both, and distlock sends a `SET` itself for a first acquisition. Only for the
/// scenarios that count requests: logging costs the server a little per command.
pub(crate) fn log_every_command(server: &RedisServer, on: bool) -> Result<(), BoxError> {
    let threshold = if on { "0" } else { "10000" };
    server.cmd(&[
        "CONFIG",
        "SET",
        "slowlog-log-slower-than",
        threshold,
        "slowlog-max-len",
        "1000000",
    ])?;
    server.cmd(&["SLOWLOG", "RESET"])?;
    Ok(())
}

/// Counts, from `SLOWLOG GET -1`'s entries, the clients' requests and distlock's
/// acquire attempts into `stats` (entries of a script's commands have no client
/// address, `?:0`).
fn count_logged_requests(log: &[redis::Value], stats: &mut HashMap<String, u64>) {
    let text = |value: &redis::Value| match value {
        redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        redis::Value::SimpleString(text) => text.clone(),
        _ => String::new(),
    };
    let acquire_sha = redis::Script::new(ACQUIRE_LUA).get_hash().to_owned();
    let (mut requests, mut acquires) = (0, 0);
    for entry in log {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let args: Vec<String> = match fields.get(3) {
            Some(redis::Value::Array(args)) => args.iter().take(2).map(text).collect(),
            _ => continue,
        };
        let command = args.first().map(|c| c.to_lowercase()).unwrap_or_default();
        if fields.get(4).map(text).as_deref() == Some("?:0") || LOOKS.contains(&command.as_str()) {
            continue;
        }
        requests += 1;
        let acquire = command == "set"
            || (command == "evalsha" && args.get(1).is_some_and(|sha| *sha == acquire_sha));
        acquires += u64::from(acquire);
    }
    if requests > 0 {
        stats.insert(CLIENT_REQUESTS.to_owned(), requests);
        stats.insert(CLIENT_ACQUIRES.to_owned(), acquires);
    }
}

/// One field (`calls=` or `usec=`) of every `cmdstat_` line of `INFO commandstats`.
fn parse_command_stats(info: &str, field: &str) -> HashMap<String, u64> {
    let mut stats = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let value = fields
            .split(',')
            .find_map(|f| f.strip_prefix(field))
            .and_then(|value| value.parse().ok())
            .unwrap_or(0);
        stats.insert(name.to_owned(), value);
    }
    stats
}

/// Calls of `command` between two snapshots of [`command_stats`].
pub(crate) fn calls_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    command: &str,
) -> u64 {
    after
        .get(command)
        .copied()
        .unwrap_or(0)
        .saturating_sub(before.get(command).copied().unwrap_or(0))
}

/// Requests clients sent between two snapshots: from the slow log when it logs every
/// command, else every command but the harness's looks and the commands that the
/// client's scripts run inside Redis (`inner`).
pub(crate) fn client_requests_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    inner: &[&str],
) -> u64 {
    if after.contains_key(CLIENT_REQUESTS) {
        return calls_between(before, after, CLIENT_REQUESTS);
    }
    after
        .keys()
        .filter(|name| {
            // The harness's own looks (`INFO`, `SLOWLOG`, and `CLIENT SETINFO` of the
            // connection it opens to read the slow log) are no client's requests.
            let command = name.split('|').next().unwrap_or_default();
            !LOOKS.contains(&command) && !name.starts_with('(') && !inner.contains(&name.as_str())
        })
        .map(|name| calls_between(before, after, name))
        .sum()
}

/// What the server had spent at one moment: for the server's CPU per lock+unlock pair.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ServerUsage {
    /// The sum of every `cmdstat_*` `usec` but `INFO`'s and `CONFIG`'s. A command
    /// that a script runs counts twice: in its own line and in the script's time.
    pub(crate) command_usec: u64,
    /// `used_cpu_user` + `used_cpu_sys` of `INFO cpu`, in seconds.
    pub(crate) cpu_secs: f64,
}

impl ServerUsage {
    /// Both sections in one `INFO`, so they describe the same moment.
    pub(crate) fn take(server: &RedisServer) -> Result<Self, BoxError> {
        let info = server.cmd_timeout(&["INFO", "commandstats", "cpu"], Duration::from_secs(30))?;
        let command_usec = parse_command_stats(&info, "usec=")
            .into_iter()
            .filter(|(name, _)| name != "info" && name != "config")
            .map(|(_, usec)| usec)
            .sum();
        let cpu = |field: &str| -> Result<f64, BoxError> {
            let prefix = format!("{field}:");
            info.lines()
                .find_map(|line| line.strip_prefix(&prefix))
                .and_then(|value| value.trim().parse().ok())
                .ok_or_else(|| format!("no {field} in INFO cpu").into())
        };
        Ok(ServerUsage {
            command_usec,
            cpu_secs: cpu("used_cpu_user")? + cpu("used_cpu_sys")?,
        })
    }

    /// Commands' microseconds and CPU microseconds spent since `before`.
    pub(crate) fn since(&self, before: &ServerUsage) -> (f64, f64) {
        (
            self.command_usec.saturating_sub(before.command_usec) as f64,
            (self.cpu_secs - before.cpu_secs).max(0.0) * 1e6,
        )
    }
}

/// A field of `INFO <section>` as a number.
pub(crate) fn info_field(
    server: &RedisServer,
    section: &str,
    field: &str,
) -> Result<u64, BoxError> {
    let info = server.cmd_timeout(&["INFO", section], Duration::from_secs(30))?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("no {field} in INFO {section}").into())
}

/// Empties the server without blocking it (a blocked cluster node would be failed
/// over), and waits until the memory is given back, up to 60 s.
pub(crate) fn flush(server: &RedisServer) -> Result<(), BoxError> {
    server.cmd(&["FLUSHALL", "ASYNC"])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while info_field(server, "memory", "lazyfree_pending_objects")? > 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs `body` (Lua, with `ARGV[1]` a key template with one `%012d`, `ARGV[2]` and
/// `ARGV[3]` the first and one past the last number, `ARGV[4..]` = `args`) in
/// server-side loops of 10 000 keys: a longer script would stall a cluster node past
/// its node timeout and start a failover.
fn fill_in_chunks(
    server: &RedisServer,
    body: &str,
    template: &str,
    keys: u64,
    args: &[&str],
) -> Result<(), BoxError> {
    const CHUNK: u64 = 10_000;
    let script = format!(
        "local template, from, to = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]) \
         for i = from, to - 1 do local key = string.format(template, i) {body} end \
         return to - from"
    );
    let mut from = 0;
    while from < keys {
        let to = (from + CHUNK).min(keys);
        let (first, last) = (from.to_string(), to.to_string());
        let mut command = vec!["EVAL", &script, "0", template, &first, &last];
        command.extend_from_slice(args);
        server.cmd_timeout(&command, Duration::from_secs(30))?;
        from = to;
    }
    Ok(())
}

/// Which commands a reference runs: distlock's scripts, or rslock's commands (the
/// minimal protocol: `SET NX PX` and a compare-and-delete script).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Distlock,
    Minimal,
}

/// Keys of the reference runs: `distlock:{<tag>:<n>}` on a single server, or
/// `distlock:{<tag>}:<n>` with a tag owned by one cluster master (all in one slot).
#[derive(Debug, Clone)]
pub(crate) enum KeyShape {
    Single,
    Slot(String),
}

impl KeyShape {
    /// The key for `what`, with `number` in place of the counter (a `__rand_int__`
    /// for redis-benchmark, or a Lua format).
    fn key(&self, what: &str, number: &str) -> String {
        match self {
            KeyShape::Single => format!("distlock:{{ref{what}:{number}}}"),
            KeyShape::Slot(tag) => format!("distlock:{{{tag}}}:ref{what}:{number}"),
        }
    }
}

/// `redis-benchmark`'s command lines of one reference: a first acquisition on fresh
/// keys, and a release of a held lock (keys that [`prefill_held`] filled).
#[derive(Debug, Clone)]
pub(crate) struct ReferenceCommands {
    pub(crate) acquire: Vec<String>,
    pub(crate) release: Vec<String>,
}

/// What a reference runs: a protocol's plain lock, or one of distlock's lock kinds
/// with that kind's own scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    Plain(Protocol),
    Kind(Kind),
}

impl From<Protocol> for Workload {
    fn from(protocol: Protocol) -> Self {
        Workload::Plain(protocol)
    }
}

impl Workload {
    /// Releases in one release request: one, or a whole set's.
    pub(crate) fn releases_per_request(self) -> u64 {
        match self {
            Workload::Kind(Kind::All(names)) => names as u64,
            _ => 1,
        }
    }
}

/// Loads `workload`'s scripts on `server` and gives its reference command lines for
/// the run `tag` (`lease_ms`: the acquire's lease).
pub(crate) fn reference_commands(
    server: &RedisServer,
    workload: Workload,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
) -> Result<ReferenceCommands, BoxError> {
    match workload {
        Workload::Plain(Protocol::Distlock) | Workload::Kind(Kind::Plain) => {
            distlock_reference_commands(server, shape, tag, lease_ms)
        }
        Workload::Plain(Protocol::Minimal) => {
            minimal_reference_commands(server, shape, tag, lease_ms)
        }
        Workload::Kind(Kind::All(names)) => {
            set_reference_commands(server, shape, tag, lease_ms, names)
        }
        Workload::Kind(kind) => shared_reference_commands(server, kind, shape, tag, lease_ms),
    }
}

/// Fills `keys` keys of the run `tag` with a lock held by the reference's owner,
/// as a first acquisition of `workload` leaves it.
pub(crate) fn prefill_held(
    server: &RedisServer,
    workload: Workload,
    shape: &KeyShape,
    tag: &str,
    keys: u64,
) -> Result<(), BoxError> {
    match workload {
        Workload::Plain(Protocol::Distlock) | Workload::Kind(Kind::Plain) => {
            prefill_distlock_locks(server, shape, &format!("r{tag}"), keys)
        }
        Workload::Plain(Protocol::Minimal) => prefill_minimal_locks(server, shape, tag, keys),
        Workload::Kind(Kind::All(names)) => (0..names)
            .try_for_each(|i| prefill_distlock_locks(server, shape, &format!("r{tag}:{i}"), keys)),
        Workload::Kind(kind) => prefill_shared_locks(server, kind, shape, tag, keys),
    }
}

/// Releases between two [`command_stats`] snapshots that really released a held
/// lock (the others found none, which is cheaper).
pub(crate) fn releases_that_freed(
    workload: Workload,
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> u64 {
    match workload {
        // rslock's script deletes a key it finds held by the owner.
        Workload::Plain(Protocol::Minimal) => calls_between(before, after, "del"),
        // Each final release of a held lock publishes once (a read hold too: the
        // prefilled locks have one reader).
        _ => calls_between(before, after, "publish"),
    }
}

// ---- distlock's protocol --------------------------------------------------------

/// distlock's scripts, byte for byte as the client sends them (first line,
/// `lock.lua`, for the release `shared.lua`, the script): `SCRIPT LOAD` gives the SHA the client uses.
pub(crate) const ACQUIRE_LUA: &str = concat!(
    "#!lua\n",
    include_str!("../../lua/lock.lua"),
    include_str!("../../lua/acquire.lua")
);
pub(crate) const RELEASE_LUA: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("../../lua/lock.lua"),
    include_str!("../../lua/shared.lua"),
    include_str!("../../lua/release.lua")
);

/// How long the release script keeps the record of a final release in these runs
/// (`ARGV[2]` of `release.lua`; the client uses four response timeouts).
const REMEMBER_MS: u64 = 2_000;

/// The owner id of the reference's locks (a client's uuid and counter).
const DISTLOCK_OWNER: &str = "0123456789abcdef0123456789abcdef:1";

/// Commands that distlock's scripts run inside Redis: `INFO commandstats` counts those
/// too, but they cost no round trip. The client also sends `SET` itself (a first
/// acquisition): where that matters, [`log_every_command`] tells them apart.
pub(crate) const DISTLOCK_SCRIPT_COMMANDS: &[&str] = &[
    "get", "set", "pexpire", "pttl", "incr", "del", "publish", "spublish",
];

/// distlock's acquire attempts between two [`command_stats`] snapshots, of which
/// `acquisitions` succeeded: from the slow log when it logs every command (plain
/// `SET`s and acquire.lua runs), else every EVALSHA less one release per
/// acquisition (which misses the plain `SET`s).
pub(crate) fn distlock_acquire_attempts(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    acquisitions: u64,
) -> u64 {
    if after.contains_key(CLIENT_ACQUIRES) {
        return calls_between(before, after, CLIENT_ACQUIRES);
    }
    calls_between(before, after, "evalsha").saturating_sub(acquisitions)
}

/// The channel a waiter for `name` subscribes to (`name` needs no escaping).
pub(crate) fn distlock_release_channel(name: &str) -> String {
    format!("distlock:{{{name}}}:released")
}

/// A first acquisition of the lock `name` by `owner`, as the client sends it (a
/// plain `SET NX GET PX` of the value acquire.lua would write, lua/lock.lua), for
/// plain redis-rs; the reply is not looked at.
pub(crate) fn distlock_acquire_cmd(name: &str, owner: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(format!("distlock:{{{name}}}"))
        .arg(format!("{owner} 1 0 0 1"))
        .arg("NX")
        .arg("GET")
        .arg("PX")
        .arg(30_000);
    cmd
}

/// A run of acquire.lua for the lock `name` by `owner` (`sha`: acquire.lua's), as a
/// waiter sends it; the reply is not looked at.
pub(crate) fn distlock_acquire_script_cmd(sha: &str, name: &str, owner: &str) -> redis::Cmd {
    let key = format!("distlock:{{{name}}}");
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(3)
        .arg(&key)
        .arg(format!("{key}:fence"))
        .arg(format!("{key}:freed"))
        .arg(owner)
        .arg(30_000)
        .arg(0)
        .arg(1)
        .arg(0)
        .arg(0);
    cmd
}

/// The release of what [`distlock_acquire_cmd`] took (`sha`: release.lua's).
pub(crate) fn distlock_release_cmd(sha: &str, name: &str, owner: &str) -> redis::Cmd {
    let key = format!("distlock:{{{name}}}");
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(3)
        .arg(&key)
        .arg(format!("{key}:released"))
        .arg(format!("{key}:freed"))
        .arg("PUBLISH")
        .arg(REMEMBER_MS)
        .arg(owner)
        .arg(30_000)
        .arg(2)
        .arg(1)
        // No successor (see release.lua).
        .arg("");
    cmd
}

/// distlock's reference: a first acquisition as the client sends it (a plain `SET NX
/// GET PX`) on fresh keys (a keyspace far larger than the request count), EVALSHA
/// release.lua (one release per run, as one task sends it) on the keys
/// [`prefill_distlock_locks`] filled, as operation 2 of the owner (acquire.lua's
/// "Exactly once": the prefilled locks record operation 1 as applied, with a floor
/// of 0).
fn distlock_reference_commands(
    server: &RedisServer,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
) -> Result<ReferenceCommands, BoxError> {
    let release_sha = server.cmd(&["SCRIPT", "LOAD", RELEASE_LUA])?;
    let rand = "__rand_int__";
    let lease = lease_ms.to_string();
    let value = format!("{DISTLOCK_OWNER} 1 0 0 1");
    let acquire = [
        "SET",
        &shape.key(&format!("a{tag}"), rand),
        &value,
        "NX",
        "GET",
        "PX",
        &lease,
    ];
    let release = [
        "EVALSHA",
        &release_sha,
        "3",
        &shape.key(&format!("r{tag}"), rand),
        &shape.key(&format!("r{tag}c"), rand),
        &shape.key(&format!("r{tag}x"), rand),
        "PUBLISH",
        &REMEMBER_MS.to_string(),
        DISTLOCK_OWNER,
        &lease,
        "2",
        "0",
        // No successor (see release.lua).
        "",
    ];
    Ok(ReferenceCommands {
        acquire: acquire.iter().map(|s| s.to_string()).collect(),
        release: release.iter().map(|s| s.to_string()).collect(),
    })
}

/// Fills the release keys `prefix` (`r<tag>` for the run `tag`) with a lock held
/// once by the reference's owner, exactly as acquire.lua leaves a first acquisition.
fn prefill_distlock_locks(
    server: &RedisServer,
    shape: &KeyShape,
    prefix: &str,
    keys: u64,
) -> Result<(), BoxError> {
    let body = "redis.call('SET', key, ARGV[4] .. ' 1 0 0 1', 'PX', 600000)";
    let template = shape.key(prefix, "%012d");
    fill_in_chunks(server, body, &template, keys, &[DISTLOCK_OWNER])
}

// ---- distlock's lock kinds ---------------------------------------------------------

/// The lock kinds' acquire scripts, byte for byte as the client sends them for a new
/// hold (lock-core/src/scripts.rs, `sources()`): `#!lua`, `lock.lua`, for
/// acquire_shared.lua `shared.lua`, then the script. Their release is [`RELEASE_LUA`].
pub(crate) const ACQUIRE_SHARED_LUA: &str = concat!(
    "#!lua\n",
    include_str!("../../lua/lock.lua"),
    include_str!("../../lua/shared.lua"),
    include_str!("../../lua/acquire_shared.lua")
);
pub(crate) const ACQUIRE_ALL_LUA: &str = concat!(
    "#!lua\n",
    include_str!("../../lua/lock.lua"),
    include_str!("../../lua/acquire_all.lua")
);

/// Commands that the scripts of the kinds kept in a hash (lua/shared.lua) run inside
/// Redis, beside [`DISTLOCK_SCRIPT_COMMANDS`].
pub(crate) const KIND_SCRIPT_COMMANDS: &[&str] = &[
    "get",
    "set",
    "pexpire",
    "pttl",
    "incr",
    "del",
    "publish",
    "spublish",
    "time",
    "hgetall",
    "hset",
    "hdel",
    "hincrby",
    "pubsub|numsub",
    "pubsub|shardnumsub",
];

/// `kind` as acquire_shared.lua takes it (`ARGV[7]`): `"r"`, `"w"`, `"p<permits>"`, `"f"`.
fn shared_script_arg(kind: Kind) -> String {
    match kind {
        Kind::Read => "r".into(),
        Kind::Write => "w".into(),
        Kind::Permit(permits) => format!("p{permits}"),
        Kind::Fair => "f".into(),
        Kind::Plain | Kind::All(_) => String::new(),
    }
}

/// How a hold of `kind` sits in the lock's hash (lua/shared.lua): the `#kind` field's
/// value, and the holder's mode letter.
fn shared_layout(kind: Kind) -> (String, &'static str) {
    match kind {
        Kind::Read => ("rw".into(), "r"),
        Kind::Write => ("rw".into(), "w"),
        Kind::Permit(permits) => (format!("sem {permits}"), "p"),
        Kind::Fair => ("fair".into(), "f"),
        Kind::Plain | Kind::All(_) => (String::new(), ""),
    }
}

/// The reference of a kind kept in a hash: acquire_shared.lua on fresh keys as the
/// client sends a first acquisition that may wait (operation 1, floor 0, no
/// fencing, no writer in the chain, "1": it would keep its place), and release.lua
/// on the keys [`prefill_shared_locks`] filled, as operation 2 of the owner.
fn shared_reference_commands(
    server: &RedisServer,
    kind: Kind,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
) -> Result<ReferenceCommands, BoxError> {
    let acquire_sha = server.cmd(&["SCRIPT", "LOAD", ACQUIRE_SHARED_LUA])?;
    let mut commands = distlock_reference_commands(server, shape, tag, lease_ms)?;
    let rand = "__rand_int__";
    let lease = lease_ms.to_string();
    let arg = shared_script_arg(kind);
    let acquire = [
        "EVALSHA",
        &acquire_sha,
        "3",
        &shape.key(&format!("a{tag}"), rand),
        &shape.key(&format!("a{tag}f"), rand),
        &shape.key(&format!("a{tag}x"), rand),
        DISTLOCK_OWNER,
        &lease,
        "0",
        "1",
        "0",
        "0",
        &arg,
        // No writer in the call chain; the caller would wait (see acquire_shared.lua).
        "",
        "1",
    ];
    commands.acquire = acquire.iter().map(|s| s.to_string()).collect();
    Ok(commands)
}

/// Fills the release keys of the run `tag` with a hash lock of `kind` held once by the
/// reference's owner (a single reader, writer, permit or fair holder), exactly as
/// acquire_shared.lua leaves a first acquisition, with a lease of 600 s on the
/// server's clock.
fn prefill_shared_locks(
    server: &RedisServer,
    kind: Kind,
    shape: &KeyShape,
    tag: &str,
    keys: u64,
) -> Result<(), BoxError> {
    let body = "local t = redis.call('TIME') \
                local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
                redis.call('HSET', key, '#kind', ARGV[5], ARGV[4], \
                  string.format('%s 1 %d 0 0 1', ARGV[6], now + 600000)) \
                redis.call('PEXPIRE', key, 600000)";
    let template = shape.key(&format!("r{tag}"), "%012d");
    let (kind_field, mode) = shared_layout(kind);
    fill_in_chunks(
        server,
        body,
        &template,
        keys,
        &[DISTLOCK_OWNER, &kind_field, mode],
    )
}

/// The reference of `lock_all` of `names` names on one server: acquire_all.lua on
/// `names` fresh keys, one owner for the set (its operations 1 to `names`, floor 0,
/// no fencing), and one run of release.lua that gives all of them back, each name
/// on held keys of its own ([`prefill_held`]), as operation 2 of the owner.
fn set_reference_commands(
    server: &RedisServer,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
    names: usize,
) -> Result<ReferenceCommands, BoxError> {
    let acquire_sha = server.cmd(&["SCRIPT", "LOAD", ACQUIRE_ALL_LUA])?;
    let release_sha = server.cmd(&["SCRIPT", "LOAD", RELEASE_LUA])?;
    let rand = "__rand_int__";
    let lease = lease_ms.to_string();
    let keys = (3 * names).to_string();
    let mut acquire = vec!["EVALSHA".to_owned(), acquire_sha, keys.clone()];
    let mut release = vec!["EVALSHA".to_owned(), release_sha, keys];
    for i in 0..names {
        for suffix in ["", "f", "x"] {
            acquire.push(shape.key(&format!("a{tag}:{i}{suffix}"), rand));
            release.push(shape.key(&format!("r{tag}:{i}{suffix}"), rand));
        }
    }
    // No fencing.
    acquire.push("0".into());
    release.extend(["PUBLISH".to_owned(), REMEMBER_MS.to_string()]);
    for i in 0..names {
        let seq = (i + 1).to_string();
        acquire.extend([DISTLOCK_OWNER, &lease, &seq, "0", "0"].map(str::to_owned));
        // No successor (see release.lua).
        release.extend([DISTLOCK_OWNER, &lease, "2", "0", ""].map(str::to_owned));
    }
    Ok(ReferenceCommands { acquire, release })
}

/// The number of fields of the hash of the lock `name` (0 for no key, or a string).
pub(crate) fn hash_fields(server: &RedisServer, name: &str) -> Result<u64, BoxError> {
    let key = format!("distlock:{{{name}}}");
    if server.cmd(&["TYPE", &key])? != "hash" {
        return Ok(0);
    }
    Ok(server.cmd(&["HLEN", &key])?.trim().parse()?)
}

/// Whether some waiter keeps a place in the hash of the lock `name` (a writer's
/// mark, a fair lock's ticket: a field `~<owner>`, lua/shared.lua).
pub(crate) fn distlock_place_kept(server: &RedisServer, name: &str) -> Result<bool, BoxError> {
    let fields = server.cmd(&["HKEYS", &format!("distlock:{{{name}}}")])?;
    Ok(fields.lines().any(|field| field.starts_with('~')))
}

// ---- rslock's protocol (the minimal one) ------------------------------------------

/// rslock's release: delete the key if it still holds the owner's value.
const MINIMAL_RELEASE_LUA: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// The value of the reference's locks: rslock's owner is 20 random bytes.
const MINIMAL_OWNER: &str = "0123456789abcdefghij";

/// Commands that rslock's scripts run inside Redis (its release and its extend).
#[cfg_attr(not(feature = "rslock"), allow(dead_code))]
pub(crate) const MINIMAL_SCRIPT_COMMANDS: &[&str] = &["get", "del"];

/// rslock's reference: `SET key val NX PX lease` on fresh keys, and EVALSHA of the
/// compare-and-delete script on the keys [`prefill_minimal_locks`] filled.
fn minimal_reference_commands(
    server: &RedisServer,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
) -> Result<ReferenceCommands, BoxError> {
    let release_sha = server.cmd(&["SCRIPT", "LOAD", MINIMAL_RELEASE_LUA])?;
    let acquire = [
        "SET",
        &shape.key(&format!("s{tag}"), "__rand_int__"),
        MINIMAL_OWNER,
        "NX",
        "PX",
        &lease_ms.to_string(),
    ];
    let release = [
        "EVALSHA",
        &release_sha,
        "1",
        &shape.key(&format!("d{tag}"), "__rand_int__"),
        MINIMAL_OWNER,
    ];
    Ok(ReferenceCommands {
        acquire: acquire.iter().map(|s| s.to_string()).collect(),
        release: release.iter().map(|s| s.to_string()).collect(),
    })
}

/// Fills the release keys of the run `tag` with the reference's owner, as rslock's
/// `SET NX PX` leaves them.
fn prefill_minimal_locks(
    server: &RedisServer,
    shape: &KeyShape,
    tag: &str,
    keys: u64,
) -> Result<(), BoxError> {
    let body = "redis.call('SET', key, ARGV[4], 'PX', 600000)";
    let template = shape.key(&format!("d{tag}"), "%012d");
    fill_in_chunks(server, body, &template, keys, &[MINIMAL_OWNER])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{self, Flavor};

    /// The bench's copies of the scripts have the SHAs of the client's: on a fresh
    /// server, a client connecting loads its scripts, and nothing else loads any.
    #[test]
    fn scripts_are_the_clients() -> Result<(), BoxError> {
        let server = RedisServer::start()?;
        runtime::block_on(Flavor::CurrentThread, async {
            let client = distlock::LockClient::builder()
                .url(server.url())
                .connect()
                .await?;
            drop(client);
            Ok(())
        })?;
        for (name, text) in [
            ("acquire", ACQUIRE_LUA),
            ("release", RELEASE_LUA),
            ("acquire_shared", ACQUIRE_SHARED_LUA),
            ("acquire_all", ACQUIRE_ALL_LUA),
        ] {
            let sha = redis::Script::new(text).get_hash().to_owned();
            let exists = server.cmd(&["SCRIPT", "EXISTS", &sha])?;
            assert_eq!(exists.trim(), "1", "{name}: the client has no script {sha}");
        }
        Ok(())
    }

    /// Each kind's reference takes a fresh lock and releases a prefilled one, as the
    /// scripts answer a first acquisition and a final release.
    #[test]
    fn kind_references_take_and_release() -> Result<(), BoxError> {
        let server = RedisServer::start()?;
        let shape = KeyShape::Single;
        let number = |command: &[String], n: &str| -> Vec<String> {
            command
                .iter()
                .map(|a| a.replace("__rand_int__", n))
                .collect()
        };
        let run = |command: &[String]| -> Result<String, BoxError> {
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            Ok(server.cmd(&args)?)
        };
        let kinds = [
            Kind::Plain,
            Kind::Read,
            Kind::Write,
            Kind::Permit(4),
            Kind::Fair,
            Kind::All(3),
        ];
        for (i, kind) in kinds.into_iter().enumerate() {
            let workload = Workload::Kind(kind);
            let tag = format!("t{i}");
            let commands = reference_commands(&server, workload, &shape, &tag, 30_000)?;
            let taken = run(&number(&commands.acquire, "000000000007"))?;
            let expected = match kind {
                Kind::Plain => "(nil)".to_owned(),
                Kind::All(names) => format!("1{}", "\n1\n0".repeat(names)),
                _ => "1\n1\n0".to_owned(),
            };
            assert_eq!(taken, expected, "{kind}: acquire");
            prefill_held(&server, workload, &shape, &tag, 10)?;
            let released = run(&number(&commands.release, "000000000003"))?;
            let releases = usize::try_from(workload.releases_per_request())?;
            assert_eq!(
                released,
                vec!["1\n0"; releases].join("\n"),
                "{kind}: release"
            );
            // A release of a lock that is not held answers so.
            let missed = run(&number(&commands.release, "000000000099"))?;
            assert_eq!(missed, vec!["-1"; releases].join("\n"), "{kind}: miss");
        }
        Ok(())
    }

    #[test]
    fn reads_calls_and_usec() {
        let info = "# Commandstats\r\ncmdstat_set:calls=1000,usec=246,usec_per_call=0.25\r\n\
                    cmdstat_eval:calls=1,usec=1365,usec_per_call=1365.00\r\n";
        assert_eq!(parse_command_stats(info, "calls=")["set"], 1000);
        assert_eq!(parse_command_stats(info, "usec=")["eval"], 1365);
    }
}
