//! One chain's hold of one lock: the state shared by its guards (and watched by the
//! watchdog), and [`HeldLock`], the public view of it.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::error::{LockError, LostReason};
use crate::keys::LockKeys;
use crate::lease::MIN_LEASE;
use crate::origin::Origin;
use crate::owner::Owner;
use crate::sync::locked;

/// One chain's hold of one lock: shared by the guard of the first acquisition and
/// the guards of every re-entry under the same owner.
pub(crate) struct Hold {
    /// Unique within the client; the watchdog's key.
    pub(crate) id: u64,
    pub(crate) client_id: u64,
    pub(crate) keys: Arc<LockKeys>,
    /// The name as text, when it is not UTF-8 (else it is the name itself).
    lossy_name: Option<Box<str>>,
    pub(crate) owner: Arc<Owner>,
    pub(crate) fence: Option<u64>,
    pub(crate) lost: CancellationToken,
    /// Why the hold was lost: set once, by the first to find it lost.
    reason: OnceLock<LostReason>,
    /// How long the hold may last (`max_hold`), for the warning when it ends so.
    pub(crate) max_hold: Option<Duration>,
    /// Its metrics' labels.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) tag: crate::series::Tag,
    /// Where the first acquisition was asked for, and its class (lock-order checks).
    pub(crate) origin: Origin,
    /// What the client says of the holder (`who.rs`), for the renewal that names it.
    pub(crate) who: Arc<str>,
    /// The task that took it: a wait of that same task for this lock, from another
    /// call chain, waits for itself.
    pub(crate) task: TaskId,
    /// The lock's class for the lock-order checker, worked out the first time a
    /// nested acquisition needs it.
    class: OnceLock<Arc<str>>,
    /// When the grant that made the hold came back: a minimum hold time
    /// ([`LockGuard::unlock_after_holding`](crate::LockGuard::unlock_after_holding))
    /// counts from here (no earlier than Redis granted it).
    pub(crate) acquired: Instant,
    /// Until when a guard's release waits for its minimum hold time (the latest,
    /// when several guards of the hold wait): a shutdown leaves the hold to its
    /// lease until then instead of giving it back (see `minimum.rs`).
    minimum: Mutex<Option<Instant>>,
    state: Mutex<HoldState>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldState {
    /// Local guards alive for this hold (the Redis hold count, seen from here).
    pub(crate) guards: usize,
    /// Until when the lease surely lasts: the send time of the last successful
    /// acquire or renewal plus the lease.
    pub(crate) deadline: Instant,
    /// Renewed by the watchdog (otherwise a fixed lease that simply ends).
    pub(crate) watchdog: bool,
    /// The lease the watchdog renews to.
    pub(crate) lease: Duration,
    /// When the watchdog renews next.
    pub(crate) next_renew: Instant,
    /// `max_hold` after the first acquisition: the watchdog renews no later.
    pub(crate) renew_until: Option<Instant>,
    /// Given back by the client's shutdown: its guards send nothing more.
    pub(crate) closed: bool,
    /// Whether the lock names its holder (`lua/lock.lua`'s `#who:`): from the grant
    /// when it named it (`acquire::grant::named_at_once`), else from the first
    /// renewal that found it held.
    pub(crate) named: bool,
}

impl HoldState {
    /// Whether the watchdog has stopped renewing because of `max_hold`: the next
    /// renewal would come at or after its end.
    pub(crate) fn renewal_capped(&self) -> bool {
        self.watchdog
            && self
                .renew_until
                .is_some_and(|until| self.next_renew >= until)
    }

    /// The lease a re-entry or a partial release at `now` may ask for (the scripts
    /// only ever move an expiry later): the hold's lease, cut so that the lock never
    /// outlasts `max_hold` by more than one lease, as a hold the watchdog stopped
    /// renewing does. Past that point, the shortest lease, which moves nothing.
    pub(crate) fn extension(&self, now: Instant) -> Duration {
        match self.renew_until {
            Some(until) => (until + self.lease)
                .saturating_duration_since(now)
                .min(self.lease)
                .max(MIN_LEASE),
            None => self.lease,
        }
    }

    /// What happened to a hold whose lease ran out, in words for its warning.
    pub(crate) fn expiry_text(&self) -> &'static str {
        if self.renewal_capped() {
            "it was held for its whole max_hold, so the watchdog stopped renewing it"
        } else if self.watchdog {
            "its lease ended before it could be renewed"
        } else {
            "its fixed lease ended (a fixed lease is never renewed)"
        }
    }

