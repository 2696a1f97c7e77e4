use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id")]
async fn place_order(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {
    // The function is still emitted as written: only the one error above.
    let _ = place_order(1);
}
