//! The connection to Redis, whichever shape the deployment has.
//!
//! One enum, not a trait zoo: every script call goes through [`Conn`], which routes
//! single-slot requests to the right server on its own (a cluster follows `MOVED`
//! and `ASK`, and loads scripts on every node); waiters listen through [`SubConn`].
//! Redlock's rules for combining the answers of its nodes are in [`redlock`].

pub(crate) mod dial;
pub(crate) mod link;
pub(crate) mod redlock;
pub(crate) mod sentinel;
pub(crate) mod tls;
pub(crate) mod url;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use self::link::Link;
use self::sentinel::{Current, SentinelConn};
use crate::error::master_may_have_moved;

/// The deployment: one endpoint (a server, a Sentinel-managed master, a cluster), or
/// the independent masters of Redlock, where an operation counts when a majority
/// of them agree.
#[derive(Clone)]
pub(crate) struct Backend {
    nodes: Arc<[Conn]>,
    /// Redlock's per-node timeout; `None` with one endpoint.
    node_timeout: Option<Duration>,
}

impl Backend {
    pub(crate) fn one(conn: Conn) -> Self {
        Self {
            nodes: Arc::from([conn]),
            node_timeout: None,
        }
    }

    pub(crate) fn redlock(nodes: Vec<Conn>, node_timeout: Duration) -> Self {
        Self {
            nodes: nodes.into(),
            node_timeout: Some(node_timeout),
        }
    }

    /// Whether operations go to several independent masters.
    pub(crate) fn is_redlock(&self) -> bool {
        self.node_timeout.is_some()
    }

    /// Whether every operation goes to one server, over a connection that sends
    /// each request once: not Redlock, nor a cluster (whose connection may send a
    /// request again on its own, after a lost connection or a moved slot).
    pub(crate) fn sends_once(&self) -> bool {
        !self.is_redlock() && !self.is_cluster()
    }

    /// Whether this is a Redis Cluster: one connection over every master, which
    /// follows a moved slot or a failover on its own.
    pub(crate) fn is_cluster(&self) -> bool {
        self.nodes[0].is_cluster()
    }

    /// How many nodes must agree: a majority (1 with a single endpoint).
    pub(crate) fn quorum(&self) -> usize {
        majority(self.nodes.len())
    }

    /// The first (with one endpoint: the only) node.
    pub(crate) fn first(&self) -> Conn {
        self.nodes[0].clone()
    }

    pub(crate) fn nodes(&self) -> &[Conn] {
        &self.nodes
    }

    /// The command the release scripts publish with.
    /// Sharded pub/sub on a cluster, so that the message stays on the shard of the
    /// lock.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.nodes[0].is_cluster() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// Runs `op` on every node, concurrently, each bounded by the per-node timeout;
    /// the results come back in node order. With one node, `op` simply runs here.
    pub(crate) async fn each<T, F, Fut>(&self, op: F) -> Vec<RedisResult<T>>
    where
        F: Fn(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.each_at(|_, conn| op(conn)).await
    }

    /// [`each`](Self::each), `op` given each node's index with its connection.
    ///
    /// # Cancel safety
    ///
    /// As [`each`](Self::each): dropping it drops every node's `op`.
    pub(crate) async fn each_at<T, F, Fut>(&self, op: F) -> Vec<RedisResult<T>>
    where
        F: Fn(usize, Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>> + Send + 'static,
        T: Send + 'static,
    {
        let Some(limit) = self.node_timeout else {
            return vec![op(0, self.first()).await];
        };
        let mut tasks = tokio::task::JoinSet::new();
        for (index, conn) in self.nodes.iter().enumerate() {
            let call = op(index, conn.clone());
            tasks.spawn(async move {
                let result = tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
                    Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "a Redlock node did not answer within the node timeout",
                    )))
                });
                (index, result)
            });
        }
        // A node whose task ended without an answer (it panicked) keeps this.
        let failed = || Err((ErrorKind::Client, "a Redlock node task failed").into());
        let mut results: Vec<RedisResult<T>> = self.nodes.iter().map(|_| failed()).collect();
        while let Some(joined) = tasks.join_next().await {
            if let Ok((index, result)) = joined {
                results[index] = result;
            }
        }
        results
    }
}

/// A command connection to the deployment.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Single(Link<ConnectionManager>),
    /// A Redis Cluster.
    Cluster(Link<ClusterConnection>),
    /// The master that the Sentinels name, found again after a failover.
    Sentinel(Arc<SentinelConn>),
}

