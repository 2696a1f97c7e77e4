//! Every give-back of a hold, in one place: a guard unlocked or dropped, a grant
//! that no guard will own (an abandoned or late acquire), a Redlock node's grant
//! of an attempt that missed the majority. Each case has one function here; all of
//! them go through one release round trip ([`round_trip`]), which runs
//! `release.lua` on every node, retried once under the same operation number after
//! a lost reply, and combines the answers by the majority rules. The script applies
//! each numbered release at most once and, after the final one, remembers it for a
//! while when the client cannot tell otherwise ([`without_record`]), so a retry
//! says `Released` only when the release was applied.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use tokio::time::Instant;

use crate::backend::link::Links;
use crate::backend::{redlock, Conn};
use crate::batch::{Batcher, Item, Successor};
use crate::detach::{log_failure, replay_until_known, spawn, Detached};
use crate::error::{outcome_unknown, transient, LockError, LostReason};
use crate::faults::{self, Fault};
use crate::handoff::{Delivery, Granted, Unclaimed};
use crate::hold::Hold;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::layout::args::Withdraw;
use crate::lease::validity;
use crate::owner::{Op, Owner};
use crate::scripts::{unexpected_reply, ReleaseReply};
use crate::waiters::Claim;

/// [`LockGuard::unlock`](crate::LockGuard::unlock): gives back one hold of `hold`,
/// and says whether the lock was still held.
///
/// # Cancel safety
///
/// The release runs detached: dropped midway, it still finishes in the background
/// (see `LockGuard::unlock`).
pub(crate) async fn unlock(inner: &Arc<Inner>, hold: Arc<Hold>) -> Result<(), LockError> {
    if !inner.watchdog.guard_gone(&hold) {
        // The client's shutdown gave it back already.
        return Err(hold.lost_error());
    }
    // Known lost before the release is sent (its deadline passed, or the loss was
    // reported). Its deadline passing during the release's own round trip is no
    // loss: the server's answer says whether the lock was held when it ran.
    let lost_before = hold.is_lost();
    let call = Detached::new(Box::pin(release_hold(inner.clone(), hold.clone())), |_| {
        Box::pin(async {})
    });
    let reply = match call.await {
        Ok(reply) => reply,
        // A loss known before the release says more than the transport error: the
        // work done under the lock may have overlapped another holder. (A deadline
        // passed since is no loss: the work was done by then; the error says when
        // the lock is free at the latest.)
        Err(_) if lost_before => return Err(hold.lost_error()),
        Err(LockError::Redis(err)) if outcome_unknown(&err) => return Err(unconfirmed(&hold, err)),
        Err(err) => return Err(err),
    };
    match reply {
        ReleaseReply::Released { .. } | ReleaseReply::Handed { .. } if !lost_before => Ok(()),
        ReleaseReply::Released { .. } | ReleaseReply::Handed { .. } => Err(hold.lost_error()),
        ReleaseReply::NotHeld => {
            // The last guard is gone already: counted here, not by `mark_lost`.
            if hold.mark_lost(
                LostReason::NotHeld,
                "the lock was not held by its owner at release",
            ) {
                hold.tag.lost(LostReason::NotHeld.as_str());
            }
            Err(hold.lost_error())
        }
        ReleaseReply::Conflict => Err(LockError::KeyConflict {
            name: hold.display().to_owned(),
        }),
    }
}

/// The error of a release whose outcome is unknown: the lock is free by the end of
/// the lease its last renewal (or acquisition) gave it at the latest, since the
/// hold is no longer renewed.
fn unconfirmed(hold: &Hold, source: redis::RedisError) -> LockError {
    let (deadline, lease) = {
        let state = hold.state();
        (state.deadline, state.lease)
    };
    // The deadline is the client's cautious end of the lease (less the allowance for
    // clock drift); Redis ends it that allowance later at most.
    let ends = deadline + (lease - validity(lease));
    LockError::ReleaseUnconfirmed {
        name: hold.display().to_owned(),
        ends_within: ends.saturating_duration_since(Instant::now()),
        source,
    }
}

