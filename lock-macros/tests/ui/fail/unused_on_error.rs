use distlock::{distributed_lock, LockError};

pub struct Order {
    pub id: u32,
}

// The attribute is refused, so the functions are emitted as written: their
// parameters that only the key used are not reported as unused.
#[distributed_lock(key = "order:{id}", wait = "5")]
async fn place_order(id: u32) -> Result<u32, LockError> {
    Ok(1)
}

#[distributed_lock(key = "order:{order.id}:{qty}", on_lost = "stop")]
async fn reserve(order: &Order, qty: u32) -> Result<u32, LockError> {
    Ok(2)
}

fn main() {
    let _ = place_order(1);
    let _ = reserve(&Order { id: 1 }, 2);
}
