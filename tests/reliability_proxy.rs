//! Reliability: the network between the client and Redis misbehaves (through the
//! testkit's `FaultProxy`): late replies, a blackholed renewal path, lost replies,
//! reset connections.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError};
use distlock_testkit::{monotonic_ns, Direction, FaultProxy, History, Section};
use support::{Resetter, Workload};

/// A client through `proxy`, fenced, with a watchdog lease of `lease`.
async fn through(proxy: &FaultProxy, lease: Duration) -> LockClient {
    support::fenced_with_lease(&proxy.url(), lease).await
}

/// Every acquire reply arrives 300 ms late; the fixed lease is 100 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_later_than_the_lease_never_runs_the_body_and_leaves_no_hold() {
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = through(&proxy, Duration::from_secs(30)).await;
    let (_, attempt) = support::late_acquire(&proxy, &locks, Duration::from_millis(20)).await;
    let ran = matches!(attempt, Ok(Ok(_)));
    drop(attempt);
    proxy.heal();
    let clean = support::eventually(Duration::from_secs(3), || {
        !support::held(&server, &support::lock_key("late"))
    })
    .await;
    support::summary(
        "proxy_late_acquire_reply",
        &[
            ("body_ran", u64::from(ran)),
            ("leaked_keys", u64::from(!clean)),
        ],
    );
    assert!(!ran, "the body ran on a late grant");
    assert!(clean, "a hold was left behind");
}

/// Observed: the acquire never ends. Every reply is late, so each grant is given
/// back and the loop asks again, without looking at its wait (1 s): after 3 s it
/// is still retrying. Now it ends with the wait, and since no other owner held the
/// lock it says that Redis answered too late, not that the lock was busy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_later_than_the_lease_ends_with_the_wait_as_an_outage() {
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = through(&proxy, Duration::from_secs(30)).await;
    let (_, attempt) = support::late_acquire(&proxy, &locks, Duration::ZERO).await;
    let result = attempt.expect("the acquire ended within its wait + 2 s");
    assert!(
        matches!(&result, Err(err) if err.is_redis() && !err.is_busy()),
        "{result:?}"
    );
}

/// The holder's requests are blackholed: its watchdog cannot renew, so the guard must
/// be reported lost by the deadline it believed in, before Redis lets another owner in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_renewal_path_loses_the_guard_by_its_deadline() {
    let lease = Duration::from_millis(600);
    let server = support::server();
    let proxy = support::proxy(&server);
    let holder = through(&proxy, lease).await;
    let other = support::fenced(&server.url()).await;
    let history = History::new();

    let guard = holder.lock("cut").await.expect("lock");
    let acquired = monotonic_ns();
    let token = guard.fencing_token();
    tokio::time::sleep(lease / 2).await;
    proxy.blackhole(Direction::ToServer, true);
    let cut = monotonic_ns();
    let lost = tokio::time::timeout(lease + Duration::from_millis(800), guard.lost()).await;
    let noticed = monotonic_ns();
    history.record(Section {
        owner: "holder".into(),
        token,
        acquired_ns: acquired,
        released_ns: noticed,
        deadline_ns: None,
    });
    let sent = monotonic_ns();
    let taken = other
        .lock("cut")
        .wait(Duration::from_secs(5))
        .await
        .expect("free once the lease ended");
    let other_acquired = monotonic_ns();
    let workload = Workload::connect(&server.url(), "cut").await;
    let (section, _, _) =
        support::body(taken, "other", 0, sent, other_acquired, None, &workload).await;
    history.record(section);
    proxy.heal();
    let unlock = guard.unlock().await;
    let report = history.check();
    support::summary_of(
        "proxy_renewal_blackholed",
        &report,
        &[("lost_after_cut_ms", (noticed - cut) / 1_000_000)],
    );
    assert!(
        lost.is_ok(),
        "not reported lost within lease + 800 ms of the cut"
    );
    assert!(matches!(unlock, Err(LockError::Lost { .. })), "{unlock:?}");
    report.assert_clean();
}

