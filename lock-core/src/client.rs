//! The public client: [`LockClient`] hands out lock requests, inspects and
//! force-unlocks locks, and can be installed as the process's global client.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tracing::Instrument;

use crate::acquire::canonical;
use crate::backend::redlock::{self, ForceVote};
use crate::context::LockContext;
use crate::error::LockError;
use crate::health::{self, HealthReport};
use crate::hold::HeldLock;
use crate::inner::Inner;
use crate::keys::Kind;
use crate::kinds::{HoldMode, LockKind};
use crate::layout::args::ForceRelease;
use crate::release::{self, ShutdownReport};
use crate::request::{LockAllRequest, LockRequest, Semaphore, TryLockRequest};
use crate::scripts::{unexpected_reply, ForceReleaseReply, LockView};
use crate::who::HolderInfo;

/// The client that [`global`] returns: set once, by [`LockClient::install_global`].
static GLOBAL: OnceLock<LockClient> = OnceLock::new();

/// A connection to Redis that takes, re-enters, waits for and releases locks.
///
/// Cheap to clone (an `Arc`): clone it into every task that needs it. Background
/// tasks (the watchdog, the waiters' subscriber) stop when the last clone and the last
/// guard are gone.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
///
/// let locks = LockClient::builder().url("redis://127.0.0.1:6379").connect().await?;
/// let guard = locks.lock("report:daily").wait(Duration::from_secs(2)).await?;
/// // ... exclusive work ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<Inner>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("namespace", &self.inner.config.namespace)
            .field("default_wait", &self.inner.config.default_wait)
            .field("default_lease", &self.inner.config.default_lease)
            .field("fencing", &self.inner.config.fencing)
            .finish_non_exhaustive()
    }
}

/// What [`LockClient::inspect`] found about a lock. Owner ids are never shown.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// let info = locks.inspect("ledger:7").await?;
/// if !info.held {
///     // The counter outlives the holders: the next one gets a higher token.
///     println!("free; last token issued: {:?}", info.last_fencing_token);
/// }
/// # Ok(())
/// # }
/// ```
///
/// A read-write lock or a semaphore shows each holder:
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// use distlock::{HoldMode, LockKind};
///
/// let info = locks.inspect("catalogue").await?;
/// if info.kind == Some(LockKind::ReadWrite) {
///     let readers = info.holders.iter().filter(|h| h.mode == HoldMode::Read).count();
///     println!("{readers} readers, {} writers waiting", info.waiting);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Whether some owner holds the lock.
    pub held: bool,
    /// The holder's hold count (its re-entry depth); 0 when free. With several
    /// holders (readers, permits), the sum of their counts.
    pub hold_count: u64,
    /// How long the lease still runs (with several holders, the longest); `None`
    /// when free, or when the key has no expiry.
    pub lease_remaining: Option<Duration>,
    /// The holder's fencing token, when it took one (a read-write lock's: the
    /// writer's).
    pub fencing_token: Option<u64>,
    /// The last fencing token ever issued for this name; `None` when none was.
    pub last_fencing_token: Option<u64>,
    /// The kind of lock at the name: `None` when no plain lock is held there and no
    /// read-write lock or semaphore is there.
    pub kind: Option<LockKind>,
    /// Every holder: one for a held plain lock, each reader or the writer of a
    /// read-write lock, each permit holder of a semaphore (the number of permits in
    /// use). Owner ids are never shown.
    pub holders: Vec<Holder>,
    /// Waiters that keep a place in Redis: writers waiting for a read-write lock
    /// (their wait keeps new readers out), or the queue of a fair lock. Always 0
    /// for a plain lock and a semaphore, whose waiters keep no place: see
    /// [`listening`](Self::listening) for them.
    pub waiting: u64,
    /// How many connections listen for the lock's release (are subscribed to its
    /// release channel): one per client that has tasks waiting for the lock,
    /// whatever the number of those tasks (a client's waiters share one
    /// subscription), and one per `distlock watch` of the lock. So `Some(0)` means
    /// nobody waits (fair-lock waiters and writers listen too), and `Some(2)` two
    /// processes (or clients) with one or more waiters each. `None` when the
    /// server refused `PUBSUB NUMSUB` to this user (see the README's ACL section).
    pub listening: Option<u64>,
}