    /// Why a hold whose lease ran out is lost.
    pub(crate) fn expiry_reason(&self) -> LostReason {
        if self.renewal_capped() {
            LostReason::MaxHoldExceeded
        } else {
            LostReason::Expired
        }
    }
}

/// Which task runs: a spawned Tokio task, or the future a runtime's `block_on` runs
/// (`#[tokio::main]`'s body, a test's), which stays on the thread that called it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskId {
    Task(tokio::task::Id),
    Root(std::thread::ThreadId),
}

impl TaskId {
    /// The task running now.
    pub(crate) fn current() -> Self {
        match tokio::task::try_id() {
            Some(id) => Self::Task(id),
            None => Self::Root(std::thread::current().id()),
        }
    }
}

impl Hold {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u64,
        client_id: u64,
        keys: Arc<LockKeys>,
        owner: Arc<Owner>,
        fence: Option<u64>,
        (origin, who): (Origin, Arc<str>),
        max_hold: Option<Duration>,
        tag: crate::series::Tag,
        state: HoldState,
    ) -> Self {
        Self {
            id,
            client_id,
            lossy_name: match String::from_utf8_lossy(&keys.name) {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(lossy) => Some(lossy.into()),
            },
            keys,
            owner,
            fence,
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            max_hold,
            tag,
            origin,
            who,
            task: TaskId::current(),
            class: OnceLock::new(),
            acquired: Instant::now(),
            minimum: Mutex::new(None),
            state: Mutex::new(state),
        }
    }

    /// A guard's release waits until `until`, its minimum hold time: kept until
    /// the latest of those asked for.
    pub(crate) fn keep_until(&self, until: Instant) {
        let mut minimum = locked(&self.minimum);
        *minimum = Some(minimum.map_or(until, |earlier| earlier.max(until)));
    }

    /// Until when a guard's release waits for its minimum hold time, if one does
    /// (the time may be past).
    pub(crate) fn kept_until(&self) -> Option<Instant> {
        *locked(&self.minimum)
    }

    /// The lock's class for the lock-order checker (see `ops/order.rs`), folded once.
    pub(crate) fn class(&self) -> Arc<str> {
        self.class
            .get_or_init(|| self.origin.class(&self.keys.name))
            .clone()
    }

    /// The name as text for messages and traces (bytes that are not UTF-8 are
    /// shown as U+FFFD).
    pub(crate) fn display(&self) -> &str {
        match &self.lossy_name {
            Some(lossy) => lossy,
            None => std::str::from_utf8(&self.keys.name).unwrap_or_default(),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, HoldState> {
        // The state stays consistent at every unlock: a panic elsewhere cannot tear it.
        locked(&self.state)
    }

    /// Whether the hold is lost: reported so, or past the deadline it was believed
    /// to last until (a stalled runtime or a paused process may not have let the
    /// watchdog say so yet).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        let expired = {
            let state = self.state();
            (Instant::now() >= state.deadline).then(|| (state.expiry_reason(), state.expiry_text()))
        };
        if let Some((reason, why)) = expired {
            self.mark_lost(reason, why);
        }
        expired.is_some()
    }

    /// Why the hold was lost, once it is.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        if !self.is_lost() {
            return None;
        }
        self.reason.get().copied()
    }

    /// Marks the hold lost for `reason` (the first reason given stays) and tells
    /// every guard; logs when someone still holds it. Whether this call marked it
    /// (not an earlier one).
    pub(crate) fn mark_lost(&self, reason: LostReason, why: &'static str) -> bool {
        if self.reason.set(reason).is_err() || self.lost.is_cancelled() {
            return false;
        }
        let guards = self.state().guards;
        self.lost.cancel();
        if guards == 0 {
            tracing::debug!(lock.name = %self.display(), reason = why, "distlock: released hold ended");
            return true;
        }
        self.tag.lost(reason.as_str());
        match (reason, self.max_hold) {
            (LostReason::ShutDown, _) => tracing::info!(
                lock.name = %self.display(),
                "distlock: lock given back by the client's shutdown while a guard still held it"
            ),
            (LostReason::MaxHoldExceeded, Some(max_hold)) => tracing::warn!(
                lock.name = %self.display(),
                max_hold = ?max_hold,
                "distlock: lock lost: held for its whole max_hold of {max_hold:?}, so the \
                 watchdog stopped renewing it and its lease ended"
            ),
            _ => tracing::warn!(lock.name = %self.display(), reason = why, "distlock: lock lost"),
        }
        true
    }

    /// The client's shutdown left the hold held in Redis for the rest of its
    /// minimum hold time, rather than give it back: its guards are told
    /// ([`LostReason::ShutDown`]; the hold is closed, they send nothing more).
    pub(crate) fn left_to_lease(&self, left: Duration) {
        if self.reason.set(LostReason::ShutDown).is_err() || self.lost.is_cancelled() {
            return;
        }
        self.lost.cancel();
        tracing::info!(
            lock.name = %self.display(),
            left = ?left,
            "distlock: lock left held by the client's shutdown for the rest of its minimum \
             hold time; its lease ends it"
        );
    }

    pub(crate) fn lost_error(&self) -> LockError {
        LockError::Lost {
            name: self.display().to_owned(),
            reason: self.reason.get().copied(),
        }
    }
}

