//! The local waiters of each lock name: one queue per release channel, in arrival
//! order, served first come, first served; woken by the release messages that the
//! subscriber connection (`subscriber.rs`) hears.
//!
//! Every new acquisition takes its [`Place`] at the tail at once, before it sends
//! anything to Redis (a place costs no round trip: the channel is subscribed only
//! once a waiter has to wait), and only the first waiter of a queue asks Redis:
//!
//! - A new acquisition with nobody ahead asks at once. One with waiters ahead sends
//!   nothing until it is first and its turn comes, so it never takes the lock from
//!   under a task of this client that asked before it; a task that has just
//!   released the lock and asks again goes to the tail, behind those that waited.
//! - A release message, a recheck (after a subscription was confirmed, or when the
//!   connection may have missed a release) and a lost connection all wake the first
//!   waiter alone. A wake-up it still has when it asks is used up by that attempt,
//!   whose reply reflects every release before it; one that finds the lock taken
//!   again keeps its place at the head.
//! - On Redlock every node announces a release with the same message: it is heard
//!   once, when a quorum of the nodes has announced it (a waiter woken by the first
//!   node's word would reach nodes that have not run the release yet), or
//!   [`LATE_ANNOUNCEMENTS`] after the first when fewer nodes do.
//! - A waiter that leaves (it got the lock, gave up, ran out of time, or its future
//!   was dropped) leaves the others in their order. A first waiter that gives up
//!   with a wake-up unused hands it to the next; one that got the lock keeps it (it
//!   told of the release it used).
//! - The first waiter looks again when the holder's lease may have ended; one that
//!   became first without ever asking has no lease to go by and looks within the
//!   `quiet` time of [`Place::turn`]. A waiter behind others never asks on its own;
//!   when nobody of its queue asked for `quiet`, it wakes the first. So a lost
//!   release message costs a queue with waiters behind its first one to two
//!   `quiet`s (a lone waiter, at most the holder's lease), and a queue whose first
//!   waits on a long lease asks about once per `quiet`.
//!
//! A lock future that is kept but no longer polled holds up the waiters behind it
//! (as with tokio's fair `Mutex`) until it is dropped or their own waits end.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::poll_fn;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::LockError;
use crate::faults::{self, Fault};
use crate::handoff::{Delivery, Offer};
use crate::sync::locked;

/// How many recent release messages a channel remembers, to hear each release once.
const RECENT_RELEASES: usize = 8;

/// How long a release that fewer nodes than a quorum announced waits for the other
/// announcements before it wakes a waiter anyway (Redlock: a node that never held
/// the lock, or is down, announces nothing).
const LATE_ANNOUNCEMENTS: Duration = Duration::from_millis(200);

/// The message of a release that carries no owner id (`force_release.lua`, or an
/// older client): never taken for a repeat.
pub(crate) const ANONYMOUS_RELEASE: &[u8] = b"released";

/// The local side of one release channel: its waiters, first come first served.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    /// Whether Redis confirmed the subscription: from then on, a release wakes the
    /// first waiter of the queue.
    pub(crate) confirmed: AtomicBool,
    /// Whether a subscription was asked for on behalf of this channel's waiters:
    /// only then does the last of them to leave unsubscribe (a lock taken without
    /// waiting costs nothing on the subscriber connection).
    pub(crate) requested: AtomicBool,
    queue: Mutex<Queue>,
    /// The last release messages (owner ids): on Redlock every node publishes the
    /// same release, and one release wakes one waiter, once a quorum of nodes
    /// announced it.
    recent: Mutex<VecDeque<Heard>>,
}

/// A release message as a channel heard it.
#[derive(Debug)]
struct Heard {
    message: Vec<u8>,
    /// How many times (nodes) it was heard.
    times: usize,
    /// Whether it woke a waiter.
    woke: bool,
}

/// What one hearing of a release message calls for.
#[derive(Debug, PartialEq, Eq)]
enum Hearing {
    /// Wake its waiter: as many nodes as needed announced the release.
    Wake,
    /// The first of several announcements needed: wake after [`LATE_ANNOUNCEMENTS`]
    /// unless the others come first.
    Await,
    /// Nothing now: it woke its waiter already, or is still short of the nodes
    /// needed (the quorum, or the grace of the first hearing, wakes it).
    Nothing,
}

#[derive(Debug, Default)]
struct Queue {
    /// The next ticket: tickets grow with arrival.
    next: u64,
    waiters: BTreeMap<u64, Slot>,
    /// When a waiter of the queue last asked Redis.
    looked: Option<Instant>,
}

