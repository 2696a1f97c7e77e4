//! The one wait loop of a new acquisition, for one name or a set taken in one run:
//! attempt, then sleep until a release message or the holder's lease, then attempt
//! again, within the wait.
//!
//! A new acquisition of one name takes its place in the queue of this client's
//! waiters for the name before anything else (see `subscriber.rs`), and asks Redis
//! only when it is first: at once when nobody of this client asked before it, else
//! when its turn comes. So the tasks of one client get a lock in the order they
//! asked for it, and a task that has just released a lock does not take it back
//! from those that waited. A set takes a place only at the name it found busy, and
//! moves it when another name is busy.
//!
//! Each wait is a [`Wait`]: what it asks for (one name, or a set taken in one run),
//! its place among this client's waiters, what the last attempt said, and the error
//! when it runs out; then the loop, [`wait_for`], top to bottom.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::{self, Answer, NameAttempt};
use super::grant::{self, Grant};
use super::options::LeasePolicy;
use super::set_run::{NameSet, SetAttempt};
use crate::error::LockError;
use crate::faults::{self, Fault};
use crate::handoff::{Delivery, Offer};
use crate::inner::Inner;
use crate::keys::{Kind, LockKeys};
use crate::ops::DeadlockWatch;
use crate::origin::Origin;
use crate::owner::Owner;
use crate::release;
use crate::series::Tag;
use crate::waiters::{Place, Turn};

/// What a wait asks Redis for each time it asks.
pub(super) enum Ask {
    /// One name, of the kind of the wait's keys. `writer`: for a read hold beside
    /// the chain's own write hold (a downgrade), the writer's owner id.
    One { writer: Option<Arc<str>> },
    /// A set of plain locks, taken in one run of `acquire_all.lua` (`set.rs`).
    Set(NameSet),
}

/// One new acquisition's wait: its deadline, its place among the local waiters,
/// and what the last attempt said.
pub(super) struct Wait<'a> {
    pub(super) inner: &'a Arc<Inner>,
    /// The name whose release the wait listens for: the one name; for a set, the
    /// name last found busy (its first before that).
    pub(super) keys: Arc<LockKeys>,
    pub(super) ask: Ask,
    pub(super) policy: LeasePolicy,
    pub(super) start: Instant,
    pub(super) deadline: Instant,
    /// The place in the queue of this client's waiters for `keys`: one name's,
    /// taken at once; a set's, taken at the name found busy.
    pub(super) place: Option<Place>,
    /// A set: the index of the name last found busy.
    pub(super) busy: Option<usize>,
    /// Redlock: the last attempt got too few grants (granted, held by another owner).
    pub(super) short_of_quorum: Option<(u64, u64)>,
    /// The failure of the last attempt, when it was one that may pass.
    pub(super) retried_after: Option<LockError>,
    /// Whether an attempt found the lock held by another owner: only then is a wait
    /// that runs out a [`LockError::Timeout`], not an outage.
    pub(super) seen_held: bool,
    /// Whether this client's releases may hand the lock to its waiters: one
    /// endpoint, no replica acknowledgements, one plain lock.
    pub(super) hands_off: bool,
    /// The owner whose place a writer keeps in Redis (`#wait:<owner>`, see
    /// `lua/lock.lua`): taken back when the wait ends without the lock.
    pub(super) kept_place: Option<Arc<Owner>>,
    /// Where the request was made: the hold keeps it.
    pub(super) origin: Origin,
    /// Deadlock detection, for a chain that holds other locks.
    pub(super) deadlock: Option<DeadlockWatch>,
    /// What the client writes of this waiter once it holds the lock (`who.rs`).
    pub(super) who: Arc<str>,
    /// One name: its metrics' labels, once it had to wait.
    pub(super) tag: Option<Tag>,
    /// Where this same client took the lock, when another of its call chains held
    /// it as the wait began.
    pub(super) held_here: Option<String>,
}

