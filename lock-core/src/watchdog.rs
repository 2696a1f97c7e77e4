//! One task per client renews every watchdog lease in batches and tells guards
//! when a lease is lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use redis::Value;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::acquire::drift;
use crate::backend::{slot, Backend, Conn};
use crate::guard::Hold;
use crate::scripts::Scripts;

/// How many renewals go in one pipeline (one round trip).
const BATCH: usize = 1000;
/// The longest pause between renewal attempts after a failed one.
const RETRY: Duration = Duration::from_millis(500);
/// The shortest.
const MIN_RETRY: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct Registry {
    holds: Mutex<HashMap<u64, Arc<Hold>>>,
    /// Wakes the task when a hold needs attention before its planned wake-up.
    changed: Notify,
    /// When the task plans to wake next.
    next_wake: Mutex<Option<Instant>>,
}

impl Registry {
    fn holds(&self) -> MutexGuard<'_, HashMap<u64, Arc<Hold>>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next_wake(&self) -> MutexGuard<'_, Option<Instant>> {
        self.next_wake
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the task if `at` comes before its planned wake-up.
    fn wake_by(&self, at: Instant) {
        let planned = *self.next_wake();
        if planned.is_none_or(|planned| at < planned) {
            self.changed.notify_one();
        }
    }
}

/// The client's handle on its watchdog task.
#[derive(Debug)]
pub(crate) struct Watchdog {
    registry: Arc<Registry>,
}

impl Watchdog {
    pub(crate) fn spawn(
        backend: Backend,
        scripts: Arc<Scripts>,
        lease: Duration,
        acks: Option<(u32, Duration)>,
        shutdown: CancellationToken,
    ) -> Self {
        let registry = Arc::new(Registry::default());
        let task = Task {
            acks,
            registry: registry.clone(),
            backend,
            scripts,
            period: lease / 3,
        };
        tokio::spawn(task.run(shutdown));
        Self { registry }
    }

    /// Starts watching a new hold (one guard).
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let wake = {
            let state = hold.state();
            if state.watchdog {
                state.next_renew.min(state.deadline)
            } else {
                state.deadline
            }
        };
        self.registry.holds().insert(hold.id, hold);
        self.registry.wake_by(wake);
    }

    /// A re-entry added a guard to `hold`; a fixed lease given with it may lengthen
    /// the lease until `deadline`.
    pub(crate) fn guard_added(&self, hold: &Arc<Hold>, deadline: Instant) {
        let revived = {
            let mut state = hold.state();
            state.guards += 1;
            if !state.watchdog && deadline > state.deadline {
                state.deadline = deadline;
            }
            state.guards == 1
        };
        if revived {
            // Its last guard had gone, so the watchdog dropped it: watch it again.
            self.register(hold.clone());
        }
    }