/// A waiter's place. Only the first waiter is ever woken, so only its slot can
/// have a wake-up pending; only the first waiter's offer is ever claimed.
#[derive(Debug, Default)]
struct Slot {
    notified: bool,
    waker: Option<Waker>,
    /// What a release may hand this waiter (see `handoff.rs`): there while it waits
    /// between attempts, taken by the release that claims it.
    offer: Option<Offer>,
    /// A release claimed the offer and is on its way: the waiter sends nothing
    /// until it delivers.
    claimed: bool,
    /// What came of the claim, until the waiter reads it (dropped with the slot
    /// when the waiter left: a grant then gives its hold back).
    delivery: Option<Delivery>,
    /// The owner id under which a waiter of a fair lock waits in Redis's queue: a
    /// release message that names it wakes this waiter (see [`Place::aim`]).
    target: Option<Arc<str>>,
}

impl Slot {
    /// Tells the waiter to ask Redis, and wakes its task.
    fn wake(&mut self) {
        self.notified = true;
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Has the task of `cx` woken when something changes for the waiter.
    fn wake_me(&mut self, cx: &std::task::Context<'_>) {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.waker = Some(cx.waker().clone());
        }
    }
}

impl Queue {
    /// Wakes the waiter that waits under the owner id `target` (a fair lock's next
    /// waiter, named by a release message), if it is one of this client's.
    fn wake_named(&mut self, target: &[u8]) {
        let named = self
            .waiters
            .values_mut()
            .find(|slot| slot.target.as_deref().map(str::as_bytes) == Some(target));
        if let Some(slot) = named {
            slot.wake();
        }
    }

    /// Wakes the first waiter, unless it has a wake-up pending already (it will ask
    /// anyway, after now). With no waiter, nothing happens: a waiter that comes
    /// later asks Redis before it waits.
    fn wake_first(&mut self) {
        if let Some(slot) = self.waiters.values_mut().next() {
            if !slot.notified {
                slot.wake();
            }
        }
    }
}

impl Channel {
    /// What hearing `message` once more calls for, when `needed` nodes must
    /// announce one release before it wakes a waiter (a quorum on Redlock, else
    /// one): a waiter woken at the first node's word would ask nodes that have not
    /// run the release yet, get a minority, give it back and ask again.
    fn hear(&self, message: &[u8], needed: usize) -> Hearing {
        if faults::active(Fault::ReleaseMessageIgnored) {
            return Hearing::Nothing;
        }
        if message == ANONYMOUS_RELEASE {
            return Hearing::Wake;
        }
        let mut recent = locked(&self.recent);
        if let Some(heard) = recent.iter_mut().find(|heard| heard.message == message) {
            heard.times += 1;
            if heard.woke || heard.times < needed {
                return Hearing::Nothing;
            }
            heard.woke = true;
            return Hearing::Wake;
        }
        if recent.len() == RECENT_RELEASES {
            recent.pop_front();
        }
        let woke = needed <= 1;
        recent.push_back(Heard {
            message: message.to_vec(),
            times: 1,
            woke,
        });
        if woke {
            Hearing::Wake
        } else {
            Hearing::Await
        }
    }

    /// Whether `message`, heard from too few nodes [`LATE_ANNOUNCEMENTS`] ago,
    /// still has to wake its waiter (the others did not announce it meanwhile).
    fn heard_late(&self, message: &[u8]) -> bool {
        let mut recent = locked(&self.recent);
        match recent.iter_mut().find(|heard| heard.message == message) {
            Some(heard) if !heard.woke => {
                heard.woke = true;
                true
            }
            // Woken, or forgotten behind later releases (which woke waiters).
            _ => false,
        }
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
    /// heard (the subscription was not confirmed yet, or down). Waking the first
    /// alone keeps the arrival order, and one look is enough: a lock that is taken
    /// again will be released with a message that is heard. A message while the
    /// first has a wake-up pending wakes nobody else: the first's coming attempt
    /// sees that release too.
    pub(crate) fn wake_first(&self) {
        locked(&self.queue).wake_first();
    }

    /// Wakes whoever a release message is for: the waiter it names after a space
    /// (`<owner>:<seq> <next>`, a fair lock's next waiter), else the first waiter.
    fn wake_for(&self, message: &[u8]) {
        let mut queue = locked(&self.queue);
        match crate::layout::ReleaseMessage::parse(message).next() {
            Some(next) => queue.wake_named(next),
            None => queue.wake_first(),
        }
    }

    /// Wakes the first waiter if no waiter of the queue asked Redis for `quiet`:
    /// the fallback of the waiters behind it, who never ask on their own.
    fn wake_first_if_quiet(&self, quiet: Duration) {
        let mut queue = locked(&self.queue);
        if queue.looked.is_some_and(|at| at.elapsed() < quiet) {
            return;
        }
        queue.wake_first();
    }
}

/// Channel name -> (local waiters, channel).
type Channels = HashMap<Vec<u8>, (usize, Arc<Channel>)>;

#[derive(Debug, Default)]
pub(crate) struct Shared {
    channels: Mutex<Channels>,
    /// How many nodes announce a release before it wakes a waiter: a quorum on
    /// Redlock, else one.
    pub(crate) announcers: usize,
}

impl Shared {
    /// No channel yet, each release heard from `announcers` nodes before it wakes a
    /// waiter.
    pub(crate) fn new(announcers: usize) -> Self {
        Self {
            channels: Mutex::default(),
            announcers,
        }
    }

