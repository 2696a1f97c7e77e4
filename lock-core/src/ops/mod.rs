//! Operator features, beside the protocol: the lock-order checker (`order.rs`, and
//! the graph a namespace shares, `order_shared.rs`), distributed deadlock
//! detection (`deadlock.rs`, a waiter's `watch.rs`), metrics (`metrics.rs`),
//! holder info in errors and what `inspect` reads (`holder.rs`). Each owns its
//! state; the core reaches them through [`Operators`] (one per client, made by the
//! builder) at fixed points: before a new acquisition (the lock-order checker may
//! refuse it), while it waits (deadlock detection may end the wait), how it ended
//! (who holds a timed-out lock), and the [`Tag`] its hold's events are counted in
//! (`series.rs`).

mod deadlock;
mod holder;
mod metrics;
pub(crate) mod order;
mod order_shared;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::context::LockContext;
use crate::error::LockError;
use crate::keys::LockKeys;
use crate::origin::Origin;
use crate::scripts::Scripts;
use crate::series::Tag;
use order::{LockOrder, LockOrderCheck};
use order_shared::SharedGraph;
pub(crate) use watch::DeadlockWatch;

/// What the operator features of a client are set to (from the builder).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) lock_order: LockOrderCheck,
    /// Whether lock-order edges are also kept in Redis, shared by the namespace.
    pub(crate) share_lock_order: bool,
    /// How long a waiter whose chain holds locks waits before it looks for a
    /// deadlock, and then how often; `None`: never.
    pub(crate) deadlock_check_after: Option<Duration>,
    /// How many values of the metrics' `lock` label the client uses at most.
    pub(crate) max_metric_labels: usize,
}

/// How many values of the metrics' `lock` label a client uses, by default
/// (`LockClientBuilder::max_metric_labels`).
pub(crate) const DEFAULT_METRIC_LABELS: usize = 256;
/// The most a client may be allowed.
pub(crate) const MAX_METRIC_LABELS: usize = 100_000;

/// One client's operator features and their state.
pub(crate) struct Operators {
    /// The orders in which this client's call chains took locks of different classes.
    order: Arc<LockOrder>,
    /// The namespace's shared graph, when the client shares its lock order.
    shared: Option<SharedGraph>,
    deadlock_check_after: Option<Duration>,
    backend: Backend,
    scripts: Arc<Scripts>,
    namespace: Arc<str>,
    /// The values of the metrics' `lock` label in use.
    labels: Arc<metrics::Labels>,
}

impl Operators {
    /// The operator features of a client of `backend` in `namespace`, that names
    /// itself `client` (`who.rs`) to the other processes.
    pub(crate) fn new(
        settings: Settings,
        backend: &Backend,
        scripts: &Arc<Scripts>,
        namespace: &str,
        client: &str,
    ) -> Self {
        let shared = settings.share_lock_order.then(|| SharedGraph {
            backend: backend.clone(),
            scripts: scripts.clone(),
            key: format!("{namespace}:lock-order"),
            client: client.into(),
        });
        Self {
            order: Arc::new(LockOrder::new(settings.lock_order)),
            shared,
            deadlock_check_after: settings.deadlock_check_after,
            backend: backend.clone(),
            scripts: scripts.clone(),
            namespace: namespace.into(),
            labels: Arc::new(metrics::Labels::new(settings.max_metric_labels)),
        }
    }

    /// Before a new acquisition (not a re-entry) of `keys` from `origin` by the
    /// call chain of `context`: checks its order against the other locks that the
    /// chain holds of this client (`client`, an `Inner::id`; see `order.rs`; `Err`
    /// refuses it: a strict checker's inversion), and, when the client shares its
    /// lock order, records the edges new to it in the namespace's graph.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the local check is done at once, and the shared graph's
    /// answer is only advice (see `SharedGraph::record`), recorded again by the
    /// next acquisition that makes it.
    pub(crate) async fn before_new(
        &self,
        client: u64,
        context: &LockContext,
        keys: &LockKeys,
        origin: &Origin,
    ) -> Result<(), LockError> {
        if origin.in_set || context.is_empty() || !self.order.is_on() {
            return Ok(());
        }
        let holding = context
            .locks()
            .filter(|held| held.hold.client_id == client && held.hold.keys.lock != keys.lock)
            .map(|held| (held.hold.class(), held.hold.origin.site));
        let edges = self
            .order
            .check(holding, &origin.class(&keys.name), origin.site)?;
        match &self.shared {
            Some(shared) => shared.record(&self.order, edges).await,
            None => Ok(()),
        }
    }

    /// A watch over a new acquisition's wait (deadlock detection), begun at
    /// `start` by the chain of `context` through client `client`, after `after`
    /// (the request's own threshold, else the client's); `None` when nothing
    /// watches it.
    pub(crate) fn watch(
        self: &Arc<Self>,
        client: u64,
        context: &LockContext,
        after: Option<Duration>,
        start: Instant,
    ) -> Option<DeadlockWatch> {
        let period = after.or(self.deadlock_check_after)?;
        DeadlockWatch::new(self, client, context, period, start)
    }

    /// The series of the lock of `keys`, asked for at `origin`.
    pub(crate) fn series(&self, keys: &LockKeys, origin: &Origin) -> Tag {
        metrics::series(&self.backend, &self.labels, keys, origin)
    }

    /// One renewal batch took `took`, round trip.
    pub(crate) fn renewal_round_trip(&self, took: Duration) {
        metrics::renewal_round_trip(&self.backend, took);
    }

    /// An operator's `force_unlock` deleted the lock `name`.
    pub(crate) fn force_unlocked(&self, name: &[u8]) {
        metrics::force_unlocked(&self.backend, &self.labels, name);
    }
}
