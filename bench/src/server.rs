//! What the harness asks the server (command counts, CPU), and every place where the
//! harness depends on distlock's lock layout or on its scripts' commands.
//!
//! The second half of this file is the one to adapt when the layout or the scripts
//! change: the script sources, the keys and channel of a lock (named by
//! `distlock::layout`), the commands the scripts run inside Redis, the requests a
//! first acquisition and a release send, and `redis-benchmark`'s command lines for
//! the reference. The prefill of held locks runs each reference's own acquire, so it
//! follows the scripts by itself. Beside distlock's, the same for rslock's commands
//! (the minimal protocol, "R") and for the bare hash scripts (the least a reentrant
//! lock kept in a hash runs), so that every reference is measured the same way.

use std::collections::HashMap;
use std::time::Duration;

use distlock::layout;
use distlock::layout::args::{Acquire, AcquireAll, Args, Call, Release, ReleaseRun, SetName};
use distlock_testkit::RedisServer;

use crate::error::BoxError;
use crate::kind::Kind;

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
/// attempts that clients sent: the acquisitions that runs of acquire.lua carry, and
/// runs of acquire_all.lua.
pub(crate) const CLIENT_ACQUIRES: &str = "(client acquires)";

/// The commands the harness sends to look at the server: never a client's request.
const LOOKS: [&str; 4] = ["slowlog", "config", "info", "client"];

/// Has the server log every command in its slow log (emptied first), so that a
/// client's requests can be told from the commands its scripts run (`INFO
/// commandstats` counts both), and a run of acquire.lua from one of release.lua
/// (both are `EVALSHA`). Only for the scenarios that count requests: logging costs
/// the server a little per command.
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
    let [acquire_sha, acquire_all_sha] = acquire_shas();
    let (mut requests, mut acquires) = (0, 0);
    for entry in log {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let args: Vec<String> = match fields.get(3) {
            Some(redis::Value::Array(args)) => args.iter().take(3).map(text).collect(),
            _ => continue,
        };
        let command = args.first().map(|c| c.to_lowercase()).unwrap_or_default();
        if fields.get(4).map(text).as_deref() == Some("?:0") || LOOKS.contains(&command.as_str()) {
            continue;
        }
        requests += 1;
        if command != "fcall" {
            continue;
        }
        let sha = args.get(1).map(String::as_str);
        if sha == Some(acquire_sha.as_str()) {
            // Three keys per acquisition: one run may carry several.
            let keys: u64 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(3);
            acquires += (keys / 3).max(1);
        } else if sha == Some(acquire_all_sha.as_str()) {
            acquires += 1;
        }
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

/// Which commands a reference runs: distlock's scripts; rslock's commands ("R", the
/// minimal protocol of a lock: `SET NX PX` and a compare-and-delete script); or the
/// bare hash scripts (the least a reentrant lock kept in a hash runs: the owner's
/// hold count in a hash field, see [`BARE_ACQUIRE_LUA`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Distlock,
    Minimal,
    BareHash,
}

impl Protocol {
    /// Every protocol, in the order of a run where distlock goes first.
    pub(crate) const ALL: [Protocol; 3] =
        [Protocol::Distlock, Protocol::Minimal, Protocol::BareHash];

    /// What the report calls the protocol's commands.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Protocol::Distlock => "distlock's scripts",
            Protocol::Minimal => "rslock's commands (R)",
            Protocol::BareHash => "the bare hash scripts",
        }
    }

    /// The protocol's acquire and release, in a few words.
    pub(crate) fn commands(self) -> &'static str {
        match self {
            Protocol::Distlock => "acquire.lua + release.lua",
            Protocol::Minimal => "`SET NX PX` + compare-and-delete EVALSHA",
            Protocol::BareHash => "`HINCRBY` hash scripts",
        }
    }
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
    /// for redis-benchmark).
    pub(crate) fn key(&self, what: &str, number: &str) -> String {
        match self {
            KeyShape::Single => lock_key(&format!("ref{what}:{number}")),
            // Not a key the client writes (the name is outside the hash tag): one
            // slot for every key of the run, on purpose.
            KeyShape::Slot(tag) => format!("{}:ref{what}:{number}", lock_key(tag)),
        }
    }
}

