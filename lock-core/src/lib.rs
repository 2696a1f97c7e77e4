//! The runtime of distlock: a reentrant distributed lock for async Rust on Redis.
//!
//! Use it through the facade crate `distlock`, which re-exports everything here.
//!
//! - [`LockClient`] connects to Redis and hands out locks: [`LockClient::lock`],
//!   [`LockClient::try_lock`], [`LockClient::with_lock`]; and the other kinds:
//!   [`LockClient::read_lock`] / [`LockClient::write_lock`], [`LockClient::fair_lock`],
//!   [`LockClient::semaphore`], [`LockClient::lock_all`].
//! - A lock belongs to the async call chain that took it ([`LockContext`]): nested
//!   acquires of the same name re-enter, concurrent branches exclude each other.
//! - Waiters wake on a Redis pub/sub message when the lock is released, not by
//!   polling; one release wakes one waiter, and a client's waiters for a name are
//!   served first come, first served. A release hands the lock straight to the
//!   next waiter of its own client (one round trip) when no other client waits.
//! - One watchdog task per client renews every lease; a [`LockGuard`] tells you when
//!   its lock was lost.
//! - Dropping any future at any await point leaves no hold behind.
//! - Deadlocks: a lock-order checker warns of two locks taken in opposite orders
//!   ([`LockOrderCheck`]), and a waiter in a cycle of chains across processes is
//!   told so ([`LockError::Deadlock`]) and the cycle broken.
//!
//! # Where things live
//!
//! Each file imports only from the rows above it (a file on one row may use the
//! files listed before it on that row):
//!
//! | row | file | owns |
//! | --- | --- | --- |
//! | 1 | `who.rs` | who holds a lock: what a client writes of each holder, and [`HolderInfo`] |
//! | 1 | `owner.rs` | owner ids and the numbering of their operations (exactly-once replay detection) |
//! | 1 | `faults.rs` | seeded faults for testing the tests (feature `fault-injection`) |
//! | 1 | `layout/kind.rs` | the kind table: each kind's script letter, `#kind` word, reply code, metric label and JSON word |
//! | 1 | `layout/keys.rs` | a lock's keys spelled once: the name escaped in the hash tag, `:fence`, `:freed:<owner>`, `:released`, and a key read back into its name |
//! | 1 | `layout/lua.rs` | the scripts of `lua/` and the function library made of them, as text (running them is `library.rs`'s) |
//! | 1 | `layout/args.rs` | hidden: every script's keys and arguments, one struct per request, encoded for the client and decoded for the tests |
//! | 1 | `library.rs` | running a script: `FCALL` of distlock's function library, `EVALSHA` where a server refuses functions |
//! | 1 | `origin.rs` | where a request was made: call site, class (label, or the name with digits folded), function |
//! | 1 | `kinds.rs` | [`LockKind`], [`HoldMode`]: the kinds a lock and a hold are, as read back from Redis |
//! | 1 | `sync.rs` | `locked`: a mutex's guard, poisoned or not |
//! | 1 | `series.rs` | what happens to a hold as operator features count it (metrics): `Series`, the hold's `Tag` |
//! | 2 | `error.rs` | [`LockError`]; the one classification of Redis errors (outcome unknown, transient, failover) |
//! | 2 | `scripts.rs` | the client's scripts (built from `layout/lua.rs`), and their replies decoded into types, once |
//! | 2 | `handoff.rs` | local hand-off: a waiter's offer, and what a release delivers to it (a grant gives its hold back unless a guard takes it) |
//! | 3 | `layout/mod.rs` | what distlock stores in Redis: the fields of a lock's hash, the release message, the function library, [`layout::StoredLock`] |
//! | 3 | `backend/` | `Backend` and `Conn` (commands), `SubConn` (pub/sub), hash slots; `link.rs` named connections and their lost/restored logs; `url.rs` URLs; `tls.rs` TLS (crypto provider, certificates); `dial.rs` the first connection (fail fast on a refusal); `sentinel.rs` Sentinel; `redlock.rs` the majority rules |
//! | 3 | `detach.rs` | `Detached` (a request finished in the background when its caller goes away), `spawn` |
//! | 3 | `lease.rs` | [`MIN_LEASE`], [`MAX_LEASE`], [`MIN_WATCHDOG_LEASE`], clock drift and validity |
//! | 4 | `keys.rs` | a lock name's Redis keys and channel; [`MAX_NAME_LEN`], [`MAX_NAMESPACE_LEN`] |
//! | 4 | `waiters.rs` | waiting: the queues of local waiters (one per release channel), woken by release messages |
//! | 5 | `subscriber.rs` | the subscriber connection: channels (un)subscribed for the waiters, release messages handed to their queues |
//! | 5 | `hold.rs` | a chain's hold of a lock and its state; [`HeldLock`]; `HoldTable`, the holds a client watches, found by id or by lock |
//! | 5 | `batch.rs` | group commit: the new acquisitions (or the releases) ready at the same moment, as one run of `acquire.lua` (`release.lua`) |
//! | 6 | `context.rs` | [`LockContext`]: identity that follows the async call chain; [`current_lock`] |
//! | 6 | `renew.rs` | one renewal round trip for a batch of holds: one run of `renew.lua` per 64 holds (on a cluster, per hash slot), what it found per hold (acknowledged or not), the Redlock write-back of a lock a node lost; `extend`, the same for one fixed lease ([`LockGuard::extend`]) |
//! | 7 | `ops/` | operator features, one `Operators` per client called at fixed points (before a new acquisition, a wait's deadlock watch, how it ended, the series of a lock): `order.rs` the lock-order checker ([`LockOrderCheck`]), `order_shared.rs` the graph a namespace shares, `deadlock.rs` and `watch.rs` distributed deadlock detection, `metrics.rs` (feature `metrics`), `holder.rs` what `inspect` reads and the holder named in a timeout |
//! | 8 | `watchdog.rs` | when to renew, and telling guards of a loss |
//! | 9 | `inner.rs` | `Inner`: one client's state, what every internal function takes (its operator features, `Operators`); `Settings`, the settings it runs with, made and checked by the builder and read by connecting |
//! | 10 | `minimum.rs` | a minimum hold time: a lease extended to cover it, and the holds a shutdown leaves held for it |
//! | 10 | `release.rs` | every give-back of a hold, one function per case |
//! | 11 | `guard.rs` | [`LockGuard`], [`MultiLockGuard`]; `unlock` and `Drop` call down into `release.rs` |
//! | 11 | `admin.rs` | hidden: helpers of the CLI (`masters_in_slots`) |
//! | 12 | `acquire/` | taking a lock: one wait loop for a name or a set (`lock_all`, [`MAX_LOCK_ALL`]), one place where a grant becomes a hold, re-entry; its own table in `acquire/mod.rs` |
//! | 13 | `health.rs` | the checks of [`LockClient::ping`] ([`HealthReport`], [`NodeHealth`]); the `distlock` tool lays the report out |
//! | 13 | `request.rs` | [`LockRequest`], [`LockFuture`], [`TryLockRequest`], [`LockAllRequest`] |
//! | 14 | `client.rs` | [`LockClient`], [`LockInfo`], [`global`] and [`InstallGlobalError`], `inspect`, `force_unlock`, `is_held_by_current_chain` |
//! | 15 | `connect.rs` | connecting, fed the client's checked `Settings`: one function per deployment, the scripts preloaded, the client's tasks started |
//! | 16 | `builder.rs` | [`LockClientBuilder`]: settings and their validation |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod acquire;
#[doc(hidden)]
pub mod admin;
mod backend;
mod batch;
mod builder;
mod client;
mod connect;
mod context;
mod detach;
mod error;
#[doc(hidden)]
pub mod faults;
mod guard;
mod handoff;
mod health;
mod hold;
mod inner;
mod keys;
mod kinds;
pub mod layout;
mod lease;
mod library;
mod minimum;
mod ops;
mod origin;
mod owner;
mod release;
mod renew;
mod request;
mod scripts;
mod series;
mod subscriber;
mod sync;
mod waiters;
mod watchdog;
mod who;

