use distlock::{distributed_lock, LockError};

#[async_trait::async_trait]
pub trait Store {
    // The lock goes on the implementation, which has a body.
    #[distributed_lock(key = "put:{key}")]
    async fn put(&self, key: &str) -> Result<(), LockError>;
}

fn main() {}