    pub(crate) fn channels(&self) -> MutexGuard<'_, Channels> {
        locked(&self.channels)
    }

    /// The channel of `name`, while it has local waiters.
    pub(crate) fn channel(&self, name: &[u8]) -> Option<Arc<Channel>> {
        self.channels()
            .get(name)
            .map(|(_, channel)| channel.clone())
    }

    /// After the connection may have missed releases, or at a shutdown: the first
    /// waiter of every queue asks again (the others stay behind it), or, when the
    /// client was shut down, ends, which wakes the next.
    pub(crate) fn recheck_all(&self) {
        for (_, channel) in self.channels().values() {
            channel.wake_first();
        }
    }
}

/// What the command task does on the connection, in the order asked.
#[derive(Debug)]
pub(crate) enum Command {
    /// A waiter needs the channel: subscribe unless subscribed, and answer.
    Subscribe(Vec<u8>, oneshot::Sender<redis::RedisResult<()>>),
    /// The last waiter left: unsubscribe unless a new waiter came meanwhile.
    Unsubscribe(Vec<u8>),
    /// Redis ended the subscription on its own (a cluster moved the channel's slot):
    /// subscribe again while the channel has waiters.
    Resubscribe(Vec<u8>),
    /// Redis told of a lost connection, which its manager replaced: name the new
    /// connection after the service (and learn whether the server is there).
    Rename,
}

/// The client's local waiters: a queue per channel, and the way to the subscriber
/// connection's command task (`subscriber.rs`) that (un)subscribes channels.
#[derive(Debug)]
pub(crate) struct Waiters {
    pub(crate) shared: Arc<Shared>,
    pub(crate) commands: mpsc::UnboundedSender<Command>,
}

impl Waiters {
    /// Takes a place at the tail of the queue of `channel`'s local waiters, at once
    /// and without a word to Redis: from now on, no later acquisition of this client
    /// goes before this one. Release messages reach the queue once a waiter has
    /// [listened](Place::listen).
    ///
    /// An `independent` place (a fair lock's waiter, whose order Redis keeps in a
    /// queue of its own) asks Redis whatever its place, and is woken by the
    /// messages that name it ([`Place::aim`]).
    pub(crate) fn enqueue(&self, channel: Vec<u8>, independent: bool) -> Place {
        let entry = {
            let mut channels = self.shared.channels();
            let (refs, entry) = channels.entry(channel.clone()).or_default();
            *refs += 1;
            entry.clone()
        };
        let ticket = entry.enqueue();
        Place {
            shared: self.shared.clone(),
            commands: self.commands.clone(),
            name: channel,
            channel: entry,
            ticket,
            independent,
        }
    }
    /// Whether any task of this client waits for a lock (or is about to ask for one).
    pub(crate) fn waits(&self) -> bool {
        !self.shared.channels().is_empty()
    }

    /// Claims the offer of the first waiter for `channel`, if it made one (it waits
    /// for a release, and the channel's messages reach it): from now on it sends
    /// nothing of its own until the claim is delivered.
    pub(crate) fn claim(&self, channel: &[u8]) -> Option<Claim> {
        let entry = self.shared.channel(channel)?;
        let (ticket, offer) = {
            let mut queue = locked(&entry.queue);
            let (&ticket, slot) = queue.waiters.iter_mut().next()?;
            let offer = slot.offer.take()?;
            slot.claimed = true;
            (ticket, offer)
        };
        Some(Claim {
            channel: entry,
            ticket,
            offer,
            delivered: false,
        })
    }
}

/// A release's claim on the offer of the first waiter of a queue. Dropped
/// undelivered (the release was dropped with its runtime), it delivers
/// [`Delivery::Unknown`].
#[derive(Debug)]
pub(crate) struct Claim {
    channel: Arc<Channel>,
    ticket: u64,
    offer: Offer,
    delivered: bool,
}

impl Claim {
    /// What the waiter accepts.
    pub(crate) fn offer(&self) -> &Offer {
        &self.offer
    }

    /// Hands `delivery` to the waiter and wakes it; gives it back when the waiter
    /// has left meanwhile (the caller then drops it: a grant gives its hold back).
    pub(crate) fn deliver(mut self, delivery: Delivery) -> Option<Delivery> {
        self.delivered = true;
        self.put(delivery)
    }

    fn put(&self, delivery: Delivery) -> Option<Delivery> {
        let mut queue = locked(&self.channel.queue);
        let Some(slot) = queue.waiters.get_mut(&self.ticket) else {
            return Some(delivery);
        };
        slot.claimed = false;
        slot.delivery = Some(delivery);
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
        None
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.delivered {
            let _ = self.put(Delivery::Unknown);
        }
    }
}

/// What a waiter's turn brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// Ask Redis now.
    Ask,
    /// The wait ended with the waiter still behind others of its queue.
    OutOfTime,
}

