use async_trait::async_trait;
use distlock::{distributed_lock, LockClient, LockError};

#[async_trait]
pub trait Job {
    async fn run(&self) -> Result<u32, LockError>;
}

pub struct Nightly {
    locks: LockClient,
}

#[async_trait]
impl Job for Nightly {
    #[distributed_lock(key = "job:nightly", client = self.locks, skip_if_held)]
    async fn run(&self) -> Result<u32, LockError> {
        Ok(3)
    }
}

fn main() {}