impl<'a> Wait<'a> {
    /// The wait of `ask`. One name's, of the lock of `keys`, queues behind the
    /// tasks of this client that asked for it before, ahead of any that ask after;
    /// a set's, taken in one run (`keys` its first name's), queues only once a name
    /// is busy.
    pub(super) fn new(
        inner: &'a Arc<Inner>,
        keys: Arc<LockKeys>,
        ask: Ask,
        policy: LeasePolicy,
        (start, deadline): (Instant, Instant),
        origin: Origin,
    ) -> Self {
        let one = matches!(ask, Ask::One { .. });
        // No round trip, so a lock taken without waiting costs nothing more.
        let place = one.then(|| {
            let fair = keys.kind == Kind::Fair;
            inner.waiters.enqueue(keys.channel(), fair)
        });
        let hands_off = one
            && !inner.backend.is_redlock()
            && inner.config.replicas.is_none()
            && keys.kind.is_plain();
        Self {
            inner,
            keys,
            ask,
            policy,
            start,
            deadline,
            place,
            busy: None,
            short_of_quorum: None,
            retried_after: None,
            seen_held: false,
            hands_off,
            kept_place: None,
            who: inner
                .who
                .who_at(origin.site_key(), || origin.site_text().into_owned()),
            origin,
            deadlock: None,
            tag: None,
            held_here: None,
        }
    }

    /// This wait, watched for deadlocks by `watch` (a method call's receiver comes
    /// first: `Wait::new(..).watched(ops.watch(..))` makes the watch once the wait
    /// has its place among the local waiters).
    pub(super) fn watched(mut self, watch: Option<DeadlockWatch>) -> Self {
        self.deadlock = watch;
        self
    }

    /// What the client says of the holder, when the grant itself names it: a
    /// fixed lease, which no renewal names later (`lease::NAME_AFTER`), or a client
    /// that names every holder at once.
    fn named_at_once(&self) -> Option<&Arc<str>> {
        grant::named_at_once(self.inner, self.policy).then_some(&self.who)
    }

    /// The labels of this wait's metrics; the first call counts it as contended, and
    /// notes whether another call chain of this same client holds the lock (said
    /// once per client at WARN, and in the wait's timeout).
    pub(super) fn contended(&mut self) -> &Tag {
        if self.tag.is_none() {
            if let Some(hold) = self.inner.watchdog.holding(&self.keys.lock) {
                let site = hold.origin.site_text().into_owned();
                // The task that holds it waits for it: unless the guard went to
                // another task, only the timeout ends this wait.
                if hold.task == crate::hold::TaskId::current() {
                    self.inner.waits_for_itself(&self.keys.display(), &site);
                }
                self.held_here = Some(site);
            }
        }
        self.tag.get_or_insert_with(|| {
            let tag = self.inner.ops.series(&self.keys, &self.origin);
            tag.contended();
            tag
        })
    }

    /// The wait ran out with the lock held by others: a timeout (counted for one
    /// name; for a set, on the name last found busy).
    pub(super) fn timeout(&self, waited: Duration) -> LockError {
        if let Ask::Set(_) = self.ask {
            return LockError::timeout(self.keys.display(), waited);
        }
        self.inner.ops.series(&self.keys, &self.origin).timed_out();
        LockError::Timeout {
            name: self.keys.display(),
            waited,
            holder: None,
            held_here: self.held_here.clone(),
        }
    }

    /// Waits for what came of the release that claimed this waiter's offer, within
    /// the wait. Out of time, the waiter gives up as one behind others does (a
    /// grant delivered after that is given back with its place).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a delivery not read stays in the waiter's place, and a grant in
    /// it gives its hold back when the place is dropped.
    pub(super) async fn handed(&mut self) -> Result<Delivery, LockError> {
        let Some(place) = &self.place else {
            return Ok(Delivery::Declined { ask: true });
        };
        match tokio::time::timeout_at(self.deadline, place.delivery()).await {
            Ok(delivery) => Ok(delivery),
            Err(_) => Err(self.busy(Instant::now())),
        }
    }

