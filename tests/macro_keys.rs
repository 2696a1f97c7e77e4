//! `#[distributed_lock(keys = [..])]`: an annotated function that takes several locks
//! at once (`LockClient::lock_all`), whatever order its templates list them in.
#![cfg(feature = "macros")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{current_lock, distributed_lock, LockClient, LockError};

/// What the body saw: whether each lock of the set was held in Redis by one owner,
/// and whether another client could take one of them.
#[derive(Debug)]
struct Seen {
    counts: Vec<u64>,
    innermost: Option<String>,
}

#[distributed_lock(keys = ["order:{order}", "inventory:{sku}"], client = locks)]
async fn checkout(
    locks: &LockClient,
    server: &distlock_testkit::RedisServer,
    order: u32,
    sku: &str,
) -> Result<Seen, LockError> {
    let counts = [format!("order:{order}"), format!("inventory:{sku}")]
        .iter()
        .map(|name| support::redis_count(server, name))
        .collect();
    // Inside the set's scope, either name re-enters.
    let again = locks.lock(format!("inventory:{sku}")).await?;
    assert_eq!(again.hold_count(), 2);
    again.unlock().await?;
    Ok(Seen {
        counts,
        innermost: current_lock().map(|held| held.name().to_owned()),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_function_holds_every_key_while_its_body_runs() {
    let server = support::server();
    let locks = support::client(&server).await;
    let seen = checkout(&locks, &server, 7, "apple")
        .await
        .expect("checkout");
    assert_eq!(
        seen.counts,
        [1, 1],
        "both held while the body ran: {seen:?}"
    );
    // The set's scope ends with the last lock taken (the canonical order).
    assert_eq!(seen.innermost.as_deref(), Some("order:7"));
    assert_eq!(support::redis_count(&server, "order:7"), 0, "released");
    assert_eq!(
        support::redis_count(&server, "inventory:apple"),
        0,
        "released"
    );
}

#[distributed_lock(keys = ["inventory:{first}", "inventory:{second}"], client = locks, wait = "5s")]
async fn move_stock(
    locks: &LockClient,
    first: &str,
    second: &str,
    inside: &AtomicUsize,
) -> Result<bool, LockError> {
    let alone = inside.fetch_add(1, Ordering::SeqCst) == 0;
    tokio::task::yield_now().await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(alone)
}

/// Two callers move stock between the same two SKUs in opposite directions, so
/// their templates list the locks in opposite orders: taken as one set in one
/// order, they never deadlock, and never overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_calls_listing_keys_in_opposite_orders_never_deadlock() {
    let server = support::server();
    let inside = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for (first, second) in [("apple", "bread"), ("bread", "apple")] {
        let locks = support::client(&server).await;
        let inside = inside.clone();
        callers.push(tokio::spawn(async move {
            for round in 0..300 {
                let alone = move_stock(&locks, first, second, &inside)
                    .await
                    .unwrap_or_else(|err| panic!("round {round}, {first} to {second}: {err}"));
                assert!(alone, "two callers inside at once");
            }
        }));
    }
    for caller in callers {
        tokio::time::timeout(Duration::from_secs(60), caller)
            .await
            .expect("no deadlock")
            .expect("caller");
    }
}

#[distributed_lock(keys = ["busy:a", "busy:b"], client = locks, wait = "200ms")]
async fn never_runs(locks: &LockClient, ran: &AtomicUsize) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// One key of the set held elsewhere: the body does not run, the error names the
/// busy lock, and no key of the set is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_keeps_the_body_from_running_and_leaves_nothing_held() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let busy = other.lock("busy:b").await.expect("lock");
    let ran = AtomicUsize::new(0);
    let err = never_runs(&locks, &ran).await.expect_err("busy");
    assert!(
        matches!(&err, LockError::Timeout { name, .. } if name == "busy:b"),
        "{err:?}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the body ran");
    assert_eq!(
        support::redis_count(&server, "busy:a"),
        0,
        "busy:a left held"
    );
    busy.unlock().await.expect("unlock");
}
