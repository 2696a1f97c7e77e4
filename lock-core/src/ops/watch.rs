//! A waiter's deadlock detection (see `deadlock.rs`): when to look, what its chain
//! publishes while it waits, and the walk that may end the wait.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::deadlock::{Beating, Waiting, ANNOUNCE, SETTLE};
use super::Operators;
use crate::context::LockContext;
use crate::error::LockError;
use crate::faults::{self, Fault};
use crate::keys::LockKeys;
use crate::origin::Origin;

/// A waiter's deadlock detection: when its chain holds locks, on one endpoint,
/// with a threshold. What it publishes is worked out when it announces its wait
/// ([`ANNOUNCE`] into it, or at its threshold if that is sooner), so that an
/// acquisition that never waits that long pays nothing for it.
pub(crate) struct DeadlockWatch {
    /// The client's operator features: its connections, namespace and metrics.
    ops: Arc<Operators>,
    /// The client whose holds of the chain the records name.
    client: u64,
    /// The chain whose locks the records name.
    context: LockContext,
    /// Made at the first look; `None` before.
    waiting: Option<Waiting>,
    period: Duration,
    /// When to announce the wait: its records are written then, and beat from the
    /// first look on.
    announce: Instant,
    /// When to look next (the first time: the threshold).
    next: Instant,
    /// The chain's records, from the announcement until the wait ends (dropping it
    /// deletes them).
    beating: Option<Beating>,
    /// The members of the knot the last look found, if it found one, and when the
    /// first of the looks in a row that found them began.
    last_knot: Option<(Vec<String>, Instant)>,
}

impl DeadlockWatch {
    /// The watch (with the operator features of `ops`) of a wait of the
    /// chain of `context`, whose holds by `client` count, begun at `start`,
    /// looking every `period`: `None` on Redlock, or for a chain that holds
    /// nothing.
    pub(super) fn new(
        ops: &Arc<Operators>,
        client: u64,
        context: &LockContext,
        period: Duration,
        start: Instant,
    ) -> Option<Self> {
        if ops.backend.is_redlock() || context.is_empty() {
            return None;
        }
        Some(Self {
            ops: ops.clone(),
            client,
            context: context.clone(),
            waiting: None,
            period,
            announce: start + announce_after(period),
            next: start + period,
            beating: None,
            last_knot: None,
        })
    }

    /// What this waiter publishes and walks from: `None` when its chain holds no
    /// lock of this client (then nothing is ever looked for).
    fn waiting(
        &mut self,
        keys: &LockKeys,
        new_id: &(dyn Fn() -> Arc<str> + Send + Sync),
    ) -> Option<&Waiting> {
        if self.waiting.is_none() {
            let mut owners: Vec<Arc<str>> = self
                .context
                .locks()
                .filter(|held| held.hold.client_id == self.client)
                .map(|held| held.hold.owner.shared_id())
                .collect();
            owners.sort_unstable();
            owners.dedup();
            if owners.is_empty() {
                return None;
            }
            self.waiting = Some(Waiting {
                wait_id: new_id(),
                owners,
                lock: keys.lock.clone(),
                namespace: self.ops.namespace.clone(),
            });
        }
        self.waiting.as_ref()
    }

    /// Announces what this waiter's chain waits for at the lock of `keys` (its
    /// records, beating from its threshold on), and from its threshold on walks
    /// the wait-for graph: `Err(Deadlock)` when it is the victim of a knot that a
    /// look at least [`SETTLE`] before found the same (so that every chain waiting
    /// then is counted, and every member picks the same victim); `Ok(false)` when
    /// its chain holds no lock of this client. A failure to read is logged, and the
    /// walk tried again at the next check.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: records written stay until the wait's end deletes them (or
    /// they expire).
    pub(crate) async fn look(
        &mut self,
        keys: &LockKeys,
        origin: &Origin,
        new_id: &(dyn Fn() -> Arc<str> + Send + Sync),
    ) -> Result<bool, LockError> {
        let Some(waiting) = self.waiting(keys, new_id).cloned() else {
            return Ok(false);
        };
        let mut conn = self.ops.backend.first();
        if self.beating.is_none() {
            self.beating = Some(waiting.clone().beat(conn.clone(), self.next));
        }
        let began = Instant::now();
        if began < self.next {
            // Announced; the threshold has not passed yet.
            return Ok(true);
        }
        self.next = began + self.period;
        let knot = waiting.walk(&mut conn).await.unwrap_or_else(|err| {
            tracing::debug!(error = %err, "distlock: could not look for a deadlock; looking again later");
            None
        });
        let Some(knot) = knot else {
            self.last_knot = None;
            return Ok(true);
        };
        let since = match self.last_knot.take() {
            Some((members, since)) if members == knot.members => since,
            _ => began,
        };
        self.last_knot = Some((knot.members, since));
        match knot.cycle {
            Some(cycle) if began.duration_since(since) >= SETTLE => {
                tracing::warn!(lock.name = %keys.display(), cycle = ?cycle, "distlock: deadlock; this request gives up to break it");
                self.ops.series(keys, origin).deadlock();
                Err(LockError::Deadlock { cycle })
            }
            _ => Ok(true),
        }
    }

    /// When to look next.
    pub(crate) fn next(&self) -> Instant {
        if self.beating.is_none() {
            self.announce
        } else {
            self.next
        }
    }
}

/// How long into a wait its chain announces what it waits for: [`ANNOUNCE`], or
/// the threshold `period` if that is shorter (only at the threshold under the
/// seeded fault `DeadlockWaitAnnouncedAtThreshold`, the rule before issue 34).
fn announce_after(period: Duration) -> Duration {
    if faults::active(Fault::DeadlockWaitAnnouncedAtThreshold) {
        return period;
    }
    period.min(ANNOUNCE)
}
