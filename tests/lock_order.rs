//! The lock-order checker (issue 15): a call chain that takes two locks in the order
//! opposite to one another chain took them in is warned of once, with both classes
//! and the call sites, or refused in strict mode, before anything deadlocks.
//! Re-entries, `lock_all` and chains that agree on the order are not inversions.
//! Real servers through the testkit; warnings captured from `tracing`.

mod support;

use std::future::IntoFuture;

use distlock::{LockClient, LockError, LockOrderCheck};
use distlock_testkit::RedisServer;

async fn client(server: &RedisServer, check: LockOrderCheck) -> LockClient {
    support::builder(server)
        .lock_order(check)
        .connect()
        .await
        .expect("connect")
}

/// Takes `first`, then `second` inside its scope; gives both back.
async fn nested(locks: &LockClient, first: &str, second: &str) -> Result<(), LockError> {
    let outer = locks.lock(first).await?;
    let inner = outer.scope(locks.lock(second).into_future()).await;
    let result = match inner {
        Ok(inner) => inner.unlock().await,
        Err(err) => Err(err),
    };
    outer.unlock().await?;
    result
}

/// Strict: `order:1` then `inventory:2` in one chain, `inventory:3` then `order:4`
/// in another (the same classes, `order:{#}` and `inventory:{#}`, the other way
/// round): the second is refused before anything is sent, with both classes and
/// the four call sites in the error; and it is not held afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mode_refuses_the_inversion_with_both_call_sites() {
    let server = support::server();
    let locks = client(&server, LockOrderCheck::Strict).await;
    nested(&locks, "order:1", "inventory:2")
        .await
        .expect("order, then inventory");
    let calls = support::script_calls(&server);
    let requests = support::client_requests(&server);
    let outer = locks.lock("inventory:3").await.expect("inventory");
    let sent_for_outer = support::client_requests(&server) - requests;
    let scripts_for_outer = support::script_calls(&server) - calls;
    let before = support::client_requests(&server);
    let refused = outer.scope(locks.lock("order:4").into_future()).await;
    let after = support::client_requests(&server);
    match &refused {
        Err(LockError::LockOrderInversion {
            holding,
            taking,
            here,
            before,
            ..
        }) => {
            assert_eq!(
                (holding.as_str(), taking.as_str()),
                ("inventory:{#}", "order:{#}")
            );
            assert_eq!(here.matches("lock_order.rs").count(), 2, "{here}");
            assert_eq!(before.matches("lock_order.rs").count(), 2, "{before}");
        }
        other => panic!("expected an inversion, got {other:?}"),
    }
    let message = refused.expect_err("refused").to_string();
    assert!(
        message.contains("take them in one order everywhere"),
        "{message}"
    );
    assert_eq!(after, before, "the refused request was sent");
    // A first acquisition is one run of acquire.lua (no plain `SET` any more).
    assert_eq!(sent_for_outer, 1, "the outer lock: one request");
    assert_eq!(scripts_for_outer, 1, "the outer lock: one EVALSHA");
    assert!(!support::held(&server, &support::lock_key("order:4")));
    outer.unlock().await.expect("unlock");
}

/// Warn (the default): the inversion is warned of once, however often it happens,
/// naming both classes; the acquisitions go ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_warns_of_an_inversion_once() {
    let captured = support::capture_warnings();
    let server = support::server();
    let locks = client(&server, LockOrderCheck::Warn).await;
    nested(&locks, "warn-a:1", "warn-b:1")
        .await
        .expect("a, then b");
    for _ in 0..3 {
        nested(&locks, "warn-b:2", "warn-a:2")
            .await
            .expect("b, then a: warned, not refused");
    }
    let text = captured.text();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("warn-a:{#}") && line.contains("asked for while holding"))
        .collect();
    assert_eq!(warnings.len(), 1, "{text}");
    assert!(warnings[0].contains("warn-b:{#}"), "{}", warnings[0]);
    assert!(warnings[0].contains("lock_order.rs"), "{}", warnings[0]);
}

/// No inversion: re-entry (the same name inside its own scope), two chains that
/// take the same classes in the same order, `lock_all` in either listing, one
/// class taken twice, and labels that name what differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entries_lock_all_and_one_order_are_not_inversions() {
    let server = support::server();
    let locks = client(&server, LockOrderCheck::Strict).await;
    nested(&locks, "same:1", "same:1")
        .await
        .expect("a re-entry");
    nested(&locks, "x:1", "y:1").await.expect("x, then y");
    nested(&locks, "x:2", "y:2").await.expect("x, then y again");
    nested(&locks, "x:3", "x:4").await.expect("one class");
    for names in [["set:a", "set:b"], ["set:b", "set:a"]] {
        let set = locks.lock_all(names).await.expect("a set");
        set.unlock().await.expect("unlock");
    }
    // Labels: SKUs by name are one class when labelled so.
    let outer = locks.lock("cart:1").await.expect("cart");
    let inner = outer
        .scope(
            locks
                .lock("inventory:bread")
                .label("inventory:{sku}")
                .into_future(),
        )
        .await
        .expect("cart, then inventory");
    inner.unlock().await.expect("unlock");
    outer.unlock().await.expect("unlock");
    let outer = locks
        .lock("inventory:apple")
        .label("inventory:{sku}")
        .await
        .expect("inventory");
    let refused = outer.scope(locks.lock("cart:2").into_future()).await;
    assert!(
        matches!(&refused, Err(LockError::LockOrderInversion { holding, .. }) if holding == "inventory:{sku}"),
        "{refused:?}"
    );
    outer.unlock().await.expect("unlock");
}

