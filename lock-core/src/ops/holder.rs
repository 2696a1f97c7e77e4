//! Holder info in errors: the holder named in a timeout, who holds the lock as its
//! client wrote it (`who.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::error::LockError;
use crate::hooks::Read;
use crate::keys::LockKeys;
use crate::kinds::HoldMode;

/// How long a timed-out waiter may take to read who holds the lock, for its error.
const HOLDER_LOOK: Duration = Duration::from_millis(250);

/// `err`, and when it is a [`LockError::Timeout`] on one of the locks of `keys`,
/// with the holder that its client wrote (one read; left out when it does not come
/// with `read` within [`HOLDER_LOOK`], or the holder wrote nothing): the writer or exclusive
/// holder first.
///
/// # Cancel safety
///
/// Read-only: dropping the future changes nothing.
pub(super) async fn name_the_holder<'a>(
    mut err: LockError,
    keys: &'a [Arc<LockKeys>],
    read: Read<'a>,
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
    if let Ok(Ok(view)) = tokio::time::timeout(HOLDER_LOOK, read(keys)).await {
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
