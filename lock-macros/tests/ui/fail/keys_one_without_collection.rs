use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = "inventory:{sku}")]
async fn reserve(sku: &str) -> Result<usize, LockError> {
    Ok(sku.len())
}

fn main() {
    let _ = reserve("figs");
}
