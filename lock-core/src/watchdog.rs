//! One task per client watches every hold with a live guard: it schedules the
//! renewal of watchdog leases in batches (each batch one round trip of
//! `renew.rs`), and tells guards when a lease is lost.
//!
//! When a server is found replaced (a restart, a failover), the task checks every
//! hold on the new server at once: a renewal round still waiting for its answer
//! (from the old server, frozen or cut off, say) is dropped the moment the
//! replacement is queued, not waited for. Dropping a renewal is safe: it is applied
//! or not, and only ever moves a lease later; the check renews every hold anyway.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::link::{Links, Replaced};
use crate::backend::Backend;
use crate::error::LostReason;
use crate::hold::{Hold, HoldState, HoldTable};
use crate::keys::LockKeys;
use crate::lease::{validity, NAME_AFTER};
use crate::ops::Operators;
use crate::owner::Owner;
use crate::renew::{renew, Renewal};
use crate::scripts::Scripts;
use crate::sync::locked;

/// How many renewals go in one pipeline (one round trip).
const BATCH: usize = 1000;
/// The longest pause between renewal attempts after a failed one.
const RETRY: Duration = Duration::from_millis(500);
/// The shortest.
const MIN_RETRY: Duration = Duration::from_millis(10);
/// How long after the client moved to a new master its renewals there keep holds
/// without the replica acknowledgements the client asks for, at most (see
/// [`Task::unconfirmed`]): time for the Sentinels to turn the old master and the
/// other replicas into replicas of the new one (they look every 10 s), and for
/// them to copy it.
const NEW_MASTER_GRACE: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Registry {
    holds: Mutex<HoldTable>,
    /// Wakes the task when a hold needs attention before its planned wake-up.
    changed: Notify,
    /// When the task plans to wake next.
    next_wake: Mutex<Option<Instant>>,
    /// Servers found replaced, whose holds the task checks at once: each check is
    /// done when its token is dropped. `None` once the task has stopped: a check
    /// is then done at once (grants wait for none).
    replaced: Mutex<Option<Vec<Replaced>>>,
    /// Told when a replaced server is queued: the round under way gives way to the
    /// check ([`Registry::replacement_queued`]).
    queued: Notify,
    /// When the client last moved to a new master (or found its server replaced),
    /// while no renewal there has been acknowledged by the replicas the client asks
    /// for yet: see [`Task::unconfirmed`].
    switched: Mutex<Option<Instant>>,
    /// When a server was last found replaced (see [`Registry::cause`]).
    replaced_at: Mutex<Option<Instant>>,
    /// How many holds were registered (or watched again) so far: the task keeps an
    /// idle tick while holds come and go ([`Task::idle_tick`]).
    registered: AtomicU64,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            holds: Mutex::default(),
            changed: Notify::new(),
            next_wake: Mutex::default(),
            replaced: Mutex::new(Some(Vec::new())),
            queued: Notify::new(),
            switched: Mutex::default(),
            replaced_at: Mutex::default(),
            registered: AtomicU64::new(0),
        }
    }
}

