//! Leases: the watchdog keeps locks alive, reports loss, and dead holders free
//! their locks when the lease ends.

mod support;

use std::process::Command;
use std::time::Duration;

use distlock::LockError;
use distlock_testkit::ChildProcess;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_lock_for_three_leases_and_reports_a_force_unlock() {
    let lease = Duration::from_millis(600);
    let server = support::server();
    let locks = support::client_with_lease(&server, lease).await;
    let operator = support::client(&server).await;

    let guard = locks.lock("long").await.expect("lock");
    tokio::time::sleep(lease * 3).await;
    assert!(!guard.is_lost());
    let info = operator.inspect("long").await.expect("inspect");
    assert!(info.held, "still held after 3 leases");
    assert!(info.lease_remaining.expect("a lease") > lease / 3);

    let lost = guard.lost();
    assert!(operator.force_unlock("long").await.expect("force_unlock"));
    let forced = Instant::now();
    tokio::time::timeout(lease / 3 + Duration::from_millis(300), lost)
        .await
        .expect("lost() fired within a renewal period");
    assert!(forced.elapsed() <= lease / 3 + Duration::from_millis(300));
    assert!(guard.is_lost());
    let err = guard.unlock().await.expect_err("the lock was lost");
    assert!(err.is_lost(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_is_not_renewed_and_reports_its_end() {
    let server = support::server();
    let locks = support::client(&server).await;
    let other = support::client(&server).await;
    let guard = locks
        .lock("fixed")
        .lease(Duration::from_millis(300))
        .await
        .expect("lock");
    tokio::time::timeout(Duration::from_millis(600), guard.lost())
        .await
        .expect("reported lost when the lease ended");
    // The guard counts the lease conservatively (less clock drift), so Redis frees
    // the lock a few milliseconds after the loss is reported, not before.
    let taken = other
        .lock("fixed")
        .wait(Duration::from_millis(500))
        .await
        .expect("free once the fixed lease ended");
    assert!(matches!(guard.unlock().await, Err(LockError::Lost { .. })));
    taken.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_guard_frees_the_lock_long_before_the_lease() {
    let server = support::server();
    let locks = support::client(&server).await;
    let other = support::client(&server).await;
    let guard = locks.lock("dropped").await.expect("lock");
    let waiting = tokio::spawn({
        let other = other.clone();
        async move {
            let start = Instant::now();
            let guard = other.lock("dropped").wait(Duration::from_secs(10)).await?;
            let waited = start.elapsed();
            guard.unlock().await?;
            Ok::<_, LockError>(waited)
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    drop(guard);
    let waited = waiting.await.expect("join").expect("lock");
    assert!(
        waited < Duration::from_secs(1),
        "waited {waited:?} with a 30 s lease"
    );
}

/// Run by `a_killed_holder_frees_the_lock_when_its_lease_ends` in a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by another test"]
async fn child_holder_process() {
    let Ok(url) = std::env::var("DISTLOCK_CHILD_URL") else {
        return;
    };
    let locks = distlock::LockClient::builder()
        .url(url)
        .default_lease(Duration::from_millis(1500))
        .connect()
        .await
        .expect("connect");
    let _guard = locks.lock("crash").await.expect("lock");
    println!("LOCKED");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_the_lock_when_its_lease_ends() {
    let lease = Duration::from_millis(1500);
    let server = support::server();
    let locks = support::client(&server).await;

    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "child_holder_process",
            "--ignored",
            "--nocapture",
        ])
        .env("DISTLOCK_CHILD_URL", server.url());
    let mut child = ChildProcess::spawn(command).expect("spawn child");
    let mut locked = false;
    for _ in 0..50 {
        match child.read_line_timeout(Duration::from_secs(10)) {
            Some(line) if line.contains("LOCKED") => {
                locked = true;
                break;
            }
            Some(_) => continue,
            None => break,
        }
    }
    assert!(locked, "the child took the lock");
    // Let the child's watchdog renew at least once, so the lease is fresh.
    tokio::time::sleep(lease / 2).await;
    child.kill().expect("SIGKILL");
    let killed = Instant::now();
    let remaining = locks
        .inspect("crash")
        .await
        .expect("inspect")
        .lease_remaining
        .expect("held with a lease");

    assert!(
        locks.try_lock("crash").await.expect("try_lock").is_none(),
        "held until the lease ends"
    );
    let guard = locks
        .lock("crash")
        .wait(Duration::from_secs(10))
        .await
        .expect("acquired after the lease");
    let waited = killed.elapsed();
    assert!(
        waited + Duration::from_millis(20) >= remaining,
        "acquired {waited:?} after the kill, with {remaining:?} of lease left"
    );
    assert!(
        waited <= lease + Duration::from_millis(500),
        "acquired {waited:?} after the kill"
    );
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watchdog_keeps_two_thousand_leases() {
    let lease = Duration::from_millis(900);
    let server = support::server();
    let locks = support::client_with_lease(&server, lease).await;
    let mut guards = Vec::new();
    for n in 0..2000 {
        guards.push(locks.lock(format!("many:{n}")).await.expect("lock"));
    }
    tokio::time::sleep(lease * 3).await;
    assert_eq!(guards.iter().filter(|guard| guard.is_lost()).count(), 0);
    assert_eq!(server.cmd(&["DBSIZE"]).expect("DBSIZE"), "2000");
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
    assert_eq!(server.cmd(&["DBSIZE"]).expect("DBSIZE"), "0");
}
