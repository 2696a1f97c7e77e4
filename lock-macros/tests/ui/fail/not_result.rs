use distlock::distributed_lock;

#[distributed_lock(key = "order:{id}")]
async fn place_order(id: u32) -> u32 {
    id
}

fn main() {}
