//! Taking a lock: a new acquisition waits (attempt, then sleep until a release
//! message or the holder's lease, then attempt again) within its wait; a re-entry
//! adds one hold to the chain's hold, without waiting.
//!
//! A new acquisition takes its place in the queue of this client's waiters for the
//! name before anything else (see `subscriber.rs`), and asks Redis only when it is
//! first: at once when nobody of this client asked before it, else when its turn
//! comes. So the tasks of one client get a lock in the order they asked for it, and
//! a task that has just released a lock does not take it back from those that
//! waited. A re-entry never queues.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::{withdraw, Attempt, Outcome};
use crate::context::LockContext;
use crate::deadlock::{Beating, Waiting};
use crate::error::{LockError, LostReason};
use crate::faults::{self, Fault};
use crate::guard::LockGuard;
use crate::handoff::{Delivery, Offer};
use crate::hold::{HeldLock, Hold, HoldState};
use crate::inner::Inner;
use crate::keys::{Kind, LockKeys};
use crate::lease::{lease_millis, validity};
use crate::metrics::{self, Tag};
use crate::order_shared;
use crate::origin::Origin;
use crate::owner::Owner;
use crate::release;
use crate::scripts::{unexpected_reply, StoredKind};
use crate::subscriber::{Place, Turn};

/// How long a waiter pauses after a transient failure before asking again.
pub(crate) const TRANSIENT_PAUSE: Duration = Duration::from_millis(100);

/// How long a waiter sleeps when the holder's lease has no expiry to cap it.
const UNKNOWN_LEASE_CAP: Duration = Duration::from_secs(1);

/// How long the waiters behind the first of a queue go, at most, without one of the
/// queue asking Redis: they never ask out of turn, so this bounds what a lost
/// release message costs them. A waiter that becomes first without ever having
/// asked looks within this long too.
pub(crate) const QUEUE_LOOK: Duration = Duration::from_secs(1);

/// What a lock request asked for; `None` takes the client's default.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) fencing: Option<bool>,
    /// The request's own `deadlock_check_after`.
    pub(crate) deadlock_after: Option<Duration>,
    /// The request's own `max_hold`.
    pub(crate) max_hold: Option<Duration>,
}

/// How a new acquisition holds the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mode {
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
    pub(crate) fencing: bool,
    /// How long the watchdog renews a new hold (`None`: as long as it is held).
    pub(crate) max_hold: Option<Duration>,
}

/// Takes the lock of `keys` for the current call chain: re-enters it when the chain
/// holds it through this client, else acquires it, waiting as `options` say.
pub(crate) async fn acquire(
    inner: Arc<Inner>,
    keys: Result<Arc<LockKeys>, LockError>,
    options: Options,
    origin: Origin,
) -> Result<LockGuard, LockError> {
    let keys = keys?;
    inner.check_open(|| keys.display())?;
    let start = Instant::now();
    let (mut mode, deadline) = settle_options(&inner, options, start)?;
    check_kind(&inner, &keys, options, &mut mode)?;
    let context = LockContext::current();
    let span = tracing::info_span!(
        "distlock.acquire",
        lock.name = %keys.display(),
        lock.outcome = tracing::field::Empty,
        lock.waited_ms = tracing::field::Empty,
        lock.hold_count = tracing::field::Empty,
    );
    async move {
        let chain = Chain::find(&context, &inner, &keys);
        let reentry = matches!(chain, Chain::Holds(_));
        let result = match chain {
            Chain::Holds(held) => {
                let fencing_asked = options.fencing == Some(true);
                reenter(&inner, held, &context, mode, fencing_asked).await
            }
            Chain::HoldsRead => Err(LockError::UpgradeNotAllowed {
                name: keys.display(),
            }),
            Chain::HoldsWrite(writer) => {
                let wait = Wait::new(&inner, keys.clone(), start, deadline, Some(writer), origin);
                acquire_new(wait, &context, mode).await
            }
            Chain::Free => match check_order(&inner, &context, &keys, &origin).await {
                Ok(()) => {
                    let mut wait = Wait::new(&inner, keys.clone(), start, deadline, None, origin);
                    wait.deadlock = Watch::new(&inner, &context, options, start);
                    acquire_new(wait, &context, mode).await
                }
                Err(err) => Err(err),
            },
        };
        let result = match result {
            Err(err) => Err(name_the_holder(&inner, std::slice::from_ref(&keys), err).await),
            ok => ok,
        };
        let span = tracing::Span::current();
        span.record("lock.waited_ms", start.elapsed().as_millis() as u64);
        span.record("lock.outcome", outcome(&result, reentry));
        if let Ok(guard) = &result {
            span.record("lock.hold_count", guard.hold_count());
        }
        result
    }
    .instrument(span)
    .await
}

