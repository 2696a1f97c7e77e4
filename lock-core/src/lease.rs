//! Leases: the accepted range, and how long a lease may be counted on once the
//! clock drift between client and servers is allowed for.

use std::time::Duration;

use crate::error::LockError;
use crate::faults::{self, Fault};

/// How long a hold the watchdog renews is held before its first renewal, which
/// names its holder (`lua/lock.lua`'s `#who:`), when a third of its lease is longer:
/// a lock held for less names no holder, and costs the server nothing to name one.
pub(crate) const NAME_AFTER: Duration = Duration::from_secs(1);

/// The shortest lease accepted: 10 ms. A lease is counted on for itself less the
/// clock drift allowance (1 % + 2 ms), so a shorter one would leave next to nothing,
/// or nothing, to hold the lock with.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// // A fixed lease shorter than MIN_LEASE is refused with `LockError::InvalidOption`.
/// let lease = Duration::from_millis(5).max(distlock::MIN_LEASE);
/// let guard = locks.lock("tick").lease(lease).await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
pub const MIN_LEASE: Duration = Duration::from_millis(10);
/// The longest lease accepted.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use std::time::Duration;
/// use distlock::{MAX_LEASE, MIN_LEASE};
///
/// // A lease taken from configuration, kept in the accepted range.
/// let configured = Duration::from_secs(48 * 60 * 60);
/// let lease = configured.clamp(MIN_LEASE, MAX_LEASE);
/// assert_eq!(lease, Duration::from_secs(24 * 60 * 60));
/// ```
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// The shortest watchdog lease accepted
/// ([`LockClientBuilder::default_lease`](crate::LockClientBuilder::default_lease)):
/// the watchdog renews at a third of it, and each renewal needs a round trip.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use std::time::Duration;
/// use distlock::{LockClient, MAX_LEASE, MIN_WATCHDOG_LEASE};
///
/// let configured = Duration::from_millis(20);
/// let builder = LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .default_lease(configured.clamp(MIN_WATCHDOG_LEASE, MAX_LEASE));
/// # let _ = builder;
/// ```
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);

/// A lease as whole milliseconds, if it is in range.
pub(crate) fn lease_millis(option: &'static str, lease: Duration) -> Result<u64, LockError> {
    if faults::active(Fault::LeaseNotValidated) {
        return Ok(lease.as_millis() as u64);
    }
    if lease < MIN_LEASE || lease > MAX_LEASE {
        return Err(LockError::invalid_option(
            option,
            format!("{lease:?} is out of range; use {MIN_LEASE:?} to {MAX_LEASE:?}"),
        ));
    }
    // In range, so it fits.
    Ok(lease.as_millis() as u64)
}

/// How much clock drift between client and servers a lease allows for: 1 % of it
/// plus 2 ms, as the Redlock analysis suggests.
pub(crate) fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The lease as this client may count on it: less the drift.
pub(crate) fn validity(lease: Duration) -> Duration {
    lease.saturating_sub(drift(lease))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_outside_the_range_are_refused() {
        assert!(lease_millis("lease", Duration::ZERO).is_err());
        assert!(lease_millis("lease", Duration::from_millis(2)).is_err());
        assert!(validity(MIN_LEASE) > Duration::from_millis(7));
        assert!(lease_millis("lease", MAX_LEASE + Duration::from_millis(1)).is_err());
        assert_eq!(
            lease_millis("lease", Duration::from_secs(2)).ok(),
            Some(2000)
        );
    }

    #[test]
    fn validity_allows_for_drift() {
        assert_eq!(
            validity(Duration::from_secs(10)),
            Duration::from_millis(9898)
        );
        assert_eq!(validity(Duration::from_millis(1)), Duration::ZERO);
    }
}
