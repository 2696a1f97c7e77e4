//! `#[distributed_lock]`: re-entry across annotated functions, exclusion of
//! concurrent callers, parallelism across keys, and what the body sees.
#![cfg(feature = "macros")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{current_lock, distributed_lock, LockClient, LockError};
use distlock_testkit::RedisServer;

/// Three annotated functions on the same key, each calling the next.
#[distributed_lock(key = "order:{id}", client = locks)]
async fn outer(locks: &LockClient, server: &RedisServer, id: u32) -> Result<u64, LockError> {
    let count = support::redis_count(server, &format!("order:{id}"));
    assert_eq!(count, 1);
    assert_eq!(current_lock().map(|held| held.hold_count()), Some(1));
    let inner = middle(locks, server, id).await?;
    // Back in the outer function: the inner holds are given back.
    assert_eq!(support::redis_count(server, &format!("order:{id}")), 1);
    Ok(inner + count)
}

#[distributed_lock(key = "order:{id}", client = locks)]
async fn middle(locks: &LockClient, server: &RedisServer, id: u32) -> Result<u64, LockError> {
    let count = support::redis_count(server, &format!("order:{id}"));
    assert_eq!(count, 2);
    let inner = inner(locks, server, id).await?;
    assert_eq!(support::redis_count(server, &format!("order:{id}")), 2);
    Ok(inner + count)
}

#[distributed_lock(key = "order:{id}", client = locks)]
async fn inner(locks: &LockClient, server: &RedisServer, id: u32) -> Result<u64, LockError> {
    let count = support::redis_count(server, &format!("order:{id}"));
    assert_eq!(current_lock().map(|held| held.hold_count()), Some(3));
    assert_eq!(
        current_lock().map(|held| held.name().to_owned()).as_deref(),
        Some("order:7")
    );
    Ok(count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_annotated_functions_reenter() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;

    let total = outer(&locks, &server, 7).await.expect("outer");
    assert_eq!(total, 1 + 2 + 3, "hold counts 1, 2, 3 seen in Redis");
    assert_eq!(support::redis_count(&server, "order:7"), 0);
    assert!(current_lock().is_none(), "no lock outside the call");
    let taken = other.try_lock("order:7").await.expect("try").expect("free");
    taken.unlock().await.expect("unlock");
}

struct Counters {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    max_inside: AtomicUsize,
}

impl Counters {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            inside: AtomicUsize::new(0),
            overlaps: AtomicUsize::new(0),
            max_inside: AtomicUsize::new(0),
        })
    }
}

#[distributed_lock(key = "account:{account}", client = locks, wait = "10s")]
async fn critical(
    locks: &LockClient,
    account: &str,
    counters: &Counters,
    hold: Duration,
) -> Result<(), LockError> {
    let now = counters.inside.fetch_add(1, Ordering::SeqCst) + 1;
    counters.max_inside.fetch_max(now, Ordering::SeqCst);
    if now > 1 {
        counters.overlaps.fetch_add(1, Ordering::SeqCst);
    }
    tokio::time::sleep(hold).await;
    counters.inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_of_one_key_exclude_each_other() {
    let server = support::server();
    let locks = support::client(&server).await;
    let counters = Counters::new();

    // Two branches of one task (same call chain, no lock held yet) and two tasks.
    let hold = Duration::from_millis(50);
    let (a, b) = tokio::join!(
        critical(&locks, "a", &counters, hold),
        critical(&locks, "a", &counters, hold),
    );
    a.expect("first branch");
    b.expect("second branch");
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let locks = locks.clone();
            let counters = counters.clone();
            tokio::spawn(async move { critical(&locks, "a", &counters, hold).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("task").expect("critical");
    }
    assert_eq!(counters.overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(counters.max_inside.load(Ordering::SeqCst), 1);
    assert_eq!(support::redis_count(&server, "account:a"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_keys_run_in_parallel() {
    let server = support::server();
    let locks = support::client(&server).await;
    let counters = Counters::new();

    // Both bodies are inside at once: each waits long enough for the other to enter.
    let hold = Duration::from_millis(300);
    let (a, b) = tokio::join!(
        critical(&locks, "x", &counters, hold),
        critical(&locks, "y", &counters, hold),
    );
    a.expect("x");
    b.expect("y");
    assert_eq!(counters.max_inside.load(Ordering::SeqCst), 2);
}

#[distributed_lock(key = "ledger:{ledger}", client = locks, fencing)]
async fn write_with_token(locks: &LockClient, ledger: u64) -> Result<u64, LockError> {
    let held = current_lock().expect("the body runs inside the lock scope");
    assert_eq!(held.name(), format!("ledger:{ledger}"));
    assert_eq!(held.hold_count(), 1);
    assert!(!held.is_lost());
    Ok(held.fencing_token().expect("fencing is on"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_lock_gives_the_fencing_token() {
    let server = support::server();
    let locks = support::client(&server).await;

    let first = write_with_token(&locks, 1).await.expect("first");
    let second = write_with_token(&locks, 1).await.expect("second");
    assert!(second > first, "tokens grow: {first} then {second}");
    let info = locks.inspect("ledger:1").await.expect("inspect");
    assert_eq!(info.last_fencing_token, Some(second));
}

#[distributed_lock(key = "rt:{id}", client = locks)]
async fn round_trips(locks: &LockClient, id: u32) -> Result<u32, LockError> {
    Ok(id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_call_is_two_round_trips() {
    let server = support::server();
    let locks = support::client(&server).await;
    // Warm up: scripts loaded, connections open.
    round_trips(&locks, 0).await.expect("warm up");

    let before = support::client_requests(&server);
    assert_eq!(round_trips(&locks, 1).await.expect("call"), 1);
    assert_eq!(
        support::client_requests(&server) - before,
        2,
        "one acquire and one release, nothing else"
    );
}
