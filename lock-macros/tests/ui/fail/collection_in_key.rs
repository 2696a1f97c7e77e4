use distlock::{distributed_lock, LockError};

struct Order {
    skus: Vec<String>,
}

#[distributed_lock(key = "inventory:{sku in order.skus}")]
async fn reserve(order: &Order) -> Result<usize, LockError> {
    Ok(order.skus.len())
}

fn main() {
    let _ = reserve(&Order { skus: Vec::new() });
}