    /// A busy answer to the attempt of `owner` sent at `sent`, on the name at
    /// `index`: a writer that stays kept its place in Redis under that owner id (a
    /// place kept under an earlier one, after a lost reply, is taken back now).
    pub(super) fn was_busy(&mut self, index: usize, owner: &Arc<Owner>, sent: Instant) {
        if let Ask::Set(set) = &self.ask {
            if self.busy.replace(index) != Some(index) {
                // Another name is busy: the place moves there.
                self.place = None;
                self.keys = set.keys(index);
            }
        }
        if !self.keys.kind.keeps_place() || self.deadline <= sent {
            return;
        }
        if let Some(earlier) = self.kept_place.replace(owner.clone()) {
            if !Arc::ptr_eq(&earlier, owner) {
                release::take_back_place(self.inner, &self.keys, &earlier);
            }
        }
    }

    /// The wait ran out before an attempt could finish (or be retried): for one
    /// name, the failure that made us ask again, if there was one; a timeout if
    /// another owner was seen holding the lock (for a set, on the name last found
    /// busy, which `keys` is); otherwise Redis did not answer in time, an outage
    /// rather than contention.
    pub(super) fn ran_out(&mut self) -> LockError {
        let waited = self.start.elapsed();
        let (what, held) = match &self.ask {
            Ask::Set(_) if self.busy.is_some() => return self.timeout(waited),
            Ask::Set(set) => (format!("a set of {} locks", set.keys.len()), "one"),
            Ask::One { .. } => {
                if let Some(err) = self.retried_after.take() {
                    return err;
                }
                if self.seen_held {
                    return self.timeout(waited);
                }
                (format!("lock `{}`", self.keys.display()), "it")
            }
        };
        LockError::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no timely answer from Redis for {what} within the wait of {waited:?}, and no \
                 other owner was seen holding {held}"
            ),
        )))
    }

    /// The wait ran out after a busy answer, or behind tasks of this client that
    /// asked first: on Redlock, the last vote's numbers; else a timeout. A waiter
    /// that ran out behind others without ever asking Redis gets a timeout too:
    /// they asked for the lock before it and were waiting for it (or held it),
    /// contention as surely as another client's hold.
    pub(super) fn busy(&self, now: Instant) -> LockError {
        match self.short_of_quorum {
            Some((granted, held)) => LockError::QuorumNotReached {
                got: usize::try_from(granted).unwrap_or(usize::MAX),
                needed: self.inner.backend.quorum(),
                held_elsewhere: usize::try_from(held).unwrap_or(usize::MAX),
            },
            None => self.timeout(now - self.start),
        }
    }

    /// Runs one attempt of `owner`, sent at `sent`, bounded by the wait (a server
    /// that does not answer in time, paused or overloaded, is a lock not had within
    /// the wait; a request cut short is finished, and what it took given back, in
    /// the background). `Err(None)`: the wait ended during the attempt.
    pub(super) async fn attempt(
        &mut self,
        owner: &Arc<Owner>,
        sent: Instant,
    ) -> Result<Answer, Option<LockError>> {
        let bounded = self.deadline > sent;
        if let Some(place) = &self.place {
            // A wake-up before this attempt is used up by it: its reply reflects the
            // release.
            place.rearm();
            if self.keys.kind == Kind::Fair {
                // Its place in Redis's queue is under this owner id: a release that
                // names it wakes this waiter.
                place.aim(owner.shared_id());
            }
        }
        let lease = (self.policy.lease.as_millis() as u64, self.policy.fencing);
        match &self.ask {
            Ask::One { writer } => {
                let (keys, writer) = (&self.keys, writer.clone());
                let who = self.named_at_once();
                let one = NameAttempt::new(self.inner, keys, owner, lease, writer, bounded, who);
                within(self.deadline, bounded, attempt::run(one)).await
            }
            Ask::Set(set) => {
                let who = self.named_at_once();
                let set = SetAttempt::new(self.inner, set, owner, self.policy, who);
                let run = attempt::run(set);
                within(self.deadline, bounded, run).await
            }
        }
    }

    /// The gate every grant of this wait passes before it counts (an attempt's,
    /// or a lock handed over by a release of this client), so that no chain of
    /// this client is given a lock that another chain of it still believes it
    /// holds:
    ///
    /// - when a connection of the client found a server replaced (a restart, a
    ///   failover), it waits until every hold there was checked and the lost ones
    ///   told (`Links::settled`);
    /// - when the grant contradicts a hold of another chain of this client (the
    ///   lock held by it in a way the grant's kind excludes,
    ///   `Watchdog::contradicted_by`), the server forgot that hold, whether or not
    ///   the client saw a replacement (a cluster's connection follows a slot to
    ///   its new master on its own): the grant begins the check of every hold
    ///   (`Links::contradicted`), waits for it, and then tells the contradicted
    ///   holds it did not reach (a fixed lease, an unanswered renewal) itself.
    ///
    /// Nothing to wait for is the usual case, and costs a look at a lock and a
    /// lookup of the name in the watchdog's table.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a check it began goes on, and the grant waiting for it
    /// (held by [`wait_for`]) is dropped too, which gives it back.
    pub(super) async fn after_checks(&mut self, owner: &Arc<Owner>) {
        let inner = self.inner;
        if faults::active(Fault::GrantBeforeReplacementCheck) {
            return;
        }
        let contradicted = self.contradicted(owner);
        if contradicted.is_empty() && !inner.links.checking() {
            return;
        }
        if !contradicted.is_empty() {
            tracing::warn!(
                lock.name = %self.keys.display(),
                "distlock: Redis granted a lock that another call chain of this client holds, \
                 so the server no longer had that hold (replaced, failed over, or the lock \
                 deleted); checking every lock held before the grant counts"
            );
            inner.links.contradicted();
        }
        inner.links.settled().await;
        for hold in contradicted {
            inner.watchdog.forgotten(&hold);
        }
    }

    /// The holds of other chains of this client that a grant of this wait to
    /// `owner` contradicts (see [`Wait::after_checks`]): of its one name; of a
    /// set, of the names it does not re-enter.
    fn contradicted(&self, owner: &Owner) -> Vec<Arc<crate::hold::Hold>> {
        let watchdog = &self.inner.watchdog;
        match &self.ask {
            Ask::One { writer } => watchdog.contradicted_by(&self.keys, owner, writer.as_deref()),
            Ask::Set(set) => set
                .keys
                .iter()
                .zip(&set.held)
                .filter(|(_, held)| held.is_none())
                .flat_map(|(keys, _)| watchdog.contradicted_by(keys, owner, None))
                .collect(),
        }
    }

    /// The wait of `owner` was granted: the place its writer kept is gone with
    /// the script, and the next local waiter asks now if another reader or permit
    /// may be had at once.
    pub(super) fn won(&mut self, owner: &Arc<Owner>) {
        if self
            .kept_place
            .as_ref()
            .is_some_and(|kept| Arc::ptr_eq(kept, owner))
        {
            self.kept_place = None;
        }
        if let Some(place) = &mut self.place {
            place.leave_holding(self.keys.kind.admits_many());
        }
    }

    /// Whether this waiter is first among this client's waiters for its name
    /// (a set without a place yet is).
    pub(super) fn is_first(&self) -> bool {
        self.place.as_ref().is_none_or(Place::is_first)
    }

    /// Whether a release of this client claimed this waiter's offer: then no
    /// attempt of its own until the release says what came of it.
    pub(super) fn offer_claimed(&self) -> bool {
        self.place
            .as_ref()
            .is_some_and(|place| !place.take_back_offer())
    }
}

