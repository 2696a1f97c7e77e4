//! `skip_if_held` and `hold_at_least`: every way of writing `Result<Option<T>, E>`,
//! with the other arguments, and under `#[async_trait]`, without warnings.
#![deny(warnings)]

use async_trait::async_trait;
use distlock::{distributed_lock, LockClient, LockError};

#[distributed_lock(key = "job:nightly-report", skip_if_held, hold_at_least = "30s")]
pub async fn nightly_report() -> Result<Option<u64>, LockError> {
    Ok(Some(1))
}

#[distributed_lock(key = "job:{name}", client = locks, skip_if_held, on_lost = "abort")]
pub async fn named(locks: &LockClient, name: &str) -> std::result::Result<Option<String>, LockError> {
    Ok(Some(name.to_owned()))
}

#[distributed_lock(key = "job:anyhow", skip_if_held, hold_at_least = "250ms", max_hold = "1h")]
pub async fn with_anyhow() -> anyhow::Result<Option<()>> {
    Ok(Some(()))
}

#[distributed_lock(key = "job:plain", hold_at_least = "1s", wait = "5s")]
pub async fn minimum_only() -> Result<u8, LockError> {
    Ok(1)
}

#[distributed_lock(keys = ["job:a", "job:b"], skip_if_held, hold_at_least = "1s")]
pub async fn both() -> Result<Option<std::option::Option<u8>>, LockError> {
    Ok(Some(None))
}

#[distributed_lock(semaphore = "exports", permits = 2, skip_if_held, hold_at_least = "1m")]
pub async fn one_of_two() -> Result<Option<u8>, LockError> {
    Ok(None)
}

#[async_trait]
pub trait Job {
    async fn run(&self) -> Result<Option<u32>, LockError>;
}

pub struct Nightly {
    locks: LockClient,
}

#[async_trait]
impl Job for Nightly {
    #[distributed_lock(key = "job:trait", client = self.locks, skip_if_held, hold_at_least = "30s")]
    async fn run(&self) -> Result<Option<u32>, LockError> {
        Ok(Some(3))
    }
}

fn main() {}
