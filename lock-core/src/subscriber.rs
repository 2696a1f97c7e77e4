//! Event-driven waiting: one RESP3 subscriber connection per client, channels
//! subscribed while local waiters need them, one waiter woken per release message.
//!
//! The local waiters of one channel queue in arrival order, and keep their place
//! across attempts: a release message, a recheck and a lost connection wake the
//! first waiter alone (the others stay behind it), and a woken task that finds the
//! lock taken again goes back to the head of the queue, not to its tail. A task that asks for a lock whose channel is already subscribed joins
//! the queue before its first attempt, so a release after that attempt wakes it and
//! it needs no second look after subscribing.
//!
//! Redis may end a subscription on its own: a cluster master that hands the slot of
//! a channel to another master unsubscribes its subscribers (a `sunsubscribe` push),
//! and redis-rs then forgets the channel too. A channel that still has local waiters
//! is subscribed again (on the new owner), and once that is confirmed its first
//! waiter asks Redis again, in case the lock was released in between.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::backend::SubConn;
use crate::error::LockError;

/// How often the idle subscriber pings Redis, so that a dead connection is noticed
/// (and the waiters woken) within about this long.
const HEARTBEAT: Duration = Duration::from_secs(1);

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many recent release messages a channel remembers, to hear each release once.
const RECENT_RELEASES: usize = 8;

/// The message of a release that carries no owner id (`force_release.lua`, or an
/// older client): never taken for a repeat.
const ANONYMOUS_RELEASE: &[u8] = b"released";

/// The local side of one release channel: its waiters, first come first served.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    /// Whether Redis confirmed the subscription: from then on, a release wakes a
    /// waiter that joined the queue before it.
    confirmed: AtomicBool,
    queue: Mutex<Queue>,
    /// The last release messages (owner ids): on Redlock every node publishes the
    /// same release, and one release wakes one waiter.
    recent: Mutex<VecDeque<Vec<u8>>>,
}

#[derive(Debug, Default)]
struct Queue {
    /// The next ticket: tickets grow with arrival.
    next: u64,
    waiters: BTreeMap<u64, Slot>,
}

/// A waiter's place. Only the first waiter is ever woken, so only its slot can
/// have a wake-up pending.
#[derive(Debug, Default)]
struct Slot {
    notified: bool,
    waker: Option<Waker>,
}

impl Queue {
    /// Wakes the first waiter, unless it has a wake-up pending already (it will ask
    /// anyway, after now). With no waiter, nothing happens: every waiter asks Redis
    /// before it waits.
    fn wake_first(&mut self) {
        if let Some(slot) = self.waiters.values_mut().next() {
            if !slot.notified {
                slot.notified = true;
                if let Some(waker) = slot.waker.take() {
                    waker.wake();
                }
            }
        }
    }
}

impl Channel {
    /// Whether `message` tells of a release not heard before (on another node).
    fn first_hearing(&self, message: &[u8]) -> bool {
        if message == ANONYMOUS_RELEASE {
            return true;
        }
        let mut recent = locked(&self.recent);
        if recent.iter().any(|seen| seen.as_slice() == message) {
            return false;
        }
        if recent.len() == RECENT_RELEASES {
            recent.pop_front();
        }
        recent.push_back(message.to_vec());
        true
    }

    fn enqueue(&self) -> u64 {
        let mut queue = locked(&self.queue);
        let ticket = queue.next;
        queue.next += 1;
        queue.waiters.insert(ticket, Slot::default());
        ticket
    }

    /// Makes the first waiter ask Redis after now: for a release message (one
    /// release, one waiter), or as a recheck, for a release that nobody may have
    /// heard (the subscription was down). Waking the first alone keeps the arrival
    /// order, and one look is enough: a lock that is taken again will be released
    /// with a message that is heard. A message while the first has a wake-up
    /// pending wakes nobody else: the first's coming attempt sees that release too.
    fn wake_first(&self) {
        locked(&self.queue).wake_first();
    }
}

/// Channel name -> (local subscriptions, channel).
type Channels = HashMap<Vec<u8>, (usize, Arc<Channel>)>;

