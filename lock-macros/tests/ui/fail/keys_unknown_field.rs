use distlock::{distributed_lock, LockError};

pub struct Order {
    pub id: u32,
}

#[distributed_lock(keys = ["order:{order.idd}", "sku:{sku}"])]
async fn place_order(order: &Order, sku: &str) -> Result<usize, LockError> {
    Ok(order.id as usize + sku.len())
}

fn main() {}
