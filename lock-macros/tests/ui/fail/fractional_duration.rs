use distlock::{distributed_lock, LockError};

// Fractions are refused with the whole number of milliseconds to write instead.
#[distributed_lock(key = "order:{id}", wait = "1.5s")]
async fn place_order(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {
    let _ = place_order(1);
}
