//! The ACL a lock user needs.

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
    "+set",
    "+incr",
    "+hset",
    "+hgetall",
    "+pexpire",
    "+pttl",
    "+del",
    "+publish",
];
