//! One renewal round trip: the leases of a batch of holds extended on the backend,
//! in one pipeline per endpoint (per hash slot on a cluster) of one script run per
//! 64 holds, with the replica acknowledgements the client asks for. On Redlock a
//! lock found free on some nodes while a majority still has it is written back
//! there. When to renew is the watchdog's business; [`extend`] is the same round
//! trip for one hold of a fixed lease, asked for by its guard.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use tokio::time::Instant;

use crate::backend::{redlock, slot, Backend, Conn};
use crate::batch::MAX_RENEWALS;
use crate::error::{is_failover_code, LockError, LostReason};
use crate::hold::Hold;
use crate::layout::args;
use crate::lease::{lease_millis, validity};
use crate::library::is_missing_reply;
use crate::owner::Op;
use crate::scripts::{renew_reply, unexpected_reply, RenewReply, Scripts};

/// What one renewal found for one hold.
///
/// Only a "held" answer depends on the replica acknowledgements the client asks
/// for (`replicas(n, ..)`): they decide whether the lease counts as extended. A
/// "not held" answer needs none: the lock is gone from the master that answered,
/// and the holder is told at once, however many replicas acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Held: the lease was renewed, with every acknowledgement asked for (or none
    /// was asked for).
    Held,
    /// Held on the master that answered, whose lease was renewed, but only `acked`
    /// replicas acknowledged it, fewer than asked.
    Unconfirmed { acked: u32 },
    /// No longer held by its owner: its lease ended in Redis, it was
    /// force-unlocked, or the key now holds what distlock did not write.
    Gone,
    /// No answer that can be read (a failed run, a lost reply, a split Redlock
    /// vote): tried again soon.
    Unknown,
}

impl Renewal {
    /// A single endpoint's answer for one hold.
    fn of(answer: Answer) -> Self {
        match (answer.reply, answer.short) {
            (Some(RenewReply::Held), Some(acked)) => Self::Unconfirmed { acked },
            (Some(RenewReply::Held), None) => Self::Held,
            (Some(RenewReply::Free | RenewReply::Taken), _) => Self::Gone,
            (None, _) => Self::Unknown,
        }
    }
}

/// What one endpoint answered for one hold.
#[derive(Debug, Clone, Copy)]
struct Answer {
    /// `renew.lua`'s answer; `None` when it could not be had.
    reply: Option<RenewReply>,
    /// How many replicas acknowledged, when fewer than the client asks for.
    short: Option<u32>,
}

impl Answer {
    /// No answer (retried soon).
    const NONE: Self = Self {
        reply: None,
        short: None,
    };
}

/// Renews every hold of `batch` once, each to its own lease, or to `lease` when it
/// is given: one [`Renewal`] per hold, in order. On Redlock every node renews the
/// whole batch, and the majority rules decide.
///
/// # Cancel safety
///
/// Dropped midway (the watchdog's round timed out or gave way), a renewal or a
/// Redlock write-back may have been applied on some nodes and not others; each is
/// safe to repeat (a write-back never goes over an existing key), and the holds'
/// state is changed only by the caller, from the answers, so the next round asks
/// again.
pub(crate) async fn renew(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    batch: &[Arc<Hold>],
    acks: Option<(u32, Duration)>,
    lease: Option<Duration>,
) -> redis::RedisResult<Vec<Renewal>> {
    if !backend.is_redlock() {
        let answers = send_to(
            backend.first(),
            scripts.clone(),
            batch.to_vec(),
            acks,
            lease,
        )
        .await?;
        return Ok(answers.into_iter().map(Renewal::of).collect());
    }
    let holds: Vec<Arc<Hold>> = batch.to_vec();
    let per_node = backend
        .each(|conn| send_to(conn, scripts.clone(), holds.clone(), None, lease))
        .await;
    // Per node, the holds (by index) to write back there.
    let mut repairs: Vec<Vec<usize>> = vec![Vec::new(); backend.nodes().len()];
    let combined = (0..batch.len())
        .map(|index| {
            let replies: Vec<Option<RenewReply>> = per_node
                .iter()
                .map(|answers| {
                    answers
                        .as_ref()
                        .ok()
                        .and_then(|answers| answers.get(index))
                        .and_then(|answer| answer.reply)
                })
                .collect();
            let vote = redlock::renew(&replies, backend.quorum(), backend.nodes().len());
            for node in vote.repair {
                repairs[node].push(index);
            }
            match vote.held {
                Some(true) => Renewal::Held,
                Some(false) => Renewal::Gone,
                None => Renewal::Unknown,
            }
        })
        .collect();
    write_back(backend, scripts, batch, repairs, lease).await;
    Ok(combined)
}