/// A re-entry's reply is lost (blackholed, then the connection is reset when the
/// blackhole lifts). Whatever the re-entry returns, the hold count in Redis must end
/// where the guards say: 1 while the outer guard lives, 0 after it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_not_counted_twice() {
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = LockClient::builder()
        .url(proxy.url())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("connect");
    let count = || -> u64 { support::redis_count(&server, "twice") };
    let outer = locks.lock("twice").await.expect("lock");
    let inner = outer
        .scope(async {
            proxy.blackhole(Direction::ToClient, true);
            let inner = locks.lock("twice").await;
            proxy.blackhole(Direction::ToClient, false);
            inner
        })
        .await;
    let applied_while_lost = count();
    let inner_ok = inner.is_ok();
    if let Ok(inner) = inner {
        assert_eq!(count(), 2);
        inner.unlock().await.expect("inner unlock");
    }
    let settled = support::eventually(Duration::from_secs(3), || count() == 1).await;
    let after = count();
    outer.unlock().await.expect("outer unlock");
    support::summary(
        "proxy_lost_reply",
        &[
            ("reentry_ok", u64::from(inner_ok)),
            ("count_seen_while_lost", applied_while_lost),
            ("count_after_heal", after),
        ],
    );
    assert!(settled, "hold count {after} after the heal, expected 1");
    assert!(
        !support::held(&server, &support::lock_key("twice")),
        "left held"
    );
}

/// Eight tasks lock and unlock through a proxy that resets every connection every
/// 100 ms for 3 s. Every failure must be a typed error, and no success may be
/// silent: the history of the sections that ran is a mutex history, and the counter
/// they incremented is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_resets_give_typed_errors_never_a_silent_success() {
    let server = support::server();
    let proxy = Arc::new(support::proxy(&server));
    let locks = through(&proxy, Duration::from_secs(2)).await;
    let workload = Workload::connect(&server.url(), "reset").await;
    let history = Arc::new(History::new());
    let errors = Arc::new(AtomicU64::new(0));

    let resetter = Resetter::start(proxy.clone(), Duration::from_millis(100));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let (locks, workload, history, errors) = (
            locks.clone(),
            workload.clone(),
            history.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let label = format!("t{t}");
            let mut lost = 0;
            while tokio::time::Instant::now() < deadline {
                let guard = match locks.lock("reset").wait(Duration::from_secs(5)).await {
                    Ok(guard) => guard,
                    Err(err) => {
                        assert!(
                            err.is_redis() || err.is_timeout(),
                            "untyped or unexpected error: {err:?}"
                        );
                        errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                let acquired = monotonic_ns();
                let token = guard.fencing_token();
                workload.unfenced_increment().await;
                let released = monotonic_ns();
                match guard.unlock().await {
                    Ok(()) => {}
                    Err(err @ LockError::Lost { .. }) => {
                        lost += 1;
                        let _ = err;
                    }
                    Err(err) => {
                        assert!(err.is_redis(), "unexpected error: {err:?}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
                history.record(Section {
                    owner: label.clone(),
                    token,
                    acquired_ns: acquired,
                    released_ns: released,
                    deadline_ns: None,
                });
            }
            lost
        }));
    }
    let mut lost = 0;
    for task in tasks {
        lost += task.await.expect("task");
    }
    let resets = resetter.stop();
    let report = history.check();
    let counter = workload.counter().await;
    // Whatever was left held is given back or expires within the 2 s lease.
    let clean = support::eventually(Duration::from_secs(5), || {
        support::leaks(&server).0.is_empty()
    })
    .await;
    support::summary_of(
        "proxy_connection_resets",
        &report,
        &[
            ("resets", resets as u64),
            ("typed_errors", errors.load(Ordering::Relaxed)),
            ("lost", lost),
            (
                "counter_missing",
                (report.sections as u64).saturating_sub(counter),
            ),
            ("leaked_keys", u64::from(!clean)),
        ],
    );
    assert!(resets > 0, "the proxy reset nothing");
    assert!(report.sections > 0, "no section completed");
    report.assert_clean();
    assert_eq!(counter, report.sections as u64, "updates were lost");
    assert!(clean, "keys left: {:?}", support::leaks(&server).0);
}

/// Two clients behind proxies that delay every chunk 2–12 ms each way run 200
/// sections on one name: the history stays a mutex history, the counter exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jittery_links_keep_sections_apart() {
    let server = support::server();
    let workload = Workload::connect(&server.url(), "jitter").await;
    let history = Arc::new(History::new());
    let mut proxies = Vec::new();
    let mut tasks = Vec::new();
    for c in 0..2 {
        let proxy = support::proxy(&server);
        for direction in [Direction::ToServer, Direction::ToClient] {
            proxy.delay(
                direction,
                Duration::from_millis(2),
                Duration::from_millis(10),
            );
        }
        let locks = through(&proxy, Duration::from_secs(5)).await;
        proxies.push(proxy);
        for t in 0..2 {
            let (locks, workload, history) = (locks.clone(), workload.clone(), history.clone());
            tasks.push(tokio::spawn(async move {
                let plan = support::Plan {
                    sections: 50,
                    wait: Duration::from_secs(30),
                    lease: None,
                };
                let quiet = |_: &Section| {};
                support::participate(
                    &locks,
                    "jitter",
                    &format!("c{c}/t{t}"),
                    plan,
                    &workload,
                    &history,
                    &quiet,
                )
                .await
            }));
        }
    }
    let mut lost = 0;
    for task in tasks {
        let outcome = task.await.expect("task");
        assert_eq!(outcome.sections, 50, "{outcome:?}");
        lost += outcome.lost;
    }
    let report = history.check();
    let counter = workload.counter().await;
    support::summary_of(
        "proxy_jitter",
        &report,
        &[
            ("lost", lost as u64),
            (
                "counter_missing",
                (report.sections as u64).saturating_sub(counter),
            ),
        ],
    );
    report.assert_clean();
    assert_eq!(counter, 200, "updates were lost");
    assert_eq!(lost, 0);
}