/// One holder of a lock, as [`LockClient::inspect`] shows it (never its owner id).
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// for holder in locks.inspect("exports").await?.holders {
///     println!(
///         "{:?} at depth {}, lease left {:?}",
///         holder.mode, holder.hold_count, holder.lease_remaining
///     );
///     if let Some(info) = &holder.info {
///         println!("  held by {info}");
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// How it holds the lock.
    pub mode: HoldMode,
    /// Its hold count (re-entry depth).
    pub hold_count: u64,
    /// How long its lease still runs.
    pub lease_remaining: Option<Duration>,
    /// Its fencing token, when it took one.
    pub fencing_token: Option<u64>,
    /// Who it is: service, host, process, where it took the lock and since when.
    /// `None` for a holder not named yet: a hold the watchdog renews is named by its
    /// first renewal, 1 s after its grant (sooner when a third of its lease is
    /// shorter), a hold of a fixed lease at once; or one whose client wrote nothing
    /// of it (a distlock before 0.1's holder info).
    pub info: Option<HolderInfo>,
}

impl LockInfo {
    /// Who holds the lock, as its client named it (see [`Holder::info`]): the
    /// holder of a plain or fair lock, the writer of a read-write lock, else (readers,
    /// permits) the first of [`holders`](Self::holders), the one with the longest
    /// lease. `None` when the lock is free, or its holder is not named yet.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// match locks.inspect("order:42").await?.holder() {
    ///     Some(holder) => println!("held by {holder}"),
    ///     None => println!("free, or held for less than a second"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn holder(&self) -> Option<&HolderInfo> {
        self.holders.first().and_then(|holder| holder.info.as_ref())
    }
}

