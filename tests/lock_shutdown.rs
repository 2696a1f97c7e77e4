//! Issue 24 (4): a service that stops gives its locks back. `LockClient::shutdown`
//! refuses new acquisitions, gives back every hold of the client in few round
//! trips, tells the guards, and reports; a runtime dropped while holding locks
//! says which stay held and for how long.

mod support;

use std::future::IntoFuture;
use std::time::Duration;

use distlock::{LockError, LostReason};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_back_every_hold_and_refuses_new_ones() {
    const LOCKS: usize = 20;
    let server = support::server();
    let locks = support::client(&server).await;
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        guards.push(locks.lock(format!("stop:{i}")).await.expect("lock"));
    }
    // One re-entered twice: three holds of one lock.
    let inner = guards[0]
        .scope(locks.lock("stop:0").into_future())
        .await
        .expect("re-entry");
    let innermost = inner
        .scope(locks.lock("stop:0").into_future())
        .await
        .expect("re-entry");
    let reader = locks.read_lock("stop:read").await.expect("read");
    assert_eq!(support::redis_count(&server, "stop:0"), 3);

    let before = support::script_calls(&server);
    let report = locks.shutdown().await;
    let runs = support::script_calls(&server) - before;
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.given_back(), LOCKS + 2 + 1, "{report:?}");
    println!(
        "{} holds given back in {runs} script runs",
        report.given_back()
    );
    assert!(
        runs <= (report.given_back() / 2) as u64,
        "{} holds took {runs} script runs: not sent together",
        report.given_back()
    );
    for i in 0..LOCKS {
        assert_eq!(
            support::redis_count(&server, &format!("stop:{i}")),
            0,
            "stop:{i}"
        );
    }
    assert_eq!(support::redis_count(&server, "stop:read"), 0);

    // The guards were told, and send nothing more.
    for guard in guards.iter().chain([&inner, &innermost, &reader]) {
        assert!(guard.is_lost(), "{}", guard.name());
        assert_eq!(guard.lost_reason(), Some(LostReason::ShutDown));
    }
    tokio::time::timeout(Duration::from_millis(100), reader.lost())
        .await
        .expect("lost() fired");
    let calls = support::script_calls(&server);
    let err = innermost.unlock().await.expect_err("given back already");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: Some(LostReason::ShutDown),
                ..
            }
        ),
        "{err:?}"
    );
    drop(inner);
    drop(guards);
    drop(reader);

    // No new acquisition, nothing sent.
    let refused = locks.lock("stop:new").await.expect_err("shut down");
    assert!(refused.is_client_shut_down(), "{refused:?}");
    assert!(refused.to_string().contains("stop:new"), "{refused}");
    let refused = locks
        .lock_all(["stop:a", "stop:b"])
        .await
        .expect_err("shut down");
    assert!(refused.is_client_shut_down(), "{refused:?}");
    // A second shutdown has nothing left to do; it waits for every background
    // release of a dropped guard, so that none can arrive after the count below.
    assert_eq!(locks.shutdown().await.given_back(), 0);
    assert_eq!(
        support::script_calls(&server),
        calls,
        "a closed guard or a refused request sent something"
    );
}

/// A client whose runtime is dropped while it holds locks (a `main` that returns
/// with guards alive) warns once, naming the locks and how long they stay held.
#[test]
fn a_runtime_dropped_while_holding_locks_warns_naming_them() {
    let warnings = support::capture_warnings();
    let server = support::server();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let guards = runtime.block_on(async {
        let locks = support::client(&server).await;
        vec![
            locks.lock("left:a").await.expect("lock"),
            locks.lock("left:b").await.expect("lock"),
        ]
    });
    drop(runtime);
    let text = warnings.text();
    let line = text
        .lines()
        .find(|line| line.contains("stay held in Redis until their leases end"))
        .unwrap_or_else(|| panic!("no warning of the locks left held: {text}"));
    assert!(
        line.contains("`left:a`") && line.contains("`left:b`"),
        "{line}"
    );
    assert!(line.contains("s more)"), "{line}");
    assert_eq!(
        text.matches("stay held in Redis until their leases end")
            .count(),
        1,
        "one warning: {text}"
    );
    drop(guards);
}

/// Tasks waiting for a lock that another client holds end at the shutdown, each
/// with `ClientShutDown`, not at the end of their wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_under_way_end_at_the_shutdown() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let held = other.lock("stop:busy").await.expect("held elsewhere");
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                locks
                    .lock("stop:busy")
                    .wait(Duration::from_secs(20))
                    .await
                    .map(drop)
            })
        })
        .collect();
    let waiting = support::eventually(Duration::from_secs(2), || {
        support::channel_subscribers(&server, "stop:busy") > 0
    })
    .await;
    assert!(waiting, "nobody waited");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stopped = tokio::time::Instant::now();
    locks.shutdown().await;
    for waiter in waiters {
        let result = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("the wait ended at the shutdown")
            .expect("join");
        assert!(
            matches!(&result, Err(err) if err.is_client_shut_down()),
            "{result:?}"
        );
    }
    let ended = stopped.elapsed();
    println!("waits ended {ended:?} after the shutdown began");
    // A waiter that is not woken looks again only at its next look (a second or
    // more later).
    assert!(
        ended < Duration::from_millis(300),
        "the waits ended {ended:?} after the shutdown began"
    );
    assert_eq!(
        support::redis_count(&server, "stop:busy"),
        1,
        "still the other's"
    );
    held.unlock().await.expect("unlock");
}

