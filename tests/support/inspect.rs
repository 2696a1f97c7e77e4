//! What Redis stores and counts: lock keys and their hold counts, release-channel
//! subscribers, command calls and round trips, client connections, leftovers.

use std::collections::HashMap;

use distlock::layout::{self, StoredLock};
use distlock_testkit::{RedisCluster, RedisServer};

/// The Redis key of lock `name` in the default namespace.
pub fn lock_key(name: &str) -> String {
    text(layout::lock_key("distlock", name.as_bytes()))
}

/// The fencing counter of lock `name` in the default namespace.
pub fn fence_key(name: &str) -> String {
    text(layout::fence_key(lock_key(name).as_bytes()))
}

/// The release channel of lock `name` in the default namespace.
pub fn channel_key(name: &str) -> String {
    text(layout::channel("distlock", name.as_bytes()))
}

/// A key or channel of distlock's (UTF-8 for the names the tests use) as text.
fn text(key: Vec<u8>) -> String {
    String::from_utf8_lossy(&key).into_owned()
}

/// The hash slot of lock `name` (default namespace), as `cluster` computes it.
pub fn slot_of(cluster: &RedisCluster, name: &str) -> u16 {
    cluster.nodes()[0]
        .cmd(&["CLUSTER", "KEYSLOT", &lock_key(name)])
        .expect("CLUSTER KEYSLOT")
        .parse()
        .expect("a slot")
}

/// The slot of lock `name`, its master and that master's replica (node indexes).
pub fn placement(cluster: &RedisCluster, name: &str) -> (u16, usize, usize) {
    let slot = slot_of(cluster, name);
    let master = cluster.node_for_slot(slot).expect("master");
    let master_id = cluster.nodes()[master]
        .cmd(&["CLUSTER", "MYID"])
        .expect("MYID");
    let replica = (0..cluster.nodes().len())
        .find(|&n| {
            n != master
                && cluster.nodes()[n]
                    .cmd(&["CLUSTER", "NODES"])
                    .map(|nodes| {
                        nodes.lines().any(|line| {
                            line.contains("myself") && line.contains(master_id.as_str())
                        })
                    })
                    .unwrap_or(false)
        })
        .expect("a replica of the master");
    (slot, master, replica)
}

/// The lock `name` (default namespace) as Redis stores it, read with `HGETALL`
/// through `distlock::layout` (free: no holders).
pub fn stored(server: &RedisServer, name: &str) -> StoredLock {
    stored_at(server, &lock_key(name))
}

/// The lock at Redis key `key` as Redis stores it (see [`stored`]).
pub fn stored_at(server: &RedisServer, key: &str) -> StoredLock {
    let text = server.cmd(&["HGETALL", key]).expect("HGETALL");
    let lines: Vec<&str> = text.lines().collect();
    let pairs = lines
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (pair[0], pair[1]));
    StoredLock::from_fields(pairs).unwrap_or_else(|err| panic!("{key}: {err}: {text:?}"))
}

/// The lock at Redis key `key` as Redis stores it (see [`stored`]), read over an
/// async connection of the caller's.
pub async fn stored_over(conn: &mut impl redis::aio::ConnectionLike, key: &str) -> StoredLock {
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("HGETALL");
    StoredLock::from_fields(fields).unwrap_or_else(|err| panic!("{key}: {err}"))
}

/// The lock `name` (see [`stored`]) once every holder is named (`#who:`): a hold
/// the watchdog renews is named by its first renewal, 1 s after its grant
/// (lua/lock.lua). Panics when one is not within 3 s.
pub async fn named(server: &RedisServer, name: &str) -> StoredLock {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(3);
    loop {
        let lock = stored(server, name);
        let holders = lock.holders();
        if !holders.is_empty() && holders.keys().all(|owner| lock.who(owner).is_some()) {
            return lock;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "`{name}`: a holder not named within 3 s: {lock:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The hold count of lock `name` as Redis stores it: the sum of its holders' counts
/// (0 when free).
pub fn redis_count(server: &RedisServer, name: &str) -> u64 {
    stored(server, name).total()
}

/// The owner id holding lock `name` (`None` when free; the first of several).
pub fn redis_holder(server: &RedisServer, name: &str) -> Option<String> {
    stored(server, name).holders().keys().next().cloned()
}

/// Whether the lock at Redis key `key` is held: some owner has a hold count there.
pub fn held(server: &RedisServer, key: &str) -> bool {
    !stored_at(server, key).holders().is_empty()
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]).expect("EXISTS") == "1"
}

/// How many connections subscribe to the release channel of lock `name`.
pub fn channel_subscribers(server: &RedisServer, name: &str) -> u64 {
    let channel = channel_key(name);
    server
        .cmd(&["PUBSUB", "NUMSUB", &channel])
        .expect("NUMSUB")
        .lines()
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

/// How many times `command` ran on the server (from `INFO commandstats`).
pub fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]).expect("INFO");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|rest| {
            rest.split(',')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a call count")
        })
        .unwrap_or(0)
}

/// How many script calls `server` ran: `FCALL` of distlock's function library (how
/// a client runs its scripts) and `EVALSHA` (where a server refuses functions).
pub fn script_calls(server: &RedisServer) -> u64 {
    command_calls(server, "fcall") + command_calls(server, "evalsha")
}

/// The commands the tests send to look at a server: never counted as requests.
const LOOKS: [&str; 4] = ["slowlog", "config", "info", "client"];

