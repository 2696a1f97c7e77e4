use distlock::{distributed_lock, LockError};

const INVENTORY: &str = "inventory:{sku}";

#[distributed_lock(keys = ["order:{id}", INVENTORY])]
async fn checkout(id: u32, sku: &str) -> Result<u32, LockError> {
    Ok(id + sku.len() as u32)
}

fn main() {
    let _ = checkout(1, "apple");
}