/// The holds a client watches (its watchdog's table), by id, and the ids of each
/// lock's holds: so that a grant finds another chain's hold of its lock with one
/// lookup ([`HoldTable::of_lock`]), whatever the number of holds.
#[derive(Debug, Default)]
pub(crate) struct HoldTable {
    by_id: HashMap<u64, Arc<Hold>>,
    /// Usually one id a lock; several for readers and permits.
    by_lock: HashMap<LockOf, Vec<u64>>,
}

impl HoldTable {
    /// Adds `hold`; the hold of the same id it replaces, if any.
    pub(crate) fn insert(&mut self, hold: Arc<Hold>) -> Option<Arc<Hold>> {
        let earlier = self.by_id.insert(hold.id, hold.clone());
        if earlier.is_none() {
            self.by_lock
                .entry(LockOf(hold.keys.clone()))
                .or_default()
                .push(hold.id);
        }
        earlier
    }

    /// Removes the hold `id`: the hold, if it was there.
    pub(crate) fn remove(&mut self, id: u64) -> Option<Arc<Hold>> {
        let hold = self.by_id.remove(&id)?;
        if let Some(ids) = self.by_lock.get_mut(hold.keys.lock.as_slice()) {
            ids.retain(|other| *other != id);
            if ids.is_empty() {
                self.by_lock.remove(hold.keys.lock.as_slice());
            }
        }
        shrink(&mut self.by_id);
        shrink(&mut self.by_lock);
        Some(hold)
    }

    /// Whether the hold `id` is there.
    #[cfg(test)]
    pub(crate) fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Every hold.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Arc<Hold>> {
        self.by_id.values()
    }

    /// The holds of the lock at `lock`.
    pub(crate) fn of_lock<'a>(&'a self, lock: &[u8]) -> impl Iterator<Item = &'a Arc<Hold>> {
        self.by_lock
            .get(lock)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// Removes every hold, and returns them.
    pub(crate) fn take_all(&mut self) -> Vec<Arc<Hold>> {
        self.by_lock.clear();
        self.by_id.drain().map(|(_, hold)| hold).collect()
    }
}

/// Gives a map's room back once it is a quarter full at most after a burst.
fn shrink<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 64 && map.len() <= map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}

/// A lock's keys as a key of [`HoldTable`]: compared and hashed by the lock's Redis
/// key alone, so that a lookup by that key needs no copy of it.
#[derive(Debug)]
struct LockOf(Arc<LockKeys>);

impl PartialEq for LockOf {
    fn eq(&self, other: &Self) -> bool {
        self.0.lock == other.0.lock
    }
}

impl Eq for LockOf {}

impl Hash for LockOf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.lock.as_slice().hash(state);
    }
}

