//! An order and inventory service built with `#[distributed_lock]`.
//!
//! Eight orders run at once, each on its own task, and compete for four SKUs whose
//! stock lives in Redis. Stock is updated the unsafe way on purpose: GET, a pause,
//! SET. Only the locks keep two orders from reading the same count and both
//! writing it back, so the check at the end (no stock below zero, every unit either
//! on the shelf or in a confirmed order) is a check of the locks.
//!
//! - `place_order` locks `order:{id}`;
//! - for its lines it calls `reserve_stock`, which locks `inventory:{sku}` and, while
//!   holding it, reserves the next line: an order holds all its SKUs before it
//!   writes any stock, so it takes everything or nothing;
//! - `confirm_order` locks `order:{id}` again: the call chain already holds it, so it
//!   re-enters (hold count 2) instead of waiting for itself.
//!
//! Each order takes its SKUs in sorted order. Two orders that took them in opposite
//! orders could each hold one and wait for the other until `wait` runs out.
//!
//! Two carts check out at the same time as the orders, each with one
//! `LockClient::lock_all` of every SKU it lists (two more SKUs, `eggs` and `figs`):
//! they list them in opposite orders, and `lock_all` takes them in one canonical
//! order, so they never deadlock each other.
//!
//! Meanwhile shoppers browse the catalogue (every SKU's price) under
//! `LockClient::read_lock("catalogue")`, many at once, while a repricer writes a new
//! price list, one price at a time, under `write_lock("catalogue")`: no shopper ever
//! sees prices of two lists mixed, and the shoppers read side by side.
//!
//! Run it with `cargo xtask demo` (a throwaway `redis-server`), or against your own
//! server: `REDIS_URL=redis://127.0.0.1:6379 cargo run --example order_flow`, or a
//! Redis Cluster: `REDIS_CLUSTER_URLS=redis://127.0.0.1:7000,... cargo run --example
//! order_flow` (see `cargo xtask cluster`), or Sentinel: `REDIS_SENTINEL_URLS=...`
//! (see `cargo xtask sentinel`). Its keys start with `distlock-example:`;
//! it exits with a non-zero status when the consistency check fails.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use distlock::{current_lock, distributed_lock, LockContext, LockError};

mod common;
use common::{Data, Target};

/// The shelf at the start.
const STOCK: [(&str, i64); 6] = [
    ("apple", 6),
    ("bread", 4),
    ("cheese", 5),
    ("dates", 3),
    ("eggs", 2),
    ("figs", 2),
];

/// The orders: id and lines (SKU, quantity), in the order the customer wrote them.
const ORDERS: [(u32, &[(&str, i64)]); 8] = [
    (1, &[("bread", 2), ("apple", 1)]),
    (2, &[("apple", 2), ("cheese", 1)]),
    (3, &[("cheese", 2), ("dates", 1), ("apple", 1)]),
    (4, &[("dates", 2), ("bread", 1)]),
    (5, &[("apple", 2), ("bread", 1)]),
    (6, &[("cheese", 2), ("dates", 1)]),
    (7, &[("bread", 2), ("cheese", 1), ("apple", 1)]),
    (8, &[("dates", 1), ("apple", 2)]),
];

/// The carts: id and lines, in the order the customer listed them (opposite orders).
const CARTS: [(u32, &[(&str, i64)]); 2] = [
    (101, &[("figs", 1), ("eggs", 1)]),
    (102, &[("eggs", 1), ("figs", 1)]),
];

/// The price lists the repricer writes, one after the other.
const PRICE_LISTS: u32 = 4;

/// How many shoppers browse at once, and how often each.
const SHOPPERS: usize = 6;
const BROWSES: usize = 8;

/// Every Redis key of this example starts with this.
const PREFIX: &str = "distlock-example:order-flow";

#[derive(Debug, Clone)]
struct Line {
    sku: String,
    quantity: i64,
}

#[derive(Debug, Clone)]
struct Order {
    id: u32,
    /// Sorted by SKU, one line per SKU: the order in which the locks are taken.
    lines: Vec<Line>,
}