/// What redis-benchmark replaces with a random number of 12 digits (`-r`); each
/// place gets a number of its own.
pub(crate) const RAND: &str = "__rand_int__";

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

/// The lease of the prefilled locks, ms: none expires during a run.
const PREFILL_LEASE_MS: u64 = 600_000;

/// Loads `workload`'s scripts on `server` and gives its reference command lines for
/// the run `tag` (`lease_ms`: the acquire's lease): the acquire on the fresh keys
/// `a<tag>`, the release on the keys `r<tag>` that [`prefill_held`] fills.
pub(crate) fn reference_commands(
    server: &RedisServer,
    workload: Workload,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
) -> Result<ReferenceCommands, BoxError> {
    Ok(ReferenceCommands {
        acquire: acquire_line(server, workload, shape, &format!("a{tag}"), lease_ms)?,
        release: release_line(server, workload, shape, &format!("r{tag}"), lease_ms)?,
    })
}

/// Fills `keys` keys of the run `tag` (numbers 0 to `keys` - 1) with a lock held by
/// the reference's owner, by running the reference's own acquire on each (with a
/// lease of [`PREFILL_LEASE_MS`]): what the release finds is what a first
/// acquisition of `workload` leaves, by construction. Pipelined, 1 000 requests at
/// a time, so that a cluster node is never blocked for long.
pub(crate) fn prefill_held(
    server: &RedisServer,
    workload: Workload,
    shape: &KeyShape,
    tag: &str,
    keys: u64,
) -> Result<(), BoxError> {
    let line = acquire_line(
        server,
        workload,
        shape,
        &format!("r{tag}"),
        PREFILL_LEASE_MS,
    )?;
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    const BATCH: u64 = 1_000;
    let mut from = 0;
    while from < keys {
        let to = (from + BATCH).min(keys);
        let mut pipe = redis::pipe();
        for i in from..to {
            let number = format!("{i:012}");
            let numbered: Vec<String> = line.iter().map(|a| a.replace(RAND, &number)).collect();
            pipe.add_command(to_cmd(&numbered));
        }
        let replies: Vec<redis::Value> = pipe.query(&mut conn)?;
        if let Some(reply) = replies.iter().find(|reply| !taken(reply)) {
            return Err(format!("prefill: {} answered {reply:?}", line.join(" ")).into());
        }
        from = to;
    }
    Ok(())
}

/// Whether an acquire's reply says it took the lock: `OK` (a `SET NX`), a script's
/// table that starts with 1, or a table of such tables (a script that answers each
/// of the acquisitions it was sent).
fn taken(reply: &redis::Value) -> bool {
    match reply {
        redis::Value::Okay => true,
        redis::Value::SimpleString(text) => text == "OK",
        redis::Value::Array(values) => match values.first() {
            Some(redis::Value::Int(1)) => true,
            Some(redis::Value::Array(_)) => values.iter().all(taken),
            _ => false,
        },
        _ => false,
    }
}

/// A command line as a redis-rs command.
fn to_cmd(line: &[String]) -> redis::Cmd {
    let mut cmd = redis::cmd(line.first().map_or("", String::as_str));
    for arg in line.iter().skip(1) {
        cmd.arg(arg);
    }
    cmd
}

