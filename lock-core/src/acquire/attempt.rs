//! One attempt, for a name (`acquire.lua`) or a set (`acquire_all.lua`), in one
//! skeleton ([`Attempt`], [`run`]): send; when the caller goes away mid-flight,
//! finish in the background and undo what it took (`undo_abandoned`); when the
//! reply is lost, replay under the same numbers until the outcome is known, then
//! undo (`resolve`). Each reply is decoded straight into the wait's [`Answer`],
//! refusals into their errors, here and only here.

use std::future::Future;
use std::sync::Arc;

use tokio::time::Instant;

use super::options::kind_conflict;
use crate::backend::{redlock, Conn};
use crate::batch::{Acquisition, Request};
use crate::detach::{replay_until_known, spawn, Detached};
use crate::error::{outcome_unknown, LockError, LostReason};
use crate::faults::{self, Fault};
use crate::handoff::{Granted, Unclaimed};
use crate::hold::Hold;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::owner::{Op, Owner};
use crate::release;
use crate::scripts::{request_answer, unexpected_reply, AcquireReply};

/// What one attempt came to, for a name or a set: one answer type for the one wait
/// loop (and a re-entry).
pub(crate) enum Answer {
    /// Granted: the owner's hold count and fencing token (0: none), per name; given
    /// back if dropped unclaimed.
    Granted(Unclaimed),
    /// The name at `index` (0 for one name) is held by another owner for
    /// `pttl_ms` more milliseconds (negative: unknown).
    Busy { index: usize, pttl_ms: i64 },
    /// Redlock: too few nodes granted it (their grants were given back): `granted`
    /// granted it, `held` answered that another owner holds it. Ask again after
    /// `retry_ms` at most (negative: unknown).
    NoQuorum {
        granted: u64,
        held: u64,
        retry_ms: i64,
    },
    /// Refused for good: the wait (or the re-entry) ends with this error.
    Refused(LockError),
    /// The name at `index` (0 for one name) was not taken: the attempt's owner id
    /// holds it already, `count` times, a hold no guard owns (see `acquire.lua`,
    /// "Never added to"). [`run`] gives it back, and the wait asks again under a
    /// fresh owner id.
    HeldAlready { index: usize, count: u64 },
}

/// What one attempt sends, for a name or a set: sent by [`run`], which settles and
/// resolves it the same way for both.
pub(super) trait Attempt: Clone + Send + Sync + Unpin + 'static {
    /// What a replay of a lost reply is, in the log.
    const WHAT: &'static str;

    /// Sends the attempt once, and reads its answer.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe on its own: [`run`] finishes it in the background.
    fn send(self) -> impl Future<Output = redis::RedisResult<Answer>> + Send + 'static;

    /// Gives back the holds a grant of the attempt took.
    ///
    /// # Cancel safety
    ///
    /// Run to the end in a task of its own.
    fn give_back(self) -> impl Future<Output = ()> + Send + 'static;

    /// Gives back what the attempt took, by `answer`, for a caller that is gone.
    ///
    /// # Cancel safety
    ///
    /// Run to the end in a task of its own.
    fn undo(self, answer: Answer) -> impl Future<Output = ()> + Send + 'static;

    /// The name (or first name) the attempt is for, in the log.
    fn name(&self) -> String;

    /// The attempt as a replay sends it: the same, under the same numbers.
    fn replay(&self) -> Self {
        self.clone()
    }
}

/// Sends `attempt`; if the caller drops the future mid-flight, the request runs to
/// completion in the background and what it took is given back. If the reply is
/// lost, the same attempt is replayed in the background until its outcome is
/// known, and what it took given back. A grant is given back if its answer is
/// dropped unclaimed; a hold of the owner that its client did not know of
/// ([`Answer::HeldAlready`]) is given back at once.
///
/// # Cancel safety
///
/// Cancel safe: what a request cut short took is given back in the background.
pub(super) async fn run<T: Attempt>(attempt: T) -> Result<Answer, LockError> {
    let abandoned = attempt.clone();
    let call = Detached::new(Box::pin(attempt.clone().send()), move |result| {
        Box::pin(undo_abandoned(abandoned, result))
    });
    match call.await {
        // A refusal that may pass (too few replicas acknowledged a grant) is an
        // error the wait asks again after.
        Ok(Answer::Refused(err)) if err.may_pass() => Err(err),
        Ok(Answer::Granted(grant)) => {
            let give_back = move || spawn(attempt.give_back());
            Ok(Answer::Granted(grant.given_back_by(give_back)))
        }
        Ok(Answer::HeldAlready { index, count }) => {
            spawn(attempt.undo(Answer::HeldAlready { index, count }));
            Ok(Answer::HeldAlready { index, count })
        }
        Ok(answer) => Ok(answer),
        Err(err) => {
            if outcome_unknown(&err) {
                spawn(resolve(attempt));
            }
            Err(err.into())
        }
    }
}