impl Conn {
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// The server's `host:port` (the current master's behind Sentinel; the seed
    /// nodes of a cluster), for messages.
    pub(crate) fn addr(&self) -> String {
        match self {
            Self::Single(link) => link.addr().to_owned(),
            Self::Cluster(link) => link.addr().to_owned(),
            Self::Sentinel(sentinel) => sentinel.current().commands.addr().to_owned(),
        }
    }

    /// Tells the connection about an error found inside a reply (a pipeline's
    /// items): on Sentinel, one that a failover explains makes it find the master again.
    pub(crate) async fn notice_error(&self, err: &redis::RedisError) {
        if let Self::Sentinel(sentinel) = self {
            if master_may_have_moved(err) {
                sentinel.reresolve(sentinel.current().generation).await;
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
            Self::Sentinel(sentinel) => {
                Box::pin(sentinel.on_master(move |mut on: Current| async move {
                    on.commands.req_packed_command(cmd).await
                }))
            }
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
            Self::Sentinel(sentinel) => {
                Box::pin(sentinel.on_master(move |mut on: Current| async move {
                    on.commands
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }))
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
            Self::Sentinel(sentinel) => sentinel.current().commands.get_db(),
        }
    }
}

/// A majority of `nodes` nodes: how many must agree on Redlock.
fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// The subscriber's connection: plain pub/sub on one server, sharded pub/sub on a
/// cluster (the channel lives on the shard of its lock).
pub(crate) enum SubConn {
    /// One server, or Redlock's masters: every node publishes its own release
    /// message.
    Servers(Vec<Link<ConnectionManager>>),
    Cluster(Link<ClusterConnection>),
    /// Sentinel: the subscriber of the current master, and the generation of the
    /// master it last subscribed on.
    Sentinel(Arc<SentinelConn>, u64),
}

/// What the subscriber asks of its connection.
#[derive(Clone, Copy)]
pub(crate) enum SubCall<'c> {
    Subscribe(&'c [u8]),
    Unsubscribe(&'c [u8]),
    Ping,
}

impl SubConn {
    /// Whether the Sentinel backend moved to a new master since the last call: the
    /// channels must then be subscribed again there.
    pub(crate) fn swapped(&mut self) -> bool {
        match self {
            Self::Sentinel(sentinel, seen) => {
                let generation = sentinel.current().generation;
                std::mem::replace(seen, generation) != generation
            }
            _ => false,
        }
    }

    /// How many nodes announce one release before it wakes a waiter: a quorum of
    /// the Redlock nodes (each publishes its own message), else one.
    pub(crate) fn announcers(&self) -> usize {
        match self {
            Self::Servers(links) => majority(links.len()),
            _ => 1,
        }
    }

    /// The connections were replaced (Redis told the subscriber it was
    /// disconnected): names the new ones after the service, in the background.
    pub(crate) fn rename(&self) {
        match self {
            Self::Servers(links) => links.iter().for_each(Link::rename_soon),
            Self::Cluster(link) => link.rename_soon(),
            Self::Sentinel(sentinel, _) => sentinel.current().subscriber.rename_soon(),
        }
    }

    /// Makes `call`: on Redlock on every node, where it is enough that one node
    /// confirms a subscription (a waiter's sleep is capped by the lease anyway);
    /// behind Sentinel on the current master, which a failed ping makes the client
    /// find again.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a (un)subscription may or may not have been sent, as with the
    /// connection's own call.
    pub(crate) async fn call(&mut self, call: SubCall<'_>) -> RedisResult<()> {
        match self {
            Self::Servers(links) => {
                let (mut any, mut failed) = (false, None);
                for link in links {
                    match call.on(link).await {
                        Ok(()) => any = true,
                        Err(err) => failed = Some(err),
                    }
                }
                match failed {
                    Some(err) if !(any && matches!(call, SubCall::Subscribe(_))) => Err(err),
                    _ => Ok(()),
                }
            }
            Self::Cluster(link) => call.on(link).await,
            Self::Sentinel(sentinel, _) if matches!(call, SubCall::Ping) => {
                let pinged = |mut on: Current| async move { call.on(&mut on.subscriber).await };
                sentinel.on_master(pinged).await
            }
            Self::Sentinel(sentinel, _) => call.on(&mut sentinel.current().subscriber).await,
        }
    }
}

impl SubCall<'_> {
    /// Makes the call on `link`, naming its connection first for a subscription.
    ///
    /// # Cancel safety
    ///
    /// As [`SubConn::call`].
    async fn on<C: PubSub>(self, link: &mut Link<C>) -> RedisResult<()> {
        let result = match self {
            Self::Subscribe(channel) => {
                link.name_before_request().await;
                link.conn().join(channel).await
            }
            Self::Unsubscribe(channel) => link.conn().leave(channel).await,
            // A command: the link names the connection and records the answer.
            Self::Ping => return redis::cmd("PING").query_async(link).await,
        };
        link.observe(&result);
        result
    }
}

/// A subscriber connection's own (un)subscriptions, which it keeps across
/// reconnects: plain ones, or sharded ones on a cluster.
pub(crate) trait PubSub: ConnectionLike + Clone + Send + Sync + 'static {
    /// Subscribes to `channel`.
    ///
    /// # Cancel safety
    ///
    /// As redis-rs's own call: the subscription may or may not have been sent.
    async fn join(&mut self, channel: &[u8]) -> RedisResult<()>;
    /// Unsubscribes from `channel`.
    ///
    /// # Cancel safety
    ///
    /// As [`join`](Self::join).
    async fn leave(&mut self, channel: &[u8]) -> RedisResult<()>;
}

impl PubSub for ConnectionManager {
    async fn join(&mut self, channel: &[u8]) -> RedisResult<()> {
        self.subscribe(channel).await
    }

