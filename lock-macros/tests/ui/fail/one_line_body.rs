use distlock::{distributed_lock, LockError};

// Only the real errors: no lint about the body's braces, whose fix would be
// `-> u32 1`.
#[distributed_lock(key = "order:{id}")]
async fn count(id: u32) -> u32 { 1 }

#[distributed_lock(key = "order:{id}")]
async fn place_order(id: u32) -> Result<u32, LockError> { Ok("one") }

fn main() {}