/// A client whose every reply comes `delay` late (a proxy in front of `server`),
/// so that a request can be on its way when the shutdown is called.
async fn slow_client(
    server: &distlock_testkit::RedisServer,
    delay: Duration,
) -> (distlock_testkit::FaultProxy, distlock::LockClient) {
    let proxy = support::proxy(server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_secs(3)).await;
    proxy.delay(distlock_testkit::Direction::ToClient, delay, Duration::ZERO);
    (proxy, locks)
}

/// Issue 34 (1): an acquisition whose request is on its way when `shutdown()` is
/// called never yields a guard: the shutdown waits for it, gives its grant back and
/// counts it, and once it returned the lock is free in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_in_flight_at_the_shutdown_yields_no_guard() {
    let server = support::server();
    let (_proxy, locks) = slow_client(&server, Duration::from_millis(800)).await;
    let asking = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("stop:flight").await }
    });
    // The request reached the server: its reply is on its way back.
    let applied = support::eventually(Duration::from_secs(3), || {
        support::redis_count(&server, "stop:flight") == 1
    })
    .await;
    assert!(applied, "the acquisition never reached the server");
    let report = locks.shutdown().await;
    // Checked at once: nothing may be held once the shutdown says it is done.
    let count = support::redis_count(&server, "stop:flight");
    let result = asking.await.expect("join");
    println!("report {report:?}, count after it {count}, acquisition {result:?}");
    assert!(
        matches!(&result, Err(err) if err.is_client_shut_down()),
        "an acquisition in flight at the shutdown yielded {result:?}"
    );
    assert_eq!(count, 0, "the lock stayed held after the shutdown returned");
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(
        report.given_back(),
        1,
        "the grant given back is counted: {report:?}"
    );
}

/// Issue 34 (1), a re-entry: a re-entry on its way at the shutdown adds no hold
/// that outlives it, and yields no guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_in_flight_at_the_shutdown_leaves_no_hold() {
    let server = support::server();
    let (proxy, locks) = slow_client(&server, Duration::ZERO).await;
    let guard = locks.lock("stop:again").await.expect("lock");
    proxy.delay(
        distlock_testkit::Direction::ToClient,
        Duration::from_millis(800),
        Duration::ZERO,
    );
    let reentry = tokio::spawn(guard.scope({
        let locks = locks.clone();
        async move { locks.lock("stop:again").await }
    }));
    let applied = support::eventually(Duration::from_secs(3), || {
        support::redis_count(&server, "stop:again") == 2
    })
    .await;
    assert!(applied, "the re-entry never reached the server");
    let report = locks.shutdown().await;
    let count = support::redis_count(&server, "stop:again");
    let result = reentry.await.expect("join");
    println!("report {report:?}, count after it {count}, re-entry {result:?}");
    assert!(
        matches!(&result, Err(err) if err.is_client_shut_down()),
        "a re-entry in flight at the shutdown yielded {result:?}"
    );
    assert_eq!(
        count, 0,
        "a hold stayed in Redis after the shutdown returned"
    );
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(
        report.given_back(),
        2,
        "both holds given back and counted: {report:?}"
    );
    assert_eq!(guard.lost_reason(), Some(LostReason::ShutDown));
}

/// Issue 34 (1), a set: `lock_all` on its way at the shutdown yields no guard and
/// leaves none of its names held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_in_flight_at_the_shutdown_leaves_no_name_held() {
    let server = support::server();
    let (_proxy, locks) = slow_client(&server, Duration::from_millis(800)).await;
    let asking = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock_all(["stop:s1", "stop:s2"]).await }
    });
    let applied = support::eventually(Duration::from_secs(3), || {
        support::redis_count(&server, "stop:s1") == 1
    })
    .await;
    assert!(applied, "the set never reached the server");
    let report = locks.shutdown().await;
    let counts = [
        support::redis_count(&server, "stop:s1"),
        support::redis_count(&server, "stop:s2"),
    ];
    let result = asking.await.expect("join");
    println!("report {report:?}, counts after it {counts:?}, set {result:?}");
    assert!(
        matches!(&result, Err(err) if err.is_client_shut_down()),
        "a set in flight at the shutdown yielded {result:?}"
    );
    assert_eq!(
        counts,
        [0, 0],
        "a name stayed held after the shutdown returned"
    );
    assert_eq!(report.given_back(), 2, "{report:?}");
    assert!(report.is_complete(), "{report:?}");
}

/// Issue 34, found by the explorer's whole bound (world `shutdown`): a guard whose
/// hold the shutdown gives back is told before the release is sent. Before, it was
/// told only once the release had answered, so while the reply was on its way the
/// lock was free in Redis (another owner could take it) and the guard still said it
/// held it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_is_told_before_the_shutdown_gives_its_hold_back() {
    let server = support::server();
    let (proxy, locks) = slow_client(&server, Duration::ZERO).await;
    let guard = locks.lock("stop:told").await.expect("lock");
    // Every reply from now on comes 800 ms late: the release applies at once.
    proxy.delay(
        distlock_testkit::Direction::ToClient,
        Duration::from_millis(800),
        Duration::ZERO,
    );
    let shutting = tokio::spawn({
        let locks = locks.clone();
        async move { locks.shutdown().await }
    });
    let freed = support::eventually(Duration::from_secs(3), || {
        support::redis_count(&server, "stop:told") == 0
    })
    .await;
    assert!(freed, "the shutdown never gave the hold back");
    assert!(
        guard.is_lost(),
        "the lock is free in Redis while its guard still says it holds it"
    );
    assert_eq!(guard.lost_reason(), Some(LostReason::ShutDown));
    let report = shutting.await.expect("join");
    assert_eq!(report.given_back(), 1, "{report:?}");
}
