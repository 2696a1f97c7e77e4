//! What operator features add to an acquisition at its fixed points: the
//! lock-order check before a new one, and the holder named in a timeout.

use std::sync::Arc;
use std::time::Duration;

use crate::context::LockContext;
use crate::error::LockError;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::kinds::HoldMode;
use crate::order_shared;
use crate::origin::Origin;

/// How long a timed-out waiter may take to read who holds the lock, for its error.
const HOLDER_LOOK: Duration = Duration::from_millis(250);

/// `err`, and when it is a [`LockError::Timeout`] on one of the locks of `keys`,
/// with the holder that its client wrote (one read; left out when it does not come
/// within [`HOLDER_LOOK`], or the holder wrote nothing): the writer or exclusive
/// holder first.
///
/// # Cancel safety
///
/// Read-only: dropping the future changes nothing.
pub(crate) async fn name_the_holder(
    inner: &Arc<Inner>,
    keys: &[Arc<LockKeys>],
    mut err: LockError,
) -> LockError {
    let LockError::Timeout {
        name,
        holder: slot @ None,
        ..
    } = &mut err
    else {
        return err;
    };
    let Some(keys) = keys.iter().find(|keys| keys.display() == *name) else {
        return err;
    };
    if let Ok(Ok(view)) = tokio::time::timeout(HOLDER_LOOK, inner.view(keys)).await {
        *slot = view
            .holders
            .into_iter()
            .filter(|holder| holder.info.is_some())
            .max_by_key(|holder| matches!(holder.mode, HoldMode::Exclusive | HoldMode::Write))
            .and_then(|holder| holder.info)
            .map(Box::new);
    }
    err
}

/// Checks the order of a new acquisition of `keys`, asked for from `origin`,
/// against the other locks of this client that the chain holds (see `order.rs`),
/// and, when the client shares its lock order, records the edges new to it in the
/// namespace's graph (`order_shared.rs`).
///
/// # Cancel safety
///
/// Safe to drop: the local check is done at once, and the shared graph's answer
/// is only advice (see `order_shared::record`).
pub(crate) async fn check_order(
    inner: &Arc<Inner>,
    context: &LockContext,
    keys: &LockKeys,
    origin: &Origin,
) -> Result<(), LockError> {
    if origin.in_set || context.is_empty() || !inner.order.is_on() {
        return Ok(());
    }
    let holding = context
        .locks()
        .filter(|held| held.hold.client_id == inner.id && held.hold.keys.lock != keys.lock)
        .map(|held| {
            let hold = &held.hold;
            (hold.class(), hold.origin.site)
        });
    let new = inner
        .order
        .check(holding, &origin.class(&keys.name), origin.site)?;
    order_shared::record(inner, new).await
}
