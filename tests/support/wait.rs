//! Waiting for a condition, in bounded time.

use std::time::Duration;

use distlock::{LockClient, LockError};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Waits until `check` holds, up to `limit`; returns whether it did.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Spawns a waiter: it waits up to `wait` for lock `name` on `client`, notes the
/// moment it holds it, and gives it back; the task's output is that moment.
pub fn acquired_at(
    client: &LockClient,
    name: &str,
    wait: Duration,
) -> JoinHandle<Result<Instant, LockError>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = client.lock(name.as_str()).wait(wait).await?;
        let at = Instant::now();
        guard.unlock().await?;
        Ok(at)
    })
}

/// As [`eventually`], on a thread without a runtime: sleeps the thread between
/// checks.
pub fn eventually_blocking(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs each of `futures` on a task of its own, all let go at one moment (a
/// barrier), and returns their outputs in order: requests ready together, as
/// group commit sees them.
pub async fn all_at_once<F>(futures: Vec<F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(futures.len()));
    let tasks: Vec<_> = futures
        .into_iter()
        .map(|future| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                future.await
            })
        })
        .collect();
    let mut outputs = Vec::new();
    for task in tasks {
        outputs.push(task.await.expect("join"));
    }
    outputs
}
