//! Mutual exclusion under contention, timeouts, and waking waiters by message.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::LockError;
use redis::AsyncCommands;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_keep_a_read_modify_write_counter_exact() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 200;
    let server = support::server();
    let locks = support::client(&server).await;
    let redis = redis::Client::open(server.url()).expect("url");
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let locks = locks.clone();
        let redis = redis.clone();
        let inside = inside.clone();
        let overlaps = overlaps.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = redis
                .get_multiplexed_async_connection()
                .await
                .expect("connect");
            for _ in 0..ROUNDS {
                let guard = locks
                    .lock("counter")
                    .wait(Duration::from_secs(30))
                    .await
                    .expect("lock");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let value: Option<u64> = conn.get("counter").await.expect("GET");
                tokio::task::yield_now().await;
                let () = conn
                    .set("counter", value.unwrap_or(0) + 1)
                    .await
                    .expect("SET");
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "critical sections overlapped"
    );
    assert_eq!(
        server.cmd(&["GET", "counter"]).expect("GET"),
        (TASKS * ROUNDS).to_string(),
        "updates were lost"
    );
    assert_eq!(support::redis_count(&server, "counter"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_on_a_busy_name_is_none_and_wait_times_out_after_the_wait() {
    let server = support::server();
    let [holder, other] = support::clients(&server).await;
    let guard = holder.lock("busy").await.expect("lock");

    assert!(other.try_lock("busy").await.expect("try_lock").is_none());

    let wait = Duration::from_millis(400);
    let start = Instant::now();
    let err = other
        .lock("busy")
        .wait(wait)
        .await
        .expect_err("busy for the whole wait");
    let elapsed = start.elapsed();
    match &err {
        LockError::Timeout { name, waited, .. } => {
            assert_eq!(name, "busy");
            assert!(*waited >= wait, "reported {waited:?}");
        }
        other => panic!("expected a timeout, got {other}"),
    }
    assert!(err.is_timeout());
    assert!(elapsed >= wait, "gave up early: {elapsed:?}");
    assert!(
        elapsed < wait + Duration::from_millis(400),
        "gave up late: {elapsed:?}"
    );
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_wakes_on_the_release_message_not_the_lease() {
    let server = support::server();
    let [holder, waiter] = support::clients(&server).await;
    // A 30 s watchdog lease: only the release message can wake the waiter in time.
    let guard = holder.lock("wake").await.expect("lock");

    let waiting = support::acquired_at(&waiter, "wake", Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let acquired = waiting.await.expect("waiter").expect("lock");
    let gap = acquired.saturating_duration_since(released);
    assert!(
        gap < Duration::from_millis(100),
        "woke {gap:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_end_when_nobody_waits() {
    let server = support::server();
    let [holder, waiter] = support::clients(&server).await;
    for round in 0..20 {
        let guard = holder.lock("sub").await.expect("lock");
        let waiting = tokio::spawn({
            let waiter = waiter.clone();
            async move { waiter.lock("sub").wait(Duration::from_secs(5)).await }
        });
        tokio::time::sleep(Duration::from_millis(if round == 0 { 50 } else { 5 })).await;
        guard.unlock().await.expect("unlock");
        waiting
            .await
            .expect("join")
            .expect("lock")
            .unlock()
            .await
            .expect("unlock");
    }
    let clean = support::eventually(Duration::from_secs(2), || {
        server
            .cmd(&["PUBSUB", "CHANNELS", "distlock:*"])
            .expect("PUBSUB")
            .is_empty()
    })
    .await;
    assert!(clean, "channels still subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_resubscribe_after_the_subscriber_connection_drops() {
    let server = support::server();
    let [holder, waiter] = support::clients(&server).await;
    let guard = holder.lock("reconnect").await.expect("lock");
    let waiting = support::acquired_at(&waiter, "reconnect", Duration::from_secs(20));
    let subscribers = || support::channel_subscribers(&server, "reconnect");
    assert!(
        support::eventually(Duration::from_secs(2), || subscribers() == 1).await,
        "the waiter subscribed"
    );
    server
        .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
        .expect("CLIENT KILL");
    assert!(
        support::eventually(Duration::from_secs(5), || subscribers() == 1).await,
        "the waiter resubscribed after the connection dropped"
    );
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let acquired = waiting.await.expect("waiter").expect("lock");
    let gap = acquired.saturating_duration_since(released);
    assert!(
        gap < Duration::from_millis(200),
        "woke {gap:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_waiter_asks_nothing_and_waits_its_turn_behind_the_earlier_one() {
    let server = support::server();
    let [holder, waiters] = support::clients(&server).await;
    let guard = holder.lock("queue").await.expect("lock");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let wait_for = |who: &'static str| {
        let (waiters, order) = (waiters.clone(), order.clone());
        tokio::spawn(async move {
            let guard = waiters
                .lock("queue")
                .wait(Duration::from_secs(10))
                .await
                .expect("lock");
            order.lock().expect("order").push(who);
            tokio::time::sleep(Duration::from_millis(50)).await;
            guard.unlock().await.expect("unlock");
        })
    };
    let subscribed = || support::channel_subscribers(&server, "queue") == 1;
    let first = wait_for("first");
    assert!(
        support::eventually(Duration::from_secs(2), subscribed).await,
        "the first waiter subscribed"
    );
    // Let the first waiter's look after subscribing come back.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let before = support::script_calls(&server);
    let second = wait_for("second");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        support::script_calls(&server) - before,
        0,
        "a waiter queued behind a waiter of its own client asks nothing until its turn"
    );

    guard.unlock().await.expect("unlock");
    first.await.expect("first");
    second.await.expect("second");
    assert_eq!(*order.lock().expect("order"), ["first", "second"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_the_subscriber_reconnects_still_wakes_the_waiter() {
    let server = support::server();
    let [holder, waiter] = support::clients(&server).await;
    for round in 0..20 {
        let name = format!("gap:{round}");
        // A long lease: only a wake-up can hand the lock over within the test's bound.
        let guard = holder
            .lock(name.as_str())
            .lease(Duration::from_secs(30))
            .await
            .expect("lock");
        let waiting = tokio::spawn({
            let (waiter, name) = (waiter.clone(), name.clone());
            async move {
                waiter
                    .lock(name.as_str())
                    .wait(Duration::from_secs(20))
                    .await
                    .map(|guard| (Instant::now(), guard))
            }
        });
        assert!(
            support::eventually(Duration::from_secs(2), || support::channel_subscribers(
                &server, &name
            ) == 1)
            .await,
            "the waiter subscribed"
        );
        server
            .cmd(&["CLIENT", "KILL", "TYPE", "pubsub"])
            .expect("CLIENT KILL");
        // Give the waiter time to be woken by the disconnection and ask again, then
        // release while its subscriber may still be reconnecting.
        tokio::time::sleep(Duration::from_millis(round % 5)).await;
        let released = Instant::now();
        guard.unlock().await.expect("unlock");
        let (acquired, guard) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the waiter was woken within 5 s, not at the end of the lease")
            .expect("join")
            .expect("lock");
        assert!(
            acquired.saturating_duration_since(released) < Duration::from_secs(2),
            "round {round}: woke {:?} after the release",
            acquired.saturating_duration_since(released)
        );
        guard.unlock().await.expect("unlock");
    }
}
