//! Event-driven waiting: one RESP3 subscriber connection per client, channels
//! subscribed while local waiters need them, one waiter woken per release message.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::sentinel::{master_may_have_moved, SentinelConn};
use crate::LockError;

/// How often the idle subscriber pings Redis, so that a dead connection is noticed
/// (and the waiters woken) within about this long.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// The local side of one release channel.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    /// Woken once per release message (one waiter), or for all after a reconnect.
    pub(crate) notify: Notify,
}

/// Channel name -> (local subscriptions, channel).
type Channels = HashMap<Vec<u8>, (usize, Arc<Channel>)>;

#[derive(Debug, Default)]
struct Shared {
    channels: Mutex<Channels>,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, Channels> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake_all(&self) {
        for (_, channel) in self.channels().values() {
            channel.notify.notify_waiters();
        }
    }
}

enum Command {
    Subscribe(Vec<u8>, oneshot::Sender<redis::RedisResult<()>>),
    Unsubscribe(Vec<u8>),
}

/// The client's subscriber: ref-counted channels over one connection.
#[derive(Debug)]
pub(crate) struct Subscriber {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Subscribe(..) => f.write_str("Subscribe"),
            Self::Unsubscribe(..) => f.write_str("Unsubscribe"),
        }
    }
}

impl Subscriber {
    /// Starts the subscriber's two tasks over `conn` (a RESP3 connection whose pushes
    /// arrive on `pushes`, resubscribing after reconnects): one runs (un)subscriptions
    /// in order and pings when idle, one turns pushed messages into wake-ups.
    pub(crate) fn start(
        conn: SubConn,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
        shutdown: CancellationToken,
    ) -> Self {
        let shared = Arc::new(Shared::default());
        let (commands, command_rx) = mpsc::unbounded_channel();
        tokio::spawn(run_commands(
            conn,
            shared.clone(),
            command_rx,
            shutdown.clone(),
        ));
        tokio::spawn(run_pushes(shared.clone(), pushes, shutdown));
        Self { shared, commands }
    }

    /// Subscribes to `channel` for as long as the returned subscription lives.
    /// Returns once Redis confirmed the subscription: a release published after that
    /// wakes a waiter.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> Result<Subscription, LockError> {
        let entry = {
            let mut channels = self.shared.channels();
            let (refs, entry) = channels.entry(channel.to_vec()).or_default();
            *refs += 1;
            entry.clone()
        };
        // From here on, dropping the subscription undoes the count.
        let subscription = Subscription {
            shared: self.shared.clone(),
            commands: self.commands.clone(),
            name: channel.to_vec(),
            channel: entry,
        };
        let (reply_tx, reply_rx) = oneshot::channel();
        let gone = || {
            LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the lock client is shutting down",
            )))
        };
        self.commands
            .send(Command::Subscribe(channel.to_vec(), reply_tx))
            .map_err(|_| gone())?;
        reply_rx.await.map_err(|_| gone())??;
        Ok(subscription)
    }
}

/// A local waiter's interest in one release channel.
#[derive(Debug)]
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    name: Vec<u8>,
    channel: Arc<Channel>,
}

impl Subscription {
    pub(crate) fn channel(&self) -> Arc<Channel> {
        self.channel.clone()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.shared.channels();
        if let Some((refs, _)) = channels.get_mut(&self.name) {
            *refs -= 1;
            if *refs == 0 {
                channels.remove(&self.name);
                // The command task unsubscribes unless a new waiter came meanwhile.
                let _ = self
                    .commands
                    .send(Command::Unsubscribe(std::mem::take(&mut self.name)));
            }
        }
    }
}

/// The subscriber's connection: plain pub/sub on one server, sharded pub/sub on a
/// cluster (the channel lives on the shard of its lock).
pub(crate) enum SubConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    /// Redlock: every node publishes its own release message.
    Many(Vec<ConnectionManager>),
    /// Sentinel: the subscriber of the current master, and the generation of the
    /// master it last subscribed on.
    Sentinel(Arc<SentinelConn>, u64),
}

impl SubConn {
    /// Whether the Sentinel backend moved to a new master since the last call: the
    /// channels must then be subscribed again there.
    fn swapped(&mut self) -> bool {
        match self {
            Self::Sentinel(sentinel, seen) => {
                let generation = sentinel.current().generation;
                let swapped = generation != *seen;
                *seen = generation;
                swapped
            }
            _ => false,
        }
    }

