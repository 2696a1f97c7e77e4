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
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::{
    acquire, check_order, kind_conflict, name_the_holder, settle_options, sleep_hint, Mode,
    Options, QUEUE_LOOK, TRANSIENT_PAUSE,
};
use crate::backend::slot;
use crate::context::LockContext;
use crate::detach::{join_all, replay_until_known, spawn, Detached};
use crate::error::{outcome_unknown, LockError, LostReason};
use crate::guard::{LockGuard, MultiLockGuard};
use crate::hold::{HeldLock, Hold, HoldState};
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::lease::validity;
use crate::origin::Origin;
use crate::owner::{Op, Owner};
use crate::release;
use crate::scripts::{unexpected_reply, AcquireAllReply};
use crate::subscriber::{Place, Turn};

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
    if let Some(first) = keys.first() {
        inner.check_open(|| first.display())?;
    }
    let outer = LockContext::current();
    // The set against the locks the chain holds, once: within the set, the
    // canonical order makes no edge.
    for keys in &keys {
        if outer.find(inner.id, keys).is_none() {
            check_order(&inner, &outer, keys, &origin).await?;
        }
    }
    let origin = Origin {
        in_set: true,
        ..origin
    };
    if keys.len() > 1 && in_one_run(&inner, &keys) {
        return match acquire_at_once(inner.clone(), &keys, options, origin).await {
            Err(err) => Err(name_the_holder(&inner, &keys, err).await),
            ok => ok,
        };
    }
    // Every option checked before the first name is asked for.
    let (_, deadline) = settle_options(&inner, options, Instant::now())?;
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
/// or nothing and a wait for the release of the name that was busy.
async fn acquire_at_once(
    inner: Arc<Inner>,
    keys: &[Arc<LockKeys>],
    options: Options,
    origin: Origin,
) -> Result<MultiLockGuard, LockError> {
    let start = Instant::now();
    let (mode, deadline) = settle_options(&inner, options, start)?;
    let context = LockContext::current();
    let who: Arc<str> = inner.who.who(&origin.site_text()).into();
    let held: Vec<Option<HeldLock>> = keys
        .iter()
        .map(|keys| context.find(inner.id, keys).cloned())
        .collect();
    for held in held.iter().flatten() {
        let hold = &held.hold;
        if options.fencing == Some(true) && hold.fence.is_none() {
            return Err(LockError::invalid_option(
                "fencing",
                format!(
                    "fencing was asked for on a set that re-enters lock `{}`, whose outermost \
                     acquisition took no fencing token; ask for fencing on the outermost \
                     acquisition",
                    hold.display()
                ),
            ));
        }
        if hold.is_lost() {
            return Err(hold.lost_error());
        }
    }
    let mut owner = inner.next_owner();
    // The place in the queue of the name the set waits for, and that name.
    let mut waiting: Option<(usize, Place)> = None;
    let mut busy: Option<usize> = None;
    loop {
        if let Some((_, place)) = &waiting {
            // A wake-up before this attempt is used up by it: its reply reflects the
            // release.
            place.rearm();
        }
        let sent = Instant::now();
        let set = SetInvoke::new(&inner, keys, &owner, &held, mode, &who);
        let answer = if deadline > sent {
            tokio::time::timeout_at(deadline, set.run()).await
        } else {
            Ok(set.run().await)
        };
        let reply = match answer {
            Ok(Ok(reply)) => reply,
            Err(_) => return Err(ran_out(keys, busy, start)),
            Ok(Err(err)) if err.may_pass() && Instant::now() + TRANSIENT_PAUSE < deadline => {
                tracing::debug!(error = %err, "distlock: a set's acquire failed; retrying within the wait");
                owner = inner.next_owner();
                tokio::time::sleep(TRANSIENT_PAUSE).await;
                continue;
            }
            Ok(Err(err)) => return Err(err),
        };
        match reply {
            AcquireAllReply::Acquired(grants) => {
                if Instant::now() >= sent + validity(mode.lease) {
                    // Too late to count on: give every hold back and ask again.
                    let set = SetInvoke::new(&inner, keys, &owner, &held, mode, &who);
                    spawn(async move { set.give_back().await });
                    if Instant::now() + TRANSIENT_PAUSE >= deadline {
                        return Err(ran_out(keys, busy, start));
                    }
                    owner = inner.next_owner();
                    tokio::time::sleep(TRANSIENT_PAUSE).await;
                    continue;
                }
                if let Some((_, mut place)) = waiting {
                    // It used the wake-up it had: nothing to hand on.
                    place.settle(false);
                }
                return Ok(granted(
                    &inner, keys, &owner, &held, mode, sent, &grants, &context, &origin,
                ));
            }
            AcquireAllReply::Busy { index, pttl_ms } => {
                busy = Some(index);
                let now = Instant::now();
                if now >= deadline {
                    return Err(ran_out(keys, busy, start));
                }
                let place = match waiting.take() {
                    Some((at, place)) if at == index => place,
                    _ => inner.subscriber.enqueue(keys[index].channel(), false),
                };
                if !place.is_listening() {
                    if let Ok(Err(err)) = tokio::time::timeout_at(deadline, place.listen()).await {
                        tracing::debug!(error = %err, "distlock: could not subscribe; waiting for the lease instead");
                    }
                }
                let look_at = Instant::now() + sleep_hint(pttl_ms);
                if place.turn(Some(look_at), deadline, QUEUE_LOOK).await == Turn::OutOfTime {
                    return Err(ran_out(keys, busy, start));
                }
                waiting = Some((index, place));
            }
            AcquireAllReply::NotHeld { index } => {
                let Some(held) = &held[index] else {
                    return Err(unexpected_reply("acquire_all.lua", &[-1]).into());
                };
                held.hold.mark_lost(
                    LostReason::NotHeld,
                    "a set's re-entry found the lock no longer held by its owner",
                );
                return Err(held.hold.lost_error());
            }
            AcquireAllReply::Conflict { index } => {
                return Err(LockError::KeyConflict {
                    name: keys[index].display(),
                })
            }
            AcquireAllReply::OtherKind { index, held_as } => {
                return Err(kind_conflict(&keys[index], held_as));
            }
        }
    }
}

