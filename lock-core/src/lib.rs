//! The runtime of distlock: a reentrant distributed lock for async Rust on Redis.
//!
//! Use it through the facade crate `distlock`, which re-exports everything here.
//!
//! - [`LockClient`] connects to Redis and hands out locks: [`LockClient::lock`],
//!   [`LockClient::try_lock`], [`LockClient::with_lock`].
//! - A lock belongs to the async call chain that took it ([`LockContext`]): nested
//!   acquires of the same name re-enter, concurrent branches exclude each other.
//! - Waiters wake on a Redis pub/sub message when the lock is released, not by
//!   polling; one release wakes one waiter, and a client's waiters for a name are
//!   served first come, first served.
//! - One watchdog task per client renews every lease; a [`LockGuard`] tells you when
//!   its lock was lost.
//! - Dropping any future at any await point leaves no hold behind.
#![warn(
    missing_docs,
    missing_debug_implementations,
    rust_2018_idioms,
    unreachable_pub
)]

mod acquire;
mod backend;
mod client;
mod context;
mod error;
#[doc(hidden)]
pub mod faults;
mod guard;
mod name;
mod scripts;
mod sentinel;
mod subscriber;
mod watchdog;

pub use acquire::{LockFuture, LockRequest, TryLockRequest};
pub use client::{
    global, LockClient, LockClientBuilder, LockInfo, MAX_LEASE, MIN_LEASE, MIN_WATCHDOG_LEASE,
};
pub use context::{current_lock, LockContext};
pub use error::LockError;
pub use guard::{HeldLock, LockGuard};
pub use name::{MAX_NAMESPACE_LEN, MAX_NAME_LEN};
