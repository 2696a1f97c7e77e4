//! What Redis stores and counts: lock keys and their hold counts, release-channel
//! subscribers, command calls and round trips, client connections, leftovers.

use distlock_testkit::RedisServer;

/// The Redis key of lock `name` in the default namespace.
pub fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
}

/// The hold count of lock `name` as Redis stores it (0 when free).
pub fn redis_count(server: &RedisServer, name: &str) -> u64 {
    let fields = server.cmd(&["HGETALL", &lock_key(name)]).expect("HGETALL");
    let fields: Vec<&str> = fields.lines().collect();
    fields
        .chunks(2)
        .filter(|pair| pair.len() == 2 && !pair[0].starts_with('#'))
        .map(|pair| pair[1].parse::<u64>().expect("a count"))
        .sum()
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

/// Commands that distlock's scripts run inside Redis: `INFO commandstats` counts
/// those too, but they cost no round trip.
const SCRIPT_INNER: [&str; 13] = [
    "type", "hget", "hset", "hincrby", "pexpire", "pttl", "incr", "get", "del", "publish",
    "hexists", "hgetall", "set",
];

/// The requests clients sent to the server (round trips, when not pipelined):
/// every command counted by `INFO commandstats`, less `INFO` itself and the commands
/// that scripts run inside Redis.
pub fn client_requests(server: &RedisServer) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]).expect("INFO");
    info.lines()
        .filter(|line| line.starts_with("cmdstat_") && !line.starts_with("cmdstat_info:"))
        .filter(|line| {
            let name = line["cmdstat_".len()..]
                .split(':')
                .next()
                .unwrap_or_default();
            !SCRIPT_INNER.contains(&name)
        })
        .filter_map(|line| line.split("calls=").nth(1))
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum()
}

/// The value of `key` in a `key=value` line, such as one of `CLIENT LIST`.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

/// The connections of unnamed clients on `node` (`CLIENT LIST`): not the Sentinels'
/// (named `sentinel-*`), not the replication links, not the one asking.
pub fn client_connections(node: &RedisServer) -> Vec<String> {
    node.cmd(&["CLIENT", "LIST"])
        .map(|list| {
            list.lines()
                .filter(|line| field(line, "name") == Some("") && field(line, "flags") == Some("N"))
                .filter(|line| field(line, "cmd") != Some("client|list"))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Keys and channels left behind: every key except the workload's (`rel:*`) and the
/// fencing counters (which live forever by design), and every channel.
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