/// Undoes what an abandoned attempt did, once its outcome is known.
///
/// # Cancel safety
///
/// Run to the end in a task of its own (`Detached`'s abandon step).
async fn undo_abandoned<T: Attempt>(attempt: T, result: redis::RedisResult<Answer>) {
    match result {
        Ok(answer) => attempt.undo(answer).await,
        Err(err) if outcome_unknown(&err) => resolve(attempt).await,
        Err(_) => {}
    }
}

/// Replays the attempt (a no-op if it was applied) until its outcome is known, then
/// undoes what it did.
///
/// # Cancel safety
///
/// Run to the end in a task of its own; dropped, the replays stop and the
/// hold, if any, ends with its lease.
async fn resolve<T: Attempt>(attempt: T) {
    let name = attempt.name();
    let answer = replay_until_known(&name, T::WHAT, || attempt.replay().send()).await;
    if let Some(answer) = answer {
        attempt.undo(answer).await;
    }
}

/// One name's attempt: the arguments `acquire.lua` takes, as it sends them, and
/// the operation they are (pending while any clone of this lives: the attempt, its
/// background completion, its replays).
#[derive(Clone)]
pub(super) struct NameAttempt {
    inner: Arc<Inner>,
    owner: Arc<Owner>,
    op: Arc<Op>,
    request: Acquisition,
    /// A re-entry: the chain's hold it adds to (marked lost when it is gone).
    hold: Option<Arc<Hold>>,
    /// When the attempt was made, before it was first sent.
    sent: Instant,
}

impl NameAttempt {
    /// A new acquisition of the lock of `keys` by `owner` for `lease_ms`. `writer`:
    /// for a read hold beside the chain's own write hold, the writer's owner id;
    /// `stays`: whether the caller waits when it cannot have the lock now (a writer
    /// then keeps its place, `#wait:<owner>`, which it must take back when it goes).
    pub(super) fn new(
        inner: &Arc<Inner>,
        keys: &Arc<LockKeys>,
        owner: &Arc<Owner>,
        (lease_ms, fencing): (u64, bool),
        writer: Option<Arc<str>>,
        stays: bool,
        who: Option<&Arc<str>>,
    ) -> Self {
        let op = owner.op();
        let request = Acquisition {
            keys: keys.clone(),
            owner: owner.shared_id(),
            lease_ms,
            fencing,
            seq: op.seq(),
            floor: op.floor(),
            reentry: false,
            writer,
            stays,
            who: who.cloned(),
        };
        Self {
            inner: inner.clone(),
            owner: owner.clone(),
            op,
            request,
            hold: None,
            sent: Instant::now(),
        }
    }

    /// One more hold on the chain's `hold`, with a lease of `lease_ms`.
    pub(super) fn reentry(inner: &Arc<Inner>, hold: &Arc<Hold>, lease_ms: u64) -> Self {
        let lease = (lease_ms, false);
        let mut attempt = Self::new(inner, &hold.keys, &hold.owner, lease, None, false, None);
        attempt.request.reentry = true;
        attempt.hold = Some(hold.clone());
        attempt
    }

    fn keys(&self) -> &Arc<LockKeys> {
        &self.request.keys
    }

    /// Sends the attempt to one endpoint: a new acquisition in a batch with the
    /// others ready at the same moment (`batch.rs`), a re-entry alone under
    /// `allow-oom`. When the client wants replica acknowledgements and this is a
    /// first acquisition, it goes alone with `WAIT` in the same pipeline (which
    /// counts only the writes of its own connection), and that count comes back too.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may leave the request applied or not; callers run it under
    /// [`run`] or a replay, which find out.
    async fn send_to(&self, mut conn: Conn) -> redis::RedisResult<(AcquireReply, Option<i64>)> {
        let request = &self.request;
        let replicas = self.inner.config.replicas.filter(|_| !request.reentry);
        let Some((needed, timeout)) = replicas else {
            let reply = if request.reentry {
                let mut invocation = self.inner.scripts.reenter.prepare_invoke();
                request.add_to(&mut invocation);
                last_answer(invocation.invoke_async(&mut conn).await?)?
            } else {
                self.inner
                    .acquisitions
                    .submit(conn, request.clone())
                    .await?
            };
            return Ok((decode(&reply)?, None));
        };
        let mut invocation = self.inner.scripts.acquire.prepare_invoke();
        request.add_to(&mut invocation);
        let pipe = |way| {
            let mut pipe = redis::pipe();
            invocation.add_to(&mut pipe, way);
            pipe.cmd("WAIT").arg(needed).arg(timeout.as_millis() as u64);
            pipe
        };
        let (replies, acked): (Vec<redis::Value>, i64) = self
            .inner
            .scripts
            .acquire
            .query_pipe(&mut conn, pipe, |_| false)
            .await?;
        Ok((decode(&last_answer(replies)?)?, Some(acked)))
    }