/// The acquire of `workload` on the keys `prefix` (loads its script).
fn acquire_line(
    server: &RedisServer,
    workload: Workload,
    shape: &KeyShape,
    prefix: &str,
    lease_ms: u64,
) -> Result<Vec<String>, BoxError> {
    let lock = shape.key(prefix, RAND);
    Ok(match workload {
        Workload::Plain(Protocol::Minimal) => minimal_acquire_line(&lock, lease_ms),
        Workload::Plain(Protocol::BareHash) => {
            let sha = server.cmd(&["SCRIPT", "LOAD", BARE_ACQUIRE_LUA])?;
            bare_acquire_line(&sha, &lock, lease_ms)
        }
        Workload::Plain(Protocol::Distlock) => {
            let sha = load_function(server, "acquire")?;
            distlock_acquire_line(&sha, Kind::Plain, &Op::first(&lock, lease_ms))
        }
        Workload::Kind(Kind::All(names)) => {
            let sha = load_function(server, "acquire_all")?;
            let locks = set_locks(shape, prefix, names);
            set_acquire_line(&sha, &set_ops(&locks, lease_ms, 0))
        }
        Workload::Kind(kind) => {
            let sha = load_function(server, "acquire")?;
            distlock_acquire_line(&sha, kind, &Op::first(&lock, lease_ms))
        }
    })
}

/// The release of `workload` on the keys `prefix` (loads its script).
fn release_line(
    server: &RedisServer,
    workload: Workload,
    shape: &KeyShape,
    prefix: &str,
    lease_ms: u64,
) -> Result<Vec<String>, BoxError> {
    let lock = shape.key(prefix, RAND);
    Ok(match workload {
        Workload::Plain(Protocol::Minimal) => {
            let sha = server.cmd(&["SCRIPT", "LOAD", MINIMAL_RELEASE_LUA])?;
            minimal_release_line(&sha, &lock)
        }
        Workload::Plain(Protocol::BareHash) => {
            let sha = server.cmd(&["SCRIPT", "LOAD", BARE_RELEASE_LUA])?;
            bare_release_line(&sha, &lock, lease_ms)
        }
        Workload::Kind(Kind::All(names)) => {
            let sha = load_function(server, "release")?;
            let locks = set_locks(shape, prefix, names);
            // The set's acquisition was its owner's operations 1 to `names`.
            release_script_line(&sha, &set_ops(&locks, lease_ms, names as u64))
        }
        Workload::Plain(Protocol::Distlock) | Workload::Kind(_) => {
            let sha = load_function(server, "release")?;
            release_script_line(&sha, &[Op::second(&lock, lease_ms)])
        }
    })
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
        // prefilled locks have one reader), distlock's and the bare hash's.
        _ => calls_between(before, after, "publish"),
    }
}

// ---- distlock's protocol --------------------------------------------------------

/// The name of the function of distlock's `script` (`acquire`, `release`,
/// `acquire_all`, ...) in its function library, as the client calls it (`FCALL`):
/// every kind of lock is taken by acquire and given back by release; `lock_all`
/// takes its names with acquire_all. The library is distlock's own
/// (`distlock::layout::function_library`), byte for byte, so a client connecting
/// to a server where the bench loaded it finds it there (a test checks it).
pub(crate) fn function(script: &str) -> String {
    distlock::layout::function_library().function(script)
}

/// Loads distlock's function library on `server` (as a client does at connect)
/// and names the function of `script` (see [`function`]).
pub(crate) fn load_function(server: &RedisServer, script: &str) -> Result<String, BoxError> {
    let library = distlock::layout::function_library();
    server.cmd(&["FUNCTION", "LOAD", "REPLACE", &library.text])?;
    Ok(library.function(script))
}

/// Loads distlock's function library over `conn`, and names the function of
/// `script`.
///
/// # Cancel safety
///
/// Safe to drop: the library is loaded whole or not at all.
pub(crate) async fn load_function_async(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &str,
) -> Result<String, BoxError> {
    let library = distlock::layout::function_library();
    let _: redis::Value = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&library.text)
        .query_async(conn)
        .await?;
    Ok(library.function(script))
}

/// Runs of distlock's scripts between two [`command_stats`] snapshots: `FCALL` (the
/// function library, how a client runs them) and `EVALSHA` (where a server
/// refuses functions).
pub(crate) fn script_runs_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> u64 {
    calls_between(before, after, "fcall") + calls_between(before, after, "evalsha")
}

/// How long the release script keeps the record of a final release in these runs
/// (`ARGV[2]` of `release.lua`; the client uses four response timeouts).
pub(crate) const REMEMBER_MS: u64 = 2_000;

