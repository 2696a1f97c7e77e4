use distlock::{distributed_lock, LockError};

#[distributed_lock(semaphore = "exports", permits = 0)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = export();
}