impl Registry {
    fn replaced(&self) -> MutexGuard<'_, Option<Vec<Replaced>>> {
        locked(&self.replaced)
    }

    /// The servers found replaced since the last call.
    fn take_replaced(&self) -> Vec<Replaced> {
        self.replaced()
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Waits until a replaced server is queued for its check (at once if one is);
    /// never, once the task has stopped.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: it only waits.
    async fn replacement_queued(&self) {
        loop {
            let notified = self.queued.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self
                .replaced()
                .as_ref()
                .is_some_and(|queued| !queued.is_empty())
            {
                return;
            }
            notified.await;
        }
    }

    fn holds(&self) -> MutexGuard<'_, HoldTable> {
        locked(&self.holds)
    }

    /// Stops watching `hold` and marks it lost for `reason`, if it is still watched.
    /// A hold no longer watched was let go by its last guard (its release reads the
    /// server's own answer, and says whether the lock was lost), closed by the
    /// shutdown (which gives it back), or is lost already: a renewal picked before
    /// the release, and answered "not held" after it applied, says nothing about it.
    fn lose(&self, hold: &Hold, reason: LostReason, why: &'static str) {
        if self.holds().remove(hold.id).is_none() {
            return;
        }
        hold.tag.released();
        hold.mark_lost(reason, why);
    }

    /// Why `hold`, which a renewal found gone, was lost: when a server was found
    /// replaced (a restart, a failover; on Redlock, any of its nodes) since the hold
    /// was last known to be there (its last acknowledged renewal or acquisition),
    /// [`LostReason::ServerReplaced`], whichever renewal found it (the check after
    /// the replacement, or one that reached the new server before it, or after a
    /// check that could not finish); otherwise [`LostReason::NotHeld`].
    fn cause(&self, hold: &Hold) -> LostReason {
        let confirmed = {
            let state = hold.state();
            state.deadline.checked_sub(validity(state.lease))
        };
        let replaced = *locked(&self.replaced_at);
        match (replaced, confirmed) {
            (Some(replaced), Some(confirmed)) if replaced >= confirmed => {
                LostReason::ServerReplaced
            }
            _ => LostReason::NotHeld,
        }
    }

    fn switched(&self) -> MutexGuard<'_, Option<Instant>> {
        locked(&self.switched)
    }

    fn next_wake(&self) -> MutexGuard<'_, Option<Instant>> {
        locked(&self.next_wake)
    }

    /// Wakes the task if `at` comes before its planned wake-up.
    fn wake_by(&self, at: Instant) {
        self.registered.fetch_add(1, Ordering::AcqRel);
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
        links: Arc<Links>,
        scripts: Arc<Scripts>,
        lease: Duration,
        acks: Option<(u32, Duration)>,
        ops: Arc<Operators>,
        shutdown: CancellationToken,
    ) -> Self {
        let registry = Arc::new(Registry::default());
        let task = Task {
            acks,
            ops,
            registry: registry.clone(),
            backend,
            links,
            scripts,
            period: lease / 3,
            unacknowledged: AtomicBool::new(false),
            idle_seen: 0,
        };
        tokio::spawn(task.run(shutdown));
        Self { registry }
    }

    /// What the client's links call when the server at an address is not the one
    /// that granted the holds there (a restart, a failover): the task renews every
    /// watchdog hold at once, and a hold the server no longer has is lost
    /// ([`LostReason::ServerReplaced`]).
    pub(crate) fn replaced_hook(&self) -> impl Fn(Replaced) + Send + Sync + 'static {
        let registry = Arc::downgrade(&self.registry);
        move |replaced| {
            if let Some(registry) = registry.upgrade() {
                server_replaced(&registry, replaced);
            }
        }
    }

    /// A hold of this client on the lock at `lock` that is not lost, if there is one.
    pub(crate) fn holding(&self, lock: &[u8]) -> Option<Arc<Hold>> {
        self.registry
            .holds()
            .of_lock(lock)
            .find(|hold| !hold.lost.is_cancelled())
            .cloned()
    }

    /// The holds of this client that a grant of the lock of `keys` to `owner`
    /// contradicts, as the grant comes back: holds of other owners (but the write
    /// hold `writer`, beside which a chain takes a read hold), not lost, within the
    /// lease the client counts on, of a kind that cannot be held beside the
    /// grant's. The server had forgotten each: the client counts on a hold only
    /// until its lease could end (less the clock drift allowance), and nothing but
    /// its owner frees it sooner. Usually none, found with one lookup.
    pub(crate) fn contradicted_by(
        &self,
        keys: &LockKeys,
        owner: &Owner,
        writer: Option<&str>,
    ) -> Vec<Arc<Hold>> {
        let holds = self.registry.holds();
        holds
            .of_lock(&keys.lock)
            .filter(|hold| {
                let other = hold.owner.id();
                other != owner.id()
                    && writer != Some(other)
                    && hold.keys.kind.excludes(keys.kind)
                    && !hold.is_lost()
            })
            .cloned()
            .collect()
    }

    /// `hold`, which a grant of its lock to another owner contradicted, was
    /// forgotten by the server: lost for its cause ([`Registry::cause`]), unless the
    /// check that the grant waited for told it already.
    pub(crate) fn forgotten(&self, hold: &Hold) {
        let reason = self.registry.cause(hold);
        self.registry.lose(
            hold,
            reason,
            "another chain of this client was granted the lock, so the server no longer had it",
        );
    }

    /// Starts watching a new hold (one guard).
    pub(crate) fn register(&self, hold: Arc<Hold>) {
        let wake = wake_time(&hold.state());
        hold.tag.held();
        if let Some(earlier) = self.registry.holds().insert(hold) {
            earlier.tag.released();
        }
        self.registry.wake_by(wake);
    }

    /// A re-entry added a guard to `hold`; a fixed lease given with it may lengthen
    /// the lease until `deadline`.
    pub(crate) fn guard_added(&self, hold: &Arc<Hold>, deadline: Instant) {
        // The registry's lock is taken first and held while the count changes, as in
        // `guard_gone` and `Task::survey`: a hold is watched exactly while it has guards.
        let mut holds = self.registry.holds();
        let wake = {
            let mut state = hold.state();
            state.guards += 1;
            if !state.watchdog && deadline > state.deadline {
                state.deadline = deadline;
            }
            // Its last guard had gone, so the watchdog dropped it: watch it again.
            (state.guards == 1).then(|| wake_time(&state))
        };
        if let Some(wake) = wake {
            if holds.insert(hold.clone()).is_none() {
                hold.tag.held();
            }
            drop(holds);
            self.registry.wake_by(wake);
        }
    }

    /// Whether `hold` was last known to be there (its last acknowledged renewal or
    /// acquisition) after the last server found replaced, or none was: then only its
    /// own release, the end of its lease or a force-unlock can have taken it since
    /// (`release.rs`, `without_record`).
    pub(crate) fn known_since_replacement(&self, hold: &Hold) -> bool {
        self.registry.cause(hold) == LostReason::NotHeld
    }

    /// A guard of `hold` was released or dropped; the last one stops its renewal at
    /// once. `false` when the client's shutdown gave the hold back already: the guard
    /// sends nothing.
    pub(crate) fn guard_gone(&self, hold: &Hold) -> bool {
        let mut holds = self.registry.holds();
        let mut state = hold.state();
        if state.closed {
            return false;
        }
        state.guards = state.guards.saturating_sub(1);
        #[cfg(test)]
        tests::between_count_and_registry();
        if state.guards == 0 && holds.remove(hold.id).is_some() {
            hold.tag.released();
        }
        true
    }
}

