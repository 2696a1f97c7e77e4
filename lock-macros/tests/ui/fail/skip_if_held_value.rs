use distlock::{distributed_lock, LockError};

#[distributed_lock(key = "job:nightly-report", skip_if_held = true)]
async fn nightly_report() -> Result<Option<u32>, LockError> {
    Ok(Some(7))
}

fn main() {
    let _ = nightly_report();
}
