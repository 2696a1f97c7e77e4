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
    /// What the client writes of the waiter once it holds the lock (`who.rs`):
    /// `None` when its first renewal names it instead.
    pub(crate) who: Option<Arc<str>>,
}

/// What came of a release that claimed a waiter's offer.
#[derive(Debug)]
pub(crate) enum Delivery {
    /// The lock is the waiter's: its owner holds it once.
    Granted(Unclaimed),
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

/// What a grant gives: `(hold count, fencing token)` (token 0: none) of the one
/// name, or of each name of a set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Granted {
    One(u64, u64),
    Set(Vec<(u64, u64)>),
}

/// A grant that no guard owns yet: an attempt's, or a lock handed to a waiter by a
/// release. Dropped unclaimed (the wait gave up, ran out of time, its future was
/// dropped, or the grant came too late to count on), it gives its holds back.
pub(crate) struct Unclaimed {
    granted: Granted,
    /// When the request that was granted was sent: the lease started no earlier.
    sent: Instant,
    /// Gives the holds back; taken out when the grant is claimed.
    give_back: Option<Box<dyn FnOnce() + Send>>,
}

impl std::fmt::Debug for Unclaimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unclaimed")
            .field("granted", &self.granted)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl Unclaimed {
    /// `granted` by a request sent at `sent`, with nothing to give back yet (see
    /// [`Unclaimed::given_back_by`]).
    pub(crate) fn new(granted: Granted, sent: Instant) -> Self {
        Self {
            granted,
            sent,
            give_back: None,
        }
    }

    /// The grant, given back by `give_back` if it is dropped unclaimed.
    pub(crate) fn given_back_by(mut self, give_back: impl FnOnce() + Send + 'static) -> Self {
        self.give_back = Some(Box::new(give_back));
        self
    }

    /// When the granted request was sent.
    pub(crate) fn sent(&self) -> Instant {
        self.sent
    }

    /// Claims the grant: nothing is given back any more.
    pub(crate) fn claim(mut self) -> (Granted, Instant) {
        self.give_back = None;
        (
            std::mem::replace(&mut self.granted, Granted::Set(Vec::new())),
            self.sent,
        )
    }
}

impl Drop for Unclaimed {
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

    fn grant(given_back: &Arc<AtomicBool>) -> Unclaimed {
        let given_back = given_back.clone();
        Unclaimed::new(Granted::One(1, 7), Instant::now())
            .given_back_by(move || given_back.store(true, Ordering::SeqCst))
    }

    #[test]
    fn a_grant_nobody_takes_is_given_back_and_one_taken_is_not() {
        let given_back = Arc::new(AtomicBool::new(false));
        drop(grant(&given_back));
        assert!(given_back.load(Ordering::SeqCst));

        let given_back = Arc::new(AtomicBool::new(false));
        let (granted, _) = grant(&given_back).claim();
        assert_eq!(granted, Granted::One(1, 7));
        assert!(!given_back.load(Ordering::SeqCst));
    }
}