/// A guard dropped without `unlock`: its renewal stops now, the release runs in
/// the background.
pub(crate) fn on_drop(inner: &Arc<Inner>, hold: Arc<Hold>) {
    if faults::active(Fault::WatchdogOutlivesDrop) {
        return;
    }
    if !inner.watchdog.guard_gone(&hold) {
        // The client's shutdown gave it back already.
        return;
    }
    if tokio::runtime::Handle::try_current().is_err() {
        tracing::warn!(
            lock.name = %hold.display(),
            "distlock: a lock guard was dropped outside a Tokio runtime; the lock stays held \
             until its lease ends"
        );
        return;
    }
    inner
        .background
        .spawn(log_failure(release_hold(inner.clone(), hold)));
}

/// What [`LockClient::shutdown`](crate::LockClient::shutdown) did: how many holds it
/// gave back (those granted to acquisitions under way at the shutdown included),
/// the locks it could not give back (they stay held until their leases end), each
/// with the error, the locks it left held for the rest of their minimum hold time,
/// and the acquisitions still without an answer when it stopped waiting for them.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) {
/// let report = locks.shutdown().await;
/// for (name, err) in report.not_given_back() {
///     eprintln!("lock `{name}` stays held until its lease ends: {err}");
/// }
/// println!("gave back {} holds", report.given_back());
/// # }
/// ```
#[derive(Debug, Default)]
pub struct ShutdownReport {
    given_back: usize,
    failed: Vec<(String, LockError)>,
    in_flight: usize,
    kept: Vec<(String, Duration)>,
}

impl ShutdownReport {
    /// How many holds (guards, re-entries included) the shutdown gave back.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) {
    /// assert_eq!(locks.shutdown().await.given_back(), 0, "nothing was held");
    /// # }
    /// ```
    pub fn given_back(&self) -> usize {
        self.given_back
    }

    /// The locks that could not be given back, each with its error: they stay held
    /// until their leases end.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) {
    /// let report = locks.shutdown().await;
    /// assert!(report.not_given_back().is_empty(), "{report:?}");
    /// # }
    /// ```
    pub fn not_given_back(&self) -> &[(String, LockError)] {
        &self.failed
    }

    /// How many acquisitions were still waiting for Redis's answer when the
    /// shutdown stopped waiting for them (a server that did not answer within a
    /// final release's memory, four response timeouts): none of them yields a guard
    /// (each fails with [`LockError::ClientShutDown`]),
    /// and each gives back what it is granted when its answer comes, or leaves it to
    /// the lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) {
    /// let report = locks.shutdown().await;
    /// if report.still_in_flight() > 0 {
    ///     eprintln!("{} acquisitions had no answer yet", report.still_in_flight());
    /// }
    /// # }
    /// ```
    pub fn still_in_flight(&self) -> usize {
        self.in_flight
    }

    /// The locks left held for the rest of their minimum hold time
    /// ([`LockGuard::unlock_after_holding`](crate::LockGuard::unlock_after_holding),
    /// the macro's `hold_at_least`), each with how much of it was left, instead of
    /// given back: so that a redeploy right after a job does not let another
    /// instance run it again early. Each lease was extended once to cover what was
    /// left, so the lock ends no earlier than its minimum, and no later than the
    /// minimum or the end of the lease its last renewal gave, whichever comes later
    /// (up to one lease after the shutdown).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let guard = locks.lock("job:nightly-report").await?;
    /// // ... the job, done in a second ...
    /// guard.unlock_after_holding(Duration::from_secs(30)).await?;
    /// let report = locks.shutdown().await;
    /// for (name, left) in report.kept_for_minimum() {
    ///     println!("`{name}` stays held for {left:?} more");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn kept_for_minimum(&self) -> &[(String, Duration)] {
        &self.kept
    }

    /// Whether every hold was given back (or, on purpose, left held for the rest of
    /// its minimum hold time: [`kept_for_minimum`](Self::kept_for_minimum)), and no
    /// acquisition was still waiting for its answer.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) {
    /// if !locks.shutdown().await.is_complete() {
    ///     eprintln!("some locks stay held until their leases end");
    /// }
    /// # }
    /// ```
    pub fn is_complete(&self) -> bool {
        self.failed.is_empty() && self.in_flight == 0
    }
}

