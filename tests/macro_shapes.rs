//! `#[distributed_lock]` on the shapes business code takes: methods with every kind
//! of receiver, generics, `impl Trait`, patterns, `#[async_trait]`, and the usual
//! error types.
#![cfg(feature = "macros")]

mod support;

use std::fmt::Display;
use std::sync::Arc;

use async_trait::async_trait;
use distlock::{current_lock, distributed_lock, LockClient, LockError};

/// The name of the lock the body runs under, and its hold count.
fn innermost() -> (String, u64) {
    let held = current_lock().expect("inside the lock scope");
    (held.name().to_owned(), held.hold_count())
}

struct Orders {
    locks: LockClient,
    tenant: String,
    placed: Vec<u32>,
}

impl Orders {
    /// `&self`, the client from a field, a field of `self` in the key.
    #[distributed_lock(key = "{self.tenant}:order:{id}", client = self.locks)]
    async fn get(&self, id: u32) -> Result<(String, u64), LockError> {
        Ok(innermost())
    }

    /// `&mut self` and a format spec.
    #[distributed_lock(key = "{self.tenant}:order:{id:05}", client = self.locks, wait = "2s")]
    pub async fn place(&mut self, id: u32) -> Result<String, LockError> {
        self.placed.push(id);
        // Re-entry through another method on the same key is not this key: a new lock.
        Ok(innermost().0)
    }

    /// `self: Arc<Self>`, a client reached through the `Arc`.
    #[distributed_lock(key = "{self.tenant}:all", client = &self.locks)]
    async fn shared(self: Arc<Self>) -> Result<usize, LockError> {
        Ok(self.placed.len())
    }