impl LockClient {
    /// The public handle on a connected client's state.
    pub(crate) fn new(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Makes this client the one [`global`] returns (and that `#[distributed_lock]` uses
    /// without `client = ..`), for the rest of the process. Returns the client.
    ///
    /// One client is installed, once: a later install of another client is refused
    /// and the first one stays, since a second client with other settings (another
    /// URL, namespace or lease) would silently change what every annotated function
    /// locks. Installing the installed client again, or a clone of it, changes nothing
    /// and succeeds. Any other client is passed explicitly: `client = ..` on
    /// `#[distributed_lock]`, or its own methods.
    ///
    /// # Errors
    ///
    /// [`InstallGlobalError`] when another client is installed already; it gives this
    /// client back ([`InstallGlobalError::into_client`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::LockClient;
    ///
    /// // At start-up:
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .connect()
    ///     .await?
    ///     .install_global()?;
    /// // Anywhere else in the process:
    /// let guard = distlock::global()?.lock("report:daily").await?;
    /// guard.unlock().await?;
    ///
    /// // A second client is refused, and comes back to be used explicitly.
    /// let reports = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .namespace("reports")
    ///     .connect()
    ///     .await?;
    /// let reports = match reports.install_global() {
    ///     Ok(installed) => installed,
    ///     Err(refused) => {
    ///         eprintln!("{refused}");
    ///         refused.into_client()
    ///     }
    /// };
    /// // Installing the installed client again is no error.
    /// locks.clone().install_global()?;
    /// # let _ = reports;
    /// # Ok(())
    /// # }
    /// ```
    pub fn install_global(self) -> Result<LockClient, InstallGlobalError> {
        let installed = GLOBAL.get_or_init(|| self.clone());
        if Arc::ptr_eq(&installed.inner, &self.inner) {
            Ok(self)
        } else {
            Err(InstallGlobalError { client: self })
        }
    }

    /// The namespace of every key this client uses.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use distlock::LockClient;
    ///
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .namespace("billing")
    ///     .connect()
    ///     .await?;
    /// // The lock `order:42` is the key `billing:{order:42}`.
    /// assert_eq!(locks.namespace(), "billing");
    /// # Ok(())
    /// # }
    /// ```
    pub fn namespace(&self) -> &str {
        &self.inner.config.namespace
    }

    /// The service the client works for: [`LockClientBuilder::service`], or the
    /// running executable's name when that was not set. Every connection of the
    /// client is named `distlock:<service>` on the server (see `CLIENT LIST`).
    ///
    /// [`LockClientBuilder::service`]: crate::LockClientBuilder::service
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use distlock::LockClient;
    ///
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .service("orders-api")
    ///     .connect()
    ///     .await?;
    /// assert_eq!(locks.service(), "orders-api");
    /// # Ok(())
    /// # }
    /// ```
    pub fn service(&self) -> &str {
        self.inner.service()
    }

    /// Checks every server node of the deployment (the server, the master behind
    /// Sentinel, each master of a cluster, each Redlock node): its version, the
    /// round trip of a `PING`, whether distlock's scripts are cached, the ACL
    /// permissions the locks need (checked with `ACL DRYRUN` for the current user),
    /// the eviction policy, persistence and replicas. The [`HealthReport`] lists
    /// what is wrong in plain words; see [`HealthReport::is_healthy`].
    ///
    /// [`HealthReport`]: crate::HealthReport
    /// [`HealthReport::is_healthy`]: crate::HealthReport::is_healthy
    ///
    /// # Errors
    ///
    /// [`LockError::Connect`], naming the node, when a node does not answer (its
    /// connection is lost, refused, or the reply timed out); on a cluster,
    /// [`LockError::Connect`] when no node tells the masters.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop at any await: the checks only read (`ACL DRYRUN` runs nothing).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// let locks = distlock::LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .connect()
    ///     .await?;
    /// let report = locks.ping().await?;
    /// println!("distlock: {report}"); // one line: healthy, or the warnings
    /// assert!(report.is_healthy(), "{:?}", report.warnings());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ping(&self) -> Result<HealthReport, LockError> {
        health::check(&self.inner).await
    }

    /// How long a lock request waits unless it says otherwise.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // A request that may wait twice as long as the others.
    /// let guard = locks.lock("report:monthly").wait(locks.default_wait() * 2).await?;
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn default_wait(&self) -> Duration {
        self.inner.config.default_wait
    }

    /// The watchdog lease.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // How long a lock without a fixed lease outlives a crash of this process.
    /// println!("a crashed holder's locks end within {:?}", locks.default_lease());
    /// # Ok(())
    /// # }
    /// ```
    pub fn default_lease(&self) -> Duration {
        self.inner.config.default_lease
    }

    /// Whether every lock of this client gets a fencing token.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let guard = locks.lock("ledger:7").await?;
    /// if locks.fencing() {
    ///     assert!(guard.fencing_token().is_some());
    /// }
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn fencing(&self) -> bool {
        self.inner.config.fencing
    }

    /// A request for the lock `name`; await it to get a [`LockGuard`](crate::LockGuard).
    ///
    /// Set `.wait(d)` (how long to wait when busy; default [`default_wait`]),
    /// `.lease(d)` (a fixed lease with no watchdog; default: a watchdog lease) and
    /// `.fencing(true)` before awaiting. If the current call chain already holds
    /// `name`, the request re-enters it: one round trip, no waiting. Otherwise it
    /// queues behind the tasks of this client that asked for `name` before it: they
    /// get the lock first.
    ///
    /// Names are bytes (`&str`, `String`, `&[u8]`, `Vec<u8>`), 1 to
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) long.
    ///
    /// [`default_wait`]: crate::LockClientBuilder::default_wait
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// // Wait up to the client's default wait.
    /// let guard = locks.lock("report:daily").await?;
    /// guard.unlock().await?;
    ///
    /// // Wait up to 2 s, with a token and a fixed lease of 60 s.
    /// let guard = locks
    ///     .lock("ledger:7")
    ///     .wait(Duration::from_secs(2))
    ///     .fencing(true)
    ///     .lease(Duration::from_secs(60))
    ///     .await?;
    /// guard.unlock().await?;
    ///
    /// // Names are bytes: any `AsRef<[u8]>`.
    /// let id: u64 = 42;
    /// let guard = locks.lock(format!("order:{id}")).await?;
    /// guard.unlock().await
    /// # }
    /// ```
    #[track_caller]
    pub fn lock(&self, name: impl AsRef<[u8]>) -> LockRequest {
        LockRequest::new(self.inner.clone(), self.inner.keys(name.as_ref()))
    }