/// A local waiter's place in the queue of one release channel, from the start of a
/// new acquisition until it gets the lock or gives up; it keeps the channel's local
/// side (and its subscription, once asked for) alive.
#[derive(Debug)]
pub(crate) struct Place {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    name: Vec<u8>,
    channel: Arc<Channel>,
    ticket: u64,
    /// See [`Waiters::enqueue`].
    independent: bool,
}

impl Place {
    /// Whether no waiter of this client is ahead in the queue: only then may this one
    /// ask Redis without being woken.
    pub(crate) fn is_first(&self) -> bool {
        self.independent || locked(&self.channel.queue).waiters.keys().next() == Some(&self.ticket)
    }

    /// Says under which owner id this waiter waits in Redis's queue of a fair lock,
    /// so that a release message naming it wakes it.
    pub(crate) fn aim(&self, owner: Arc<str>) {
        if let Some(slot) = locked(&self.channel.queue).waiters.get_mut(&self.ticket) {
            slot.target = Some(owner);
        }
    }

    /// Whether Redis confirmed the channel's subscription, so that releases wake the
    /// queue.
    pub(crate) fn is_listening(&self) -> bool {
        self.channel.confirmed.load(Ordering::Acquire)
    }

    /// Makes sure that the channel's release messages reach the queue: subscribes
    /// unless Redis already confirmed it, and returns once it has. The first
    /// confirmation wakes the first waiter, which asks again: a release published
    /// before the confirmation reached nobody.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a subscription asked for is still made, and undone when the
    /// last waiter leaves; whoever listens next waits for its confirmation again.
    pub(crate) async fn listen(&self) -> Result<(), LockError> {
        if self.is_listening() {
            return Ok(());
        }
        // Before the command: whoever leaves last then unsubscribes.
        self.channel.requested.store(true, Ordering::SeqCst);
        let (reply_tx, reply_rx) = oneshot::channel();
        let gone = || {
            LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the lock client is shutting down",
            )))
        };
        self.commands
            .send(Command::Subscribe(self.name.clone(), reply_tx))
            .map_err(|_| gone())?;
        reply_rx.await.map_err(|_| gone())??;
        if !self.channel.confirmed.swap(true, Ordering::AcqRel) {
            self.channel.wake_first();
        }
        Ok(())
    }

    /// Offers this waiter to the releases of this client while it waits (see
    /// `handoff.rs`): only when release messages reach the queue, and not while a
    /// release has its earlier offer.
    pub(crate) fn offer(&self, offer: Offer) {
        if !self.is_listening() {
            return;
        }
        let mut queue = locked(&self.channel.queue);
        if let Some(slot) = queue.waiters.get_mut(&self.ticket) {
            if !slot.claimed && slot.delivery.is_none() {
                slot.offer = Some(offer);
            }
        }
    }

    /// Takes the offer back before an attempt of the waiter's own: `false` when a
    /// release claimed it (or delivered already); the waiter must then not ask
    /// Redis, but [wait for the delivery](Self::delivery).
    pub(crate) fn take_back_offer(&self) -> bool {
        let mut queue = locked(&self.channel.queue);
        match queue.waiters.get_mut(&self.ticket) {
            Some(slot) if slot.claimed || slot.delivery.is_some() => false,
            Some(slot) => {
                slot.offer = None;
                true
            }
            None => true,
        }
    }

    /// What came of the release that claimed this waiter's offer.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a delivery not read yet stays in the waiter's place (and a
    /// grant gives its hold back if the place is dropped with it).
    pub(crate) async fn delivery(&self) -> Delivery {
        poll_fn(|cx| {
            let mut queue = locked(&self.channel.queue);
            // Not in the queue: nothing can be delivered to it.
            let Some(slot) = queue.waiters.get_mut(&self.ticket) else {
                return Poll::Ready(Delivery::Unknown);
            };
            if let Some(delivery) = slot.delivery.take() {
                return Poll::Ready(delivery);
            }
            slot.wake_me(cx);
            Poll::Pending
        })
        .await
    }

    /// Forgets a wake-up received so far: call it before each attempt, whose reply
    /// reflects every release before it. Counts as the queue's latest look.
    pub(crate) fn rearm(&self) {
        let mut queue = locked(&self.channel.queue);
        queue.looked = Some(Instant::now());
        if let Some(slot) = queue.waiters.get_mut(&self.ticket) {
            slot.notified = false;
        }
    }

    /// Resolves once a release (or a recheck) woke this waiter since the last
    /// [`rearm`](Self::rearm).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop (as a timed-out wait does): the wake-up stays recorded in the
    /// waiter's place, and the next call, or the drop of the place, sees it.
    async fn notified(&self) {
        poll_fn(|cx| {
            let mut queue = locked(&self.channel.queue);
            match queue.waiters.get_mut(&self.ticket) {
                Some(slot) if !slot.notified && slot.delivery.is_none() => {
                    slot.wake_me(cx);
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }
        })
        .await;
    }

    /// Waits for this waiter's turn to ask Redis, until `deadline`:
    ///
    /// - woken (a release message, a recheck, a wake-up handed on by a first waiter
    ///   that left): [`Turn::Ask`];
    /// - first in the queue: at `look_at` (when the lease it was told of may end), or
    ///   at once when it has none (it never asked, or its look is due), or at the
    ///   deadline for a last look: [`Turn::Ask`];
    /// - behind others: it never asks on its own, but every `quiet` it checks its
    ///   place again, and when nobody of the queue asked for `quiet`, it wakes the
    ///   first; at the deadline: [`Turn::OutOfTime`].
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a wake-up received stays in the waiter's place (see
    /// [`notified`](Self::notified)).
    pub(crate) async fn turn(
        &self,
        look_at: Option<Instant>,
        deadline: Instant,
        quiet: Duration,
    ) -> Turn {
        loop {
            let now = Instant::now();
            let first = self.is_first();
            let until = match (first, look_at) {
                (true, Some(at)) => at.min(deadline),
                (true, None) => return Turn::Ask,
                (false, _) if now >= deadline => return Turn::OutOfTime,
                (false, _) => (now + quiet).min(deadline),
            };
            if tokio::time::timeout_at(until, self.notified())
                .await
                .is_ok()
                || first
            {
                return Turn::Ask;
            }
            self.channel.wake_first_if_quiet(quiet);
        }
    }

    /// Leaves the queue after getting the lock, keeping any wake-up: it told of the
    /// release this waiter used. The next waiter becomes first, and waits for the
    /// release of this one; with `wake_next` (a lock several owners may hold at
    /// once: a read-write lock, a semaphore), it asks at once instead.
    pub(crate) fn leave_holding(&mut self, wake_next: bool) {
        self.leave(|_| wake_next);
    }

    /// Takes this waiter's slot out of the queue, and wakes the new first waiter
    /// when `wake_next` says so of the slot (`None`: it left already).
    fn leave(&self, wake_next: impl FnOnce(Option<&Slot>) -> bool) {
        let slot = {
            let mut queue = locked(&self.channel.queue);
            let slot = queue.waiters.remove(&self.ticket);
            if wake_next(slot.as_ref()) {
                queue.wake_first();
            }
            slot
        };
        // Outside the lock: a delivery left in it (a grant delivered and never
        // read) gives its hold back.
        drop(slot);
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        // A waiter that gives up must not swallow a release meant for the queue:
        // the next one, now first, asks in its stead.
        self.leave(|slot| slot.is_some_and(|slot| slot.notified));
        let mut channels = self.shared.channels();
        if let Some((refs, entry)) = channels.get_mut(&self.name) {
            *refs -= 1;
            if *refs == 0 {
                let subscribed = entry.requested.load(Ordering::SeqCst);
                channels.remove(&self.name);
                if subscribed {
                    // The command task unsubscribes unless a new waiter came meanwhile.
                    let _ = self
                        .commands
                        .send(Command::Unsubscribe(std::mem::take(&mut self.name)));
                }
            }
        }
    }
}

