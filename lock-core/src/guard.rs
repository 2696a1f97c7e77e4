//! The guard of a held lock: what a caller holds, and how it gives the lock back.
//! Unlocking and dropping call down into `release.rs`.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio_util::sync::WaitForCancellationFutureOwned;

use std::time::Duration;

use tokio::time::Instant;

use crate::context::LockContext;
use crate::detach::join_all;
use crate::error::{LockError, LostReason};
use crate::hold::{HeldLock, Hold};
use crate::inner::Inner;
use crate::lease::MAX_LEASE;
use crate::{minimum, release};

/// A held lock. Release it with [`unlock`](LockGuard::unlock).
///
/// Dropping a guard without `unlock` stops its lease renewal at once and releases it
/// in the background on the current Tokio runtime (outside a runtime the lease just
/// runs out). `unlock` is better: it waits for Redis and tells you whether the lock
/// was still held.
///
/// The guard does not set the lock context by itself: to make nested acquires of the
/// same name re-enter, run the dependent code inside [`scope`](LockGuard::scope) (or
/// use [`LockClient::with_lock`](crate::LockClient::with_lock) or the `#[distributed_lock]` macro, which do it for you).
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// let guard = locks.lock("order:42").await?;
/// guard
///     .scope(async {
///         // ... work; nested acquires of `order:42` re-enter ...
///     })
///     .await;
/// // Dropping `guard` would release the lock in the background; `unlock` waits
/// // for Redis and says whether the lock was still held.
/// guard.unlock().await
/// # }
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    inner: Arc<Inner>,
    held: HeldLock,
    context: LockContext,
    released: bool,
}

impl LockGuard {
    /// The guard of `held`, whose scope is `context` plus this lock.
    pub(crate) fn new(inner: &Arc<Inner>, held: HeldLock, context: &LockContext) -> Self {
        Self {
            inner: inner.clone(),
            context: context.with(held.clone()),
            held,
            released: false,
        }
    }

