use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "job:nightly-report", skip_if_held)]
async fn nightly_report() -> Result<u32, LockError> {
    Ok(7)
}

fn main() {
    let _ = nightly_report();
}
