use distlock::{distributed_lock, LockClient};

#[async_trait::async_trait]
pub trait Store {
    async fn put(&self, key: &str) -> u32;
}

pub struct Db {
    locks: LockClient,
}

#[async_trait::async_trait]
impl Store for Db {
    #[distributed_lock(key = "put:{key}", client = self.locks)]
    async fn put(&self, key: &str) -> u32 {
        key.len() as u32
    }
}

fn main() {}
