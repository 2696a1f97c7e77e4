//! What a lock request asks for, settled: its [`Options`] with the client's
//! defaults filled in and checked, the [`LeasePolicy`] a new hold gets, and the
//! refusals of what a kind of lock (or the backend) cannot do.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::LockError;
use crate::inner::Inner;
use crate::keys::{Kind, LockKeys};
use crate::kinds::LockKind;
use crate::lease::lease_millis;

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

/// How a new hold keeps its lease: its length, renewed by the watchdog or fixed,
/// with a fencing token or not, for how long at most.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeasePolicy {
    pub(crate) lease: Duration,
    pub(crate) watchdog: bool,
    pub(crate) fencing: bool,
    /// How long the watchdog renews a new hold (`None`: as long as it is held).
    pub(crate) max_hold: Option<Duration>,
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

/// Checks what the request's kind allows: fencing tokens for the plain lock and
/// write holds only (a client's default of fencing leaves read holds and permits
/// without one; asking for it on them is refused), semaphores and fair locks not on
/// Redlock.
pub(super) fn check_kind(
    inner: &Inner,
    keys: &LockKeys,
    options: Options,
    policy: &mut LeasePolicy,
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
        policy.fencing = false;
    }
    unsupported(inner, keys.kind).map_or(Ok(()), Err)
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

/// The refusal of fencing on Redlock, for a client's default and for a request.
pub(crate) fn fencing_on_redlock() -> LockError {
    LockError::invalid_option(
        "fencing",
        "fencing tokens are not available on Redlock; use a single server, Sentinel or a \
         cluster where fencing matters",
    )
}

/// The request's options with the client's defaults filled in and checked.
pub(crate) fn fill_options(
    inner: &Inner,
    options: Options,
    start: Instant,
) -> Result<(LeasePolicy, Instant), LockError> {
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
        return Err(fencing_on_redlock());
    }
    let max_hold = options.max_hold.or(inner.config.max_hold);
    if let Some(max_hold) = max_hold {
        check_max_hold(max_hold, lease, watchdog)?;
    }
    let policy = LeasePolicy {
        lease,
        watchdog,
        fencing,
        max_hold,
    };
    Ok((policy, deadline))
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

/// The error for a name held as `held_as`, asked for as the kind of `keys`.
pub(crate) fn kind_conflict(keys: &LockKeys, held_as: LockKind) -> LockError {
    LockError::KindConflict {
        name: keys.display(),
        held_as: held_as.describe(),
        asked: keys.kind.with_article(),
    }
}