/// The owner id of the reference's locks (a client's uuid and counter).
pub(crate) const DISTLOCK_OWNER: &str = "0123456789abcdef0123456789abcdef:1";

/// What a client says of a holder (`"<pid> <service> <host> <site>"`): 50 bytes,
/// the most the client writes unless its service and host names alone are longer
/// (lock-core/src/who.rs). A client sends it with a first acquisition of a fixed
/// lease (`ARGV[10]` of acquire.lua), else with the hold's first renewal: the
/// references, whose leases stand for the watchdog's, send none, as the client
/// does; the per-step table sends it for a library of before that change.
pub(crate) const DISTLOCK_WHO: &str = "48121 distlock-bench bench-host src/contender.rs:5";

/// Commands that distlock's scripts run inside Redis (lua/lock.lua and the scripts):
/// `INFO commandstats` counts those too, but they cost no round trip. Where the
/// client's own requests must be told from them exactly, [`log_every_command`] does.
pub(crate) const DISTLOCK_SCRIPT_COMMANDS: &[&str] = &[
    "exists",
    "get",
    "set",
    "del",
    "incr",
    "time",
    "pexpire",
    "pttl",
    "hmget",
    "hgetall",
    "hset",
    "hdel",
    "hincrby",
    "publish",
    "spublish",
    "pubsub|numsub",
    "pubsub|shardnumsub",
];

/// distlock's acquire attempts between two [`command_stats`] snapshots, of which
/// `acquisitions` succeeded: from the slow log when it logs every command (the
/// acquisitions that runs of acquire.lua carry, and runs of acquire_all.lua), else
/// every EVALSHA less one release per acquisition (a rough figure: it counts a run
/// that carries several acquisitions or releases as one).
pub(crate) fn distlock_acquire_attempts(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    acquisitions: u64,
) -> u64 {
    if after.contains_key(CLIENT_ACQUIRES) {
        return calls_between(before, after, CLIENT_ACQUIRES);
    }
    script_runs_between(before, after).saturating_sub(acquisitions)
}

/// The SHAs of acquire.lua (three keys per acquisition, one run may carry several)
/// and of acquire_all.lua (one set per run): what [`count_logged_requests`] counts
/// as acquire attempts.
fn acquire_shas() -> [String; 2] {
    [function("acquire"), function("acquire_all")]
}

/// The key of the hash of the lock `name` in the default namespace
/// (`layout::lock_key`).
fn lock_key(name: &str) -> String {
    String::from_utf8_lossy(&layout::lock_key("distlock", name.as_bytes())).into_owned()
}

/// The channel a waiter for `name` subscribes to.
pub(crate) fn distlock_release_channel(name: &str) -> String {
    String::from_utf8_lossy(&layout::channel("distlock", name.as_bytes())).into_owned()
}

/// One operation of the reference's owner on the lock at `lock`, as acquire.lua and
/// release.lua take it (see acquire.lua, "Exactly once").
pub(crate) struct Op<'a> {
    pub(crate) lock: &'a str,
    pub(crate) lease_ms: u64,
    pub(crate) seq: u64,
    pub(crate) floor: u64,
}

impl<'a> Op<'a> {
    /// The first acquisition: operation 1, nothing settled before it.
    fn first(lock: &'a str, lease_ms: u64) -> Self {
        Op {
            lock,
            lease_ms,
            seq: 1,
            floor: 0,
        }
    }

    /// The release of the first acquisition: operation 2, the acquisition settled.
    fn second(lock: &'a str, lease_ms: u64) -> Self {
        Op {
            lock,
            lease_ms,
            seq: 2,
            floor: 1,
        }
    }
}

/// The names of a set of `names` names on the keys `prefix`: `<prefix>:0`, ...
fn set_locks(shape: &KeyShape, prefix: &str, names: usize) -> Vec<String> {
    (0..names)
        .map(|i| shape.key(&format!("{prefix}:{i}"), RAND))
        .collect()
}

