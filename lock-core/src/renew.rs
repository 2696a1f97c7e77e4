//! One renewal round trip: the leases of a batch of holds extended on the backend,
//! in one pipeline per endpoint (per hash slot on a cluster) of one script run per
//! 64 holds, with the replica acknowledgements the client asks for. When to renew
//! is the watchdog's business; [`extend`] is the same round trip for one hold of a
//! fixed lease, asked for by its guard.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use tokio::time::Instant;

use crate::backend::{redlock, slot, Backend, Conn};
use crate::batch::MAX_BATCH;
use crate::error::{is_failover_code, LockError, LostReason};
use crate::hold::Hold;
use crate::lease::{lease_millis, validity};
use crate::library::is_missing_reply;
use crate::scripts::{renew_reply, unexpected_reply, Scripts};

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
    /// The answer of one endpoint to one hold: `reply` (`renew.lua`'s answer),
    /// and how many replicas acknowledged its pipeline when `needed` were asked for.
    fn of(reply: &Value, acked: Option<(u32, u32)>) -> Self {
        match (renew_reply(reply), acked) {
            (Some(true), Some((acked, needed))) if acked < needed => Self::Unconfirmed { acked },
            (Some(true), _) => Self::Held,
            (Some(false), _) => Self::Gone,
            (None, _) => Self::Unknown,
        }
    }

    /// As Redlock's majority rules count it (`replicas` is refused on Redlock).
    fn vote(self) -> Option<bool> {
        match self {
            Self::Held => Some(true),
            Self::Gone => Some(false),
            Self::Unconfirmed { .. } | Self::Unknown => None,
        }
    }
}

/// Renews every hold of `batch` once, each to its own lease, or to `lease` when it
/// is given: one [`Renewal`] per hold, in order. On Redlock every node renews the
/// whole batch, and the majority rules decide.
pub(crate) async fn renew(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    batch: &[Arc<Hold>],
    acks: Option<(u32, Duration)>,
    lease: Option<Duration>,
) -> redis::RedisResult<Vec<Renewal>> {
    if !backend.is_redlock() {
        return send_to(
            backend.first(),
            scripts.clone(),
            batch.to_vec(),
            acks,
            lease,
        )
        .await;
    }
    let holds: Vec<Arc<Hold>> = batch.to_vec();
    let per_node = backend
        .each(|conn| send_to(conn, scripts.clone(), holds.clone(), None, lease))
        .await;
    let combined = (0..batch.len())
        .map(|index| {
            let replies = per_node.iter().map(|replies| {
                replies
                    .as_ref()
                    .ok()
                    .and_then(|replies| replies.get(index))
                    .and_then(|renewal| renewal.vote())
            });
            match redlock::renew(replies, backend.quorum(), backend.len()) {
                Some(true) => Renewal::Held,
                Some(false) => Renewal::Gone,
                None => Renewal::Unknown,
            }
        })
        .collect();
    Ok(combined)
}

/// Renews `batch` on one endpoint: one pipeline on a single server; on a cluster
/// one pipeline per hash slot (a pipeline may not cross slots), sent concurrently.
/// A reply that could not be had is [`Renewal::Unknown`] (retried soon).
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
) -> redis::RedisResult<Vec<Renewal>> {
    if !conn.is_cluster() {
        return renew_pipeline(&mut conn, &scripts, batch.iter(), acks, lease).await;
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
            let replies = renew_pipeline(&mut conn, &scripts, holds.iter(), acks, lease).await;
            (indices, replies)
        });
    }
    let mut replies = vec![Renewal::Unknown; batch.len()];
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

/// Sends one pipeline of renewals: one run of `renew.lua` per [`MAX_BATCH`] holds
/// (group commit: the holds of one pipeline are on one server, or in one hash
/// slot), then `WAIT` when the client asks for replica acknowledgements. When the
/// server lost its scripts (a restart, `FUNCTION FLUSH`), loads them and sends it
/// again. One [`Renewal`] per hold, in order: [`Renewal::Unknown`] for the holds of
/// a run that failed (retried soon). Every answer is read whatever `WAIT` counted:
/// too few acknowledgements only keep a "held" answer from counting as renewed.
///
/// # Cancel safety
///
/// Safe to drop: each renewal is applied or not, and only moves a lease later.
async fn renew_pipeline<'a>(
    conn: &mut Conn,
    scripts: &Scripts,
    holds: impl Iterator<Item = &'a Arc<Hold>>,
    acks: Option<(u32, Duration)>,
    lease: Option<Duration>,
) -> redis::RedisResult<Vec<Renewal>> {
    let holds: Vec<&Arc<Hold>> = holds.collect();
    let runs = holds.len().div_ceil(MAX_BATCH);
    let pipe = |way| {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for run in holds.chunks(MAX_BATCH) {
            let mut invocation = scripts.renew.prepare_invoke();
            for hold in run {
                let lease_ms = lease.unwrap_or_else(|| hold.state().lease).as_millis() as u64;
                invocation
                    .key(&hold.keys.lock)
                    .arg(hold.owner.id())
                    .arg(lease_ms);
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
    // How many replicas acknowledged, of how many asked for (an unreadable count
    // is none).
    let acked = acks.map(|(needed, _)| {
        let acked = match replies.get(runs) {
            Some(Value::Int(acked)) => u32::try_from(*acked).unwrap_or(0),
            _ => 0,
        };
        (acked, needed)
    });
    let mut answers = Vec::with_capacity(holds.len());
    for (run, reply) in holds.chunks(MAX_BATCH).zip(replies) {
        match reply {
            Value::Array(values) if values.len() == run.len() => {
                answers.extend(values.iter().map(|value| Renewal::of(value, acked)))
            }
            _ => answers.extend(std::iter::repeat_n(Renewal::Unknown, run.len())),
        }
    }
    answers.resize(holds.len(), Renewal::Unknown);
    Ok(answers)
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
    let sent = Instant::now();
    let replies = renew(
        backend,
        scripts,
        std::slice::from_ref(hold),
        acks,
        Some(lease),
    )
    .await?;
    match replies.first().copied().unwrap_or(Renewal::Unknown) {
        Renewal::Held => {
            {
                let mut state = hold.state();
                state.deadline = state.deadline.max(sent + validity(lease));
                state.lease = state.lease.max(lease);
            }
            // A reply that came after the old end: the guard was told of the loss.
            if hold.is_lost() {
                return Err(hold.lost_error());
            }
            Ok(())
        }
        Renewal::Gone => {
            hold.mark_lost(
                LostReason::NotHeld,
                "the lock was not held by its owner when its lease was to be extended",
            );
            Err(hold.lost_error())
        }
        Renewal::Unconfirmed { acked } => Err(LockError::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "too few replicas acknowledged the extension",
            format!("{acked} of {}", acks.map_or(0, |(needed, _)| needed)),
        )))),
        Renewal::Unknown => Err(LockError::Redis(unexpected_reply(
            "renew.lua",
            "no answer that a majority agrees on",
        ))),
    }
}