impl Watchdog {
    /// The client's shutdown: stops watching every hold and marks each closed (its
    /// guards send nothing more), under the registry's lock, so that a guard that goes
    /// at the same moment either released its own hold before, or leaves it to the
    /// shutdown. Each hold comes with its number of guards: the holds to give back.
    pub(crate) fn close_all(&self) -> Vec<(Arc<Hold>, usize)> {
        let mut holds = self.registry.holds();
        let closed = holds
            .take_all()
            .into_iter()
            .map(|hold| {
                let guards = {
                    let mut state = hold.state();
                    state.closed = true;
                    state.guards
                };
                hold.tag.released();
                (hold, guards)
            })
            .collect();
        closed
    }
}

/// Queues the check of every hold after a replaced server (or a grant that
/// contradicts a hold, `Replaced::suspected`), and wakes the task: a renewal
/// round under way gives way to it at once.
fn server_replaced(registry: &Registry, replaced: Replaced) {
    tracing::debug!(address = %replaced.addr, suspected = replaced.suspected, "distlock: checking every hold after a replaced server");
    if !replaced.suspected {
        let now = Instant::now();
        *registry.switched() = Some(now);
        *locked(&registry.replaced_at) = Some(now);
    }
    if let Some(queued) = registry.replaced().as_mut() {
        queued.push(replaced);
    }
    registry.queued.notify_waiters();
    registry.changed.notify_one();
}

/// Why the holds that the check for `checks` finds gone are lost: a server was
/// replaced ([`LostReason::ServerReplaced`]) when one of them says so; else, for
/// checks begun only for grants that contradicted a hold, each for its cause
/// (`None`, see [`Registry::cause`]).
fn gone_reason(checks: &[Replaced]) -> Option<LostReason> {
    checks
        .iter()
        .any(|check| !check.suspected)
        .then_some(LostReason::ServerReplaced)
}

