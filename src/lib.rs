//! distlock: a reentrant distributed lock for async Rust on Redis.
//!
//! A lock is a Redis hash `owner -> hold count` with a lease, driven by Lua scripts.
//! distlock gives you:
//!
//! - **Identity by call chain.** A lock belongs to the async call chain that took it,
//!   not to an OS thread. Code running inside a lock's scope re-enters it (the hold
//!   count in Redis goes up and down); concurrent branches (`join!`, `select!`) and
//!   spawned tasks are other holders and exclude each other. See [`LockContext`].
//! - **Event-driven waiting.** Waiters sleep until a pub/sub message says the lock
//!   was released (capped by the holder's remaining lease), instead of polling.
//! - **One watchdog** per client renews every lease in batches; a guard reports a
//!   lost lease through [`LockGuard::is_lost`] and [`LockGuard::lost`].
//! - **Cancel safety.** Dropping a lock future at any await point never leaves a hold
//!   that nobody owns; dropping a guard releases it in the background.
//! - **Fencing tokens** (opt-in) that only ever grow, for resources that must refuse
//!   a stale holder's writes.
//!
//! # A tour
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock::{LockClient, LockError};
//!
//! # async fn tour() -> Result<(), LockError> {
//! let locks = LockClient::builder()
//!     .url("redis://127.0.0.1:6379")
//!     .connect()
//!     .await?;
//!
//! // Take a lock, waiting up to 2 s, and give it back.
//! let guard = locks.lock("report:daily").wait(Duration::from_secs(2)).await?;
//! guard.unlock().await?;
//!
//! // Fail fast when busy.
//! if let Some(guard) = locks.try_lock("report:daily").await? {
//!     guard.unlock().await?;
//! }
//!
//! // Run a body under a lock; nested acquires of the same name re-enter.
//! let total = locks
//!     .with_lock("order:42", |held| {
//!         let locks = locks.clone();
//!         async move {
//!             assert_eq!(held.hold_count(), 1);
//!             let inner = locks.lock("order:42").await?; // re-entry: no wait
//!             assert_eq!(inner.hold_count(), 2);
//!             inner.unlock().await?;
//!             Ok::<_, LockError>(42)
//!         }
//!     })
//!     .await??;
//! assert_eq!(total, 42);
//!
//! // What does Redis say?
//! let info = locks.inspect("order:42").await?;
//! assert!(!info.held);
//! # Ok(()) }
//! ```
//!
//! # Guarantees and limits
//!
//! - A lock is held while its lease lasts. The watchdog renews watchdog leases
//!   (default 30 s) every third of the lease; if it finds the lock gone, or cannot
//!   reach Redis before the lease ends, the guard is marked lost and
//!   [`LockGuard::unlock`] returns [`LockError::Lost`].
//! - A lock on a single Redis server is as durable as that server: a restart without
//!   persistence, or a failover to a replica that had not received the lock, frees
//!   it. Use fencing tokens for resources that must never see two writers.
//! - Outside any lock scope, each acquire is a new holder: two sequential
//!   `lock("a")` calls in plain code do not re-enter. Run nested code inside
//!   [`LockGuard::scope`] or [`LockClient::with_lock`].
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

pub use distlock_core::{
    current_lock, global, HeldLock, LockClient, LockClientBuilder, LockContext, LockError,
    LockFuture, LockGuard, LockInfo, LockRequest, TryLockRequest, MAX_LEASE, MAX_NAMESPACE_LEN,
    MAX_NAME_LEN, MIN_LEASE, MIN_WATCHDOG_LEASE,
};

/// The attribute macro (default feature `macros`).
#[cfg(feature = "macros")]
pub use distlock_macros::distributed_lock;

/// Items used by code that `#[distributed_lock]` generates. Not a public API.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
