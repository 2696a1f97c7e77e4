//! A lock client that the comparing scenarios drive: distlock's, or the peer's
//! (`peer.rs`), each with its own commands and its own way of waiting.

use std::collections::HashMap;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::time::Duration;

use distlock::{LockClient, LockError};
use tokio::time::Instant;

use crate::error::BoxError;
use crate::server::{distlock_acquire_attempts, DISTLOCK_SCRIPT_COMMANDS};

/// A lock client the scenarios can drive.
pub(crate) trait Contender: Clone + Send + Sync + 'static {
    /// What an acquisition hands back, to give to [`Contender::release`].
    type Held: Send;
    /// Why an acquisition or release failed.
    type Error: Send + 'static;

    /// The commands this client's scripts run inside Redis: `INFO commandstats`
    /// counts them, but they cost no round trip.
    const SCRIPT_COMMANDS: &'static [&'static str];

    /// Takes `name`, waiting for it. `stop` is when the run ends; a waiter may go
    /// on past it, each client with its own bound.
    fn acquire(
        &self,
        name: &str,
        stop: Instant,
    ) -> impl Future<Output = Result<Self::Held, Self::Error>> + Send;

    /// Gives back what [`Contender::acquire`] took.
    fn release(&self, held: Self::Held) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The acquire attempts of a run (`acquisitions` of them succeeded), from the
    /// server's command counts before and after it.
    fn acquire_calls(
        before: &HashMap<String, u64>,
        after: &HashMap<String, u64>,
        acquisitions: u64,
    ) -> u64;
}

impl Contender for LockClient {
    type Held = distlock::LockGuard;
    type Error = LockError;

    const SCRIPT_COMMANDS: &'static [&'static str] = DISTLOCK_SCRIPT_COMMANDS;

    fn acquire(
        &self,
        name: &str,
        _stop: Instant,
    ) -> impl Future<Output = Result<Self::Held, LockError>> + Send {
        self.lock(name).wait(Duration::from_secs(10)).into_future()
    }

    fn release(&self, guard: Self::Held) -> impl Future<Output = Result<(), LockError>> + Send {
        guard.unlock()
    }

    fn acquire_calls(
        before: &HashMap<String, u64>,
        after: &HashMap<String, u64>,
        acquisitions: u64,
    ) -> u64 {
        distlock_acquire_attempts(before, after, acquisitions)
    }
}

/// A distlock client on `url`, at its defaults.
pub(crate) async fn connect_distlock(url: &str) -> Result<LockClient, BoxError> {
    Ok(LockClient::builder().url(url).connect().await?)
}

/// Takes and gives back `count` locks on fresh names under `prefix`: connections
/// opened, scripts loaded, before anything is measured.
pub(crate) async fn warm<C>(contender: &C, prefix: &str, count: usize) -> Result<(), BoxError>
where
    C: Contender,
    BoxError: From<C::Error>,
{
    let stop = Instant::now() + Duration::from_secs(30);
    for i in 0..count {
        let held = contender
            .acquire(&format!("{prefix}:warm:{i}"), stop)
            .await?;
        contender.release(held).await?;
    }
    Ok(())
}

/// Who is measured: distlock, or rslock with its default retries or with the given
/// retry delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Subject {
    Distlock,
    #[cfg(feature = "rslock")]
    Rslock(Option<Duration>),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Distlock => f.write_str("distlock"),
            #[cfg(feature = "rslock")]
            Subject::Rslock(None) => f.write_str("rslock, defaults"),
            #[cfg(feature = "rslock")]
            Subject::Rslock(Some(delay)) => write!(f, "rslock, {delay:?} retry"),
        }
    }
}

/// The subjects in the order of run `run` (0-based): distlock first in odd runs
/// (1, 3, ...), the peer first in even ones.
pub(crate) fn in_turn(subjects: &[Subject], run: usize) -> Vec<Subject> {
    let mut ordered = subjects.to_vec();
    if run % 2 == 1 {
        ordered.reverse();
    }
    ordered
}
