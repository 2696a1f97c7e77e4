//! The requests for a lock that [`LockClient`](crate::LockClient) hands out: their
//! options, and the futures that take the lock when awaited.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::acquire::acquire_all;
use crate::acquire::{acquire, kind_conflict, unsupported, Options};
use crate::detach::BoxFuture;
use crate::error::LockError;
use crate::guard::{LockGuard, MultiLockGuard};
use crate::inner::Inner;
use crate::keys::{Kind, LockKeys};
use crate::kinds::LockKind;
use crate::origin::Origin;

/// A request for a lock, made by [`LockClient::lock`](crate::LockClient::lock). Await it to get the guard.
///
/// # Errors
///
/// - [`LockError::Timeout`]: another owner held the lock for the whole wait, or
///   tasks of this client that asked for it first still had it or waited for it
///   (a client's tasks get a lock in the order they asked).
/// - [`LockError::InvalidName`], [`LockError::InvalidOption`]: refused before anything
///   was sent to Redis.
/// - [`LockError::Lost`]: a re-entry found that the chain's hold was lost.
/// - [`LockError::KeyConflict`]: the lock's key holds another type (left untouched).
/// - [`LockError::QuorumNotReached`]: on Redlock, the wait ended without a majority
///   of grants (another owner held the lock on the other nodes, or they did not
///   answer); where one server gives [`LockError::Timeout`].
/// - [`LockError::ReplicationNotConfirmed`]: too few replicas acknowledged the new
///   lock in time (see [`LockClientBuilder::replicas`](crate::LockClientBuilder::replicas))
///   on the last attempt of the wait; each refused lock was released.
/// - [`LockError::PermissionDenied`]: the Redis user may not run the scripts.
/// - [`LockError::Redis`]: Redis failed or could not be reached (a waiter with time left
///   retries failures that may pass, such as a failover, within its wait).
///
/// # Cancel safety
///
/// Dropping the future at any point leaves no hold that no guard owns: a request in
/// flight is run to completion in a background task, and the hold it took (if any) is
/// given back; so is a lock that a release of this client was handing to the waiting
/// request when it was dropped. A hold count is never decremented that this request
/// did not add.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// // Every option is set before the request is awaited.
/// let guard = locks
///     .lock("invoice:2024-06")
///     .wait(Duration::from_secs(2))
///     .lease(Duration::from_secs(60))
///     .fencing(true)
///     .await?;
/// guard.unlock().await
/// # }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
pub struct LockRequest {
    inner: Arc<Inner>,
    keys: Result<Arc<LockKeys>, LockError>,
    options: Options,
    origin: Origin,
}

impl LockRequest {
    /// A request made by the caller of the `#[track_caller]` method that calls this.
    #[track_caller]
    pub(crate) fn new(inner: Arc<Inner>, keys: Result<Arc<LockKeys>, LockError>) -> Self {
        Self {
            inner,
            keys,
            options: Options::default(),
            origin: Origin::here(),
        }
    }

    /// How long this request waits, while its call chain holds other locks, before
    /// it looks for a deadlock, and then how often: as
    /// [`LockClientBuilder::deadlock_check_after`](crate::LockClientBuilder::deadlock_check_after),
    /// for this request (10 ms or more).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let order = locks.lock("order:42").await?;
    /// let taken = order
    ///     .scope(async {
    ///         locks
    ///             .lock("inventory:7")
    ///             .deadlock_check_after(Duration::from_millis(200))
    ///             .await
    ///     })
    ///     .await;
    /// match taken {
    ///     Ok(stock) => stock.unlock().await?,
    ///     // This request broke a deadlock: let go of everything, and try again.
    ///     Err(distlock::LockError::Deadlock { cycle, .. }) => println!("deadlock: {cycle:?}"),
    ///     Err(err) => return Err(err),
    /// }
    /// order.unlock().await
    /// # }
    /// ```
    pub fn deadlock_check_after(mut self, after: Duration) -> Self {
        self.options.deadlock_after = Some(after);
        self
    }
}

impl fmt::Debug for LockRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRequest")
            .field("name", &self.keys.as_ref().map(|keys| keys.display()).ok())
            .field("options", &self.options)
            .finish()
    }
}

