use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "import:{batch}", lease = "10m", max_hold = "5m")]
async fn import(batch: u64) -> Result<u64, LockError> {
    Ok(batch)
}

fn main() {
    let _ = import(1);
}
