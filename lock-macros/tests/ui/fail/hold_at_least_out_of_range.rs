use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "job:nightly-report", skip_if_held, hold_at_least = "0s")]
async fn nightly_report() -> Result<Option<u32>, LockError> {
    Ok(Some(7))
}

fn main() {
    let _ = nightly_report();
}
