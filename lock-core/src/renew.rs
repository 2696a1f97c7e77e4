//! One renewal round trip: the leases of a batch of holds extended on the backend,
//! in one pipeline per endpoint (per hash slot on a cluster), with the replica
//! acknowledgements the client asks for. When to renew is the watchdog's business.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::backend::{redlock, slot, Backend, Conn};
use crate::error::is_failover_code;
use crate::hold::Hold;
use crate::scripts::{renew_reply, Scripts};

/// Renews every hold of `batch` once: per hold, `Some(true)` renewed, `Some(false)`
/// no longer held by its owner, `None` unknown (to be retried soon). On Redlock
/// every node renews the whole batch, and the majority rules decide.
pub(crate) async fn renew(
    backend: &Backend,
    scripts: &Arc<Scripts>,
    batch: &[Arc<Hold>],
    acks: Option<(u32, Duration)>,
) -> redis::RedisResult<Vec<Option<bool>>> {
    if !backend.is_redlock() {
        let replies = send_to(backend.first(), scripts.clone(), batch.to_vec(), acks).await?;
        return Ok(replies.iter().map(renew_reply).collect());
    }
    let holds: Vec<Arc<Hold>> = batch.to_vec();
    let per_node = backend
        .each(|conn| send_to(conn, scripts.clone(), holds.clone(), None))
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
async fn send_to(
    mut conn: Conn,
    scripts: Arc<Scripts>,
    batch: Vec<Arc<Hold>>,
    acks: Option<(u32, Duration)>,
) -> redis::RedisResult<Vec<Value>> {
    if !conn.is_cluster() {
        return renew_pipeline(&mut conn, &scripts, batch.iter(), acks).await;
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
            let replies = renew_pipeline(&mut conn, &scripts, holds.iter(), acks).await;
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

/// Sends one pipeline of renewals; when the server lost its scripts (a restart,
/// `SCRIPT FLUSH`), loads them and sends it again.
async fn renew_pipeline<'a>(
    conn: &mut Conn,
    scripts: &Scripts,
    holds: impl Iterator<Item = &'a Arc<Hold>>,
    acks: Option<(u32, Duration)>,
) -> redis::RedisResult<Vec<Value>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut count = 0;
    for hold in holds {
        count += 1;
        let lease_ms = hold.state().lease.as_millis() as u64;
        pipe.cmd("EVALSHA")
            .arg(scripts.renew.get_hash())
            .arg(1)
            .arg(&hold.keys.lock)
            .arg(hold.owner.id())
            .arg(lease_ms);
    }
    if let Some((needed, timeout)) = acks {
        // A renewal counts only once replicas have it, as the acquire did.
        pipe.cmd("WAIT").arg(needed).arg(timeout.as_millis() as u64);
    }
    let mut replies: Vec<Value> = pipe.query_async(conn).await?;
    let noscript = replies
        .iter()
        .any(|reply| matches!(reply, Value::ServerError(err) if err.code() == "NOSCRIPT"));
    if noscript {
        scripts.renew.load_async(conn).await?;
        replies = pipe.query_async(conn).await?;
    }
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
        let acked = match replies.get(count) {
            Some(Value::Int(acked)) => *acked,
            _ => 0,
        };
        replies.truncate(count);
        if acked < i64::from(needed) {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "too few replicas acknowledged the renewal",
                format!("{acked} of {needed}"),
            )));
        }
    }
    Ok(replies)
}
