use distlock::{distributed_lock, LockError};

// A key as Spring's and Redisson's lock annotations write it, in SpEL.
#[distributed_lock(key = "'order:' + #id")]
async fn place_order(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {
    // The function is still emitted as written: only the one error above.
    let _ = place_order(1);
}