/// The wait of a set ran out: a timeout on the name last found busy; if none was,
/// Redis did not answer in time.
fn ran_out(keys: &[Arc<LockKeys>], busy: Option<usize>, start: Instant) -> LockError {
    let waited = start.elapsed();
    match busy {
        Some(index) => LockError::timeout(keys[index].display(), waited),
        None => LockError::Redis(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "no timely answer from Redis for a set of {} locks within the wait of {waited:?}, \
                 and no other owner was seen holding one",
                keys.len()
            ),
        ))),
    }
}

/// The guard of a set granted by the attempt sent at `sent`: a new hold of `owner`
/// for each name taken, one more guard of the chain's hold for each re-entered.
#[allow(clippy::too_many_arguments)]
fn granted(
    inner: &Arc<Inner>,
    keys: &[Arc<LockKeys>],
    owner: &Arc<Owner>,
    held: &[Option<HeldLock>],
    mode: Mode,
    sent: Instant,
    grants: &[(u64, u64)],
    context: &LockContext,
    origin: &Origin,
) -> MultiLockGuard {
    let mut guards: Vec<LockGuard> = Vec::with_capacity(keys.len());
    for ((keys, held), &(count, fence)) in keys.iter().zip(held).zip(grants) {
        let scope = guards
            .last()
            .map_or_else(|| context.clone(), LockGuard::context);
        let held = match held {
            Some(held) => {
                let lease = reentry_lease(held, mode);
                crate::metrics::reentered(&held.hold.tag);
                inner
                    .watchdog
                    .guard_added(&held.hold, sent + validity(lease));
                HeldLock {
                    hold: held.hold.clone(),
                    count,
                }
            }
            None => {
                let hold = Arc::new(Hold::new(
                    inner.next_hold_id(),
                    inner.id,
                    keys.clone(),
                    owner.clone(),
                    (fence > 0).then_some(fence),
                    origin.clone(),
                    mode.max_hold,
                    crate::metrics::Tag::new(&inner.backend, keys, origin),
                    HoldState {
                        guards: 1,
                        deadline: sent + validity(mode.lease),
                        watchdog: mode.watchdog,
                        lease: mode.lease,
                        next_renew: sent + mode.lease / 3,
                        renew_until: mode.max_hold.map(|max_hold| sent + max_hold),
                        closed: false,
                    },
                ));
                crate::metrics::acquired_in_set(&hold.tag);
                inner.watchdog.register(hold.clone());
                HeldLock { hold, count }
            }
        };
        guards.push(LockGuard::new(inner, held, &scope));
    }
    MultiLockGuard::new(guards)
}

