//! What happens to a hold, as operator features count it (metrics): the
//! [`Series`] of its lock, worked out once and kept in the hold as its [`Tag`],
//! told when it is acquired, re-entered, waited for, timed out, held, renewed,
//! released or lost. `ops/metrics.rs` makes them (`Operators::series`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The series of one lock that the events of a hold (or a wait) are counted in
/// (metrics), worked out once: labels, and when the hold began. Each event counts
/// nothing unless a series says otherwise (the series of `ops/metrics.rs` counts
/// every one).
pub(crate) trait Series: Send + Sync + fmt::Debug {
    /// A new hold began, `waited` after the request (`None`: a name of a set,
    /// whose wait is the set's).
    fn acquired(&self, _waited: Option<Duration>) {}
    /// A re-entry of a hold the chain has.
    fn reentered(&self) {}
    /// An acquisition had to wait (once per acquisition).
    fn contended(&self) {}
    /// An acquisition's wait ran out.
    fn timed_out(&self) {}
    /// A request gave up to break a deadlock.
    fn deadlock(&self) {}
    /// A hold was lost while held, for `reason` ([`LostReason::as_str`](crate::LostReason::as_str)).
    fn lost(&self, _reason: &'static str) {}
    /// The watchdog began watching the hold.
    fn held(&self) {}
    /// The watchdog stopped watching the hold (released or lost).
    fn released(&self) {}
    /// A renewal succeeded.
    fn renewed(&self) {}
    /// A renewal failed or timed out (retried).
    fn renewal_failed(&self) {}
    /// Counts a waiter while the value returned lives.
    fn waiter(&self) -> Box<dyn Send> {
        Box::new(())
    }
}

/// The series a hold's events are counted in.
pub(crate) type Tag = Arc<dyn Series>;

/// A series that counts nothing.
#[cfg(any(test, not(feature = "metrics")))]
#[derive(Debug)]
struct Uncounted;

#[cfg(any(test, not(feature = "metrics")))]
impl Series for Uncounted {}

/// The series that counts nothing (without feature `metrics`, and for holds made
/// by unit tests without a client): one, shared.
#[cfg(any(test, not(feature = "metrics")))]
pub(crate) fn uncounted() -> Tag {
    static UNCOUNTED: std::sync::LazyLock<Tag> = std::sync::LazyLock::new(|| Arc::new(Uncounted));
    UNCOUNTED.clone()
}