/// The proxy stops accepting connections: a new client fails within its connect
/// timeout with a typed error, while a client connected before keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_accepting_no_connection_fails_connect_in_bounded_time() {
    let server = support::server();
    let proxy = support::proxy(&server);
    let connected = through(&proxy, Duration::from_secs(5)).await;
    proxy.pause_accepting();
    let start = tokio::time::Instant::now();
    let refused = LockClient::builder()
        .url(proxy.url())
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .await;
    let took = start.elapsed();
    let guard = connected
        .lock("accepting")
        .await
        .expect("an open connection still works");
    guard.unlock().await.expect("unlock");
    proxy.resume_accepting();
    support::summary(
        "proxy_not_accepting",
        &[("connect_failed_ms", took.as_millis() as u64)],
    );
    let err = refused.expect_err("no connection accepted");
    assert!(err.is_redis(), "{err:?}");
    assert!(took < Duration::from_secs(2), "connect took {took:?}");
}

/// 300 locks renewed in pipelined batches while every connection is reset every
/// 150 ms for 2 s. Afterwards each guard either still holds its lock in Redis or
/// reports the loss: a renewal that was cut mid-pipeline is never taken for a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_mid_pipeline_never_leave_a_guard_believing_in_a_lost_lock() {
    const LOCKS: usize = 300;
    let lease = Duration::from_millis(900);
    let server = support::server();
    let proxy = Arc::new(support::proxy(&server));
    let locks = through(&proxy, lease).await;
    let mut guards = Vec::new();
    for n in 0..LOCKS {
        guards.push(locks.lock(format!("batch:{n}")).await.expect("lock"));
    }
    let resetter = Resetter::start(proxy.clone(), Duration::from_millis(150));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let resets = resetter.stop();
    // One renewal period on a healthy link, so that every verdict is current.
    tokio::time::sleep(lease / 3 + Duration::from_millis(200)).await;
    let mut believed_but_gone = Vec::new();
    let mut lost = 0;
    for (n, guard) in guards.iter().enumerate() {
        if guard.is_lost() {
            lost += 1;
        } else if !support::held(&server, &support::lock_key(&format!("batch:{n}"))) {
            believed_but_gone.push(n);
        }
    }
    let mut unlock_mismatch = 0;
    for guard in guards {
        let was_lost = guard.is_lost();
        let unlocked = guard.unlock().await;
        if unlocked.is_ok() == was_lost {
            unlock_mismatch += 1;
        }
    }
    support::summary(
        "proxy_resets_mid_pipeline",
        &[
            ("locks", LOCKS as u64),
            ("resets", resets as u64),
            ("lost", lost),
            ("silent_losses", believed_but_gone.len() as u64),
        ],
    );
    assert!(resets > 0, "the proxy reset nothing");
    assert!(
        believed_but_gone.is_empty(),
        "guards believed held but gone: {believed_but_gone:?}"
    );
    assert_eq!(unlock_mismatch, 0, "unlock disagreed with is_lost()");
    let clean = support::eventually(Duration::from_secs(3), || {
        support::leaks(&server).0.is_empty()
    })
    .await;
    assert!(clean, "keys left: {:?}", support::leaks(&server).0);
}

