use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id}", keys = ["order:{id}", "inventory:{sku}"])]
async fn checkout(id: u32, sku: &str) -> Result<u32, LockError> {
    Ok(id + sku.len() as u32)
}

fn main() {
    let _ = checkout(1, "apple");
}
