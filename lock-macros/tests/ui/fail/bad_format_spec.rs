use distlock::{distributed_lock, LockError};

// The error points at the template, not at a character inside it that the spec
// does not start at.
#[distributed_lock(key = "order:{id:q}")]
async fn place_order(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {}