/// What an acquisition came to, as its span records it: `acquired`, `re-entered`,
/// `timed out`, `lost` (a re-entry of a lock lost meanwhile), `deadlock`, or
/// `error`.
fn outcome(result: &Result<LockGuard, LockError>, reentry: bool) -> &'static str {
    match result {
        Ok(_) if reentry => "re-entered",
        Ok(_) => "acquired",
        Err(err) if err.is_timeout() => "timed out",
        Err(err) if err.is_lost() => "lost",
        Err(LockError::Deadlock { .. }) => "deadlock",
        Err(_) => "error",
    }
}

/// How long a timed-out waiter may take to read who holds the lock, for its error.
const HOLDER_LOOK: Duration = Duration::from_millis(250);

/// `err`, and when it is a [`LockError::Timeout`] on one of the locks of `keys`,
/// with the holder that its client wrote (one read; left out when it does not come
/// within [`HOLDER_LOOK`], or the holder wrote nothing): the writer or exclusive
/// holder first.
///
/// # Cancel safety
///
/// Read-only: dropping the future changes nothing.
pub(crate) async fn name_the_holder(
    inner: &Arc<Inner>,
    keys: &[Arc<LockKeys>],
    mut err: LockError,
) -> LockError {
    let LockError::Timeout {
        name,
        holder: slot @ None,
        ..
    } = &mut err
    else {
        return err;
    };
    let Some(keys) = keys.iter().find(|keys| keys.display() == *name) else {
        return err;
    };
    if let Ok(Ok(view)) = tokio::time::timeout(HOLDER_LOOK, inner.view(keys)).await {
        *slot = view
            .holders
            .into_iter()
            .filter(|holder| holder.info.is_some())
            .max_by_key(|holder| matches!(holder.mode, 0 | 2 | 4))
            .and_then(|holder| holder.info)
            .map(Box::new);
    }
    err
}

/// The least `deadlock_check_after`: a walk costs round trips.
const MIN_DEADLOCK_AFTER: Duration = Duration::from_millis(10);

/// Checks a `deadlock_check_after`.
pub(crate) fn check_deadlock_after(after: Duration) -> Result<(), LockError> {
    if after < MIN_DEADLOCK_AFTER {
        return Err(LockError::invalid_option(
            "deadlock_check_after",
            format!(
                "{after:?} is too short: each check reads Redis; use 10ms or more (1s is the \
                 default), or `None` on the builder to turn detection off"
            ),
        ));
    }
    Ok(())
}

/// A waiter's deadlock detection (see `deadlock.rs`): when its chain holds locks,
/// on one endpoint, with a threshold. What it publishes is worked out at its first
/// look, so that an acquisition that never waits that long pays nothing for it.
struct Watch {
    /// The chain whose locks the records name.
    context: LockContext,
    /// Made at the first look; `None` before.
    waiting: Option<Waiting>,
    period: Duration,
    /// When to look next.
    next: Instant,
    /// The chain's records, beating from the first look until the wait ends
    /// (dropping it deletes them).
    beating: Option<Beating>,
}

impl Watch {
    fn new(inner: &Inner, context: &LockContext, options: Options, start: Instant) -> Option<Self> {
        let period = options
            .deadlock_after
            .or(inner.config.deadlock_check_after)?;
        if inner.backend.is_redlock() || context.is_empty() {
            return None;
        }
        Some(Self {
            context: context.clone(),
            waiting: None,
            period,
            next: start + period,
            beating: None,
        })
    }

    /// What this waiter publishes and walks from: `None` when its chain holds no
    /// lock of this client (then nothing is ever looked for).
    fn waiting(&mut self, inner: &Inner, keys: &LockKeys) -> Option<&Waiting> {
        if self.waiting.is_none() {
            let mut owners: Vec<Arc<str>> = self
                .context
                .locks()
                .filter(|held| held.hold.client_id == inner.id)
                .map(|held| held.hold.owner.shared_id())
                .collect();
            owners.sort_unstable();
            owners.dedup();
            if owners.is_empty() {
                return None;
            }
            self.waiting = Some(Waiting {
                wait_id: inner.next_owner().shared_id(),
                owners,
                lock: keys.lock.clone(),
                namespace: inner.config.namespace.as_str().into(),
            });
        }
        self.waiting.as_ref()
    }
}