impl Borrow<[u8]> for LockOf {
    fn borrow(&self) -> &[u8] {
        &self.0.lock
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("name", &self.display())
            .field("fence", &self.fence)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

/// A view of a held lock: what the body of a lock scope can see.
///
/// Cheap to clone; it does not keep the lock held (the [`LockGuard`](crate::LockGuard) does). Returned by
/// [`LockGuard::held`](crate::LockGuard::held), handed to the body of [`LockClient::with_lock`](crate::LockClient::with_lock), and returned
/// by [`current_lock`](crate::current_lock) inside a lock scope.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// locks
///     .with_lock("order:42", |held| async move {
///         println!(
///             "holding `{}` at depth {}, token {:?}",
///             held.name(),
///             held.hold_count(),
///             held.fencing_token()
///         );
///         Ok(())
///     })
///     .await
/// # }
/// ```
#[derive(Clone)]
pub struct HeldLock {
    pub(crate) hold: Arc<Hold>,
    pub(crate) count: u64,
}

impl HeldLock {
    /// The lock name (bytes that are not UTF-8 are shown as U+FFFD).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// locks
    ///     .with_lock("report:daily", |held| async move {
    ///         assert_eq!(held.name(), "report:daily");
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.hold.display()
    }

    /// The lock name as the bytes it was given.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let name = b"job:\xff\x01".to_vec();
    /// locks
    ///     .with_lock(&name, |held| async move {
    ///         assert_eq!(held.name_bytes(), b"job:\xff\x01");
    ///         // `name` shows the byte that is not UTF-8 as U+FFFD.
    ///         assert_eq!(held.name(), "job:\u{fffd}\u{1}");
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn name_bytes(&self) -> &[u8] {
        &self.hold.keys.name
    }

    /// The hold count in Redis when this guard was acquired: 1 for the outermost
    /// acquisition, 2 for the first re-entry, and so on.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("order:42").await?;
    /// let depth = guard
    ///     .scope(async {
    ///         let inner = locks.lock("order:42").await?; // a re-entry
    ///         let depth = inner.held().hold_count();
    ///         inner.unlock().await?;
    ///         Ok::<_, distlock::LockError>(depth)
    ///     })
    ///     .await?;
    /// assert_eq!((guard.held().hold_count(), depth), (1, 2));
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn hold_count(&self) -> u64 {
        self.count
    }

    /// The fencing token, when fencing is on for this lock.
    ///
    /// Tokens grow with every new holder of the name and never repeat; re-entries
    /// return the token of the outermost acquisition. Hand it to the resource you
    /// protect, and have the resource refuse a token lower than one it has seen.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // The protected resource: refuses a write with a token older than the
    /// // newest it has seen (a holder that lost the lock and does not know yet).
    /// #[derive(Default)]
    /// struct Ledger {
    ///     newest: u64,
    /// }
    ///
    /// impl Ledger {
    ///     fn write(&mut self, token: u64, _entry: &str) -> bool {
    ///         if token < self.newest {
    ///             return false;
    ///         }
    ///         self.newest = token;
    ///         true
    ///     }
    /// }
    ///
    /// let mut ledger = Ledger::default();
    /// let guard = locks.lock("ledger:7").fencing(true).await?;
    /// let held = guard.held();
    /// if let Some(token) = held.fencing_token() {
    ///     assert!(ledger.write(token, "credit 10"));
    /// }
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.fence
    }

    /// Whether the lock was lost: its lease ended, the watchdog found it gone, or it
    /// could not renew it before the lease ended.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn build_export() -> Vec<u8> { Vec::new() }
    /// # async fn commit_export(_export: Vec<u8>) {}
    /// locks
    ///     .with_lock("export:nightly", |held| async move {
    ///         let export = build_export().await;
    ///         // Once the lock is lost, another owner may hold it: do not commit then.
    ///         if !held.is_lost() {
    ///             commit_export(export).await;
    ///         }
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// A future that completes when the lock is lost (and never, if it is released
    /// normally). Use it in `select!` to stop work as soon as exclusivity is gone.
    ///
    /// # Cancel safety
    ///
    /// The future only watches a token: dropping it changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn export() -> u64 { 0 }
    /// let outcome: Result<Option<u64>, distlock::LockError> = locks
    ///     .with_lock("export:nightly", |held| async move {
    ///         tokio::select! {
    ///             rows = export() => Ok(Some(rows)),
    ///             // Lost: stop at once; `with_lock` then returns `LockError::Lost`.
    ///             () = held.lost() => Ok(None),
    ///         }
    ///     })
    ///     .await;
    /// # let _ = outcome;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.hold.lost.clone().cancelled_owned()
    }

    /// Why the lock was lost; `None` while it is not. The first cause found is
    /// kept.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    /// use distlock::LostReason;
    ///
    /// let guard = locks.lock("export:nightly").max_hold(Duration::from_secs(60)).await?;
    /// let held = guard.held();
    /// held.lost().await;
    /// assert_eq!(held.lost_reason(), Some(LostReason::MaxHoldExceeded));
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason()
    }

    /// How much of the lease is left, as this client knows it, with no round trip:
    /// the time until the send time of the last grant or renewal plus the lease,
    /// less the clock drift the client allows for (1 % of the lease + 2 ms). Zero
    /// once the lock is lost. A watchdog lease goes down to about two thirds of the
    /// lease, then back up at each renewal; a fixed lease only goes down, unless
    /// [`LockGuard::extend`](crate::LockGuard::extend) extends it.
    ///
    /// Redis may keep the key a little longer (the drift allowance, or a longer
    /// lease of a re-entry): [`LockClient::inspect`](crate::LockClient::inspect)
    /// asks the server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// locks
    ///     .with_lock("export:nightly", |held| async move {
    ///         // Only start a step that fits in what is left of the lease.
    ///         if held.remaining_lease() > Duration::from_secs(5) {
    ///             // ... a step of up to 5 s ...
    ///         }
    ///         Ok(())
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn remaining_lease(&self) -> Duration {
        if self.hold.is_lost() {
            return Duration::ZERO;
        }
        self.hold
            .state()
            .deadline
            .saturating_duration_since(Instant::now())
    }

    /// A token cancelled when the lock is lost, for code that takes a
    /// [`CancellationToken`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn load_batches() -> Vec<Vec<u8>> { Vec::new() }
    /// use tokio_util::sync::CancellationToken;
    ///
    /// // Code that takes a token: it stops between batches once it is cancelled.
    /// async fn export_batches(batches: Vec<Vec<u8>>, stop: CancellationToken) {
    ///     for batch in batches {
    ///         if stop.is_cancelled() {
    ///             return;
    ///         }
    ///         // ... write `batch` ...
    /// #       let _ = batch;
    ///     }
    /// }
    ///
    /// let guard = locks.lock("export:nightly").await?;
    /// export_batches(load_batches().await, guard.held().lost_token()).await;
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn lost_token(&self) -> CancellationToken {
        self.hold.lost.child_token()
    }
}

