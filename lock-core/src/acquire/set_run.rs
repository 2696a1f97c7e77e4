//! One run of `acquire_all.lua`: a set's attempt at every name at once, as the wait
//! sends it (or replays it, or gives back what it took when its caller is gone),
//! and its reply as the wait reads it.

use std::sync::Arc;
use std::time::Duration;

use super::answer::{Answer, Granted};
use super::grant::reentry_lease;
use super::options::{kind_conflict, LeasePolicy};
use crate::context::LockContext;
use crate::detach::{join_all, replay_until_known, spawn, Detached};
use crate::error::{outcome_unknown, LockError, LostReason};
use crate::hold::HeldLock;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::layout::args::{AcquireAll, SetName};
use crate::owner::{Op, Owner};
use crate::release;
use crate::scripts::{unexpected_reply, AcquireAllReply};

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
            let hold = &held.hold;
            if fencing && hold.fence.is_none() {
                return Err(LockError::invalid_option(
                    "fencing",
                    format!(
                        "fencing was asked for on a set that re-enters lock `{}`, whose \
                         outermost acquisition took no fencing token; ask for fencing on the \
                         outermost acquisition",
                        hold.display()
                    ),
                ));
            }
            if hold.is_lost() {
                return Err(hold.lost_error());
            }
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

    /// One run of `acquire_all.lua` for `owner`, holding as `policy` says.
    pub(super) fn invoke(
        &self,
        inner: &Arc<Inner>,
        owner: &Arc<Owner>,
        policy: LeasePolicy,
        who: &Arc<str>,
    ) -> SetInvoke {
        SetInvoke::new(inner, &self.keys, owner, &self.held, policy, who)
    }

    /// Gives back, in the background, every hold of a grant of `owner` that came
    /// too late to count on.
    pub(super) fn give_back_later(
        &self,
        inner: &Arc<Inner>,
        owner: &Arc<Owner>,
        policy: LeasePolicy,
        who: &Arc<str>,
    ) {
        let set = self.invoke(inner, owner, policy, who);
        spawn(async move { set.give_back().await });
    }

    /// One attempt of the set under `owner` (`acquire_all.lua`), as the wait reads
    /// it.
    ///
    /// # Cancel safety
    ///
    /// As [`SetInvoke::run`]: a request cut short is finished, and what it took
    /// given back, in the background.
    pub(super) async fn attempt(
        &self,
        inner: &Arc<Inner>,
        owner: &Arc<Owner>,
        policy: LeasePolicy,
        who: &Arc<str>,
    ) -> Result<Answer, LockError> {
        let reply = self.invoke(inner, owner, policy, who).run().await?;
        Ok(self.answer(reply))
    }

    /// The set's reply as the wait reads it.
    fn answer(&self, reply: AcquireAllReply) -> Answer {
        match reply {
            AcquireAllReply::Acquired(grants) => Answer::Granted(Granted::Set(grants)),
            AcquireAllReply::Busy { index, pttl_ms } => Answer::Busy { index, pttl_ms },
            AcquireAllReply::NotHeld { index } => {
                let Some(Some(held)) = self.held.get(index) else {
                    return Answer::Refused(unexpected_reply("acquire_all.lua", &[-1]).into());
                };
                held.hold.mark_lost(
                    LostReason::NotHeld,
                    "a set's re-entry found the lock no longer held by its owner",
                );
                Answer::Refused(held.hold.lost_error())
            }
            AcquireAllReply::Conflict { index } => Answer::Refused(LockError::KeyConflict {
                name: self.keys(index).display(),
            }),
            AcquireAllReply::OtherKind { index, held_as } => {
                Answer::Refused(kind_conflict(&self.keys(index), held_as))
            }
            AcquireAllReply::HeldAlready { index, count } => Answer::HeldAlready { index, count },
        }
    }

    /// The wait of the set ran out after `waited`: a timeout on the name last found
    /// busy; if none was, Redis did not answer in time.
    pub(super) fn ran_out(&self, busy: Option<usize>, waited: Duration) -> LockError {
        match busy {
            Some(index) => LockError::timeout(self.keys(index).display(), waited),
            None => LockError::Redis(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no timely answer from Redis for a set of {} locks within the wait of \
                     {waited:?}, and no other owner was seen holding one",
                    self.keys.len()
                ),
            ))),
        }
    }
}