    /// Redlock: the attempt goes to every node at once. It is granted when a
    /// majority granted it; otherwise every grant is given back before answering.
    ///
    /// # Cancel safety
    ///
    /// As [`send_to`](Self::send_to): run under [`run`], which gives back a grant
    /// whose answer is dropped.
    async fn send_redlock(&self) -> redis::RedisResult<Answer> {
        let backend = self.inner.backend.clone();
        let replies = backend
            .each(|conn| {
                let attempt = self.clone();
                async move { attempt.send_to(conn).await.map(|(reply, _)| reply) }
            })
            .await;
        let decoded: Vec<Option<AcquireReply>> = replies
            .iter()
            .map(|reply| reply.as_ref().ok().copied())
            .collect();
        let (granted, conflict, refused, busy, wait_ms) =
            match redlock::acquire(&decoded, backend.quorum()) {
                redlock::AcquireVote::Granted { count } => {
                    return Ok(self.answer(AcquireReply::Acquired { count, fence: 0 }))
                }
                redlock::AcquireVote::Short {
                    granted,
                    conflict,
                    refused,
                    busy,
                    wait_ms,
                } => (granted, conflict, refused, busy, wait_ms),
            };
        // Too few: give back what this attempt took, wherever it may have taken it.
        for (index, reply) in replies.iter().enumerate() {
            let conn = backend.nodes()[index].clone();
            if granted.contains(&index) {
                self.give_back_node(conn).await;
            } else if matches!(reply, Err(err) if outcome_unknown(err)) {
                spawn(self.clone().resolve_on(conn));
            }
        }
        let refusal = match (conflict, refused) {
            (true, _) => Some(AcquireReply::Conflict),
            (false, Some(refusal)) => Some(refusal),
            _ if self.request.reentry => Some(AcquireReply::NotHeld),
            _ => None,
        };
        if let Some(refusal) = refusal {
            return Ok(self.answer(refusal));
        }
        // Held by a majority elsewhere: wait for its release (or its lease). Too few
        // answers, or a split vote: everyone gave back, so try again after a short
        // random delay.
        Ok(Answer::NoQuorum {
            granted: granted.len() as u64,
            held: busy as u64,
            retry_ms: wait_ms.unwrap_or_else(retry_delay_ms),
        })
    }

    /// Replays the attempt on one node until its outcome is known, and gives back
    /// the grant if there was one.
    ///
    /// # Cancel safety
    ///
    /// Run to the end in a task of its own, as [`resolve`].
    async fn resolve_on(self, conn: Conn) {
        let name = self.keys().display();
        let reply = replay_until_known(&name, "Redlock node's acquire", || {
            self.send_to(conn.clone())
        })
        .await;
        if let Some((AcquireReply::Acquired { .. }, _)) = reply {
            self.give_back_node(conn).await;
        }
    }

    /// Gives back the grant of one Redlock node.
    ///
    /// # Cancel safety
    ///
    /// Run to the end in a task of its own: the release is detached inside.
    async fn give_back_node(&self, conn: Conn) {
        let lease_ms = self.request.lease_ms;
        release::give_back(&self.inner, self.keys(), &self.owner, lease_ms, Some(conn)).await;
    }

    /// `acquire.lua`'s reply as the wait (or the re-entry) reads it. A re-entry
    /// that finds the lock no longer held by its owner loses the chain's hold.
    fn answer(&self, reply: AcquireReply) -> Answer {
        match (reply, &self.hold) {
            (AcquireReply::Acquired { count, fence }, _) => {
                Answer::Granted(Unclaimed::new(Granted::One(count, fence), self.sent))
            }
            (AcquireReply::Busy { pttl_ms }, None) => Answer::Busy { index: 0, pttl_ms },
            (AcquireReply::HeldAlready { count }, None) => Answer::HeldAlready { index: 0, count },
            // A re-entry found another owner holding: it lost the lock.
            (AcquireReply::Busy { .. }, Some(_)) => Answer::Refused(refused(
                self.keys(),
                self.hold.as_deref(),
                AcquireReply::NotHeld,
            )),
            (refusal, hold) => Answer::Refused(refused(self.keys(), hold.as_deref(), refusal)),
        }
    }

    /// Whether a busy answer left a place kept for this attempt's waiter.
    fn keeps_place(&self) -> bool {
        self.request.stays && self.keys().kind.keeps_place()
    }
}

