//! The lock-order graph that every client of a namespace shares, in Redis
//! (`LockClientBuilder::share_lock_order`): each edge new to a client is recorded
//! in the hash `<ns>:lock-order` by `lua/order_edge.lua`, which answers the reverse
//! edge when another process (or service) recorded it, an inversion. The graph is
//! bounded ([`MAX_EDGES`] edges) and expires a day after its last new edge.
//!
//! A client asks once per edge, the first time it sees it: nothing in the steady
//! state. In warn mode the question goes in the background; in strict mode the
//! acquisition waits for the answer (one round trip, once per new edge), so that a
//! test suite fails on an inversion between two services too.

use std::sync::Arc;
use std::time::Duration;

use crate::detach::spawn;
use crate::error::LockError;
use crate::inner::Inner;
use crate::order::{NewEdge, MAX_EDGES};

/// How long the shared graph lives after its last new edge.
const GRAPH_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Records `edges`, new to this client, in the shared graph: in the background
/// when inversions are warned of, waiting for the answer when they are refused
/// (the first inversion found is the error). A graph that cannot be reached is
/// logged at DEBUG and skipped: the check is advice, never a reason to fail a lock.
///
/// # Cancel safety
///
/// Safe to drop: an edge whose recording is cut short is recorded by the next
/// client that sees it, or by this one never (it is in its memory already).
pub(crate) async fn record(inner: &Arc<Inner>, edges: Vec<NewEdge>) -> Result<(), LockError> {
    if edges.is_empty() || !inner.config.share_lock_order {
        return Ok(());
    }
    if !inner.order.is_strict() {
        let inner = inner.clone();
        spawn(async move {
            for edge in &edges {
                if let Some(before) = ask(&inner, edge).await {
                    inner.order.shared_inversion(edge, before);
                }
            }
        });
        return Ok(());
    }
    for edge in &edges {
        if let Some(before) = ask(inner, edge).await {
            return Err(inner.order.shared_inversion(edge, before));
        }
    }
    Ok(())
}

/// Records `edge` in the graph; returns who recorded its reverse, and where, when
/// one did.
///
/// # Cancel safety
///
/// Safe to drop: one script run, applied whole or not at all.
async fn ask(inner: &Inner, edge: &NewEdge) -> Option<String> {
    let key = format!("{}:lock-order", inner.config.namespace);
    let field = format!("{}\n{}", edge.holding, edge.taking);
    let reverse = format!("{}\n{}", edge.taking, edge.holding);
    let value = format!("{}: {}", inner.who.client(), edge.sites);
    let mut conn = inner.backend.first();
    let answer: redis::RedisResult<Option<String>> = inner
        .scripts
        .order_edge
        .key(key)
        .arg(field)
        .arg(reverse)
        .arg(value)
        .arg(MAX_EDGES)
        .arg(GRAPH_TTL.as_millis() as u64)
        .invoke_async(&mut conn)
        .await;
    match answer {
        Ok(before) => before,
        Err(err) => {
            tracing::debug!(error = %err, "distlock: could not reach the shared lock-order graph");
            None
        }
    }
}
