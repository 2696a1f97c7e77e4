//! Reliability: the Redis server misbehaves — frozen, restarted empty, paused for
//! writes, out of memory, evicting keys.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LostReason};
use distlock_testkit::{monotonic_ns, History, RedisServer, Section};
use tokio::time::Instant;

/// A fenced client of `server` with a watchdog lease of `lease`.
async fn client(server: &RedisServer, lease: Duration) -> LockClient {
    support::fenced_with_lease(&server.url(), lease).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_loses_the_holder_its_lock_and_a_waiter_gets_it_after() {
    let lease = Duration::from_millis(600);
    let server = support::server();
    let holder = client(&server, lease).await;
    let waiter = client(&server, lease).await;
    let history = Arc::new(History::new());

    let guard = holder.lock("frozen-server").await.expect("lock");
    let acquired = monotonic_ns();
    let token = guard.fencing_token();
    let waiting = support::wait_then_release(
        waiter,
        "frozen-server",
        Duration::from_secs(15),
        &history,
        "the waiter gets the lock after the freeze",
    );
    tokio::time::sleep(lease / 2).await;
    server.pause().expect("SIGSTOP redis");
    let paused = monotonic_ns();
    let lost = tokio::time::timeout(lease + Duration::from_secs(1), guard.lost()).await;
    let noticed = monotonic_ns();
    let freeze_left = (lease * 2).saturating_sub(Duration::from_nanos(noticed - paused));
    tokio::time::sleep(freeze_left).await;
    server.resume().expect("SIGCONT redis");
    let resumed = monotonic_ns();
    history.record(Section {
        owner: "holder".into(),
        token,
        acquired_ns: acquired,
        released_ns: noticed,
        deadline_ns: None,
    });
    let waiter_acquired = waiting.await.expect("waiter");
    let unlock = guard.unlock().await;
    let report = history.check();
    support::summary_of(
        "redis_sigstop",
        &report,
        &[
            ("lost_after_freeze_ms", (noticed - paused) / 1_000_000),
            (
                "waiter_after_resume_ms",
                waiter_acquired.saturating_sub(resumed) / 1_000_000,
            ),
        ],
    );
    assert!(lost.is_ok(), "not told within lease + 1 s of the freeze");
    assert!(matches!(unlock, Err(LockError::Lost { .. })), "{unlock:?}");
    assert!(
        waiter_acquired >= resumed,
        "the waiter acquired while Redis was frozen?"
    );
    assert!(
        waiter_acquired - resumed < 3_000_000_000,
        "the waiter took {} ms after the resume",
        (waiter_acquired - resumed) / 1_000_000
    );
    report.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_empty_tells_the_holder_and_lets_waiters_in() {
    let lease = Duration::from_millis(900);
    let period = lease / 3;
    let mut server = support::server();
    let holder = client(&server, lease).await;
    let waiters = client(&server, lease).await;

    let guard = holder.lock("restarted").await.expect("lock");
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let waiters = waiters.clone();
        tasks.push(tokio::spawn(async move {
            let guard = waiters
                .lock("restarted")
                .wait(Duration::from_secs(15))
                .await
                .expect("a waiter acquires after the restart");
            let at = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.unlock().await.expect("unlock");
            at
        }));
    }
    // Let both waiters subscribe.
    assert!(
        support::eventually(Duration::from_secs(3), || {
            server
                .cmd(&["PUBSUB", "NUMSUB", &support::channel_key("restarted")])
                .map(|reply| reply.ends_with('1'))
                .unwrap_or(false)
        })
        .await
    );
    // Blocks this worker thread for the restart; the other one runs the client.
    server.restart().expect("restart");
    let restarted = Instant::now();
    let told = tokio::time::timeout(period * 2 + Duration::from_secs(1), guard.lost()).await;
    let told_after = restarted.elapsed();
    let mut acquired_after = Vec::new();
    for task in tasks {
        acquired_after.push(
            task.await
                .expect("waiter")
                .saturating_duration_since(restarted),
        );
    }
    let unlock = guard.unlock().await;
    // The scripts were loaded again: a fresh acquire works.
    let again = holder.lock("restarted").wait(Duration::from_secs(5)).await;
    let again_ok = again.is_ok();
    if let Ok(again) = again {
        again.unlock().await.expect("unlock");
    }
    let channels_gone = support::eventually(Duration::from_secs(3), || {
        support::leaks(&server).1.is_empty()
    })
    .await;
    support::summary(
        "redis_restart_empty",
        &[
            ("told_after_ms", told_after.as_millis() as u64),
            (
                "last_waiter_after_ms",
                acquired_after.iter().max().expect("two").as_millis() as u64,
            ),
            ("leaked_channels", u64::from(!channels_gone)),
        ],
    );
    assert!(
        told.is_ok(),
        "the holder was not told within 2 renewal periods + 1 s of the restart"
    );
    assert!(matches!(unlock, Err(LockError::Lost { .. })), "{unlock:?}");
    assert!(
        again_ok,
        "no acquire after the restart (scripts not reloaded?)"
    );
    for after in acquired_after {
        assert!(after < Duration::from_secs(5), "a waiter took {after:?}");
    }
    assert!(
        channels_gone,
        "channels left: {:?}",
        support::leaks(&server).1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_paused_longer_than_the_wait_give_an_error_and_leave_nothing_held() {
    let server = support::server();
    let locks = client(&server, Duration::from_secs(30)).await;
    let wait = Duration::from_millis(300);
    let pause = Duration::from_millis(1500);
    server
        .cmd(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "WRITE"])
        .expect("CLIENT PAUSE");
    let paused = Instant::now();
    let result = locks.lock("paused").wait(wait).await;
    let took = paused.elapsed();
    // After the pause the blocked request runs; the hold it takes must be given back.
    tokio::time::sleep(pause.saturating_sub(paused.elapsed())).await;
    let nothing_held = support::eventually(Duration::from_secs(3), || {
        !support::held(&server, &support::lock_key("paused"))
    })
    .await;
    let kind = match &result {
        Ok(_) => "ok",
        Err(err) if err.is_timeout() => "timeout",
        Err(err) if err.is_redis() => "redis",
        Err(_) => "other",
    };
    support::summary(
        "redis_client_pause_write",
        &[
            ("took_ms", took.as_millis() as u64),
            ("timeout_error", u64::from(kind == "timeout")),
            ("leaked_keys", u64::from(!nothing_held)),
        ],
    );
    assert!(
        matches!(kind, "timeout" | "redis"),
        "expected a typed error, got {result:?}"
    );
    assert!(
        took < wait + Duration::from_millis(1000),
        "the error took {took:?} with a wait of {wait:?}"
    );
    drop(result);
    assert!(nothing_held, "a hold was left after the pause");
}

/// Observed: the acquire fails with `LockError::Redis` (the 500 ms response timeout
/// of the paused EVALSHA) after the wait: the wait did not bound a request stuck on
/// the server. Now the wait bounds it, and the error says that Redis did not answer
/// (a free lock on a paused server is an outage, not contention).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_paused_longer_than_the_wait_end_the_wait_as_an_outage() {
    let server = support::server();
    let locks = client(&server, Duration::from_secs(30)).await;
    server
        .cmd(&["CLIENT", "PAUSE", "1500", "WRITE"])
        .expect("CLIENT PAUSE");
    let result = locks.lock("paused").wait(Duration::from_millis(300)).await;
    assert!(
        matches!(&result, Err(err) if err.is_redis() && !err.is_busy()),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_refuses_acquires_but_renews_and_releases() {
    let lease = Duration::from_millis(600);
    let server = support::with_maxmemory_policy("noeviction");
    let locks = client(&server, lease).await;
    let held = locks.lock("held").await.expect("lock before OOM");
    support::fill_past_maxmemory(&server);
    let oom = server
        .cmd(&["SET", "probe", "1"])
        .expect_err("the server is out of memory");
    assert!(oom.to_string().contains("OOM"), "{oom}");
    let before = server
        .cmd(&["DUMP", &support::lock_key("new")])
        .expect("DUMP");

    let refused = locks.lock("new").wait(Duration::ZERO).await;
    let after = server
        .cmd(&["DUMP", &support::lock_key("new")])
        .expect("DUMP");
    tokio::time::sleep(lease * 2).await; // renewals run under OOM
    let still_held = !held.is_lost();
    let released = held.unlock().await;
    support::summary(
        "redis_oom_noeviction",
        &[
            ("acquire_refused", u64::from(refused.is_err())),
            ("renewed", u64::from(still_held)),
            ("released", u64::from(released.is_ok())),
        ],
    );
    let err = refused.expect_err("an acquire under OOM");
    assert!(err.is_redis(), "{err:?}");
    assert!(err.to_string().contains("OOM"), "{err}");
    assert_eq!(before, after, "a partial write under OOM");
    assert!(still_held, "renewals failed under OOM");
    released.expect("release under OOM");
    assert!(
        !support::held(&server, &support::lock_key("held")),
        "held after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicting_server_is_warned_about_and_an_evicted_lock_is_reported_lost() {
    let lease = Duration::from_millis(600);
    let server = support::with_maxmemory_policy("volatile-lru");
    let captured = support::capture_warnings();
    let locks = client(&server, lease).await;
    let warned = captured.text();
    assert!(
        warned.contains("maxmemory-policy") && warned.contains("volatile-lru"),
        "no eviction warning at connect: {warned:?}"
    );
    let guard = locks.lock("evicted").await.expect("lock");
    // Keys without a TTL are never evicted under volatile-lru: the lock is the one to go.
    support::fill_past_maxmemory(&server);
    let _ = server.cmd(&["SET", "trigger", "1"]);
    let evicted = Instant::now();
    let lost = tokio::time::timeout(lease + Duration::from_millis(500), guard.lost()).await;
    let told_after = evicted.elapsed();
    let unlock = guard.unlock().await;
    support::summary(
        "redis_eviction",
        &[
            ("warned", 1),
            ("told_after_ms", told_after.as_millis() as u64),
        ],
    );
    assert!(
        !support::held(&server, &support::lock_key("evicted")),
        "the lock was not evicted"
    );
    assert!(lost.is_ok(), "an evicted lock was not reported lost");
    assert!(matches!(unlock, Err(LockError::Lost { .. })), "{unlock:?}");
    let logged = captured.text();
    assert!(
        logged
            .lines()
            .any(|line| line.contains("lock lost") && line.contains("lock.name=evicted")),
        "no warning on loss: {logged}"
    );
}

/// Observed: the holder is told 540–590 ms after the restart with a 300 ms renewal
/// period (900 ms lease): the first renewal on the dropped connection fails, the
/// watchdog waits a whole period before it tries again, then reloads the script
/// and finds the lock gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_is_reported_within_one_renewal_period() {
    let lease = Duration::from_millis(900);
    let mut server = support::server();
    let holder = client(&server, lease).await;
    let guard = holder.lock("restarted").await.expect("lock");
    server.restart().expect("restart");
    let restarted = Instant::now();
    let told = tokio::time::timeout(Duration::from_secs(3), guard.lost()).await;
    let after = restarted.elapsed();
    assert!(told.is_ok(), "not told at all within 3 s");
    assert!(
        after <= lease / 3 + Duration::from_millis(100),
        "told {after:?} after the restart, more than one renewal period (+100 ms)"
    );
}

/// Observed: when Redis could not be reached at the end of an annotated function
/// whose lock was already lost, the release's transport error hid the loss, and the
/// macro warned that it "could not release the lock", not that the lock was lost
/// while the function ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_function_warns_of_a_loss_even_when_redis_is_frozen_at_its_end() {
    #[distlock::distributed_lock(key = "frozen-at-end", client = locks, lease = "300ms")]
    async fn work(
        locks: &LockClient,
        server: &distlock_testkit::RedisServer,
    ) -> Result<(), LockError> {
        let held = distlock::current_lock().expect("inside the lock scope");
        tokio::time::timeout(Duration::from_secs(2), held.lost())
            .await
            .expect("the fixed lease ended");
        server.pause().expect("SIGSTOP");
        Ok(())
    }
    let server = support::server();
    let captured = support::capture_warnings();
    let locks = client(&server, Duration::from_secs(30)).await;
    let result = work(&locks, &server).await;
    server.resume().expect("SIGCONT");
    result.expect("on_lost = \"finish\" returns the body's result");
    let warned = captured.text();
    let ours = warned
        .lines()
        .filter(|line| line.contains("frozen-at-end"))
        .collect::<Vec<_>>();
    assert!(
        ours.iter()
            .any(|line| line.contains("lost while the function ran")),
        "no loss warning for the function: {ours:?}"
    );
}

/// Issue 24 (1): a server restarted without persistence forgets the fencing
/// counter. Observed on main: the next holder was issued token 1, the token the
/// holder before the restart carried. Every token issued after the restart must be
/// larger than every token issued before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_issued_after_an_empty_restart_are_larger() {
    let lease = Duration::from_secs(30);
    let mut server = support::server();
    let locks = client(&server, lease).await;
    let mut before = 0;
    for name in ["restart:a", "restart:b"] {
        for _ in 0..3 {
            let guard = locks.lock(name).await.expect("lock");
            let token = guard.fencing_token().expect("a token");
            assert!(token > before, "{name}: token {token} after {before}");
            before = before.max(token);
            guard.unlock().await.expect("unlock");
        }
    }
    server.restart().expect("restart");
    assert_eq!(
        server.cmd(&["DBSIZE"]).expect("DBSIZE"),
        "0",
        "restarted empty"
    );
    let other = client(&server, lease).await;
    for name in ["restart:a", "restart:b", "restart:new"] {
        let guard = other.lock(name).await.expect("lock after the restart");
        let token = guard.fencing_token().expect("a token");
        assert!(
            token > before,
            "{name}: token {token} after the restart, not above {before} issued before"
        );
        guard.unlock().await.expect("unlock");
    }
    support::summary("fencing_after_empty_restart", &[("tokens_repeated", 0)]);
}

/// Issue 24: a holder (default 30 s lease, so its next renewal is 10 s away) is
/// told that a restart without persistence lost its lock as soon as the client's
/// connection comes back to the new server (which has another `run_id`), not at its
/// next renewal, with [`LostReason::ServerReplaced`]; and the client's next
/// acquisition of the name is granted only after the old guard was told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_is_told_at_once() {
    let mut server = support::server();
    let holder = support::fenced_client(&server).await;
    let guard = holder.lock("replaced").await.expect("lock");
    let token = guard.fencing_token().expect("a token");
    // Blocks this worker thread for the restart; the other one runs the client.
    server.restart().expect("restart");
    let back = Instant::now();
    let told = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    let told_after = back.elapsed();
    let round_trip = {
        let start = Instant::now();
        server.cmd(&["PING"]).expect("PING");
        start.elapsed()
    };
    // Another call chain of the same client takes the name again.
    let again = holder
        .lock("replaced")
        .wait(Duration::from_secs(5))
        .await
        .expect("the name is free on the new server");
    let lost_first = guard.is_lost();
    support::summary(
        "redis_restart_told",
        &[
            ("told_after_ms", told_after.as_millis() as u64),
            ("round_trip_us", round_trip.as_micros() as u64),
        ],
    );
    assert!(told.is_ok(), "not told within 5 s");
    assert_eq!(guard.lost_reason(), Some(LostReason::ServerReplaced));
    assert!(
        lost_first,
        "the new grant came before the old guard was told"
    );
    assert!(
        again.fencing_token().expect("a token") > token,
        "tokens never repeat"
    );
    // Under 100 ms and one round trip (issue 24's target; 18 to 20 ms here).
    assert!(
        told_after < Duration::from_millis(100) + round_trip,
        "told {told_after:?} after the server was back"
    );
    again.unlock().await.expect("unlock");
}