impl Drop for Wait<'_> {
    /// A wait that ends without the lock (given up, out of time, dropped) takes back
    /// the place its writer kept in Redis; any wait that published wait-for records
    /// deletes them.
    fn drop(&mut self) {
        if let Some(owner) = self.kept_place.take() {
            release::take_back_place(self.inner, &self.keys, &owner);
        }
        // Dropping the beat deletes the wait-for records.
        drop(self.deadlock.take());
    }
}

/// `run`, bounded by the wait's deadline when there is time left (a zero wait
/// waits for the one answer); `Err(None)` when the deadline came first.
async fn within<T>(
    deadline: Instant,
    bounded: bool,
    run: impl std::future::Future<Output = Result<T, LockError>>,
) -> Result<T, Option<LockError>> {
    if !bounded {
        return run.await.map_err(Some);
    }
    match tokio::time::timeout_at(deadline, run).await {
        Ok(result) => result.map_err(Some),
        Err(_) => Err(None),
    }
}

/// How long a waiter pauses after a transient failure before asking again.
pub(crate) const TRANSIENT_PAUSE: Duration = Duration::from_millis(100);

/// How long a waiter sleeps when the holder's lease has no expiry to cap it.
const UNKNOWN_LEASE_CAP: Duration = Duration::from_secs(1);