/// The requests clients sent to the server (round trips, when not pipelined) since
/// the first call on `server`, less the tests' own looks (`INFO`, `CONFIG`, ...).
/// `INFO commandstats` cannot tell a client's `SET` from one that a script runs, so
/// the server's slow log does, with every command logged: its entries from a script
/// have no client address (`?:0`). The first call turns that logging on (the count
/// starts there), so call it before the part that is counted.
pub fn client_requests(server: &RedisServer) -> u64 {
    server
        .cmd(&[
            "CONFIG",
            "SET",
            "slowlog-log-slower-than",
            "0",
            "slowlog-max-len",
            "1000000",
        ])
        .expect("CONFIG SET slowlog");
    let client = redis::Client::open(format!("redis://{}", server.addr())).expect("a URL");
    let mut conn = client.get_connection().expect("a connection");
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut conn)
        .expect("SLOWLOG GET");
    entries
        .iter()
        .filter(|entry| {
            let redis::Value::Array(fields) = entry else {
                return false;
            };
            let text = |value: &redis::Value| match value {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).to_lowercase(),
                redis::Value::SimpleString(text) => text.to_lowercase(),
                _ => String::new(),
            };
            let command = match fields.get(3) {
                Some(redis::Value::Array(args)) => args.first().map(text).unwrap_or_default(),
                _ => String::new(),
            };
            let from_script = fields.get(4).map(text).as_deref() == Some("?:0");
            !from_script && !LOOKS.contains(&command.as_str())
        })
        .count() as u64
}

/// `DUMP` of every key on the server, by name (binary-safe): equal dumps, nothing
/// written.
pub async fn dumps(conn: &mut redis::aio::MultiplexedConnection) -> HashMap<Vec<u8>, Vec<u8>> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(conn)
        .await
        .expect("KEYS");
    let mut dumps = HashMap::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(conn)
            .await
            .expect("DUMP");
        dumps.insert(key, dump);
    }
    dumps
}

/// The value of `key` in a `key=value` line, such as one of `CLIENT LIST`.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

/// The connections of lock clients (named `distlock:<service>`) and other unnamed
/// clients on `node` (`CLIENT LIST`): not the Sentinels' (named `sentinel-*`), not
/// the replication links, not the one asking.
pub fn client_connections(node: &RedisServer) -> Vec<String> {
    node.cmd(&["CLIENT", "LIST"])
        .map(|list| {
            list.lines()
                .filter(|line| {
                    field(line, "name")
                        .is_some_and(|name| name.is_empty() || name.starts_with("distlock:"))
                        && field(line, "flags") == Some("N")
                })
                .filter(|line| field(line, "cmd") != Some("client|list"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Keys and channels left behind: every key except the workload's (`rel:*`), the
/// fencing counters (which live forever by design) and the short-lived records of
/// final releases (`:freed:<owner>`), and every channel.
pub fn leaks(server: &RedisServer) -> (Vec<String>, Vec<String>) {
    let keys = server.cmd(&["KEYS", "*"]).expect("KEYS");
    let keys = keys
        .lines()
        .filter(|key| {
            !key.is_empty()
                && !key.starts_with("rel:")
                // Fencing counters, and the records of final releases for their
                // retries (which expire).
                && !layout::is_side_key(key.as_bytes())
        })
        .map(str::to_owned)
        .collect();
    let channels = server.cmd(&["PUBSUB", "CHANNELS"]).expect("PUBSUB");
    let channels = channels
        .lines()
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    (keys, channels)
}

/// The key where the record of `owner`'s final release of lock `name` (default
/// namespace) is kept for a short while: `distlock:{name}:freed:<owner>`.
pub fn freed_key(name: &str, owner: &str) -> String {
    text(layout::freed_key(lock_key(name).as_bytes(), owner))
}

/// A run of `script` (one of `lua/`, sent as a test sends it) with the keys and
/// arguments of `call`, as `distlock::layout` writes them for the client.
pub fn invoke<'a>(
    script: &'a redis::Script,
    call: &layout::args::Call,
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    invocation.key(&call.keys).arg(&call.args);
    invocation
}

/// The fields of a plain lock held `count` times by `owner`, with replay record
/// `record` (`"<floor> <done...>"`) and no fencing token, as `acquire.lua` writes
/// one; tests spoil one value or add a field to write what distlock did not.
pub fn plain_lock_fields(owner: &str, count: &str, record: &str) -> Vec<(String, String)> {
    vec![
        (
            layout::KIND.to_owned(),
            layout::Kind::Exclusive.word().to_owned(),
        ),
        (layout::LAYOUT.to_owned(), layout::LAYOUT_VERSION.to_owned()),
        (owner.to_owned(), count.to_owned()),
        (format!("{}{owner}", layout::OP), record.to_owned()),
    ]
}

/// Replaces whatever is at `key` with a hash of `fields` (in order), expiring in
/// `px_ms` milliseconds (`None`: no expiry, as a foreign writer would leave it).
pub fn write_hash<F, V>(
    server: &RedisServer,
    key: &str,
    fields: impl IntoIterator<Item = (F, V)>,
    px_ms: Option<u64>,
) where
    F: AsRef<str>,
    V: AsRef<str>,
{
    let fields: Vec<(F, V)> = fields.into_iter().collect();
    let mut args = vec!["HSET", key];
    for (field, value) in &fields {
        args.push(field.as_ref());
        args.push(value.as_ref());
    }
    server.cmd(&["DEL", key]).expect("DEL");
    server.cmd(&args).expect("HSET");
    if let Some(ms) = px_ms {
        server
            .cmd(&["PEXPIRE", key, &ms.to_string()])
            .expect("PEXPIRE");
    }
}
