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

/// Renews every hold of `batch` once, each to its own lease, or to `lease` when it
/// is given: per hold, `Some(true)` renewed, `Some(false)` no longer held by its
/// owner, `None` unknown (to be retried soon). On Redlock every node renews the
/// whole batch, and the majority rules decide.
pub(crate) async fn renew(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    batch: &[Arc<Hold>],
    acks: Option<(u32, Duration)>,
    lease: Option<Duration>,
) -> redis::RedisResult<Vec<Option<bool>>> {
    if !backend.is_redlock() {
        let replies = send_to(
            backend.first(),
            scripts.clone(),
            batch.to_vec(),
            acks,
            lease,
        )
        .await?;
        return Ok(replies.iter().map(renew_reply).collect());
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
                    .and_then(renew_reply)
            });
            redlock::renew(replies, backend.quorum(), backend.len())
        })
        .collect();
    Ok(combined)
}

/// Renews `batch` on one endpoint: one pipeline on a single server; on a cluster
/// one pipeline per hash slot (a pipeline may not cross slots), sent concurrently.
/// A reply that could not be had is `Nil` (retried soon).
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
) -> redis::RedisResult<Vec<Value>> {
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
    let mut replies = vec![Value::Nil; batch.len()];
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
/// slot). When the server lost its scripts (a restart, `FUNCTION FLUSH`), loads
/// them and sends it again. One reply per hold, in order: `Nil` for the holds of a
/// run that failed (retried soon).
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
) -> redis::RedisResult<Vec<Value>> {
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
    if let Some((needed, _)) = acks {
        let acked = match replies.get(runs) {
            Some(Value::Int(acked)) => *acked,
            _ => 0,
        };
        if acked < i64::from(needed) {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "too few replicas acknowledged the renewal",
                format!("{acked} of {needed}"),
            )));
        }
    }
    let mut answers = Vec::with_capacity(holds.len());
    for (run, reply) in holds.chunks(MAX_BATCH).zip(replies) {
        match reply {
            Value::Array(values) if values.len() == run.len() => answers.extend(values),
            _ => answers.extend(std::iter::repeat_n(Value::Nil, run.len())),
        }
    }
    answers.resize(holds.len(), Value::Nil);
    Ok(answers)
}

/// Extends the fixed lease of `hold` so that it lasts at least `lease` from now, if
/// its owner still holds the lock: one run of `renew.lua` (which only ever moves an
/// expiry later), with the replica acknowledgements the client asks for. On
/// success the hold counts on the new end (send time + `lease` − drift, never
/// earlier than before), and re-entries and partial releases extend to at least
/// `lease` from then on. A lock found gone is lost ([`LostReason::NotHeld`]).
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
    match replies.first().copied().flatten() {
        Some(true) => {
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
        Some(false) => {
            hold.mark_lost(
                LostReason::NotHeld,
                "the lock was not held by its owner when its lease was to be extended",
            );
            Err(hold.lost_error())
        }
        None => Err(LockError::Redis(unexpected_reply(
            "renew.lua",
            "no answer that a majority agrees on",
        ))),
    }
}