/// Wakes whoever a release message heard on `channel` is for, once `needed` nodes
/// announced it, or [`LATE_ANNOUNCEMENTS`] after the first when fewer do.
pub(crate) fn hear(channel: Arc<Channel>, message: &[u8], needed: usize) {
    match channel.hear(message, needed) {
        Hearing::Wake => channel.wake_for(message),
        Hearing::Await => {
            let message = message.to_vec();
            tokio::spawn(async move {
                tokio::time::sleep(LATE_ANNOUNCEMENTS).await;
                if channel.heard_late(&message) {
                    channel.wake_for(&message);
                }
            });
        }
        Hearing::Nothing => {}
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use std::future::Future;
    use std::pin::pin;
    use std::task::Context;

    pub(crate) fn subscriber() -> (Waiters, mpsc::UnboundedReceiver<Command>) {
        let (commands, rx) = mpsc::unbounded_channel();
        let subscriber = Waiters {
            shared: Arc::new(Shared::default()),
            commands,
        };
        (subscriber, rx)
    }

    /// A waiter queued on channel `c`, whose subscription was asked for and
    /// confirmed.
    pub(crate) fn queued(subscriber: &Waiters) -> Place {
        let place = subscriber.enqueue(b"c".to_vec(), false);
        place.channel.requested.store(true, Ordering::SeqCst);
        place.channel.confirmed.store(true, Ordering::Release);
        place
    }

    pub(crate) fn is_notified(place: &Place) -> bool {
        let queue = locked(&place.channel.queue);
        queue.waiters[&place.ticket].notified
    }

    /// Polls `future` once, with a waker that does nothing.
    fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    const QUIET: Duration = Duration::from_millis(100);

    /// Whether the (paused) clock is at `at`, give or take the timer's millisecond.
    fn at_about(at: Instant) -> bool {
        let now = Instant::now();
        now >= at && now - at <= Duration::from_millis(1)
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    fn offer() -> Offer {
        Offer {
            owner: crate::owner::Owner::new("waiter".into()),
            lease_ms: 1000,
            fencing: false,
            who: Some("1 test host src/lib.rs:1".into()),
        }
    }

    fn grant(given_back: &Arc<AtomicBool>) -> Delivery {
        let given_back = given_back.clone();
        let grant =
            crate::handoff::Unclaimed::new(crate::handoff::Granted::One(1, 0), Instant::now());
        Delivery::Granted(grant.given_back_by(move || given_back.store(true, Ordering::SeqCst)))
    }

    #[test]
    fn a_release_claims_the_offer_of_the_first_waiter_alone() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        assert!(subscriber.claim(b"c").is_none(), "nobody offered");
        second.offer(offer());
        assert!(
            subscriber.claim(b"c").is_none(),
            "the second may not be handed the lock before the first"
        );
        first.offer(offer());
        let claim = subscriber.claim(b"c").expect("the first's offer");
        assert!(subscriber.claim(b"c").is_none(), "claimed once");
        assert!(!first.take_back_offer(), "claimed: no attempt of its own");
        first.offer(offer());
        assert!(!first.take_back_offer(), "no new offer while claimed");
        assert!(second.take_back_offer());
        assert!(claim.deliver(Delivery::Declined { ask: false }).is_none());
        assert!(!first.take_back_offer(), "a delivery to read first");
    }

    #[test]
    fn a_waiter_that_is_not_listening_offers_nothing() {
        let (subscriber, _rx) = subscriber();
        let place = subscriber.enqueue(b"c".to_vec(), false);
        place.offer(offer());
        assert!(subscriber.claim(b"c").is_none());
        assert!(place.take_back_offer());
    }

    #[tokio::test]
    async fn a_delivery_wakes_the_waiter_and_a_grant_to_a_waiter_gone_comes_back() {
        let (subscriber, _rx) = subscriber();
        let mut first = queued(&subscriber);
        first.offer(offer());
        let claim = subscriber.claim(b"c").expect("claimed");
        let given_back = Arc::new(AtomicBool::new(false));
        {
            let mut delivery = pin!(first.delivery());
            assert!(poll_once(delivery.as_mut()).is_pending());
            assert!(claim.deliver(grant(&given_back)).is_none());
            match poll_once(delivery.as_mut()) {
                Poll::Ready(Delivery::Granted(grant)) => drop(grant.claim()),
                other => panic!("expected the grant, got {other:?}"),
            }
        }
        assert!(!given_back.load(Ordering::SeqCst));
        // It holds the lock now: out of the queue.
        first.leave_holding(false);

        // The waiter leaves while the release is on its way: the grant comes back
        // to the releaser, whose drop gives the hold back.
        let second = queued(&subscriber);
        second.offer(offer());
        let claim = subscriber.claim(b"c").expect("claimed");
        drop((first, second));
        let returned = claim.deliver(grant(&given_back));
        assert!(matches!(returned, Some(Delivery::Granted(_))));
        drop(returned);
        assert!(given_back.load(Ordering::SeqCst));

        // Delivered, never read, and the waiter leaves: given back with its place.
        let given_back = Arc::new(AtomicBool::new(false));
        let third = queued(&subscriber);
        third.offer(offer());
        let claim = subscriber.claim(b"c").expect("claimed");
        assert!(claim.deliver(grant(&given_back)).is_none());
        drop(third);
        assert!(given_back.load(Ordering::SeqCst));
    }

    #[test]
    fn a_claim_dropped_undelivered_tells_the_waiter_nothing_is_known() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        first.offer(offer());
        drop(subscriber.claim(b"c").expect("claimed"));
        let mut delivery = pin!(first.delivery());
        assert!(matches!(
            poll_once(delivery.as_mut()),
            Poll::Ready(Delivery::Unknown)
        ));
    }

    #[test]
    fn a_place_costs_nothing_on_the_connection() {
        let (subscriber, mut rx) = subscriber();
        let place = subscriber.enqueue(b"c".to_vec(), false);
        assert!(place.is_first() && !place.is_listening());
        drop(place);
        assert!(subscriber.shared.channels().is_empty());
        assert!(
            rx.try_recv().is_err(),
            "neither a subscription nor an unsubscription for a lock nobody waited for"
        );
    }

    #[test]
    fn a_newcomer_queues_behind_the_waiters_and_becomes_first_when_they_leave() {
        let (subscriber, _rx) = subscriber();
        let mut first = queued(&subscriber);
        let second = queued(&subscriber);
        let third = queued(&subscriber);
        assert!(first.is_first() && !second.is_first() && !third.is_first());
        // The first gets the lock: the next is first, with no wake-up (the lock is
        // held: it waits for the release).
        first.channel.wake_first();
        first.leave_holding(false);
        assert!(second.is_first() && !is_notified(&second));
        // A waiter behind others that gives up leaves the order as it was.
        drop(third);
        let fourth = queued(&subscriber);
        assert!(second.is_first() && !fourth.is_first());
        drop(first);
        assert!(second.is_first());
    }

    #[test]
    fn a_release_wakes_the_first_waiter_alone_and_it_keeps_its_place() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        first.channel.wake_first();
        assert!(is_notified(&first) && !is_notified(&second));
        // The first asks again and finds the lock taken: the next release is still
        // its own.
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
        let mut second = queued(&subscriber);
        let third = queued(&subscriber);
        first.channel.wake_first();
        drop(first);
        assert!(is_notified(&second), "the wake-up moved on");
        second.leave_holding(false);
        assert!(!is_notified(&third), "the acquirer used its wake-up");
        drop(second);
        assert!(!is_notified(&third));
        // One that leaves unwoken hands nothing on.
        let fourth = queued(&subscriber);
        drop(third);
        assert!(fourth.is_first() && !is_notified(&fourth));
    }

    #[test]
    fn a_release_heard_from_several_nodes_counts_once() {
        let channel = Channel::default();
        let heard = |message: &[u8]| channel.hear(message, 1) == Hearing::Wake;
        assert!(heard(b"owner-1"));
        assert!(!heard(b"owner-1"), "the same release again");
        assert!(heard(b"owner-2"));
        assert!(heard(ANONYMOUS_RELEASE));
        assert!(
            heard(ANONYMOUS_RELEASE),
            "a release without an owner is never a repeat"
        );
        for i in 0..RECENT_RELEASES {
            assert!(heard(format!("later-{i}").as_bytes()));
        }
        assert!(heard(b"owner-1"), "forgotten after a while");
    }

    /// Five nodes: a release wakes at the third node's word, once; one that two
    /// nodes alone announced wakes when the grace has passed, once.
    #[test]
    fn a_release_wakes_once_a_quorum_of_nodes_announced_it() {
        let channel = Channel::default();
        assert_eq!(channel.hear(b"a:1", 3), Hearing::Await);
        assert_eq!(channel.hear(b"a:1", 3), Hearing::Nothing);
        assert_eq!(channel.hear(b"a:1", 3), Hearing::Wake);
        assert_eq!(channel.hear(b"a:1", 3), Hearing::Nothing);
        assert_eq!(channel.hear(b"a:1", 3), Hearing::Nothing);
        assert!(!channel.heard_late(b"a:1"), "woken by the quorum already");
        assert_eq!(channel.hear(b"b:1", 3), Hearing::Await);
        assert_eq!(channel.hear(b"b:1", 3), Hearing::Nothing);
        assert!(channel.heard_late(b"b:1"), "too few nodes: woken late");
        assert!(!channel.heard_late(b"b:1"), "once");
        assert_eq!(channel.hear(b"b:1", 3), Hearing::Nothing, "a late third");
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_behind_others_never_asks_and_runs_out_behind_them() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let deadline = Instant::now() + QUIET * 5;
        // The first keeps asking (and finding the lock taken) more often than quiet.
        let looking = async {
            while Instant::now() < deadline {
                first.rearm();
                tokio::time::sleep(QUIET / 2).await;
            }
        };
        let (turn, ()) = tokio::join!(second.turn(None, deadline, QUIET), looking);
        assert_eq!(turn, Turn::OutOfTime);
        assert!(Instant::now() >= deadline);
        assert!(!is_notified(&first), "the first looked often enough");
        assert!(!second.is_first());
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_queue_is_looked_at_by_its_first_waiter() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        // The first asked, and sleeps on a long lease; its release message is lost.
        first.rearm();
        let deadline = Instant::now() + QUIET * 3;
        let mut turn = pin!(second.turn(None, deadline, QUIET));
        assert!(poll_once(turn.as_mut()).is_pending());
        tokio::time::sleep(QUIET / 2).await;
        assert!(poll_once(turn.as_mut()).is_pending());
        assert!(!is_notified(&first), "the first looked a moment ago");
        tokio::time::sleep(QUIET).await;
        assert!(
            poll_once(turn.as_mut()).is_pending(),
            "it still waits its turn"
        );
        assert!(
            is_notified(&first),
            "nobody looked for quiet: the first asks"
        );
        assert_eq!(turn.await, Turn::OutOfTime);
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_waiter_asks_when_woken_or_when_its_look_is_due() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let _second = queued(&subscriber);
        let start = Instant::now();
        let look_at = start + QUIET * 4;
        assert_eq!(first.turn(Some(look_at), far(), QUIET).await, Turn::Ask);
        assert!(at_about(look_at), "nobody woke it: at the lease's end");

        first.rearm();
        let mut turn = pin!(first.turn(Some(far()), far(), QUIET));
        assert!(poll_once(turn.as_mut()).is_pending());
        first.channel.wake_first();
        assert_eq!(poll_once(turn.as_mut()), Poll::Ready(Turn::Ask));

        first.rearm();
        let deadline = Instant::now() + QUIET;
        assert_eq!(first.turn(Some(far()), deadline, QUIET).await, Turn::Ask);
        assert!(at_about(deadline), "a last look at the end of the wait");
        assert_eq!(
            first.turn(None, far(), QUIET).await,
            Turn::Ask,
            "a first that has no lease to go by asks at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_handed_on_reaches_the_next_waiter_at_once() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let mut turn = pin!(second.turn(None, far(), QUIET));
        assert!(poll_once(turn.as_mut()).is_pending());
        first.channel.wake_first();
        drop(first);
        assert_eq!(poll_once(turn.as_mut()), Poll::Ready(Turn::Ask));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_becomes_first_unwoken_looks_within_quiet() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let start = Instant::now();
        let mut turn = pin!(second.turn(None, far(), QUIET));
        assert!(poll_once(turn.as_mut()).is_pending());
        // The first gives up unwoken: the lock is held, its release will wake the
        // second; should that message be lost, the second looks all the same.
        drop(first);
        assert_eq!(turn.await, Turn::Ask);
        assert!(Instant::now() - start <= QUIET);
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_a_turn_anywhere_in_the_queue_keeps_it_consistent() {
        let (subscriber, _rx) = subscriber();
        let first = queued(&subscriber);
        let second = queued(&subscriber);
        let third = queued(&subscriber);
        let fourth = queued(&subscriber);
        // Every waiter sits in its turn; those of the first and the second are
        // dropped (a timeout, a select!), and then the waiters themselves.
        {
            let mut turn = pin!(first.turn(Some(far()), far(), QUIET));
            assert!(poll_once(turn.as_mut()).is_pending());
            let mut turn = pin!(second.turn(None, far(), QUIET));
            assert!(poll_once(turn.as_mut()).is_pending());
        }
        {
            let mut turn = pin!(third.turn(None, far(), QUIET));
            assert!(poll_once(turn.as_mut()).is_pending());
            drop(second);
            // A release wakes the first even though it is not waiting right now:
            // the wake-up is kept for it, and handed on when it leaves.
            first.channel.wake_first();
            assert!(is_notified(&first));
            drop(first);
            assert_eq!(poll_once(turn.as_mut()), Poll::Ready(Turn::Ask));
        }
        assert!(third.is_first() && !fourth.is_first() && !is_notified(&fourth));
        drop(third);
        assert!(
            fourth.is_first() && is_notified(&fourth),
            "handed on once more"
        );
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
    async fn listening_subscribes_once_and_its_confirmation_wakes_the_first_waiter() {
        let (subscriber, mut rx) = subscriber();
        let first = subscriber.enqueue(b"c".to_vec(), false);
        let second = subscriber.enqueue(b"c".to_vec(), false);
        // The first waiter's attempt is on its way, sent before the subscription.
        first.rearm();
        let answer = async {
            match rx.recv().await {
                Some(Command::Subscribe(name, reply)) => {
                    assert_eq!(name, b"c");
                    let _ = reply.send(Ok(()));
                }
                other => panic!("expected a subscription, got {other:?}"),
            }
        };
        let (listened, ()) = tokio::join!(second.listen(), answer);
        listened.expect("listen");
        assert!(first.is_listening() && second.is_listening());
        assert!(
            is_notified(&first) && !is_notified(&second),
            "a release before the confirmation reached nobody: the first asks again"
        );
        first.rearm();
        first.listen().await.expect("already confirmed");
        assert!(rx.try_recv().is_err(), "no second subscription");
        assert!(!is_notified(&first), "no second recheck");
        drop((first, second));
        assert!(matches!(rx.try_recv(), Ok(Command::Unsubscribe(name)) if name == b"c"));
    }

    #[test]
    fn the_last_waiter_leaving_unsubscribes() {
        let (subscriber, mut rx) = subscriber();
        let only = queued(&subscriber);
        drop(only);
        assert!(subscriber.shared.channels().is_empty());
        assert!(matches!(rx.try_recv(), Ok(Command::Unsubscribe(name)) if name == b"c"));
    }
    /// A release message that names a waiter (a fair lock's next one) wakes that
    /// waiter only, wherever it is in the queue; one that names nobody here wakes
    /// nobody; one without a name wakes the first.
    #[tokio::test]
    async fn a_message_that_names_a_waiter_wakes_that_one() {
        let (subscriber, _commands) = subscriber();
        let first = subscriber.enqueue(b"c".to_vec(), true);
        let second = subscriber.enqueue(b"c".to_vec(), true);
        assert!(
            first.is_first() && second.is_first(),
            "independent places ask at will"
        );
        first.aim("owner-a".into());
        second.aim("owner-b".into());
        first.channel.wake_for(b"x:1 owner-b");
        assert!(!is_notified(&first) && is_notified(&second));
        second.rearm();
        first.channel.wake_for(b"x:2 owner-c");
        assert!(!is_notified(&first) && !is_notified(&second));
        first.channel.wake_for(b"x:3");
        assert!(is_notified(&first) && !is_notified(&second));
    }
}