/// One name of a set's attempt: under which owner, as which of its operations.
#[derive(Clone)]
struct NameOp {
    keys: Arc<LockKeys>,
    owner: Arc<Owner>,
    op: Arc<Op>,
    lease_ms: u64,
    reentry: bool,
}

/// Everything needed to send (or replay) one run of `acquire_all.lua`.
#[derive(Clone)]
pub(super) struct SetInvoke {
    inner: Arc<Inner>,
    names: Arc<[NameOp]>,
    fencing: bool,
    /// What the client writes of the holder of each lock it creates (`who.rs`).
    who: Arc<str>,
}

impl SetInvoke {
    fn new(
        inner: &Arc<Inner>,
        keys: &[Arc<LockKeys>],
        owner: &Arc<Owner>,
        held: &[Option<HeldLock>],
        policy: LeasePolicy,
        who: &Arc<str>,
    ) -> Self {
        let names = keys
            .iter()
            .zip(held)
            .map(|(keys, held)| {
                let (owner, lease, reentry) = match held {
                    Some(held) => (held.hold.owner.clone(), reentry_lease(held, policy), true),
                    None => (owner.clone(), policy.lease, false),
                };
                NameOp {
                    keys: keys.clone(),
                    op: owner.op(),
                    owner,
                    lease_ms: lease.as_millis() as u64,
                    reentry,
                }
            })
            .collect();
        Self {
            inner: inner.clone(),
            names,
            fencing: policy.fencing,
            who: who.clone(),
        }
    }

    /// Sends the attempt; if the caller drops the future mid-flight, it runs to the
    /// end in the background and every hold it took is given back; if the reply is
    /// lost, it is replayed in the background until its outcome is known, and every
    /// hold it took is given back.
    pub(super) async fn run(self) -> Result<AcquireAllReply, LockError> {
        let abandoned = self.clone();
        let call = Detached::new(Box::pin(self.clone().send()), move |result| {
            Box::pin(abandoned.settle(result))
        });
        match call.await {
            Ok(reply) => Ok(reply),
            Err(err) => {
                if outcome_unknown(&err) {
                    spawn(self.resolve());
                }
                Err(err.into())
            }
        }
    }

    async fn send(self) -> redis::RedisResult<AcquireAllReply> {
        let mut conn = self.inner.backend.first();
        let names = self.names.iter().map(|name| SetName {
            lock: &name.keys.lock,
            owner: name.owner.id(),
            lease_ms: name.lease_ms,
            seq: name.op.seq(),
            floor: name.op.floor(),
            reentry: name.reentry,
        });
        let set = AcquireAll {
            fencing: self.fencing,
            names: names.collect(),
            who: &self.who,
        };
        let invocation = self.inner.scripts.acquire_all.invoke(&set);
        let reply: Vec<i64> = invocation.invoke_async(&mut conn).await?;
        AcquireAllReply::decode(&reply, self.names.len())
            .ok_or_else(|| unexpected_reply("acquire_all.lua", &reply))
    }

    /// Gives back what an abandoned attempt took, if it took anything, and a hold
    /// of a name that its owner had without the client knowing.
    async fn settle(self, result: redis::RedisResult<AcquireAllReply>) {
        match result {
            Ok(AcquireAllReply::Acquired(_)) => self.give_back().await,
            Ok(AcquireAllReply::HeldAlready { index, count }) => {
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
            Ok(_) => {}
            Err(err) if outcome_unknown(&err) => self.resolve().await,
            Err(_) => {}
        }
    }

    /// Replays the attempt (a no-op if it was applied) until the outcome is known,
    /// then gives back every hold it took.
    async fn resolve(self) {
        let name = self
            .names
            .first()
            .map(|name| name.keys.display())
            .unwrap_or_default();
        let reply = replay_until_known(&name, "set acquire", || self.clone().send()).await;
        if let Some(AcquireAllReply::Acquired(_)) = reply {
            self.give_back().await;
        }
    }

    /// Gives back one hold of each name, all at once.
    async fn give_back(&self) {
        let inner = self.inner.clone();
        let releases = self.names.iter().cloned().map(move |name| {
            let inner = inner.clone();
            async move { release::give_back(&inner, &name.keys, &name.owner, name.lease_ms).await }
        });
        join_all(releases).await;
    }
}
