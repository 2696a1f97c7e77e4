//! The deadlock knot: a scenario, not an enumerated world. The explorer does not
//! model deadlock detection (its clients look for none: what decides a victim is
//! when each member looks, on timers, not the order of deliveries), so `--seeded`
//! runs this one knot on real time, straight to the server, and checks its
//! invariant: one victim per knot, never none.
//!
//! The knot of issue 34 (4): a writer chain `A` holds `y` and `w` and waits for the
//! write hold of `x`, which two reader chains `B` and `C` hold (one lock each); both
//! readers wait for `y`. Two cycles share `A`, so `A` alone frees everyone. The
//! readers' thresholds differ: `A` and `B` look after 300 ms, `C` after 2 s. Under
//! the rule before issue 34 (a chain announced its wait only at its own threshold),
//! `A` and `B` saw the knot `{A, B}` without `C` and `B` gave up; `C` was then the
//! victim of `{A, C}`: two victims.
//!
//! `--world deadlock` runs it without a fault; `--seeded` with
//! `deadlock-wait-announced-at-threshold`.

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{LockClient, LockError};
use distlock_testkit::RedisServer;
use tokio::sync::Barrier;

/// The scenario's name, as `--world` and the seeded faults name it.
pub(crate) const NAME: &str = "deadlock";

/// What it is, for the report's `bound`.
pub(crate) const WHAT: &str =
    "A: holds y, w, write-waits x (300 ms); B: reads x, waits y (300 ms); C: reads x, waits y (2 s)";

/// Each chain's `deadlock_check_after`: the writer's, then the readers'.
const THRESHOLDS_MS: [u64; 3] = [300, 300, 2_000];

/// How long each chain waits: far past the README's bound for the knot
/// (`T + 2 × max(t, 0.4 s) + 0.4 s`, 3.2 s), so that a knot left unbroken shows as
/// a wait that timed out, not as a hang.
const WAIT: Duration = Duration::from_secs(15);

/// The number of the next run's namespace, for the whole process.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// How one run of the knot ended.
pub(crate) struct Ending {
    /// Each chain's label and how its wait ended (`Ok`, or the error's message).
    pub(crate) outcomes: Vec<(&'static str, Result<(), String>)>,
    /// The labels of the chains whose wait ended with `LockError::Deadlock`.
    pub(crate) victims: Vec<&'static str>,
    pub(crate) secs: f64,
}

impl Ending {
    /// The invariant: exactly one victim, and every other chain granted.
    pub(crate) fn violation(&self) -> Option<String> {
        let others_granted = self
            .outcomes
            .iter()
            .filter(|(label, _)| !self.victims.contains(label))
            .all(|(_, outcome)| outcome.is_ok());
        if self.victims.len() == 1 && others_granted {
            return None;
        }
        Some(format!(
            "the knot had {} victim(s) {:?} where one frees everyone (thresholds {THRESHOLDS_MS:?} ms): {:?}",
            self.victims.len(),
            self.victims,
            self.outcomes
        ))
    }
}

/// Runs the knot once against `server`, on keys of its own.
pub(crate) fn run(server: &RedisServer) -> Result<Ending, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let namespace = format!(
        "exdl{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let url = server.url();
    runtime.block_on(knot(url, namespace))
}

/// The three chains on one client; how each wait ended.
async fn knot(url: String, namespace: String) -> Result<Ending, String> {
    let locks = LockClient::builder()
        .url(url.as_str())
        .namespace(namespace.as_str())
        .service("explore-deadlock")
        .deadlock_check_after(Some(Duration::from_millis(THRESHOLDS_MS[0])))
        .connect()
        .await
        .map_err(|e| format!("connect to {url}: {e}"))?;
    let started = Instant::now();
    let barrier = Arc::new(Barrier::new(3));
    let ms = Duration::from_millis;
    let writer = tokio::spawn(writer(locks.clone(), barrier.clone(), ms(THRESHOLDS_MS[0])));
    let b = tokio::spawn(reader(locks.clone(), barrier.clone(), ms(THRESHOLDS_MS[1])));
    let c = tokio::spawn(reader(locks.clone(), barrier, ms(THRESHOLDS_MS[2])));
    let mut outcomes = Vec::new();
    for (label, handle) in [("A", writer), ("B", b), ("C", c)] {
        let ended = handle
            .await
            .map_err(|e| format!("{label} panicked: {e}"))??;
        outcomes.push((label, ended));
    }
    let secs = started.elapsed().as_secs_f64();
    let _ = locks.shutdown().await;
    let victims = outcomes
        .iter()
        .filter(|(_, ended)| matches!(ended, Err(Waited::Deadlock)))
        .map(|(label, _)| *label)
        .collect();
    let outcomes = outcomes
        .into_iter()
        .map(|(label, ended)| (label, ended.map_err(|e| e.to_string())))
        .collect();
    Ok(Ending {
        outcomes,
        victims,
        secs,
    })
}

/// How a chain's wait in the knot failed.
#[derive(Debug)]
enum Waited {
    /// It was a victim: `LockError::Deadlock`.
    Deadlock,
    /// Any other error.
    Other(String),
}

impl std::fmt::Display for Waited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waited::Deadlock => f.write_str("Deadlock"),
            Waited::Other(err) => f.write_str(err),
        }
    }
}

fn waited(result: Result<(), LockError>) -> Result<(), Waited> {
    match result {
        Ok(()) => Ok(()),
        Err(LockError::Deadlock { .. }) => Err(Waited::Deadlock),
        Err(err) => Err(Waited::Other(err.to_string())),
    }
}

/// `A`: holds `y` and `w`, then waits for the write hold of `x`. `Err` when it
/// could not set up its holds (no knot to check).
async fn writer(
    locks: LockClient,
    barrier: Arc<Barrier>,
    after: Duration,
) -> Result<Result<(), Waited>, String> {
    let y = locks.lock("y").await.map_err(|e| format!("A: y: {e}"))?;
    let w = y
        .scope(locks.lock("w").into_future())
        .await
        .map_err(|e| format!("A: w: {e}"))?;
    barrier.wait().await;
    let request = locks.write_lock("x").wait(WAIT).deadlock_check_after(after);
    let result = y.scope(w.scope(request.into_future())).await;
    let ended = match result {
        Ok(x) => x.unlock().await,
        Err(err) => Err(err),
    };
    w.unlock().await.map_err(|e| format!("A: w: {e}"))?;
    y.unlock().await.map_err(|e| format!("A: y: {e}"))?;
    Ok(waited(ended))
}

/// `B` or `C`: holds a read hold of `x`, then waits for `y`.
async fn reader(
    locks: LockClient,
    barrier: Arc<Barrier>,
    after: Duration,
) -> Result<Result<(), Waited>, String> {
    let x = locks
        .read_lock("x")
        .await
        .map_err(|e| format!("a reader: x: {e}"))?;
    barrier.wait().await;
    let request = locks.lock("y").wait(WAIT).deadlock_check_after(after);
    let result = x.scope(request.into_future()).await;
    let ended = match result {
        Ok(y) => y.unlock().await,
        Err(err) => Err(err),
    };
    x.unlock().await.map_err(|e| format!("a reader: x: {e}"))?;
    Ok(waited(ended))
}