    /// The lock name (bytes that are not UTF-8 are shown as U+FFFD).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("report:daily").await?;
    /// assert_eq!(guard.name(), "report:daily");
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.held.name()
    }

    /// The hold count in Redis when this guard was acquired (1: outermost).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let outer = locks.lock("order:42").await?;
    /// assert_eq!(outer.hold_count(), 1);
    /// // A re-entry inside the lock's scope adds one hold.
    /// let inner = outer.scope(async { locks.lock("order:42").await }).await?;
    /// assert_eq!(inner.hold_count(), 2);
    /// inner.unlock().await?;
    /// outer.unlock().await
    /// # }
    /// ```
    pub fn hold_count(&self) -> u64 {
        self.held.hold_count()
    }

    /// The fencing token, when fencing is on for this lock; see [`HeldLock::fencing_token`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn write_ledger(_token: u64, _entry: &str) {}
    /// let guard = locks.lock("ledger:7").fencing(true).await?;
    /// if let Some(token) = guard.fencing_token() {
    ///     // Send the token with every write; the ledger refuses tokens older than
    ///     // the newest it has seen.
    ///     write_ledger(token, "credit 10").await;
    /// }
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token()
    }

    /// Whether the lock was lost; see [`HeldLock::is_lost`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn build_export() -> Vec<u8> { Vec::new() }
    /// # async fn commit_export(_export: Vec<u8>) {}
    /// let guard = locks.lock("export:nightly").await?;
    /// let export = build_export().await;
    /// // Once the lock is lost, another owner may hold it: do not commit then.
    /// if !guard.is_lost() {
    ///     commit_export(export).await;
    /// }
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// A future that completes when the lock is lost; see [`HeldLock::lost`].
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
    /// use std::time::Duration;
    ///
    /// // A fixed lease of 5 s: the lock is lost if the export takes longer.
    /// let guard = locks.lock("export:nightly").lease(Duration::from_secs(5)).await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(1)) => println!("export done"),
    ///     () = guard.lost() => println!("lost the lock: stop and roll back"),
    /// }
    /// // `Err(LockError::Lost)` when the lock was lost.
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.held.lost()
    }

    /// Why the lock was lost; `None` while it is not. See [`LostReason`].
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
    /// guard.lost().await;
    /// if guard.lost_reason() == Some(LostReason::MaxHoldExceeded) {
    ///     eprintln!("the export ran past its bound of 60 s");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.held.lost_reason()
    }

    /// How much of the lease is left, as this client knows it (no round trip); see
    /// [`HeldLock::remaining_lease`]. Zero once the lock is lost.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let guard = locks.lock("export:nightly").lease(Duration::from_secs(60)).await?;
    /// // At most the lease less the drift allowance (1 % + 2 ms), and going down.
    /// assert!(guard.remaining_lease() <= Duration::from_secs(60));
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn remaining_lease(&self) -> std::time::Duration {
        self.held.remaining_lease()
    }

    /// Extends a fixed lease (a lock taken with [`.lease(d)`](crate::LockRequest::lease),
    /// which the watchdog does not renew) so that it lasts at least `lease` from now,
    /// if this owner still holds the lock: one round trip, that only ever moves the
    /// lease's end later (a shorter `lease` than what is left changes nothing).
    /// Re-entries and partial releases then extend to at least `lease` too.
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lock is no longer held by this owner (its lease
    /// ended, or it was force-unlocked): the guard reports the loss, and nothing is
    /// extended. [`LockError::InvalidOption`] for a `lease` out of
    /// [`MIN_LEASE`](crate::MIN_LEASE)..=[`MAX_LEASE`], or for a
    /// lock whose lease the watchdog renews (nothing is sent).
    /// [`LockError::PermissionDenied`]; [`LockError::Redis`] when Redis could not be
    /// reached (the lease then ends when it would have).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the lease extended in Redis while this client
    /// still counts on its old end (the guard then reports the loss at that end, and
    /// `unlock` gives the lock back either way).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn export_part(_part: u32) {}
    /// use std::time::Duration;
    ///
    /// // A fixed lease of 30 s, extended by another 30 s before each part.
    /// let guard = locks.lock("export:nightly").lease(Duration::from_secs(30)).await?;
    /// for part in 0..10 {
    ///     guard.extend(Duration::from_secs(30)).await?; // `Lost`: stop at once
    ///     export_part(part).await;
    /// }
    /// guard.unlock().await
    /// # }
    /// ```
    pub async fn extend(&self, lease: std::time::Duration) -> Result<(), LockError> {
        crate::renew::extend(
            &self.inner.backend,
            &self.inner.scripts,
            &self.held.hold,
            lease,
            self.inner.config.replicas,
        )
        .await
    }

    /// A cheap view of this lock to hand to code that should see it but not release it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("order:42").await?;
    /// // A task that reports a loss: it sees the lock, it cannot release it.
    /// let held = guard.held();
    /// let watcher = tokio::spawn(async move {
    ///     held.lost().await;
    ///     eprintln!("lost `{}`", held.name());
    /// });
    /// // ... exclusive work ...
    /// guard.unlock().await?;
    /// watcher.abort();
    /// Ok(())
    /// # }
    /// ```
    pub fn held(&self) -> HeldLock {
        self.held.clone()
    }

    /// The lock context of this guard: the caller's context plus this lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let outer = locks.lock("order:42").await?;
    /// let inner = outer.scope(async { locks.lock("customer:7").await }).await?;
    /// // The locks of the context, innermost first.
    /// let context = inner.context();
    /// let names: Vec<&str> = context.locks().map(|held| held.name()).collect();
    /// assert_eq!(names, ["customer:7", "order:42"]);
    /// inner.unlock().await?;
    /// outer.unlock().await
    /// # }
    /// ```
    pub fn context(&self) -> LockContext {
        self.context.clone()
    }

    /// Runs `fut` with this lock in its context: acquires of the same name inside it,
    /// at any depth, re-enter this hold instead of waiting for it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the guard is untouched.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("order:42").await?;
    /// guard
    ///     .scope(async {
    ///         // Same name, same chain: re-enters at once instead of waiting.
    ///         let inner = locks.lock("order:42").await?;
    ///         inner.unlock().await
    ///     })
    ///     .await?;
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        self.context.clone().scope(fut)
    }

    /// Releases the lock: one hold is given back in Redis; the last one frees the lock
    /// and wakes the waiters.
    ///
    /// # Errors
    ///
    /// [`LockError::Lost`] when the lock was no longer held by this owner (its lease
    /// ended or it was force-unlocked) or had been reported lost when `unlock` was
    /// called: the work done under it may have overlapped another holder. (A lease
    /// that ends while the release is on its way is no loss when the release found
    /// the lock held.) [`LockError::KeyConflict`] when the lock's
    /// key was replaced by a value of another type. [`LockError::PermissionDenied`] when
    /// the Redis user may not run the release script or publish (nothing changed).
    /// [`LockError::ReleaseUnconfirmed`] when Redis answered neither the release nor
    /// its retry: it may have been applied, and if not, the lease (no longer renewed)
    /// ends it within the time the error names. [`LockError::Redis`] when Redis
    /// refused the release for another reason.
    ///
    /// # Cancel safety
    ///
    /// Renewal stops at the first poll. Dropping the future before it completes does
    /// not lose the release: the request in flight runs to completion in a background
    /// task.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("report:daily").await?;
    /// // ... exclusive work ...
    /// match guard.unlock().await {
    ///     Ok(()) => Ok(()),
    ///     // The lease ended or the lock was force-unlocked: the work may have
    ///     // overlapped another holder.
    ///     Err(err) if err.is_lost() => {
    ///         eprintln!("{err}");
    ///         Ok(())
    ///     }
    ///     Err(err) => Err(err),
    /// }
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<(), LockError> {
        self.released = true;
        release::unlock(&self.inner, self.held.hold.clone()).await
    }

    /// Releases the lock once it has been held for `held_at_least`, counted from its
    /// acquisition (for a re-entry, from the chain's first acquisition): a minimum
    /// hold time, ShedLock's `lockAtLeastFor`. For a job that must run once per
    /// period across instances: instance A runs it in 50 ms, and instance B, whose
    /// timer fires 200 ms later, still finds the lock held and skips
    /// ([`LockClient::try_lock`](crate::LockClient::try_lock) gives `None`).
    ///
    /// When the lock has been held that long already, this is [`unlock`](Self::unlock).
    /// Otherwise it extends the lease once, so that it covers the rest of the
    /// minimum (one round trip; a lease that lasts longer is kept), and returns: the
    /// hold stays, renewed by the watchdog as before and watched for a loss, until
    /// the minimum has passed, and is then released in the background (a loss
    /// meanwhile ends the wait, and is logged). The lock is then free at the end of
    /// the minimum, as after `unlock`.
    ///
    /// - [`LockClient::shutdown`](crate::LockClient::shutdown) during the wait does
    ///   not give the lock back (a redeploy right after the job must not let another
    ///   instance run it again early): it extends the lease once more to cover the
    ///   rest of the minimum, leaves the lock to it, and reports it
    ///   ([`ShutdownReport::kept_for_minimum`](crate::ShutdownReport::kept_for_minimum)).
    /// - A process that dies during the wait (or whose runtime goes) sends nothing:
    ///   the lock ends when its lease in Redis ends, which is no earlier than the end
    ///   of the minimum (the extension above), and no later than the end of the
    ///   minimum or the end of the lease of the last renewal (one watchdog lease
    ///   after it, 30 s by default), whichever comes later.
    /// - A process that dies before this call (during the job) leaves the lock to the
    ///   lease of its last renewal, as any hold: the minimum is not known yet.
    ///
    /// # Errors
    ///
    /// As [`unlock`](Self::unlock) when the minimum has passed. Otherwise
    /// [`LockError::Lost`] when the lock was lost before (the hold is given back as
    /// `unlock` does) or when the extension finds it no longer held. When Redis does
    /// not answer the extension, it is logged and the call returns `Ok`: the hold
    /// stays, renewed by the watchdog, and is released at the end of the minimum as
    /// planned; only a process that dies meanwhile may free it earlier (at the end of
    /// the lease of its last renewal). [`LockError::InvalidOption`] when
    /// `held_at_least` is longer than [`MAX_LEASE`] (the lock is
    /// then released as a dropped guard is).
    ///
    /// # Cancel safety
    ///
    /// The release at the end of the minimum is planned at the first poll: dropping
    /// the future during the extension changes nothing but the extension, which may
    /// or may not be applied (it only ever moves the lease's end later).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn nightly_report() {}
    /// use std::time::Duration;
    ///
    /// // Every instance's timer fires at about 02:00; one of them runs the report.
    /// if let Some(guard) = locks.try_lock("job:nightly-report").await? {
    ///     nightly_report().await;
    ///     // Held for 30 s at least: an instance whose timer fires later skips too.
    ///     guard.unlock_after_holding(Duration::from_secs(30)).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock_after_holding(mut self, held_at_least: Duration) -> Result<(), LockError> {
        if held_at_least > MAX_LEASE {
            return Err(LockError::invalid_option(
                "unlock_after_holding",
                format!(
                    "{held_at_least:?} is longer than the longest lease ({MAX_LEASE:?}); the \
                     lock was released"
                ),
            ));
        }
        let hold = self.held.hold.clone();
        let until = hold.acquired + held_at_least;
        let runtime = tokio::runtime::Handle::try_current();
        if Instant::now() >= until || hold.is_lost() || runtime.is_err() {
            return self.unlock().await;
        }
        // From here the release at `until` owns the guard's hold.
        self.released = true;
        hold.keep_until(until);
        let task = release_at(self.inner.clone(), hold.clone(), until);
        if let Ok(runtime) = runtime {
            runtime.spawn(task);
        }
        match minimum::extend_until(&self.inner, &hold, until).await {
            Err(err) if !err.is_lost() => {
                tracing::warn!(
                    lock.name = %hold.display(),
                    error = %err,
                    "distlock: could not extend the lease to cover the minimum hold time; the \
                     lock is still released at its end, but a process that dies before may \
                     free it earlier"
                );
                Ok(())
            }
            outcome => outcome,
        }
    }
}

