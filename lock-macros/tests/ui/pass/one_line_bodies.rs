//! Bodies written on one line compile without warnings: the expansion adds no braces
//! around them that a lint would ask to remove.
#![deny(warnings)]

use async_trait::async_trait;
use distlock::{distributed_lock, LockClient, LockError};

pub struct Order {
    pub id: u64,
}

#[distributed_lock(key = "order:{id}")]
pub async fn literal(id: u64) -> Result<u64, LockError> { Ok(1) }

#[distributed_lock(key = "order:{order.id}", wait = "1s")]
pub async fn field(order: &Order) -> Result<u64, LockError> { Ok(order.id) }

#[distributed_lock(keys = ["order:{id}", "sku:{sku}"])]
pub async fn several(id: u64, sku: &str) -> Result<usize, LockError> { Ok(sku.len()) }

#[distributed_lock(key = "nightly")]
pub async fn unit() -> Result<(), LockError> { Ok(()) }

#[distributed_lock(key = "empty")]
pub async fn empty() -> Result<(), LockError> { Ok(()) }

pub struct Warehouse {
    locks: LockClient,
}

impl Warehouse {
    #[distributed_lock(key = "sku:{sku}", client = self.locks)]
    pub async fn method(&self, sku: &str) -> Result<usize, LockError> { Ok(sku.len()) }
}

#[async_trait]
pub trait Stock {
    async fn reserve(&self, sku: &str) -> Result<usize, LockError>;
}

#[async_trait]
impl Stock for Warehouse {
    #[distributed_lock(key = "sku:{sku}", client = self.locks)]
    async fn reserve(&self, sku: &str) -> Result<usize, LockError> { Ok(sku.len()) }
}

fn main() {
    let _ = (literal(1), field(&Order { id: 1 }), several(1, "a"), unit(), empty());
}