/// Checks the order of a new acquisition of `keys`, asked for from `origin`,
/// against the other locks of this client that the chain holds (see `order.rs`),
/// and, when the client shares its lock order, records the edges new to it in the
/// namespace's graph (`order_shared.rs`).
///
/// # Cancel safety
///
/// Safe to drop: the local check is done at once, and the shared graph's answer
/// is only advice (see `order_shared::record`).
pub(crate) async fn check_order(
    inner: &Arc<Inner>,
    context: &LockContext,
    keys: &LockKeys,
    origin: &Origin,
) -> Result<(), LockError> {
    if origin.in_set || context.is_empty() || !inner.order.is_on() {
        return Ok(());
    }
    let holding = context
        .locks()
        .filter(|held| held.hold.client_id == inner.id && held.hold.keys.lock != keys.lock)
        .map(|held| {
            let hold = &held.hold;
            (hold.class(), hold.origin.site)
        });
    let new = inner
        .order
        .check(holding, &origin.class(&keys.name), origin.site)?;
    order_shared::record(inner, new).await
}

/// What the call chain holds of the lock a request asks for.
enum Chain {
    /// A hold of the same kind: the request re-enters it.
    Holds(HeldLock),
    /// A read hold, and the request asks for the write lock: an upgrade, refused.
    HoldsRead,
    /// The write hold (its owner id), and the request asks for a read hold: a
    /// downgrade, a new hold that enters beside the chain's writer.
    HoldsWrite(Arc<str>),
    /// Nothing of it (through this client).
    Free,
}

impl Chain {
    fn find(context: &LockContext, inner: &Inner, keys: &LockKeys) -> Self {
        let holds = context
            .locks()
            .filter(|held| held.hold.client_id == inner.id && held.hold.keys.lock == keys.lock);
        let wanted = keys.kind;
        let mut reads = false;
        // Innermost first: a downgraded chain holds a read hold inside its write hold.
        for held in holds {
            let kind = held.hold.keys.kind;
            match (kind, wanted) {
                (Kind::Read, Kind::Read) | (Kind::Write, Kind::Write) => {
                    return Self::Holds(held.clone())
                }
                (Kind::Write, Kind::Read) => return Self::HoldsWrite(held.hold.owner.shared_id()),
                (Kind::Read, Kind::Write) => reads = true,
                // A plain lock, or a permit (whose count the script checks).
                _ if kind.same_lock(wanted) => return Self::Holds(held.clone()),
                _ => {}
            }
        }
        if reads {
            Self::HoldsRead
        } else {
            Self::Free
        }
    }
}

