use distlock::{distributed_lock, LockError};

pub struct Order {
    pub id: u32,
}

#[distributed_lock(key = "order:{ordr.id}")]
async fn place_order(order: &Order, qty: u32) -> Result<u32, LockError> {
    Ok(order.id + qty)
}

fn main() {
    let _ = place_order(&Order { id: 1 }, 2);
}