    /// Subscribes; on Redlock it is enough that one node confirms (a waiter's sleep
    /// is capped by the lease anyway).
    async fn subscribe(&mut self, channel: &[u8]) -> redis::RedisResult<()> {
        match self {
            Self::Single(conn) => conn.subscribe(channel).await,
            Self::Cluster(conn) => conn.ssubscribe(channel).await,
            Self::Sentinel(sentinel, _) => sentinel.current().subscriber.subscribe(channel).await,
            Self::Many(conns) => {
                let mut result = Ok(());
                let mut any = false;
                for conn in conns {
                    match conn.subscribe(channel).await {
                        Ok(()) => any = true,
                        Err(err) => result = Err(err),
                    }
                }
                if any {
                    Ok(())
                } else {
                    result
                }
            }
        }
    }

    async fn unsubscribe(&mut self, channel: &[u8]) -> redis::RedisResult<()> {
        match self {
            Self::Single(conn) => conn.unsubscribe(channel).await,
            Self::Cluster(conn) => conn.sunsubscribe(channel).await,
            Self::Sentinel(sentinel, _) => sentinel.current().subscriber.unsubscribe(channel).await,
            Self::Many(conns) => {
                let mut result = Ok(());
                for conn in conns {
                    if let Err(err) = conn.unsubscribe(channel).await {
                        result = Err(err);
                    }
                }
                result
            }
        }
    }

    async fn ping(&mut self) -> redis::RedisResult<Value> {
        let ping = redis::cmd("PING");
        match self {
            Self::Single(conn) => ping.query_async(conn).await,
            Self::Cluster(conn) => ping.query_async(conn).await,
            Self::Sentinel(sentinel, _) => {
                let current = sentinel.current();
                let result = ping.query_async(&mut current.subscriber.clone()).await;
                if matches!(&result, Err(err) if master_may_have_moved(err)) {
                    sentinel.reresolve(current.generation).await;
                }
                result
            }
            Self::Many(conns) => {
                let mut result = Ok(Value::Nil);
                for conn in conns {
                    if let Err(err) = ping.query_async::<Value>(conn).await {
                        result = Err(err);
                    }
                }
                result
            }
        }
    }
}

async fn run_commands(
    mut conn: SubConn,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut active: HashSet<Vec<u8>> = HashSet::new();
    loop {
        let command = tokio::select! {
            () = shutdown.cancelled() => return,
            command = commands.recv() => command,
            () = tokio::time::sleep(HEARTBEAT) => {
                if let Err(err) = conn.ping().await {
                    tracing::debug!(error = %err, "distlock: subscriber heartbeat failed; waking waiters");
                    shared.wake_all();
                }
                resubscribe_if_moved(&mut conn, &active).await;
                continue;
            }
        };
        resubscribe_if_moved(&mut conn, &active).await;
        match command {
            None => return,
            Some(Command::Subscribe(channel, reply)) => {
                let result = if active.contains(&channel) {
                    Ok(())
                } else {
                    let result = conn.subscribe(&channel).await;
                    if result.is_ok() {
                        active.insert(channel);
                    }
                    result
                };
                let _ = reply.send(result);
            }
            Some(Command::Unsubscribe(channel)) => {
                let wanted = shared.channels().contains_key(&channel);
                if !wanted && active.remove(&channel) {
                    if let Err(err) = conn.unsubscribe(&channel).await {
                        tracing::debug!(error = %err, "distlock: unsubscribe failed");
                    }
                }
            }
        }
    }
}

/// After the Sentinel backend moved to a new master, subscribes the active
/// channels there (the waiters were woken by the move and ask the new master).
async fn resubscribe_if_moved(conn: &mut SubConn, active: &HashSet<Vec<u8>>) {
    if !conn.swapped() {
        return;
    }
    for channel in active {
        if let Err(err) = conn.subscribe(channel).await {
            tracing::debug!(error = %err, "distlock: resubscribe on the new master failed");
        }
    }
}

async fn run_pushes(
    shared: Arc<Shared>,
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    shutdown: CancellationToken,
) {
    loop {
        let push = tokio::select! {
            () = shutdown.cancelled() => return,
            push = pushes.recv() => push,
        };
        let Some(push) = push else { return };
        match push.kind {
            PushKind::Message | PushKind::SMessage => {
                if let Some(Value::BulkString(name)) = push.data.first() {
                    let channel = shared.channels().get(name).map(|(_, c)| c.clone());
                    if let Some(channel) = channel {
                        channel.notify.notify_one();
                    }
                }
            }
            PushKind::Disconnection => {
                tracing::debug!("distlock: subscriber disconnected; waking every waiter");
                shared.wake_all();
            }
            _ => {}
        }
    }
}
