//! Many names at once (issue 14, multi-key lock): `lock_all` takes every name or
//! none, in one canonical order, re-enters the names the chain holds, and gives
//! every name back together. Real servers through the testkit; the locks are read
//! from Redis.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockError, MAX_LOCK_ALL};
use rand::Rng;
use support::{eventually, redis_count as hold_count};
use tokio::time::Instant;

/// Whether `name` is held in Redis (not free, not a tombstone).
fn held(server: &distlock_testkit::RedisServer, name: &str) -> bool {
    support::held(server, &support::lock_key(name))
}

/// Two clients take the same three names, listed in opposite orders, 1,000 rounds
/// each, with no pause: a caller that took its names one by one in its own order
/// would hold one and wait for the other's for ever (here: until its wait ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_listing_the_same_names_in_opposite_orders_never_deadlock() {
    const ROUNDS: usize = 1_000;
    let server = support::server();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for order in [
        ["cart:a", "cart:b", "cart:c"],
        ["cart:c", "cart:b", "cart:a"],
    ] {
        let locks = support::client(&server).await;
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        callers.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let all = locks
                    .lock_all(order)
                    .wait(Duration::from_secs(5))
                    .await
                    .unwrap_or_else(|err| panic!("round {round} of {order:?}: {err}"));
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                all.unlock().await.expect("unlock");
            }
        }));
    }
    let start = Instant::now();
    for caller in callers {
        caller.await.expect("caller");
    }
    println!("{} sets in {:?}", 2 * ROUNDS, start.elapsed());
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two sets held at once");
    for name in ["cart:a", "cart:b", "cart:c"] {
        assert!(!held(&server, name), "{name} left held");
    }
}

/// One name of the set is held by another client: the set is not had, the error
/// names the busy lock, and the names taken before it are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_name_held_elsewhere_is_not_taken_and_leaves_the_others_free() {
    let server = support::server();
    let locks = support::client(&server).await;
    let other = support::client(&server).await;
    let busy = other.lock("set:b").await.expect("lock");
    let result = locks
        .lock_all(["set:c", "set:a", "set:b"])
        .wait(Duration::from_millis(300))
        .await;
    match result {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "set:b"),
        other => panic!("expected a timeout on set:b, got {other:?}"),
    }
    assert!(!held(&server, "set:a"), "set:a was given back");
    assert!(!held(&server, "set:c"), "set:c was never taken");
    assert_eq!(hold_count(&server, "set:b"), 1, "the other client's hold");
    busy.unlock().await.expect("unlock");
    let all = locks
        .lock_all(["set:c", "set:a", "set:b"])
        .await
        .expect("free now");
    assert_eq!(
        all.names().collect::<Vec<_>>(),
        ["set:a", "set:b", "set:c"],
        "taken in the canonical order"
    );
    all.unlock().await.expect("unlock");
}

/// A chain that holds one name of a set re-enters it (its count goes up, under the
/// chain's owner) and takes the others; releasing the set gives back one hold of
/// each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_re_enters_the_names_its_chain_holds() {
    let server = support::server();
    let locks = support::client(&server).await;
    let outer = locks.lock("re:a").await.expect("lock");
    let owner = support::redis_holder(&server, "re:a");
    outer
        .scope(async {
            let all = locks.lock_all(["re:b", "re:a"]).await.expect("lock_all");
            let counts: Vec<u64> = all.guards().iter().map(|g| g.hold_count()).collect();
            assert_eq!(counts, [2, 1]);
            assert_eq!(hold_count(&server, "re:a"), 2);
            assert_eq!(support::redis_holder(&server, "re:a"), owner);
            assert_eq!(hold_count(&server, "re:b"), 1);
            // Inside the set's scope, each name re-enters.
            all.scope(async {
                let again = locks.lock("re:b").await.expect("re-enter");
                assert_eq!(again.hold_count(), 2);
                again.unlock().await.expect("unlock");
            })
            .await;
            all.unlock().await.expect("unlock the set");
        })
        .await;
    assert_eq!(hold_count(&server, "re:a"), 1, "the outer hold remains");
    assert!(!held(&server, "re:b"));
    outer.unlock().await.expect("unlock");
    assert!(!held(&server, "re:a"));
}

/// Bad input is refused before anything is sent; duplicates count once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_oversized_sets_are_refused_and_duplicates_count_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    let before =
        support::command_calls(&server, "evalsha") + support::command_calls(&server, "set");

    let none: [&str; 0] = [];
    let err = locks.lock_all(none).await.expect_err("no names");
    assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");
    assert!(err.to_string().contains("no names"), "{err}");

    let many: Vec<String> = (0..=MAX_LOCK_ALL).map(|i| format!("many:{i}")).collect();
    let err = locks.lock_all(&many).await.expect_err("too many");
    assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");

    let err = locks
        .lock_all(["fine", ""])
        .await
        .expect_err("an empty name");
    assert!(matches!(err, LockError::InvalidName { .. }), "{err:?}");

    let after = support::command_calls(&server, "evalsha") + support::command_calls(&server, "set");
    assert_eq!(after, before, "nothing was sent");
    assert!(server.cmd(&["KEYS", "*"]).expect("KEYS").is_empty());

    let all = locks
        .lock_all(["dup:x", "dup:y", "dup:x"])
        .await
        .expect("lock_all");
    assert_eq!(all.names().collect::<Vec<_>>(), ["dup:x", "dup:y"]);
    assert_eq!(hold_count(&server, "dup:x"), 1, "taken once");
    all.unlock().await.expect("unlock");
}

/// Releasing a set gives every name back at once: on one server the releases go
/// together, in fewer script runs than names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_released_together() {
    let server = support::server();
    let locks = support::client(&server).await;
    let names: Vec<String> = (0..8).map(|i| format!("together:{i}")).collect();
    let all = locks.lock_all(&names).await.expect("lock_all");
    let before = support::command_calls(&server, "evalsha");
    all.unlock().await.expect("unlock");
    let runs = support::command_calls(&server, "evalsha") - before;
    assert!(
        runs < names.len() as u64,
        "{runs} script runs for {} releases",
        names.len()
    );
    for name in &names {
        assert!(!held(&server, name), "{name} left held");
    }
}

/// Adversarial: sets of five names, one of them now and then held by another
/// client, with every set future dropped at a random point (its wait, an attempt
/// in flight, between two names). Nothing is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_dropped_at_random_points_leave_no_name_held() {
    let server = support::server();
    let locks = support::client(&server).await;
    let other = support::client(&server).await;
    let names: Vec<String> = (0..5).map(|i| format!("drop:{i}")).collect();
    let mut rng = rand::rng();
    let mut taken = 0;
    for round in 0..200 {
        let blocker = if round % 3 == 0 {
            Some(
                other
                    .lock(names[rng.random_range(0..5)].as_str())
                    .await
                    .expect("lock"),
            )
        } else {
            None
        };
        let patience = Duration::from_micros(rng.random_range(0..3_000));
        let request = locks.lock_all(&names).wait(Duration::from_millis(20));
        if let Ok(Ok(all)) = tokio::time::timeout(patience, request).await {
            taken += 1;
            if rng.random_bool(0.5) {
                all.unlock().await.expect("unlock");
            } else {
                drop(all);
            }
        }
        if let Some(blocker) = blocker {
            blocker.unlock().await.expect("unlock");
        }
    }
    println!("{taken} of 200 sets taken");
    let clean = eventually(Duration::from_secs(3), || {
        names.iter().all(|name| !held(&server, name))
    })
    .await;
    assert!(clean, "left held: {:?}", support::leaks(&server));
}