/// A hold to write back on a Redlock node that lost it: how many times its owner
/// holds it (its guards), and the write-back's number among the owner's operations
/// (pending until the write-back's answer is in).
struct WriteBack {
    hold: Arc<Hold>,
    count: usize,
    op: Arc<Op>,
}

impl WriteBack {
    /// The write-back of `hold`, unless it is not a plain lock (the other kinds are
    /// not written back), or is lost, released or given back by a shutdown.
    fn of(hold: &Arc<Hold>) -> Option<Self> {
        if !hold.keys.kind.is_plain() || hold.lost.is_cancelled() {
            return None;
        }
        let count = {
            let state = hold.state();
            (!state.closed && state.guards > 0).then_some(state.guards)?
        };
        Some(Self {
            hold: hold.clone(),
            count,
            op: hold.owner.op(),
        })
    }

    /// `renew.lua`'s `ARGV[3i]`: `"<count> <seq> <floor>"`.
    fn spec(&self) -> args::WriteBack {
        args::WriteBack {
            count: self.count as u64,
            seq: self.op.seq(),
            floor: self.op.floor(),
        }
    }
}

/// Redlock: writes the holds of `batch` back on the nodes where a renewal found
/// them free while a majority still has them (`repairs`, per node: indices into
/// `batch`; see [`redlock::renew`]), with the lease the renewal gave, so that nodes
/// that lose a lock one after another (restarts without persistence spread over
/// time) never add up to a lost majority. `renew.lua` writes a hold back only where
/// the lock is still free (nobody else took it there meanwhile); a node where it
/// cannot be written back counts against the majority, as before. Logged at INFO.
///
/// # Cancel safety
///
/// Safe to drop: a write-back is applied or not; one applied after its hold was
/// released leaves that node held until the lease ends, a minority of the nodes.
async fn write_back(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    batch: &[Arc<Hold>],
    repairs: Vec<Vec<usize>>,
    lease: Option<Duration>,
) {
    let work: Vec<Vec<WriteBack>> = repairs
        .into_iter()
        .map(|indices| {
            indices
                .into_iter()
                .filter_map(|index| WriteBack::of(&batch[index]))
                .collect()
        })
        .collect();
    if work.iter().all(Vec::is_empty) {
        return;
    }
    let work = Arc::new(work);
    backend
        .each_at(|node, mut conn| {
            let (work, scripts) = (work.clone(), scripts.clone());
            async move {
                let items = &work[node];
                if items.is_empty() {
                    return Ok(());
                }
                let holds: Vec<Arc<Hold>> = items.iter().map(|item| item.hold.clone()).collect();
                let specs: Vec<args::WriteBack> = items.iter().map(WriteBack::spec).collect();
                let answers =
                    renew_pipeline(&mut conn, &scripts, &holds, &specs, None, lease).await?;
                let written = answers
                    .iter()
                    .filter(|answer| answer.reply == Some(RenewReply::Held))
                    .count();
                tracing::info!(
                    address = %conn.addr(),
                    written,
                    asked = items.len(),
                    "distlock: wrote {written} of {} lock(s) back on a Redlock node that had lost \
                     them (a restart without persistence, say) while a majority still held them",
                    items.len()
                );
                Ok(())
            }
        })
        .await;
}