/// The client's shutdown: refuses new acquisitions (and ends the waits under way),
/// waits for the acquisitions still under way (each either fails, or gives back at
/// once what it was granted: `acquire/grant.rs`, `admit`), leaves held the holds
/// waiting out a minimum hold time (`minimum.rs`, `keep`), gives back every other hold
/// that its guards still have (each guard's hold, sent at one moment so that they
/// share script runs), marks those holds lost (`LostReason::ShutDown`: a guard still
/// in use learns it, and sends nothing more), and waits for the releases of dropped
/// guards still on their way. Each wait lasts at most a final release's memory.
///
/// # Cancel safety
///
/// Dropped midway, the releases already sent finish in the background; holds not
/// yet given back stay held until their leases end (their guards are closed).
pub(crate) async fn shutdown(inner: &Arc<Inner>) -> ShutdownReport {
    inner.close();
    // Waiters end now, each with `ClientShutDown`, rather than at their next look.
    inner.waiters.shared.recheck_all();
    let patience = inner.config.remember_release();
    if !faults::active(Fault::GrantAfterShutdown) {
        let _ = tokio::time::timeout(patience, inner.attempts.idle()).await;
    }
    let mut report = ShutdownReport::default();
    // Holds waiting out a minimum hold time stay held: their leases cover it.
    let kept = crate::minimum::keep(inner, inner.watchdog.close_all()).await;
    (report.kept, report.failed) = (kept.kept, kept.failed);
    let closed = kept.rest;
    // Told before the releases are sent: once one applies, another owner may take
    // the lock, and no guard may still say it holds it.
    for (hold, _) in &closed {
        hold.mark_lost(LostReason::ShutDown, "the client was shut down");
    }
    let releases = closed.iter().flat_map(|(hold, guards)| {
        (0..*guards).map(move |_| {
            let (inner, hold) = (inner.clone(), hold.clone());
            async move {
                let result = release_hold(inner, hold.clone()).await;
                (hold, result)
            }
        })
    });
    let handles: Vec<_> = releases.map(tokio::spawn).collect();
    for handle in handles {
        match handle.await {
            Ok((_, Ok(ReleaseReply::Released { .. } | ReleaseReply::Handed { .. }))) => {
                report.given_back += 1;
            }
            // Lost before: nothing to give back.
            Ok((_, Ok(ReleaseReply::NotHeld))) => {}
            Ok((hold, Ok(ReleaseReply::Conflict))) => report.failed.push((
                hold.display().to_owned(),
                LockError::KeyConflict {
                    name: hold.display().to_owned(),
                },
            )),
            Ok((hold, Err(err))) => report.failed.push((hold.display().to_owned(), err)),
            Err(err) => {
                tracing::debug!(error = %err, "distlock: a shutdown release did not finish")
            }
        }
    }
    let _ = tokio::time::timeout(patience, inner.background.idle()).await;
    report.given_back += inner.take_given_back_late();
    report.in_flight = inner.attempts.running();
    report
}

/// Gives back one hold of `owner` that no guard owns (an abandoned attempt's grant,
/// or one refused after it was granted; with `node`, the grant of one Redlock node
/// for an attempt that missed the majority), waiting for the answer; a failure is
/// logged and left to the lease.
///
/// # Cancel safety
///
/// Called in tasks of their own (an attempt's give-back or undo, a hand-off's
/// resolution) or inside a detached Redlock attempt. Dropped midway, the release may or may not be applied, and the
/// hold it gives back ends with its lease at the latest.
pub(crate) async fn give_back(
    inner: &Inner,
    keys: &Arc<LockKeys>,
    owner: &Arc<Owner>,
    lease_ms: u64,
    node: Option<Conn>,
) {
    let what = match node {
        Some(_) => "a Redlock node's grant",
        None => "an abandoned hold",
    };
    if let Err(err) = plain(inner, keys, owner, lease_ms, node).await {
        tracing::debug!(error = %err, "distlock: could not give back {what}; its lease will end it");
    }
}

/// As [`give_back`], in the background, for `holds` holds of `owner`: a grant whose
/// reply came too late (one), or, with `orphan`, a hold that its client did not
/// know of: a new acquisition under `owner` found it holding the lock of `keys`
/// `holds` times (`acquire.lua`, "Never added to"), and must not add to it — a
/// protocol anomaly, logged as a warning. Each hold goes back as one release, until
/// none is left (or the outcome is not known: the lease then ends it).
pub(crate) fn give_back_later(
    inner: &Arc<Inner>,
    keys: Arc<LockKeys>,
    owner: Arc<Owner>,
    lease_ms: u64,
    (holds, orphan): (u64, bool),
) {
    if orphan {
        tracing::warn!(
            lock.name = %keys.display(),
            lock.hold_count = holds,
            "distlock: a new acquisition found its owner id holding the lock already, a hold \
             no guard owns; giving it back and asking again under a fresh owner id"
        );
    }
    let inner = inner.clone();
    spawn(log_failure(async move {
        for _ in 0..holds {
            match plain(&inner, &keys, &owner, lease_ms, None).await? {
                ReleaseReply::Released { remaining } if remaining > 0 => {}
                _ => break,
            }
        }
        Ok(())
    }));
}

