use distlock::{distributed_lock, LockError};

// Each template of `keys` is checked against the parameters; both errors are shown.
#[distributed_lock(keys = ["order:{order_id}", "inventory:{skuu}"])]
async fn checkout(id: u32, sku: &str) -> Result<u32, LockError> {
    Ok(id + sku.len() as u32)
}

fn main() {
    let _ = checkout(1, "apple");
}
