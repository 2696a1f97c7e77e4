//! One new acquisition's wait, for one name or a set taken in one run: what it
//! asks for, its place among this client's waiters, what the last attempt said,
//! and the error when it runs out.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::answer::{answer_of, Answer, Granted};
use super::options::LeasePolicy;
use super::set_run::NameSet;
use crate::attempt::{withdraw, Attempt};
use crate::error::LockError;
use crate::faults::{self, Fault};
use crate::handoff::Delivery;
use crate::hooks::Watch;
use crate::inner::Inner;
use crate::keys::{Kind, LockKeys};
use crate::origin::Origin;
use crate::owner::Owner;
use crate::release;
use crate::series::Tag;
use crate::subscriber::Place;

/// What a wait asks Redis for each time it asks.
pub(super) enum Ask {
    /// One name, of the kind of the wait's keys. `writer`: for a read hold beside
    /// the chain's own write hold (a downgrade), the writer's owner id.
    One { writer: Option<Arc<str>> },
    /// A set of plain locks, taken in one run of `acquire_all.lua` (`set.rs`).
    Set(NameSet),
}

/// A wait that was granted in time: under which owner, by the attempt sent when.
pub(super) struct Won {
    pub(super) owner: Arc<Owner>,
    pub(super) sent: Instant,
    pub(super) granted: Granted,
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
    pub(super) deadlock: Option<Box<dyn Watch>>,
    /// What the client writes of this waiter once it holds the lock (`who.rs`).
    pub(super) who: Arc<str>,
    /// One name: its metrics' labels, once it had to wait.
    pub(super) tag: Option<Tag>,
    /// Where this same client took the lock, when another of its call chains held
    /// it as the wait began.
    pub(super) held_here: Option<String>,
}

impl<'a> Wait<'a> {
    /// The wait of a new acquisition of the lock of `keys`, behind the tasks of
    /// this client that asked for it before, ahead of any that ask after.
    pub(super) fn one(
        inner: &'a Arc<Inner>,
        keys: Arc<LockKeys>,
        policy: LeasePolicy,
        (start, deadline): (Instant, Instant),
        writer: Option<Arc<str>>,
        origin: Origin,
    ) -> Self {
        // No round trip, so a lock taken without waiting costs nothing more.
        let place = inner
            .subscriber
            .enqueue(keys.channel(), keys.kind == Kind::Fair);
        let hands_off =
            !inner.backend.is_redlock() && inner.config.replicas.is_none() && keys.kind.is_plain();
        let ask = Ask::One { writer };
        let mut wait = Self::new(inner, keys, ask, policy, (start, deadline), origin);
        wait.place = Some(place);
        wait.hands_off = hands_off;
        wait
    }

    /// The wait of a set taken in one run: it queues only once a name is busy.
    pub(super) fn set(
        inner: &'a Arc<Inner>,
        set: NameSet,
        policy: LeasePolicy,
        (start, deadline): (Instant, Instant),
        origin: Origin,
    ) -> Self {
        let keys = set.keys(0);
        Self::new(
            inner,
            keys,
            Ask::Set(set),
            policy,
            (start, deadline),
            origin,
        )
    }

