//! Seeded faults for testing the tests: each one breaks a guarantee on purpose, so
//! that a checker can prove it would notice. Compiled only with the
//! `fault-injection` feature; without it every fault is off and costs nothing.
//!
//! Never enable the feature in production builds.

/// A deliberate bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Release gives back a hold of whoever holds the lock, not only this owner's.
    ReleaseWithoutOwnerCheck,
    /// A dropped guard keeps being renewed by the watchdog and is never released.
    WatchdogOutlivesDrop,
    /// Fixed leases are sent unchecked (zero included: the lock vanishes at once).
    LeaseNotValidated,
    /// An acquire reply that arrives after the lease could have ended is trusted.
    NoPostReplyLeaseCheck,
    /// A release retried after a lost reply goes under a new operation number, so
    /// the script cannot tell it applied already.
    ReleaseReplayForgotten,
    /// A re-entry replayed after a lost reply goes under a new operation number.
    ReentryReplayForgotten,
    /// Every owner's final release is recorded under one key per lock, so one
    /// owner's record overwrites another's.
    SharedFinalReleaseRecord,
    /// Release messages wake nobody: waiters find a free lock only when they look
    /// again on their own.
    ReleaseMessageIgnored,
    /// The shutdown does not wait for the acquisitions under way, and a grant that
    /// comes after it began still yields a guard.
    GrantAfterShutdown,
    /// A grant counts at once, without waiting for the check of the holds on a
    /// server found replaced: another chain of the client may be granted a lock
    /// that a chain whose hold vanished with the old server still believes it holds.
    GrantBeforeReplacementCheck,
    /// A "not held" answer to a release is read as "never applied" however long
    /// after the release it came, though the record that would have said it
    /// applied may have expired meanwhile (a try that waited out an outage): an
    /// applied release is told `Lost`, and an applied hand-off is taken for one
    /// declined, its waiter asking again under the owner id it was handed the lock
    /// under.
    NotHeldBelievedLate,
    /// A "not held" answer to a release is read as "never applied" though the
    /// client found a server replaced since the release was made: the record that
    /// would have said it applied may have gone with the old server.
    NotHeldBelievedAfterReplacement,
    /// A "not held" answer to a final release sent without its record is taken
    /// for "applied by an earlier try" on its first try too, when no earlier try
    /// exists: a release of a hold that was force-unlocked, or whose lease ended, is
    /// told `Ok`.
    UnrecordedNotHeldTakenForApplied,
    /// A waiting chain announces what it waits for only once its own
    /// `deadlock_check_after` has passed, not early in its wait: members with short
    /// thresholds break the part of a knot they see, and a member with a long one
    /// is the victim of what is left (two victims where one frees everyone).
    DeadlockWaitAnnouncedAtThreshold,
}

#[cfg(feature = "fault-injection")]
mod imp {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::Fault;

    static ACTIVE: AtomicU32 = AtomicU32::new(0);

    fn bit(fault: Fault) -> u32 {
        1 << (fault as u32)
    }

    /// Turns `fault` on for the whole process.
    pub fn inject(fault: Fault) {
        ACTIVE.fetch_or(bit(fault), Ordering::SeqCst);
    }

    /// Turns every fault off.
    pub fn clear() {
        ACTIVE.store(0, Ordering::SeqCst);
    }

    /// Whether `fault` is on.
    pub fn active(fault: Fault) -> bool {
        ACTIVE.load(Ordering::SeqCst) & bit(fault) != 0
    }
}

#[cfg(feature = "fault-injection")]
pub use imp::{active, clear, inject};

/// Whether `fault` is on: never, without the `fault-injection` feature.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn active(_fault: Fault) -> bool {
    false
}
