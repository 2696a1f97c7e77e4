//! Taking one name for the current call chain: a re-entry when the chain holds it
//! (`chain.rs`), else a new acquisition through the one wait loop (`wait.rs`),
//! inside the span `distlock.acquire`.

use std::sync::Arc;

use tokio::time::Instant;
use tracing::Instrument;

use super::chain::{reenter, Chain};
use super::grant::admit;
use super::options::{check_kind, fill_options, Options};
use super::wait::wait_for;
use super::wait::{Ask, Wait};
use crate::context::LockContext;
use crate::error::LockError;
use crate::guard::LockGuard;
use crate::handoff::Granted;
use crate::inner::Inner;
use crate::keys::LockKeys;
use crate::origin::Origin;
use crate::scripts::unexpected_reply;

/// Takes the lock of `keys` for the current call chain: re-enters it when the chain
/// holds it through this client, else acquires it, waiting as `options` say.
pub(crate) async fn acquire(
    inner: Arc<Inner>,
    keys: Result<Arc<LockKeys>, LockError>,
    options: Options,
    origin: Origin,
) -> Result<LockGuard, LockError> {
    let keys = keys?;
    let _attempt = inner.start_attempt(|| keys.display())?;
    let start = Instant::now();
    let (mut policy, deadline) = fill_options(&inner, options, start)?;
    check_kind(&inner, &keys, options, &mut policy)?;
    let context = LockContext::current();
    let span = tracing::info_span!(
        "distlock.acquire",
        lock.name = %keys.display(),
        lock.outcome = tracing::field::Empty,
        lock.waited_ms = tracing::field::Empty,
        lock.hold_count = tracing::field::Empty,
    );
    async move {
        let chain = Chain::find(&context, &inner, &keys);
        let reentry = matches!(chain, Chain::Holds(_));
        let result = match chain {
            Chain::Holds(held) => {
                let fencing_asked = options.fencing == Some(true);
                reenter(&inner, held, &context, policy, fencing_asked).await
            }
            Chain::HoldsRead => Err(LockError::UpgradeNotAllowed {
                name: keys.display(),
            }),
            // Each `Wait` goes into `acquire_new` as it is made: a `Wait` kept in a
            // local of this block would take its room in this future beside
            // `acquire_new`'s copy (about 700 bytes more to every move).
            Chain::HoldsWrite(writer) => {
                let times = (start, deadline);
                let ask = Ask::One {
                    writer: Some(writer),
                };
                acquire_new(
                    Wait::new(&inner, keys.clone(), ask, policy, times, origin),
                    &context,
                )
                .await
            }
            Chain::Free => match before_new(&inner, &context, &keys, &origin).await {
                Ok(()) => {
                    let times = (start, deadline);
                    let ask = Ask::One { writer: None };
                    let after = options.deadlock_after;
                    acquire_new(
                        Wait::new(&inner, keys.clone(), ask, policy, times, origin)
                            .watched(inner.ops.watch(inner.id, &context, after, start)),
                        &context,
                    )
                    .await
                }
                Err(err) => Err(err),
            },
        };
        let result = match result {
            Ok(guard) => admit(&inner, vec![guard], &keys.display())
                .await
                .map(|mut guards| guards.remove(0)),
            Err(err) => Err(inner.ops.ended(err, std::slice::from_ref(&keys)).await),
        };
        let span = tracing::Span::current();
        span.record("lock.waited_ms", start.elapsed().as_millis() as u64);
        span.record("lock.outcome", outcome(&result, reentry));
        if let Ok(guard) = &result {
            span.record("lock.hold_count", guard.hold_count());
        }
        result
    }
    .instrument(span)
    .await
}

/// What an acquisition came to, as its span records it: `acquired`, `re-entered`,
/// `timed out`, `lost` (a re-entry of a lock lost meanwhile), `deadlock`, or
/// `error`.
fn outcome(result: &Result<LockGuard, LockError>, reentry: bool) -> &'static str {
    match result {
        Ok(_) if reentry => "re-entered",
        Ok(_) => "acquired",
        Err(err) if err.is_timeout() => "timed out",
        Err(err) if err.is_lost() => "lost",
        Err(LockError::Deadlock { .. }) => "deadlock",
        Err(_) => "error",
    }
}

/// A new acquisition of one name: the one wait loop, then the guard of the new
/// hold.
async fn acquire_new(mut wait: Wait<'_>, context: &LockContext) -> Result<LockGuard, LockError> {
    let grant = wait_for(&mut wait).await?;
    let Granted::One(count, fence) = grant.granted else {
        return Err(unexpected_reply("acquire.lua", &grant.granted).into());
    };
    let held = grant.new_hold(&wait.keys, (count, fence), Some(wait.start.elapsed()));
    Ok(LockGuard::new(wait.inner, held, context))
}

/// The operator features' look at a new acquisition of `keys` by the chain of
/// `context`, before it asks Redis (`Operators::before_new`): a chain that holds
/// nothing is not shown.
///
/// # Cancel safety
///
/// Safe to drop: what it records is advice, recorded again by the next
/// acquisition that makes it.
pub(super) async fn before_new(
    inner: &Inner,
    context: &LockContext,
    keys: &LockKeys,
    origin: &Origin,
) -> Result<(), LockError> {
    if context.is_empty() {
        return Ok(());
    }
    inner.ops.before_new(inner.id, context, keys, origin).await
}
