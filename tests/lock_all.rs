//! Many names at once (issue 14, multi-key lock): `lock_all` takes every name or
//! none, in one canonical order, re-enters the names the chain holds, and gives
//! every name back together. Real servers through the testkit; the locks are read
//! from Redis.

mod support;

use std::time::Duration;

use distlock::{LockError, MAX_LOCK_ALL};
use rand::Rng;
use support::{eventually, redis_count as hold_count};
use tokio::time::Instant;

/// Whether `name` is held in Redis: some owner has a hold count in its hash.
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
    let (first, second) = (
        support::client(&server).await,
        support::client(&server).await,
    );
    let start = Instant::now();
    let overlaps =
        support::sets_in_opposite_orders(&first, &second, ["cart:a", "cart:b", "cart:c"], ROUNDS)
            .await;
    println!("{} sets in {:?}", 2 * ROUNDS, start.elapsed());
    assert_eq!(overlaps, 0, "two sets held at once");
    for name in ["cart:a", "cart:b", "cart:c"] {
        assert!(!held(&server, name), "{name} left held");
    }
}

/// One name of the set is held by another client: the set is not had, the error
/// names the busy lock, and the other names are free (on one server they were never
/// taken; where names are taken one by one, they were given back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_name_held_elsewhere_is_not_taken_and_leaves_the_others_free() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
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

/// On one server the set is taken by one script run, whole or not at all: while it
/// waits for a name held elsewhere it holds none of the others, and the release of
/// that name lets it take them all at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_server_a_waiting_set_holds_nothing_and_is_taken_in_one_run() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;

    let before = support::client_requests(&server);
    let all = locks
        .lock_all(["one:a", "one:b", "one:c", "one:d", "one:e"])
        .await
        .expect("lock_all");
    assert_eq!(
        support::client_requests(&server) - before,
        1,
        "five names, one request"
    );
    all.unlock().await.expect("unlock");

    let busy = other.lock("one:c").await.expect("lock");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .lock_all(["one:a", "one:b", "one:c", "one:d", "one:e"])
                .wait(Duration::from_secs(5))
                .await
        }
    });
    let subscribed = eventually(Duration::from_secs(2), || {
        support::channel_subscribers(&server, "one:c") == 1
    })
    .await;
    assert!(subscribed, "the set waits for one:c's release");
    tokio::time::sleep(Duration::from_millis(100)).await;
    for name in ["one:a", "one:b", "one:d", "one:e"] {
        assert!(!held(&server, name), "{name} held while the set waits");
    }
    let released = Instant::now();
    busy.unlock().await.expect("unlock");
    let all = waiter.await.expect("join").expect("the set");
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "the set was not woken by the release: {:?}",
        released.elapsed()
    );
    for name in ["one:a", "one:b", "one:c", "one:d", "one:e"] {
        assert_eq!(hold_count(&server, name), 1, "{name}");
    }
    all.unlock().await.expect("unlock");
}

/// The run that takes a set gets its reply late (after the response timeout): the
/// set is asked for again under a fresh owner id, and the late run's holds are
/// found and given back; each name ends up held once, by the set's guard, and free
/// after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_whose_reply_was_late_is_held_once() {
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_millis(300)).await;
    let names = ["late:a", "late:b", "late:c"];
    support::replies_late(&proxy, Duration::from_millis(450));
    let request = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock_all(names).wait(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    support::replies_late(&proxy, Duration::ZERO);
    let all = request.await.expect("join").expect("the set, in the end");
    for name in names {
        assert_eq!(hold_count(&server, name), 1, "{name} held once");
    }
    let owners: Vec<_> = names
        .iter()
        .map(|name| support::redis_holder(&server, name))
        .collect();
    assert!(
        owners.windows(2).all(|pair| pair[0] == pair[1]),
        "one owner: {owners:?}"
    );
    all.unlock().await.expect("unlock");
    let clean = eventually(Duration::from_secs(3), || {
        names.iter().all(|name| !held(&server, name))
    })
    .await;
    assert!(clean, "left held: {:?}", support::leaks(&server));
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
    let before = support::client_requests(&server);

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

    let after = support::client_requests(&server);
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

/// Releasing a set gives every name back at once: while releases are on their way
/// (replies slowed to 30 ms here, so that nothing depends on the machine's load),
/// the set's other releases queue and go together, in fewer script runs than names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_released_together() {
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_secs(2)).await;
    let names: Vec<String> = (0..8).map(|i| format!("together:{i}")).collect();
    let all = locks.lock_all(&names).await.expect("lock_all");
    support::replies_late(&proxy, Duration::from_millis(30));
    let before = support::script_calls(&server);
    all.unlock().await.expect("unlock");
    let runs = support::script_calls(&server) - before;
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
    let [locks, other] = support::clients(&server).await;
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

