//! The peer: the `rslock` crate (feature `rslock`) as a [`Contender`], on its own
//! terms: its own commands (`SET NX PX`, a compare-and-delete script) and its own
//! retries.

use std::collections::HashMap;
use std::time::Duration;

use rslock::LockManager;
use tokio::time::Instant;

use crate::contender::Contender;
use crate::error::BoxError;
use crate::server::{calls_between, MINIMAL_SCRIPT_COMMANDS};

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

impl Contender for LockManager {
    type Held = rslock::Lock;
    type Error = BoxError;

    const SCRIPT_COMMANDS: &'static [&'static str] = MINIMAL_SCRIPT_COMMANDS;

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
