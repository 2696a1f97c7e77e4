//! Deadlocks in nested flows, seen coming and broken when they happen.
//!
//! `place_order` holds `order:{id}` and then reserves stock under `inventory:{sku}`;
//! `refund` holds `inventory:{sku}` and then cancels the order under `order:{id}`:
//! the same two locks, taken in opposite orders. Run at the same moment for the same
//! order, each holds its first lock and waits for the other's.
//!
//! - The lock-order checker warns of the inversion (once) as soon as both orders
//!   have been seen, naming both lock classes and where each was taken.
//! - Deadlock detection finds the cycle after `deadlock_check_after` (300 ms here),
//!   and breaks it when the next check finds it again: one of the two calls gets
//!   `LockError::Deadlock`, lets go of its lock on the way out, and retries; the
//!   other proceeds. Without detection both would wait until their 10 s waits ran
//!   out.
//!
//! The check at the end: the stock is back where it started (one unit reserved, one
//! refunded), and no lock is left held.
//!
//! Run it with `cargo xtask demo deadlock`, or against your own server:
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example deadlock` (also
//! `REDIS_CLUSTER_URLS`, `REDIS_SENTINEL_URLS`: see `examples/common`). Its keys start
//! with `distlock-example:`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{distributed_lock, LockError};

mod common;
use common::{Data, Target};

const ORDER: u32 = 7;
const SKU: &str = "bread";
const STOCK: i64 = 5;

/// What went wrong in the shop.
#[derive(Debug)]
enum ShopError {
    Lock(LockError),
    Redis(redis::RedisError),
}

impl From<LockError> for ShopError {
    fn from(error: LockError) -> Self {
        ShopError::Lock(error)
    }
}

impl From<redis::RedisError> for ShopError {
    fn from(error: redis::RedisError) -> Self {
        ShopError::Redis(error)
    }
}

impl fmt::Display for ShopError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShopError::Lock(error) => write!(f, "{error}"),
            ShopError::Redis(error) => write!(f, "Redis: {error}"),
        }
    }
}

impl std::error::Error for ShopError {}

struct Shop {
    redis: Data,
    started: Instant,
}

impl Shop {
    fn say(&self, what: impl fmt::Display) {
        println!("[{:>5} ms] {what}", self.started.elapsed().as_millis());
    }

    async fn add_stock(&self, sku: &str, units: i64) -> Result<i64, ShopError> {
        let mut redis = self.redis.clone();
        // GET, then SET: only the lock keeps two callers apart.
        let stock: Option<i64> = redis::cmd("GET")
            .arg(stock_key(sku))
            .query_async(&mut redis)
            .await?;
        let stock = stock.unwrap_or(0) + units;
        redis::cmd("SET")
            .arg(stock_key(sku))
            .arg(stock)
            .exec_async(&mut redis)
            .await?;
        Ok(stock)
    }
}

/// Places order `order`: holds `order:{order}`, then reserves a unit of `sku`.
#[distributed_lock(key = "order:{order}", wait = "10s")]
async fn place_order(shop: &Shop, order: u32, sku: &str) -> Result<(), ShopError> {
    shop.say(format!(
        "place_order holds order:{order}, asks for inventory:{sku}"
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    reserve(shop, sku).await
}

#[distributed_lock(key = "inventory:{sku}", wait = "10s")]
async fn reserve(shop: &Shop, sku: &str) -> Result<(), ShopError> {
    let left = shop.add_stock(sku, -1).await?;
    shop.say(format!("place_order reserved one {sku}: {left} left"));
    Ok(())
}

/// Refunds order `order`: holds `inventory:{sku}` (the other way round), then
/// cancels the order and puts the unit back, holding both: nothing is written
/// before both locks are held, so a call that breaks a deadlock and is retried
/// writes once.
#[distributed_lock(key = "inventory:{sku}", wait = "10s")]
async fn refund(shop: &Shop, order: u32, sku: &str) -> Result<(), ShopError> {
    shop.say(format!(
        "refund holds inventory:{sku}, asks for order:{order}"
    ));
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel(shop, order, sku).await
}

#[distributed_lock(key = "order:{order}", wait = "10s")]
async fn cancel(shop: &Shop, order: u32, sku: &str) -> Result<(), ShopError> {
    let left = shop.add_stock(sku, 1).await?;
    shop.say(format!("refund put one {sku} back: {left} on the shelf"));
    Ok(())
}

/// Runs `call` until it does not end in a deadlock (at most 5 times); says how
/// long each deadlock lasted before it was broken.
async fn retried<F, Fut>(shop: &Shop, what: &str, call: F) -> Result<u32, ShopError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), ShopError>>,
{
    let mut broken = 0;
    loop {
        let asked = Instant::now();
        match call().await {
            Err(ShopError::Lock(LockError::Deadlock { cycle, .. })) if broken < 5 => {
                broken += 1;
                shop.say(format!(
                    "{what}: deadlock broken after {} ms (cycle: {}); its lock was let go, \
                     retrying",
                    asked.elapsed().as_millis(),
                    cycle.join(" -> ")
                ));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => return Err(error),
            Ok(()) => return Ok(broken),
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The lock-order checker warns through `tracing`.
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_target(false)
        .init();
    let target = Target::from_env();
    println!("deadlocks against {target}\n");
    target
        .lock_client()
        .namespace("distlock-example")
        .deadlock_check_after(Some(Duration::from_millis(300)))
        .connect()
        .await?
        .install_global()?;
    let shop = Arc::new(Shop {
        redis: target.data().await?,
        started: Instant::now(),
    });
    let mut redis = shop.redis.clone();
    redis::cmd("SET")
        .arg(stock_key(SKU))
        .arg(STOCK)
        .exec_async(&mut redis)
        .await?;

    // Once each way, apart: the checker sees both orders (and warns), nothing waits.
    place_order(&shop, 1, SKU).await?;
    refund(&shop, 1, SKU).await?;

    // Both at once, for the same order: a deadlock, broken by detection.
    let started = Instant::now();
    let placing = tokio::spawn({
        let shop = shop.clone();
        async move { retried(&shop, "place_order", || place_order(&shop, ORDER, SKU)).await }
    });
    let refunding = tokio::spawn({
        let shop = shop.clone();
        async move { retried(&shop, "refund", || refund(&shop, ORDER, SKU)).await }
    });
    let broken = placing.await?? + refunding.await??;
    println!(
        "\nboth calls done in {} ms; {broken} deadlock(s) broken",
        started.elapsed().as_millis()
    );

    // The check.
    let mut problems = Vec::new();
    let left: i64 = redis::cmd("GET")
        .arg(stock_key(SKU))
        .query_async(&mut redis)
        .await?;
    if left != STOCK {
        problems.push(format!("{SKU}: {left} on the shelf, expected {STOCK}"));
    }
    let locks = distlock::global()?;
    for name in [format!("order:{ORDER}"), format!("inventory:{SKU}")] {
        if locks.inspect(&name).await?.held {
            problems.push(format!("{name} is still locked"));
        }
    }
    if broken == 0 {
        println!("(the two calls did not meet this time: no deadlock to break)");
    }
    if problems.is_empty() {
        println!("consistency check passed: the stock is back to {STOCK}, every lock free");
        Ok(())
    } else {
        for problem in &problems {
            eprintln!("consistency check FAILED: {problem}");
        }
        Err(format!("{} consistency problems", problems.len()).into())
    }
}

fn stock_key(sku: &str) -> String {
    format!("distlock-example:deadlock:stock:{sku}")
}
