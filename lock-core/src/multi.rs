//! Many names at once ([`LockClient::lock_all`](crate::LockClient::lock_all)): all
//! or nothing, one guard for the set.
//!
//! A set is a set of plain locks: each name is the lock that [`lock`] takes, with
//! its own hold, lease and watchdog renewal, so a set and a plain acquisition of one
//! of its names exclude each other. The names are taken in one canonical order (by
//! encoded key), so two callers that list the same names in different orders
//! never hold one each while waiting for the other's: whoever has the first name
//! goes on to the next. A name the chain holds already is re-entered, as `lock`
//! re-enters it. When a name cannot be had (its wait ran out, an error), the names
//! taken before it are given back before the error is returned; dropping the
//! future gives them back in the background. The guard gives every name back
//! together (on one endpoint, in one run of the release script).
//!
//! [`lock`]: crate::LockClient::lock

use std::sync::Arc;

use tokio::time::Instant;

use crate::acquire::{acquire, Options};
use crate::context::LockContext;
use crate::detach::join_all;
use crate::error::LockError;
use crate::guard::{LockGuard, MultiLockGuard};
use crate::inner::Inner;
use crate::keys::LockKeys;

/// The most names one [`lock_all`](crate::LockClient::lock_all) takes.
pub const MAX_LOCK_ALL: usize = 256;

/// The keys of `names` in the canonical order (by encoded key), each once.
pub(crate) fn canonical(mut keys: Vec<Arc<LockKeys>>) -> Result<Vec<Arc<LockKeys>>, LockError> {
    keys.sort_by(|a, b| a.lock.cmp(&b.lock));
    keys.dedup_by(|a, b| a.lock == b.lock);
    if keys.is_empty() {
        return Err(LockError::InvalidName {
            reason: "lock_all was given no names; give it every name to take together, such \
                     as the SKUs of a cart"
                .into(),
        });
    }
    if keys.len() > MAX_LOCK_ALL {
        return Err(LockError::InvalidName {
            reason: format!(
                "lock_all was given {} names, over the limit of {MAX_LOCK_ALL}; lock a \
                 coarser resource (the cart, the warehouse) instead of every item",
                keys.len()
            ),
        });
    }
    Ok(keys)
}

/// Takes every lock of `keys` (in canonical order already) for the current call
/// chain, within one wait for the whole set; gives back what it took when one
/// cannot be had.
pub(crate) async fn acquire_all(
    inner: Arc<Inner>,
    keys: Result<Vec<Arc<LockKeys>>, LockError>,
    options: Options,
) -> Result<MultiLockGuard, LockError> {
    let keys = keys?;
    let start = Instant::now();
    let wait = options.wait.unwrap_or(inner.config.default_wait);
    let deadline = start.checked_add(wait).ok_or_else(|| {
        LockError::invalid_option(
            "wait",
            format!("{wait:?} is too long to wait (the deadline overflows); use a shorter wait"),
        )
    })?;
    let outer = LockContext::current();
    // Dropped with the future: each guard taken so far is released in the
    // background.
    let mut guards: Vec<LockGuard> = Vec::with_capacity(keys.len());
    for keys in keys {
        let left = deadline.saturating_duration_since(Instant::now());
        let options = Options {
            wait: Some(left),
            ..options
        };
        // Inside the scope of the names taken so far: a name listed twice, or held
        // by the chain already, is re-entered.
        let context = guards
            .last()
            .map_or_else(|| outer.clone(), LockGuard::context);
        let taken = context
            .scope(acquire(inner.clone(), Ok(keys), options))
            .await;
        match taken {
            Ok(guard) => guards.push(guard),
            Err(err) => {
                give_back(guards).await;
                return Err(err);
            }
        }
    }
    Ok(MultiLockGuard::new(guards))
}

/// Gives back the guards of a set that could not be completed, all at once.
async fn give_back(guards: Vec<LockGuard>) {
    let releases = guards.into_iter().map(LockGuard::unlock);
    for result in join_all(releases).await {
        if let Err(err) = result {
            tracing::debug!(error = %err, "distlock: giving back part of a set failed");
        }
    }
}
