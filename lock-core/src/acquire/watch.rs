//! A waiter's deadlock detection (see `deadlock.rs`): when to look, what its chain
//! publishes while it waits, and the walk that may end the wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::options::Options;
use crate::context::LockContext;
use crate::deadlock::{Beating, Waiting};
use crate::error::LockError;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::metrics::{self, Tag};
use crate::origin::Origin;

/// A waiter's deadlock detection (see `deadlock.rs`): when its chain holds locks,
/// on one endpoint, with a threshold. What it publishes is worked out at its first
/// look, so that an acquisition that never waits that long pays nothing for it.
pub(super) struct Watch {
    /// The chain whose locks the records name.
    context: LockContext,
    /// Made at the first look; `None` before.
    waiting: Option<Waiting>,
    period: Duration,
    /// When to look next.
    pub(super) next: Instant,
    /// The chain's records, beating from the first look until the wait ends
    /// (dropping it deletes them).
    beating: Option<Beating>,
}

impl Watch {
    pub(super) fn new(
        inner: &Inner,
        context: &LockContext,
        options: Options,
        start: Instant,
    ) -> Option<Self> {
        let period = options
            .deadlock_after
            .or(inner.config.deadlock_check_after)?;
        if inner.backend.is_redlock() || context.is_empty() {
            return None;
        }
        Some(Self {
            context: context.clone(),
            waiting: None,
            period,
            next: start + period,
            beating: None,
        })
    }

    /// What this waiter publishes and walks from: `None` when its chain holds no
    /// lock of this client (then nothing is ever looked for).
    fn waiting(&mut self, inner: &Inner, keys: &LockKeys) -> Option<&Waiting> {
        if self.waiting.is_none() {
            let mut owners: Vec<Arc<str>> = self
                .context
                .locks()
                .filter(|held| held.hold.client_id == inner.id)
                .map(|held| held.hold.owner.shared_id())
                .collect();
            owners.sort_unstable();
            owners.dedup();
            if owners.is_empty() {
                return None;
            }
            self.waiting = Some(Waiting {
                wait_id: inner.next_owner().shared_id(),
                owners,
                lock: keys.lock.clone(),
                namespace: inner.config.namespace.as_str().into(),
            });
        }
        self.waiting.as_ref()
    }

    /// Publishes what this waiter's chain waits for at the lock of `keys` and
    /// walks the wait-for graph: `Err(Deadlock)` when it is the victim of a cycle;
    /// `Ok(false)` when its chain holds no lock of this client (it cannot be in a
    /// cycle: never look again). A failure to read is logged, and the walk tried
    /// again at the next check.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: records written stay until the wait's end deletes them (or
    /// they expire).
    pub(super) async fn look(
        &mut self,
        inner: &Inner,
        keys: &LockKeys,
        origin: &Origin,
    ) -> Result<bool, LockError> {
        self.next = Instant::now() + self.period;
        let Some(waiting) = self.waiting(inner, keys).cloned() else {
            return Ok(false);
        };
        let mut conn = inner.backend.first();
        if self.beating.is_none() {
            self.beating = Some(waiting.clone().beat(conn.clone()));
        }
        match waiting.walk(&mut conn).await {
            Ok(Some(cycle)) => {
                tracing::warn!(lock.name = %keys.display(), cycle = ?cycle, "distlock: deadlock; this request gives up to break it");
                metrics::deadlock(&Tag::new(&inner.backend, keys, origin));
                Err(LockError::Deadlock { cycle })
            }
            Ok(None) => Ok(true),
            Err(err) => {
                tracing::debug!(error = %err, "distlock: could not look for a deadlock; looking again later");
                Ok(true)
            }
        }
    }
}
