//! Jobs that run once across instances, with the guard API: a minimum hold time
//! (`LockGuard::unlock_after_holding`) keeps an instance whose timer fires a little
//! later from running the job again, also across a shutdown right after the job;
//! and a leader (one instance holds a lock for as long as it lives) learns at once
//! that it lost the lock, and a killed one is replaced within one lease.

mod support;

use std::time::Duration;

use distlock::{LockClient, LostReason};
use tokio::time::Instant;

/// The minimum hold time of these tests.
const MINIMUM: Duration = Duration::from_secs(1);
/// How much later the second instance's timer fires.
const STAGGER: Duration = Duration::from_millis(200);
/// How long the job takes.
const JOB: Duration = Duration::from_millis(50);
/// A loaded machine's slack on every bound.
const SLACK: Duration = Duration::from_millis(1_500);

/// The lease the lock `name` has left in Redis (`PTTL`; negative when there is none).
fn pttl(server: &distlock_testkit::RedisServer, name: &str) -> i64 {
    server
        .cmd(&["PTTL", &support::lock_key(name)])
        .expect("PTTL")
        .trim()
        .parse()
        .expect("a number")
}

/// One instance's run of the job on its timer: try the lock once, run the job, and
/// release it no sooner than `minimum` after the acquisition. Whether it ran.
async fn run_once(locks: &LockClient, name: &str, minimum: Duration) -> bool {
    let Some(guard) = locks.try_lock(name).await.expect("try_lock") else {
        return false;
    };
    tokio::time::sleep(JOB).await;
    let called = Instant::now();
    guard
        .unlock_after_holding(minimum)
        .await
        .expect("unlock_after_holding");
    let returned = called.elapsed();
    println!("unlock_after_holding returned in {returned:?}");
    assert!(
        returned < MINIMUM / 2,
        "unlock_after_holding waited for the minimum: {returned:?}"
    );
    true
}

/// Two instances whose timers fire 200 ms apart, a job of 50 ms and a minimum hold
/// time of 1 s: over four periods, the job runs once per period, always on the
/// first instance; the second one's try finds the lock held each time. With the
/// lock released as soon as the job ends (a minimum of zero), the second instance
/// runs the job again in every period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staggered_timers_run_the_job_once_per_period() {
    let server = support::server();
    let [a, b] = support::clients(&server).await;
    let period = MINIMUM + Duration::from_millis(600);
    let start = Instant::now();
    for k in 0..4u32 {
        let fires = start + period * k;
        let (ran_a, ran_b) = tokio::join!(
            async {
                tokio::time::sleep_until(fires).await;
                run_once(&a, "job:report", MINIMUM).await
            },
            async {
                tokio::time::sleep_until(fires + STAGGER).await;
                run_once(&b, "job:report", MINIMUM).await
            },
        );
        println!("period {k}: a ran {ran_a}, b ran {ran_b}");
        assert!(ran_a, "period {k}: the first instance did not run the job");
        assert!(!ran_b, "period {k}: the job ran twice");
    }
    // The last hold ends at its minimum, not at its lease (30 s).
    let free = support::eventually(MINIMUM + SLACK, || {
        support::redis_count(&server, "job:report") == 0
    })
    .await;
    assert!(free, "the lock outlived its minimum");
}

/// The release waits for the minimum, counted from the acquisition: the lock is
/// held until then (its lease in Redis covers it) and free soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_is_held_until_the_minimum_then_released() {
    let server = support::server();
    let [a, b] = support::clients(&server).await;
    let guard = a.lock("job:minimum").await.expect("lock");
    let acquired = Instant::now();
    guard
        .unlock_after_holding(MINIMUM)
        .await
        .expect("unlock_after_holding");
    let left = pttl(&server, "job:minimum");
    assert!(left > 0, "the lock has no lease: {left}");
    assert!(
        b.try_lock("job:minimum").await.expect("try_lock").is_none(),
        "free before the minimum"
    );
    let taken = b
        .lock("job:minimum")
        .wait(MINIMUM + SLACK)
        .await
        .expect("the lock after the minimum");
    let after = acquired.elapsed();
    println!("taken by the other client {after:?} after the first acquisition");
    assert!(after >= MINIMUM, "released before its minimum: {after:?}");
    assert!(after < MINIMUM + SLACK, "released late: {after:?}");
    taken.unlock().await.expect("unlock");

    // Held for longer than the minimum already: released at once, as `unlock`.
    let guard = a.lock("job:minimum").await.expect("lock");
    tokio::time::sleep(Duration::from_millis(30)).await;
    guard
        .unlock_after_holding(Duration::from_millis(20))
        .await
        .expect("unlock_after_holding");
    assert_eq!(support::redis_count(&server, "job:minimum"), 0);
}