/// Renews `batch` on one endpoint: one pipeline on a single server; on a cluster
/// one pipeline per hash slot (a pipeline may not cross slots), sent concurrently.
/// A reply that could not be had is [`Answer::NONE`] (retried soon).
///
/// # Cancel safety
///
/// Safe to drop: each renewal is applied or not, and only moves a lease later.
async fn send_to(
    mut conn: Conn,
    scripts: Arc<Scripts>,
    batch: Vec<Arc<Hold>>,
    acks: Option<(u32, Duration)>,
    lease: Option<Duration>,
) -> redis::RedisResult<Vec<Answer>> {
    if !conn.is_cluster() {
        return renew_pipeline(&mut conn, &scripts, &batch, &[], acks, lease).await;
    }
    let mut groups: HashMap<u16, Vec<usize>> = HashMap::new();
    for (index, hold) in batch.iter().enumerate() {
        groups.entry(slot(&hold.keys.lock)).or_default().push(index);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for indices in groups.into_values() {
        let mut conn = conn.clone();
        let scripts = scripts.clone();
        let holds: Vec<Arc<Hold>> = indices.iter().map(|&i| batch[i].clone()).collect();
        tasks.spawn(async move {
            let replies = renew_pipeline(&mut conn, &scripts, &holds, &[], acks, lease).await;
            (indices, replies)
        });
    }
    let mut replies = vec![Answer::NONE; batch.len()];
    while let Some(joined) = tasks.join_next().await {
        let Ok((indices, Ok(values))) = joined else {
            continue;
        };
        for (index, value) in indices.into_iter().zip(values) {
            replies[index] = value;
        }
    }
    Ok(replies)
}

/// Sends one pipeline of renewals: one run of `renew.lua` per [`MAX_RENEWALS`] holds
/// (group commit: the holds of one pipeline are on one server, or in one hash
/// slot), then `WAIT` when the client asks for replica acknowledgements. `specs`:
/// empty to renew only, else one write-back per hold ([`WriteBack::spec`]). When
/// the server lost its scripts (a restart, `FUNCTION FLUSH`), loads them and sends
/// it again. One [`Answer`] per hold, in order: [`Answer::NONE`] for the holds of a
/// run that failed (retried soon). Every answer is read whatever `WAIT` counted:
/// too few acknowledgements only keep a "held" answer from counting as renewed.
///
/// # Cancel safety
///
/// Safe to drop: each renewal is applied or not, and only moves a lease later.
async fn renew_pipeline(
    conn: &mut Conn,
    scripts: &Scripts,
    holds: &[Arc<Hold>],
    specs: &[args::WriteBack],
    acks: Option<(u32, Duration)>,
    lease: Option<Duration>,
) -> redis::RedisResult<Vec<Answer>> {
    let runs = holds.len().div_ceil(MAX_RENEWALS);
    let now = Instant::now();
    let pipe = |way| {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (run, start) in holds.chunks(MAX_RENEWALS).zip((0..).step_by(MAX_RENEWALS)) {
            let mut invocation = scripts.renew.prepare_invoke();
            for (offset, hold) in run.iter().enumerate() {
                // Never past `max_hold` and a lease (the check after a replaced
                // server renews a hold whose renewals `max_hold` stopped, too).
                let (own_lease, named) = {
                    let state = hold.state();
                    (state.extension(now), state.named)
                };
                invocation.push(&args::Renew {
                    lock: &hold.keys.lock,
                    owner: hold.owner.id(),
                    lease_ms: lease.unwrap_or(own_lease).as_millis() as u64,
                    write_back: specs.get(start + offset).copied(),
                    name: (!named).then(|| args::Naming {
                        held_ms: hold.acquired.elapsed().as_millis() as u64,
                        who: &hold.who,
                    }),
                });
            }
            invocation.add_to(&mut pipe, way);
        }
        if let Some((needed, timeout)) = acks {
            // A renewal counts only once replicas have it, as the acquire did.
            pipe.cmd("WAIT").arg(needed).arg(timeout.as_millis() as u64);
        }
        pipe
    };
    let missing = |replies: &Vec<Value>| replies.iter().any(is_missing_reply);
    let replies: Vec<Value> = scripts.renew.query_pipe(conn, pipe, missing).await?;
    // A demoted master answers READONLY: find the new one, and renew there.
    let moved = replies.iter().find_map(|reply| match reply {
        Value::ServerError(err) if is_failover_code(err.code()) => {
            Some(redis::RedisError::from(err.clone()))
        }
        _ => None,
    });
    if let Some(err) = moved {
        conn.notice_error(&err).await;
        return Err(err);
    }
    // How many replicas acknowledged, when fewer than asked for (an unreadable
    // count is none).
    let short = acks.and_then(|(needed, _)| {
        let acked = match replies.get(runs) {
            Some(Value::Int(acked)) => u32::try_from(*acked).unwrap_or(0),
            _ => 0,
        };
        (acked < needed).then_some(acked)
    });
    let mut answers = Vec::with_capacity(holds.len());
    for (run, reply) in holds.chunks(MAX_RENEWALS).zip(replies) {
        match reply {
            Value::Array(values) if values.len() == run.len() => {
                answers.extend(values.iter().map(|value| Answer {
                    reply: renew_reply(value),
                    short,
                }))
            }
            _ => answers.extend(std::iter::repeat_n(Answer::NONE, run.len())),
        }
    }
    answers.resize(holds.len(), Answer::NONE);
    Ok(answers)
}

/// What one renewal of a hold that is still held came to ([`extend_once`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extended {
    /// Renewed: the hold counts on the new end.
    Renewed,
    /// Held, but acknowledged by `acked` replicas, fewer than the client asks for:
    /// the hold keeps its old end.
    TooFewReplicas { acked: u32 },
}

