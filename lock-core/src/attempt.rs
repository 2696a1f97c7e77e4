//! One attempt at a lock: one run of `acquire.lua`, for every kind; sent to the backend
//! (with `WAIT` in the same pipeline when replicas must acknowledge a new lock; to
//! every node at once on Redlock), finished in the background when its caller goes away, replayed until
//! its outcome is known when the reply is lost, and any grant that no guard will
//! own given back through `release.rs`.

use std::sync::Arc;

use crate::backend::{redlock, Conn};
use crate::batch::{Acquisition, Request};
use crate::detach::{replay_until_known, spawn, Detached};
use crate::error::{outcome_unknown, LockError};
use crate::faults::{self, Fault};
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::kinds::LockKind;
use crate::layout::args::Withdraw;
use crate::owner::{Op, Owner};
use crate::release;
use crate::scripts::{request_answer, unexpected_reply, AcquireReply};

/// What one attempt came to, on the whole backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Taken (or re-entered): the owner's hold count and the fencing token (0: none).
    Acquired { count: u64, fence: u64 },
    /// Held by another owner for `pttl_ms` more milliseconds (negative: unknown).
    Busy { pttl_ms: i64 },
    /// A re-entry found that the owner no longer holds the lock.
    NotHeld,
    /// A key of the lock holds a value of another type.
    Conflict,
    /// The owner holds the read-write lock in the other mode (an upgrade).
    OtherMode,
    /// The name is held as another kind of lock.
    OtherKind { held_as: LockKind },
    /// A new acquisition found its own owner id holding the lock already, `count`
    /// times (on one node at least): a hold its client does not know of, left as
    /// it was (see `acquire.lua`, "Never added to").
    HeldAlready { count: u64 },
    /// Redlock: too few nodes granted it (their grants were given back): `granted`
    /// granted it, `held` answered that another owner holds it. Ask again after
    /// `retry_ms` at most (negative: unknown).
    NoQuorum {
        granted: u64,
        held: u64,
        retry_ms: i64,
    },
}

impl From<AcquireReply> for Outcome {
    fn from(reply: AcquireReply) -> Self {
        match reply {
            AcquireReply::Acquired { count, fence } => Self::Acquired { count, fence },
            AcquireReply::Busy { pttl_ms } => Self::Busy { pttl_ms },
            AcquireReply::NotHeld => Self::NotHeld,
            AcquireReply::Conflict => Self::Conflict,
            AcquireReply::OtherMode => Self::OtherMode,
            AcquireReply::OtherKind { held_as } => Self::OtherKind { held_as },
            AcquireReply::HeldAlready { count } => Self::HeldAlready { count },
        }
    }
}

/// One run of `acquire.lua` for `owner`, of the kind of `keys` (cheap to clone:
/// the client, keys and ids are shared).
#[derive(Clone)]
pub(crate) struct Attempt {
    pub(crate) inner: Arc<Inner>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Arc<Owner>,
    pub(crate) lease_ms: u64,
    pub(crate) fencing: bool,
    pub(crate) reentry: bool,
    /// For a read hold: the owner of the write hold that the caller's call chain
    /// holds, beside which the reader enters (a downgrade).
    pub(crate) writer: Option<Arc<str>>,
    /// Whether the caller waits if the lock cannot be had now: a writer then keeps
    /// its place (`#wait:<owner>`, see `lua/lock.lua`), which it must withdraw if it gives up.
    pub(crate) stays: bool,
    /// What the client writes of the holder with a new acquisition (`who.rs`);
    /// `None` for a re-entry.
    pub(crate) who: Option<Arc<str>>,
}

impl Attempt {
    /// Sends the script; if the caller drops the future mid-flight, the request runs
    /// to completion in the background and a hold it took is given back. If the
    /// reply is lost, the same attempt is replayed in the background until its outcome
    /// is known, and a hold it took is given back.
    pub(crate) async fn run(self) -> Result<Outcome, LockError> {
        let inner = self.inner.clone();
        let invoke = Invoke {
            op: self.owner.op(),
            attempt: self,
        };
        let abandoned = invoke.clone();
        let call = Detached::new(Box::pin(invoke.clone().send()), move |result| {
            Box::pin(abandoned.settle(result.map(|(outcome, _)| outcome)))
        });
        match call.await {
            Ok((outcome, acked)) => {
                if let (Outcome::Acquired { .. }, Some(acked)) = (outcome, acked) {
                    let needed = inner.config.replicas.map_or(0, |(n, _)| n);
                    if acked < i64::from(needed) {
                        // Too few replicas have the lock: a failover could lose it.
                        // Give it back, to the end even if the caller goes away
                        // meanwhile (a wait that ends during the give-back).
                        let give_back = async move { invoke.give_back().await };
                        Detached::new(Box::pin(give_back), |()| Box::pin(async {})).await;
                        return Err(LockError::ReplicationNotConfirmed {
                            acked: u32::try_from(acked).unwrap_or(0),
                            needed,
                        });
                    }
                }
                Ok(outcome)
            }
            Err(err) => {
                if outcome_unknown(&err) {
                    spawn(invoke.resolve());
                }
                Err(err.into())
            }
        }
    }
}

