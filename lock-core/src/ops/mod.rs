//! Operator features, beside the protocol: the lock-order checker (`order.rs`, and
//! the graph a namespace shares, `order_shared.rs`), distributed deadlock
//! detection (`deadlock.rs`, a waiter's `watch.rs`), metrics (`metrics.rs`),
//! holder info in errors (`holder.rs`), and the checks of
//! [`LockClient::ping`](crate::LockClient::ping) (`health.rs`). Each owns its
//! state; the core reaches them only through [`Operators`], at the fixed points
//! of `hooks.rs`, installed by the builder.

mod deadlock;
pub(crate) mod health;
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
use crate::hooks::{HookFuture, NewAcquisition, Operator, Read, Watch};
use crate::keys::LockKeys;
use crate::origin::Origin;
use crate::scripts::Scripts;
use crate::series::Tag;
use order::{LockOrder, LockOrderCheck};
use order_shared::SharedGraph;
use watch::DeadlockWatch;

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
    namespace: Arc<str>,
    /// The values of the metrics' `lock` label in use.
    labels: Arc<metrics::Labels>,
}

impl std::fmt::Debug for Operators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operators")
            .field("order", &self.order)
            .field("shared", &self.shared)
            .field("deadlock_check_after", &self.deadlock_check_after)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
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
            namespace: namespace.into(),
            labels: Arc::new(metrics::Labels::new(settings.max_metric_labels)),
        }
    }

    /// Checks the order of a new acquisition against the other locks of this
    /// client that the chain holds (see `order.rs`), and, when the client shares
    /// its lock order, records the edges new to it in the namespace's graph.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the local check is done at once, and the shared graph's
    /// answer is only advice (see `SharedGraph::record`).
    async fn check_order(&self, new: NewAcquisition<'_>) -> Result<(), LockError> {
        let NewAcquisition {
            client,
            context,
            keys,
            origin,
        } = new;
        if origin.in_set || context.is_empty() || !self.order.is_on() {
            return Ok(());
        }
        let holding = context
            .locks()
            .filter(|held| held.hold.client_id == client && held.hold.keys.lock != keys.lock)
            .map(|held| {
                let hold = &held.hold;
                (hold.class(), hold.origin.site)
            });
        let edges = self
            .order
            .check(holding, &origin.class(&keys.name), origin.site)?;
        match &self.shared {
            Some(shared) => shared.record(&self.order, edges).await,
            None => Ok(()),
        }
    }
}

impl Operator for Operators {
    fn before_new<'a>(&'a self, new: NewAcquisition<'a>) -> HookFuture<'a, Result<(), LockError>> {
        Box::pin(self.check_order(new))
    }

    fn watch(
        &self,
        client: u64,
        context: &LockContext,
        after: Option<Duration>,
        start: Instant,
    ) -> Option<Box<dyn Watch>> {
        let period = after.or(self.deadlock_check_after)?;
        let watch = DeadlockWatch::new(
            (&self.backend, &self.labels),
            &self.namespace,
            (client, context),
            period,
            start,
        )?;
        Some(Box::new(watch))
    }

    fn ended<'a>(
        &'a self,
        err: LockError,
        keys: &'a [Arc<LockKeys>],
        read: Read<'a>,
    ) -> HookFuture<'a, LockError> {
        Box::pin(holder::name_the_holder(err, keys, read))
    }

    fn series(&self, keys: &LockKeys, origin: &Origin) -> Tag {
        metrics::series(&self.backend, &self.labels, keys, origin)
    }

    fn renewal_round_trip(&self, took: Duration) {
        metrics::renewal_round_trip(&self.backend, took);
    }

    fn force_unlocked(&self, name: &[u8]) {
        metrics::force_unlocked(&self.backend, &self.labels, name);
    }
}
