//! The one wait loop of a new acquisition, for one name or a set taken in one run:
//! attempt, then sleep until a release message or the holder's lease, then attempt
//! again, within the wait.
//!
//! A new acquisition of one name takes its place in the queue of this client's
//! waiters for the name before anything else (see `subscriber.rs`), and asks Redis
//! only when it is first: at once when nobody of this client asked before it, else
//! when its turn comes. So the tasks of one client get a lock in the order they
//! asked for it, and a task that has just released a lock does not take it back
//! from those that waited. A set takes a place only at the name it found busy, and
//! moves it when another name is busy.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::answer::{Answer, Granted};
use super::grant;
use super::waiter::{Ask, Wait, Won};
use crate::error::LockError;
use crate::handoff::{Delivery, Offer};
use crate::owner::Owner;
use crate::subscriber::Turn;

/// How long a waiter pauses after a transient failure before asking again.
pub(crate) const TRANSIENT_PAUSE: Duration = Duration::from_millis(100);

/// How long a waiter sleeps when the holder's lease has no expiry to cap it.
const UNKNOWN_LEASE_CAP: Duration = Duration::from_secs(1);

/// How long the waiters behind the first of a queue go, at most, without one of the
/// queue asking Redis: they never ask out of turn, so this bounds what a lost
/// release message costs them. A waiter that becomes first without ever having
/// asked looks within this long too.
pub(crate) const QUEUE_LOOK: Duration = Duration::from_secs(1);

impl Wait<'_> {
    /// Waits for this waiter's turn to ask Redis, within the wait: until a release
    /// message wakes it, or, once it is first, until the holder's lease may have
    /// ended (`pttl_ms`, from its last busy answer; `None` when it never asked).
    /// Before that, makes sure that release messages reach the queue (a release
    /// before the subscription was confirmed reached nobody: the first waiter then
    /// asks again). The error when the wait ended with the waiter still behind
    /// others.
    ///
    /// While it waits, one name's waiter offers itself (as `owner`) to this
    /// client's releases of the lock, which may hand it the lock (`handoff.rs`).
    pub(super) async fn wait_turn(
        &mut self,
        owner: &Arc<Owner>,
        pttl_ms: Option<i64>,
    ) -> Result<(), LockError> {
        let _waiter = match self.ask {
            Ask::One { .. } => Some(self.contended().waiter()),
            Ask::Set(_) => None,
        };
        self.take_place();
        let place = self
            .place
            .as_ref()
            .ok_or_else(|| self.busy(Instant::now()))?;
        if Instant::now() < self.deadline && !place.is_listening() {
            if let Ok(Err(err)) = tokio::time::timeout_at(self.deadline, place.listen()).await {
                tracing::debug!(error = %err, "distlock: could not subscribe; waiting for the lease instead");
            }
        }
        if self.hands_off {
            place.offer(Offer {
                owner: owner.clone(),
                lease_ms: self.policy.lease.as_millis() as u64,
                fencing: self.policy.fencing,
                who: self.who.clone(),
            });
        }
        let look_at = pttl_ms.map(|pttl_ms| Instant::now() + sleep_hint(pttl_ms));
        let span = tracing::trace_span!("distlock.wait", lock.pttl_ms = tracing::field::Empty);
        if let Some(pttl_ms) = pttl_ms {
            span.record("lock.pttl_ms", pttl_ms);
        }
        let turn = loop {
            let Some(place) = &self.place else {
                break Turn::OutOfTime;
            };
            let turn = place.turn(look_at, self.deadline, QUEUE_LOOK);
            let Some(check_at) = self.deadlock.as_ref().map(|watch| watch.next()) else {
                break turn.instrument(span).await;
            };
            // The turn is safe to drop: a wake-up it had stays in the place.
            tokio::select! {
                turn = turn.instrument(span.clone()) => break turn,
                () = tokio::time::sleep_until(check_at) => self.look_for_deadlock().await?,
            }
        };
        match turn {
            Turn::Ask => Ok(()),
            Turn::OutOfTime => Err(self.busy(Instant::now())),
        }
    }

    /// A set: a place in the queue of the name found busy (the one it has, if that
    /// name is the same as before; a new one else, see [`Wait::was_busy`]).
    fn take_place(&mut self) {
        if self.place.is_none() {
            self.place = Some(self.inner.subscriber.enqueue(self.keys.channel(), false));
        }
    }

    /// Looks for a deadlock (`hooks.rs`, `ops/watch.rs`); a chain that holds no lock of this
    /// client never looks again.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: records written stay until the wait's end deletes them (or
    /// they expire).
    async fn look_for_deadlock(&mut self) -> Result<(), LockError> {
        let Some(watch) = self.deadlock.as_mut() else {
            return Ok(());
        };
        let inner = self.inner;
        let new_id = move || inner.next_owner().shared_id();
        if !watch.look(&self.keys, &self.origin, &new_id).await? {
            self.deadlock = None;
        }
        Ok(())
    }
}

