//! Owner ids and the numbering of their operations, for exactly-once replay
//! detection in the scripts.
//!
//! Every acquire, re-entry and release of one owner gets the next number of that
//! owner (1, 2, 3, ...); a retry or replay keeps it. While an operation's outcome is
//! unknown it is *pending*, and the owner's *floor* (sent with every operation) stays
//! below it: everything at or below the floor is settled, so a script may forget it
//! and must never apply it. See `lua/acquire.lua`, "Exactly once".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sync::locked;

/// One owner id and the bookkeeping of its operations.
#[derive(Debug)]
pub(crate) struct Owner {
    id: Arc<str>,
    /// The number of the next operation.
    next: AtomicU64,
    /// The numbers of the operations whose outcome is not known yet: a few at most,
    /// and none while a held lock is idle (its memory is then given back).
    pending: Mutex<Vec<u64>>,
}

impl Owner {
    pub(crate) fn new(id: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            id,
            next: AtomicU64::new(1),
            pending: Mutex::new(Vec::new()),
        })
    }

    /// The owner id, as the scripts store it.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// The owner id, shared (no copy of its text).
    pub(crate) fn shared_id(&self) -> Arc<str> {
        self.id.clone()
    }

    /// Numbers a new operation; it is pending until the returned [`Op`] (and every
    /// clone of its `Arc`) is dropped, which happens once its outcome is known or
    /// given up.
    pub(crate) fn op(self: &Arc<Self>) -> Arc<Op> {
        let mut pending = locked(&self.pending);
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        pending.push(seq);
        Arc::new(Op {
            owner: self.clone(),
            seq,
        })
    }

    /// Every operation numbered at or below this is settled.
    fn floor(&self) -> u64 {
        let pending = locked(&self.pending);
        match pending.iter().min() {
            Some(oldest) => oldest - 1,
            None => self.next.load(Ordering::Relaxed) - 1,
        }
    }
}

/// One operation of an owner, pending while it lives.
#[derive(Debug)]
pub(crate) struct Op {
    owner: Arc<Owner>,
    seq: u64,
}

impl Op {
    /// The operation's number.
    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// The owner's floor now: below this operation's number, since it is pending.
    pub(crate) fn floor(&self) -> u64 {
        self.owner.floor()
    }
}

impl Drop for Op {
    fn drop(&mut self) {
        let mut pending = locked(&self.owner.pending);
        pending.retain(|seq| *seq != self.seq);
        if pending.is_empty() {
            // A held lock spends most of its life with nothing in doubt.
            *pending = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_stays_below_every_pending_operation() {
        let owner = Owner::new("o".into());
        let first = owner.op();
        let second = owner.op();
        assert_eq!((first.seq(), second.seq()), (1, 2));
        assert_eq!(second.floor(), 0, "the first is still in doubt");
        drop(first);
        assert_eq!(second.floor(), 1);
        let third = owner.op();
        drop(second);
        assert_eq!(third.floor(), 2);
        drop(third);
        assert_eq!(owner.floor(), 3, "all settled");
        assert_eq!(owner.op().floor(), 3);
    }
}