/// The future of a [`LockRequest`]: resolves to the guard, or to why there is none.
///
/// # Cancel safety
///
/// As [`LockRequest`]: dropping it at any point leaves no hold that no guard owns.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use std::future::IntoFuture;
/// use std::time::Duration;
///
/// use distlock::LockFuture;
///
/// // A request turned into its future, to be stored or passed on by its type.
/// let pending: LockFuture = locks.lock("report:daily").into_future();
/// // A timeout that drops it before it resolves leaves no hold behind.
/// match tokio::time::timeout(Duration::from_secs(1), pending).await {
///     Ok(taken) => taken?.unlock().await,
///     Err(_elapsed) => Ok(()),
/// }
/// # }
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct LockFuture {
    inner: BoxFuture<Result<LockGuard, LockError>>,
}

impl Future for LockFuture {
    type Output = Result<LockGuard, LockError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl fmt::Debug for LockFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockFuture").finish_non_exhaustive()
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard, LockError>;
    type IntoFuture = LockFuture;

    fn into_future(self) -> LockFuture {
        LockFuture {
            inner: Box::pin(acquire(self.inner, self.keys, self.options, self.origin)),
        }
    }
}

/// A request that does not wait, made by [`LockClient::try_lock`](crate::LockClient::try_lock). Await it: `Ok(None)`
/// means another owner holds the lock, or tasks of this client asked for it first
/// and still wait for it (then nothing is sent: they go first).
///
/// # Errors
///
/// As [`LockRequest`], except that a busy lock is `Ok(None)`, not an error: on one
/// server a lock held by another owner (or waited for by tasks of this client that
/// asked first); on Redlock, a majority missed because other owners held some of
/// the nodes that answered ([`LockError::is_busy`]; too few answers is still
/// [`LockError::QuorumNotReached`]).
///
/// # Cancel safety
///
/// As [`LockRequest`]: a dropped request leaves no hold behind.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// match locks.try_lock("cron:cleanup").await? {
///     Some(guard) => {
///         // ... clean up ...
///         guard.unlock().await?;
///     }
///     None => println!("another instance runs the cleanup"),
/// }
/// Ok(())
/// # }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
#[derive(Debug)]
pub struct TryLockRequest {
    request: LockRequest,
}

impl TryLockRequest {
    pub(crate) fn new(request: LockRequest) -> Self {
        Self {
            request: request.wait(Duration::ZERO),
        }
    }
}

impl IntoFuture for TryLockRequest {
    type Output = Result<Option<LockGuard>, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        let request = self.request.into_future();
        Box::pin(async move {
            match request.await {
                Ok(guard) => Ok(Some(guard)),
                Err(err) if err.is_busy() => Ok(None),
                Err(err) => Err(err),
            }
        })
    }
}

/// A request for several locks at once, made by
/// [`LockClient::lock_all`](crate::LockClient::lock_all). Await it to get one guard
/// for all of them.
///
/// The names are taken in one canonical order (sorted by their key in Redis, each
/// once), whatever order they were listed in: two callers that list the same names
/// in different orders never deadlock. A name the call chain holds already is
/// re-entered. The options hold for every name; the wait is one budget for the
/// whole set.
///
/// # Errors
///
/// The errors of [`LockRequest`], for the first name that could not be had (a
/// [`LockError::Timeout`] names it); every name taken before it was given back.
/// [`LockError::InvalidName`] for an empty list, more than
/// [`MAX_LOCK_ALL`](crate::MAX_LOCK_ALL) names or an invalid name, before anything
/// is sent.
///
/// # Cancel safety
///
/// Dropping the future at any point leaves no hold that no guard owns: the names
/// taken so far are given back in the background, as a dropped [`LockRequest`]
/// gives back its own.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// // Two checkouts list the same SKUs in different orders. Both take `sku:3`
/// // first, so neither holds one SKU while it waits for the other's.
/// let checkout = |skus: [&'static str; 2]| {
///     let locks = locks.clone();
///     async move {
///         let cart = locks.lock_all(skus).wait(Duration::from_secs(2)).await?;
///         // ... reserve the SKUs ...
///         cart.unlock().await
///     }
/// };
/// let (first, second) = tokio::join!(
///     checkout(["sku:3", "sku:7"]),
///     checkout(["sku:7", "sku:3"])
/// );
/// first?;
/// second
/// # }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
pub struct LockAllRequest {
    inner: Arc<Inner>,
    keys: Result<Vec<Arc<LockKeys>>, LockError>,
    options: Options,
    origin: Origin,
}

impl LockAllRequest {
    /// A request made by the caller of the `#[track_caller]` method that calls this.
    #[track_caller]
    pub(crate) fn new(inner: Arc<Inner>, keys: Result<Vec<Arc<LockKeys>>, LockError>) -> Self {
        Self {
            inner,
            keys,
            options: Options::default(),
            origin: Origin::here(),
        }
    }
}