impl Order {
    fn new(id: u32, lines: &[(&str, i64)]) -> Self {
        let mut merged = BTreeMap::new();
        for (sku, quantity) in lines {
            *merged.entry(sku.to_string()).or_insert(0) += quantity;
        }
        let lines = merged
            .into_iter()
            .map(|(sku, quantity)| Line { sku, quantity })
            .collect();
        Order { id, lines }
    }
}

/// What went wrong with an order. `From<LockError>` lets annotated functions return it.
#[derive(Debug)]
enum OrderError {
    /// The lock could not be taken (or was lost): see the `LockError`.
    Lock(LockError),
    /// A SKU has fewer units than the order wants.
    OutOfStock { sku: String, wanted: i64, left: i64 },
    /// Redis failed outside of the lock calls.
    Redis(redis::RedisError),
}

impl From<LockError> for OrderError {
    fn from(error: LockError) -> Self {
        OrderError::Lock(error)
    }
}

impl From<redis::RedisError> for OrderError {
    fn from(error: redis::RedisError) -> Self {
        OrderError::Redis(error)
    }
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderError::Lock(error) => write!(f, "{error}"),
            OrderError::OutOfStock { sku, wanted, left } => {
                write!(f, "{sku} has {left} left, the order wants {wanted}")
            }
            OrderError::Redis(error) => write!(f, "Redis: {error}"),
        }
    }
}

impl std::error::Error for OrderError {}

/// The shop: a Redis connection for the data, a narrator for the story, and who
/// reads the catalogue now.
struct Shop {
    redis: Data,
    story: Narrator,
    browsing: AtomicUsize,
    most_browsing: AtomicUsize,
}

impl Shop {
    async fn stock(&self, sku: &str) -> Result<i64, OrderError> {
        let mut redis = self.redis.clone();
        let stock: Option<i64> = redis::cmd("GET")
            .arg(stock_key(sku))
            .query_async(&mut redis)
            .await?;
        Ok(stock.unwrap_or(0))
    }

    async fn set_stock(&self, sku: &str, stock: i64) -> Result<(), OrderError> {
        let mut redis = self.redis.clone();
        redis::cmd("SET")
            .arg(stock_key(sku))
            .arg(stock)
            .exec_async(&mut redis)
            .await?;
        Ok(())
    }

    /// The price of `sku`, as `<list>:<cents>`: the price list it belongs to, and the price.
    async fn price(&self, sku: &str) -> Result<String, OrderError> {
        let mut redis = self.redis.clone();
        let price: Option<String> = redis::cmd("GET")
            .arg(price_key(sku))
            .query_async(&mut redis)
            .await?;
        Ok(price.unwrap_or_default())
    }

    async fn set_price(&self, sku: &str, list: u32) -> Result<(), OrderError> {
        let mut redis = self.redis.clone();
        let cents = 100 + list * 10 + sku.len() as u32;
        redis::cmd("SET")
            .arg(price_key(sku))
            .arg(format!("{list}:{cents}"))
            .exec_async(&mut redis)
            .await?;
        Ok(())
    }

    async fn set_status(&self, order: u32, status: &str) -> Result<(), OrderError> {
        let mut redis = self.redis.clone();
        redis::cmd("SET")
            .arg(order_key(order))
            .arg(status)
            .exec_async(&mut redis)
            .await?;
        Ok(())
    }
}

/// Places an order: reserves every line, then confirms it. Holds `order:{id}`
/// throughout, so the same order placed twice (a retried request, another
/// instance of the service) runs once at a time.
#[distributed_lock(key = "order:{order.id}", wait = "10s")]
async fn place_order(shop: &Shop, order: &Order) -> Result<bool, OrderError> {
    shop.story.say(order.id, format!("holds {}", chain()));
    let (first, rest) = order.lines.split_first().expect("an order has lines");
    shop.story.before_lock(order.id, &first.sku);
    match reserve_stock(shop, order.id, first, rest).await {
        Ok(()) => {
            confirm_order(shop, order).await?;
            Ok(true)
        }
        Err(OrderError::OutOfStock { sku, wanted, left }) => {
            shop.set_status(order.id, "rejected").await?;
            shop.story.say(
                order.id,
                format!("rejected: {sku} has {left} left, wants {wanted}; nothing was taken"),
            );
            Ok(false)
        }
        Err(other) => Err(other),
    }
}