/// A new acquisition: attempts until granted, waiting for releases in between,
/// until the wait runs out. With tasks of this client ahead in the queue, it sends
/// nothing until its turn comes (a zero wait then fails at once, as busy).
pub(super) async fn wait_for(wait: &mut Wait<'_>) -> Result<Won, LockError> {
    let mut owner = wait.inner.next_owner();
    // The holder's lease as the last busy answer told it.
    let mut pttl = None;
    if !wait.is_first() {
        wait.wait_turn(&owner, pttl).await?;
    }
    loop {
        wait.inner.check_open(|| wait.keys.display())?;
        let Some((sent, answer)) = next_answer(wait, &mut owner, pttl).await? else {
            continue;
        };
        match answer {
            Answer::Granted(granted) => {
                // A grant counts only once the holds on a server found replaced
                // were checked (`Links::settled`), and then only if it is still
                // in time.
                wait.after_checks(&owner).await;
                if grant::in_time(wait.policy, sent) {
                    wait.won(&owner);
                    return Ok(Won {
                        owner,
                        sent,
                        granted,
                    });
                }
                // The reply came too late to count on (given back): pause before
                // asking again, rather than spin on a server that answers slower
                // than the lease, and ask under a fresh owner id, so that the next
                // attempt never overlaps the give-back of this one.
                wait.give_back_late(&owner);
                pause(wait, &mut owner, None).await?;
            }
            Answer::Busy { index, pttl_ms } => {
                wait.was_busy(index, &owner, sent);
                wait.short_of_quorum = None;
                wait.seen_held = true;
                pttl = Some(pttl_ms);
                wait_or_give_up(wait, &owner, pttl).await?;
            }
            Answer::NoQuorum {
                granted,
                held,
                retry_ms,
            } => {
                wait.was_busy(0, &owner, sent);
                wait.short_of_quorum = Some((granted, held));
                wait.seen_held |= held > 0;
                pttl = Some(retry_ms);
                wait_or_give_up(wait, &owner, pttl).await?;
            }
            Answer::HeldAlready { index, count } => {
                // Never added to (see `acquire.lua`): given back, and asked again
                // under an owner id that holds nothing.
                wait.give_back_held(&owner, index, count);
                owner = wait.inner.next_owner();
            }
            Answer::Refused(err) => return Err(err),
        }
    }
}

/// The next answer for the wait: what came of the release of this client that
/// claimed the waiter's offer, or of an attempt of `owner` (with the time it was
/// sent); `None` when there is none yet and the loop goes round again (a declined
/// hand-off, a transient failure retried under a new owner id).
async fn next_answer(
    wait: &mut Wait<'_>,
    owner: &mut Arc<Owner>,
    pttl: Option<i64>,
) -> Result<Option<(Instant, Answer)>, LockError> {
    if wait.offer_claimed() {
        // No attempt of our own until the release says what came of it.
        return match wait.handed().await? {
            Delivery::Granted(grant) => {
                let (fence, sent) = grant.accept();
                Ok(Some((sent, Answer::Granted(Granted::One(1, fence)))))
            }
            Delivery::Declined { ask: false } => {
                wait_or_give_up(wait, owner, pttl).await?;
                Ok(None)
            }
            Delivery::Declined { ask: true } => Ok(None),
            // Whatever the old owner id may have been handed is given back by the
            // releaser: ask under a new one.
            Delivery::Unknown => {
                *owner = wait.inner.next_owner();
                Ok(None)
            }
        };
    }
    let sent = Instant::now();
    match wait.attempt(owner, sent).await {
        Ok(answer) => {
            wait.retried_after = None;
            Ok(Some((sent, answer)))
        }
        // The wait ended during an attempt.
        Err(None) => Err(wait.ran_out()),
        Err(Some(err)) if err.may_pass() && Instant::now() + TRANSIENT_PAUSE < wait.deadline => {
            // A failover, a restart, a dropped connection, replicas resyncing: wait
            // and ask again, under a fresh owner id (the old one's attempt is
            // settled in the background).
            tracing::debug!(error = %err, lock.name = %wait.keys.display(), "distlock: acquire failed; retrying within the wait");
            pause(wait, owner, Some(err)).await?;
            Ok(None)
        }
        Err(Some(err)) => Err(err),
    }
}

/// Pauses for [`TRANSIENT_PAUSE`] before asking again under a fresh owner id,
/// after `failure` (one that may pass), or after a grant too late to count on:
/// the error instead when the wait ends before the pause would.
async fn pause(
    wait: &mut Wait<'_>,
    owner: &mut Arc<Owner>,
    failure: Option<LockError>,
) -> Result<(), LockError> {
    match failure {
        Some(err) => wait.retried_after = Some(err),
        None if Instant::now() + TRANSIENT_PAUSE >= wait.deadline => return Err(wait.ran_out()),
        None => {}
    }
    *owner = wait.inner.next_owner();
    tokio::time::sleep(TRANSIENT_PAUSE).await;
    Ok(())
}

/// How long to sleep at most for a holder whose lease has `pttl_ms` left: until it
/// ends; a lease about to end (0 ms left, as PTTL rounds) is worth a look in a
/// millisecond, not the cap for an unknown lease (no expiry, or no answer).
pub(crate) fn sleep_hint(pttl_ms: i64) -> Duration {
    u64::try_from(pttl_ms)
        .ok()
        .map_or(UNKNOWN_LEASE_CAP, |ms| Duration::from_millis(ms.max(1)))
}

/// After a busy answer (whose lease is `pttl_ms`), or a release that did not hand
/// the lock over: the error when the wait is over, else a wait for the turn to ask
/// again.
async fn wait_or_give_up(
    wait: &mut Wait<'_>,
    owner: &Arc<Owner>,
    pttl_ms: Option<i64>,
) -> Result<(), LockError> {
    let now = Instant::now();
    if now >= wait.deadline {
        return Err(wait.busy(now));
    }
    wait.wait_turn(owner, pttl_ms).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Observed: a holder's lease with 0 ms left (PTTL rounds down) was taken for an
    /// unknown lease, and the waiter slept a whole second past its end.
    #[test]
    fn a_lease_about_to_end_is_looked_at_again_at_once() {
        assert_eq!(sleep_hint(0), Duration::from_millis(1));
        assert_eq!(sleep_hint(250), Duration::from_millis(250));
        assert_eq!(sleep_hint(-1), UNKNOWN_LEASE_CAP, "no expiry");
    }
}
