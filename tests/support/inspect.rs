//! What Redis stores and counts: lock keys and their hold counts, release-channel
//! subscribers, command calls and round trips, client connections, leftovers.

use distlock_testkit::RedisServer;

/// The Redis key of lock `name` in the default namespace.
pub fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// The hold count of lock `name` as Redis stores it (0 when free).
pub fn redis_count(server: &RedisServer, name: &str) -> u64 {
    let value = server.cmd(&["GET", &lock_key(name)]).expect("GET");
    lock_value_count(&value)
}

/// The hold count in a lock's value as `GET` renders it (`(nil)` or a tombstone
/// `"- ..."`: free, 0); the value is `"<owner> <count> <fence> <floor> <done...>"`
/// (lua/lock.lua).
pub fn lock_value_count(value: &str) -> u64 {
    if value == "(nil)" || value.starts_with("- ") {
        return 0;
    }
    value
        .split(' ')
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("not a lock value: {value:?}"))
}

/// The owner id holding lock `name` (`None` when free).
pub fn redis_holder(server: &RedisServer, name: &str) -> Option<String> {
    let value = server.cmd(&["GET", &lock_key(name)]).expect("GET");
    (lock_value_count(&value) > 0).then(|| value.split(' ').next().unwrap_or_default().to_owned())
}

/// Whether the lock at Redis key `key` is held: a value that is not a tombstone
/// (a final release leaves `"- <owner> <floor> <done...>"` for a short while).
pub fn held(server: &RedisServer, key: &str) -> bool {
    let value = server.cmd(&["GET", key]).expect("GET");
    value != "(nil)" && !value.starts_with("- ")
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]).expect("EXISTS") == "1"
}

/// How many connections subscribe to the release channel of lock `name`.
pub fn channel_subscribers(server: &RedisServer, name: &str) -> u64 {
    let channel = format!("{}:released", lock_key(name));
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
/// final releases (tombstones and `:freed`), and every channel.
pub fn leaks(server: &RedisServer) -> (Vec<String>, Vec<String>) {
    let keys = server.cmd(&["KEYS", "*"]).expect("KEYS");
    let keys = keys
        .lines()
        .filter(|key| {
            !key.is_empty()
                && !key.starts_with("rel:")
                && !key.ends_with(":fence")
                // The record of the last final release, for its retry; it expires.
                && !key.ends_with(":freed")
                && !is_tombstone(server, key)
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

/// Whether `key` holds the tombstone of a final release (lua/lock.lua).
fn is_tombstone(server: &RedisServer, key: &str) -> bool {
    server
        .cmd(&["GET", key])
        .is_ok_and(|value| value.starts_with("- "))
}