/// A shutdown right after the job (a redeploy) does not give back a lock whose
/// minimum is not over: it extends its lease to cover the rest, leaves it held
/// and reports it, so the second instance still skips. The lock then ends with
/// that lease: after the minimum, within one watchdog lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_during_the_minimum_leaves_the_lock_to_its_lease() {
    let server = support::server();
    let lease = Duration::from_secs(2);
    let a = support::client_with_lease(&server, lease).await;
    let b = support::client(&server).await;
    let acquired = Instant::now();
    assert!(run_once(&a, "job:deploy", MINIMUM).await);
    let report = a.shutdown().await;
    println!("shutdown: {report:?}");
    tokio::time::sleep_until(acquired + STAGGER).await;
    assert!(
        !run_once(&b, "job:deploy", MINIMUM).await,
        "the job ran again after the shutdown"
    );
    assert_eq!(report.given_back(), 0, "{report:?}");
    assert!(report.is_complete(), "{report:?}");
    let kept = report.kept_for_minimum();
    assert_eq!(kept.len(), 1, "{report:?}");
    assert_eq!(kept[0].0, "job:deploy");
    assert!(
        kept[0].1 > Duration::ZERO && kept[0].1 <= MINIMUM,
        "{kept:?}"
    );
    let left = pttl(&server, "job:deploy");
    let minimum_left = MINIMUM.saturating_sub(acquired.elapsed()).as_millis() as i64;
    assert!(
        left >= minimum_left,
        "the lease ({left} ms) does not cover the minimum ({minimum_left} ms)"
    );

    // Nothing gives it back: the lease ends it, after the minimum and no later
    // than one lease after the last renewal.
    let taken = b
        .lock("job:deploy")
        .wait(lease + SLACK)
        .await
        .expect("the lock once its lease ended");
    let after = acquired.elapsed();
    println!("taken {after:?} after the first acquisition");
    assert!(after >= MINIMUM, "free before the minimum: {after:?}");
    assert!(after < lease + SLACK, "held past one lease: {after:?}");
    taken.unlock().await.expect("unlock");
}

/// A leader learns at once that it lost leadership: `lost()` completes when an
/// operator force-unlocks the lock, within one renewal period (a third of the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learns_at_once_that_it_lost_the_lock() {
    let server = support::server();
    let lease = Duration::from_secs(3);
    let leader = support::client_with_lease(&server, lease).await;
    let operator = support::client(&server).await;
    let guard = leader.lock("leader:reports").await.expect("lock");
    let forced = Instant::now();
    assert!(operator
        .force_unlock("leader:reports")
        .await
        .expect("force_unlock"));
    tokio::time::timeout(lease / 3 + SLACK, guard.lost())
        .await
        .expect("the leader was not told it lost the lock");
    let told = forced.elapsed();
    println!("told of the loss after {told:?}");
    assert_eq!(guard.lost_reason(), Some(LostReason::NotHeld));
    assert!(guard.unlock().await.is_err_and(|err| err.is_lost()));
}

/// A leader whose process dies (here: its client's runtime is dropped, so nothing
/// gives the lock back) is replaced within one lease by the instance that waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_one_lease() {
    let server = support::server();
    let lease = Duration::from_secs(2);
    let url = server.url();
    // The leader: a thread and a runtime of its own, as a process of its own would
    // have; killed when `kill` is sent, by dropping its runtime.
    let (kill, killed_rx) = std::sync::mpsc::channel::<()>();
    let (leading, leading_rx) = tokio::sync::oneshot::channel::<()>();
    let leader_thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("the leader's runtime");
        runtime.block_on(async {
            let leader = LockClient::builder()
                .url(url)
                .default_lease(lease)
                .connect()
                .await
                .expect("connect");
            let guard = leader.lock("leader:reports").await.expect("lead");
            // Held for as long as the process lives: the guard is never released
            // (a dying process releases nothing either).
            std::mem::forget(guard);
            tokio::spawn(async move {
                let _leader = leader;
                std::future::pending::<()>().await;
            });
        });
        let _ = leading.send(());
        let _ = killed_rx.recv();
        runtime.shutdown_background();
    });
    leading_rx.await.expect("the leader leads");
    // Renewed while it lives: still held after more than a lease.
    tokio::time::sleep(lease + lease / 2).await;
    assert_eq!(support::redis_count(&server, "leader:reports"), 1);

    let follower = support::client_with_lease(&server, lease).await;
    let waiting = tokio::spawn(async move {
        let guard = follower
            .lock("leader:reports")
            .wait(lease * 3)
            .await
            .expect("the follower takes over");
        (Instant::now(), guard, follower)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the follower led while the leader lived"
    );
    let killed = Instant::now();
    kill.send(()).expect("the leader's thread");
    leader_thread.join().expect("the leader's thread");
    let (took_over, guard, _follower) = waiting.await.expect("the follower's task");
    let after = took_over.duration_since(killed);
    println!("the follower took over {after:?} after the leader was killed");
    assert!(
        after <= lease + SLACK,
        "not replaced within one lease: {after:?}"
    );
    guard.unlock().await.expect("unlock");
}
