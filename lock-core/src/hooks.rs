//! The fixed points where operator features see an acquisition: before a new one
//! (the lock-order checker may refuse it), while it waits (deadlock detection may
//! end the wait), how it ended (who holds a timed-out lock), and the [`Tag`] its
//! hold's events are counted in (`series.rs`).
//! The core calls these through [`Operator`], which `ops/` implements and the
//! builder installs in the client; the core never names `ops/` itself.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::context::LockContext;
use crate::error::LockError;
use crate::keys::LockKeys;
use crate::origin::Origin;
use crate::scripts::LockView;
use crate::series::Tag;

/// A future of the hooks, boxed: [`Operator`] is used as a trait object.
pub(crate) type HookFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reads what is stored at a lock (`inspect.lua`), for a hook that shows it.
pub(crate) type Read<'a> =
    &'a (dyn Fn(&'a Arc<LockKeys>) -> HookFuture<'a, Result<LockView, LockError>> + Send + Sync);

/// What a new acquisition shows the operator features before it asks Redis.
#[derive(Clone, Copy)]
pub(crate) struct NewAcquisition<'a> {
    /// The client (`Inner::id`) whose holds of the chain count.
    pub(crate) client: u64,
    /// The call chain: the locks it holds.
    pub(crate) context: &'a LockContext,
    pub(crate) keys: &'a LockKeys,
    pub(crate) origin: &'a Origin,
}

/// The operator features of one client, at the core's fixed points.
pub(crate) trait Operator: Send + Sync + fmt::Debug {
    /// Before a new acquisition (not a re-entry): `Err` refuses it (a strict
    /// lock-order checker's inversion).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: what it records is advice, recorded again by the next
    /// acquisition that makes it.
    fn before_new<'a>(&'a self, new: NewAcquisition<'a>) -> HookFuture<'a, Result<(), LockError>>;

    /// A watch over a new acquisition's wait, begun at `start` by the chain of
    /// `context` through client `client`, after `after` (the request's own
    /// threshold, else the client's); `None` when nothing watches it.
    fn watch(
        &self,
        client: u64,
        context: &LockContext,
        after: Option<Duration>,
        start: Instant,
    ) -> Option<Box<dyn Watch>>;

    /// A new acquisition of (one of) `keys` ended in `err`: the error its caller
    /// gets, with what the operator features add (who holds a timed-out lock, read
    /// with `read`).
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    fn ended<'a>(
        &'a self,
        err: LockError,
        keys: &'a [Arc<LockKeys>],
        read: Read<'a>,
    ) -> HookFuture<'a, LockError>;

    /// The series of the lock of `keys`, asked for at `origin`.
    fn series(&self, keys: &LockKeys, origin: &Origin) -> Tag;

    /// One renewal batch took `took`, round trip.
    fn renewal_round_trip(&self, took: Duration);

    /// An operator's `force_unlock` deleted the lock `name`.
    fn force_unlocked(&self, name: &[u8]);
}

/// A watch over one wait (deadlock detection), looked at from time to time while
/// the waiter sleeps; dropping it ends what it published.
pub(crate) trait Watch: Send {
    /// When to look next.
    fn next(&self) -> Instant;

    /// Looks, for the waiter of `keys` asked for at `origin` (`new_id` names the
    /// wait, once): `Err` ends the wait (a deadlock it is the victim of);
    /// `Ok(false)` when there is nothing to watch (never look again).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: what it published stays until the watch is dropped (or
    /// expires).
    fn look<'a>(
        &'a mut self,
        keys: &'a LockKeys,
        origin: &'a Origin,
        new_id: &'a (dyn Fn() -> Arc<str> + Send + Sync),
    ) -> HookFuture<'a, Result<bool, LockError>>;
}