impl fmt::Debug for LockAllRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self
            .keys
            .as_ref()
            .ok()
            .map(|keys| keys.iter().map(|keys| keys.display()).collect::<Vec<_>>());
        f.debug_struct("LockAllRequest")
            .field("names", &names)
            .field("options", &self.options)
            .finish()
    }
}

impl IntoFuture for LockAllRequest {
    type Output = Result<MultiLockGuard, LockError>;
    type IntoFuture = BoxFuture<Self::Output>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(acquire_all(
            self.inner,
            self.keys,
            self.options,
            self.origin,
        ))
    }
}

/// Writes the setters that the lock requests share, once: each request type names
/// the setters it has, the path from the request to its [`Options`] and
/// [`Origin`], and the two pieces of its doc examples (the expression that makes
/// the request, and the code that ends the example with the awaited `held`), so
/// that every setter has one text and an example that compiles for its type.
macro_rules! request_setters {
    (
        $ty:ident through $path:tt,
        made by $make:literal, ended by $done:literal:
        $($setter:ident),+
    ) => {
        impl $ty {
            $(request_setters!(@setter $setter $path $make $done);)+
        }
    };
    (@setter wait [$($path:ident)*] $make:literal $done:literal) => {
        /// How long to wait while another owner holds the lock; zero fails at once.
        /// Default: the client's [`default_wait`](crate::LockClientBuilder::default_wait).
        /// Re-entries never wait. For a set of names it is one budget for the whole
        /// set: the error names the lock that stayed busy, and no lock of the set is
        /// held.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # use distlock_core as distlock;
        /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
        /// use std::time::Duration;
        ///
        #[doc = concat!("match ", $make, ".wait(Duration::from_secs(2)).await {")]
        ///     Ok(held) => held.unlock().await?,
        ///     // Another owner held the lock for the whole 2 s.
        ///     Err(err) if err.is_busy() => println!("busy: {err}"),
        ///     Err(err) => return Err(err),
        /// }
        /// Ok(())
        /// # }
        /// ```
        pub fn wait(mut self, wait: Duration) -> Self {
            self$(.$path)*.options.wait = Some(wait);
            self
        }
    };
    (@setter lease [$($path:ident)*] $make:literal $done:literal) => {
        /// A fixed lease: the lock (each lock of a set) ends after `lease` unless
        /// released before, and no watchdog renews it; the guard reports the loss
        /// when it ends. From [`MIN_LEASE`](crate::MIN_LEASE) to
        /// [`MAX_LEASE`](crate::MAX_LEASE) (whole milliseconds). Default: a watchdog
        /// lease.
        ///
        /// On a re-entry, the lease of the outermost acquisition stays in charge; a fixed
        /// lease here can only lengthen it.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # use distlock_core as distlock;
        /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
        /// use std::time::Duration;
        ///
        /// // No watchdog: the lock ends after 60 s at the latest, even if this process
        /// // stalls; the guard reports the loss then.
        #[doc = concat!("let held = ", $make, ".lease(Duration::from_secs(60)).await?;")]
        /// // ... work that takes well under a minute ...
        #[doc = $done]
        /// # }
        /// ```
        pub fn lease(mut self, lease: Duration) -> Self {
            self$(.$path)*.options.lease = Some(lease);
            self
        }
    };
    (@setter max_hold [$($path:ident)*] $make:literal $done:literal) => {
        /// The longest this lock is held: the watchdog stops renewing the hold once
        /// `max_hold` has passed since this acquisition (for a set, since each name
        /// was taken), and when the lease then runs out the guard's
        /// [`lost`](LockGuard::lost) fires with
        /// [`LostReason::MaxHoldExceeded`](crate::LostReason::MaxHoldExceeded). Default:
        /// the client's [`max_hold`](crate::LockClientBuilder::max_hold) (none unless
        /// set). On a re-entry the outermost acquisition's bound stays in charge.
        ///
        /// # Errors
        ///
        /// [`LockError::InvalidOption`], before anything is sent: zero, shorter than
        /// the watchdog's renewal period (a third of the lease), or shorter than a
        /// fixed [`lease`](Self::lease) given with it; and for a re-entry with a fixed
        /// lease that would end more than one lease after the outermost acquisition's
        /// `max_hold`.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # use distlock_core as distlock;
        /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
        /// use std::time::Duration;
        ///
        /// // A stuck job loses the lock 10 minutes (plus one lease) after taking it.
        #[doc = concat!("let held = ", $make, ".max_hold(Duration::from_secs(600)).await?;")]
        #[doc = $done]
        /// # }
        /// ```
        pub fn max_hold(mut self, max_hold: Duration) -> Self {
            self$(.$path)*.options.max_hold = Some(max_hold);
            self
        }
    };
    (@setter fencing [$($path:ident)*] $make:literal $done:literal) => {
        /// Whether the first acquisition (of each name, for a set) issues a fencing
        /// token. Default: the client's [`fencing`](crate::LockClientBuilder::fencing).
        /// Re-entries keep the token (or its absence) of the outermost acquisition;
        /// `.fencing(true)` on a re-entry of a lock taken without a token is refused
        /// with [`LockError::InvalidOption`]: ask for fencing on the outermost
        /// acquisition.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # use distlock_core as distlock;
        /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
        #[doc = concat!("let held = ", $make, ".fencing(true).await?;")]
        /// // ... pass the token with every write, for the store to refuse stale ones ...
        #[doc = $done]
        /// # }
        /// ```
        pub fn fencing(mut self, fencing: bool) -> Self {
            self$(.$path)*.options.fencing = Some(fencing);
            self
        }
    };
    (@setter label [$($path:ident)*] $make:literal $done:literal) => {
        /// The class of this lock (of every name of a set) for the metrics' `lock`
        /// label and the lock-order checker (see
        /// [`LockClientBuilder::lock_order`](crate::LockClientBuilder::lock_order)):
        /// what the name stands for, such as `order:{id}` for `order:42`. Without a
        /// label, the class is the name with every part that varies (digits, hex,
        /// UUIDs) folded (`order:{#}`); give one where names differ otherwise
        /// (`inventory:{sku}` for `inventory:bread`). `#[distributed_lock]` labels its
        /// locks with its key template.
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # use distlock_core as distlock;
        /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
        #[doc = concat!("let held = ", $make, ".label(\"report:{kind}\").await?;")]
        #[doc = $done]
        /// # }
        /// ```
        pub fn label(mut self, label: impl Into<Arc<str>>) -> Self {
            self$(.$path)*.origin.label = Some(label.into());
            self
        }
    };
    (@setter function [$($path:ident)*] $make:literal $done:literal) => {
        /// Names the function that takes the lock, for the holder's
        /// [`HolderInfo::site`](crate::HolderInfo::site) (what `inspect`, a waiter's
        /// [`LockError::Timeout`] and the `distlock` tool show). Without it, the site is
        /// the caller's source location (`src/orders.rs:42`). `#[distributed_lock]` names
        /// the annotated function (`orders::place_order`).
        ///
        /// # Examples
        ///
        /// ```no_run
        /// # use distlock_core as distlock;
        /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
        #[doc = concat!("let held = ", $make, ".function(concat!(module_path!(), \"::daily\")).await?;")]
        #[doc = $done]
        /// # }
        /// ```
        pub fn function(mut self, function: &'static str) -> Self {
            self$(.$path)*.origin.function = Some(function);
            self
        }
    };
}