/// Checks what the request's kind allows: fencing tokens for the plain lock and
/// write holds only (a client's default of fencing leaves read holds and permits
/// without one; asking for it on them is refused), semaphores and fair locks not on
/// Redlock.
fn check_kind(
    inner: &Inner,
    keys: &LockKeys,
    options: Options,
    mode: &mut Mode,
) -> Result<(), LockError> {
    let fences = matches!(keys.kind, Kind::Exclusive | Kind::Write | Kind::Fair);
    if !fences {
        if options.fencing == Some(true) {
            return Err(LockError::invalid_option(
                "fencing",
                format!(
                    "a {} takes no fencing token: several owners hold it at once, so a token \
                     could not tell a stale holder from a live one; fence the writes under the \
                     write lock (`write_lock(..).fencing(true)`) or a plain lock",
                    keys.kind.describe()
                ),
            ));
        }
        mode.fencing = false;
    }
    match unsupported(inner, keys.kind) {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// The refusal of a kind of lock the client's backend cannot keep safe: semaphores
/// and fair locks on Redlock.
pub(crate) fn unsupported(inner: &Inner, kind: Kind) -> Option<LockError> {
    if !inner.backend.is_redlock() {
        return None;
    }
    match kind {
        Kind::Permit { .. } => Some(LockError::UnsupportedKind {
            kind: "semaphores",
            backend: "Redlock",
            reason: "each node counts the permits it granted, and owners that each hold a \
                     majority of nodes can together hold more permits than the semaphore has; \
                     use a single server, Sentinel or a cluster for semaphores",
        }),
        Kind::Fair => Some(LockError::UnsupportedKind {
            kind: "fair locks",
            backend: "Redlock",
            reason: "each node keeps its own queue, in the order requests reached it, so the \
                     nodes can disagree on who is next and no waiter wins a majority; use a \
                     single server, Sentinel or a cluster for fair locks",
        }),
        _ => None,
    }
}

/// The request's options with the client's defaults filled in and checked.
pub(crate) fn settle_options(
    inner: &Inner,
    options: Options,
    start: Instant,
) -> Result<(Mode, Instant), LockError> {
    let (lease, watchdog) = match options.lease {
        Some(lease) => (Duration::from_millis(lease_millis("lease", lease)?), false),
        None => (inner.config.default_lease, true),
    };
    let wait = options.wait.unwrap_or(inner.config.default_wait);
    let deadline = start.checked_add(wait).ok_or_else(|| {
        LockError::invalid_option(
            "wait",
            format!("{wait:?} is too long to wait (the deadline overflows); use a shorter wait"),
        )
    })?;
    if let Some(after) = options.deadlock_after {
        check_deadlock_after(after)?;
    }
    let fencing = options.fencing.unwrap_or(inner.config.fencing);
    if fencing {
        inner.fencing_asked();
    }
    if fencing && inner.backend.is_redlock() {
        return Err(LockError::invalid_option(
            "fencing",
            "fencing tokens are not available on Redlock; use a single server, Sentinel or a \
             cluster where fencing matters",
        ));
    }
    let max_hold = options.max_hold.or(inner.config.max_hold);
    if let Some(max_hold) = max_hold {
        check_max_hold(max_hold, lease, watchdog)?;
    }
    let mode = Mode {
        lease,
        watchdog,
        fencing,
        max_hold,
    };
    Ok((mode, deadline))
}

/// Checks a `max_hold` against the lease it bounds: not zero; under a watchdog,
/// at least one renewal period (a third of the lease), or it would end the hold
/// before the first renewal; a fixed lease must not outlast it.
pub(crate) fn check_max_hold(
    max_hold: Duration,
    lease: Duration,
    watchdog: bool,
) -> Result<(), LockError> {
    if max_hold.is_zero() {
        return Err(LockError::invalid_option(
            "max_hold",
            "zero: a lock must be allowed to be held a while; give how long the longest \
             holder may keep it (such as 5 min), or leave `max_hold` out for no bound",
        ));
    }
    if watchdog && max_hold < lease / 3 {
        return Err(LockError::invalid_option(
            "max_hold",
            format!(
                "{max_hold:?} is shorter than the watchdog's renewal period ({:?}, a third of \
                 the {lease:?} lease); use a max_hold of at least {:?}, or a shorter lease",
                lease / 3,
                lease / 3
            ),
        ));
    }
    if !watchdog && lease > max_hold {
        return Err(LockError::invalid_option(
            "max_hold",
            format!(
                "the fixed lease of {lease:?} outlasts the max_hold of {max_hold:?}; a fixed \
                 lease is never renewed, so give a lease no longer than max_hold (or leave \
                 max_hold out)"
            ),
        ));
    }
    Ok(())
}

/// One new acquisition's wait: its deadline, its place among the local waiters,
/// and what the last attempt said.
struct Wait<'a> {
    inner: &'a Arc<Inner>,
    keys: Arc<LockKeys>,
    start: Instant,
    deadline: Instant,
    /// The place in the queue of this client's waiters for the lock, taken at once.
    place: Place,
    /// Redlock: the last attempt got too few grants (granted, held by another owner).
    short_of_quorum: Option<(u64, u64)>,
    /// The failure of the last attempt, when it was one that may pass.
    retried_after: Option<LockError>,
    /// Whether an attempt found the lock held by another owner: only then is a wait
    /// that runs out a [`LockError::Timeout`], not an outage.
    seen_held: bool,
    /// Whether an attempt was sent.
    asked: bool,
    /// Whether this client's releases may hand the lock to its waiters: one
    /// endpoint, no replica acknowledgements, a plain lock.
    hands_off: bool,
    /// For a read hold beside the chain's own write hold (a downgrade): the
    /// writer's owner id.
    writer: Option<Arc<str>>,
    /// The owner whose place a writer keeps in Redis (`#wait:<owner>`, see `lua/lock.lua`): taken
    /// back when the wait ends without the lock.
    kept_place: Option<Arc<Owner>>,
    /// Where the request was made: the hold keeps it.
    origin: Origin,
    /// Deadlock detection, for a chain that holds other locks.
    deadlock: Option<Watch>,
    /// What the client writes of this waiter once it holds the lock (`who.rs`).
    who: Arc<str>,
    /// Its metrics' labels, once it had to wait.
    tag: Option<Tag>,
    /// Where this same client took the lock, when another of its call chains held
    /// it as the wait began.
    held_here: Option<String>,
}

impl<'a> Wait<'a> {
    fn new(
        inner: &'a Arc<Inner>,
        keys: Arc<LockKeys>,
        start: Instant,
        deadline: Instant,
        writer: Option<Arc<str>>,
        origin: Origin,
    ) -> Self {
        // Behind the tasks of this client that asked for the lock before us, ahead
        // of any that ask after: no round trip, so a lock taken without waiting
        // costs nothing more.
        let place = inner
            .subscriber
            .enqueue(keys.channel(), keys.kind == Kind::Fair);
        let hands_off =
            !inner.backend.is_redlock() && inner.config.replicas.is_none() && keys.kind.is_plain();
        Self {
            inner,
            keys,
            start,
            deadline,
            place,
            short_of_quorum: None,
            retried_after: None,
            seen_held: false,
            asked: false,
            hands_off,
            writer,
            kept_place: None,
            who: inner.who.who(&origin.site_text()).into(),
            origin,
            deadlock: None,
            tag: None,
            held_here: None,
        }
    }

    /// The labels of this wait's metrics; the first call counts it as contended, and
    /// notes whether another call chain of this same client holds the lock (said
    /// once per client at WARN, and in the wait's timeout).
    fn contended(&mut self) -> &Tag {
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
            let tag = Tag::new(&self.inner.backend, &self.keys, &self.origin);
            metrics::contended(&tag);
            tag
        })
    }

    /// The wait ran out with the lock held by others: a timeout (counted).
    fn timeout(&self, waited: Duration) -> LockError {
        metrics::timed_out(&Tag::new(&self.inner.backend, &self.keys, &self.origin));
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
    async fn handed(&mut self) -> Result<Delivery, LockError> {
        match tokio::time::timeout_at(self.deadline, self.place.delivery()).await {
            Ok(delivery) => Ok(delivery),
            Err(_) => Err(self.busy(Instant::now())),
        }
    }

    /// A busy answer to the attempt of `owner` sent at `sent`: a writer that stays
    /// kept its place in Redis under that owner id (a place kept under an earlier
    /// one, after a lost reply, is taken back now).
    fn kept_place_of(&mut self, owner: &Arc<Owner>, sent: Instant) {
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
    fn ran_out(&mut self) -> LockError {
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
    fn busy(&self, now: Instant) -> LockError {
        match self.short_of_quorum {
            Some((granted, held)) => LockError::QuorumNotReached {
                got: usize::try_from(granted).unwrap_or(usize::MAX),
                needed: self.inner.backend.quorum(),
                held_elsewhere: usize::try_from(held).unwrap_or(usize::MAX),
            },
            None => self.timeout(now - self.start),
        }
    }

    /// Runs one attempt, bounded by the wait (a server that does not answer in time,
    /// paused or overloaded, is a lock not had within the wait; a request cut short
    /// is finished, and its hold given back, in the background). `Err(None)`: the
    /// wait ended during the attempt.
    async fn attempt(
        &mut self,
        owner: &Arc<Owner>,
        mode: Mode,
        sent: Instant,
    ) -> Result<Outcome, Option<LockError>> {
        // A wake-up before this attempt is used up by it: its reply reflects the release.
        self.place.rearm();
        if self.keys.kind == Kind::Fair {
            // Its place in Redis's queue is under this owner id: a release that
            // names it wakes this waiter.
            self.place.aim(owner.shared_id());
        }
        let attempt = Attempt {
            inner: self.inner,
            keys: &self.keys,
            owner,
            lease_ms: mode.lease.as_millis() as u64,
            fencing: mode.fencing,
            reentry: false,
            // The first look at a lock that no waiter of this client listens for
            // (nobody had to wait for it lately): most likely free.
            writer: self.writer.clone(),
            stays: self.deadline > sent,
            who: Some(self.who.clone()),
        };
        self.asked = true;
        let answer = if self.deadline > sent {
            tokio::time::timeout_at(self.deadline, attempt.run()).await
        } else {
            Ok(attempt.run().await)
        };
        match answer {
            Ok(result) => result.map_err(Some),
            Err(_) => Err(None),
        }
    }

    /// Waits for this waiter's turn to ask Redis, within the wait: until a release
    /// message wakes it, or, once it is first, until the holder's lease may have
    /// ended (`pttl_ms`, from its last busy answer; `None` when it never asked).
    /// Before that, makes sure that release messages reach the queue (a release
    /// before the subscription was confirmed reached nobody: the first waiter then
    /// asks again). The error when the wait ended with the waiter still behind
    /// others.
    ///
    /// While it waits, the waiter offers itself (as `owner`, holding as `mode` says)
    /// to this client's releases of the lock, which may hand it the lock (see
    /// `handoff.rs`).
    async fn wait_turn(
        &mut self,
        owner: &Arc<Owner>,
        mode: Mode,
        pttl_ms: Option<i64>,
    ) -> Result<(), LockError> {
        let _waiter = metrics::Waiter::new(self.contended());
        if Instant::now() < self.deadline && !self.place.is_listening() {
            match tokio::time::timeout_at(self.deadline, self.place.listen()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "distlock: could not subscribe; waiting for the lease instead");
                }
                // Out of time: the turn below says what is left to do.
                Err(_) => {}
            }
        }
        if self.hands_off {
            self.place.offer(Offer {
                owner: owner.clone(),
                lease_ms: mode.lease.as_millis() as u64,
                fencing: mode.fencing,
                who: self.who.clone(),
            });
        }
        let look_at = pttl_ms.map(|pttl_ms| Instant::now() + sleep_hint(pttl_ms));
        let span = tracing::trace_span!("distlock.wait", lock.pttl_ms = tracing::field::Empty);
        if let Some(pttl_ms) = pttl_ms {
            span.record("lock.pttl_ms", pttl_ms);
        }
        let turn = loop {
            let turn = self.place.turn(look_at, self.deadline, QUEUE_LOOK);
            let Some(check_at) = self.deadlock.as_ref().map(|watch| watch.next) else {
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

    /// Publishes what this waiter's chain waits for and walks the wait-for graph
    /// (see `deadlock.rs`): `Err(Deadlock)` when it is the victim of a cycle. A
    /// failure to read is logged, and the walk tried again at the next check.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: records written stay until the wait's end deletes them (or
    /// they expire).
    async fn look_for_deadlock(&mut self) -> Result<(), LockError> {
        let Some(watch) = self.deadlock.as_mut() else {
            return Ok(());
        };
        watch.next = Instant::now() + watch.period;
        let Some(waiting) = watch.waiting(self.inner, &self.keys).cloned() else {
            // The chain holds no lock of this client: it cannot be in a cycle.
            self.deadlock = None;
            return Ok(());
        };
        let mut conn = self.inner.backend.first();
        if watch.beating.is_none() {
            watch.beating = Some(waiting.clone().beat(conn.clone()));
        }
        let walked = waiting.walk(&mut conn).await;
        match walked {
            Ok(Some(cycle)) => {
                tracing::warn!(lock.name = %self.keys.display(), cycle = ?cycle, "distlock: deadlock; this request gives up to break it");
                metrics::deadlock(&Tag::new(&self.inner.backend, &self.keys, &self.origin));
                Err(LockError::Deadlock { cycle })
            }
            Ok(None) => Ok(()),
            Err(err) => {
                tracing::debug!(error = %err, "distlock: could not look for a deadlock; looking again later");
                Ok(())
            }
        }
    }

    /// The attempt of `owner` sent at `sent` was granted: the guard of a new hold,
    /// or `None` when the reply came after the lease could have ended (the grant is
    /// given back).
    fn granted(
        &mut self,
        owner: &Arc<Owner>,
        mode: Mode,
        sent: Instant,
        count: u64,
        fence: u64,
        context: &LockContext,
    ) -> Option<LockGuard> {
        let validity = validity(mode.lease);
        let late = Instant::now() >= sent + validity;
        if late && !faults::active(Fault::NoPostReplyLeaseCheck) {
            // The reply came after the lease could have ended: the lock may
            // already belong to someone else. Give it back and try again.
            tracing::debug!(lock.name = %self.keys.display(), "distlock: acquire reply arrived after the lease; retrying");
            let lease_ms = mode.lease.as_millis() as u64;
            release::give_back_later(self.inner, self.keys.clone(), owner.clone(), lease_ms);
            return None;
        }
        let hold = Arc::new(Hold::new(
            self.inner.next_hold_id(),
            self.inner.id,
            self.keys.clone(),
            owner.clone(),
            (fence > 0).then_some(fence),
            self.origin.clone(),
            mode.max_hold,
            Tag::new(&self.inner.backend, &self.keys, &self.origin),
            HoldState {
                guards: 1,
                deadline: sent + validity,
                watchdog: mode.watchdog,
                lease: mode.lease,
                next_renew: sent + mode.lease / 3,
                renew_until: mode.max_hold.map(|max_hold| sent + max_hold),
                closed: false,
            },
        ));
        metrics::acquired(&hold.tag, self.start.elapsed());
        self.inner.watchdog.register(hold.clone());
        // The script dropped the place that this owner kept.
        if self
            .kept_place
            .as_ref()
            .is_some_and(|kept| Arc::ptr_eq(kept, owner))
        {
            self.kept_place = None;
        }
        // Another reader or permit may be had at once: the next waiter asks now.
        self.place.settle(self.keys.kind.admits_many());
        Some(LockGuard::new(
            self.inner,
            HeldLock { hold, count },
            context,
        ))
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

/// A new acquisition: attempts until granted, waiting for releases in between,
/// until the wait runs out. With tasks of this client ahead in the queue, it sends
/// nothing until its turn comes (a zero wait then fails at once, as busy).
async fn acquire_new(
    mut wait: Wait<'_>,
    context: &LockContext,
    mode: Mode,
) -> Result<LockGuard, LockError> {
    let mut owner = wait.inner.next_owner();
    // The holder's lease as the last busy answer told it.
    let mut pttl = None;
    if !wait.place.is_first() {
        wait.wait_turn(&owner, mode, pttl).await?;
    }
    loop {
        wait.inner.check_open(|| wait.keys.display())?;
        if !wait.place.withdraw_offer() {
            // A release of this client claimed the offer: no attempt of our own
            // until it says what came of it.
            match wait.handed().await? {
                Delivery::Granted(grant) => {
                    let (fence, sent) = grant.accept();
                    if let Some(guard) = wait.granted(&owner, mode, sent, 1, fence, context) {
                        return Ok(guard);
                    }
                    // Too late to count on (given back): as after a late reply.
                    if Instant::now() + TRANSIENT_PAUSE >= wait.deadline {
                        return Err(wait.ran_out());
                    }
                    owner = wait.inner.next_owner();
                    tokio::time::sleep(TRANSIENT_PAUSE).await;
                }
                Delivery::Declined { ask: false } => {
                    wait_or_give_up(&mut wait, &owner, mode, pttl).await?;
                    continue;
                }
                Delivery::Declined { ask: true } => {}
                // Whatever the old owner id may have been handed is given back by
                // the releaser: ask under a new one.
                Delivery::Unknown => owner = wait.inner.next_owner(),
            }
            continue;
        }
        let sent = Instant::now();
        let outcome = match wait.attempt(&owner, mode, sent).await {
            Ok(outcome) => outcome,
            // The wait ended during an attempt.
            Err(None) => return Err(wait.ran_out()),
            Err(Some(err))
                if err.may_pass() && Instant::now() + TRANSIENT_PAUSE < wait.deadline =>
            {
                // A failover, a restart, a dropped connection, replicas resyncing: wait
                // and ask again, under a fresh owner id (the old one's attempt is
                // settled in the background).
                tracing::debug!(error = %err, lock.name = %wait.keys.display(), "distlock: acquire failed; retrying within the wait");
                wait.retried_after = Some(err);
                owner = wait.inner.next_owner();
                tokio::time::sleep(TRANSIENT_PAUSE).await;
                continue;
            }
            Err(Some(err)) => return Err(err),
        };
        wait.retried_after = None;
        match outcome {
            Outcome::Acquired { count, fence } => {
                if let Some(guard) = wait.granted(&owner, mode, sent, count, fence, context) {
                    return Ok(guard);
                }
                // The reply came too late to count on: pause before asking again,
                // rather than spin on a server that answers slower than the lease,
                // and ask under a fresh owner id, so that the next attempt never
                // overlaps the give-back of this one.
                if Instant::now() + TRANSIENT_PAUSE >= wait.deadline {
                    return Err(wait.ran_out());
                }
                owner = wait.inner.next_owner();
                tokio::time::sleep(TRANSIENT_PAUSE).await;
            }
            Outcome::Busy { pttl_ms } => {
                wait.kept_place_of(&owner, sent);
                wait.short_of_quorum = None;
                wait.seen_held = true;
                pttl = Some(pttl_ms);
                wait_or_give_up(&mut wait, &owner, mode, pttl).await?;
            }
            Outcome::NoQuorum {
                granted,
                held,
                retry_ms,
            } => {
                wait.kept_place_of(&owner, sent);
                wait.short_of_quorum = Some((granted, held));
                wait.seen_held |= held > 0;
                pttl = Some(retry_ms);
                wait_or_give_up(&mut wait, &owner, mode, pttl).await?;
            }
            Outcome::NotHeld => return Err(unexpected_reply("acquire.lua", &[-1]).into()),
            Outcome::Conflict => {
                return Err(LockError::KeyConflict {
                    name: wait.keys.display(),
                })
            }
            Outcome::OtherMode => {
                return Err(LockError::UpgradeNotAllowed {
                    name: wait.keys.display(),
                })
            }
            Outcome::Permits { permits } => return Err(permits_mismatch(&wait.keys, permits)),
            Outcome::OtherKind { held_as } => return Err(kind_conflict(&wait.keys, held_as)),
        }
    }
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
    mode: Mode,
    pttl_ms: Option<i64>,
) -> Result<(), LockError> {
    let now = Instant::now();
    if now >= wait.deadline {
        return Err(wait.busy(now));
    }
    wait.wait_turn(owner, mode, pttl_ms).await
}

/// A re-entry: one more hold on the chain's hold, one round trip, no waiting. It
/// shows the outermost acquisition's fencing token; asking for fencing on a
/// re-entry of a lock taken without it is refused before anything is sent.
async fn reenter(
    inner: &Arc<Inner>,
    held: HeldLock,
    context: &LockContext,
    mode: Mode,
    fencing_asked: bool,
) -> Result<LockGuard, LockError> {
    let hold = held.hold;
    if fencing_asked && hold.fence.is_none() {
        return Err(LockError::invalid_option(
            "fencing",
            format!(
                "fencing was asked for on a re-entry of lock `{}`, whose outermost \
                 acquisition took no fencing token; ask for fencing on the outermost \
                 acquisition (`.fencing(true)`, or `fencing` on the outer annotated function)",
                hold.display()
            ),
        ));
    }
    if hold.is_lost() {
        return Err(hold.lost_error());
    }
    let sent = Instant::now();
    let lease = if mode.watchdog {
        hold.state().extension(sent)
    } else {
        mode.lease
    };
    check_reentry_lease(&hold, mode, sent)?;
    let attempt = Attempt {
        inner,
        keys: &hold.keys,
        owner: &hold.owner,
        lease_ms: lease.as_millis() as u64,
        fencing: false,
        reentry: true,
        writer: None,
        stays: false,
        who: None,
    };
    match attempt.run().await? {
        Outcome::Acquired { count, .. } => {
            metrics::reentered(&hold.tag);
            inner.watchdog.guard_added(&hold, sent + validity(lease));
            Ok(LockGuard::new(inner, HeldLock { hold, count }, context))
        }
        Outcome::NotHeld | Outcome::Busy { .. } | Outcome::NoQuorum { .. } => {
            hold.mark_lost(
                LostReason::NotHeld,
                "a re-entry found the lock no longer held by its owner",
            );
            Err(hold.lost_error())
        }
        Outcome::Conflict => Err(LockError::KeyConflict {
            name: hold.display().to_owned(),
        }),
        Outcome::OtherMode => Err(LockError::UpgradeNotAllowed {
            name: hold.display().to_owned(),
        }),
        Outcome::Permits { permits } => Err(permits_mismatch(&hold.keys, permits)),
        Outcome::OtherKind { held_as } => Err(kind_conflict(&hold.keys, held_as)),
    }
}

/// The error for a name held as `held_as`, asked for as the kind of `keys`.
pub(crate) fn kind_conflict(keys: &LockKeys, held_as: StoredKind) -> LockError {
    LockError::KindConflict {
        name: keys.display(),
        held_as: held_as.describe(),
        asked: keys.kind.with_article(),
    }
}

/// A fixed lease on a re-entry of a hold bounded by `max_hold` may not keep the
/// lock past the bound: it must end within one of the hold's leases after it, as a
/// hold that is no longer renewed does.
fn check_reentry_lease(hold: &Hold, mode: Mode, sent: Instant) -> Result<(), LockError> {
    let (until, hold_lease) = {
        let state = hold.state();
        (state.renew_until, state.lease)
    };
    let Some(until) = until.filter(|_| !mode.watchdog) else {
        return Ok(());
    };
    let latest = until + hold_lease;
    if sent + mode.lease > latest {
        return Err(LockError::invalid_option(
            "max_hold",
            format!(
                "a fixed lease of {:?} on this re-entry of lock `{}` would keep it past the \
                 outermost acquisition's max_hold; give the re-entry a lease of at most {:?}, \
                 or none (the watchdog's, which stops at max_hold)",
                mode.lease,
                hold.display(),
                latest.saturating_duration_since(sent)
            ),
        ));
    }
    Ok(())
}

/// A semaphore whose holders count `permits` permits, asked for with another count.
fn permits_mismatch(keys: &LockKeys, permits: u32) -> LockError {
    let asked = match keys.kind {
        Kind::Permit { permits } => permits,
        _ => 0,
    };
    LockError::PermitsMismatch {
        name: keys.display(),
        permits,
        asked,
    }
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