/// One attempt as it is sent, and replayed: the attempt, and its number among its
/// owner's operations (pending while any clone of this lives: the attempt, its
/// background completion, its replays).
#[derive(Clone)]
struct Invoke {
    attempt: Attempt,
    op: Arc<Op>,
}

impl std::ops::Deref for Invoke {
    type Target = Attempt;

    fn deref(&self) -> &Attempt {
        &self.attempt
    }
}

impl Invoke {
    /// Sends the attempt to the backend: one endpoint, or every Redlock node. With
    /// replica acknowledgements, their count comes back too.
    async fn send(self) -> redis::RedisResult<(Outcome, Option<i64>)> {
        if self.inner.backend.is_redlock() {
            return self.send_redlock().await.map(|outcome| (outcome, None));
        }
        let conn = self.inner.backend.first();
        let (reply, acked) = self.send_to(conn).await?;
        Ok((reply.into(), acked))
    }

    /// Sends the attempt to one endpoint: a new acquisition in a batch with the
    /// others ready at the same moment (`batch.rs`), a re-entry alone under
    /// `allow-oom`. When the client wants replica acknowledgements and this is a
    /// first acquisition, it goes alone with `WAIT` in the same pipeline (which
    /// counts only the writes of its own connection), and that answer comes back too.
    async fn send_to(self, mut conn: Conn) -> redis::RedisResult<(AcquireReply, Option<i64>)> {
        let request = self.request();
        let replicas = self.inner.config.replicas.filter(|_| !self.reentry);
        let Some((needed, timeout)) = replicas else {
            let reply = if self.reentry {
                let mut invocation = self.inner.scripts.reenter.prepare_invoke();
                request.add_to(&mut invocation);
                let mut replies: Vec<redis::Value> = invocation.invoke_async(&mut conn).await?;
                request_answer(
                    Acquisition::SCRIPT,
                    replies.pop().unwrap_or(redis::Value::Nil),
                )?
            } else {
                self.inner.acquisitions.submit(conn, request).await?
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
        let (mut replies, acked): (Vec<redis::Value>, i64) = self
            .inner
            .scripts
            .acquire
            .query_pipe(&mut conn, pipe, |_| false)
            .await?;
        let reply = request_answer(
            Acquisition::SCRIPT,
            replies.pop().unwrap_or(redis::Value::Nil),
        )?;
        Ok((decode(&reply)?, Some(acked)))
    }

    /// The attempt as `acquire.lua` takes it.
    fn request(&self) -> Acquisition {
        Acquisition {
            keys: self.keys.clone(),
            owner: self.owner.shared_id(),
            lease_ms: self.lease_ms,
            fencing: self.fencing,
            seq: self.op.seq(),
            floor: self.op.floor(),
            reentry: self.reentry,
            writer: self.writer.clone(),
            stays: self.stays,
            who: self.who.clone(),
        }
    }

    /// Redlock: the attempt goes to every node at once. It is granted when a
    /// majority granted it; otherwise every grant is given back before answering.
    async fn send_redlock(self) -> redis::RedisResult<Outcome> {
        let backend = self.inner.backend.clone();
        let replies = backend
            .each(|conn| {
                let invoke = self.clone();
                async move { invoke.send_to(conn).await.map(|(reply, _)| reply) }
            })
            .await;
        let decoded: Vec<Option<AcquireReply>> = replies
            .iter()
            .map(|reply| reply.as_ref().ok().copied())
            .collect();
        let (granted, conflict, refused, busy, wait_ms) =
            match redlock::acquire(&decoded, backend.quorum()) {
                redlock::AcquireVote::Granted { count } => {
                    return Ok(Outcome::Acquired { count, fence: 0 })
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
                release::give_back_node(&self.inner, conn, &self.keys, &self.owner, self.lease_ms)
                    .await;
            } else if matches!(reply, Err(err) if outcome_unknown(err)) {
                spawn(self.clone().resolve_on(conn));
            }
        }
        if conflict {
            return Ok(Outcome::Conflict);
        }
        if let Some(refusal) = refused {
            return Ok(refusal.into());
        }
        if self.reentry {
            return Ok(Outcome::NotHeld);
        }
        // Held by a majority elsewhere: wait for its release (or its lease). Too few
        // answers, or a split vote: everyone gave back, so try again after a short
        // random delay.
        Ok(Outcome::NoQuorum {
            granted: granted.len() as u64,
            held: busy as u64,
            retry_ms: wait_ms.unwrap_or_else(retry_delay_ms),
        })
    }

    /// Replays the attempt on one node until its outcome is known, and gives back
    /// the grant if there was one.
    async fn resolve_on(self, conn: Conn) {
        let name = self.keys.display();
        let reply = replay_until_known(&name, "Redlock node's acquire", || {
            self.clone().send_to(conn.clone())
        })
        .await;
        if let Some((AcquireReply::Acquired { .. }, _)) = reply {
            release::give_back_node(&self.inner, conn, &self.keys, &self.owner, self.lease_ms)
                .await;
        }
    }

    /// Undoes what an abandoned attempt did, once its outcome is known.
    async fn settle(self, result: redis::RedisResult<Outcome>) {
        match result {
            Ok(outcome) => self.undo(outcome).await,
            Err(err) if outcome_unknown(&err) => self.resolve().await,
            Err(_) => {}
        }
    }

    /// Replays the attempt (a no-op if it was applied) until the outcome is known,
    /// then undoes what it did.
    async fn resolve(self) {
        let name = self.keys.display();
        let reply = replay_until_known(&name, "acquire", || {
            let mut replay = self.clone();
            if replay.reentry && faults::active(Fault::ReentryReplayForgotten) {
                replay.op = replay.owner.op();
            }
            replay.send()
        })
        .await;
        if let Some((outcome, _)) = reply {
            self.undo(outcome).await;
        }
    }

    /// Undoes what the attempt did for a caller that is no longer there: gives back
    /// the hold it took, or takes back the place its writer kept; a hold of its
    /// owner that its client did not know of is given back too.
    async fn undo(&self, outcome: Outcome) {
        match outcome {
            Outcome::Acquired { .. } => self.give_back().await,
            Outcome::HeldAlready { count } => release::give_back_later(
                &self.inner,
                self.keys.clone(),
                self.owner.clone(),
                self.lease_ms,
                (count, true),
            ),
            Outcome::Busy { .. } | Outcome::NoQuorum { .. } if self.keeps_place() => {
                withdraw(&self.inner, &self.keys, &self.owner);
            }
            _ => {}
        }
    }

    /// Whether a busy answer left a place kept for this attempt's waiter.
    fn keeps_place(&self) -> bool {
        self.stays && self.keys.kind.keeps_place()
    }

    async fn give_back(&self) {
        release::give_back(&self.inner, &self.keys, &self.owner, self.lease_ms).await;
    }
}

/// Decodes `acquire.lua`'s reply.
fn decode(reply: &[i64]) -> redis::RedisResult<AcquireReply> {
    AcquireReply::decode(reply).ok_or_else(|| unexpected_reply("acquire.lua", reply))
}

/// A short random delay before retrying after a split Redlock vote, in ms (5 to 50).
fn retry_delay_ms() -> i64 {
    5 + (uuid::Uuid::new_v4().as_u128() % 46) as i64
}

/// Takes back, in the background, the place that the waiter `owner` keeps at the
/// lock of `keys` (a writer's or a fair lock's waiter's, `#wait:<owner>`, see
/// `lua/lock.lua`), on every node, with `withdraw.lua`, which wakes whoever the
/// place held back: for a wait that ended without the lock, or an attempt whose
/// caller went away. A place that cannot be taken back dies by itself within
/// seconds.
pub(crate) fn withdraw(inner: &Arc<Inner>, keys: &Arc<LockKeys>, owner: &Arc<Owner>) {
    let (inner, keys, owner) = (inner.clone(), keys.clone(), owner.shared_id());
    let publish = inner.backend.publish_command();
    spawn(async move {
        let scripts = inner.scripts.clone();
        let replies = inner
            .backend
            .each(|mut conn| {
                let (scripts, keys, owner) = (scripts.clone(), keys.clone(), owner.clone());
                async move {
                    scripts
                        .withdraw
                        .invoke(&Withdraw {
                            lock: &keys.lock,
                            publish,
                            owner: &owner,
                        })
                        .invoke_async::<i64, _>(&mut conn)
                        .await
                }
            })
            .await;
        if let Some(Err(err)) = replies.into_iter().find(Result::is_err) {
            tracing::debug!(error = %err, "distlock: could not take back a waiter's place; it ends by itself");
        }
    });
}
