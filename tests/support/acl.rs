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
    // Sent by the client: every connection is named after the service.
    "+client|setname",
    // Sent by the client (a first acquisition without fencing) and called by the
    // scripts.
    "+set",
    // Called by the scripts.
    "+get",
    "+incr",
    "+pexpire",
    "+pttl",
    "+del",
    "+publish",
    // Called by the release script before it hands a lock to a waiter of the
    // releasing client (no other client may listen for the release).
    "+pubsub|numsub",
    // Read-write locks, semaphores and fair locks (hashes, leases on the server's
    // clock): called by the scripts.
    "+hgetall",
    "+hset",
    "+hdel",
    "+time",
    // Sent by the deadlock walk, which reads the type of each lock it passes.
    "+type",
];
