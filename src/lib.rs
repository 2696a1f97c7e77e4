//! A reentrant distributed lock for async Rust on Redis, with an attribute macro for
//! business functions.
//!
//! A lock is one Redis hash: each holder is a field, its owner id, whose value is
//! its hold count; the key's expiry is the lease. Lua scripts make every change.
//! Several processes (or tasks) that take the same lock name exclude each other;
//! code that already holds a lock takes it again without waiting. distlock gives you:
//!
//! - **Identity by call chain.** A lock belongs to the async call chain that took it,
//!   not to an OS thread. Code running inside a lock's scope re-enters it (the hold
//!   count in Redis goes up and down); concurrent branches (`join!`, `select!`) and
//!   spawned tasks are other holders and exclude each other. See [`LockContext`].
//! - **One watchdog** per client renews every lease in batches; a guard reports a
//!   lost lease through [`LockGuard::is_lost`] and [`LockGuard::lost`].
//! - **Cancel safety.** Dropping a lock future at any await point never leaves a hold
//!   that nobody owns; dropping a guard releases it in the background.
//! - **Event-driven waiting.** Waiters sleep until a pub/sub message says the lock
//!   was released (capped by the holder's remaining lease), instead of polling.
//! - **Fencing tokens** (opt-in) that only ever grow, for resources that must refuse
//!   a stale holder's writes.
//! - **[`#[distributed_lock]`](macro@distributed_lock)** runs an `async fn` under a
//!   lock named from its arguments, and releases it on every way out.
//!
//! distlock needs a Tokio runtime and Redis 7.0 or newer (or Valkey 7.2 or newer): one
//! server ([`LockClientBuilder::url`]), a master managed by Sentinel
//! ([`LockClientBuilder::sentinel`]), a Redis Cluster ([`LockClientBuilder::cluster`]),
//! or Redlock over independent masters ([`LockClientBuilder::redlock`]). The lock API
//! is the same on all of them.
//!
//! # A tour: the guard API
//!
//! Connect once and clone the [`LockClient`] wherever it is needed (it is an `Arc`).
//! [`LockClient::lock`] returns a [`LockRequest`]: set options on it, then await it
//! for a [`LockGuard`]; give the lock back with [`LockGuard::unlock`].
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock::{LockClient, LockError};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), LockError> {
//!     let locks = LockClient::builder()
//!         .url("redis://127.0.0.1:6379")
//!         .connect()
//!         .await?;
//!
//!     // Take a lock, waiting up to 2 s while another owner holds it, and give it back.
//!     let guard = locks.lock("report:daily").wait(Duration::from_secs(2)).await?;
//!     guard.unlock().await?;
//!
//!     // Fail fast when busy: `None` means another owner holds it.
//!     if let Some(guard) = locks.try_lock("report:daily").await? {
//!         guard.unlock().await?;
//!     }
//!
//!     // Run a body under a lock; nested acquires of the same name re-enter.
//!     let total = locks
//!         .with_lock("order:42", |held| {
//!             let locks = locks.clone();
//!             async move {
//!                 assert_eq!(held.hold_count(), 1);
//!                 let inner = locks.lock("order:42").await?; // re-entry: no wait
//!                 assert_eq!(inner.hold_count(), 2);
//!                 inner.unlock().await?;
//!                 Ok::<_, LockError>(42)
//!             }
//!         })
//!         .await?;
//!     assert_eq!(total, 42);
//!
//!     // A fixed lease, and work that stops as soon as the lock is lost.
//!     let guard = locks.lock("export:nightly").lease(Duration::from_secs(5)).await?;
//!     tokio::select! {
//!         () = tokio::time::sleep(Duration::from_secs(1)) => println!("export done"),
//!         () = guard.lost() => println!("lock lost: stop before committing"),
//!     }
//!     guard.unlock().await?;
//!
//!     // What does Redis say? And, for operators, break a lock.
//!     let info = locks.inspect("order:42").await?;
//!     assert!(!info.held);
//!     locks.force_unlock("order:42").await?;
//!     Ok(())
//! }
//! ```
//!
//! # A tour: the macro
//!
//! [`#[distributed_lock]`](macro@distributed_lock) takes the lock around the body of
//! an `async fn` that returns `Result<T, E>` with `E: From<LockError>`. The key is a
//! template of the arguments, checked at compile time. Without `client = ..`, the
//! client installed with [`LockClient::install_global`] is used.
//!
//! ```no_run
//! use distlock::{current_lock, distributed_lock, LockClient, LockError};
//!
//! pub struct Order {
//!     pub id: u64,
//!     /// Sorted, so that every order takes the SKU locks in the same order.
//!     pub skus: Vec<String>,
//! }
//!
//! /// Two calls for the same order never overlap, in any process.
//! #[distributed_lock(key = "order:{order.id}", wait = "5s")]
//! pub async fn place_order(order: &Order) -> Result<(), LockError> {
//!     for sku in &order.skus {
//!         reserve_stock(sku).await?; // takes `inventory:<sku>` inside `order:<id>`
//!     }
//!     confirm_order(order).await // takes `order:<id>` again: re-enters, no wait
//! }
//!
//! #[distributed_lock(key = "inventory:{sku}", wait = "5s")]
//! pub async fn reserve_stock(sku: &str) -> Result<(), LockError> {
//!     // ... read the stock, check it, write it back ...
//!     Ok(())
//! }
//!
//! #[distributed_lock(key = "order:{order.id}")]
//! pub async fn confirm_order(order: &Order) -> Result<(), LockError> {
//!     let held = current_lock().expect("inside the lock");
//!     assert_eq!(held.hold_count(), 2); // once by place_order, once here
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Once, at startup (a second client would be refused: `InstallGlobalError`).
//!     LockClient::builder()
//!         .url("redis://127.0.0.1:6379")
//!         .connect()
//!         .await?
//!         .install_global()?;
//!
//!     let order = Order { id: 42, skus: vec!["apple".into(), "bread".into()] };
//!     place_order(&order).await?;
//!     Ok(())
//! }
//! ```
//!
//! The repository's `examples/order_flow.rs` is the full version of this flow, with
//! stock in Redis and a consistency check; `cargo xtask demo` runs it.
//!
//! # Guarantees and limits
//!
//! - **Re-entry needs a scope.** The body of [`LockClient::with_lock`],
//!   [`LockGuard::scope`] and an annotated function runs inside the lock's
//!   [`LockContext`]. Outside any scope each acquire is a new holder: two sequential
//!   `lock("a")` calls in plain code do not re-enter, and a spawned task does not
//!   inherit its parent's locks (hand them over with [`LockContext::current`] and
//!   [`LockContext::scope`]).
//! - **A lock is held while its lease lasts.** The watchdog renews watchdog leases
//!   (default 30 s, [`LockClientBuilder::default_lease`]) every third of the lease;
//!   a fixed lease ([`LockRequest::lease`]) is not renewed. When a lease ends before
//!   release, or the watchdog finds the lock gone, the guard is marked lost:
//!   [`LockGuard::is_lost`] turns true, [`LockGuard::lost`] completes, and
//!   [`LockGuard::unlock`] returns [`LockError::Lost`].
//! - **A lock cannot stop a paused holder.** A holder that stalls past its lease
//!   (a GC pause, a stopped VM) may still write after another holder took the lock.
//!   Fencing tokens ([`LockRequest::fencing`], [`HeldLock::fencing_token`]) let the
//!   resource refuse such stale writes: it keeps the highest token it has seen and
//!   refuses lower ones.
//! - **Cancel safety.** Every async fn documents what dropping its future leaves
//!   behind. An acquire dropped at any point leaves no hold; a dropped guard is
//!   released in the background on the current Tokio runtime (outside a runtime its
//!   lease runs out).
//! - **A lock is as durable as its Redis.** A restart without persistence, a failover
//!   to a replica that had not received the lock, or eviction frees it; the holder is
//!   told at its next renewal. [`LockClientBuilder::replicas`] narrows the failover
//!   window without closing it. Use `maxmemory-policy noeviction` (distlock warns at
//!   connect otherwise), and fencing tokens where two writers must never overlap.
//! - **Round trips.** An uncontended lock and unlock are one script call each; a
//!   re-entry is one.
//!
//! The README covers each point in depth, with configuration, the macro reference,
//! troubleshooting for every [`LockError`] and the ACL rules a lock user needs.
//!
//! # Errors
//!
//! Every fallible operation on locks returns [`LockError`]. Its messages say what
//! happened and what to do; match on the variants, or use the `is_*` predicates such
//! as [`LockError::is_busy`] (held by another owner, on any backend) and
//! [`LockError::is_lost`]. The one other error is [`InstallGlobalError`]:
//! [`LockClient::install_global`] installs one client, once, and refuses another.
//!
//! # Feature flags
//!
//! - `macros` (default): the [`#[distributed_lock]`](macro@distributed_lock) macro.
//! - `metrics`: counters, histograms and gauges through the `metrics` facade crate
//!   (install any recorder, such as `metrics-exporter-prometheus`); labelled by lock
//!   template, never by name. Off: no dependency and no cost. The list is in the
//!   README, "Operating distlock".
//! - `fault-injection`: seeded faults for distlock's own tests. Never in production.
//!
//! # Testing code that takes locks
//!
//! The `distlock-testkit` crate starts throwaway `redis-server` processes on free
//! loopback ports and stops them on drop:
//!
//! ```no_run
//! # async fn test() -> Result<(), Box<dyn std::error::Error>> {
//! let server = distlock_testkit::RedisServer::start()?;
//! let locks = distlock::LockClient::builder().url(server.url()).connect().await?;
//! let guard = locks.lock("job:1").await?;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

// The README's Rust examples compile as doctests too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use distlock_core::{
    current_lock, global, validate_namespace, HealthReport, HeldLock, HoldMode, Holder, HolderInfo,
    InstallGlobalError, LockAllRequest, LockClient, LockClientBuilder, LockContext, LockError,
    LockFuture, LockGuard, LockInfo, LockKind, LockOrderCheck, LockRequest, LostReason,
    MultiLockGuard, NodeHealth, Semaphore, ShutdownReport, TryLockRequest, MAX_LEASE, MAX_LOCK_ALL,
    MAX_NAMESPACE_LEN, MAX_NAME_LEN, MAX_PERMITS, MAX_SERVICE_LEN, MIN_LEASE, MIN_WATCHDOG_LEASE,
};

/// The `redis` crate (1.x) that distlock is built on: [`LockError::Redis`] and
/// [`LockError::Connect`] carry its `RedisError`. Match on it through this path, with
/// no separate dependency on `redis` (nor a version that must agree).
pub use distlock_core::redis;

/// Helpers of the `distlock` CLI, not part of the lock API.
#[doc(hidden)]
pub use distlock_core::admin;

/// What distlock stores in Redis: the fields of a lock's hash (each holder's owner
/// id with its hold count, and `#`-prefixed facts), the keys beside it, and
/// [`layout::StoredLock`] to read a lock back from `HGETALL`.
pub use distlock_core::layout;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use distlock_macros::distributed_lock;

/// Items used by code that `#[distributed_lock]` generates. Not a public API.
#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