/// The release of a guard's hold at the end of its minimum hold time (`until`), or
/// as soon as the hold is lost (a loss, or the client's shutdown: it then sends
/// nothing).
///
/// # Cancel safety
///
/// Only a spawned task awaits it. Dropped during the wait (its runtime went), the
/// lock is left to its lease; during the release, the release finishes as
/// [`release::unlock`]'s does.
async fn release_at(inner: Arc<Inner>, hold: Arc<Hold>, until: Instant) {
    tokio::select! {
        () = tokio::time::sleep_until(until) => {}
        () = hold.lost.cancelled() => {}
    }
    let name = hold.display().to_owned();
    match release::unlock(&inner, hold).await {
        Ok(()) => {}
        // Told when it was found (or the shutdown left it to its lease).
        Err(err) if err.is_lost() => {
            tracing::debug!(lock.name = %name, error = %err, "distlock: minimum hold ended by a loss")
        }
        Err(err) => tracing::warn!(
            lock.name = %name,
            error = %err,
            "distlock: could not release the lock after its minimum hold time; its lease will \
             end it"
        ),
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        release::on_drop(&self.inner, self.held.hold.clone());
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

/// Every lock of a set taken by [`LockClient::lock_all`](crate::LockClient::lock_all):
/// one guard for all of them. Release them together with
/// [`unlock`](MultiLockGuard::unlock); dropping the guard releases them in the
/// background. The releases are sent at the same moment: on one endpoint they share
/// runs of the release script with each other and with the client's other releases
/// when earlier ones are on their way (an idle client sends the first two alone).
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// // Every SKU of a cart, in whatever order the cart lists them.
/// let cart = ["sku:7", "sku:3", "sku:9"];
/// let all = locks.lock_all(cart).await?;
/// assert_eq!(all.names().collect::<Vec<_>>(), ["sku:3", "sku:7", "sku:9"]);
/// all.scope(async {
///     // Nested acquires of any of the three re-enter.
/// })
/// .await;
/// all.unlock().await
/// # }
/// ```
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    pub(crate) fn new(guards: Vec<LockGuard>) -> Self {
        Self { guards }
    }

    /// The guard of each name of the set.
    pub(crate) fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// The names of the set, in the order they were taken (sorted by their key in
    /// Redis, each once).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let all = locks.lock_all(["sku:7", "sku:3", "sku:7"]).await?;
    /// assert_eq!(all.names().collect::<Vec<_>>(), ["sku:3", "sku:7"]);
    /// all.unlock().await
    /// # }
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::name)
    }

    /// The guard of each lock, in the order of [`names`](Self::names): their fencing
    /// tokens, hold counts and loss signals.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let all = locks.lock_all(["ledger:1", "ledger:2"]).fencing(true).await?;
    /// for guard in all.guards() {
    ///     println!("`{}`: token {:?}", guard.name(), guard.fencing_token());
    /// }
    /// all.unlock().await
    /// # }
    /// ```
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any lock of the set was lost; see [`HeldLock::is_lost`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn reserve_stock() -> u64 { 0 }
    /// # async fn commit_order(_order: u64) {}
    /// let cart = locks.lock_all(["sku:3", "sku:7"]).await?;
    /// let order = reserve_stock().await;
    /// // Commit only while every SKU is still held.
    /// if !cart.is_lost() {
    ///     commit_order(order).await;
    /// }
    /// cart.unlock().await
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Why a lock of the set was lost: the reason of the first of
    /// [`guards`](Self::guards) that was; `None` while all are held.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let cart = locks.lock_all(["sku:3", "sku:7"]).await?;
    /// cart.lost().await;
    /// eprintln!("lost a SKU's lock: {:?}", cart.lost_reason());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.guards.iter().find_map(LockGuard::lost_reason)
    }

    /// A future that completes when any lock of the set is lost (and never, if they
    /// are released normally). Use it in `select!` to stop work as soon as the set
    /// is no longer all held.
    ///
    /// # Cancel safety
    ///
    /// The future only watches tokens: dropping it changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let cart = locks.lock_all(["sku:3", "sku:7"]).await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(Duration::from_secs(1)) => println!("stock reserved"),
    ///     () = cart.lost() => println!("lost a SKU's lock: stop and roll back"),
    /// }
    /// cart.unlock().await
    /// # }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut watches: Vec<_> = self
            .guards
            .iter()
            .map(|guard| Box::pin(guard.lost()))
            .collect();
        std::future::poll_fn(move |cx| {
            for watch in &mut watches {
                if watch.as_mut().poll(cx).is_ready() {
                    return std::task::Poll::Ready(());
                }
            }
            std::task::Poll::Pending
        })
    }

    /// The lock context of the set: the caller's context plus every lock of it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let cart = locks.lock_all(["sku:3", "sku:7"]).await?;
    /// // Hand the whole set to a spawned task: it re-enters any of the names.
    /// let task = tokio::spawn(cart.context().scope({
    ///     let locks = locks.clone();
    ///     async move {
    ///         let one = locks.lock("sku:7").await?;
    ///         one.unlock().await
    ///     }
    /// }));
    /// task.await.expect("task panicked")?;
    /// cart.unlock().await
    /// # }
    /// ```
    pub fn context(&self) -> LockContext {
        self.guards
            .last()
            .map(LockGuard::context)
            .unwrap_or_default()
    }

    /// Runs `fut` with every lock of the set in its context: acquires of any of the
    /// names inside it re-enter.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the guard is untouched.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let cart = locks.lock_all(["sku:3", "sku:7"]).await?;
    /// cart.scope(async {
    ///     let one = locks.lock("sku:7").await?; // re-enters, no waiting
    ///     assert_eq!(one.hold_count(), 2);
    ///     one.unlock().await
    /// })
    /// .await?;
    /// cart.unlock().await
    /// # }
    /// ```
    pub fn scope<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        self.context().scope(fut)
    }

    /// Releases every lock of the set, all at once.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock`], for the first lock whose release failed; a loss
    /// ([`LockError::Lost`]) is reported before any other error. Every release is
    /// made whatever the others answer.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock`]: dropping the future does not lose the releases.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let cart = locks.lock_all(["sku:3", "sku:7"]).await?;
    /// // ... reserve every SKU ...
    /// if let Err(err) = cart.unlock().await {
    ///     // A loss is reported first: the reservation may have overlapped another holder.
    ///     eprintln!("releasing the cart: {err}");
    /// }
    /// Ok(())
    /// # }
    /// ```
    pub async fn unlock(self) -> Result<(), LockError> {
        first_error(join_all(self.guards.into_iter().map(LockGuard::unlock)).await)
    }

    /// Releases every lock of the set once it has been held for `held_at_least`
    /// (a minimum hold time), each as [`LockGuard::unlock_after_holding`] does,
    /// all at once.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::unlock_after_holding`], for the first lock that failed; a loss
    /// ([`LockError::Lost`]) is reported before any other error.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::unlock_after_holding`]: the releases are planned whatever
    /// happens to the future.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let both = locks.lock_all(["job:invoices", "job:ledger"]).await?;
    /// // ... the job ...
    /// both.unlock_after_holding(Duration::from_secs(30)).await
    /// # }
    /// ```
    pub async fn unlock_after_holding(self, held_at_least: Duration) -> Result<(), LockError> {
        let releases = self
            .guards
            .into_iter()
            .map(|guard| guard.unlock_after_holding(held_at_least));
        first_error(join_all(releases).await)
    }
}

/// The error of a set's release: the first loss, else the first error.
fn first_error(results: Vec<Result<(), LockError>>) -> Result<(), LockError> {
    let mut first = None;
    for result in results {
        match result {
            Ok(()) => {}
            Err(err @ LockError::Lost { .. }) if !matches!(first, Some(LockError::Lost { .. })) => {
                first = Some(err);
            }
            Err(err) => {
                first.get_or_insert(err);
            }
        }
    }
    first.map_or(Ok(()), Err)
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("locks", &self.guards)
            .finish()
    }
}