/// How one renewal round trip ended ([`Task::round`]).
enum Round {
    /// Per hold: renewed (acknowledged or not), no longer held, or unknown (see
    /// [`renew`]).
    Answered(Vec<Renewal>),
    /// It failed or timed out (logged): to be tried again.
    Failed,
    /// A replaced server was queued meanwhile: the round was dropped, its holds are
    /// left to the check.
    GaveWay,
}

/// When the watchdog must look at a hold next: its renewal (watchdog leases), or
/// the end of its lease.
fn wake_time(state: &HoldState) -> Instant {
    if state.watchdog {
        state.next_renew.min(state.deadline)
    } else {
        state.deadline
    }
}

/// The task that renews; when it goes with locks still held (its runtime was
/// dropped, say, as a `main` returns), it says so, once, naming them.
struct Task {
    /// Replica acknowledgements a renewal needs (`LockClientBuilder::replicas`).
    acks: Option<(u32, Duration)>,
    /// The operator features: a renewal batch's round trip is counted.
    ops: Arc<Operators>,
    registry: Arc<Registry>,
    backend: Backend,
    /// The client's connections: on a cluster, a hold a renewal found gone is
    /// checked after the watch's next look ([`Task::apply`]).
    links: Arc<Links>,
    scripts: Arc<Scripts>,
    period: Duration,
    /// Whether the last renewals were acknowledged by fewer replicas than `acks`
    /// asks for (said once at WARN, and once at INFO when they are again).
    unacknowledged: AtomicBool,
    /// [`Registry::registered`] when the task last found nothing to watch.
    idle_seen: u64,
}

impl Drop for Task {
    fn drop(&mut self) {
        // No check runs any more: grants wait for none.
        self.registry.replaced().take();
        let now = Instant::now();
        let held: Vec<String> = self
            .registry
            .holds()
            .values()
            .filter(|hold| !hold.lost.is_cancelled())
            .map(|hold| {
                let left = hold.state().deadline.saturating_duration_since(now);
                format!("`{}` (for {:.1}s more)", hold.display(), left.as_secs_f64())
            })
            .collect();
        if !held.is_empty() {
            tracing::warn!(
                locks = held.len(),
                "distlock: the client stopped (its runtime or its last handle went) while \
                 holding {}; they stay held in Redis until their leases end. Call \
                 `LockClient::shutdown().await` before the process stops to give them back",
                held.join(", ")
            );
        }
    }
}

impl Task {
    async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let replaced = self.registry.take_replaced();
            if !replaced.is_empty() {
                self.check_all(replaced).await;
            }
            let now = Instant::now();
            let (due, expired, next) = self.survey(now);
            for hold in expired {
                let (reason, why) = {
                    let state = hold.state();
                    (state.expiry_reason(), state.expiry_text())
                };
                self.registry.lose(&hold, reason, why);
            }
            if !due.is_empty() {
                self.renew(due, next).await;
                continue;
            }
            let next = next.or_else(|| self.idle_tick(now));
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

    /// With nothing to watch: while holds come and go (locks given back before their
    /// first renewal, the common case), a wake-up a first renewal away, so that a new
    /// hold due no sooner does not wake the task on its own (`Registry::wake_by`)
    /// and the tick finds it; once no hold came since the last tick, none (the next
    /// hold wakes the task).
    fn idle_tick(&mut self, now: Instant) -> Option<Instant> {
        let registered = self.registry.registered.load(Ordering::Acquire);
        if registered == self.idle_seen {
            return None;
        }
        self.idle_seen = registered;
        Some(now + self.period.min(NAME_AFTER))
    }

