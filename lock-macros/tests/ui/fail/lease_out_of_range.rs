use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "order:{id}", lease = "0ms")]
async fn place_order(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {
    let _ = place_order(1);
}
