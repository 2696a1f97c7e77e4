//! The ACL a lock user needs, and a user made with an ACL.

use distlock_testkit::RedisServer;

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
    // The scripts: as distlock's function library (`function|load` at connect
    // and when a server lost it, then `fcall`), and by `evalsha` where loading the
    // library fails (a server out of memory refuses `FUNCTION LOAD`).
    "+function|load",
    "+fcall",
    "+script|load",
    "+evalsha",
    "+config|get",
    "+subscribe",
    "+unsubscribe",
    // Sent by the client: every connection is named after the service, and says
    // which server it reached (`info`), so that a restarted or replaced one is
    // noticed as soon as a connection comes back.
    "+client|setname",
    "+info",
    // Called by the scripts (`set` writes the record of a final release,
    // `:freed:<owner>`); the deadlock walk also gets, sets and deletes its
    // wait-for records.
    "+set",
    "+get",
    "+pexpire",
    "+pttl",
    "+del",
    "+publish",
    // Called by the scripts: every kind of lock is one hash (lua/lock.lua), whose
    // holder a script reads alone (`hlen` first for a new acquisition, `hmget`,
    // `exists`) and whose count it raises and lowers (`hincrby`).
    "+hlen",
    "+hmget",
    "+hincrby",
    "+exists",
    // Called by the release script before it hands a lock to a waiter of the
    // releasing client (no other client may listen for the release).
    "+pubsub|numsub",
    // Every kind of lock (hashes; read-write locks, semaphores and fair locks with
    // leases on the server's clock): called by the scripts; the deadlock walk reads
    // each lock it passes with `hgetall`.
    "+hgetall",
    "+hset",
    "+hdel",
    "+time",
];

/// Creates the ACL user `user`, password `pw`, with `rules`; returns a URL that logs
/// in as it.
pub fn set_user(server: &RedisServer, user: &str, rules: &[&str]) -> String {
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
    args.extend_from_slice(rules);
    server.cmd(&args).expect("ACL SETUSER");
    format!("redis://{user}:pw@127.0.0.1:{}/", server.port())
}
