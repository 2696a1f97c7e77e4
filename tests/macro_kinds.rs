//! The lock kinds through `#[distributed_lock]` (issue 14): `kind = "read" | "write"
//! | "fair"`, `semaphore = "..", permits = N`, and `keys` with a collection
//! placeholder (`{sku in order.skus}`: one lock per element, all at once). The
//! macro's locks are classed by their key templates for the lock-order checker.
#![cfg(feature = "macros")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{distributed_lock, HoldMode, LockClient, LockError, LockKind, LockOrderCheck};
use tokio::sync::Barrier;

/// Two readers meet at a barrier inside their bodies: they can only if both hold
/// the read lock at once.
#[distributed_lock(key = "catalogue:{shop}", kind = "read", client = locks)]
async fn browse(locks: &LockClient, shop: u32, meet: Arc<Barrier>) -> Result<LockKind, LockError> {
    meet.wait().await;
    let info = locks.inspect(format!("catalogue:{shop}")).await?;
    info.kind.ok_or_else(|| LockError::lost_lock("catalogue"))
}

#[distributed_lock(key = "catalogue:{shop}", kind = "write", fencing, client = locks)]
async fn reprice(locks: &LockClient, shop: u32) -> Result<Vec<HoldMode>, LockError> {
    let info = locks.inspect(format!("catalogue:{shop}")).await?;
    Ok(info.holders.iter().map(|holder| holder.mode).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_and_write_kinds_share_and_exclude() {
    let server = support::server();
    let locks = support::client(&server).await;
    let meet = Arc::new(Barrier::new(2));
    let together = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(browse(&locks, 1, meet.clone()), browse(&locks, 1, meet))
    })
    .await
    .expect("two readers held the lock at once");
    assert_eq!(together.0.expect("reader"), LockKind::ReadWrite);
    assert_eq!(together.1.expect("reader"), LockKind::ReadWrite);
    assert_eq!(reprice(&locks, 1).await.expect("writer"), [HoldMode::Write]);
}

#[distributed_lock(key = "queue:{id}", kind = "fair", client = locks)]
async fn served(locks: &LockClient, id: u32) -> Result<Option<LockKind>, LockError> {
    Ok(locks.inspect(format!("queue:{id}")).await?.kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fair_kind_takes_a_fair_lock() {
    let server = support::server();
    let locks = support::client(&server).await;
    assert_eq!(served(&locks, 3).await.expect("fair"), Some(LockKind::Fair));
}

/// At most two exports at once, however many are called.
#[distributed_lock(semaphore = "exports:{tenant}", permits = 2, client = locks)]
async fn export(
    locks: &LockClient,
    tenant: &str,
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
) -> Result<(), LockError> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(30)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    let _ = (locks, tenant);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_lets_its_permits_in_and_no_more() {
    let server = support::server();
    let locks = support::client(&server).await;
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let (locks, inside, most) = (locks.clone(), inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            export(&locks, "acme", inside, most).await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("export");
    }
    assert_eq!(most.load(Ordering::SeqCst), 2, "two at once, and no more");
}

struct Cart {
    id: u32,
    skus: Vec<String>,
}

/// Every SKU of the cart, and the cart itself, at once.
#[distributed_lock(keys = ["cart:{cart.id}", "inventory:{sku in cart.skus}"], client = locks)]
async fn checkout(
    locks: &LockClient,
    server: &distlock_testkit::RedisServer,
    cart: &Cart,
) -> Result<Vec<u64>, LockError> {
    let _ = locks;
    let mut names = vec![format!("cart:{}", cart.id)];
    names.extend(cart.skus.iter().map(|sku| format!("inventory:{sku}")));
    Ok(names
        .iter()
        .map(|name| support::redis_count(server, name))
        .collect())
}

/// Only a collection: one lock per element.
#[distributed_lock(keys = "inventory:{sku in skus}", client = locks)]
async fn restock(locks: &LockClient, skus: &[&str]) -> Result<usize, LockError> {
    let _ = locks;
    Ok(skus.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_placeholder_takes_one_lock_per_element_at_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    let cart = Cart {
        id: 9,
        skus: vec!["figs".into(), "eggs".into(), "figs".into()],
    };
    let counts = checkout(&locks, &server, &cart).await.expect("checkout");
    assert_eq!(counts, [1, 1, 1, 1], "the cart and every SKU held once");
    for name in ["cart:9", "inventory:figs", "inventory:eggs"] {
        assert_eq!(support::redis_count(&server, name), 0, "{name} released");
    }
    assert_eq!(
        restock(&locks, &["apple", "bread"]).await.expect("restock"),
        2
    );
    // An empty collection is an empty list of names: refused, nothing taken.
    let empty = restock(&locks, &[]).await;
    assert!(
        matches!(empty, Err(LockError::InvalidName { .. })),
        "{empty:?}"
    );
}

#[distributed_lock(key = "order:{order}", client = locks)]
async fn pay(locks: &LockClient, order: u32, sku: &str) -> Result<(), LockError> {
    take_stock(locks, sku).await
}

#[distributed_lock(key = "inventory:{sku}", client = locks)]
async fn take_stock(locks: &LockClient, sku: &str) -> Result<(), LockError> {
    let _ = locks;
    Ok(())
}

#[distributed_lock(key = "inventory:{sku}", client = locks)]
async fn refund(locks: &LockClient, order: u32, sku: &str) -> Result<(), LockError> {
    cancel(locks, order).await
}

#[distributed_lock(key = "order:{order}", client = locks)]
async fn cancel(locks: &LockClient, order: u32) -> Result<(), LockError> {
    let _ = locks;
    Ok(())
}

/// The macro classes its locks by their key templates: `order:{order}` then
/// `inventory:{sku}` in one function, the other way round in another, for other
/// orders and other SKUs, is the inversion, named by the templates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_functions_are_checked_by_their_templates() {
    let server = support::server();
    let locks = support::builder(&server)
        .lock_order(LockOrderCheck::Strict)
        .connect()
        .await
        .expect("connect");
    pay(&locks, 1, "apple")
        .await
        .expect("order, then inventory");
    let refused = refund(&locks, 2, "bread").await;
    match refused {
        Err(LockError::LockOrderInversion {
            holding, taking, ..
        }) => {
            assert_eq!(
                (holding.as_str(), taking.as_str()),
                ("inventory:{sku}", "order:{order}")
            );
        }
        other => panic!("expected an inversion, got {other:?}"),
    }
}

#[distributed_lock(semaphore = "exports:max", permits = 1000000, client = locks)]
async fn widest_semaphore(locks: &LockClient) -> Result<(), LockError> {
    let _ = locks;
    Ok(())
}

/// `#[distributed_lock]` refuses permit counts outside 1..=1,000,000 at compile
/// time: the same bound as the core's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_bounds_agree_with_the_core() {
    assert_eq!(distlock::MAX_PERMITS, 1_000_000);
    let server = support::server();
    let locks = support::client(&server).await;
    widest_semaphore(&locks)
        .await
        .expect("the most permits is a valid count");
}
