//! A throwaway server and clients on it, and what Redis stores and counts.

use std::time::Duration;

use distlock::{LockClient, LockClientBuilder};
use distlock_testkit::RedisServer;

/// Starts a throwaway `redis-server` for one test.
pub fn server() -> RedisServer {
    RedisServer::start()
        .expect("start redis-server (see the testkit's error for how to install it)")
}

/// A builder pointed at `server`.
pub fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder().url(server.url())
}

/// A connected client with default settings.
pub async fn client(server: &RedisServer) -> LockClient {
    builder(server).connect().await.expect("connect")
}

/// A connected client that gives every lock a fencing token.
pub async fn fenced_client(server: &RedisServer) -> LockClient {
    builder(server)
        .fencing(true)
        .connect()
        .await
        .expect("connect")
}

/// A connected client whose watchdog lease is `lease`.
pub async fn client_with_lease(server: &RedisServer, lease: Duration) -> LockClient {
    builder(server)
        .default_lease(lease)
        .connect()
        .await
        .expect("connect")
}

/// The Redis key of lock `name` in the default namespace.
pub fn lock_key(name: &str) -> String {
    format!("distlock:{{{name}}}")
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
const SCRIPT_INNER: [&str; 12] = [
    "type", "hget", "hset", "hincrby", "pexpire", "pttl", "incr", "get", "del", "publish",
    "hexists", "hgetall",
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

/// Waits until `check` holds, up to `limit`; returns whether it did.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

/// The minimal ACL of a lock user (README.md's "ACL" section, RELIABILITY.md): the
/// commands the client sends, the commands the scripts call, its keys and channels.
pub const LOCK_USER_ACL: &[&str] = &[
    "resetkeys",
    "~distlock:*",
    "resetchannels",
    "&distlock:*",
    "-@all",
    // Sent by the client.
    "+hello",
    "+ping",
    "+script|load",
    "+evalsha",
    "+config|get",
    "+subscribe",
    "+unsubscribe",
    // Called by the scripts.
    "+type",
    "+get",
    "+incr",
    "+hget",
    "+hset",
    "+hincrby",
    "+hexists",
    "+hgetall",
    "+pexpire",
    "+pttl",
    "+del",
    "+publish",
];
