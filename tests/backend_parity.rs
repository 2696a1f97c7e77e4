//! The same behaviour on every backend: one server, a cluster, Sentinel and a
//! five-node Redlock; every lock kind (semaphores and fair locks are refused on
//! Redlock).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use std::future::IntoFuture;

use distlock::{LockClient, LockClientBuilder, LockError, LockKind};
use distlock_testkit::{RedisCluster, RedisServer, SentinelGroup};
use tokio::time::Instant;

const LEASE: Duration = Duration::from_millis(900);

/// Runs the shared behaviour checks with clients made by `builder`.
async fn behaviour(builder: impl Fn() -> LockClientBuilder, redlock: bool) {
    let locks = builder()
        .default_lease(LEASE)
        .connect()
        .await
        .expect("connect");
    let other = builder()
        .default_lease(LEASE)
        .connect()
        .await
        .expect("connect");

    // Re-entry: the count rises and falls; another owner stays out until the end.
    let guard = locks.lock("b:reentry").await.expect("lock");
    guard
        .scope(async {
            let inner = locks.lock("b:reentry").await.expect("re-entry");
            assert_eq!(inner.hold_count(), 2);
            assert_eq!(
                other
                    .inspect("b:reentry")
                    .await
                    .expect("inspect")
                    .hold_count,
                2
            );
            assert!(other.try_lock("b:reentry").await.expect("try").is_none());
            inner.unlock().await.expect("unlock");
        })
        .await;
    assert_eq!(
        other
            .inspect("b:reentry")
            .await
            .expect("inspect")
            .hold_count,
        1
    );
    guard.unlock().await.expect("unlock");
    assert!(!other.inspect("b:reentry").await.expect("inspect").held);

    // Mutual exclusion under contention, across two clients.
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let counter = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..6 {
        let client = if task % 2 == 0 {
            locks.clone()
        } else {
            other.clone()
        };
        let (inside, overlaps, counter) = (inside.clone(), overlaps.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..20 {
                let guard = client
                    .lock("b:counter")
                    .wait(Duration::from_secs(30))
                    .await
                    .expect("lock");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(counter.load(Ordering::SeqCst), 120);

    // A busy lock: try_lock says so, a wait times out after the wait.
    let guard = locks.lock("b:busy").await.expect("lock");
    assert!(other.try_lock("b:busy").await.expect("try").is_none());
    let start = Instant::now();
    let err = other
        .lock("b:busy")
        .wait(Duration::from_millis(300))
        .await
        .expect_err("busy");
    // On Redlock, a majority held by another owner is QuorumNotReached; busy on all.
    assert!(err.is_busy(), "{err}");
    assert_eq!(err.is_timeout(), !err.is_quorum_not_reached(), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(300));

    // The watchdog keeps it past several leases; the waiter wakes on the release.
    let waiting = support::acquired_at(&other, "b:busy", Duration::from_secs(20));
    tokio::time::sleep(LEASE * 2).await;
    assert!(!guard.is_lost());
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let woke = waiting
        .await
        .expect("waiter")
        .expect("lock")
        .saturating_duration_since(released);
    assert!(
        woke < LEASE / 2,
        "the waiter woke {woke:?} after the release"
    );

    // A force-unlock is reported to the holder.
    let guard = locks.lock("b:forced").await.expect("lock");
    assert!(other.force_unlock("b:forced").await.expect("force_unlock"));
    tokio::time::timeout(LEASE / 3 + Duration::from_millis(700), guard.lost())
        .await
        .expect("the loss is reported");
    assert!(guard.unlock().await.expect_err("lost").is_lost());

    // Dropped guards and dropped requests leave nothing behind.
    let guard = locks.lock("b:dropped").await.expect("lock");
    drop(guard);
    let freed = other
        .lock("b:dropped")
        .wait(Duration::from_millis(500))
        .await
        .expect("freed long before the lease would end");
    let mut dropped = 0;
    for micros in [50u64, 200, 500, 1000, 2000, 4000] {
        let request = locks.lock("b:dropped").wait(Duration::from_secs(5));
        if tokio::time::timeout(Duration::from_micros(micros), request)
            .await
            .is_err()
        {
            dropped += 1;
        }
    }
    assert!(
        dropped > 0,
        "every request completed while the lock was held"
    );
    freed.unlock().await.expect("unlock");
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let info = other.inspect("b:dropped").await.expect("inspect");
        if !info.held {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a dropped request left a hold: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    many_at_once(&locks, &other).await;
    read_write(&locks, &other).await;
    semaphore(&locks, &other, redlock).await;
    fair(&locks, &other, redlock).await;
}

/// Fair locks: waiters of two clients served in the order they came; on Redlock a
/// typed error before anything is sent.
async fn fair(locks: &LockClient, other: &LockClient, redlock: bool) {
    if redlock {
        let refused = locks.fair_lock("b:fair").await;
        assert!(
            matches!(
                refused,
                Err(LockError::UnsupportedKind {
                    kind: "fair locks",
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(other.inspect("b:fair").await.expect("inspect").kind, None);
        return;
    }
    let holder = locks.fair_lock("b:fair").await.expect("fair lock");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (n, client) in [other, locks, other].into_iter().enumerate() {
        let (client, order) = (client.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = client
                .fair_lock("b:fair")
                .wait(Duration::from_secs(10))
                .await
                .expect("a waiter");
            order.lock().expect("order").push(n);
            guard.unlock().await.expect("unlock");
        }));
        let deadline = Instant::now() + Duration::from_secs(5);
        while locks.inspect("b:fair").await.expect("inspect").waiting != n as u64 + 1 {
            assert!(Instant::now() < deadline, "waiter {n} never queued");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    holder.unlock().await.expect("unlock");
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(*order.lock().expect("order"), [0, 1, 2]);
}

/// Read-write locks: readers of two clients together, a writer alone, the upgrade
/// refused, and inspect telling the holders.
async fn read_write(locks: &LockClient, other: &LockClient) {
    let first = locks.read_lock("b:rw").await.expect("read");
    let second = other.read_lock("b:rw").await.expect("a second reader");
    assert!(other.try_write_lock("b:rw").await.expect("try").is_none());
    let info = other.inspect("b:rw").await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::ReadWrite));
    assert_eq!(info.holders.len(), 2, "{info:?}");
    let upgrade = first.scope(locks.write_lock("b:rw").into_future()).await;
    assert!(
        matches!(upgrade, Err(LockError::UpgradeNotAllowed { .. })),
        "{upgrade:?}"
    );
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
    let writing = other
        .write_lock("b:rw")
        .wait(Duration::from_secs(2))
        .await
        .expect("write");
    assert!(locks.try_read_lock("b:rw").await.expect("try").is_none());
    writing.unlock().await.expect("unlock");
}

/// Semaphores: two permits, a third refused; on Redlock a typed error before
/// anything is sent.
async fn semaphore(locks: &LockClient, other: &LockClient, redlock: bool) {
    let exports = locks.semaphore("b:sem", 2);
    if redlock {
        let refused = exports.acquire().await;
        assert!(
            matches!(
                refused,
                Err(LockError::UnsupportedKind {
                    kind: "semaphores",
                    ..
                })
            ),
            "{refused:?}"
        );
        assert_eq!(other.inspect("b:sem").await.expect("inspect").kind, None);
        return;
    }
    let a = exports.acquire().await.expect("permit");
    let b = other.semaphore("b:sem", 2).acquire().await.expect("permit");
    assert!(exports.try_acquire().await.expect("try").is_none());
    let info = other.inspect("b:sem").await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::Semaphore { permits: 2 }));
    assert_eq!(info.holders.len(), 2, "{info:?}");
    a.unlock().await.expect("unlock");
    let c = exports
        .try_acquire()
        .await
        .expect("try")
        .expect("a freed permit");
    c.unlock().await.expect("unlock");
    b.unlock().await.expect("unlock");
}

/// `lock_all`: two clients take the same names (in three cluster slots) listed in
/// opposite orders, without deadlock or overlap; a set with one name held
/// elsewhere is not taken, and leaves the others free.
async fn many_at_once(locks: &LockClient, other: &LockClient) {
    let names = ["b:set:1", "b:set:2", "b:set:3"];
    let overlaps = support::sets_in_opposite_orders(locks, other, names, 50).await;
    assert_eq!(overlaps, 0, "two sets held at once");

    let busy = other.lock("b:set:2").await.expect("lock");
    let result = locks.lock_all(names).wait(Duration::from_millis(200)).await;
    assert!(
        result.is_err(),
        "a set with a name held elsewhere: {result:?}"
    );
    for name in ["b:set:1", "b:set:3"] {
        let info = other.inspect(name).await.expect("inspect");
        assert!(!info.held, "{name} left held: {info:?}");
    }
    busy.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_server() {
    let server = RedisServer::start().expect("server");
    behaviour(|| LockClient::builder().url(server.url()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster() {
    let cluster = RedisCluster::start(3, 1).expect("cluster");
    behaviour(|| LockClient::builder().cluster(cluster.urls()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel() {
    let group = SentinelGroup::start("backends", 1, 3).expect("sentinel group");
    behaviour(
        || LockClient::builder().sentinel(group.sentinel_urls(), group.master_name()),
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_five_redlock_nodes() {
    let nodes = distlock_testkit::start_many(5).expect("servers");
    behaviour(
        || LockClient::builder().redlock(nodes.iter().map(RedisServer::url)),
        true,
    )
    .await;
}
