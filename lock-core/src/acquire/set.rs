//! Many names at once ([`LockClient::lock_all`](crate::LockClient::lock_all)): all
//! or nothing, one guard for the set.
//!
//! A set is a set of plain locks: each name is the lock that [`lock`] takes, with
//! its own hold, lease and watchdog renewal, so a set and a plain acquisition of one
//! of its names exclude each other. A name the chain holds already is re-entered,
//! as `lock` re-enters it. The guard gives every name back together (on one
//! endpoint, in one run of the release script).
//!
//! - When every key of the set is on one endpoint (one server, Sentinel's master,
//!   one cluster slot), one run of `acquire_all.lua` takes every name or none: while
//!   one name is held elsewhere, the set holds nothing and waits for that name's
//!   release (or lease), then asks again for the whole set.
//! - Otherwise (keys in several cluster slots, Redlock, replica acknowledgements)
//!   the names are taken one by one in one canonical order (by encoded key), so two
//!   callers that list the same names in different orders never hold one each while
//!   waiting for the other's: whoever has the first name goes on to the next. When a
//!   name cannot be had (its wait ran out, an error), the names taken before it are
//!   given back before the error is returned; dropping the future gives them back
//!   in the background.
//!
//! [`lock`]: crate::LockClient::lock

use std::sync::Arc;

use tokio::time::Instant;

use super::grant::{admit, give_back};
use super::one::{acquire, before_new};
use super::options::{fill_options, Options};
use super::set_run::NameSet;
use super::wait;
use super::wait::{Ask, Wait};
use crate::backend::slot;
use crate::context::LockContext;
use crate::error::LockError;
use crate::guard::{LockGuard, MultiLockGuard};
use crate::handoff::Granted;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::origin::Origin;
use crate::scripts::unexpected_reply;

/// The most names one [`lock_all`](crate::LockClient::lock_all) takes.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// let skus: Vec<String> = (0..1000).map(|n| format!("inventory:{n}")).collect();
/// // Take a big cart in chunks of at most `MAX_LOCK_ALL` (each chunk in one order).
/// for chunk in skus.chunks(distlock::MAX_LOCK_ALL) {
///     let held = locks.lock_all(chunk).await?;
///     // ... reserve the chunk ...
///     held.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
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
            function: None,
        });
    }
    if keys.len() > MAX_LOCK_ALL {
        return Err(LockError::InvalidName {
            reason: format!(
                "lock_all was given {} names, over the limit of {MAX_LOCK_ALL}; lock a \
                 coarser resource (the cart, the warehouse) instead of every item",
                keys.len()
            ),
            function: None,
        });
    }
    Ok(keys)
}

/// Takes every lock of `keys` (in canonical order already) for the current call
/// chain, within one wait for the whole set; gives back what it took when one
/// cannot be had.
///
/// # Cancel safety
///
/// Safe to drop at any point: the guards taken so far are dropped (their locks
/// released in the background), and an attempt in flight finishes in the background
/// and gives back what it took.
pub(crate) async fn acquire_all(
    inner: Arc<Inner>,
    keys: Result<Vec<Arc<LockKeys>>, LockError>,
    options: Options,
    origin: Origin,
) -> Result<MultiLockGuard, LockError> {
    let keys = keys?;
    let name = keys.first().map(|keys| keys.display()).unwrap_or_default();
    let _attempt = match keys.is_empty() {
        false => Some(inner.start_attempt(|| name.clone())?),
        true => None,
    };
    let all = take_all(&inner, keys, options, origin, &name).await?;
    admit(&inner, all.into_guards(), &name)
        .await
        .map(MultiLockGuard::new)
}

/// Takes every lock of `keys` (the set named by its first, `name`), at once when
/// one run can, else name by name within one wait.
///
/// # Cancel safety
///
/// As [`acquire_all`].
async fn take_all(
    inner: &Arc<Inner>,
    keys: Vec<Arc<LockKeys>>,
    options: Options,
    origin: Origin,
    name: &str,
) -> Result<MultiLockGuard, LockError> {
    let outer = LockContext::current();
    // The set against the locks the chain holds, once: within the set, the
    // canonical order makes no edge.
    for keys in &keys {
        if outer.find(inner.id, keys).is_none() {
            before_new(inner, &outer, keys, &origin).await?;
        }
    }
    let origin = Origin {
        in_set: true,
        ..origin
    };
    if keys.len() > 1 && in_one_run(inner, &keys) {
        return match acquire_at_once(inner.clone(), &keys, options, origin).await {
            Err(err) => Err(inner.ops.ended(err, &keys).await),
            ok => ok,
        };
    }
    // Every option checked before the first name is asked for.
    let (_, deadline) = fill_options(inner, options, Instant::now())?;
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
            .scope(acquire(inner.clone(), Ok(keys), options, origin.clone()))
            .await;
        match taken {
            Ok(guard) => guards.push(guard),
            Err(err) => {
                give_back(inner, guards, name).await;
                return Err(err);
            }
        }
    }
    Ok(MultiLockGuard::new(guards))
}

/// Whether one script run can take every lock of `keys`: one endpoint, or one
/// cluster slot; not on Redlock (a majority per name) nor with replica
/// acknowledgements (one `WAIT` per acquisition).
fn in_one_run(inner: &Inner, keys: &[Arc<LockKeys>]) -> bool {
    if inner.backend.is_redlock() || inner.config.replicas.is_some() {
        return false;
    }
    if !inner.backend.first().is_cluster() {
        return true;
    }
    let first = slot(&keys[0].lock);
    keys.iter().all(|keys| slot(&keys.lock) == first)
}

/// Takes every lock of `keys` in one script run each time it asks: the whole set,
/// or nothing and a wait for the release of the name that was busy (the one wait
/// loop, `wait.rs`).
async fn acquire_at_once(
    inner: Arc<Inner>,
    keys: &[Arc<LockKeys>],
    options: Options,
    origin: Origin,
) -> Result<MultiLockGuard, LockError> {
    let start = Instant::now();
    let (policy, deadline) = fill_options(&inner, options, start)?;
    let context = LockContext::current();
    let set = NameSet::new(&inner, &context, keys, options.fencing == Some(true))?;
    let held = set.held.clone();
    let (first, times) = (set.keys(0), (start, deadline));
    let mut wait = Wait::new(&inner, first, Ask::Set(set), policy, times, origin);
    let grant = wait::wait_for(&mut wait).await?;
    let Granted::Set(grants) = &grant.granted else {
        return Err(unexpected_reply("acquire_all.lua", &grant.granted).into());
    };
    Ok(grant.set_guard(keys, &held, grants, &context))
}