    /// `self` by value.
    #[distributed_lock(key = "{self.tenant}:close", client = self.locks.clone())]
    async fn close(self) -> Result<Vec<u32>, LockError> {
        Ok(self.placed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_with_every_receiver() {
    let server = support::server();
    let mut orders = Orders {
        locks: support::client(&server).await,
        tenant: "acme".to_owned(),
        placed: Vec::new(),
    };
    assert_eq!(
        orders.get(7).await.expect("get"),
        ("acme:order:7".to_owned(), 1)
    );
    assert_eq!(orders.place(7).await.expect("place"), "acme:order:00007");
    let orders = Arc::new(orders);
    assert_eq!(orders.clone().shared().await.expect("shared"), 1);
    let orders = Arc::into_inner(orders).expect("one owner");
    assert_eq!(orders.close().await.expect("close"), [7]);
    for name in ["acme:order:7", "acme:order:00007", "acme:all", "acme:close"] {
        assert_eq!(support::redis_count(&server, name), 0, "{name}");
    }
}

/// Generics with bounds and a where clause, a lifetime, `impl Trait` arguments and an
/// `impl Trait` in the return type.
#[distributed_lock(key = "gen:{id}:{label}", client = locks)]
async fn generic<'a, I, L>(
    locks: &'a LockClient,
    id: I,
    label: L,
    extra: impl Display + Send,
) -> Result<impl Display + 'a, LockError>
where
    I: Display + Send,
    L: AsRef<str> + Display + Send,
{
    let (name, count) = innermost();
    Ok(format!("{name}/{count}/{}/{extra}", label.as_ref()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generics_and_impl_trait() {
    let server = support::server();
    let locks = support::client(&server).await;
    let out = generic(&locks, 3u8, "x", 1.5).await.expect("generic");
    assert_eq!(out.to_string(), "gen:3:x/1/x/1.5");
    let out = generic(&locks, "id", String::from("y"), 'c')
        .await
        .expect("generic");
    assert_eq!(out.to_string(), "gen:id:y/1/y/c");
}

struct Point {
    x: i32,
}

/// Parameters bound by patterns, a tuple field and a raw identifier.
#[distributed_lock(key = "pat:{a}:{b}:{pair.1}:{r#type}:{type}:{x}", client = locks)]
async fn patterns(
    locks: &LockClient,
    (a, b): (u8, u8),
    pair: (u8, &str),
    r#type: &str,
    Point { x }: Point,
) -> Result<String, LockError> {
    let _ = (a, b, pair, r#type, x);
    Ok(innermost().0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pattern_parameters() {
    let server = support::server();
    let locks = support::client(&server).await;
    let name = patterns(&locks, (1, 2), (3, "four"), "t", Point { x: -5 })
        .await
        .expect("patterns");
    assert_eq!(name, "pat:1:2:four:t:t:-5");
}

/// `anyhow::Error`, a boxed error, and `{{`/`}}` escapes in the key.
#[distributed_lock(key = "{{any}}:{id}", client = locks)]
async fn with_anyhow(locks: &LockClient, id: u32) -> anyhow::Result<String> {
    anyhow::ensure!(id > 0, "id must be positive");
    Ok(innermost().0)
}

#[distributed_lock(key = "boxed", client = locks)]
async fn with_box(locks: &LockClient) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let n: u32 = "12".parse()?;
    Ok(format!("{}:{n}", innermost().0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anyhow_and_boxed_errors() {
    let server = support::server();
    let locks = support::client(&server).await;
    assert_eq!(with_anyhow(&locks, 1).await.expect("anyhow"), "{any}:1");
    let err = with_anyhow(&locks, 0).await.expect_err("ensure");
    assert_eq!(err.to_string(), "id must be positive");
    assert_eq!(with_box(&locks).await.expect("boxed"), "boxed:12");

    // A lock error converts into both.
    let other = support::client(&server).await;
    let held = other.lock("{any}:2").await.expect("lock");
    let busy = LockClient::builder()
        .url(server.url())
        .default_wait(std::time::Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let err = with_anyhow(&busy, 2).await.expect_err("busy");
    assert!(
        err.downcast_ref::<LockError>()
            .is_some_and(LockError::is_timeout),
        "{err}"
    );
    held.unlock().await.expect("unlock");
}

/// A native `async fn` in a trait.
trait Catalog {
    async fn price(&self, sku: &str) -> Result<(String, u64), LockError>;
}

impl Catalog for Warehouse {
    #[distributed_lock(key = "price:{sku}", client = self.locks, wait = "1s")]
    async fn price(&self, sku: &str) -> Result<(String, u64), LockError> {
        Ok(innermost())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_async_trait_methods() {
    let server = support::server();
    let warehouse = Warehouse {
        locks: support::client(&server).await,
    };
    assert_eq!(
        warehouse.price("fig").await.expect("price"),
        ("price:fig".to_owned(), 1)
    );
}

#[async_trait]
trait Inventory {
    async fn reserve(&self, sku: &str, n: u32) -> Result<(String, u64), LockError>;
    async fn restock(&self, sku: &str) -> Result<(String, u64), LockError>;
}

struct Warehouse {
    locks: LockClient,
}

#[async_trait]
impl Inventory for Warehouse {
    /// `#[async_trait]` on the impl expands first; the macro then sees its output.
    #[distributed_lock(key = "sku:{sku}", client = self.locks)]
    async fn reserve(&self, sku: &str, n: u32) -> Result<(String, u64), LockError> {
        let _ = n;
        // Re-entry through another annotated trait method on the same key.
        let (name, inner) = self.restock(sku).await?;
        assert_eq!(inner, 2);
        Ok((name, innermost().1))
    }

    #[distributed_lock(key = "sku:{sku}", client = self.locks)]
    async fn restock(&self, sku: &str) -> Result<(String, u64), LockError> {
        Ok(innermost())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_trait_methods() {
    let server = support::server();
    let warehouse = Warehouse {
        locks: support::client(&server).await,
    };
    let inventory: &dyn Inventory = &warehouse;
    assert_eq!(
        inventory.reserve("apple", 3).await.expect("reserve"),
        ("sku:apple".to_owned(), 1)
    );
    assert_eq!(support::redis_count(&server, "sku:apple"), 0);
    // The future is `Send`: it runs on a spawned task.
    let warehouse = Arc::new(warehouse);
    let task = {
        let warehouse = warehouse.clone();
        tokio::spawn(async move { warehouse.restock("pear").await })
    };
    assert_eq!(task.await.expect("task").expect("restock").0, "sku:pear");
}
