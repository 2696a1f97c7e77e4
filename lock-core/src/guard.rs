//! Held locks: the shared hold state, the public view of it, and the guard.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::client::LockClient;
use crate::context::LockContext;
use crate::name::LockKeys;
use crate::LockError;

/// One chain's hold of one lock: shared by the guard of the first acquisition and
/// the guards of every re-entry under the same owner.
pub(crate) struct Hold {
    /// Unique within the client; the watchdog's key.
    pub(crate) id: u64,
    pub(crate) client_id: u64,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) display: Arc<str>,
    pub(crate) owner: Arc<str>,
    pub(crate) fence: Option<u64>,
    pub(crate) lost: CancellationToken,
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
}

impl Hold {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u64,
        client_id: u64,
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        fence: Option<u64>,
        state: HoldState,
    ) -> Self {
        Self {
            id,
            client_id,
            display: keys.display().into(),
            keys,
            owner,
            fence,
            lost: CancellationToken::new(),
            state: Mutex::new(state),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, HoldState> {
        // The state stays consistent at every unlock: a panic elsewhere cannot tear it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the hold is lost: reported so, or past the deadline it was believed
    /// to last until (a stalled runtime or a paused process may not have let the
    /// watchdog say so yet).
    pub(crate) fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        let expired = Instant::now() >= self.state().deadline;
        if expired {
            self.mark_lost("its lease ended before it could be renewed");
        }
        expired
    }

    /// Marks the hold lost and tells every guard; logs when someone still holds it.
    pub(crate) fn mark_lost(&self, why: &'static str) {
        if self.lost.is_cancelled() {
            return;
        }
        let guards = self.state().guards;
        self.lost.cancel();
        if guards > 0 {
            tracing::warn!(lock.name = %self.display, reason = why, "distlock: lock lost");
        } else {
            tracing::debug!(lock.name = %self.display, reason = why, "distlock: released hold ended");
        }
    }

    pub(crate) fn lost_error(&self) -> LockError {
        LockError::Lost {
            name: self.display.to_string(),
        }
    }
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("name", &self.display)
            .field("fence", &self.fence)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

/// A view of a held lock: what the body of a lock scope can see.
///
/// Cheap to clone; it does not keep the lock held (the [`LockGuard`] does). Returned by
/// [`LockGuard::held`], handed to the body of [`LockClient::with_lock`], and returned
/// by [`current_lock`](crate::current_lock) inside a lock scope.
#[derive(Clone)]
pub struct HeldLock {
    pub(crate) hold: Arc<Hold>,
    pub(crate) count: u64,
}

impl HeldLock {
    /// The lock name (bytes that are not UTF-8 are shown as U+FFFD).
    pub fn name(&self) -> &str {
        &self.hold.display
    }

    /// The lock name as the bytes it was given.
    pub fn name_bytes(&self) -> &[u8] {
        &self.hold.keys.name
    }

    /// The hold count in Redis when this guard was acquired: 1 for the outermost
    /// acquisition, 2 for the first re-entry, and so on.
    pub fn hold_count(&self) -> u64 {
        self.count
    }

    /// The fencing token, when fencing is on for this lock.
    ///
    /// Tokens grow with every new holder of the name and never repeat; re-entries
    /// return the token of the outermost acquisition. Hand it to the resource you
    /// protect, and have the resource refuse a token lower than one it has seen.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.fence
    }

    /// Whether the lock was lost: its lease ended, the watchdog found it gone, or it
    /// could not renew it before the lease ended.
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// A future that completes when the lock is lost (and never, if it is released
    /// normally). Use it in `select!` to stop work as soon as exclusivity is gone.
    ///
    /// # Cancel safety
    ///
    /// The future only watches a token: dropping it changes nothing.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.hold.lost.clone().cancelled_owned()
    }

    /// A token cancelled when the lock is lost, for code that takes a
    /// [`CancellationToken`].
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

/// A held lock. Release it with [`unlock`](LockGuard::unlock).
///
/// Dropping a guard without `unlock` stops its lease renewal at once and releases it
/// in the background on the current Tokio runtime (outside a runtime the lease just
/// runs out). `unlock` is better: it waits for Redis and tells you whether the lock
/// was still held.
///
/// The guard does not set the lock context by itself: to make nested acquires of the
/// same name re-enter, run the dependent code inside [`scope`](LockGuard::scope) (or
/// use [`LockClient::with_lock`] or the `#[distributed_lock]` macro, which do it for you).
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    pub(crate) client: LockClient,
    pub(crate) held: HeldLock,
    pub(crate) context: LockContext,
    pub(crate) released: bool,
}

impl LockGuard {
    /// The lock name (bytes that are not UTF-8 are shown as U+FFFD).
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The hold count in Redis when this guard was acquired (1: outermost).
    pub fn hold_count(&self) -> u64 {
        self.held.hold_count()
    }

    /// The fencing token, when fencing is on for this lock; see [`HeldLock::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Whether the lock was lost; see [`HeldLock::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// A future that completes when the lock is lost; see [`HeldLock::lost`].
    ///
    /// # Cancel safety
    ///
    /// The future only watches a token: dropping it changes nothing.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.held.lost()
    }

    /// A cheap view of this lock to hand to code that should see it but not release it.
    pub fn held(&self) -> HeldLock {
        self.held.clone()
    }

    /// The lock context of this guard: the caller's context plus this lock.
    pub fn context(&self) -> LockContext {
        self.context.clone()
    }

    /// Runs `fut` with this lock in its context: acquires of the same name inside it,
    /// at any depth, re-enter this hold instead of waiting for it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the guard is untouched.
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        self.context.clone().scope(fut)
    }

    /// Releases the lock: one hold is given back in Redis; the last one frees the lock
    /// and wakes the waiters.
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lock was no longer held by this owner (its lease
    /// ended or it was force-unlocked) or had been reported lost: the work done under
    /// it may have overlapped another holder. [`LockError::KeyConflict`] when the lock's
    /// key was replaced by a value of another type. [`LockError::PermissionDenied`] when
    /// the Redis user may not run the release script or publish (nothing changed).
    /// [`LockError::Redis`] when Redis could not be reached; the lease then runs out by
    /// itself.
    ///
    /// # Cancel safety
    ///
    /// Renewal stops at the first poll. Dropping the future before it completes does
    /// not lose the release: the request in flight runs to completion in a background
    /// task.
    pub async fn unlock(mut self) -> Result<(), LockError> {
        self.released = true;
        let client = self.client.clone();
        let hold = self.held.hold.clone();
        client.release_hold(hold).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.client.release_in_background(self.held.hold.clone());
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("hold_count", &self.hold_count())
            .field("fencing_token", &self.fencing_token())
            .field("lost", &self.is_lost())
            .finish()
    }
}