/// One operation per name of a set, numbered from `settled` + 1 on, as one owner
/// sends them: every operation up to `settled` is settled.
fn set_ops(locks: &[String], lease_ms: u64, settled: u64) -> Vec<Op<'_>> {
    locks
        .iter()
        .zip(settled + 1..)
        .map(|(lock, seq)| Op {
            lock,
            lease_ms,
            seq,
            floor: settled,
        })
        .collect()
}

/// `call` as text after the function's name (`sha`): the number of keys, the
/// keys, the arguments, as `distlock::layout` writes them for the client.
pub(crate) fn call_line(call: &Call) -> Vec<String> {
    call.to_args()
        .iter()
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// `FCALL <sha>` and `call`.
fn fcall_line(sha: &str, call: &Call) -> Vec<String> {
    let mut line = vec!["FCALL".to_owned(), sha.to_owned()];
    line.extend(call_line(call));
    line
}

/// A new acquisition of `kind` by the reference's owner, as the client sends it: no
/// fencing, not a re-entry, no writer in the call chain, the caller would wait (a
/// writer or a fair waiter would keep its place), and the holder not named (its
/// first renewal would name it).
pub(crate) fn acquire_args<'a>(kind: Kind, op: &Op<'a>) -> Acquire<'a> {
    Acquire {
        kind: kind.layout_kind(),
        stays: true,
        ..Acquire::new(
            op.lock.as_bytes(),
            DISTLOCK_OWNER,
            op.lease_ms,
            op.seq,
            op.floor,
        )
    }
}

/// The release of `op` by the reference's owner, with no successor (no waiter of
/// the releasing client to hand the lock to), as the client sends it on one server
/// for a live hold: without asking for a final-release record.
pub(crate) fn release_args<'a>(op: &Op<'a>) -> Release<'a> {
    Release {
        lock: op.lock.as_bytes(),
        owner: DISTLOCK_OWNER,
        lease_ms: op.lease_ms,
        seq: op.seq,
        floor: op.floor,
        successor: None,
        record: RECORD_AT_RELEASE,
    }
}

/// Whether the client asks a final release for its record (`lua/release.lua`,
/// "Records"): not on one server for a live hold with no successor, the common path.
pub(crate) const RECORD_AT_RELEASE: bool = false;

/// The header of a run of release.lua on one server.
pub(crate) const RELEASE_RUN: ReleaseRun<'static> = ReleaseRun {
    publish: "PUBLISH",
    remember_ms: REMEMBER_MS,
};

/// A new acquisition of `kind` by acquire.lua (`sha`), as the client sends it
/// ([`acquire_args`]).
fn distlock_acquire_line(sha: &str, kind: Kind, op: &Op<'_>) -> Vec<String> {
    fcall_line(sha, &acquire_args(kind, op).to_call())
}

