use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = [])]
async fn checkout(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {
    let _ = checkout(1);
}
