use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = "inventory:{sku in cart.skus}")]
async fn reserve(order: &[String]) -> Result<usize, LockError> {
    Ok(order.len())
}

fn main() {
    let _ = reserve(&[]);
}