impl Attempt for NameAttempt {
    const WHAT: &'static str = "acquire";

    /// Sends the attempt to the backend: one endpoint, or every Redlock node. A
    /// grant that too few replicas acknowledged is given back (a failover could
    /// lose it) and refused.
    ///
    /// # Cancel safety
    ///
    /// As [`Attempt::send`]: run under [`run`].
    async fn send(self) -> redis::RedisResult<Answer> {
        if self.inner.backend.is_redlock() {
            return self.send_redlock().await;
        }
        let (reply, acked) = self.send_to(self.inner.backend.first()).await?;
        let needed = self.inner.config.replicas.map_or(0, |(n, _)| n);
        match (reply, acked) {
            (AcquireReply::Acquired { .. }, Some(acked)) if acked < i64::from(needed) => {
                self.clone().undo(self.answer(reply)).await;
                Ok(Answer::Refused(LockError::ReplicationNotConfirmed {
                    acked: u32::try_from(acked).unwrap_or(0),
                    needed,
                }))
            }
            _ => Ok(self.answer(reply)),
        }
    }

    /// Gives back the hold its grant took.
    ///
    /// # Cancel safety
    ///
    /// As [`Attempt::give_back`].
    async fn give_back(self) {
        let (inner, keys, lease_ms) = (&self.inner, self.keys(), self.request.lease_ms);
        release::give_back(inner, keys, &self.owner, lease_ms, None).await;
    }

    /// Gives back the hold it took, or takes back the place its writer kept; a
    /// hold of its owner that its client did not know of is given back too.
    ///
    /// # Cancel safety
    ///
    /// As [`Attempt::undo`].
    async fn undo(self, answer: Answer) {
        let (inner, keys, lease_ms) = (&self.inner, self.keys(), self.request.lease_ms);
        match answer {
            Answer::Granted(_) => self.give_back().await,
            Answer::HeldAlready { count, .. } => {
                let owner = self.owner.clone();
                release::give_back_later(inner, keys.clone(), owner, lease_ms, (count, true));
            }
            Answer::Busy { .. } | Answer::NoQuorum { .. } if self.keeps_place() => {
                release::take_back_place(inner, keys, &self.owner);
            }
            _ => {}
        }
    }

    fn name(&self) -> String {
        self.keys().display()
    }

    /// The seeded fault `ReentryReplayForgotten` renumbers a re-entry's replay.
    fn replay(&self) -> Self {
        let mut replay = self.clone();
        if replay.request.reentry && faults::active(Fault::ReentryReplayForgotten) {
            replay.op = replay.owner.op();
            (replay.request.seq, replay.request.floor) = (replay.op.seq(), replay.op.floor());
        }
        replay
    }
}

/// A refusal of the name of `keys` as the error it is, for a name's attempt and a
/// set's (whose `acquire_all.lua` refuses a name with the same answers): "not
/// held" loses the chain's `hold` that the attempt re-entered.
pub(super) fn refused(keys: &LockKeys, hold: Option<&Hold>, refusal: AcquireReply) -> LockError {
    match (refusal, hold) {
        (AcquireReply::NotHeld, Some(hold)) => {
            hold.mark_lost(
                LostReason::NotHeld,
                "a re-entry found the lock no longer held by its owner",
            );
            hold.lost_error()
        }
        (AcquireReply::Conflict, _) => LockError::KeyConflict {
            name: keys.display(),
        },
        (AcquireReply::OtherMode, _) => LockError::UpgradeNotAllowed {
            name: keys.display(),
        },
        (AcquireReply::OtherKind { held_as }, _) => kind_conflict(keys, held_as),
        // A new acquisition is never told "not held", a re-entry never "held
        // already" (see `acquire.lua`), and a grant or a busy answer is no refusal.
        (other, _) => unexpected_reply("acquire.lua", &other).into(),
    }
}

/// The answer of the last (the only) request of a run of `acquire.lua`.
fn last_answer(mut replies: Vec<redis::Value>) -> redis::RedisResult<Vec<i64>> {
    let reply = replies.pop().unwrap_or(redis::Value::Nil);
    request_answer(Acquisition::SCRIPT, reply)
}

/// Decodes `acquire.lua`'s reply.
fn decode(reply: &[i64]) -> redis::RedisResult<AcquireReply> {
    AcquireReply::decode(reply).ok_or_else(|| unexpected_reply("acquire.lua", reply))
}

/// A short random delay before retrying after a split Redlock vote, in ms (5 to 50).
fn retry_delay_ms() -> i64 {
    5 + (uuid::Uuid::new_v4().as_u128() % 46) as i64
}
