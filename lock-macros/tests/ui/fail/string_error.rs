use distlock::distributed_lock;

// `String` takes no `LockError`: the lock's errors have nowhere to go.
#[distributed_lock(key = "order:{id}")]
async fn place_order(id: u64) -> Result<(), String> {
    let _ = id;
    Ok(())
}

fn main() {}