/// Off: nothing is checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_checks_nothing() {
    let server = support::server();
    let locks = client(&server, LockOrderCheck::Off).await;
    nested(&locks, "off-a:1", "off-b:1")
        .await
        .expect("a, then b");
    nested(&locks, "off-b:1", "off-a:1")
        .await
        .expect("b, then a");
}

async fn sharing(server: &RedisServer, check: LockOrderCheck, share: bool) -> LockClient {
    support::builder(server)
        .lock_order(check)
        .share_lock_order(share)
        .connect()
        .await
        .expect("connect")
}

/// Two clients (as two services would be) each take two classes, in opposite
/// orders. Each client's own memory sees one order only: without sharing, nothing is
/// found; with the edges shared in Redis, the second client is warned of the first
/// one's order, with its pid and call sites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_edges_find_an_inversion_between_two_clients() {
    let captured = support::capture_warnings();
    let server = support::server();

    let alone_a = sharing(&server, LockOrderCheck::Warn, false).await;
    let alone_b = sharing(&server, LockOrderCheck::Warn, false).await;
    nested(&alone_a, "solo-a:1", "solo-b:1")
        .await
        .expect("a, b");
    nested(&alone_b, "solo-b:2", "solo-a:2")
        .await
        .expect("b, a");

    let first = sharing(&server, LockOrderCheck::Warn, true).await;
    let second = sharing(&server, LockOrderCheck::Warn, true).await;
    nested(&first, "shared-a:1", "shared-b:1")
        .await
        .expect("a, then b");
    // The first client's edge reaches Redis in the background.
    assert!(
        support::eventually(std::time::Duration::from_secs(5), || {
            server
                .cmd(&["HLEN", "distlock:lock-order"])
                .is_ok_and(|n| n == "1")
        })
        .await,
        "the first client's edge is in the shared graph"
    );
    for _ in 0..3 {
        nested(&second, "shared-b:2", "shared-a:2")
            .await
            .expect("b, then a: warned, not refused");
    }
    let warned = support::eventually(std::time::Duration::from_secs(5), || {
        captured.text().contains("shared-a:{#}")
    })
    .await;
    let text = captured.text();
    assert!(
        warned,
        "the inversion between clients is warned of:\n{text}"
    );
    let warnings: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("shared-a:{#}") && line.contains("asked for while holding"))
        .collect();
    assert_eq!(warnings.len(), 1, "once:\n{text}");
    let pid = format!("pid {}", std::process::id());
    assert!(
        warnings[0].contains(&pid),
        "the other side is named: {}",
        warnings[0]
    );
    assert_eq!(
        warnings[0].matches("lock_order.rs").count(),
        4,
        "{}",
        warnings[0]
    );
    assert!(
        !text.contains("solo-a:{#}"),
        "unshared edges stay in each client: nothing found\n{text}"
    );
    // Recorded once per client: the one edge, not its reverse (an inversion).
    assert_eq!(
        server.cmd(&["HLEN", "distlock:lock-order"]).expect("HLEN"),
        "1"
    );
}

/// Strict and shared: the acquisition that inverts another client's order waits for
/// the graph's answer and is refused, naming the other side; nothing is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_and_shared_refuses_another_clients_inverted_order() {
    let server = support::server();
    let first = sharing(&server, LockOrderCheck::Strict, true).await;
    let second = sharing(&server, LockOrderCheck::Strict, true).await;
    nested(&first, "refund:1", "ledger:1")
        .await
        .expect("refund, then ledger");
    let refused = nested(&second, "ledger:2", "refund:2").await;
    match &refused {
        Err(LockError::LockOrderInversion {
            holding,
            taking,
            before,
            ..
        }) => {
            assert_eq!(
                (holding.as_str(), taking.as_str()),
                ("ledger:{#}", "refund:{#}")
            );
            assert!(
                before.contains(&format!("pid {}", std::process::id())),
                "{before}"
            );
            assert_eq!(before.matches("lock_order.rs").count(), 2, "{before}");
        }
        other => panic!("expected an inversion, got {other:?}"),
    }
    assert!(!support::held(&server, &support::lock_key("refund:2")));
    assert!(!support::held(&server, &support::lock_key("ledger:2")));
}
