//! The one place where a grant becomes a hold: whether it came in time to count on,
//! the new [`Hold`] (registered with the watchdog, counted), or one more guard on
//! a hold the chain re-entered; and whether the caller may have the guards at all
//! (not once the client's shutdown began: [`admit`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::options::LeasePolicy;
use crate::context::LockContext;
use crate::detach::join_all;
use crate::error::LockError;
use crate::faults::{self, Fault};
use crate::guard::{LockGuard, MultiLockGuard};
use crate::handoff::Granted;
use crate::hold::{HeldLock, Hold, HoldState};
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::lease::{validity, NAME_AFTER};
use crate::origin::Origin;
use crate::owner::Owner;

/// Whether a grant to `inner`'s client, holding as `policy` says, names its holder
/// itself: a fixed lease, a `max_hold` that ends by the first renewal (neither is
/// ever renewed), or `name_holders_at_once`; else the first renewal does.
pub(crate) fn named_at_once(inner: &Inner, policy: LeasePolicy) -> bool {
    !policy.watchdog
        || inner.config.name_at_once
        || policy
            .max_hold
            .is_some_and(|max_hold| max_hold <= first_renewal(policy, false))
}

/// When a new hold's first renewal comes after its grant: a renewal period (a third
/// of the lease), or sooner, by [`NAME_AFTER`], for a hold it is to name.
fn first_renewal(policy: LeasePolicy, named: bool) -> Duration {
    if named {
        policy.lease / 3
    } else {
        (policy.lease / 3).min(NAME_AFTER)
    }
}

/// Whether a grant of the attempt sent at `sent`, holding as `policy` says, came
/// before its lease could have ended: a later one may already belong to someone
/// else, and is given back.
pub(crate) fn in_time(policy: LeasePolicy, sent: Instant) -> bool {
    Instant::now() < sent + validity(policy.lease) || faults::active(Fault::NoPostReplyLeaseCheck)
}

/// A grant that came in time, as the wait ends with it: `granted` to `owner` by
/// the attempt sent at `sent`, for a request made at `origin` whose new holds keep
/// their lease as `policy` says.
pub(crate) struct Grant<'a> {
    pub(crate) inner: &'a Arc<Inner>,
    pub(crate) owner: Arc<Owner>,
    pub(crate) origin: Origin,
    pub(crate) policy: LeasePolicy,
    pub(crate) sent: Instant,
    pub(crate) granted: Granted,
    /// What the client says of the holder (`who.rs`): sent with the acquisition
    /// when [`named_at_once`], else with the first renewal.
    pub(crate) who: Arc<str>,
}

impl Grant<'_> {
    /// A new hold on the lock of `keys`, with the owner's hold count `count` and
    /// fencing token `fence` (0: none): registered with the watchdog and counted as
    /// acquired, `waited` after the request (`None` for a name of a set, whose wait
    /// is the set's).
    pub(crate) fn new_hold(
        &self,
        keys: &Arc<LockKeys>,
        (count, fence): (u64, u64),
        waited: Option<Duration>,
    ) -> HeldLock {
        let (inner, policy, sent) = (self.inner, self.policy, self.sent);
        let named = named_at_once(inner, policy);
        let hold = Arc::new(Hold::new(
            inner.next_hold_id(),
            inner.id,
            keys.clone(),
            self.owner.clone(),
            (fence > 0).then_some(fence),
            (self.origin.clone(), self.who.clone()),
            policy.max_hold,
            inner.ops.series(keys, &self.origin),
            HoldState {
                guards: 1,
                deadline: sent + validity(policy.lease),
                watchdog: policy.watchdog,
                lease: policy.lease,
                next_renew: sent + first_renewal(policy, named),
                renew_until: policy.max_hold.map(|max_hold| sent + max_hold),
                closed: false,
                named,
            },
        ));
        hold.tag.acquired(waited);
        inner.watchdog.register(hold.clone());
        HeldLock { hold, count }
    }

    /// The guard of a set: for each name of `keys` (with `grants`, its owner's
    /// hold count and token), a new hold, or one more guard on the chain's hold
    /// in `held`; each guard in the scope of those before it.
    pub(crate) fn set_guard(
        &self,
        keys: &[Arc<LockKeys>],
        held: &[Option<HeldLock>],
        grants: &[(u64, u64)],
        context: &LockContext,
    ) -> MultiLockGuard {
        let mut guards: Vec<LockGuard> = Vec::with_capacity(keys.len());
        for ((keys, held), &grant) in keys.iter().zip(held).zip(grants) {
            let held = match held {
                Some(held) => {
                    let lease = reentry_lease(held, self.policy);
                    reentered(self.inner, &held.hold, lease, self.sent, grant.0)
                }
                None => self.new_hold(keys, grant, None),
            };
            let scope = guards
                .last()
                .map_or_else(|| context.clone(), LockGuard::context);
            guards.push(LockGuard::new(self.inner, held, &scope));
        }
        MultiLockGuard::new(guards)
    }
}

/// The guards an acquisition (or a re-entry) of `name` was granted, if the client
/// is still open: once its shutdown began, they are given back at once (counted
/// in the shutdown's report) and the acquisition fails with `ClientShutDown`. The
/// shutdown waits for every acquisition under way (`Inner::start_attempt`), so no
/// guard is handed out after it returned, whenever the grant's reply came.
///
/// # Cancel safety
///
/// Dropped while giving back, the guards not yet given back are dropped (their
/// holds released in the background, which the shutdown also waits for).
pub(crate) async fn admit(
    inner: &Arc<Inner>,
    guards: Vec<LockGuard>,
    name: &str,
) -> Result<Vec<LockGuard>, LockError> {
    if !inner.is_closed() || faults::active(Fault::GrantAfterShutdown) {
        return Ok(guards);
    }
    give_back(inner, guards, name).await;
    Err(LockError::ClientShutDown {
        name: name.to_owned(),
    })
}

/// Gives back every hold of `guards` (of the lock, or set, `name`) at once: the
/// part of a set taken before a name could not be had, or guards that [`admit`]
/// refused. Once the shutdown began, those given back are counted in its report.
///
/// # Cancel safety
///
/// Dropped midway, the guards not yet given back are dropped (their holds released
/// in the background).
pub(crate) async fn give_back(inner: &Arc<Inner>, guards: Vec<LockGuard>, name: &str) {
    let results = join_all(guards.into_iter().map(LockGuard::unlock)).await;
    if inner.is_closed() {
        inner.gave_back_late(results.iter().filter(|result| result.is_ok()).count());
    }
    for err in results.into_iter().filter_map(Result::err) {
        tracing::debug!(error = %err, lock.name = %name, "distlock: giving back a hold failed; its lease will end it");
    }
}

/// The lease a set's re-entry asks for: the hold's own under a watchdog, else the
/// set's.
pub(crate) fn reentry_lease(held: &HeldLock, policy: LeasePolicy) -> Duration {
    if policy.watchdog {
        held.hold.state().lease
    } else {
        policy.lease
    }
}

/// One more guard on the chain's hold `hold`, re-entered by the attempt sent at
/// `sent` with a lease of `lease`: the owner's hold count is now `count`.
pub(crate) fn reentered(
    inner: &Arc<Inner>,
    hold: &Arc<Hold>,
    lease: Duration,
    sent: Instant,
    count: u64,
) -> HeldLock {
    hold.tag.reentered();
    inner.watchdog.guard_added(hold, sent + validity(lease));
    HeldLock {
        hold: hold.clone(),
        count,
    }
}