    async fn leave(&mut self, channel: &[u8]) -> RedisResult<()> {
        self.unsubscribe(channel).await
    }
}

impl PubSub for ClusterConnection {
    async fn join(&mut self, channel: &[u8]) -> RedisResult<()> {
        self.ssubscribe(channel).await
    }

    async fn leave(&mut self, channel: &[u8]) -> RedisResult<()> {
        self.sunsubscribe(channel).await
    }
}

/// The masters that a `CLUSTER SLOTS` reply names, `(host, port)` each, sorted and
/// once each (ranges it cannot read are skipped).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::redis::Value;
///
/// let node = |port| Value::Array(vec![Value::BulkString(b"127.0.0.1".to_vec()), Value::Int(port)]);
/// let slots = Value::Array(vec![
///     Value::Array(vec![Value::Int(0), Value::Int(8191), node(7001), node(7004)]),
///     Value::Array(vec![Value::Int(8192), Value::Int(16383), node(7002)]),
/// ]);
/// assert_eq!(
///     distlock::admin::masters_in_slots(&slots),
///     [("127.0.0.1".to_owned(), 7001), ("127.0.0.1".to_owned(), 7002)]
/// );
/// ```
pub fn masters_in_slots(slots: &Value) -> Vec<(String, u16)> {
    masters_of(&slot_ranges(slots))
}

/// A range of hash slots (first and last, inclusive) and the master that serves
/// it, `(host, port)`.
pub(crate) type SlotRange = (u16, u16, (String, u16));

/// The ranges of slots that a `CLUSTER SLOTS` reply names, each with its master
/// (ranges it cannot read are skipped).
pub(crate) fn slot_ranges(slots: &Value) -> Vec<SlotRange> {
    let number = |value: Option<&Value>| match value {
        Some(Value::Int(number)) => u16::try_from(*number).ok(),
        _ => None,
    };
    // Each range: [start, end, [host, port, id, ...], replicas...].
    let range = |range: &Value| {
        let Value::Array(fields) = range else {
            return None;
        };
        let Some(Value::Array(master)) = fields.get(2) else {
            return None;
        };
        let master = (master.first().and_then(reply_text)?, number(master.get(1))?);
        Some((number(fields.first())?, number(fields.get(1))?, master))
    };
    match slots {
        Value::Array(replies) => replies.iter().filter_map(range).collect(),
        _ => Vec::new(),
    }
}

/// The masters of `ranges`, sorted and once each.
pub(crate) fn masters_of(ranges: &[SlotRange]) -> Vec<(String, u16)> {
    let mut masters: Vec<(String, u16)> = ranges.iter().map(|(_, _, m)| m.clone()).collect();
    masters.sort();
    masters.dedup();
    masters
}

/// The masters of `after` that serve a slot that another master served in
/// `before` (a failover, a slot moved), once each.
pub(crate) fn masters_gaining_slots(
    before: &[SlotRange],
    after: &[SlotRange],
) -> Vec<(String, u16)> {
    let mut gaining: Vec<(String, u16)> = Vec::new();
    for (first, last, master) in after {
        let took = before.iter().any(|(was_first, was_last, was)| {
            was != master && was_first <= last && first <= was_last
        });
        if took && !gaining.contains(master) {
            gaining.push(master.clone());
        }
    }
    gaining
}

/// The value of `name` in the text of an `INFO` reply (`name:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A reply as text (a bulk, simple or verbatim string).
pub(crate) fn reply_text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
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
