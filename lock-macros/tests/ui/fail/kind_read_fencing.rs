use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "catalogue", kind = "read", fencing)]
async fn browse() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = browse();
}