/// A set's acquisition by acquire_all.lua (`sha`): one owner for every name (its
/// operations `ops`), no fencing, the holder not named (as [`acquire_args`]).
fn set_acquire_line(sha: &str, ops: &[Op<'_>]) -> Vec<String> {
    let names = ops.iter().map(|op| SetName {
        lock: op.lock.as_bytes(),
        owner: DISTLOCK_OWNER,
        lease_ms: op.lease_ms,
        seq: op.seq,
        floor: op.floor,
        reentry: false,
    });
    let set = AcquireAll {
        fencing: false,
        names: names.collect(),
        who: "",
    };
    fcall_line(sha, &set.to_call())
}

/// One run of release.lua (`sha`) that gives back `ops`, in order, with no
/// successor ([`release_args`]).
fn release_script_line(sha: &str, ops: &[Op<'_>]) -> Vec<String> {
    let mut call = RELEASE_RUN.to_call();
    for op in ops {
        release_args(op).push_to(&mut call);
    }
    fcall_line(sha, &call)
}

/// A first acquisition of the lock `name` (`sha`: acquire.lua's) as the client
/// sends it, for plain redis-rs; the reply is not looked at.
pub(crate) fn distlock_acquire_cmd(sha: &str, name: &str) -> redis::Cmd {
    let lock = lock_key(name);
    to_cmd(&distlock_acquire_line(
        sha,
        Kind::Plain,
        &Op::first(&lock, 30_000),
    ))
}

/// The release of what [`distlock_acquire_cmd`] took (`sha`: release.lua's).
pub(crate) fn distlock_release_cmd(sha: &str, name: &str) -> redis::Cmd {
    let lock = lock_key(name);
    to_cmd(&release_script_line(sha, &[Op::second(&lock, 30_000)]))
}

/// The number of fields of the hash of the lock `name` (0 when there is no key).
pub(crate) fn hash_fields(server: &RedisServer, name: &str) -> Result<u64, BoxError> {
    Ok(server.cmd(&["HLEN", &lock_key(name)])?.trim().parse()?)
}

/// Whether some waiter keeps a place in the hash of the lock `name` (a writer of a
/// read-write lock, a fair lock's waiter: a field `#wait:<owner>`, lua/lock.lua).
pub(crate) fn distlock_place_kept(server: &RedisServer, name: &str) -> Result<bool, BoxError> {
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    let fields: Vec<(String, String)> =
        redis::cmd("HGETALL").arg(lock_key(name)).query(&mut conn)?;
    let lock = layout::StoredLock::from_fields(fields)?;
    let kept = lock.waiters().next().is_some();
    Ok(kept)
}

// ---- the bare hash (the least a reentrant lock in a hash runs) --------------------

/// The bare hash's acquire (written for this benchmark): take the lock at `KEYS[1]`
/// for the owner `ARGV[1]` when it is free or the owner's (its hold count a field of
/// the hash, the key's expiry the lease `ARGV[2]` ms), else answer the lease left.
/// No kind, no fencing, no replay record, no holder info: what every hash-kept
/// reentrant lock runs at least. Under the first line of distlock's acquire.lua.
const BARE_ACQUIRE_LUA: &str = "#!lua
local lock, owner = KEYS[1], ARGV[1]
if redis.call('EXISTS', lock) == 0 or redis.call('HEXISTS', lock, owner) == 1 then
  local count = redis.call('HINCRBY', lock, owner, 1)
  redis.call('PEXPIRE', lock, ARGV[2])
  return {1, count}
end
return {0, redis.call('PTTL', lock)}
";

/// The bare hash's release: give back one hold of the owner `ARGV[1]` at `KEYS[1]`;
/// the last one deletes the key and tells waiters on the channel `KEYS[2]`, else the
/// lease is kept at `ARGV[2]` ms. Under the first line of distlock's release.lua.
const BARE_RELEASE_LUA: &str = "#!lua flags=allow-oom
local lock, owner = KEYS[1], ARGV[1]
if redis.call('HEXISTS', lock, owner) == 0 then
  return {-1}
end
local count = redis.call('HINCRBY', lock, owner, -1)
if count > 0 then
  redis.call('PEXPIRE', lock, ARGV[2])
  return {1, count}
end
redis.call('DEL', lock)
redis.call('PUBLISH', KEYS[2], owner)
return {1, 0}
";

/// The bare hash's acquire (`sha`) of the lock at `lock`, by the reference's owner.
fn bare_acquire_line(sha: &str, lock: &str, lease_ms: u64) -> Vec<String> {
    ["EVALSHA", sha, "1", lock, DISTLOCK_OWNER]
        .map(str::to_owned)
        .into_iter()
        .chain([lease_ms.to_string()])
        .collect()
}

/// The bare hash's release (`sha`) of the lock at `lock`.
fn bare_release_line(sha: &str, lock: &str, lease_ms: u64) -> Vec<String> {
    let channel = String::from_utf8_lossy(&layout::channel_key(lock.as_bytes())).into_owned();
    ["EVALSHA", sha, "2", lock, &channel, DISTLOCK_OWNER]
        .map(str::to_owned)
        .into_iter()
        .chain([lease_ms.to_string()])
        .collect()
}

// ---- rslock's protocol (the minimal one) ------------------------------------------

/// rslock's release: delete the key if it still holds the owner's value.
const MINIMAL_RELEASE_LUA: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;

/// The value of the reference's locks: rslock's owner is 20 random bytes.
const MINIMAL_OWNER: &str = "0123456789abcdefghij";

/// Commands that rslock's scripts run inside Redis (its release and its extend).
#[cfg_attr(not(feature = "rslock"), allow(dead_code))]
pub(crate) const MINIMAL_SCRIPT_COMMANDS: &[&str] = &["get", "del"];

/// rslock's acquire: `SET key val NX PX lease`.
fn minimal_acquire_line(lock: &str, lease_ms: u64) -> Vec<String> {
    ["SET", lock, MINIMAL_OWNER, "NX", "PX"]
        .map(str::to_owned)
        .into_iter()
        .chain([lease_ms.to_string()])
        .collect()
}

/// rslock's release: EVALSHA of the compare-and-delete script (`sha`).
fn minimal_release_line(sha: &str, lock: &str) -> Vec<String> {
    ["EVALSHA", sha, "1", lock, MINIMAL_OWNER]
        .map(str::to_owned)
        .to_vec()
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
        let library = distlock::layout::function_library();
        let listed = server.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", &library.name])?;
        for name in ["acquire", "release", "acquire_all"] {
            let function = library.function(name);
            assert!(
                listed.contains(&function),
                "the client has no function {function}"
            );
        }
        Ok(())
    }

    /// `command` with every random number `n`.
    fn numbered(command: &[String], n: &str) -> Vec<String> {
        command.iter().map(|a| a.replace(RAND, n)).collect()
    }

    /// Each reference takes a fresh lock and releases a prefilled one, as its
    /// scripts answer a first acquisition and a final release.
    #[test]
    fn references_take_and_release() -> Result<(), BoxError> {
        let server = RedisServer::start()?;
        let shape = KeyShape::Single;
        let run = |command: &[String]| -> Result<String, BoxError> {
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            Ok(server.cmd(&args)?)
        };
        let workloads = [
            Workload::Plain(Protocol::Distlock),
            Workload::Plain(Protocol::Minimal),
            Workload::Plain(Protocol::BareHash),
            Workload::Kind(Kind::Read),
            Workload::Kind(Kind::Write),
            Workload::Kind(Kind::Permit(4)),
            Workload::Kind(Kind::Fair),
            Workload::Kind(Kind::All(3)),
        ];
        for (i, workload) in workloads.into_iter().enumerate() {
            let tag = format!("t{i}");
            let commands = reference_commands(&server, workload, &shape, &tag, 30_000)?;
            let (acquired, released, missed) = match workload {
                Workload::Plain(Protocol::Minimal) => ("OK".to_owned(), "1".to_owned(), "0"),
                Workload::Plain(Protocol::BareHash) => ("1\n1".to_owned(), "1\n0".to_owned(), "-1"),
                Workload::Kind(Kind::All(names)) => (
                    format!("1{}", "\n1\n0".repeat(names)),
                    vec!["1\n0"; names].join("\n"),
                    "-1\n-1\n-1",
                ),
                _ => ("1\n1\n0".to_owned(), "1\n0".to_owned(), "-1"),
            };
            let taken = run(&numbered(&commands.acquire, "000000000007"))?;
            assert_eq!(taken, acquired, "{workload:?}: acquire");
            prefill_held(&server, workload, &shape, &tag, 10)?;
            let freed = run(&numbered(&commands.release, "000000000003"))?;
            assert_eq!(freed, released, "{workload:?}: release");
            // A release of a lock that is not held answers so.
            let missed_now = run(&numbered(&commands.release, "000000000099"))?;
            assert_eq!(missed_now, missed, "{workload:?}: miss");
        }
        Ok(())
    }

    /// The fields of the lock at `key`, each owner id in a field name replaced by
    /// `<owner>`, and the lock read back.
    fn fields_of(
        conn: &mut redis::Connection,
        key: &str,
        owner: &str,
    ) -> Result<(Vec<String>, layout::StoredLock), BoxError> {
        let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(key).query(conn)?;
        let mut names: Vec<String> = fields
            .iter()
            .map(|(field, _)| field.replace(owner, "<owner>"))
            .collect();
        names.sort();
        Ok((names, layout::StoredLock::from_fields(fields)?))
    }

    /// The prefilled locks are what a client's first acquisition writes: the same
    /// fields, a hold count of 1, the replay record of operation 1, a lease.
    #[test]
    fn prefilled_locks_are_a_clients_first_acquisition() -> Result<(), BoxError> {
        let server = RedisServer::start()?;
        let mut conn = redis::Client::open(server.url())?.get_connection()?;
        let workload = Workload::Plain(Protocol::Distlock);
        prefill_held(&server, workload, &KeyShape::Single, "p", 1)?;
        let key = KeyShape::Single.key("rp", "000000000000");
        let (prefilled, lock) = fields_of(&mut conn, &key, DISTLOCK_OWNER)?;
        assert_eq!(lock.kind(), Some(layout::Kind::Exclusive.word()));
        assert_eq!(lock.count(DISTLOCK_OWNER), 1);
        assert_eq!(lock.record(DISTLOCK_OWNER), Some("0 1"));
        assert_eq!(
            lock.who(DISTLOCK_OWNER),
            None,
            "named by a first renewal only"
        );
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn)?;
        assert!(pttl > 0, "a lease: {pttl}");

        let (client_fields, client_lock) = runtime::block_on(Flavor::CurrentThread, async {
            let client = distlock::LockClient::builder()
                .url(server.url())
                .connect()
                .await?;
            let guard = client.lock("probe").await?;
            let key = lock_key("probe");
            let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut conn)?;
            let lock = layout::StoredLock::from_fields(fields)?;
            let owner = lock.holders().keys().next().cloned().ok_or("no holder")?;
            let read = fields_of(&mut conn, &key, &owner)?;
            guard.unlock().await?;
            Ok::<_, BoxError>(read)
        })?;
        assert_eq!(
            prefilled, client_fields,
            "the fields of a first acquisition"
        );
        assert_eq!(client_lock.total(), 1);
        Ok(())
    }

    /// The slow log's entries of clients' requests are counted, acquire.lua's runs
    /// by the acquisitions they carry; a script's own commands are not requests.
    #[test]
    fn counts_requests_and_acquisitions_from_the_slow_log() {
        let bulk = |text: &str| redis::Value::BulkString(text.as_bytes().to_vec());
        let entry = |args: &[&str], client: &str| {
            redis::Value::Array(vec![
                redis::Value::Int(1),
                redis::Value::Int(0),
                redis::Value::Int(0),
                redis::Value::Array(args.iter().map(|a| bulk(a)).collect()),
                bulk(client),
                bulk(""),
            ])
        };
        let [acquire, acquire_all] = acquire_shas();
        let release = function("release");
        let log = [
            entry(&["FCALL", &acquire, "3", "k"], "127.0.0.1:1"),
            entry(&["FCALL", &acquire, "6", "k"], "127.0.0.1:1"),
            entry(&["FCALL", &acquire_all, "9", "k"], "127.0.0.1:1"),
            entry(&["FCALL", &release, "3", "k"], "127.0.0.1:1"),
            entry(&["hset", "k", "f", "1"], "?:0"),
            entry(&["INFO", "commandstats"], "127.0.0.1:2"),
        ];
        let mut stats = HashMap::new();
        count_logged_requests(&log, &mut stats);
        assert_eq!(stats[CLIENT_REQUESTS], 4);
        assert_eq!(stats[CLIENT_ACQUIRES], 4);
    }

    #[test]
    fn reads_calls_and_usec() {
        let info = "# Commandstats\r\ncmdstat_set:calls=1000,usec=246,usec_per_call=0.25\r\n\
                    cmdstat_eval:calls=1,usec=1365,usec_per_call=1365.00\r\n";
        assert_eq!(parse_command_stats(info, "calls=")["set"], 1000);
        assert_eq!(parse_command_stats(info, "usec=")["eval"], 1365);
    }
}