/// Reserves `line` and then, still holding `inventory:{sku}`, the `rest` of the lines.
/// Writes its own stock only once every later line is reserved: all or nothing.
#[distributed_lock(key = "inventory:{line.sku}", wait = "10s")]
async fn reserve_stock(
    shop: &Shop,
    order: u32,
    line: &Line,
    rest: &[Line],
) -> Result<(), OrderError> {
    shop.story.entered(order, &line.sku);
    // Read, think, write: safe only because this chain holds `inventory:{sku}`.
    let stock = shop.stock(&line.sku).await?;
    shop.story.say(
        order,
        format!(
            "  holds {}; {stock} {} in stock, wants {}",
            chain(),
            line.sku,
            line.quantity
        ),
    );
    let result = async {
        if stock < line.quantity {
            return Err(OrderError::OutOfStock {
                sku: line.sku.clone(),
                wanted: line.quantity,
                left: stock,
            });
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        if let Some((next, rest)) = rest.split_first() {
            shop.story.before_lock(order, &next.sku);
            // Recursion in an async fn needs a box.
            Box::pin(reserve_stock(shop, order, next, rest)).await?;
        }
        shop.set_stock(&line.sku, stock - line.quantity).await
    }
    .await;
    shop.story.leaving(order, &line.sku);
    result
}

/// Confirms an order. Called from `place_order`, it re-enters `order:{id}`.
#[distributed_lock(key = "order:{order.id}")]
async fn confirm_order(shop: &Shop, order: &Order) -> Result<(), OrderError> {
    let depth = current_lock().map_or(0, |held| held.hold_count());
    shop.set_status(order.id, "confirmed").await?;
    shop.story.say(
        order.id,
        format!("confirmed (re-entered order:{}, depth {depth})", order.id),
    );
    Ok(())
}

/// Checks out a cart: takes every SKU it lists at once (`lock_all`, whatever the
/// order of the list), then reserves every line or none: every count is read before
/// any is written.
async fn checkout(shop: &Shop, cart: &Order, listed: &[(&str, i64)]) -> Result<bool, OrderError> {
    let locks = distlock::global()?;
    let names: Vec<String> = listed
        .iter()
        .map(|(sku, _)| format!("inventory:{sku}"))
        .collect();
    let all = locks.lock_all(&names).wait(Duration::from_secs(10)).await?;
    let held: Vec<&str> = all.names().collect();
    shop.story
        .say(cart.id, format!("cart holds {} at once", held.join(", ")));
    let reserved = async {
        let mut left = Vec::new();
        for line in &cart.lines {
            let stock = shop.stock(&line.sku).await?;
            if stock < line.quantity {
                return Ok::<_, OrderError>(None);
            }
            left.push((line.sku.clone(), stock - line.quantity));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        for (sku, stock) in &left {
            shop.set_stock(sku, *stock).await?;
        }
        Ok(Some(()))
    }
    .await;
    let outcome = match reserved {
        Ok(Some(())) => {
            shop.set_status(cart.id, "confirmed").await?;
            shop.story.say(cart.id, "cart confirmed");
            Ok(true)
        }
        Ok(None) => {
            shop.set_status(cart.id, "rejected").await?;
            shop.story.say(
                cart.id,
                "cart rejected: not enough stock; nothing was taken",
            );
            Ok(false)
        }
        Err(err) => Err(err),
    };
    all.unlock().await?;
    outcome
}

/// Writes price list `list`, one price at a time, under the catalogue's write lock:
/// no shopper reads while it writes, and it waits for those reading to finish (and
/// shoppers who come meanwhile wait for it, so that a stream of them cannot keep it
/// out).
async fn reprice(shop: &Shop, list: u32) -> Result<(), OrderError> {
    let writing = distlock::global()?
        .write_lock("catalogue")
        .wait(Duration::from_secs(10))
        .await?;
    for (sku, _) in STOCK {
        shop.set_price(sku, list).await?;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    shop.story.note(format!(
        "repricer wrote price list {list} (no shopper reading)"
    ));
    writing.unlock().await?;
    Ok(())
}

/// Reads every price under the catalogue's read lock, beside other shoppers; says
/// whether they all came from one price list.
async fn browse(shop: &Shop) -> Result<bool, OrderError> {
    let reading = distlock::global()?
        .read_lock("catalogue")
        .wait(Duration::from_secs(10))
        .await?;
    let now = shop.browsing.fetch_add(1, Ordering::SeqCst) + 1;
    shop.most_browsing.fetch_max(now, Ordering::SeqCst);
    let mut lists = Vec::new();
    for (sku, _) in STOCK {
        let price = shop.price(sku).await?;
        lists.push(price.split(':').next().unwrap_or_default().to_owned());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    shop.browsing.fetch_sub(1, Ordering::SeqCst);
    reading.unlock().await?;
    Ok(lists.windows(2).all(|pair| pair[0] == pair[1]))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = Target::from_env();
    println!("order flow against {target}\n");
    // With the `metrics` feature, distlock's metrics go to a Prometheus endpoint,
    // printed at the end.
    #[cfg(feature = "metrics")]
    let endpoint = common::scrape::serve().map_err(|err| err.to_string())?;

    // The client that annotated functions use.
    let locks = target
        .lock_client()
        .namespace("distlock-example")
        .connect()
        .await?
        .install_global()?;
    // Ctrl-C: give back every lock this process holds before it stops, so that the
    // next instance does not wait out their leases.
    tokio::spawn({
        let locks = locks.clone();
        async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let report = locks.shutdown().await;
                eprintln!(
                    "\nCtrl-C: gave back {} held locks ({} could not be)",
                    report.given_back(),
                    report.not_given_back().len()
                );
                std::process::exit(130);
            }
        }
    });
    let redis = target.data().await?;
    let shop = Arc::new(Shop {
        redis,
        story: Narrator::new(),
        browsing: AtomicUsize::new(0),
        most_browsing: AtomicUsize::new(0),
    });

    // Stock the shelf, price it, and forget earlier runs.
    for (sku, stock) in STOCK {
        shop.set_stock(sku, stock).await?;
        shop.set_price(sku, 0).await?;
    }
    let mut orders: Vec<Order> = ORDERS
        .iter()
        .map(|(id, lines)| Order::new(*id, lines))
        .collect();
    let carts: Vec<Order> = CARTS
        .iter()
        .map(|(id, lines)| Order::new(*id, lines))
        .collect();
    for order in &orders {
        let mut redis = shop.redis.clone();
        redis::cmd("DEL")
            .arg(order_key(order.id))
            .exec_async(&mut redis)
            .await?;
    }
    let shelf: Vec<String> = STOCK.iter().map(|(s, n)| format!("{s} {n}")).collect();
    println!("shelf: {}", shelf.join(", "));
    for order in &orders {
        let lines: Vec<String> = order
            .lines
            .iter()
            .map(|l| format!("{} x{}", l.sku, l.quantity))
            .collect();
        println!("order {}: {}", order.id, lines.join(", "));
    }
    println!();

    // Every order and every cart on its own task, all at once.
    let started = Instant::now();
    let mut tasks: Vec<_> = orders
        .iter()
        .cloned()
        .map(|order| {
            let shop = shop.clone();
            tokio::spawn(async move { place_order(&shop, &order).await })
        })
        .collect();
    for (cart, (_, listed)) in carts.iter().cloned().zip(CARTS) {
        let shop = shop.clone();
        tasks.push(tokio::spawn(
            async move { checkout(&shop, &cart, listed).await },
        ));
    }
    // The catalogue: a repricer and the shoppers, at the same time as the orders.
    let repricer = tokio::spawn({
        let shop = shop.clone();
        async move {
            for list in 1..=PRICE_LISTS {
                reprice(&shop, list).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, OrderError>(())
        }
    });
    let shoppers: Vec<_> = (0..SHOPPERS)
        .map(|_| {
            let shop = shop.clone();
            tokio::spawn(async move {
                let mut mixed = 0;
                for _ in 0..BROWSES {
                    if !browse(&shop).await? {
                        mixed += 1;
                    }
                }
                Ok::<_, OrderError>(mixed)
            })
        })
        .collect();
    orders.extend(carts);
    let mut confirmed = Vec::new();
    for (order, task) in orders.iter().zip(tasks) {
        if task.await?? {
            confirmed.push(order);
        }
    }
    repricer.await??;
    let mut mixed = 0;
    for shopper in shoppers {
        mixed += shopper.await??;
    }
    println!("\nall orders done in {:?}\n", started.elapsed());

    // The consistency check.
    let mut problems = Vec::new();
    if mixed > 0 {
        problems.push(format!(
            "{mixed} browses saw prices of two price lists mixed"
        ));
    }
    let last = shop.price("apple").await?;
    if !last.starts_with(&format!("{PRICE_LISTS}:")) {
        problems.push(format!(
            "the last price list was not written: apple is {last}"
        ));
    }
    println!(
        "catalogue: {} browses by {SHOPPERS} shoppers, none mixed two price lists; up to {} \
         read at once",
        SHOPPERS * BROWSES - mixed,
        shop.most_browsing.load(Ordering::SeqCst)
    );
    for (sku, initial) in STOCK {
        let left = shop.stock(sku).await?;
        let sold: i64 = confirmed
            .iter()
            .flat_map(|order| &order.lines)
            .filter(|line| line.sku == sku)
            .map(|line| line.quantity)
            .sum();
        let verdict = if left < 0 {
            problems.push(format!("{sku}: stock went negative ({left})"));
            "NEGATIVE"
        } else if left + sold != initial {
            problems.push(format!(
                "{sku}: {initial} at the start, but {left} left + {sold} sold = {}",
                left + sold
            ));
            "UNITS MISSING OR INVENTED"
        } else {
            "ok"
        };
        println!("{sku:>7}: {initial} at the start = {left} left + {sold} sold  {verdict}");
    }
    for order in &orders {
        let mut redis = shop.redis.clone();
        let status: Option<String> = redis::cmd("GET")
            .arg(order_key(order.id))
            .query_async(&mut redis)
            .await?;
        let expected = if confirmed.iter().any(|c| c.id == order.id) {
            "confirmed"
        } else {
            "rejected"
        };
        if status.as_deref() != Some(expected) {
            problems.push(format!(
                "order {}: status {status:?}, expected {expected}",
                order.id
            ));
        }
        if locks.inspect(format!("order:{}", order.id)).await?.held {
            problems.push(format!("order:{} is still locked", order.id));
        }
    }
    for (sku, _) in STOCK {
        if locks.inspect(format!("inventory:{sku}")).await?.held {
            problems.push(format!("inventory:{sku} is still locked"));
        }
    }
    if locks.inspect("catalogue").await?.held {
        problems.push("catalogue is still locked".to_owned());
    }
    println!(
        "\n{} orders confirmed, {} rejected, {} hand-offs between orders",
        confirmed.len(),
        orders.len() - confirmed.len(),
        shop.story.handoffs()
    );
    #[cfg(feature = "metrics")]
    print_metrics(endpoint)?;
    #[cfg(not(feature = "metrics"))]
    print_metrics()?;
    // A process that stops gives its locks back (none is held here any more).
    let report = locks.shutdown().await;
    println!("shutdown: {} holds given back", report.given_back());
    if problems.is_empty() {
        println!("consistency check passed: no negative stock, every unit accounted for, every lock free");
        Ok(())
    } else {
        for problem in &problems {
            eprintln!("consistency check FAILED: {problem}");
        }
        Err(format!("{} consistency problems", problems.len()).into())
    }
}

/// distlock's metrics of the run, as the Prometheus endpoint at `endpoint` shows
/// them (feature `metrics`).
#[cfg(feature = "metrics")]
fn print_metrics(endpoint: std::net::SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let scrape = common::scrape::scrape(endpoint).map_err(|err| err.to_string())?;
    println!("\ndistlock's metrics (http://{endpoint}/metrics):");
    for line in common::scrape::summary(&scrape) {
        println!("  {line}");
    }
    Ok(())
}

/// Without the `metrics` feature: how to see them.
#[cfg(not(feature = "metrics"))]
fn print_metrics() -> Result<(), Box<dyn std::error::Error>> {
    println!("\n(run with `--features metrics` to see distlock's metrics of this run)");
    Ok(())
}

fn price_key(sku: &str) -> String {
    format!("{PREFIX}:price:{sku}")
}

fn stock_key(sku: &str) -> String {
    format!("{PREFIX}:stock:{sku}")
}

fn order_key(order: u32) -> String {
    format!("{PREFIX}:order:{order}")
}

/// The locks the current call chain holds, outermost first, with the innermost
/// lock's depth: `order:3 > inventory:apple (depth 1)`.
fn chain() -> String {
    let context = LockContext::current();
    let mut names: Vec<&str> = context.locks().map(|held| held.name()).collect();
    names.reverse();
    names.dedup();
    let depth = current_lock().map_or(0, |held| held.hold_count());
    format!("{} (depth {depth})", names.join(" > "))
}

/// Tells the story: who holds which SKU, who waits for it, who hands it to whom.
/// Bookkeeping for the printout only; the locks do not depend on it.
struct Narrator {
    started: Instant,
    state: Mutex<Story>,
}

#[derive(Default)]
struct Story {
    /// SKU -> the order whose chain is inside `reserve_stock` for it.
    holder: HashMap<String, u32>,
    /// SKU -> when it was last given back, and by which order.
    released: HashMap<String, (Instant, u32)>,
    /// (order, SKU) -> when the order asked for the SKU's lock.
    asked: HashMap<(u32, String), Instant>,
    handoffs: usize,
}

impl Narrator {
    fn new() -> Self {
        Narrator {
            started: Instant::now(),
            state: Mutex::new(Story::default()),
        }
    }

    fn story(&self) -> std::sync::MutexGuard<'_, Story> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn say(&self, order: u32, what: impl fmt::Display) {
        self.note(format_args!("order {order}: {what}"));
    }

    /// A line of the story that is not about one order.
    fn note(&self, what: impl fmt::Display) {
        let ms = self.started.elapsed().as_millis();
        println!("[{ms:>4} ms] {what}");
    }

    /// Before `order` asks for `inventory:{sku}`: notes when, and who holds it now.
    fn before_lock(&self, order: u32, sku: &str) {
        let mut story = self.story();
        story.asked.insert((order, sku.to_owned()), Instant::now());
        if let Some(&holder) = story.holder.get(sku) {
            drop(story);
            self.say(
                order,
                format!("  waits for inventory:{sku} (held by order {holder})"),
            );
        }
    }

    /// `order` got `inventory:{sku}`: tells whether it had to wait, and for whom.
    fn entered(&self, order: u32, sku: &str) {
        let mut story = self.story();
        story.holder.insert(sku.to_owned(), order);
        let asked = story.asked.remove(&(order, sku.to_owned()));
        // It waited if someone gave the SKU back after this order asked for it.
        let handoff = match (asked, story.released.get(sku)) {
            (Some(asked), Some(&(released, by))) if released > asked => Some((asked, by)),
            _ => None,
        };
        if let Some((asked, by)) = handoff {
            story.handoffs += 1;
            drop(story);
            self.say(
                order,
                format!(
                    "  got inventory:{sku} after waiting {} ms, handed over by order {by}",
                    asked.elapsed().as_millis()
                ),
            );
        }
    }

    /// `order` is about to give `inventory:{sku}` back.
    fn leaving(&self, order: u32, sku: &str) {
        let mut story = self.story();
        story.holder.remove(sku);
        story
            .released
            .insert(sku.to_owned(), (Instant::now(), order));
    }

    fn handoffs(&self) -> usize {
        self.story().handoffs
    }
}