/// One release of a hold no guard owns, on `node` alone (a Redlock node's grant)
/// or on every node (combined by the majority rules), with no successor: a
/// give-back is rare (an attempt abandoned, a grant too late or refused), so it
/// frees the lock and the release message wakes this client's waiters as it wakes
/// any other's, rather than claim one of them.
///
/// # Cancel safety
///
/// Run to the end in a task of its own (every caller spawns it or awaits it
/// from one); dropped, the hold ends with its lease.
async fn plain(
    inner: &Inner,
    keys: &Arc<LockKeys>,
    owner: &Arc<Owner>,
    lease_ms: u64,
    node: Option<Conn>,
) -> redis::RedisResult<ReleaseReply> {
    let op = owner.op();
    let numbers = (op.seq(), op.floor());
    let release = Release::new(inner, keys, owner.shared_id(), lease_ms, numbers, None);
    match node {
        Some(conn) => release.on_node(conn).await,
        None => release.everywhere(inner).await,
    }
}

/// Takes back, in the background, the place that the waiter `owner` keeps at the
/// lock of `keys` (a writer's or a fair lock's waiter's, `#wait:<owner>`, see
/// `lua/lock.lua`), on every node, with `withdraw.lua`, which wakes whoever the
/// place held back: for a wait that ended without the lock, or an attempt whose
/// caller went away. A place that cannot be taken back dies by itself within
/// seconds.
pub(crate) fn take_back_place(inner: &Arc<Inner>, keys: &Arc<LockKeys>, owner: &Arc<Owner>) {
    let (inner, keys, owner) = (inner.clone(), keys.clone(), owner.shared_id());
    let publish = inner.backend.publish_command();
    spawn(async move {
        let scripts = inner.scripts.clone();
        let replies = inner
            .backend
            .each(|mut conn| {
                let (scripts, keys, owner) = (scripts.clone(), keys.clone(), owner.clone());
                async move {
                    scripts
                        .withdraw
                        .invoke(&Withdraw {
                            lock: &keys.lock,
                            publish,
                            owner: &owner,
                        })
                        .invoke_async::<i64, _>(&mut conn)
                        .await
                }
            })
            .await;
        if let Some(Err(err)) = replies.into_iter().find(Result::is_err) {
            tracing::debug!(error = %err, "distlock: could not take back a waiter's place; it ends by itself");
        }
    });
}

/// Gives back one hold of a guard's `hold`.
///
/// # Cancel safety
///
/// Run to the end by its callers (detached by `unlock`, in a task of its own on a
/// drop or a shutdown); dropped midway, see [`round_trip`].
async fn release_hold(inner: Arc<Inner>, hold: Arc<Hold>) -> Result<ReleaseReply, LockError> {
    let now = Instant::now();
    let (lease, lasts) = {
        let state = hold.state();
        (state.extension(now), state.deadline)
    };
    let record = !without_record(&inner, &hold, lasts, now);
    round_trip(
        &inner,
        &hold.keys,
        &hold.owner,
        lease.as_millis() as u64,
        record,
    )
    .await
}

/// Whether a final release of `hold`, made at `now` of a hold whose lease the
/// client counts on until `lasts`, may leave no record for its retry
/// (`lua/release.lua`, "Records"): when a "not held" answer to its retry can only
/// mean that an earlier try applied it. That holds when the request is sent once
/// (one server, not a cluster nor Redlock), the hold is not known lost, no check of
/// holds after a replaced server is under way and none was found replaced since
/// the hold was last known to be there, and its lease lasts at least as long as a
/// record would (every retry is read within that time, see [`Release::read`]):
/// then nothing but this release could take the hold before its retry is answered,
/// except a force-unlock, which leaves a record saying so, and a server replaced
/// meanwhile, which the client finds out. With a successor, the record is kept
/// (`round_trip`): a hand-off's outcome is resolved by replays.
fn without_record(inner: &Inner, hold: &Hold, lasts: Instant, now: Instant) -> bool {
    inner.backend.sends_once()
        && !hold.is_lost()
        && !inner.links.checking()
        && inner.watchdog.known_since_replacement(hold)
        && lasts >= now + inner.config.remember_release()
}

