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

use super::order::{LockOrder, NewEdge, MAX_EDGES};
use crate::backend::Backend;
use crate::detach::spawn;
use crate::error::LockError;
use crate::scripts::Scripts;

/// How long the shared graph lives after its last new edge.
const GRAPH_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Where a client shares its lock order: its namespace's graph, and how the client
/// names itself there.
#[derive(Clone)]
pub(super) struct SharedGraph {
    pub(super) backend: Backend,
    pub(super) scripts: Arc<Scripts>,
    /// `<ns>:lock-order`.
    pub(super) key: String,
    /// What the client writes of itself beside each edge (`who.rs`).
    pub(super) client: Arc<str>,
}

impl SharedGraph {
    /// Records `edges`, new to this client (whose order is `order`), in the shared
    /// graph: in the background when inversions are warned of, waiting for the
    /// answer when they are refused (the first inversion found is the error). A
    /// graph that cannot be reached is logged at DEBUG and skipped: the check is
    /// advice, never a reason to fail a lock.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: an edge whose recording is cut short is recorded by the next
    /// client that sees it, or by this one never (it is in its memory already).
    pub(super) async fn record(
        &self,
        order: &Arc<LockOrder>,
        edges: Vec<NewEdge>,
    ) -> Result<(), LockError> {
        if edges.is_empty() {
            return Ok(());
        }
        if !order.is_strict() {
            let (graph, order) = (self.clone(), order.clone());
            spawn(async move {
                for edge in &edges {
                    if let Some(before) = graph.ask(edge).await {
                        order.shared_inversion(edge, before);
                    }
                }
            });
            return Ok(());
        }
        for edge in &edges {
            if let Some(before) = self.ask(edge).await {
                return Err(order.shared_inversion(edge, before));
            }
        }
        Ok(())
    }

    /// Records `edge` in the graph; returns who recorded its reverse, and where,
    /// when one did.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: one script run, applied whole or not at all.
    async fn ask(&self, edge: &NewEdge) -> Option<String> {
        let field = format!("{}\n{}", edge.holding, edge.taking);
        let reverse = format!("{}\n{}", edge.taking, edge.holding);
        let value = format!("{}: {}", self.client, edge.sites);
        let mut conn = self.backend.first();
        self.scripts
            .order_edge
            .key(&self.key)
            .arg(field)
            .arg(reverse)
            .arg(value)
            .arg(MAX_EDGES)
            .arg(GRAPH_TTL.as_millis() as u64)
            .invoke_async(&mut conn)
            .await
            .unwrap_or_else(|err| {
                tracing::debug!(error = %err, "distlock: could not reach the shared lock-order graph");
                None
            })
    }
}