/// How long the waiters behind the first of a queue go, at most, without one of the
/// queue asking Redis: they never ask out of turn, so this bounds what a lost
/// release message costs them. A waiter that becomes first without ever having
/// asked looks within this long too.
pub(crate) const QUEUE_LOOK: Duration = Duration::from_secs(1);

impl Wait<'_> {
    /// Waits for this waiter's turn to ask Redis, within the wait: until a release
    /// message wakes it, or, once it is first, until the holder's lease may have
    /// ended (`pttl_ms`, from its last busy answer; `None` when it never asked).
    /// Before that, makes sure that release messages reach the queue (a release
    /// before the subscription was confirmed reached nobody: the first waiter then
    /// asks again). The error when the wait ended with the waiter still behind
    /// others.
    ///
    /// While it waits, one name's waiter offers itself (as `owner`) to this
    /// client's releases of the lock, which may hand it the lock (`handoff.rs`).
    pub(super) async fn wait_turn(
        &mut self,
        owner: &Arc<Owner>,
        pttl_ms: Option<i64>,
    ) -> Result<(), LockError> {
        let _waiter = match self.ask {
            Ask::One { .. } => Some(self.contended().waiter()),
            Ask::Set(_) => None,
        };
        self.take_place();
        let place = self
            .place
            .as_ref()
            .ok_or_else(|| self.busy(Instant::now()))?;
        if Instant::now() < self.deadline && !place.is_listening() {
            if let Ok(Err(err)) = tokio::time::timeout_at(self.deadline, place.listen()).await {
                tracing::debug!(error = %err, "distlock: could not subscribe; waiting for the lease instead");
            }
        }
        if self.hands_off {
            place.offer(Offer {
                owner: owner.clone(),
                lease_ms: self.policy.lease.as_millis() as u64,
                fencing: self.policy.fencing,
                who: self.named_at_once().cloned(),
            });
        }
        let look_at = pttl_ms.map(|pttl_ms| Instant::now() + sleep_hint(pttl_ms));
        let span = tracing::trace_span!("distlock.wait", lock.pttl_ms = tracing::field::Empty);
        if let Some(pttl_ms) = pttl_ms {
            span.record("lock.pttl_ms", pttl_ms);
        }
        let turn = loop {
            let Some(place) = &self.place else {
                break Turn::OutOfTime;
            };
            let turn = place.turn(look_at, self.deadline, QUEUE_LOOK);
            let Some(check_at) = self.deadlock.as_ref().map(|watch| watch.next()) else {
                break turn.instrument(span).await;
            };
            // The turn is safe to drop: a wake-up it had stays in the place.
            tokio::select! {
                turn = turn.instrument(span.clone()) => break turn,
                () = tokio::time::sleep_until(check_at) => self.look_for_deadlock().await?,
            }
        };
        match turn {
            Turn::Ask => Ok(()),
            Turn::OutOfTime => Err(self.busy(Instant::now())),
        }
    }

    /// A set: a place in the queue of the name found busy (the one it has, if that
    /// name is the same as before; a new one else, see [`Wait::was_busy`]).
    fn take_place(&mut self) {
        if self.place.is_none() {
            self.place = Some(self.inner.waiters.enqueue(self.keys.channel(), false));
        }
    }

    /// Looks for a deadlock (`ops/watch.rs`); a chain that holds no lock of this
    /// client never looks again.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: records written stay until the wait's end deletes them (or
    /// they expire).
    async fn look_for_deadlock(&mut self) -> Result<(), LockError> {
        let Some(watch) = self.deadlock.as_mut() else {
            return Ok(());
        };
        let inner = self.inner;
        let new_id = move || inner.next_owner().shared_id();
        if !watch.look(&self.keys, &self.origin, &new_id).await? {
            self.deadlock = None;
        }
        Ok(())
    }
}