/// One release on every node, each retried once under the same number when the
/// reply was lost (the script applies it at most once), combined by the majority
/// rules. On one endpoint, the first waiter of this client for the lock (if it
/// offered itself) is the release's successor: the lock is handed to it if this is
/// the last hold (see `handoff.rs`).
///
/// # Cancel safety
///
/// Its callers run it to the end. Dropped midway, the release may have been
/// applied on some nodes, and a waiter it claimed is told that the outcome is
/// unknown (the claim's drop): the waiter goes on under a fresh owner id, and a
/// hold its old owner may have been handed is left to its lease.
async fn round_trip(
    inner: &Arc<Inner>,
    keys: &Arc<LockKeys>,
    owner: &Arc<Owner>,
    lease_ms: u64,
    record: bool,
) -> Result<ReleaseReply, LockError> {
    let span = tracing::debug_span!(
        "distlock.release",
        lock.name = %keys.display(),
        lock.hold_count = tracing::field::Empty,
    );
    // Pending until every node answered (or the retry failed).
    let op = owner.op();
    let (mut id, mut seq, mut floor) = (owner.shared_id(), op.seq(), op.floor());
    let mut claim = None;
    if faults::active(Fault::ReleaseWithoutOwnerCheck) {
        if let Some(holder) = current_holder(inner, keys).await {
            // Whoever holds it, under a number its record cannot have seen.
            (id, seq, floor) = (holder.into(), FOREIGN_SEQ, 0);
        }
    } else if !inner.backend.is_redlock()
        && inner.config.replicas.is_none()
        && keys.kind.is_plain()
        && inner.waiters.waits()
    {
        claim = inner.waiters.claim(&keys.channel()).map(HandOff::new);
    }
    let successor = claim.as_ref().map(HandOff::successor);
    let record = record || successor.is_some();
    let sent = Instant::now();
    let release = Release::new(inner, keys, id, lease_ms, (seq, floor), successor).record(record);
    let verdict = release
        .clone()
        .everywhere(inner)
        .instrument(span.clone())
        .await;
    drop(op);
    if let Some(claim) = claim {
        claim.deliver(inner, keys, &verdict, sent, release);
    }
    let verdict = verdict?;
    match verdict {
        ReleaseReply::Released { remaining } => {
            span.record("lock.hold_count", remaining);
        }
        ReleaseReply::Handed { .. } => {
            span.record("lock.hold_count", 0);
        }
        ReleaseReply::NotHeld | ReleaseReply::Conflict => {}
    }
    Ok(verdict)
}

/// A release's claim on a waiter of this client, and the number of the hand-off
/// among the waiter's owner's operations: pending until it is known whether the
/// waiter was handed the lock.
struct HandOff {
    claim: Claim,
    op: Arc<Op>,
}

impl HandOff {
    fn new(claim: Claim) -> Self {
        let op = claim.offer().owner.op();
        Self { claim, op }
    }

    fn successor(&self) -> Arc<Successor> {
        let offer = self.claim.offer();
        Arc::new(Successor {
            owner: offer.owner.shared_id(),
            lease_ms: offer.lease_ms,
            seq: self.op.seq(),
            floor: self.op.floor(),
            fencing: offer.fencing,
            who: offer.who.clone(),
        })
    }

    /// Tells the waiter what came of the release `release`, sent at `sent`: the
    /// lock (given back if the waiter has left), a refusal, or, when the answer was
    /// lost, that it is not known; the release is then replayed in the background
    /// until it is, and a hold the waiter's owner was handed given back.
    fn deliver(
        self,
        inner: &Arc<Inner>,
        keys: &Arc<LockKeys>,
        verdict: &Result<ReleaseReply, redis::RedisError>,
        sent: Instant,
        release: Release,
    ) {
        let offer = self.claim.offer().clone();
        let delivery = match verdict {
            Ok(ReleaseReply::Handed { fence }) => {
                let (inner, keys) = (inner.clone(), keys.clone());
                let give_back =
                    move || give_back_later(&inner, keys, offer.owner, offer.lease_ms, (1, false));
                let grant = Unclaimed::new(Granted::One(1, *fence), sent);
                Delivery::Granted(grant.given_back_by(give_back))
            }
            Ok(ReleaseReply::Released { .. }) => Delivery::Declined { ask: false },
            Ok(ReleaseReply::NotHeld | ReleaseReply::Conflict) => Delivery::Declined { ask: true },
            Err(_) => {
                let (inner, keys, op) = (inner.clone(), keys.clone(), self.op.clone());
                spawn(async move {
                    // Pending until then: nothing of that owner is settled above it.
                    let _op = op;
                    resolve_hand_off(&inner, &keys, release, &offer.owner, offer.lease_ms).await;
                });
                Delivery::Unknown
            }
        };
        // Dropped here when the waiter has left: a grant gives its hold back.
        drop(self.claim.deliver(delivery));
    }
}