/// Observed: two resets 400 ms apart make every one of 300 watchdog leases of 900 ms
/// end in Redis and be reported lost, although Redis answered the whole time (one
/// reset, or two 150 ms or 700 ms apart, lose none). A second reset while the
/// connection recovers from the first keeps renewals from Redis for over 900 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_resets_in_a_row_lose_no_lease() {
    let lease = Duration::from_millis(900);
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = through(&proxy, lease).await;
    let mut guards = Vec::new();
    for n in 0..300 {
        guards.push(locks.lock(format!("batch:{n}")).await.expect("lock"));
    }
    proxy.reset_all();
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.reset_all();
    tokio::time::sleep(lease * 2).await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    assert_eq!(lost, 0, "{lost} of 300 leases lost after two resets");
}

/// Observed (the explorer): a release whose request and retry went unanswered ended
/// in "Redis error: timed out; check that the server is reachable", which says
/// nothing of the lock. Now the error says the release may have been applied, and
/// bounds how long the lock can stay held: it is no longer renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_release_says_it_may_have_applied_and_when_the_lease_ends() {
    let lease = Duration::from_secs(2);
    let server = support::server();
    let proxy = support::proxy(&server);
    let holder = through(&proxy, lease).await;
    let other = support::fenced(&server.url()).await;

    // The request never reaches Redis: the lock stays held until its lease ends.
    let guard = holder.lock("unanswered").await.expect("lock");
    proxy.blackhole(Direction::ToServer, true);
    let sent = tokio::time::Instant::now();
    let err = guard.unlock().await.expect_err("no answer");
    let LockError::ReleaseUnconfirmed { ends_within, .. } = &err else {
        panic!("not ReleaseUnconfirmed: {err:?}");
    };
    let ends_within = *ends_within;
    assert!(err.is_unconfirmed() && err.is_redis(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("lock `unanswered`") && text.contains("may have been applied"),
        "{text}"
    );
    assert!(ends_within <= lease, "{ends_within:?} is past the lease");
    assert!(
        support::held(&server, &support::lock_key("unanswered")),
        "the release was applied through a blackhole"
    );
    proxy.heal();
    let taken = other
        .lock("unanswered")
        .wait(lease * 2)
        .await
        .expect("free once the lease ended");
    let waited = sent.elapsed();
    assert!(
        waited <= lease + Duration::from_millis(300),
        "held {waited:?} after the unanswered release, past the lease of {lease:?}"
    );
    taken.unlock().await.expect("unlock");

    // The request reaches Redis and only its replies are lost: the same error, and
    // the lock is free at once.
    let guard = holder.lock("unanswered").await.expect("lock again");
    proxy.blackhole(Direction::ToClient, true);
    let err = guard.unlock().await.expect_err("no answer");
    assert!(err.is_unconfirmed(), "{err:?}");
    assert!(
        !support::held(&server, &support::lock_key("unanswered")),
        "the release did not reach Redis"
    );
    proxy.heal();
}