/// A new acquisition: attempts until granted, waiting for releases in between,
/// until the wait runs out. With tasks of this client ahead in the queue, it sends
/// nothing until its turn comes (a zero wait then fails at once, as busy).
///
/// # Cancel safety
///
/// Cancel safe: every attempt runs under `attempt::run` (what a dropped
/// attempt took is given back), a grant not yet claimed gives its holds back
/// when dropped, and a place kept in Redis is taken back.
pub(super) async fn wait_for<'a>(wait: &mut Wait<'a>) -> Result<Grant<'a>, LockError> {
    let mut owner = wait.inner.next_owner();
    // The holder's lease as the last busy answer told it.
    let mut pttl = None;
    if !wait.is_first() {
        wait.wait_turn(&owner, pttl).await?;
    }
    loop {
        wait.inner.check_open(|| wait.keys.display())?;
        let Some((sent, answer)) = next_answer(wait, &mut owner, pttl).await? else {
            continue;
        };
        match answer {
            Answer::Granted(grant) => {
                // A grant counts only once the holds on a server found replaced
                // were checked (`Links::settled`), and then only if it is still
                // in time; dropped before (the wait dropped meanwhile, or too
                // late), it gives its holds back.
                wait.after_checks(&owner).await;
                if grant::in_time(wait.policy, grant.sent()) {
                    wait.won(&owner);
                    let (granted, sent) = grant.claim();
                    return Ok(Grant {
                        inner: wait.inner,
                        owner,
                        origin: wait.origin.clone(),
                        policy: wait.policy,
                        sent,
                        granted,
                        who: wait.who.clone(),
                    });
                }
                // The reply came too late to count on: pause before asking again,
                // rather than spin on a server that answers slower than the lease,
                // and ask under a fresh owner id, so that the next attempt never
                // overlaps the give-back of this one.
                tracing::debug!(lock.name = %wait.keys.display(), "distlock: acquire reply arrived after the lease; retrying");
                drop(grant);
                pause(wait, &mut owner, None).await?;
            }
            Answer::Busy { index, pttl_ms } => {
                wait.was_busy(index, &owner, sent);
                wait.short_of_quorum = None;
                wait.seen_held = true;
                pttl = Some(pttl_ms);
                wait_or_give_up(wait, &owner, pttl).await?;
            }
            Answer::NoQuorum {
                granted,
                held,
                retry_ms,
            } => {
                wait.was_busy(0, &owner, sent);
                wait.short_of_quorum = Some((granted, held));
                wait.seen_held |= held > 0;
                pttl = Some(retry_ms);
                wait_or_give_up(wait, &owner, pttl).await?;
            }
            Answer::HeldAlready { .. } => {
                // Never added to (see `acquire.lua`), and given back by the
                // attempt: ask again under an owner id that holds nothing.
                owner = wait.inner.next_owner();
            }
            Answer::Refused(err) => return Err(err),
        }
    }
}

