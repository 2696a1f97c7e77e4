use distlock::{distributed_lock, LockError};

// A body with no tail: the one error, on the return type, as for any function.
#[distributed_lock(key = "order:{id}")]
async fn place_order(id: u32) -> Result<u32, LockError> {}

fn main() {}
