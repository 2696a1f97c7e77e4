use distlock::{distributed_lock, LockError};

pub struct Order {
    pub id: u32,
}

// The error points at the template, with no suggestion to replace the template
// by a field name.
#[distributed_lock(key = "order:{order.idd}")]
async fn place_order(order: &Order, qty: u32) -> Result<u32, LockError> {
    Ok(order.id + qty)
}

fn main() {}