/// The next answer for the wait: what came of the release of this client that
/// claimed the waiter's offer, or of an attempt of `owner` (with the time it was
/// sent); `None` when there is none yet and the loop goes round again (a declined
/// hand-off, a transient failure retried under a new owner id).
async fn next_answer(
    wait: &mut Wait<'_>,
    owner: &mut Arc<Owner>,
    pttl: Option<i64>,
) -> Result<Option<(Instant, Answer)>, LockError> {
    if wait.offer_claimed() {
        // No attempt of our own until the release says what came of it.
        return match wait.handed().await? {
            Delivery::Granted(grant) => Ok(Some((grant.sent(), Answer::Granted(grant)))),
            Delivery::Declined { ask: false } => {
                wait_or_give_up(wait, owner, pttl).await?;
                Ok(None)
            }
            Delivery::Declined { ask: true } => Ok(None),
            // Whatever the old owner id may have been handed is given back by the
            // releaser: ask under a new one.
            Delivery::Unknown => {
                *owner = wait.inner.next_owner();
                Ok(None)
            }
        };
    }
    let sent = Instant::now();
    match wait.attempt(owner, sent).await {
        Ok(answer) => {
            wait.retried_after = None;
            Ok(Some((sent, answer)))
        }
        // The wait ended during an attempt.
        Err(None) => Err(wait.ran_out()),
        Err(Some(err)) if err.may_pass() && Instant::now() + TRANSIENT_PAUSE < wait.deadline => {
            // A failover, a restart, a dropped connection, replicas resyncing: wait
            // and ask again, under a fresh owner id (the old one's attempt is
            // settled in the background).
            tracing::debug!(error = %err, lock.name = %wait.keys.display(), "distlock: acquire failed; retrying within the wait");
            pause(wait, owner, Some(err)).await?;
            Ok(None)
        }
        Err(Some(err)) => Err(err),
    }
}

/// Pauses for [`TRANSIENT_PAUSE`] before asking again under a fresh owner id,
/// after `failure` (one that may pass), or after a grant too late to count on:
/// the error instead when the wait ends before the pause would.
async fn pause(
    wait: &mut Wait<'_>,
    owner: &mut Arc<Owner>,
    failure: Option<LockError>,
) -> Result<(), LockError> {
    match failure {
        Some(err) => wait.retried_after = Some(err),
        None if Instant::now() + TRANSIENT_PAUSE >= wait.deadline => return Err(wait.ran_out()),
        None => {}
    }
    *owner = wait.inner.next_owner();
    tokio::time::sleep(TRANSIENT_PAUSE).await;
    Ok(())
}

/// How long to sleep at most for a holder whose lease has `pttl_ms` left: until it
/// ends; a lease about to end (0 ms left, as PTTL rounds) is worth a look in a
/// millisecond, not the cap for an unknown lease (no expiry, or no answer).
pub(crate) fn sleep_hint(pttl_ms: i64) -> Duration {
    u64::try_from(pttl_ms)
        .ok()
        .map_or(UNKNOWN_LEASE_CAP, |ms| Duration::from_millis(ms.max(1)))
}

/// After a busy answer (whose lease is `pttl_ms`), or a release that did not hand
/// the lock over: the error when the wait is over, else a wait for the turn to ask
/// again.
async fn wait_or_give_up(
    wait: &mut Wait<'_>,
    owner: &Arc<Owner>,
    pttl_ms: Option<i64>,
) -> Result<(), LockError> {
    let now = Instant::now();
    if now >= wait.deadline {
        return Err(wait.busy(now));
    }
    wait.wait_turn(owner, pttl_ms).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Observed: a holder's lease with 0 ms left (PTTL rounds down) was taken for an
    /// unknown lease, and the waiter slept a whole second past its end.
    #[test]
    fn a_lease_about_to_end_is_looked_at_again_at_once() {
        assert_eq!(sleep_hint(0), Duration::from_millis(1));
        assert_eq!(sleep_hint(250), Duration::from_millis(250));
        assert_eq!(sleep_hint(-1), UNKNOWN_LEASE_CAP, "no expiry");
    }
}
