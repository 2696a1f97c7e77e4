use distlock::{distributed_lock, LockError};

pub struct Service {
    pub locks: String,
}

impl Service {
    #[distributed_lock(key = "order:{id}", client = self.locks)]
    async fn place_order(&self, id: u32) -> Result<u32, LockError> {
        Ok(id)
    }
}

fn main() {}
