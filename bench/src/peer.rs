//! The peer: the same scenarios with the `rslock` crate (feature `rslock`).

use std::collections::HashMap;
use std::time::Duration;

use distlock_testkit::RedisServer;
use rslock::LockManager;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::scenarios::{contend, many_tasks_with, Contender, Contention, ContentionSettings};
use crate::server::calls_between;

/// rslock's TTL in every scenario: distlock's default watchdog lease.
const TTL: Duration = Duration::from_secs(30);

/// A lock manager on `url`: at rslock's defaults (3 tries, up to 200 ms apart), or
/// with the given retry delay.
pub(crate) fn manager(url: &str, retry_delay: Option<Duration>) -> LockManager {
    let mut manager = LockManager::new(vec![url.to_owned()]);
    if let Some(delay) = retry_delay {
        manager.set_retry(3, delay);
    }
    manager
}

/// Takes `name`, trying again until `stop` (rslock's own `acquire` loops without end).
async fn lock_until(
    manager: &LockManager,
    name: &str,
    stop: Instant,
) -> Result<rslock::Lock, BoxError> {
    loop {
        match manager.lock(name.as_bytes(), TTL).await {
            Ok(lock) => return Ok(lock),
            Err(_) if Instant::now() < stop => continue,
            Err(err) => return Err(format!("rslock could not take {name}: {err}").into()),
        }
    }
}

/// Scenario 1 with rslock.
pub(crate) async fn one_task(
    manager: &LockManager,
    tag: &str,
    pairs: usize,
    limit: Duration,
) -> Result<f64, BoxError> {
    let start = Instant::now();
    let mut done = 0;
    while done < pairs && start.elapsed() < limit {
        let lock = lock_until(manager, &format!("rs1:{tag}:{done}"), start + limit).await?;
        manager.unlock(&lock).await;
        done += 1;
    }
    Ok(done as f64 / start.elapsed().as_secs_f64())
}

/// Scenario 2 with rslock.
pub(crate) async fn many_tasks(
    manager: &LockManager,
    tag: &str,
    tasks: usize,
    pairs_per_task: usize,
    limit: Duration,
) -> Result<f64, BoxError> {
    many_tasks_with(manager, &format!("rs2:{tag}"), tasks, pairs_per_task, limit).await
}

impl Contender for LockManager {
    type Held = rslock::Lock;
    type Error = BoxError;

    async fn acquire(&self, name: &str, stop: Instant) -> Result<rslock::Lock, BoxError> {
        lock_until(self, name, stop + Duration::from_secs(10)).await
    }

    async fn release(&self, lock: rslock::Lock) -> Result<(), BoxError> {
        self.unlock(&lock).await;
        Ok(())
    }

    fn acquire_calls(
        before: &HashMap<String, u64>,
        after: &HashMap<String, u64>,
        _acquisitions: u64,
    ) -> u64 {
        // rslock takes the lock with SET NX and releases it with a script.
        calls_between(before, after, "set")
    }
}

/// Scenario 4 with rslock.
pub(crate) async fn contention(
    manager: &LockManager,
    server: &RedisServer,
    tag: &str,
    settings: ContentionSettings,
) -> Result<Contention, BoxError> {
    contend(manager, server, &format!("rs4:{tag}"), settings).await
}