/// Replays a release whose answer was lost, and that had a successor, until it is
/// known whether the successor's owner was handed the lock. Its waiter has moved on
/// to a fresh owner id, so a hold of the successor's owner is one no guard owns:
/// given back when the lock was handed over, and also when that stays unknown (the
/// replays ran out, or their "not held" came too late to be read, see
/// [`Release::read`]): giving back what an owner does not hold changes nothing.
/// Only an answer that says the lock was not handed over leaves it.
///
/// # Cancel safety
///
/// Run to the end in a task of its own; dropped, a hold of the successor's
/// owner ends with its lease.
async fn resolve_hand_off(
    inner: &Arc<Inner>,
    keys: &Arc<LockKeys>,
    release: Release,
    successor: &Arc<Owner>,
    lease_ms: u64,
) {
    let name = keys.display();
    let reply = replay_until_known(&name, "hand-off", || {
        release.clone().on_node(inner.backend.first())
    })
    .await;
    match reply {
        Some(ReleaseReply::Released { .. } | ReleaseReply::NotHeld | ReleaseReply::Conflict) => {}
        Some(ReleaseReply::Handed { .. }) | None => {
            give_back(inner, keys, successor, lease_ms, None).await;
        }
    }
}

/// The operation number the seeded fault `ReleaseWithoutOwnerCheck` releases with:
/// above any real one.
const FOREIGN_SEQ: u64 = 10_000_000_000_000;

/// One numbered release of one owner, and the client's sender of releases (in a
/// batch with other releases on one endpoint, alone on a cluster or a Redlock node).
#[derive(Clone)]
struct Release {
    item: Item,
    batcher: Arc<Batcher<Item>>,
    /// When the release was made, before its first try was sent: no try of it can
    /// have been applied earlier.
    began: Instant,
    /// The client's links, and how many servers they had found replaced when the
    /// release was made: a "not held" from a server found replaced since then
    /// cannot tell whether the release applied (see [`Release::read`]).
    links: Arc<Links>,
    replacements: u64,
    /// How long the record of an applied final release lasts (`remember_release`):
    /// retries start within three quarters of it after `began` (see
    /// [`Release::on_node`]), and a "not held" is read within seven eighths (see
    /// [`Release::read`]).
    remember: Duration,
}

impl Release {
    fn new(
        inner: &Inner,
        keys: &Arc<LockKeys>,
        owner: Arc<str>,
        lease_ms: u64,
        (seq, floor): (u64, u64),
        successor: Option<Arc<Successor>>,
    ) -> Self {
        let item = Item {
            keys: keys.clone(),
            owner,
            lease_ms,
            seq,
            floor,
            successor,
            record: true,
        };
        Self {
            item,
            batcher: inner.batcher.clone(),
            began: Instant::now(),
            links: inner.links.clone(),
            replacements: inner.links.replacements(),
            remember: inner.config.remember_release(),
        }
    }

    /// The release, leaving its record if it is the final one only when `record`
    /// (see [`without_record`]; every release keeps it unless told otherwise). A
    /// release without its record is sent by one [`Release::on_node`] only, whose
    /// tries are all it has.
    fn record(mut self, record: bool) -> Self {
        self.item.record = record;
        self
    }

    /// The release on every node, combined by the majority rules.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may leave the release applied on some nodes; its callers
    /// run it detached, or replay it until known.
    async fn everywhere(self, inner: &Inner) -> redis::RedisResult<ReleaseReply> {
        let replies = inner.backend.each(|conn| self.clone().on_node(conn)).await;
        redlock::release(replies, inner.backend.quorum())
    }

