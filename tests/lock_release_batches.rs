//! Group commit of releases: the releases of one client that are ready at the same
//! moment go to Redis as one run of `release.lua`, and each is answered as if it ran
//! alone (lock-core/src/batch.rs).

mod support;

use std::time::Duration;

use distlock::LockGuard;

/// Takes `n` locks `<prefix>:<i>` on `locks`.
async fn hold(locks: &distlock::LockClient, prefix: &str, n: usize) -> Vec<LockGuard> {
    let mut guards = Vec::new();
    for i in 0..n {
        guards.push(locks.lock(format!("{prefix}:{i}")).await.expect("lock"));
    }
    guards
}

/// Unlocks every guard from a task of its own, all released at one moment; returns
/// each `unlock()`'s result, in the order of `guards`.
async fn unlock_together(guards: Vec<LockGuard>) -> Vec<Result<(), distlock::LockError>> {
    support::all_at_once(guards.into_iter().map(LockGuard::unlock).collect()).await
}

/// Observed before batching: 64 releases at one moment were 64 script runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_ready_together_share_script_runs() {
    const LOCKS: usize = 64;
    let server = support::server();
    let locks = support::client(&server).await;
    let guards = hold(&locks, "batch", LOCKS).await;
    let before = support::script_calls(&server);
    let results = unlock_together(guards).await;
    let runs = support::script_calls(&server) - before;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for i in 0..LOCKS {
        assert_eq!(
            support::redis_count(&server, &format!("batch:{i}")),
            0,
            "lock {i}"
        );
    }
    assert!(
        runs <= (LOCKS / 4) as u64,
        "{LOCKS} releases at one moment took {runs} script runs"
    );
}

/// A batch with releases of locks that were lost: those are told so, the others
/// are released, and nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_release_as_if_it_ran_alone() {
    const LOCKS: usize = 24;
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let guards = hold(&locks, "mixed", LOCKS).await;
    // Every third lock is force-unlocked and taken by another client.
    let mut taken = Vec::new();
    for i in (0..LOCKS).step_by(3) {
        let name = format!("mixed:{i}");
        assert!(other.force_unlock(&name).await.expect("force_unlock"));
        taken.push(other.lock(&name).await.expect("take it"));
    }
    let results = unlock_together(guards).await;
    for (i, result) in results.iter().enumerate() {
        let count = support::redis_count(&server, &format!("mixed:{i}"));
        if i % 3 == 0 {
            assert!(
                matches!(result, Err(err) if err.is_lost()),
                "lock {i}: {result:?}"
            );
            assert_eq!(count, 1, "lock {i}: the other client's hold is untouched");
        } else {
            assert!(result.is_ok(), "lock {i}: {result:?}");
            assert_eq!(count, 0, "lock {i}");
        }
    }
    for guard in taken {
        guard.unlock().await.expect("the other client's unlock");
    }
}

/// Guards dropped together (their releases run in the background, in batches):
/// every lock is free soon after, and no hold is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_dropped_together_are_all_released() {
    const LOCKS: usize = 100;
    let server = support::server();
    let locks = support::client(&server).await;
    let guards = hold(&locks, "dropped", LOCKS).await;
    drop(guards);
    let freed = support::eventually(Duration::from_secs(2), || {
        (0..LOCKS).all(|i| support::redis_count(&server, &format!("dropped:{i}")) == 0)
    })
    .await;
    assert!(freed, "a dropped guard's lock is still held");
    let (keys, channels) = support::leaks(&server);
    assert!(keys.is_empty(), "{keys:?}");
    assert!(channels.is_empty(), "{channels:?}");
}

/// A batch whose reply is late (past the response timeout): every release in it is
/// retried, and the script applies each once. Each lock is held twice, so a release
/// applied twice would free it: after the inner releases, every count must be 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_batch_is_retried_and_each_release_applied_once() {
    const LOCKS: usize = 16;
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_millis(300)).await;
    let outer = hold(&locks, "late", LOCKS).await;
    let mut inner = Vec::new();
    for guard in &outer {
        let name = guard.name().to_owned();
        inner.push(
            guard
                .scope(async { locks.lock(name).await })
                .await
                .expect("re-enter"),
        );
    }
    let before = support::script_calls(&server);
    support::replies_late(&proxy, Duration::from_millis(450));
    let sent = tokio::time::Instant::now();
    let releases = tokio::spawn(unlock_together(inner));
    tokio::time::sleep(Duration::from_millis(50)).await;
    support::replies_late(&proxy, Duration::ZERO);
    let results = releases.await.expect("join");
    assert!(
        sent.elapsed() >= Duration::from_millis(300),
        "answered within the response timeout: the first replies were not late, nothing was retried"
    );
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let runs = support::script_calls(&server) - before;
    assert!(runs < (2 * LOCKS) as u64, "not batched: {runs} runs");
    for i in 0..LOCKS {
        assert_eq!(
            support::redis_count(&server, &format!("late:{i}")),
            1,
            "lock {i}"
        );
    }
    let results = unlock_together(outer).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for i in 0..LOCKS {
        assert_eq!(
            support::redis_count(&server, &format!("late:{i}")),
            0,
            "lock {i}"
        );
    }
}