/// The lease a re-entry asks for: the hold's own under a watchdog, else the set's.
fn reentry_lease(held: &HeldLock, mode: Mode) -> Duration {
    if mode.watchdog {
        held.hold.state().lease
    } else {
        mode.lease
    }
}

/// One name of a set's attempt: under which owner, as which of its operations.
#[derive(Clone)]
struct NameOp {
    keys: Arc<LockKeys>,
    owner: Arc<Owner>,
    op: Arc<Op>,
    lease_ms: u64,
    reentry: bool,
}

/// Everything needed to send (or replay) one run of `acquire_all.lua`.
#[derive(Clone)]
struct SetInvoke {
    inner: Arc<Inner>,
    names: Arc<[NameOp]>,
    fencing: bool,
    /// What the client writes of the holder of each lock it creates (`who.rs`).
    who: Arc<str>,
}

impl SetInvoke {
    fn new(
        inner: &Arc<Inner>,
        keys: &[Arc<LockKeys>],
        owner: &Arc<Owner>,
        held: &[Option<HeldLock>],
        mode: Mode,
        who: &Arc<str>,
    ) -> Self {
        let names = keys
            .iter()
            .zip(held)
            .map(|(keys, held)| {
                let (owner, lease, reentry) = match held {
                    Some(held) => (held.hold.owner.clone(), reentry_lease(held, mode), true),
                    None => (owner.clone(), mode.lease, false),
                };
                NameOp {
                    keys: keys.clone(),
                    op: owner.op(),
                    owner,
                    lease_ms: lease.as_millis() as u64,
                    reentry,
                }
            })
            .collect();
        Self {
            inner: inner.clone(),
            names,
            fencing: mode.fencing,
            who: who.clone(),
        }
    }

    /// Sends the attempt; if the caller drops the future mid-flight, it runs to the
    /// end in the background and every hold it took is given back; if the reply is
    /// lost, it is replayed in the background until its outcome is known, and every
    /// hold it took is given back.
    async fn run(self) -> Result<AcquireAllReply, LockError> {
        let abandoned = self.clone();
        let call = Detached::new(Box::pin(self.clone().send()), move |result| {
            Box::pin(abandoned.settle(result))
        });
        match call.await {
            Ok(reply) => Ok(reply),
            Err(err) => {
                if outcome_unknown(&err) {
                    spawn(self.resolve());
                }
                Err(err.into())
            }
        }
    }

    async fn send(self) -> redis::RedisResult<AcquireAllReply> {
        // After a replaced server, every hold there is checked first (`link.rs`).
        self.inner.links.settled().await;
        let mut conn = self.inner.backend.first();
        let mut invocation = self.inner.scripts.acquire_all.prepare_invoke();
        for name in self.names.iter() {
            invocation
                .key(&name.keys.lock)
                .key(name.keys.fence())
                .key(name.keys.freed_for(name.owner.id()));
        }
        invocation.arg(u8::from(self.fencing));
        for name in self.names.iter() {
            invocation
                .arg(name.owner.id())
                .arg(name.lease_ms)
                .arg(name.op.seq())
                .arg(name.op.floor())
                .arg(u8::from(name.reentry));
        }
        invocation.arg(&*self.who);
        let reply: Vec<i64> = invocation.invoke_async(&mut conn).await?;
        AcquireAllReply::decode(&reply, self.names.len())
            .ok_or_else(|| unexpected_reply("acquire_all.lua", &reply))
    }

    /// Gives back what an abandoned attempt took, if it took anything.
    async fn settle(self, result: redis::RedisResult<AcquireAllReply>) {
        match result {
            Ok(AcquireAllReply::Acquired(_)) => self.give_back().await,
            Ok(_) => {}
            Err(err) if outcome_unknown(&err) => self.resolve().await,
            Err(_) => {}
        }
    }

    /// Replays the attempt (a no-op if it was applied) until the outcome is known,
    /// then gives back every hold it took.
    async fn resolve(self) {
        let name = self
            .names
            .first()
            .map(|name| name.keys.display())
            .unwrap_or_default();
        let reply = replay_until_known(&name, "set acquire", || self.clone().send()).await;
        if let Some(AcquireAllReply::Acquired(_)) = reply {
            self.give_back().await;
        }
    }

    /// Gives back one hold of each name, all at once.
    async fn give_back(&self) {
        let inner = self.inner.clone();
        let releases = self.names.iter().cloned().map(move |name| {
            let inner = inner.clone();
            async move { release::give_back(&inner, &name.keys, &name.owner, name.lease_ms).await }
        });
        join_all(releases).await;
    }
}