#[derive(Debug, Default)]
struct Shared {
    channels: Mutex<Channels>,
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, Channels> {
        locked(&self.channels)
    }

    /// The channel of `name`, while it has local waiters.
    fn channel(&self, name: &[u8]) -> Option<Arc<Channel>> {
        self.channels()
            .get(name)
            .map(|(_, channel)| channel.clone())
    }

    /// After the connection may have missed releases: the first waiter of every
    /// queue asks again (the others stay behind it).
    fn recheck_all(&self) {
        for (_, channel) in self.channels().values() {
            channel.wake_first();
        }
    }
}

/// What the command task does on the connection, in the order asked.
enum Command {
    /// A waiter needs the channel: subscribe unless subscribed, and answer.
    Subscribe(Vec<u8>, oneshot::Sender<redis::RedisResult<()>>),
    /// The last waiter left: unsubscribe unless a new waiter came meanwhile.
    Unsubscribe(Vec<u8>),
    /// Redis ended the subscription on its own (a cluster moved the channel's slot):
    /// subscribe again while the channel has waiters.
    Resubscribe(Vec<u8>),
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
            Self::Resubscribe(..) => f.write_str("Resubscribe"),
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
        // Weak: the command task still ends when the client and its waiters are gone.
        tokio::spawn(run_pushes(
            shared.clone(),
            pushes,
            commands.downgrade(),
            shutdown,
        ));
        Self { shared, commands }
    }

    /// Joins the waiters of `channel` if Redis already confirmed its subscription:
    /// a release published from now on wakes this waiter (or one that came before
    /// it). `None` when the channel is not subscribed yet.
    pub(crate) fn join(&self, channel: &[u8]) -> Option<Subscription> {
        let entry = {
            let mut channels = self.shared.channels();
            let (refs, entry) = channels.get_mut(channel)?;
            if !entry.confirmed.load(Ordering::Acquire) {
                return None;
            }
            *refs += 1;
            entry.clone()
        };
        Some(self.subscription(channel, entry))
    }

    /// Subscribes to `channel` for as long as the returned subscription lives, and
    /// queues the caller among its waiters. Returns once Redis confirmed the
    /// subscription: a release published after that wakes a waiter.
    pub(crate) async fn subscribe(&self, channel: &[u8]) -> Result<Subscription, LockError> {
        let entry = {
            let mut channels = self.shared.channels();
            let (refs, entry) = channels.entry(channel.to_vec()).or_default();
            *refs += 1;
            entry.clone()
        };
        // From here on, dropping the subscription undoes the count.
        let subscription = self.subscription(channel, entry);
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
        subscription
            .channel
            .confirmed
            .store(true, Ordering::Release);
        Ok(subscription)
    }

    /// A subscription of an entry whose count the caller already raised.
    fn subscription(&self, name: &[u8], channel: Arc<Channel>) -> Subscription {
        let ticket = channel.enqueue();
        Subscription {
            shared: self.shared.clone(),
            commands: self.commands.clone(),
            name: name.to_vec(),
            channel,
            ticket,
            settled: false,
        }
    }
}

/// A local waiter's interest in one release channel, and its place in the queue.
#[derive(Debug)]
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    name: Vec<u8>,
    channel: Arc<Channel>,
    ticket: u64,
    /// The waiter got the lock: a wake-up it still has is not passed on.
    settled: bool,
}

impl Subscription {
    /// Forgets a wake-up received so far: call it before each attempt, whose reply
    /// reflects every release before it.
    pub(crate) fn rearm(&self) {
        let mut queue = locked(&self.channel.queue);
        if let Some(slot) = queue.waiters.get_mut(&self.ticket) {
            slot.notified = false;
        }
    }

    /// Resolves once a release (or a reconnect) woke this waiter since the last
    /// [`rearm`](Self::rearm).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop (as a timed-out wait does): the wake-up stays recorded in the
    /// waiter's place, and the next call, or the drop of the subscription, sees it.
    pub(crate) async fn notified(&self) {
        poll_fn(|cx| {
            let mut queue = locked(&self.channel.queue);
            match queue.waiters.get_mut(&self.ticket) {
                Some(slot) if !slot.notified => {
                    if !slot.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        slot.waker = Some(cx.waker().clone());
                    }
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }
        })
        .await;
    }