    /// A guard of `hold` was released or dropped; the last one stops its renewal at once.
    pub(crate) fn guard_gone(&self, hold: &Hold) {
        let last = {
            let mut state = hold.state();
            state.guards = state.guards.saturating_sub(1);
            state.guards == 0
        };
        if last {
            self.registry.holds().remove(&hold.id);
        }
    }
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
            .arg(&*hold.owner)
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
        Value::ServerError(err) if matches!(err.code(), "READONLY" | "MASTERDOWN") => {
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

struct Task {
    /// Replica acknowledgements a renewal needs (`LockClientBuilder::replicas`).
    acks: Option<(u32, Duration)>,
    registry: Arc<Registry>,
    backend: Backend,
    scripts: Arc<Scripts>,
    period: Duration,
}

impl Task {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let now = Instant::now();
            let (due, expired, next) = self.survey(now);
            for hold in expired {
                self.registry.holds().remove(&hold.id);
                hold.mark_lost("its lease ended before it could be renewed");
            }
            if !due.is_empty() {
                self.renew(due, next).await;
                continue;
            }
            *self.registry.next_wake() = next;
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.registry.changed.notified() => {}
                () = sleep => {}
            }
            *self.registry.next_wake() = None;
        }
    }

    /// Splits the holds into those to renew now (everything due within half a
    /// period, so that renewals travel together), those whose lease has ended, and
    /// the time of the next event.
    fn survey(&self, now: Instant) -> (Vec<Arc<Hold>>, Vec<Arc<Hold>>, Option<Instant>) {
        let horizon = now + self.period / 2;
        let mut due = Vec::new();
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        let mut consider = |at: Instant| next = Some(next.map_or(at, |next| next.min(at)));
        for hold in self.registry.holds().values() {
            let state = hold.state();
            if state.deadline <= now {
                expired.push(hold.clone());
                continue;
            }
            consider(state.deadline);
            if state.watchdog {
                if state.next_renew <= horizon {
                    due.push(hold.clone());
                } else {
                    consider(state.next_renew);
                }
            }
        }
        (due, expired, next)
    }

    /// Renews `holds` in pipelines of [`BATCH`], each bounded by the earliest deadline.
    async fn renew(&mut self, holds: Vec<Arc<Hold>>, next_deadline: Option<Instant>) {
        for batch in holds.chunks(BATCH) {
            let sent = Instant::now();
            let limit = next_deadline
                .map_or(self.period, |at| at.saturating_duration_since(sent))
                .min(self.period)
                .max(Duration::from_millis(1));
            let span = tracing::debug_span!("distlock.renew", locks = batch.len());
            let result = tokio::time::timeout(limit, self.send(batch))
                .instrument(span)
                .await;
            match result {
                Ok(Ok(replies)) => self.apply(batch, &replies, sent),
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "distlock: renewal failed; retrying");
                    self.retry_later(batch, sent);
                }
                Err(_) => {
                    tracing::debug!("distlock: renewal timed out; retrying");
                    self.retry_later(batch, sent);
                }
            }
        }
    }

    /// Renews `batch` on the backend; see [`send_to`] for one endpoint.
    async fn send(&mut self, batch: &[Arc<Hold>]) -> redis::RedisResult<Vec<Value>> {
        if !self.backend.is_redlock() {
            return send_to(
                self.backend.first(),
                self.scripts.clone(),
                batch.to_vec(),
                self.acks,
            )
            .await;
        }
        // Redlock: every node renews the whole batch; a lease lives on where a
        // majority renewed it, and is lost once a majority can no longer have it.
        let scripts = self.scripts.clone();
        let holds: Vec<Arc<Hold>> = batch.to_vec();
        let per_node = self
            .backend
            .each(|conn| send_to(conn, scripts.clone(), holds.clone(), None))
            .await;
        let quorum = self.backend.quorum();
        let nodes = self.backend.len();
        let combined = (0..batch.len())
            .map(|index| {
                let replies = per_node
                    .iter()
                    .filter_map(|replies| replies.as_ref().ok()?.get(index));
                let (mut held, mut gone) = (0, 0);
                for reply in replies {
                    match reply {
                        Value::Int(1) => held += 1,
                        Value::Int(0) => gone += 1,
                        _ => {}
                    }
                }
                if held >= quorum {
                    Value::Int(1)
                } else if gone > nodes - quorum {
                    Value::Int(0)
                } else {
                    Value::Nil
                }
            })
            .collect();
        Ok(combined)
    }

    fn apply(&self, batch: &[Arc<Hold>], replies: &[Value], sent: Instant) {
        for (hold, reply) in batch.iter().zip(replies) {
            match reply {
                Value::Int(1) => {
                    let mut state = hold.state();
                    state.deadline = sent + state.lease.saturating_sub(drift(state.lease));
                    state.next_renew = sent + self.period;
                }
                Value::Int(0) => {
                    self.registry.holds().remove(&hold.id);
                    hold.mark_lost(
                        "the watchdog found the lock gone (lease ended or force-unlocked)",
                    );
                }
                other => {
                    tracing::debug!(reply = ?other, "distlock: unexpected renewal reply; retrying");
                    let mut state = hold.state();
                    state.next_renew = sent + self.retry_delay();
                }
            }
        }
    }

    /// How soon a failed renewal is tried again: a sixth of the period (so that a
    /// reconnect and the retry fit well inside one period), within 10 to 500 ms.
    fn retry_delay(&self) -> Duration {
        (self.period / 6).clamp(MIN_RETRY, RETRY)
    }

    fn retry_later(&self, batch: &[Arc<Hold>], sent: Instant) {
        for hold in batch {
            hold.state().next_renew = Instant::now().max(sent + self.retry_delay());
        }
    }
}
