use distlock::distributed_lock;

#[derive(Debug)]
pub struct AppError;

#[distributed_lock(key = "order:{id}")]
async fn place_order(id: u32) -> Result<u32, AppError> {
    Ok(id)
}

fn main() {}