    /// Leaves the queue after getting the lock, keeping any wake-up: it was this
    /// waiter's to use.
    pub(crate) fn settle(mut self) {
        self.settled = true;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut queue = locked(&self.channel.queue);
        let slot = queue.waiters.remove(&self.ticket);
        if slot.is_some_and(|slot| slot.notified) && !self.settled {
            // A waiter that gives up must not swallow a release meant for the
            // queue: the next one, now first, asks in its stead.
            queue.wake_first();
        }
        drop(queue);
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

async fn run_commands(
    mut conn: SubConn,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut active: HashSet<Vec<u8>> = HashSet::new();
    // Channels that Redis unsubscribed and that could not be subscribed again yet.
    let mut lost: HashSet<Vec<u8>> = HashSet::new();
    loop {
        let command = tokio::select! {
            () = shutdown.cancelled() => return,
            command = commands.recv() => command,
            () = tokio::time::sleep(HEARTBEAT) => {
                if let Err(err) = conn.ping().await {
                    tracing::debug!(error = %err, "distlock: subscriber heartbeat failed; waking the first waiters");
                    shared.recheck_all();
                }
                resubscribe_if_moved(&mut conn, &active).await;
                for channel in std::mem::take(&mut lost) {
                    resubscribe(&mut conn, &shared, &mut active, &mut lost, channel).await;
                }
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
                        lost.remove(&channel);
                        active.insert(channel);
                    }
                    result
                };
                let _ = reply.send(result);
            }
            Some(Command::Unsubscribe(channel)) => {
                let wanted = shared.channels().contains_key(&channel);
                if !wanted {
                    lost.remove(&channel);
                }
                if !wanted && active.remove(&channel) {
                    if let Err(err) = conn.unsubscribe(&channel).await {
                        tracing::debug!(error = %err, "distlock: unsubscribe failed");
                    }
                }
            }
            Some(Command::Resubscribe(channel)) => {
                // Whatever we thought, Redis no longer sends this channel's messages.
                active.remove(&channel);
                resubscribe(&mut conn, &shared, &mut active, &mut lost, channel).await;
            }
        }
    }
}

