//! A minimum hold time (ShedLock's `lockAtLeastFor`): a hold whose guard is
//! released before it has been held that long stays held until then, so that a
//! job run once per period is not run again by an instance whose timer fires a
//! little later. The wait, and the release after it, belong to the guard
//! (`LockGuard::unlock_after_holding`, which calls down into `release.rs` at the
//! end); this file owns what the wait needs from Redis and from a shutdown:
//!
//! - [`extend_until`]: the lease extended once so that it covers the rest of the
//!   minimum (`renew.lua`, which only ever moves an expiry later): a process that
//!   dies during the wait leaves the lock to that lease, never less than the
//!   minimum;
//! - [`keep`]: the client's shutdown leaves such holds held, their leases extended
//!   once more, instead of giving them back: a redeploy right after the job must not
//!   let another instance run it again early.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::detach::join_all;
use crate::error::LockError;
use crate::hold::Hold;
use crate::inner::Inner;
use crate::lease::{drift, MAX_LEASE, MIN_LEASE};
use crate::renew::extend_once;

/// The lease that keeps a lock in Redis for at least `left` of this client's time:
/// `left` plus the clock drift the client allows for (a server whose clock runs
/// fast ends it no earlier), within [`MIN_LEASE`]..=[`MAX_LEASE`].
pub(crate) fn lease_to_cover(left: Duration) -> Duration {
    (left + drift(left)).clamp(MIN_LEASE, MAX_LEASE)
}

/// Extends the lease of `hold` once so that it lasts until `until` at least, if its
/// owner still holds the lock: one run of `renew.lua` (which only ever moves an
/// expiry later: a longer lease, renewed by the watchdog, is kept), with the
/// replica acknowledgements the client asks for. On success the hold counts on the
/// new end. Nothing is sent when `until` is past.
///
/// # Errors
///
/// [`LockError::Lost`] when the owner no longer holds the lock (the hold is marked
/// lost, [`LostReason::NotHeld`](crate::LostReason::NotHeld)); [`LockError::Redis`]
/// when Redis could not be reached or gave no answer a majority agrees on (the
/// lease is then the one the last renewal gave).
///
/// # Cancel safety
///
/// Dropping the future may leave the lease extended in Redis while the hold counts
/// on its old end; nothing else changes (the extension only moves an expiry later).
pub(crate) async fn extend_until(
    inner: &Arc<Inner>,
    hold: &Arc<Hold>,
    until: Instant,
) -> Result<(), LockError> {
    let sent = Instant::now();
    let left = until.saturating_duration_since(sent);
    if left.is_zero() {
        return Ok(());
    }
    let lease = lease_to_cover(left);
    let acks = inner.config.replicas;
    let why = "the lock was not held by its owner when its lease was to cover its minimum \
               hold time";
    // Acknowledged by too few replicas: the master moved the expiry, and the client
    // does not count on it until replicas have it (as a renewal does not).
    extend_once(&inner.backend, &inner.scripts, hold, (lease, acks), why)
        .await
        .map(|_| ())
}

/// What a shutdown does with the holds whose release waits for a minimum hold time.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// The other holds, with their numbers of guards: given back as usual.
    pub(crate) rest: Vec<(Arc<Hold>, usize)>,
    /// The locks left held, each with the rest of its minimum: their leases cover it.
    pub(crate) kept: Vec<(String, Duration)>,
    /// The locks left held whose lease could not be extended: the lease of their
    /// last renewal ends them, perhaps before their minimum.
    pub(crate) failed: Vec<(String, LockError)>,
}

/// The client's shutdown, for the holds it closed (`closed`, each with its number of
/// guards): a hold whose release waits for a minimum hold time not reached yet is
/// not given back but left held, its lease extended once more to cover the rest of
/// the minimum ([`extend_until`], all of them at once), and its guards told
/// ([`LostReason::ShutDown`](crate::LostReason::ShutDown)). The lock then ends
/// when that lease ends: no earlier than the minimum, and no later than the minimum
/// or the end of the lease of the last renewal, whichever comes later. The other
/// holds are returned, to be given back.
///
/// # Cancel safety
///
/// Dropped midway, the extensions sent finish in the background; every hold closed
/// stays held until its lease ends.
pub(crate) async fn keep(inner: &Arc<Inner>, closed: Vec<(Arc<Hold>, usize)>) -> Kept {
    let now = Instant::now();
    let mut result = Kept::default();
    let mut waiting = Vec::new();
    for (hold, guards) in closed {
        match hold.kept_until().filter(|until| *until > now) {
            Some(until) => waiting.push((hold, until)),
            None => result.rest.push((hold, guards)),
        }
    }
    if waiting.is_empty() {
        return result;
    }
    let extensions = waiting.iter().map(|(hold, until)| {
        let (inner, hold, until) = (inner.clone(), hold.clone(), *until);
        async move { extend_until(&inner, &hold, until).await }
    });
    let outcomes = join_all(extensions).await;
    for ((hold, until), outcome) in waiting.into_iter().zip(outcomes) {
        let left = until.saturating_duration_since(now);
        match outcome {
            Ok(()) => result.kept.push((hold.display().to_owned(), left)),
            // Lost before: nothing is held, nothing to give back.
            Err(LockError::Lost { .. }) => continue,
            Err(err) => result.failed.push((hold.display().to_owned(), err)),
        }
        hold.left_to_lease(left);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::validity;

    #[test]
    fn the_lease_covers_what_is_left_and_the_drift() {
        assert_eq!(
            lease_to_cover(Duration::from_secs(1)),
            Duration::from_millis(1_012)
        );
        assert_eq!(lease_to_cover(Duration::from_millis(1)), MIN_LEASE);
        assert_eq!(lease_to_cover(MAX_LEASE * 2), MAX_LEASE);
        // What the client counts on after the extension is no earlier than asked.
        let left = Duration::from_millis(2_500);
        assert!(validity(lease_to_cover(left)) >= left - Duration::from_millis(1));
    }
}
