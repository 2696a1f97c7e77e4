//! Sets of locks taken at once (`lock_all`) by callers that list them in different
//! orders.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::LockClient;

/// `first` takes `names` as listed, `second` in the opposite order, `rounds` times
/// each with no pause, each set with a wait of 5 s (a deadlock ends the test there,
/// naming the round). Returns how many sets were entered while another was inside.
pub async fn sets_in_opposite_orders(
    first: &LockClient,
    second: &LockClient,
    names: [&'static str; 3],
    rounds: usize,
) -> usize {
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut reversed = names;
    reversed.reverse();
    let mut callers = Vec::new();
    for (client, order) in [(first.clone(), names), (second.clone(), reversed)] {
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        callers.push(tokio::spawn(async move {
            for round in 0..rounds {
                let all = client
                    .lock_all(order)
                    .wait(Duration::from_secs(5))
                    .await
                    .unwrap_or_else(|err| panic!("round {round} of {order:?}: {err}"));
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                all.unlock().await.expect("unlock");
            }
        }));
    }
    for caller in callers {
        caller.await.expect("caller");
    }
    overlaps.load(Ordering::SeqCst)
}
