use distlock::{distributed_lock, LockError};

#[distributed_lock(keys = ["a:{id}", "b:{id}"], kind = "read")]
async fn browse(id: u32) -> Result<u32, LockError> {
    Ok(id)
}

fn main() {
    let _ = browse(1);
}
