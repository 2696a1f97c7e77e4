use distlock::{distributed_lock, LockError};

#[distributed_lock(semaphore = "exports", key = "exports", permits = 4)]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {
    let _ = export();
}
