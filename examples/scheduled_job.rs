//! A scheduled job that runs on one instance per period (ShedLock's
//! `lockAtLeastFor` in Java): every instance's timer calls the job, the first to
//! fire runs it, and the others, whose timers fire a little later, skip it.
//!
//! Two instances (two clients, as two processes would have) fire 200 ms apart; the
//! job takes 50 ms. Without a minimum hold time the lock is free again when the
//! second timer fires, and the job runs twice. With
//! `#[distributed_lock(key = "job:nightly-report", skip_if_held, hold_at_least = "1s")]`
//! the lock is kept for 1 s after the acquisition, and the second call returns
//! `Ok(None)`: skipped, no error. Then the same with the guard API (`try_lock`,
//! `unlock_after_holding`), and a redeploy: the first instance shuts down right
//! after the job, and the second still skips, because the shutdown leaves the lock
//! held for the rest of its minimum.
//!
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example scheduled_job`
//! (or `cargo xtask demo scheduled_job`; `REDIS_CLUSTER_URLS` for a Redis Cluster,
//! `REDIS_SENTINEL_URLS` for Sentinel). Its keys start with `distlock-example:`; it
//! exits with a non-zero status if the job runs more than once in a period.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};
use tokio::time::Instant;

mod common;
use common::Target;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The job's lock.
const JOB: &str = "job:nightly-report";
/// How much later the second instance's timer fires.
const STAGGER: Duration = Duration::from_millis(200);
/// The time between two runs of the timers.
const PERIOD: Duration = Duration::from_millis(1_500);
/// The minimum hold time, as `hold_at_least` says it.
const MINIMUM: Duration = Duration::from_secs(1);

/// Fails the example with `message` unless `condition` holds.
fn expect(condition: bool, message: &str) -> Result<(), Error> {
    if condition {
        Ok(())
    } else {
        Err(format!("unexpected: {message}").into())
    }
}

/// The job, as every instance's timer calls it: `Ok(Some(run))` when this instance
/// ran it, `Ok(None)` when another instance holds the lock.
#[distributed_lock(key = "job:nightly-report", client = locks, skip_if_held, hold_at_least = "1s")]
async fn nightly_report(
    locks: &LockClient,
    runs: &AtomicUsize,
) -> Result<Option<usize>, LockError> {
    tokio::time::sleep(Duration::from_millis(50)).await; // build the report
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

/// The same job without a minimum hold time: the lock is released when it ends.
#[distributed_lock(key = "job:nightly-report", client = locks, skip_if_held)]
async fn report_without_minimum(
    locks: &LockClient,
    runs: &AtomicUsize,
) -> Result<Option<usize>, LockError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

/// What one instance's call returned, in words.
fn outcome(result: &Result<Option<usize>, LockError>) -> String {
    match result {
        Ok(Some(run)) => format!("ran the job (run {run})"),
        Ok(None) => "skipped: another instance has it".to_owned(),
        Err(error) => format!("failed: {error}"),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let target = Target::from_env();
    println!("a job that runs once per period, against {target}\n");
    let connect = |lease: Duration| {
        target
            .lock_client()
            .namespace("distlock-example")
            .default_lease(lease)
            .connect()
    };
    let a = connect(Duration::from_secs(2)).await?;
    let b = connect(Duration::from_secs(2)).await?;
    // A run of this example just before may have left the job's lock to its lease.
    a.force_unlock(JOB).await?;

    // 1. Without a minimum: the lock is free when B's timer fires, B runs it again.
    let runs = AtomicUsize::new(0);
    let fired = Instant::now();
    let ran_a = report_without_minimum(&a, &runs).await;
    tokio::time::sleep_until(fired + STAGGER).await;
    let ran_b = report_without_minimum(&b, &runs).await;
    println!("1. without hold_at_least, timers 200 ms apart, a 50 ms job:");
    println!(
        "   instance A {}\n   instance B {}",
        outcome(&ran_a),
        outcome(&ran_b)
    );
    expect(
        runs.load(Ordering::SeqCst) == 2,
        "the job did not run twice",
    )?;
    println!("   the job ran twice in one period\n");

    // 2. With skip_if_held and hold_at_least = "1s": once per period.
    println!("2. with skip_if_held, hold_at_least = \"1s\", three periods of 1.5 s:");
    let runs = AtomicUsize::new(0);
    let start = Instant::now();
    for period in 0..3u32 {
        let fires = start + PERIOD * period;
        let (ran_a, ran_b) = tokio::join!(
            async {
                tokio::time::sleep_until(fires).await;
                nightly_report(&a, &runs).await
            },
            async {
                tokio::time::sleep_until(fires + STAGGER).await;
                nightly_report(&b, &runs).await
            },
        );
        println!(
            "   period {period}: A {}; B {}",
            outcome(&ran_a),
            outcome(&ran_b)
        );
        expect(matches!(ran_b, Ok(None)), "B did not skip")?;
        expect(
            runs.load(Ordering::SeqCst) == period as usize + 1,
            "the job did not run exactly once in the period",
        )?;
    }
    println!("   once per period, and B's skips were no errors\n");

    // 3. The guard API: try_lock (None when held elsewhere), unlock_after_holding.
    tokio::time::sleep_until(start + PERIOD * 3).await;
    let guard = a.try_lock(JOB).await?.ok_or("the lock is still held")?;
    tokio::time::sleep(Duration::from_millis(50)).await; // the job
    guard.unlock_after_holding(MINIMUM).await?; // returns at once
    tokio::time::sleep(STAGGER).await;
    let second = b.try_lock(JOB).await?;
    println!(
        "3. guard API: A ran the job, unlock_after_holding(1s) returned at once; B's \
         try_lock 200 ms later: {}",
        if second.is_some() { "took it" } else { "None" }
    );
    expect(second.is_none(), "B took the lock within the minimum")?;
    let waited = Instant::now();
    let guard = b.lock(JOB).wait(Duration::from_secs(5)).await?;
    println!(
        "   B's lock() was granted {:?} later, once the minimum had passed\n",
        Duration::from_millis(waited.elapsed().as_millis() as u64)
    );
    guard.unlock().await?;

    // 4. A redeploy: A runs the job and shuts down at once. The shutdown does not
    //    give the lock back, it leaves it held for the rest of the minimum.
    let runs = AtomicUsize::new(0);
    let fired = Instant::now();
    let ran_a = nightly_report(&a, &runs).await;
    let report = a.shutdown().await;
    println!("4. a redeploy: A {} and shuts down", outcome(&ran_a));
    for (name, left) in report.kept_for_minimum() {
        println!(
            "   the shutdown left `{name}` held for the rest of its minimum ({:?})",
            Duration::from_millis(left.as_millis() as u64)
        );
    }
    expect(report.kept_for_minimum().len() == 1, "nothing was kept")?;
    tokio::time::sleep_until(fired + STAGGER).await;
    let ran_b = nightly_report(&b, &runs).await;
    println!("   instance B, 200 ms later: {}", outcome(&ran_b));
    expect(
        matches!(ran_b, Ok(None)),
        "B ran the job again after the redeploy",
    )?;
    b.shutdown().await;

    println!("\nscheduled job finished: the job ran once per period");
    Ok(())
}
