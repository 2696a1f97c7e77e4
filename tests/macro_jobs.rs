//! `#[distributed_lock(.., skip_if_held, hold_at_least = "..")]`: a scheduled job
//! that runs on one instance per period. A call that finds the lock held elsewhere
//! returns `Ok(None)` without running the body (no error); the lock is kept for
//! the minimum after the acquisition, also across a shutdown right after the job.
#![cfg(feature = "macros")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{distributed_lock, LockClient, LockError};
use tokio::time::Instant;

/// How much later the second instance's timer fires.
const STAGGER: Duration = Duration::from_millis(200);
/// A loaded machine's slack on every bound.
const SLACK: Duration = Duration::from_millis(1_500);

/// The job: 50 ms of work, counted; under its lock for at least 1 s.
#[distributed_lock(key = "job:nightly-report", client = locks, skip_if_held, hold_at_least = "1s")]
async fn nightly_report(
    locks: &LockClient,
    runs: &AtomicUsize,
) -> Result<Option<usize>, LockError> {
    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(Some(run))
}

/// Two instances whose timers fire 200 ms apart: over four periods the body runs
/// exactly once per period (on the first instance), and the second instance's
/// call returns `Ok(None)` each time, with no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staggered_timers_run_the_body_once_per_period() {
    let server = support::server();
    let [a, b] = support::clients(&server).await;
    let runs = AtomicUsize::new(0);
    let period = Duration::from_millis(1_600);
    let start = Instant::now();
    for k in 0..4usize {
        let fires = start + period * k as u32;
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
        println!("period {k}: a {ran_a:?}, b {ran_b:?}");
        assert_eq!(
            ran_a.expect("no error"),
            Some(k + 1),
            "period {k}: a ran it"
        );
        assert_eq!(
            ran_b.expect("a skip is no error"),
            None,
            "period {k}: b skipped"
        );
        assert_eq!(runs.load(Ordering::SeqCst), k + 1, "period {k}: once");
    }
}

/// A shutdown right after the job (a rolling deploy) leaves the lock held for the
/// rest of its minimum: the second instance's call 200 ms later still skips, and
/// the lock ends with its lease, after the minimum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_right_after_the_job_keeps_the_next_instance_out() {
    let server = support::server();
    let lease = Duration::from_secs(2);
    let a = support::client_with_lease(&server, lease).await;
    let b = support::client(&server).await;
    let runs = AtomicUsize::new(0);
    let fired = Instant::now();
    assert_eq!(nightly_report(&a, &runs).await.expect("ran"), Some(1));
    let report = a.shutdown().await;
    println!("shutdown: {report:?}");

    tokio::time::sleep_until(fired + STAGGER).await;
    let again = nightly_report(&b, &runs).await.expect("no error");
    assert_eq!(again, None, "the job ran again after the shutdown");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(report.kept_for_minimum().len(), 1, "{report:?}");
    assert_eq!(report.given_back(), 0, "{report:?}");
    let free = support::eventually(lease + SLACK, || {
        support::redis_count(&server, "job:nightly-report") == 0
    })
    .await;
    let after = fired.elapsed();
    println!("free {after:?} after the timer fired");
    assert!(free, "the lock outlived its lease");
    assert!(
        after >= Duration::from_secs(1),
        "free before the minimum: {after:?}"
    );
    assert_eq!(nightly_report(&b, &runs).await.expect("ran"), Some(2));
}

/// `skip_if_held` skips only a lock held elsewhere: any other failure to take it
/// is the error, as without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_failures_are_errors_not_skips() {
    let server = support::server();
    let locks = support::client(&server).await;
    let runs = AtomicUsize::new(0);
    locks.shutdown().await;
    let result = nightly_report(&locks, &runs).await;
    assert!(
        result.as_ref().is_err_and(LockError::is_client_shut_down),
        "{result:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
