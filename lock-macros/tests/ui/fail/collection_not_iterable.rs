use distlock::{distributed_lock, LockError};

struct Order {
    count: u32,
}

#[distributed_lock(keys = "inventory:{sku in order.count}")]
async fn reserve(order: &Order) -> Result<u32, LockError> {
    Ok(order.count)
}

fn main() {
    let _ = reserve(&Order { count: 1 });
}
