//! The one place where a grant becomes a hold: whether it came in time to count on,
//! the new [`Hold`] (registered with the watchdog, counted), or one more guard on
//! a hold the chain re-entered.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::options::LeasePolicy;
use crate::context::LockContext;
use crate::faults::{self, Fault};
use crate::guard::{LockGuard, MultiLockGuard};
use crate::hold::{HeldLock, Hold, HoldState};
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::lease::validity;
use crate::origin::Origin;
use crate::owner::Owner;

/// Whether a grant of the attempt sent at `sent`, holding as `policy` says, came
/// before its lease could have ended: a later one may already belong to someone
/// else, and is given back.
pub(crate) fn in_time(policy: LeasePolicy, sent: Instant) -> bool {
    Instant::now() < sent + validity(policy.lease) || faults::active(Fault::NoPostReplyLeaseCheck)
}

/// A grant that came in time: to `owner`, by the attempt sent at `sent`, for a
/// request made at `origin` whose new holds keep their lease as `policy` says.
pub(crate) struct Grant<'a> {
    pub(crate) inner: &'a Arc<Inner>,
    pub(crate) owner: &'a Arc<Owner>,
    pub(crate) origin: &'a Origin,
    pub(crate) policy: LeasePolicy,
    pub(crate) sent: Instant,
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
        let hold = Arc::new(Hold::new(
            inner.next_hold_id(),
            inner.id,
            keys.clone(),
            self.owner.clone(),
            (fence > 0).then_some(fence),
            self.origin.clone(),
            policy.max_hold,
            inner.ops.series(keys, self.origin),
            HoldState {
                guards: 1,
                deadline: sent + validity(policy.lease),
                watchdog: policy.watchdog,
                lease: policy.lease,
                next_renew: sent + policy.lease / 3,
                renew_until: policy.max_hold.map(|max_hold| sent + max_hold),
                closed: false,
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