    /// A request for every lock of `names` at once, all or nothing, with one guard
    /// for the set: see [`LockAllRequest`] for the order the names are taken in and
    /// what happens when one cannot be had. Duplicates count once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// let skus = vec!["inventory:7", "inventory:3"];
    /// let cart = locks.lock_all(&skus).wait(Duration::from_secs(2)).await?;
    /// // ... reserve every SKU ...
    /// cart.unlock().await
    /// # }
    /// ```
    #[track_caller]
    pub fn lock_all<I>(&self, names: I) -> LockAllRequest
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let keys = names
            .into_iter()
            .map(|name| self.inner.keys(name.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .and_then(canonical);
        LockAllRequest::new(self.inner.clone(), keys)
    }

    /// A request for the lock `name` that does not wait: it resolves to `Ok(None)`
    /// when another owner holds it, or when tasks of this client asked for it first
    /// and are still waiting (they go first; nothing is sent).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // `None`: another instance runs the cleanup, so this run skips it.
    /// if let Some(guard) = locks.try_lock("cron:cleanup").await? {
    ///     // ... clean up ...
    ///     guard.unlock().await?;
    /// }
    /// Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn try_lock(&self, name: impl AsRef<[u8]>) -> TryLockRequest {
        TryLockRequest::new(self.lock(name))
    }

    /// A request for a read hold of the read-write lock `name`: many readers hold it
    /// at once, and no writer meanwhile. Options as for [`lock`](Self::lock), but
    /// without fencing (a read hold takes no token).
    ///
    /// A read hold waits while a writer holds the lock, and also while a writer
    /// waits for it, so that readers in a loop cannot starve a writer. A call chain
    /// that holds a read hold re-enters it; one that holds the write lock gets a
    /// read hold beside it at once (a downgrade: release the write guard and keep
    /// reading). A read-write lock is a lock kind of its own: a name used with
    /// [`lock`](Self::lock) is a [`LockError::KeyConflict`] here, and the other way round.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // Any number of tasks and processes read the catalogue at once.
    /// let reading = locks.read_lock("catalogue").await?;
    /// // ... read prices ...
    /// reading.unlock().await
    /// # }
    /// ```
    #[track_caller]
    pub fn read_lock(&self, name: impl AsRef<[u8]>) -> LockRequest {
        let keys = self.inner.keys_of(name.as_ref(), Kind::Read);
        LockRequest::new(self.inner.clone(), keys)
    }

    /// A request for the write hold of the read-write lock `name`: one writer, no
    /// reader meanwhile. Options as for [`lock`](Self::lock), fencing included.
    ///
    /// While it waits for readers to leave, no new reader enters. A call chain that
    /// holds the write lock re-enters it; one that holds only a read hold of `name`
    /// gets [`LockError::UpgradeNotAllowed`] at once (it would wait for itself).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let writing = locks.write_lock("catalogue").fencing(true).await?;
    /// // ... update prices, passing the token to the store ...
    /// # let _ = writing.fencing_token();
    /// // Keep reading what was written, and let other readers in: a downgrade.
    /// let reading = writing.scope(async { locks.read_lock("catalogue").await }).await?;
    /// writing.unlock().await?;
    /// // ... read ...
    /// reading.unlock().await
    /// # }
    /// ```
    #[track_caller]
    pub fn write_lock(&self, name: impl AsRef<[u8]>) -> LockRequest {
        let keys = self.inner.keys_of(name.as_ref(), Kind::Write);
        LockRequest::new(self.inner.clone(), keys)
    }