    fn new(
        inner: &'a Arc<Inner>,
        keys: Arc<LockKeys>,
        ask: Ask,
        policy: LeasePolicy,
        (start, deadline): (Instant, Instant),
        origin: Origin,
    ) -> Self {
        Self {
            inner,
            keys,
            ask,
            policy,
            start,
            deadline,
            place: None,
            busy: None,
            short_of_quorum: None,
            retried_after: None,
            seen_held: false,
            hands_off: false,
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
                withdraw(self.inner, &self.keys, &earlier);
            }
        }
    }

    /// The wait ran out before an attempt could finish (or be retried): the failure
    /// that made us ask again, if there was one; a timeout if another owner was
    /// seen holding the lock; otherwise Redis did not answer in time, an outage
    /// rather than contention.
    pub(super) fn ran_out(&mut self) -> LockError {
        if let Ask::Set(set) = &self.ask {
            return set.ran_out(self.busy, self.start.elapsed());
        }
        if let Some(err) = self.retried_after.take() {
            return err;
        }
        let waited = self.start.elapsed();
        if self.seen_held {
            return self.timeout(waited);
        }
        LockError::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no timely answer from Redis for lock `{}` within the wait of {waited:?}, and no \
                 other owner was seen holding it",
                self.keys.display()
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
        match &self.ask {
            Ask::One { writer } => {
                let attempt = Attempt {
                    inner: self.inner.clone(),
                    keys: self.keys.clone(),
                    owner: owner.clone(),
                    lease_ms: self.policy.lease.as_millis() as u64,
                    fencing: self.policy.fencing,
                    reentry: false,
                    writer: writer.clone(),
                    stays: bounded,
                    who: Some(self.who.clone()),
                };
                let outcome = within(self.deadline, bounded, attempt.run()).await?;
                Ok(answer_of(&self.keys, outcome))
            }
            Ask::Set(set) => {
                let run = set.invoke(self.inner, owner, self.policy, &self.who).run();
                let reply = within(self.deadline, bounded, run).await?;
                Ok(set.answer(reply))
            }
        }
    }

    /// The grant of `owner` came too late to count on: given back in the
    /// background.
    pub(super) fn give_back_late(&self, owner: &Arc<Owner>) {
        tracing::debug!(lock.name = %self.keys.display(), "distlock: acquire reply arrived after the lease; retrying");
        match &self.ask {
            Ask::One { .. } => {
                let lease_ms = self.policy.lease.as_millis() as u64;
                release::give_back_later(self.inner, self.keys.clone(), owner.clone(), lease_ms);
            }
            Ask::Set(set) => set.give_back_later(self.inner, owner, self.policy, &self.who),
        }
    }

    /// The gate every grant of this wait passes before it counts (an attempt's,
    /// or a lock handed over by a release of this client): when a connection of
    /// the client found a server replaced (a restart, a failover), waits until
    /// every hold there was checked and the lost ones told (`Links::settled`), so
    /// that no chain of this client is given a lock that another chain of it still
    /// believes it holds. Nothing to wait for is the usual case, and costs a look
    /// at a lock.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits, the grant of `owner` is given back in the
    /// background (as one too late to count on).
    pub(super) async fn after_checks(&mut self, owner: &Arc<Owner>) {
        let inner = self.inner;
        if !inner.links.checking() || faults::active(Fault::GrantBeforeReplacementCheck) {
            return;
        }
        let mut unclaimed = Unclaimed {
            wait: self,
            owner,
            armed: true,
        };
        inner.links.settled().await;
        unclaimed.armed = false;
    }

    /// The attempt of `owner` found it holding the name at `index` already, `count`
    /// times, a hold no guard owns: given back in the background (the wait asks
    /// again under a fresh owner id).
    pub(super) fn give_back_held(&self, owner: &Arc<Owner>, index: usize, count: u64) {
        let keys = match &self.ask {
            Ask::One { .. } => self.keys.clone(),
            Ask::Set(set) => set.keys(index),
        };
        let lease_ms = self.policy.lease.as_millis() as u64;
        release::give_back_orphan(self.inner, keys, owner.clone(), lease_ms, count);
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
            place.settle(self.keys.kind.admits_many());
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
            .is_some_and(|place| !place.withdraw_offer())
    }
}

impl Drop for Wait<'_> {
    /// A wait that ends without the lock (given up, out of time, dropped) takes back
    /// the place its writer kept in Redis; any wait that published wait-for records
    /// deletes them.
    fn drop(&mut self) {
        if let Some(owner) = self.kept_place.take() {
            withdraw(self.inner, &self.keys, &owner);
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

/// A grant waiting at [`Wait::after_checks`]: given back if the wait is dropped
/// before the gate opens.
struct Unclaimed<'w, 'a> {
    wait: &'w mut Wait<'a>,
    owner: &'w Arc<Owner>,
    armed: bool,
}

impl Drop for Unclaimed<'_, '_> {
    fn drop(&mut self) {
        if self.armed {
            self.wait.give_back_late(self.owner);
        }
    }
}