/// The `redis` crate (1.x) that distlock is built on: [`LockError::Redis`] and
/// [`LockError::Connect`] carry its [`RedisError`](redis::RedisError). Match on it
/// through this path, and no separate dependency on `redis` (nor a version that must
/// agree) is needed.
///
/// ```
/// # use distlock_core as distlock;
/// fn timed_out(err: &distlock::LockError) -> bool {
///     matches!(err, distlock::LockError::Redis(e) if e.is_timeout())
/// }
/// ```
pub use redis;

pub use acquire::MAX_LOCK_ALL;
pub use builder::LockClientBuilder;
pub use client::{global, Holder, InstallGlobalError, LockClient, LockInfo};
pub use context::{current_lock, LockContext};
pub use error::{LockError, LostReason};
pub use guard::{LockGuard, MultiLockGuard};
pub use health::{HealthReport, NodeHealth};
pub use hold::HeldLock;
pub use keys::{validate_namespace, MAX_NAMESPACE_LEN, MAX_NAME_LEN};
pub use kinds::{HoldMode, LockKind};
pub use lease::{MAX_LEASE, MIN_LEASE, MIN_WATCHDOG_LEASE};
pub use ops::order::LockOrderCheck;
pub use release::ShutdownReport;
pub use request::{
    LockAllRequest, LockFuture, LockRequest, Semaphore, TryLockRequest, MAX_PERMITS,
};
pub use who::{HolderInfo, MAX_SERVICE_LEN};
