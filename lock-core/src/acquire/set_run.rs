//! One run of `acquire_all.lua`: a set's attempt at every name at once, as the wait
//! sends it (or replays it, or gives back what it took when its caller is gone),
//! and its reply as the wait reads it.

use std::sync::Arc;

use tokio::time::Instant;

use super::attempt::{refused, Answer, Attempt};
use super::chain::may_reenter;
use super::grant::reentry_lease;
use super::options::LeasePolicy;
use crate::context::LockContext;
use crate::detach::join_all;
use crate::error::LockError;
use crate::handoff::{Granted, Unclaimed};
use crate::hold::{HeldLock, Hold};
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::layout::args::{AcquireAll, SetName};
use crate::owner::{Op, Owner};
use crate::release;
use crate::scripts::{unexpected_reply, AcquireAllReply, AcquireReply};

/// A set taken in one run: its keys, in canonical order, and the chain's holds of
/// those it re-enters.
pub(super) struct NameSet {
    pub(super) keys: Vec<Arc<LockKeys>>,
    pub(super) held: Vec<Option<HeldLock>>,
}

impl NameSet {
    /// The set of `keys` for the chain of `context`: refused when a name it
    /// re-enters was lost, or took no fencing token and `fencing` is asked for.
    pub(super) fn new(
        inner: &Inner,
        context: &LockContext,
        keys: &[Arc<LockKeys>],
        fencing: bool,
    ) -> Result<Self, LockError> {
        let held: Vec<Option<HeldLock>> = keys
            .iter()
            .map(|keys| context.find(inner.id, keys).cloned())
            .collect();
        for held in held.iter().flatten() {
            may_reenter(&held.hold, fencing, "a set that re-enters", "")?;
        }
        Ok(Self {
            keys: keys.to_vec(),
            held,
        })
    }

    /// The keys of the name at `index`.
    pub(super) fn keys(&self, index: usize) -> Arc<LockKeys> {
        self.keys[index.min(self.keys.len().saturating_sub(1))].clone()
    }
}

/// One name of a set's attempt: under which owner, as which of its operations;
/// for a re-entry, the chain's hold it adds to.
#[derive(Clone)]
struct SetMember {
    keys: Arc<LockKeys>,
    owner: Arc<Owner>,
    op: Arc<Op>,
    lease_ms: u64,
    hold: Option<Arc<Hold>>,
}

/// Everything needed to send (or replay) one run of `acquire_all.lua`.
#[derive(Clone)]
pub(super) struct SetAttempt {
    inner: Arc<Inner>,
    names: Arc<[SetMember]>,
    fencing: bool,
    /// What the client writes of the holder of each lock it creates (`who.rs`):
    /// `None` when the first renewal names it instead.
    who: Option<Arc<str>>,
    /// When the attempt was made, before it was first sent.
    sent: Instant,
}

impl SetAttempt {
    /// One run of `acquire_all.lua` of `set` for `owner`, holding as `policy` says
    /// (sent by [`run`](super::attempt::run)).
    pub(super) fn new(
        inner: &Arc<Inner>,
        set: &NameSet,
        owner: &Arc<Owner>,
        policy: LeasePolicy,
        who: Option<&Arc<str>>,
    ) -> Self {
        let names = set
            .keys
            .iter()
            .zip(&set.held)
            .map(|(keys, held)| {
                let (owner, lease, hold) = match held {
                    Some(held) => (
                        held.hold.owner.clone(),
                        reentry_lease(held, policy),
                        Some(held.hold.clone()),
                    ),
                    None => (owner.clone(), policy.lease, None),
                };
                SetMember {
                    keys: keys.clone(),
                    op: owner.op(),
                    owner,
                    lease_ms: lease.as_millis() as u64,
                    hold,
                }
            })
            .collect();
        Self {
            inner: inner.clone(),
            names,
            fencing: policy.fencing,
            who: who.cloned(),
            sent: Instant::now(),
        }
    }

    /// The refusal of the name at `index` (the last one's keys past the end).
    fn refused(&self, index: usize, refusal: AcquireReply) -> Answer {
        let hold = self.names.get(index).and_then(|name| name.hold.as_deref());
        let keys = &self.names[index.min(self.names.len().saturating_sub(1))].keys;
        Answer::Refused(refused(keys, hold, refusal))
    }

    /// The set's reply as the wait reads it.
    fn answer(&self, reply: AcquireAllReply) -> Answer {
        match reply {
            AcquireAllReply::Acquired(grants) => {
                Answer::Granted(Unclaimed::new(Granted::Set(grants), self.sent))
            }
            AcquireAllReply::Busy { index, pttl_ms } => Answer::Busy { index, pttl_ms },
            AcquireAllReply::NotHeld { index } => self.refused(index, AcquireReply::NotHeld),
            AcquireAllReply::Conflict { index } => self.refused(index, AcquireReply::Conflict),
            AcquireAllReply::OtherKind { index, held_as } => {
                self.refused(index, AcquireReply::OtherKind { held_as })
            }
            AcquireAllReply::HeldAlready { index, count } => Answer::HeldAlready { index, count },
        }
    }
}

impl Attempt for SetAttempt {
    const WHAT: &'static str = "set acquire";

    /// Sends the set in one run of `acquire_all.lua`.
    ///
    /// # Cancel safety
    ///
    /// As [`Attempt::send`]: run under `attempt::run`.
    async fn send(self) -> redis::RedisResult<Answer> {
        let mut conn = self.inner.backend.first();
        let names = self.names.iter().map(|name| SetName {
            lock: &name.keys.lock,
            owner: name.owner.id(),
            lease_ms: name.lease_ms,
            seq: name.op.seq(),
            floor: name.op.floor(),
            reentry: name.hold.is_some(),
        });
        let set = AcquireAll {
            fencing: self.fencing,
            names: names.collect(),
            who: self.who.as_deref().unwrap_or(""),
        };
        let invocation = self.inner.scripts.acquire_all.invoke(&set);
        let reply: Vec<i64> = invocation.invoke_async(&mut conn).await?;
        let decoded = AcquireAllReply::decode(&reply, self.names.len())
            .ok_or_else(|| unexpected_reply("acquire_all.lua", &reply))?;
        Ok(self.answer(decoded))
    }

    /// Gives back one hold of each name, all at once.
    ///
    /// # Cancel safety
    ///
    /// As [`Attempt::give_back`].
    async fn give_back(self) {
        let inner = self.inner.clone();
        let releases =
            self.names.iter().cloned().map(move |name| {
                let inner = inner.clone();
                async move {
                    release::give_back(&inner, &name.keys, &name.owner, name.lease_ms, None).await
                }
            });
        join_all(releases).await;
    }

    /// Gives back what an abandoned attempt took, if it took anything, and a hold
    /// of a name that its owner had without the client knowing.
    ///
    /// # Cancel safety
    ///
    /// As [`Attempt::undo`].
    async fn undo(self, answer: Answer) {
        match answer {
            Answer::Granted(_) => self.give_back().await,
            Answer::HeldAlready { index, count } => {
                if let Some(name) = self.names.get(index) {
                    release::give_back_later(
                        &self.inner,
                        name.keys.clone(),
                        name.owner.clone(),
                        name.lease_ms,
                        (count, true),
                    );
                }
            }
            _ => {}
        }
    }

    fn name(&self) -> String {
        self.names
            .first()
            .map(|name| name.keys.display())
            .unwrap_or_default()
    }
}
