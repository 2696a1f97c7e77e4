//! The connection to Redis, whichever shape the deployment has.
//!
//! One enum, not a trait zoo: every script call goes through [`Conn`], which routes
//! single-slot requests to the right server on its own (a cluster follows `MOVED`
//! and `ASK`, and loads scripts on every node).

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// A command connection to the deployment.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server (or the current master behind Sentinel).
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl Conn {
    /// The command the release scripts publish with: sharded pub/sub on a cluster,
    /// so that the message stays on the shard of the lock.
    pub(crate) fn publish_command(&self) -> &'static str {
        match self {
            Self::Single(_) => "PUBLISH",
            Self::Cluster(_) => "SPUBLISH",
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

/// The Redis Cluster hash slot of a key: CRC16 of its hash tag (or of the whole
/// key when it has none), modulo 16384.
pub(crate) fn slot(key: &[u8]) -> u16 {
    let tagged = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(tagged) % 16384
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_follow_the_hash_tag() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"ns:{order:42}:fence"), slot(b"order:42"));
    }
}