    /// As [`read_lock`](Self::read_lock), without waiting: `Ok(None)` when a writer
    /// holds or waits for the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// match locks.try_read_lock("catalogue").await? {
    ///     Some(reading) => reading.unlock().await?,
    ///     None => println!("the catalogue is being written; serve the cached copy"),
    /// }
    /// Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn try_read_lock(&self, name: impl AsRef<[u8]>) -> TryLockRequest {
        TryLockRequest::new(self.read_lock(name))
    }

    /// As [`write_lock`](Self::write_lock), without waiting: `Ok(None)` when readers
    /// or a writer hold the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// if let Some(writing) = locks.try_write_lock("catalogue").await? {
    ///     // ... reprice ...
    ///     writing.unlock().await?;
    /// }
    /// Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn try_write_lock(&self, name: impl AsRef<[u8]>) -> TryLockRequest {
        TryLockRequest::new(self.write_lock(name))
    }

    /// A request for the fair lock `name`: one owner at a time, granted in the order
    /// the requests arrived at Redis, across every process and client. Options as
    /// for [`lock`](Self::lock), fencing included.
    ///
    /// Each waiter keeps its place in a queue kept in Redis, for as long as it keeps
    /// looking: it looks at least once a second while it waits, however long that
    /// is. A waiter that gives up (its wait ends, its request is dropped) leaves the
    /// queue at once; one whose process dies stops holding the others back within
    /// 4 s (its place dies 3 s after its last look, and the next waiter looks within
    /// a second). A release wakes the next waiter only. Queue order and deadlines
    /// use the server's clock, never a client's. A fair lock is a kind of its own:
    /// a name used with [`lock`](Self::lock) is a [`LockError::KeyConflict`] here.
    /// Not on Redlock ([`LockError::UnsupportedKind`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    ///
    /// // Buyers of the last tickets are served in the order they asked.
    /// let turn = locks
    ///     .fair_lock("tickets:final")
    ///     .wait(Duration::from_secs(30))
    ///     .await?;
    /// // ... sell ...
    /// turn.unlock().await
    /// # }
    /// ```
    #[track_caller]
    pub fn fair_lock(&self, name: impl AsRef<[u8]>) -> LockRequest {
        let keys = self.inner.keys_of(name.as_ref(), Kind::Fair);
        LockRequest::new(self.inner.clone(), keys)
    }

    /// As [`fair_lock`](Self::fair_lock), without waiting (and without a place in
    /// the queue): `Ok(None)` when the lock is held, or free with waiters before.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// if let Some(turn) = locks.try_fair_lock("tickets:final").await? {
    ///     turn.unlock().await?;
    /// }
    /// Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn try_fair_lock(&self, name: impl AsRef<[u8]>) -> TryLockRequest {
        TryLockRequest::new(self.fair_lock(name))
    }

    /// The semaphore `name` of `permits` permits: at most `permits` owners hold a
    /// permit at once, across processes. Take one with [`Semaphore::acquire`] or
    /// [`Semaphore::try_acquire`].
    ///
    /// Each permit has a lease of its own, renewed by the watchdog, so the permit of
    /// a process that dies comes back when its lease ends. A call chain holding a
    /// permit re-enters it (one permit, its count goes up). The count can change
    /// while permits are held (a rolling deploy from 2 to 3 permits, or back): the
    /// count in force is the smallest any current holder asked for, and a permit is
    /// taken only while fewer owners than both `permits` and the count in force hold
    /// one; so no holder ever shares the semaphore with more holders than it asked
    /// for, a larger count takes effect once the holders that asked for less are
    /// gone, and a smaller one as soon as one of its holders holds. `permits` is 1 to [`MAX_PERMITS`](crate::MAX_PERMITS); other values
    /// make every request fail with [`LockError::InvalidOption`]. Not on Redlock
    /// ([`LockError::UnsupportedKind`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // At most 4 exports run at a time, in all processes together.
    /// let exports = locks.semaphore("exports", 4);
    /// let permit = exports.acquire().await?;
    /// // ... export ...
    /// permit.unlock().await
    /// # }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Semaphore {
        Semaphore::new(self.inner.clone(), name.as_ref(), permits)
    }

    /// Takes the lock `name`, runs `body` inside its scope, and releases it.
    ///
    /// `body` gets a [`HeldLock`] (name, fencing token, loss signal) and returns a
    /// `Result` whose error type a [`LockError`] converts into (`LockError` itself,
    /// your own error with `From<LockError>`, `anyhow::Error`, ...), as an annotated
    /// function does: one `?` serves the lock's errors and the body's. Nested acquires
    /// of `name` inside `body` re-enter. The lock is released on every exit: return,
    /// panic (during unwinding, in the background), or cancellation (in the
    /// background).
    ///
    /// # Errors
    ///
    /// The errors of [`lock`](Self::lock) (the body does not run), converted into `E`;
    /// the body's own error (the lock was released); and [`LockError::Lost`] when the
    /// lock was lost before it was released (the body ran, its output is dropped:
    /// treat its effects as unprotected).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits leaves no hold behind; dropping it while
    /// `body` runs drops `body` and releases the lock in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// # async fn charge(_order: u64) -> Result<u64, distlock::LockError> { Ok(0) }
    /// // The body's value is returned once the lock is released.
    /// let total = locks
    ///     .with_lock("order:42", |held| async move {
    ///         println!("holding `{}`", held.name());
    ///         Ok::<_, distlock::LockError>(40 + 2)
    ///     })
    ///     .await?;
    /// assert_eq!(total, 42);
    ///
    /// // A body that can fail: one `?` for the lock's errors and the body's.
    /// let receipt = locks.with_lock("order:42", |_| charge(42)).await?;
    /// # let _ = receipt;
    /// # Ok(())
    /// # }
    /// ```
    #[track_caller]
    pub fn with_lock<F, Fut, T, E>(
        &self,
        name: impl AsRef<[u8]>,
        body: F,
    ) -> impl Future<Output = Result<T, E>>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        // Made here, not in the future: the holder's site is the caller's line.
        with_guard(self.lock(name), body)
    }

    /// Shuts the client down, for a process that stops (a redeploy, Ctrl-C): from
    /// now on every acquisition of this client (and of its clones) fails with
    /// [`LockError::ClientShutDown`], and so does every acquisition or re-entry
    /// already under way (the shutdown waits for their answers, and gives back at
    /// once what they were granted: no guard is handed out after it returned);
    /// every hold its guards still have is given back
    /// (re-entries included, sent at one moment so that they share script runs);
    /// those guards are told ([`LockGuard::lost`](crate::LockGuard::lost) fires,
    /// [`lost_reason`](crate::LockGuard::lost_reason) is
    /// [`LostReason::ShutDown`](crate::LostReason::ShutDown)) and send nothing more;
    /// and the releases of guards dropped just before are waited for. A hold whose
    /// release waits out a minimum hold time
    /// ([`LockGuard::unlock_after_holding`](crate::LockGuard::unlock_after_holding),
    /// the macro's `hold_at_least`) is not given back but left to its lease, extended
    /// once to cover the rest of the minimum, so that a redeploy right after a job
    /// does not let another instance run it again early
    /// ([`ShutdownReport::kept_for_minimum`]). The report
    /// says how many holds were given back and which locks could not be (they stay
    /// held until their leases end). Without it, a process that returns from `main`
    /// with locks held leaves them held for their whole lease (30 s by default) and
    /// only logs a warning naming them.
    ///
    /// It takes a few round trips; when Redis does not answer, at most about four
    /// response timeouts for the acquisitions under way, and as much again for the
    /// releases ([`ShutdownReport::still_in_flight`] counts the acquisitions it
    /// stopped waiting for).
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, new acquisitions are refused already; the releases sent
    /// finish in the background, and the holds not yet given back stay held until
    /// their leases end.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // At the end of `main`, or when a signal says the process must stop:
    /// let report = locks.shutdown().await;
    /// if !report.is_complete() {
    ///     eprintln!("left held until their leases end: {:?}", report.not_given_back());
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn shutdown(&self) -> ShutdownReport {
        release::shutdown(&self.inner).await
    }

    /// Whether the current call chain holds the lock `name` (of any kind) through
    /// this client, and does not know it lost: what Redisson calls
    /// `isHeldByCurrentThread()`, for the async call chain instead of the thread.
    /// Answered from the chain's [`LockContext`], with no round trip; the lock is
    /// held there exactly when `lock(name)` here would re-enter it: inside the body
    /// of [`with_lock`](Self::with_lock), of [`LockGuard::scope`](crate::LockGuard::scope),
    /// of an annotated function, or of a task given the context with
    /// [`LockContext::scope`]. A guard alone does not set the context, so right after
    /// `let guard = locks.lock(name).await?` it is `false` until `guard.scope(..)`.
    ///
    /// The name is looked up in this client's namespace: a chain that holds `name`
    /// through another client (another namespace, or another server) does not hold
    /// it here. An invalid name is held by nobody: `false`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// assert!(!locks.is_held_by_current_chain("order:42"));
    /// locks
    ///     .with_lock("order:42", |_| {
    ///         let locks = locks.clone();
    ///         async move {
    ///             // Deep in the body, without the guard passed down.
    ///             assert!(locks.is_held_by_current_chain("order:42"));
    ///             assert!(!locks.is_held_by_current_chain("order:43"));
    ///             Ok(())
    ///         }
    ///     })
    ///     .await
    /// # }
    /// ```
    pub fn is_held_by_current_chain(&self, name: impl AsRef<[u8]>) -> bool {
        let Ok(keys) = self.inner.keys(name.as_ref()) else {
            return false;
        };
        LockContext::current()
            .find_any(self.inner.id, &keys.lock)
            .is_some_and(|held| !held.is_lost())
    }

    /// Reads the state of the lock `name` without changing it. One round trip.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`]; [`LockError::KeyConflict`] when a key of the lock
    /// holds another type; [`LockError::QuorumNotReached`] on Redlock when too few
    /// nodes answer; [`LockError::PermissionDenied`]; [`LockError::Redis`].
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
    /// let info = locks.inspect("order:42").await?;
    /// if info.held {
    ///     println!(
    ///         "held at depth {}, lease left {:?}, token {:?}",
    ///         info.hold_count, info.lease_remaining, info.fencing_token
    ///     );
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn inspect(&self, name: impl AsRef<[u8]>) -> Result<LockInfo, LockError> {
        let keys = self.inner.keys(name.as_ref())?;
        self.inner.ops.read(&keys).await.map(LockInfo::from)
    }

    /// Deletes the lock `name` whoever holds it, and wakes its waiters. For operators:
    /// the holder is told at its next renewal (its guard reports the loss). Returns
    /// whether a lock was deleted.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`]; [`LockError::KeyConflict`] (nothing is deleted);
    /// [`LockError::PermissionDenied`]; [`LockError::Redis`].
    ///
    /// # Cancel safety
    ///
    /// The request may still be applied after the future is dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// // An operator breaks a lock left by a stuck holder.
    /// if locks.force_unlock("order:42").await? {
    ///     println!("deleted `order:42`; its holder is told at its next renewal");
    /// } else {
    ///     println!("`order:42` was free");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<bool, LockError> {
        self.inner
            .check_open(|| String::from_utf8_lossy(name.as_ref()).into_owned())?;
        let keys = self.inner.keys(name.as_ref())?;
        let scripts = self.inner.scripts.clone();
        let publish = self.inner.backend.publish_command();
        let replies = self
            .inner
            .backend
            .each(|mut conn| {
                let (scripts, keys) = (scripts.clone(), keys.clone());
                async move {
                    let reply: i64 = scripts
                        .force_release
                        .invoke(&ForceRelease {
                            lock: &keys.lock,
                            publish,
                        })
                        .invoke_async(&mut conn)
                        .await?;
                    ForceReleaseReply::decode(reply)
                        .ok_or_else(|| unexpected_reply("force_release.lua", &[reply]))
                }
            })
            .await;
        match redlock::force_release(replies)? {
            ForceVote::Done { deleted } => {
                if deleted {
                    self.inner.ops.force_unlocked(&keys.name);
                }
                Ok(deleted)
            }
            ForceVote::Conflict => Err(LockError::KeyConflict {
                name: keys.display(),
            }),
        }
    }
}