/// Subscribes `channel` again after Redis ended its subscription, if it still has
/// local waiters; once confirmed, its first waiter asks Redis again (a release
/// while it was not subscribed reached nobody). On failure the channel is `lost`,
/// retried at the next heartbeat; its waiters sleep at most the holder's lease.
///
/// # Cancel safety
///
/// Only the command task awaits it, to the end; dropped half-way (the runtime
/// shutting down), the channel is in neither set, which nobody reads any more.
async fn resubscribe(
    conn: &mut SubConn,
    shared: &Shared,
    active: &mut HashSet<Vec<u8>>,
    lost: &mut HashSet<Vec<u8>>,
    channel: Vec<u8>,
) {
    let Some(entry) = shared.channel(&channel) else {
        return;
    };
    match conn.subscribe(&channel).await {
        Ok(()) => {
            entry.confirmed.store(true, Ordering::Release);
            entry.wake_first();
            active.insert(channel);
        }
        Err(err) => {
            tracing::debug!(error = %err, "distlock: subscribing again after Redis unsubscribed failed; retrying");
            lost.insert(channel);
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
    commands: mpsc::WeakUnboundedSender<Command>,
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
                if let [Value::BulkString(name), message, ..] = push.data.as_slice() {
                    let channel = shared.channels().get(name).map(|(_, c)| c.clone());
                    let message = match message {
                        Value::BulkString(message) => message.as_slice(),
                        _ => ANONYMOUS_RELEASE,
                    };
                    if let Some(channel) = channel.filter(|c| c.first_hearing(message)) {
                        channel.wake_first();
                    }
                }
            }
            PushKind::Subscribe | PushKind::SSubscribe => {
                // A subscription confirmed again after a reconnect (or on a
                // cluster's new owner): a release published while it was down
                // reached nobody, so a waiter of the channel asks again; the head
                // only, so that the others stay behind it. (At the first
                // subscription this may cost one extra attempt, once.)
                if let Some(Value::BulkString(name)) = push.data.first() {
                    if let Some(channel) = shared
                        .channel(name)
                        .filter(|channel| channel.confirmed.load(Ordering::Acquire))
                    {
                        channel.wake_first();
                    }
                }
            }
            PushKind::Unsubscribe | PushKind::SUnsubscribe => {
                // Redis unsubscribed us: a cluster master gave the channel's slot to
                // another master (or we unsubscribed, and a new waiter came since;
                // subscribing again is then harmless). Until subscribed again, new
                // waiters subscribe rather than join.
                if let Some(Value::BulkString(name)) = push.data.first() {
                    if let Some(channel) = shared.channel(name) {
                        tracing::debug!(
                            "distlock: Redis unsubscribed a waited channel; subscribing again"
                        );
                        channel.confirmed.store(false, Ordering::Release);
                        if let Some(commands) = commands.upgrade() {
                            let _ = commands.send(Command::Resubscribe(name.clone()));
                        }
                    }
                }
            }
            PushKind::Disconnection => {
                // Releases may have been missed: the first waiter of every queue
                // asks again; the others keep their places behind it.
                tracing::debug!("distlock: subscriber disconnected; waking the first waiters");
                shared.recheck_all();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subscriber() -> (Subscriber, mpsc::UnboundedReceiver<Command>) {
        let (commands, rx) = mpsc::unbounded_channel();
        let subscriber = Subscriber {
            shared: Arc::new(Shared::default()),
            commands,
        };
        (subscriber, rx)
    }

    /// A waiter queued on a channel that Redis confirmed.
    fn queued(subscriber: &Subscriber) -> Subscription {
        {
            let mut channels = subscriber.shared.channels();
            let (_, channel) = channels.entry(b"c".to_vec()).or_default();
            channel.confirmed.store(true, Ordering::Release);
        }
        subscriber.join(b"c").expect("the channel is confirmed")
    }

    fn is_notified(subscription: &Subscription) -> bool {
        let queue = locked(&subscription.channel.queue);
        queue.waiters[&subscription.ticket].notified
    }

    #[test]
    fn join_needs_a_confirmed_subscription() {
        let (subscriber, _rx) = subscriber();
        assert!(subscriber.join(b"c").is_none(), "no local waiters yet");
        subscriber
            .shared
            .channels()
            .insert(b"c".to_vec(), (1, Arc::default()));
        assert!(
            subscriber.join(b"c").is_none(),
            "not confirmed by Redis yet"
        );
    }

    #[test]
    fn a_release_wakes_the_first_waiter_alone_and_it_keeps_its_place() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        first.channel.wake_first();
        assert!(is_notified(&first) && !is_notified(&second));
        // The first waiter asks again and finds the lock taken: the next release
        // is still its own.
        first.rearm();
        first.channel.wake_first();
        assert!(is_notified(&first) && !is_notified(&second));
        // A second message while the first has not asked yet wakes nobody else:
        // the first's coming attempt sees that release too, and a second asker
        // could take the lock from under it.
        first.channel.wake_first();
        assert!(!is_notified(&second));
    }

    #[test]
    fn a_first_waiter_that_gives_up_passes_its_wake_up_on_and_one_that_acquired_does_not() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let third = queued(&subscriber);
        first.channel.wake_first();
        drop(first);
        assert!(is_notified(&second), "the wake-up moved on");
        second.settle();
        assert!(!is_notified(&third), "the acquirer used its wake-up");
    }

    #[test]
    fn a_release_heard_from_several_nodes_counts_once() {
        let channel = Channel::default();
        assert!(channel.first_hearing(b"owner-1"));
        assert!(!channel.first_hearing(b"owner-1"), "the same release again");
        assert!(channel.first_hearing(b"owner-2"));
        assert!(channel.first_hearing(ANONYMOUS_RELEASE));
        assert!(
            channel.first_hearing(ANONYMOUS_RELEASE),
            "a release without an owner is never a repeat"
        );
        for i in 0..RECENT_RELEASES {
            assert!(channel.first_hearing(format!("later-{i}").as_bytes()));
        }
        assert!(channel.first_hearing(b"owner-1"), "forgotten after a while");
    }

    /// A push of `kind` for channel `c`, as redis-rs hands it over.
    fn push(kind: PushKind) -> PushInfo {
        PushInfo {
            kind,
            data: vec![Value::BulkString(b"c".to_vec()), Value::Int(0)],
        }
    }

    #[test]
    fn a_recheck_wakes_the_head_alone_and_only_when_no_wake_up_is_pending() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        subscriber.shared.recheck_all();
        assert!(is_notified(&first) && !is_notified(&second));
        subscriber.shared.recheck_all();
        assert!(!is_notified(&second), "the head will ask anyway");
        // The head asks, finds the lock taken, and waits again: the next recheck
        // is its own again, not its follower's.
        first.rearm();
        subscriber.shared.recheck_all();
        assert!(is_notified(&first) && !is_notified(&second));
        drop(first);
        assert!(is_notified(&second), "a waiter that gives up passes it on");
    }

    #[tokio::test]
    async fn redis_unsubscribing_a_waited_channel_subscribes_it_again() {
        let (subscriber, mut rx) = subscriber();
        let waiter = queued(&subscriber);
        let (pushes, push_rx) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let weak = subscriber.commands.downgrade();
        let task = tokio::spawn(run_pushes(
            subscriber.shared.clone(),
            push_rx,
            weak,
            shutdown.clone(),
        ));
        pushes
            .send(push(PushKind::SUnsubscribe))
            .expect("the push task listens");
        let command = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(
            matches!(&command, Ok(Some(Command::Resubscribe(name))) if name == b"c"),
            "{command:?}"
        );
        assert!(
            subscriber.join(b"c").is_none(),
            "until subscribed again, a new waiter subscribes rather than joins"
        );
        // Not before the subscription is back: a look now could miss a release.
        assert!(!is_notified(&waiter));
        drop(waiter);
        assert!(matches!(rx.recv().await, Some(Command::Unsubscribe(_))));

        // A channel nobody waits for any more is left alone.
        pushes
            .send(push(PushKind::SUnsubscribe))
            .expect("the push task listens");
        drop(pushes);
        let _ = task.await;
        assert!(rx.try_recv().is_err(), "no command for an unwaited channel");
    }

    #[tokio::test]
    async fn a_subscription_confirmed_again_wakes_the_head_alone() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let (pushes, push_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_pushes(
            subscriber.shared.clone(),
            push_rx,
            subscriber.commands.downgrade(),
            CancellationToken::new(),
        ));
        // After a reconnect, or after subscribing again on a cluster's new owner.
        pushes
            .send(push(PushKind::SSubscribe))
            .expect("the push task listens");
        drop(pushes);
        let _ = task.await;
        assert!(is_notified(&first), "the head asks again");
        assert!(
            !is_notified(&second),
            "its follower keeps waiting behind it: waking both could reorder them"
        );
    }

    #[tokio::test]
    async fn a_lost_connection_wakes_the_head_alone() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let (pushes, push_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_pushes(
            subscriber.shared.clone(),
            push_rx,
            subscriber.commands.downgrade(),
            CancellationToken::new(),
        ));
        pushes
            .send(PushInfo {
                kind: PushKind::Disconnection,
                data: vec![],
            })
            .expect("the push task listens");
        drop(pushes);
        let _ = task.await;
        assert!(
            is_notified(&first),
            "a release may have been missed: the head asks"
        );
        assert!(
            !is_notified(&second),
            "its follower keeps its place behind it"
        );
    }

    #[test]
    fn the_last_waiter_leaving_unsubscribes() {
        let (subscriber, mut rx) = subscriber();
        let only = queued(&subscriber);
        drop(only);
        assert!(subscriber.shared.channels().is_empty());
        assert!(matches!(rx.try_recv(), Ok(Command::Unsubscribe(name)) if name == b"c"));
    }
}
