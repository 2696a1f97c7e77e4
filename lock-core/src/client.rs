//! The public client: [`LockClient`] hands out lock requests, inspects and
//! force-unlocks locks, and can be installed as the process's global client.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::backend::redlock::{self, ForceVote, InspectVote};
use crate::error::LockError;
use crate::hold::HeldLock;
use crate::inner::Inner;
use crate::multi::canonical;
use crate::request::{LockAllRequest, LockRequest, TryLockRequest};
use crate::scripts::{unexpected_reply, ForceReleaseReply, InspectReply, LockView};

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
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Whether some owner holds the lock.
    pub held: bool,
    /// The holder's hold count (its re-entry depth); 0 when free.
    pub hold_count: u64,
    /// How long the lease still runs; `None` when free, or when the key has no expiry.
    pub lease_remaining: Option<Duration>,
    /// The holder's fencing token, when it took one.
    pub fencing_token: Option<u64>,
    /// The last fencing token ever issued for this name; `None` when none was.
    pub last_fencing_token: Option<u64>,
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
    pub fn try_lock(&self, name: impl AsRef<[u8]>) -> TryLockRequest {
        TryLockRequest::new(self.lock(name))
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
    pub async fn with_lock<F, Fut, T, E>(&self, name: impl AsRef<[u8]>, body: F) -> Result<T, E>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<LockError>,
    {
        let guard = self.lock(name).await?;
        let output = guard.scope(body(guard.held())).await;
        guard.unlock().await?;
        output
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
        let scripts = self.inner.scripts.clone();
        let replies = self
            .inner
            .backend
            .each(|mut conn| {
                let (scripts, keys) = (scripts.clone(), keys.clone());
                async move {
                    let reply: Vec<i64> = scripts
                        .inspect
                        .key(&keys.lock)
                        .key(keys.fence())
                        .invoke_async(&mut conn)
                        .await?;
                    InspectReply::decode(&reply)
                        .ok_or_else(|| unexpected_reply("inspect.lua", &reply))
                }
            })
            .await;
        let quorum = self.inner.backend.quorum();
        match redlock::inspect(replies, quorum)? {
            InspectVote::View(view) => Ok(LockInfo::from(view)),
            InspectVote::Conflict => Err(LockError::KeyConflict {
                name: keys.display(),
            }),
            InspectVote::Short { got } => Err(LockError::QuorumNotReached {
                got,
                needed: quorum,
                held_elsewhere: 0,
            }),
        }
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
                        .key(&keys.lock)
                        .key(keys.channel())
                        .arg(publish)
                        .invoke_async(&mut conn)
                        .await?;
                    ForceReleaseReply::decode(reply)
                        .ok_or_else(|| unexpected_reply("force_release.lua", &[reply]))
                }
            })
            .await;
        match redlock::force_release(replies)? {
            ForceVote::Done { deleted } => Ok(deleted),
            ForceVote::Conflict => Err(LockError::KeyConflict {
                name: keys.display(),
            }),
        }
    }
}

impl From<LockView> for LockInfo {
    fn from(view: LockView) -> Self {
        Self {
            held: view.held,
            hold_count: view.hold_count,
            lease_remaining: view.lease_remaining,
            fencing_token: view.fencing_token,
            last_fencing_token: view.last_fencing_token,
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