/// [`LockClient::with_lock`] once its request is made: takes the lock, runs `body`
/// inside its scope, and releases it.
///
/// # Cancel safety
///
/// As [`LockClient::with_lock`].
async fn with_guard<F, Fut, T, E>(request: LockRequest, body: F) -> Result<T, E>
where
    F: FnOnce(HeldLock) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: From<LockError>,
{
    let guard = request.await?;
    let span = tracing::info_span!(
        "distlock.locked",
        lock.name = %guard.name(),
        lock.held_ms = tracing::field::Empty,
    );
    let start = std::time::Instant::now();
    let output = guard
        .scope(body(guard.held()))
        .instrument(span.clone())
        .await;
    span.record("lock.held_ms", start.elapsed().as_millis() as u64);
    guard.unlock().await?;
    output
}

impl From<LockView> for LockInfo {
    fn from(view: LockView) -> Self {
        let mut holders: Vec<Holder> = view
            .holders
            .iter()
            .map(|holder| Holder {
                mode: holder.mode,
                hold_count: holder.hold_count,
                lease_remaining: holder.lease_remaining,
                fencing_token: holder.fencing_token,
                info: holder.info.clone(),
            })
            .collect();
        // The writer first, then the longest leases.
        holders.sort_by_key(|holder| (holder.mode, std::cmp::Reverse(holder.lease_remaining)));
        Self {
            held: view.held,
            hold_count: view.hold_count,
            lease_remaining: view.lease_remaining,
            fencing_token: view.fencing_token,
            last_fencing_token: view.last_fencing_token,
            kind: view.kind,
            holders,
            waiting: view.waiting,
            listening: view.listening,
        }
    }
}