/// Renews the one hold `hold` to a lease of `lease` from now, with the replica
/// acknowledgements the client asks for (see [`renew`]): renewed, the hold counts on
/// the new end (never earlier than before); held but acknowledged by too few
/// replicas, it keeps its old end; gone, it is lost for `why`
/// ([`LostReason::NotHeld`]).
///
/// # Cancel safety
///
/// Safe to drop: the renewal is applied or not, and only moves a lease later.
pub(crate) async fn extend_once(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    hold: &Arc<Hold>,
    (lease, acks): (Duration, Option<(u32, Duration)>),
    why: &'static str,
) -> Result<Extended, LockError> {
    let sent = Instant::now();
    let one = std::slice::from_ref(hold);
    let replies = renew(backend, scripts, one, acks, Some(lease)).await?;
    match replies.first().copied().unwrap_or(Renewal::Unknown) {
        Renewal::Held => {
            let mut state = hold.state();
            state.deadline = state.deadline.max(sent + validity(lease));
            Ok(Extended::Renewed)
        }
        Renewal::Unconfirmed { acked } => Ok(Extended::TooFewReplicas { acked }),
        Renewal::Gone => {
            hold.mark_lost(LostReason::NotHeld, why);
            Err(hold.lost_error())
        }
        Renewal::Unknown => Err(LockError::Redis(unexpected_reply(
            "renew.lua",
            "no answer that a majority agrees on",
        ))),
    }
}

/// Extends the fixed lease of `hold` so that it lasts at least `lease` from now, if
/// its owner still holds the lock: one run of `renew.lua` (which only ever moves an
/// expiry later), with the replica acknowledgements the client asks for. On
/// success the hold counts on the new end (send time + `lease` − drift, never
/// earlier than before), and re-entries and partial releases extend to at least
/// `lease` from then on. A lock found gone is lost ([`LostReason::NotHeld`]),
/// however many replicas acknowledged; one found held by fewer replicas than the
/// client asks for keeps its old end (a `Redis` error says how many did).
///
/// # Cancel safety
///
/// Dropping the future may leave the lease extended in Redis while the hold still
/// counts on its old end (its guard reports the loss then, and `unlock` gives the
/// lock back either way); nothing else changes.
pub(crate) async fn extend(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    hold: &Arc<Hold>,
    lease: Duration,
    acks: Option<(u32, Duration)>,
) -> Result<(), LockError> {
    let lease = Duration::from_millis(lease_millis("extend", lease)?);
    let (watchdog, closed) = {
        let state = hold.state();
        (state.watchdog, state.closed)
    };
    if watchdog {
        return Err(LockError::invalid_option(
            "extend",
            format!(
                "the lease of `{}` is renewed by the watchdog; `extend` is for a fixed \
                 lease (`.lease(d)`), which nothing else renews",
                hold.display()
            ),
        ));
    }
    if closed || hold.is_lost() {
        return Err(hold.lost_error());
    }
    let why = "the lock was not held by its owner when its lease was to be extended";
    match extend_once(backend, scripts, hold, (lease, acks), why).await? {
        Extended::Renewed => {
            let mut state = hold.state();
            state.lease = state.lease.max(lease);
        }
        Extended::TooFewReplicas { acked } => {
            return Err(LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "too few replicas acknowledged the extension",
                format!("{acked} of {}", acks.map_or(0, |(needed, _)| needed)),
            ))))
        }
    }
    // A reply that came after the old end: the guard was told of the loss.
    if hold.is_lost() {
        return Err(hold.lost_error());
    }
    Ok(())
}