/// A key of one name holds something distlock did not write (another type, a hash
/// without `#kind`, or a hash of another layout version): the set is a
/// `KeyConflict` naming it, and nothing is written, neither there nor at the other
/// names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_value_at_one_name_is_a_conflict_and_writes_nothing() {
    let server = support::server();
    let locks = support::client(&server).await;
    let other_layout = [
        "HSET",
        distlock::layout::KIND,
        "lock",
        distlock::layout::LAYOUT,
        "2",
        "o",
        "1",
    ];
    for (value, kind) in [
        (&["SET", "not a lock"][..], "string"),
        (&["HSET", "f", "v"][..], "hash"),
        (&other_layout[..], "another layout"),
    ] {
        let key = support::lock_key("foreign:b");
        let mut args = vec![value[0], key.as_str()];
        args.extend_from_slice(&value[1..]);
        server.cmd(&args).expect("write the foreign value");
        let err = locks
            .lock_all(["foreign:a", "foreign:b", "foreign:c"])
            .await
            .expect_err("a conflict");
        match &err {
            LockError::KeyConflict { name, .. } => assert_eq!(name, "foreign:b", "{kind}"),
            other => panic!("{kind}: expected a key conflict, got {other:?}"),
        }
        let keys = server.cmd(&["KEYS", "*"]).expect("KEYS");
        assert_eq!(keys.trim(), key, "{kind}: only the foreign key exists");
        server.cmd(&["DEL", &key]).expect("DEL");
    }
}

/// `err` is a `KindConflict` at `name`, held as `held_as`.
fn assert_kind_conflict(err: &LockError, name: &str, held_as: &str) {
    match err {
        LockError::KindConflict {
            name: at,
            held_as: found,
            ..
        } => assert_eq!((at.as_str(), *found), (name, held_as)),
        other => panic!("expected a kind conflict at {name}, got {other:?}"),
    }
}

/// One name of the set is held as another kind of lock (a semaphore, a read lock):
/// the set is a `KindConflict` that names that lock and what it is held as, and
/// nothing is written at the other names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_held_as_another_kind_is_a_kind_conflict_and_writes_nothing() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let permit = other
        .semaphore("kinds:b", 4)
        .acquire()
        .await
        .expect("permit");
    let err = locks
        .lock_all(["kinds:a", "kinds:b", "kinds:c"])
        .await
        .expect_err("a kind conflict");
    assert_kind_conflict(&err, "kinds:b", "a semaphore");
    assert!(!held(&server, "kinds:a"), "kinds:a written");
    assert!(!held(&server, "kinds:c"), "kinds:c written");
    permit.unlock().await.expect("permit back");

    let read = other.read_lock("kinds:c").await.expect("read");
    let err = locks
        .lock_all(["kinds:a", "kinds:c"])
        .await
        .expect_err("a kind conflict");
    assert_kind_conflict(&err, "kinds:c", "a read-write lock");
    assert!(!held(&server, "kinds:a"), "kinds:a written");
    read.unlock().await.expect("read back");
}