/// The client installed with [`LockClient::install_global`].
///
/// # Errors
///
/// [`LockError::NoGlobalClient`] when none was installed.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// // Code far from start-up, which installed the client with `install_global`.
/// async fn nightly_report() -> Result<(), distlock::LockError> {
///     let guard = distlock::global()?.lock("report:nightly").await?;
///     // ... write the report ...
///     guard.unlock().await
/// }
/// # nightly_report().await
/// # }
/// ```
pub fn global() -> Result<LockClient, LockError> {
    GLOBAL
        .get()
        .cloned()
        .ok_or(LockError::NoGlobalClient { function: None })
}

/// [`LockClient::install_global`] refused a client: another one is installed
/// already, and stays.
///
/// Its message: ``a global lock client is installed already, and stays: call
/// `install_global` once, at start-up, and pass any other client explicitly
/// (`client = ..` on `#[distributed_lock]`, or that client's own methods)``.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::LockClient;
///
/// let first = LockClient::builder().url("redis://127.0.0.1:6379").connect().await?;
/// let second = LockClient::builder().url("redis://127.0.0.1:6380").connect().await?;
/// if first.install_global().is_ok() {
///     let refused = second.install_global().expect_err("one global client");
///     // The refused client is still usable, passed explicitly.
///     let second = refused.into_client();
///     second.lock("backup:nightly").await?.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct InstallGlobalError {
    client: LockClient,
}

impl InstallGlobalError {
    /// The client that was refused, to be used explicitly.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(second: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let second = match second.install_global() {
    ///     Ok(installed) => installed,
    ///     Err(refused) => refused.into_client(),
    /// };
    /// second.lock("backup:nightly").await?.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn into_client(self) -> LockClient {
        self.client
    }
}

impl fmt::Display for InstallGlobalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a global lock client is installed already, and stays: call `install_global` once, \
             at start-up, and pass any other client explicitly (`client = ..` on \
             `#[distributed_lock]`, or that client's own methods)",
        )
    }
}

impl std::error::Error for InstallGlobalError {}