request_setters!(
    LockRequest through [],
    made by "locks.lock(\"report:daily\")", ended by "held.unlock().await":
    wait, lease, max_hold, fencing, label, function
);

request_setters!(
    TryLockRequest through [request],
    made by "locks.try_lock(\"report:daily\")",
    ended by "if let Some(guard) = held {\n    guard.unlock().await?;\n}\nOk(())":
    lease, max_hold, fencing, label, function
);

request_setters!(
    LockAllRequest through [],
    made by "locks.lock_all([\"report:daily\", \"report:weekly\"])",
    ended by "held.unlock().await":
    wait, lease, max_hold, fencing, label, function
);

/// The most permits a semaphore may have.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// let too_many = locks.semaphore("exports", distlock::MAX_PERMITS + 1);
/// // Refused before anything is sent.
/// assert!(too_many.acquire().await.is_err_and(|err| err.is_invalid_input()));
/// # Ok(())
/// # }
/// ```
pub const MAX_PERMITS: u32 = 1_000_000;

/// Checks a semaphore's permit count: 1 to [`MAX_PERMITS`].
fn check_permits(permits: u32) -> Result<(), LockError> {
    if permits == 0 || permits > MAX_PERMITS {
        return Err(LockError::invalid_option(
            "permits",
            format!(
                "{permits} permits: a semaphore has 1 to {MAX_PERMITS} permits (1 is a plain \
                 lock: use `lock` for that)"
            ),
        ));
    }
    Ok(())
}