impl fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.name())
            .field("hold_count", &self.count)
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// A watched hold of lock `name` in namespace `ns`, for unit tests: held once
/// by owner `owner:<id>`, a lease of 60 s, its renewal due in 20.
#[cfg(test)]
impl Hold {
    pub(crate) fn for_test(id: u64, name: &str) -> Arc<Hold> {
        let now = Instant::now();
        Arc::new(Hold::new(
            id,
            1,
            Arc::new(LockKeys::new("ns", name.as_bytes()).expect("valid name")),
            crate::owner::Owner::new(format!("owner:{id}").into()),
            None,
            (crate::origin::Origin::here(), "1 test host here".into()),
            None,
            crate::series::uncounted(),
            HoldState {
                guards: 1,
                deadline: now + Duration::from_secs(60),
                watchdog: true,
                lease: Duration::from_secs(60),
                next_renew: now + Duration::from_secs(20),
                renew_until: None,
                closed: false,
                named: false,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extension_never_reaches_past_max_hold_and_a_lease() {
        let now = Instant::now();
        let lease = Duration::from_secs(3);
        let state = |renew_until| HoldState {
            guards: 1,
            deadline: now + lease,
            watchdog: true,
            lease,
            next_renew: now + lease / 3,
            renew_until,
            closed: false,
            named: false,
        };
        assert_eq!(state(None).extension(now + lease * 10), lease);
        let capped = state(Some(now + Duration::from_secs(1)));
        assert_eq!(capped.extension(now), lease, "well before max_hold");
        assert_eq!(
            capped.extension(now + Duration::from_millis(2_500)),
            Duration::from_millis(1_500),
            "to max_hold + one lease, no further"
        );
        assert_eq!(capped.extension(now + Duration::from_secs(9)), MIN_LEASE);
    }

    /// After a burst of holds, the table gives its room back as they go, instead
    /// of keeping the burst's size for the client's life (issue 36: memory after a
    /// burst).
    #[test]
    fn the_table_gives_its_room_back_after_a_burst() {
        let mut table = HoldTable::default();
        for id in 0..10_000 {
            table.insert(Hold::for_test(id, &format!("burst:{id}")));
        }
        let room = |table: &HoldTable| (table.by_id.capacity(), table.by_lock.capacity());
        assert!(room(&table).0 >= 10_000 && room(&table).1 >= 10_000);
        for id in 0..9_990 {
            assert!(table.remove(id).is_some());
        }
        let (by_id, by_lock) = room(&table);
        assert!(
            by_id <= 128 && by_lock <= 128,
            "room left: {by_id}, {by_lock}"
        );
        assert_eq!(table.values().count(), 10);
        assert_eq!(table.of_lock(b"ns:{burst:9995}").count(), 1);
    }
}
