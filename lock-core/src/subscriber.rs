//! The client's subscriber connection: one RESP3 connection per client, channels
//! subscribed while local waiters need them (`waiters.rs`), and the release
//! messages it hears handed to their queue.
//!
//! Redis may end a subscription on its own: a cluster master that hands the slot of
//! a channel to another master unsubscribes its subscribers (a `sunsubscribe` push),
//! and redis-rs then forgets the channel too. A channel that still has local waiters
//! (that asked for the subscription) is subscribed again (on the new owner), and
//! once that is confirmed its first waiter asks Redis again, in case the lock was
//! released in between.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backend::{SubCall, SubConn};
use crate::waiters::{hear, Command, Shared, Waiters, ANONYMOUS_RELEASE};

/// How often the idle subscriber pings Redis, so that a dead connection is noticed
/// (and the waiters woken) within about this long.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Starts the subscriber's two tasks over `conn` (a RESP3 connection whose pushes
/// arrive on `pushes`, resubscribing after reconnects): one runs (un)subscriptions
/// in order and pings when idle, one turns pushed messages into wake-ups. The
/// client's waiters reach the connection through what this returns.
pub(crate) fn start(
    conn: SubConn,
    pushes: mpsc::UnboundedReceiver<PushInfo>,
    shutdown: CancellationToken,
) -> Waiters {
    let shared = Arc::new(Shared::new(conn.announcers()));
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
    Waiters { shared, commands }
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
                if let Err(err) = conn.call(SubCall::Ping).await {
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
                    let result = conn.call(SubCall::Subscribe(&channel)).await;
                    if result.is_ok() {
                        lost.remove(&channel);
                        active.insert(channel);
                    }
                    result
                };
                let _ = reply.send(result);
            }
            Some(Command::Unsubscribe(channel)) => {
                // The new waiters' last one unsubscribes what stays subscribed.
                let wanted = shared
                    .channels()
                    .get(&channel)
                    .map(|(_, entry)| entry.requested.store(true, Ordering::SeqCst))
                    .is_some();
                if !wanted {
                    lost.remove(&channel);
                }
                if !wanted && active.remove(&channel) {
                    if let Err(err) = conn.call(SubCall::Unsubscribe(&channel)).await {
                        tracing::debug!(error = %err, "distlock: unsubscribe failed");
                    }
                }
            }
            Some(Command::Resubscribe(channel)) => {
                // Whatever we thought, Redis no longer sends this channel's messages.
                active.remove(&channel);
                resubscribe(&mut conn, &shared, &mut active, &mut lost, channel).await;
            }
            Some(Command::Rename) => conn.rename(),
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
    entry.requested.store(true, Ordering::SeqCst);
    match conn.call(SubCall::Subscribe(&channel)).await {
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
        if let Err(err) = conn.call(SubCall::Subscribe(channel)).await {
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
        if push.kind == PushKind::Disconnection {
            // Releases may have been missed: the first waiter of every queue
            // asks again; the others keep their places behind it.
            tracing::debug!("distlock: subscriber disconnected; waking the first waiters");
            shared.recheck_all();
            if let Some(commands) = commands.upgrade() {
                let _ = commands.send(Command::Rename);
            }
            continue;
        }
        let Some(Value::BulkString(name)) = push.data.first() else {
            continue;
        };
        let Some(channel) = shared.channel(name) else {
            continue;
        };
        match (&push.kind, push.data.get(1)) {
            (PushKind::Message | PushKind::SMessage, Some(message)) => {
                let message = match message {
                    Value::BulkString(message) => message.as_slice(),
                    _ => ANONYMOUS_RELEASE,
                };
                hear(channel, message, shared.announcers);
            }
            // A subscription confirmed again after a reconnect (or on a cluster's
            // new owner): a release published while it was down reached nobody, so
            // a waiter of the channel asks again; the head only, so that the others
            // stay behind it. (At the first subscription this may cost one extra
            // attempt, once.)
            (PushKind::Subscribe | PushKind::SSubscribe, _)
                if channel.confirmed.load(Ordering::Acquire) =>
            {
                channel.wake_first();
            }
            // Redis unsubscribed us: a cluster master gave the channel's slot to
            // another master (or we unsubscribed, and a new waiter that asked for
            // the subscription came since; subscribing again is then harmless). A
            // channel whose waiters never asked for one (locks taken without
            // waiting) is left alone. Until subscribed again, a waiter that has to
            // wait subscribes itself.
            (PushKind::Unsubscribe | PushKind::SUnsubscribe, _)
                if channel.requested.load(Ordering::SeqCst) =>
            {
                tracing::debug!("distlock: Redis unsubscribed a waited channel; subscribing again");
                channel.confirmed.store(false, Ordering::Release);
                if let Some(commands) = commands.upgrade() {
                    let _ = commands.send(Command::Resubscribe(name.clone()));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::waiters::tests::{is_notified, queued, subscriber};
    /// A push of `kind` for channel `c`, as redis-rs hands it over.
    fn push(kind: PushKind) -> PushInfo {
        PushInfo {
            kind,
            data: vec![Value::BulkString(b"c".to_vec()), Value::Int(0)],
        }
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
            !subscriber.enqueue(b"c".to_vec(), false).is_listening(),
            "until subscribed again, a waiter that has to wait subscribes itself"
        );
        // Not before the subscription is back: a look now could miss a release.
        assert!(!is_notified(&waiter));
        drop(waiter);
        assert!(matches!(rx.recv().await, Some(Command::Unsubscribe(_))));

        // A channel nobody waits for any more is left alone, and so is one whose
        // waiters never asked for a subscription.
        let _uncontended = subscriber.enqueue(b"c".to_vec(), false);
        pushes
            .send(push(PushKind::SUnsubscribe))
            .expect("the push task listens");
        drop(pushes);
        let _ = task.await;
        assert!(rx.try_recv().is_err(), "no command for an unwaited channel");
    }

    /// Runs the push task of `subscriber` over `pushes`, until it handled them all.
    async fn handle_pushes(subscriber: &Waiters, pushes: Vec<PushInfo>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_pushes(
            subscriber.shared.clone(),
            receiver,
            subscriber.commands.downgrade(),
            CancellationToken::new(),
        ));
        for push in pushes {
            sender.send(push).expect("the push task listens");
        }
        drop(sender);
        let _ = task.await;
    }

    #[tokio::test]
    async fn a_subscription_confirmed_again_wakes_the_head_alone() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        // After a reconnect, or after subscribing again on a cluster's new owner.
        handle_pushes(&subscriber, vec![push(PushKind::SSubscribe)]).await;
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
        let lost = PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        };
        handle_pushes(&subscriber, vec![lost]).await;
        assert!(
            is_notified(&first),
            "a release may have been missed: the head asks"
        );
        assert!(
            !is_notified(&second),
            "its follower keeps its place behind it"
        );
    }
}