    /// The release on one node, retried under the same number while it fails in a
    /// way that may pass (the script applies it at most once, and recognises the
    /// final one after the lock was freed): a lost reply, a demoted master that
    /// refused it, a cluster slot in migration (`TRYAGAIN` until `SETSLOT NODE`).
    /// Retries start, 25 ms apart and doubling up to 250 ms, until three quarters of
    /// the time a final release is remembered have passed since the release was
    /// made (replays of it included); at least one retry is made. An answer is read
    /// by [`Release::read`]: a "not held" that came too late is an unknown outcome.
    async fn on_node(mut self, conn: Conn) -> redis::RedisResult<ReleaseReply> {
        let give_up = self.began + self.remember * 3 / 4;
        let mut pause = Duration::from_millis(25);
        let mut retried = false;
        loop {
            if retried && faults::active(Fault::ReleaseReplayForgotten) {
                self.item.seq += 1 << 40;
            }
            match self.batcher.submit(conn.clone(), self.item.clone()).await {
                Ok(reply) => return self.read(&reply, retried),
                Err(err)
                    if transient(&err)
                        && !err.is_connection_refusal()
                        && (!retried || Instant::now() + pause < give_up) =>
                {
                    tracing::debug!(error = %err, "distlock: release failed; retrying");
                    if retried {
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(250));
                    }
                    retried = true;
                }
                Err(err) => return Err(err),
            }
        }
    }
}

impl Release {
    /// Reads `reply`, an answer to this release. "Not held" is an absence: it says
    /// that the release was never applied only while the record of an applied final
    /// release (`<ns>:{name}:freed:<owner>`, kept `remember_release`, written at
    /// the earliest when this release was made) could still be read. So it counts
    /// only when it came back within seven eighths of that time since the release
    /// was made (the eighth a margin for the server's clock); later, however long
    /// one try took (a reconnect through an outage, say), it is an error of unknown
    /// outcome: the release may have been applied, and the lease ends the lock.
    /// So is a "not held" after the client found a server replaced since the
    /// release was made: the record may have been on the server that went away.
    /// Every other answer says what was applied, whenever it comes. (The seeded
    /// faults `NotHeldBelievedLate` and `NotHeldBelievedAfterReplacement` each
    /// take one of the two conditions away.)
    ///
    /// A release sent without its record (see [`without_record`]) reads "not held"
    /// by what its tries were: to its first try (`retried` false), "never
    /// applied", since no other try exists; to a retry, "applied" by an earlier try,
    /// under the same two conditions (within seven eighths of the record's time,
    /// which its hold's lease outlasts, so the lease had not ended; no server found
    /// replaced), unless a record says otherwise (a force-unlock's, `{-8}`). (The
    /// seeded fault `UnrecordedNotHeldTakenForApplied` reads the first try's as a
    /// retry's.)
    fn read(&self, reply: &[i64], retried: bool) -> redis::RedisResult<ReleaseReply> {
        let decoded =
            ReleaseReply::decode(reply).ok_or_else(|| unexpected_reply("release.lua", reply))?;
        let waited = self.began.elapsed();
        let same_servers = self.links.replacements() == self.replacements
            || faults::active(Fault::NotHeldBelievedAfterReplacement);
        let in_time = waited < self.remember - self.remember / 8
            || faults::active(Fault::NotHeldBelievedLate);
        let retried = retried || faults::active(Fault::UnrecordedNotHeldTakenForApplied);
        if decoded != ReleaseReply::NotHeld {
            return Ok(decoded);
        }
        if !self.item.record && reply != [ReleaseReply::NOT_APPLIED] {
            if !retried {
                return Ok(decoded);
            }
            if same_servers && in_time {
                return Ok(ReleaseReply::Released { remaining: 0 });
            }
        } else if same_servers && in_time {
            return Ok(decoded);
        }
        if !same_servers {
            return Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "the release was answered \"not held\" by a server found replaced after it \
                 was sent, which cannot tell whether the server before applied it",
            )));
        }
        Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the release was answered \"not held\" {waited:.1?} after it was sent, when the \
                 record of an applied release (kept {:.1?}) may be gone, so the answer cannot \
                 tell whether it was applied",
                self.remember
            ),
        )))
    }
}

/// The owner id that holds `keys` now (for the seeded fault that skips the owner check).
async fn current_holder(inner: &Inner, keys: &LockKeys) -> Option<String> {
    let mut conn = inner.backend.first();
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(&keys.lock)
        .query_async(&mut conn)
        .await
        .ok()?;
    let lock = crate::layout::StoredLock::from_fields(fields).ok()?;
    lock.holders().keys().next().cloned()
}