    /// Splits the holds into those to renew now (everything due within half a
    /// period, so that renewals travel together; a hold not named yet, whose first
    /// renewal comes [`NAME_AFTER`] after its grant, within a quarter of that), those
    /// whose lease has ended, and the time of the next event.
    fn survey(&self, now: Instant) -> (Vec<Arc<Hold>>, Vec<Arc<Hold>>, Option<Instant>) {
        let horizon = now + self.period / 2;
        let first_horizon = now + (self.period / 2).min(NAME_AFTER / 4);
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
            // Past `max_hold`: no more renewals; the lease runs out at its deadline.
            if state.watchdog && !state.renewal_capped() {
                let within = if state.named { horizon } else { first_horizon };
                if state.next_renew <= within {
                    due.push(hold.clone());
                } else {
                    consider(state.next_renew);
                }
            }
        }
        (due, expired, next)
    }

    /// After a server was replaced (`checks`, one token per replacement): renews
    /// every watchdog hold now, and again every [`MIN_RETRY`] those whose renewal
    /// got no answer (the connection coming back; on a cluster, one shard's),
    /// within one period, so that a hold the new server does not have is lost at
    /// once. Holds still unanswered then are left to their next renewal. A server
    /// found replaced meanwhile (a second failover) starts the check over, on every
    /// hold, with a period of its own. The checks are done when it returns (their
    /// tokens dropped): new grants may count.
    ///
    /// # Cancel safety
    ///
    /// Only the watchdog's task awaits it; dropped with the task, holds not checked
    /// yet are checked by their next renewal, as before a replacement.
    async fn check_all(&mut self, mut checks: Vec<Replaced>) {
        while !self.check_once(gone_reason(&checks)).await {
            tracing::debug!(
                "distlock: another server was replaced during the check; checking again"
            );
            checks.extend(self.registry.take_replaced());
        }
        drop(checks);
    }

    /// One check of every watchdog hold (see [`check_all`](Self::check_all)), a
    /// hold found gone being lost for `gone` when it is given, else for its cause
    /// ([`Registry::cause`]): `false` when it gave way to a server replaced
    /// meanwhile.
    ///
    /// # Cancel safety
    ///
    /// As [`check_all`](Self::check_all).
    async fn check_once(&mut self, gone: Option<LostReason>) -> bool {
        let mut left: Vec<Arc<Hold>> = self
            .registry
            .holds()
            .values()
            .filter(|hold| hold.state().watchdog)
            .cloned()
            .collect();
        let until = Instant::now() + self.period;
        while !left.is_empty() {
            let mut unanswered = Vec::new();
            for batch in left.chunks(BATCH) {
                let sent = Instant::now();
                let limit = until.saturating_duration_since(sent).max(MIN_RETRY);
                match self.round(batch, limit).await {
                    Round::Answered(replies) => {
                        let reason = |hold: &Arc<Hold>| {
                            Some(gone.unwrap_or_else(|| self.registry.cause(hold)))
                        };
                        self.apply_as(batch, &replies, sent, reason);
                        let open = batch
                            .iter()
                            .zip(&replies)
                            .filter(|(_, reply)| **reply == Renewal::Unknown);
                        unanswered.extend(open.map(|(hold, _)| hold.clone()));
                    }
                    Round::Failed => unanswered.extend(batch.iter().cloned()),
                    Round::GaveWay => return false,
                }
            }
            if unanswered.is_empty() {
                return true;
            }
            if Instant::now() + MIN_RETRY >= until {
                self.retry_later(&unanswered, Instant::now());
                return true;
            }
            tokio::select! {
                () = tokio::time::sleep(MIN_RETRY) => {}
                () = self.registry.replacement_queued() => return false,
            }
            left = unanswered;
        }
        true
    }

    /// Renews `holds` in pipelines of [`BATCH`], each bounded by the earliest
    /// deadline, until a replaced server is queued: the holds not renewed yet stay
    /// due, and the check that comes next renews every hold on the new server.
    ///
    /// # Cancel safety
    ///
    /// Only the watchdog's task awaits it; as [`round`](Self::round).
    async fn renew(&mut self, holds: Vec<Arc<Hold>>, next_deadline: Option<Instant>) {
        for batch in holds.chunks(BATCH) {
            let sent = Instant::now();
            let limit = next_deadline
                .map_or(self.period, |at| at.saturating_duration_since(sent))
                .min(self.period)
                .max(Duration::from_millis(1));
            match self.round(batch, limit).await {
                Round::Answered(replies) => self.apply(batch, &replies, sent),
                Round::Failed => self.retry_later(batch, sent),
                Round::GaveWay => return,
            }
        }
    }

    /// One renewal round trip for `batch`, within `limit`, unless a replaced server
    /// is queued first (at once if one already is): then the round is dropped where
    /// it stands, whatever server it waits on, and gives way to the check
    /// ([`Round::GaveWay`]). A failed or timed-out round is logged; the caller tries
    /// again.
    ///
    /// # Cancel safety
    ///
    /// Only the watchdog's task awaits it; a renewal cut short (here, by a
    /// replacement, or with the task) is applied or not, and only moves a lease
    /// later: the next renewal or the check settles it.
    async fn round(&self, batch: &[Arc<Hold>], limit: Duration) -> Round {
        let sent = Instant::now();
        let span = tracing::debug_span!("distlock.renew", locks = batch.len());
        let round = tokio::time::timeout(
            limit,
            renew(&self.backend, &self.scripts, batch, self.acks, None),
        )
        .instrument(span);
        let result = tokio::select! {
            biased;
            () = self.registry.replacement_queued() => {
                tracing::debug!("distlock: a renewal gave way to the check of a replaced server");
                return Round::GaveWay;
            }
            result = round => result,
        };
        match result {
            Ok(Ok(replies)) => {
                self.ops.renewal_round_trip(sent.elapsed());
                Round::Answered(replies)
            }
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "distlock: renewal failed; retrying");
                Round::Failed
            }
            Err(_) => {
                tracing::debug!("distlock: renewal timed out; retrying");
                Round::Failed
            }
        }
    }

    /// Applies the answers of a renewal sent at `sent`; a hold found gone is lost for
    /// its cause ([`Registry::cause`]). On a cluster, whose connection follows a
    /// failover to the new master on its own, the renewal may have reached a master
    /// the cluster's watch has not looked at yet, so the cause is not known: the
    /// holds found gone are checked again after the watch's next look, as for a
    /// grant that contradicts a hold (`Links::contradicted`), and lost for what that
    /// look found ([`LostReason::ServerReplaced`] for a master that took the slot).
    fn apply(&self, batch: &[Arc<Hold>], replies: &[Renewal], sent: Instant) {
        let cluster = self.backend.is_cluster();
        let gone = |hold: &Arc<Hold>| (!cluster).then(|| self.registry.cause(hold));
        if self.apply_as(batch, replies, sent, gone) {
            self.links.contradicted();
        }
    }

    /// Applies the answers of a renewal sent at `sent` (a renewal's or a check's): a
    /// hold found gone is lost for the reason `gone` gives, or left for a check
    /// when it gives none (and not renewed again before it). Whether some hold was
    /// left for a check.
    fn apply_as(
        &self,
        batch: &[Arc<Hold>],
        replies: &[Renewal],
        sent: Instant,
        gone: impl Fn(&Arc<Hold>) -> Option<LostReason>,
    ) -> bool {
        let new_master = self.on_new_master(sent);
        let mut unchecked = false;
        for (hold, reply) in batch.iter().zip(replies) {
            match reply {
                Renewal::Held => {
                    hold.tag.renewed();
                    let mut state = hold.state();
                    // The lease the renewal asked for (`renew.rs`): cut by `max_hold`.
                    state.deadline = sent + validity(state.extension(sent));
                    state.next_renew = sent + self.period;
                    state.named = true;
                }
                Renewal::Unconfirmed { .. } => self.unconfirmed(hold, sent, new_master),
                // Whatever the replicas acknowledged: the master that answered
                // no longer has it.
                Renewal::Gone => match gone(hold) {
                    Some(reason) => self.gone(hold, reason),
                    None => {
                        hold.state().next_renew = sent + self.period;
                        unchecked = true;
                    }
                },
                Renewal::Unknown => {
                    tracing::debug!("distlock: unexpected renewal reply; retrying");
                    hold.tag.renewal_failed();
                    let mut state = hold.state();
                    state.next_renew = sent + self.retry_delay();
                }
            }
        }
        self.note_acknowledgements(replies, sent, new_master);
        unchecked
    }

    /// Whether a renewal sent at `sent` went to a new master that has not had the
    /// replicas the client asks for yet: sent after the client moved there (and
    /// checked its holds there), before any renewal there was acknowledged, and
    /// within [`NEW_MASTER_GRACE`] of the move.
    fn on_new_master(&self, sent: Instant) -> bool {
        self.registry
            .switched()
            .is_some_and(|at| sent >= at && sent < at + NEW_MASTER_GRACE)
    }

    /// A renewal sent at `sent` that the master answered "held", but that fewer
    /// replicas acknowledged than the client asks for (`replicas(n, ..)`).
    ///
    /// On a master the client has just moved to (`new_master`): the hold is kept.
    /// That master is the one the Sentinels name, the check after the move found the
    /// holder's write there, and it moved the lock's expiry; the nodes that may
    /// replace it next are being made its replicas, and copy it, lock included. The
    /// lease the hold counts on is not a whole new one: it lasts two renewal periods
    /// from `sent` (never less than before, never more than the lease), the next
    /// renewal and its retries. So the hold lasts while the new master answers
    /// "held", one renewal at a time, until its replicas acknowledge again.
    ///
    /// Elsewhere, a master that had its replicas and lost them, which is also what a
    /// master cut off from the rest looks like while the Sentinels promote another:
    /// the lease is not extended (that other master may lack the renewal), and the
    /// hold ends at the end of its last acknowledged lease unless the replicas come
    /// back first.
    fn unconfirmed(&self, hold: &Hold, sent: Instant, new_master: bool) {
        hold.tag.renewal_failed();
        let mut state = hold.state();
        // The master that answered "held" named the holder.
        state.named = true;
        if new_master {
            let bridge = (self.period * 2).min(validity(state.extension(sent)));
            state.deadline = state.deadline.max(sent + bridge);
            state.next_renew = sent + self.period;
        } else {
            state.next_renew = sent + self.retry_delay();
        }
    }

    /// A hold that a renewal found gone: lost for `reason`.
    fn gone(&self, hold: &Hold, reason: LostReason) {
        let why = match reason {
            LostReason::ServerReplaced => {
                "the Redis server was replaced (a restart or a failover) without it"
            }
            _ => "the watchdog found the lock gone (lease ended or force-unlocked)",
        };
        self.registry.lose(hold, reason, why);
    }

    /// After a round sent at `sent` with replica acknowledgements asked for: an
    /// acknowledged renewal ends the new master's grace (its replicas are there);
    /// says once at WARN when renewals stop being acknowledged, and once at INFO
    /// when they are again.
    fn note_acknowledgements(&self, replies: &[Renewal], sent: Instant, new_master: bool) {
        let Some((needed, _)) = self.acks else {
            return;
        };
        let short = replies.iter().find_map(|reply| match reply {
            Renewal::Unconfirmed { acked } => Some(*acked),
            _ => None,
        });
        let acknowledged = replies.contains(&Renewal::Held);
        if acknowledged {
            let mut switched = self.registry.switched();
            if switched.is_some_and(|at| sent >= at) {
                *switched = None;
            }
        }
        match short {
            Some(acked) if !self.unacknowledged.swap(true, Ordering::Relaxed) => {
                let then = if new_master {
                    "held locks are kept while the new master answers that it has them"
                } else {
                    "they do not extend the leases, and held locks are lost when their \
                     leases end unless the replicas come back first"
                };
                tracing::warn!(
                    acked,
                    needed,
                    "distlock: renewals are acknowledged by {acked} of the {needed} replicas \
                     required; {then}"
                );
            }
            None if acknowledged && self.unacknowledged.swap(false, Ordering::Relaxed) => {
                tracing::info!(
                    needed,
                    "distlock: renewals are acknowledged by the replicas again"
                );
            }
            _ => {}
        }
    }

    /// How soon a failed renewal is tried again: a sixth of the period (so that a
    /// reconnect and the retry fit well inside one period), within 10 to 500 ms.
    fn retry_delay(&self) -> Duration {
        (self.period / 6).clamp(MIN_RETRY, RETRY)
    }

    fn retry_later(&self, batch: &[Arc<Hold>], sent: Instant) {
        for hold in batch {
            hold.tag.renewal_failed();
            hold.state().next_renew = Instant::now().max(sent + self.retry_delay());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watched_hold(watchdog: &Watchdog) -> Arc<Hold> {
        let hold = Hold::for_test(7, "raced");
        watchdog.register(hold.clone());
        hold
    }

    thread_local! {
        /// What a test runs inside `guard_gone`, between the count's change and the
        /// registry's (on this thread only).
        static BETWEEN: std::cell::RefCell<Option<Box<dyn FnMut()>>> =
            std::cell::RefCell::new(None);
    }

    pub(super) fn between_count_and_registry() {
        BETWEEN.with(|between| {
            if let Some(between) = between.borrow_mut().as_mut() {
                between();
            }
        });
    }

    /// Observed: the last guard's release (`guard_gone`) set the count to 0, let go of
    /// the state, and only then removed the hold; a re-entry in between (`guard_added`)
    /// put it back, and the removal then dropped a hold with a live guard: never
    /// renewed again, and its loss never reported. The re-entry here runs on another
    /// thread exactly in that step; with both changes under the registry's lock it
    /// waits for the release to finish instead.
    #[test]
    fn a_re_entry_racing_the_last_release_stays_watched() {
        let watchdog = Arc::new(Watchdog {
            registry: Arc::new(Registry::default()),
        });
        let hold = watched_hold(&watchdog);
        let reentry = Arc::new(std::sync::Mutex::new(None));
        BETWEEN.with(|between| {
            let (watchdog, hold, reentry) = (watchdog.clone(), hold.clone(), reentry.clone());
            *between.borrow_mut() = Some(Box::new(move || {
                let (watchdog, hold) = (watchdog.clone(), hold.clone());
                let thread =
                    std::thread::spawn(move || watchdog.guard_added(&hold, Instant::now()));
                // Long enough for the re-entry to finish, unless it has to wait.
                std::thread::sleep(Duration::from_millis(50));
                *locked(&reentry) = Some(thread);
            }));
        });
        watchdog.guard_gone(&hold);
        BETWEEN.with(|between| *between.borrow_mut() = None);
        let thread = locked(&reentry).take().expect("the re-entry ran");
        thread.join().expect("the re-entering thread");
        assert_eq!(hold.state().guards, 1, "the re-entry's guard is alive");
        assert!(
            watchdog.registry.holds().contains(hold.id),
            "a hold with a live guard was dropped from the watchdog"
        );
    }

    /// Observed (CI, stop 47): one of 2000 unlocks said `Lost(NotHeld)` though its
    /// release applied to a held lock. The watchdog renews the holds due together in
    /// pipelines of a thousand, one after another; a hold picked for the second had
    /// its last guard let go, and its release applied, while the first was out. The
    /// second's "not held" was that release's own doing, yet it marked the hold lost,
    /// and `unlock`, reading its `Released` after the watchdog's task ran, preferred
    /// the loss. A hold its last guard let go is the release's to judge.
    #[test]
    fn a_renewal_answered_after_the_last_guard_let_go_loses_nothing() {
        let watchdog = Watchdog {
            registry: Arc::new(Registry::default()),
        };
        let hold = watched_hold(&watchdog);
        assert!(watchdog.guard_gone(&hold), "the last guard let go");
        watchdog.registry.lose(
            &hold,
            LostReason::NotHeld,
            "the watchdog found the lock gone (lease ended or force-unlocked)",
        );
        assert!(
            !hold.is_lost(),
            "the release's own answer was taken for a loss"
        );

        // A hold still watched is lost by the same call.
        let watched = Hold::for_test(8, "watched");
        watchdog.register(watched.clone());
        watchdog
            .registry
            .lose(&watched, LostReason::NotHeld, "gone");
        assert!(watched.is_lost());
        assert_eq!(watched.lost_reason(), Some(LostReason::NotHeld));
        assert!(!watchdog.registry.holds().contains(watched.id));
    }
}