/// A semaphore, made by [`LockClient::semaphore`](crate::LockClient::semaphore): at
/// most its number of permits are held at once, across processes.
///
/// A permit is held through a [`LockGuard`] as a lock is: `unlock` it, or drop it
/// (released in the background); its lease is renewed by the watchdog, and the
/// guard tells when the permit was lost. Cheap to clone.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use std::time::Duration;
///
/// let exports = locks.semaphore("exports", 4);
/// let permit = exports.acquire().wait(Duration::from_secs(30)).await?;
/// // ... at most 4 of these run at once ...
/// permit.unlock().await
/// # }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
    name: Arc<[u8]>,
    permits: u32,
}

impl Semaphore {
    pub(crate) fn new(inner: Arc<Inner>, name: &[u8], permits: u32) -> Self {
        Self {
            inner,
            name: Arc::from(name),
            permits,
        }
    }

    /// A request for a permit; await it to get the permit's guard. Set `.wait(d)`
    /// and `.lease(d)` as for a lock (a permit takes no fencing token).
    ///
    /// # Errors
    ///
    /// As [`LockRequest`], and [`LockError::UnsupportedKind`] on Redlock, [`LockError::InvalidOption`] for a permit count out of range.
    ///
    /// # Cancel safety
    ///
    /// As [`LockRequest`]: dropping the request at any point leaves no permit taken.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let permit = locks
    ///     .semaphore("exports", 4)
    ///     .acquire()
    ///     .wait(Duration::from_secs(10))
    ///     .lease(Duration::from_secs(600))
    ///     .await?;
    /// permit.unlock().await
    /// # }
    /// ```
    #[track_caller]
    pub fn acquire(&self) -> LockRequest {
        let permits = self.permits;
        let keys = check_permits(permits)
            .and_then(|()| self.inner.keys_of(&self.name, Kind::Permit { permits }));
        LockRequest::new(self.inner.clone(), keys)
    }

    /// A request for a permit that does not wait: `Ok(None)` when every permit is
    /// held (or tasks of this client that asked first still wait for one).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// match locks.semaphore("exports", 4).try_acquire().await? {
    ///     Some(permit) => permit.unlock().await?,
    ///     None => println!("4 exports run already; try later"),
    /// }
    /// Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn try_acquire(&self) -> TryLockRequest {
        TryLockRequest::new(self.acquire())
    }

    /// How many permits are free now: the semaphore's permits less its holders with
    /// a lease still running (a holder that re-entered its permit holds one). One
    /// read of the semaphore's hash, by the read-only `inspect.lua`; the answer may
    /// be stale by the time it arrives, so use [`try_acquire`](Self::try_acquire) to
    /// take a permit, not this and then `acquire`.
    ///
    /// # Errors
    ///
    /// [`LockError::KindConflict`] when
    /// the name is held as another kind of lock; [`LockError::UnsupportedKind`] on
    /// Redlock; [`LockError::InvalidName`], [`LockError::InvalidOption`] (a permit
    /// count out of range), with nothing sent; [`LockError::KeyConflict`];
    /// [`LockError::PermissionDenied`]; [`LockError::Redis`].
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let exports = locks.semaphore("exports", 4);
    /// println!("{} of {} exports may start now", exports.available_permits().await?, exports.permits());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn available_permits(&self) -> Result<u32, LockError> {
        let permits = self.permits;
        check_permits(permits)?;
        let keys = self.inner.keys_of(&self.name, Kind::Permit { permits })?;
        unsupported(&self.inner, keys.kind).map_or(Ok(()), Err)?;
        let view = self.inner.ops.read(&keys).await?;
        match view.kind {
            None => Ok(permits),
            // The count in force (the smallest any holder asked for) bounds this
            // count too, as it bounds `acquire`.
            Some(LockKind::Semaphore { permits: in_force }) => {
                let held = u32::try_from(view.holders.len()).unwrap_or(u32::MAX);
                Ok(permits.min(in_force).saturating_sub(held))
            }
            Some(held_as) => Err(kind_conflict(&keys, held_as)),
        }
    }

    /// The number of permits.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # fn demo(locks: distlock::LockClient) {
    /// assert_eq!(locks.semaphore("exports", 4).permits(), 4);
    /// # }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &String::from_utf8_lossy(&self.name))
            .field("permits", &self.permits)
            .finish()
    }
}
