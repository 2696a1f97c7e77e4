//! What the call chain holds of the lock a request asks for, and re-entry: one
//! more hold on the chain's hold, one round trip, no waiting.

use std::sync::Arc;

use tokio::time::Instant;

use super::attempt::{self, Answer, NameAttempt};
use super::grant;
use super::options::LeasePolicy;
use crate::context::LockContext;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::handoff::Granted;
use crate::hold::{HeldLock, Hold};
use crate::inner::Inner;
use crate::keys::{Kind, LockKeys};
use crate::scripts::unexpected_reply;

/// What the call chain holds of the lock a request asks for.
pub(super) enum Chain {
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
    pub(super) fn find(context: &LockContext, inner: &Inner, keys: &LockKeys) -> Self {
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

/// A re-entry: one more hold on the chain's hold, one round trip, no waiting. It
/// shows the outermost acquisition's fencing token; asking for fencing on a
/// re-entry of a lock taken without it is refused before anything is sent.
pub(super) async fn reenter(
    inner: &Arc<Inner>,
    held: HeldLock,
    context: &LockContext,
    policy: LeasePolicy,
    fencing_asked: bool,
) -> Result<LockGuard, LockError> {
    let hold = held.hold;
    let (what, how) = (
        "a re-entry of",
        " (`.fencing(true)`, or `fencing` on the outer annotated function)",
    );
    may_reenter(&hold, fencing_asked, what, how)?;
    let sent = Instant::now();
    let lease = if policy.watchdog {
        hold.state().extension(sent)
    } else {
        policy.lease
    };
    check_reentry_lease(&hold, policy, sent)?;
    let reentry = NameAttempt::reentry(inner, &hold, lease.as_millis() as u64);
    match attempt::run(reentry).await? {
        Answer::Granted(grant) => match grant.claim() {
            (Granted::One(count, _), _) => {
                let held = grant::reentered(inner, &hold, lease, sent, count);
                Ok(LockGuard::new(inner, held, context))
            }
            (other, _) => Err(unexpected_reply("acquire.lua", &other).into()),
        },
        Answer::Refused(err) => Err(err),
        // Nothing else answers a re-entry: Redlock's "too few nodes" is "not held"
        // for it (see `NameAttempt::answer`).
        _ => Err(unexpected_reply("acquire.lua", "another owner's answer").into()),
    }
}

/// A fixed lease on a re-entry of a hold bounded by `max_hold` may not keep the
/// lock past the bound: it must end within one of the hold's leases after it, as a
/// hold that is no longer renewed does.
/// Whether `what` (a re-entry, a set) may re-enter `hold`: refused when the hold
/// was lost, or took no fencing token and `fencing` is asked for (`how` tells how
/// to ask for it on the outermost acquisition).
pub(super) fn may_reenter(
    hold: &Hold,
    fencing: bool,
    what: &str,
    how: &str,
) -> Result<(), LockError> {
    if fencing && hold.fence.is_none() {
        return Err(LockError::invalid_option(
            "fencing",
            format!(
                "fencing was asked for on {what} lock `{}`, whose outermost acquisition took \
                 no fencing token; ask for fencing on the outermost acquisition{how}",
                hold.display()
            ),
        ));
    }
    if hold.is_lost() {
        return Err(hold.lost_error());
    }
    Ok(())
}

fn check_reentry_lease(hold: &Hold, policy: LeasePolicy, sent: Instant) -> Result<(), LockError> {
    let (until, hold_lease) = {
        let state = hold.state();
        (state.renew_until, state.lease)
    };
    let Some(until) = until.filter(|_| !policy.watchdog) else {
        return Ok(());
    };
    let latest = until + hold_lease;
    if sent + policy.lease > latest {
        return Err(LockError::invalid_option(
            "max_hold",
            format!(
                "a fixed lease of {:?} on this re-entry of lock `{}` would keep it past the \
                 outermost acquisition's max_hold; give the re-entry a lease of at most {:?}, \
                 or none (the watchdog's, which stops at max_hold)",
                policy.lease,
                hold.display(),
                latest.saturating_duration_since(sent)
            ),
        ));
    }
    Ok(())
}
