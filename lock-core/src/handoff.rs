//! Local hand-off: a final release that finds a waiter of this client first in the
//! queue of the lock's name gives the lock to that waiter's owner in the same run
//! of `release.lua`, and the waiter is granted by the release's reply. One round
//! trip per hand-off (the release's), no release message, no attempt of the
//! waiter's own, and the order of the client's queue is kept.
//!
//! A waiter [offers](Offer) itself while it waits between two attempts (and only
//! once release messages reach its queue); a release claims the offer of the first
//! waiter, which from then on sends nothing of its own until the release delivers
//! what came of it ([`Delivery`]). The script hands the lock over only when the
//! release gives back the last hold and no other client listens for the lock's
//! release: with waiters elsewhere, the lock is freed and published as always, so a
//! busy client cannot keep a lock from the others by handing it round its own tasks.
//!
//! A grant that no guard takes (the waiter gave up, ran out of time, or its future
//! was dropped while the release was on its way) gives its hold back when dropped.

use std::sync::Arc;

use tokio::time::Instant;

use crate::owner::Owner;

/// What a waiting acquisition accepts from a release: its owner id and how it wants
/// to hold the lock.
#[derive(Debug, Clone)]
pub(crate) struct Offer {
    pub(crate) owner: Arc<Owner>,
    pub(crate) lease_ms: u64,
    pub(crate) fencing: bool,
    /// What the client writes of the waiter once it holds the lock (`who.rs`).
    pub(crate) who: Arc<str>,
}

/// What came of a release that claimed a waiter's offer.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// The lock is the waiter's: its owner holds it once.
    Granted(Grant),
    /// The release did not hand the lock over (it was not the last hold, another
    /// client waits for the lock, the releaser no longer held it): the waiter waits
    /// on, and asks Redis at once when `ask` (the lock may be free without a message).
    Declined { ask: bool },
    /// Not known: the release's reply was lost, or its "not held" came too late to
    /// be read (see `release.rs`, `Release::read`). The waiter asks again under a
    /// fresh owner id, never the one it may have been handed the lock under; the
    /// releaser finds out in the background and gives back what the old one may
    /// have been handed (also when that stays unknown).
    Unknown,
}

/// A lock handed to a waiter, not yet owned by a guard.
pub(crate) struct Grant {
    fence: u64,
    sent: Instant,
    /// Gives the hold back; taken out when a guard takes the hold.
    give_back: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("fence", &self.fence)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl Grant {
    /// A lock handed over by a release sent at `sent` (its lease started no
    /// earlier), with fencing token `fence` (0: none); `give_back` gives the hold
    /// back if no guard takes it.
    pub(crate) fn new(fence: u64, sent: Instant, give_back: Box<dyn FnOnce() + Send>) -> Self {
        Self {
            fence,
            sent,
            give_back: Some(give_back),
        }
    }

    /// Takes the hold for a guard: its fencing token and when its lease started at
    /// the earliest.
    pub(crate) fn accept(mut self) -> (u64, Instant) {
        self.give_back = None;
        (self.fence, self.sent)
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(give_back) = self.give_back.take() {
            give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    fn grant(given_back: &Arc<AtomicBool>) -> Grant {
        let given_back = given_back.clone();
        Grant::new(
            7,
            Instant::now(),
            Box::new(move || given_back.store(true, Ordering::SeqCst)),
        )
    }

    #[test]
    fn a_grant_nobody_takes_is_given_back_and_one_taken_is_not() {
        let given_back = Arc::new(AtomicBool::new(false));
        drop(grant(&given_back));
        assert!(given_back.load(Ordering::SeqCst));

        let given_back = Arc::new(AtomicBool::new(false));
        let (fence, _) = grant(&given_back).accept();
        assert_eq!(fence, 7);
        assert!(!given_back.load(Ordering::SeqCst));
    }
}
