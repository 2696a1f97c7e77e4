//! Methods, generics, lifetimes, `impl Trait`, patterns, `#[async_trait]` and every
//! argument compile, without warnings.
#![deny(warnings)]

use std::fmt::Display;
use std::sync::Arc;

use distlock::{distributed_lock, LockClient, LockError};

pub struct Service {
    locks: LockClient,
    tenant: String,
}

impl Service {
    #[distributed_lock(key = "{self.tenant}:{id}", client = self.locks)]
    pub async fn by_ref(&self, id: u64) -> Result<u64, LockError> {
        Ok(id)
    }

    #[distributed_lock(key = "{self.tenant}", client = self.locks, wait = "0s", lease = "2m")]
    pub async fn by_mut(&mut self) -> Result<(), LockError> {
        self.tenant.push('!');
        Ok(())
    }

    #[distributed_lock(key = "{self.tenant}", client = &self.locks, fencing, on_lost = "abort")]
    pub async fn by_arc(self: Arc<Self>) -> Result<Arc<Self>, LockError> {
        Ok(self)
    }

    #[distributed_lock(key = "{self.tenant}", client = self.locks.clone(), fencing = false)]
    pub async fn by_value(self) -> Result<Self, LockError> {
        Ok(self)
    }

    /// Several locks at once, with every other argument.
    #[distributed_lock(
        keys = ["{self.tenant}:order:{id}", "inventory:{sku}", "audit"],
        client = self.locks,
        wait = "2s",
        lease = "1m",
        fencing,
        on_lost = "abort",
    )]
    pub async fn checkout(&self, id: u64, sku: &str) -> Result<u64, LockError> {
        Ok(id + sku.len() as u64)
    }
}

/// Docs and attributes stay on the function.
#[must_use = "a future"]
#[distributed_lock(key = "gen:{id:>4}:{label}", client = locks, on_lost = "finish")]
pub async fn generic<'a, I: Display + Send, L>(
    locks: &'a LockClient,
    id: I,
    label: L,
    extra: impl AsRef<str> + Send,
) -> Result<impl Display + 'a, Box<dyn std::error::Error + Send + Sync>>
where
    L: Display + Send + 'a,
{
    let extra = extra.as_ref().to_owned();
    Ok(format!("{label}{extra}"))
}

#[distributed_lock(key = "pat:{a}:{b}", client = locks)]
pub async fn pattern(locks: Arc<LockClient>, (a, b): (u8, u8), mut n: u32) -> anyhow::Result<u32> {
    n += u32::from(a) + u32::from(b);
    Ok(n)
}

#[async_trait::async_trait]
pub trait Store {
    async fn put(&self, key: &str, value: u32) -> Result<(), LockError>;
    async fn take(self: Arc<Self>, key: String) -> anyhow::Result<u32>;
}

#[async_trait::async_trait]
impl Store for Service {
    #[distributed_lock(key = "{self.tenant}:{key}", client = self.locks)]
    async fn put(&self, key: &str, value: u32) -> Result<(), LockError> {
        let _ = value;
        Ok(())
    }

    #[distributed_lock(key = "{self.tenant}:{key}", client = self.locks, on_lost = "abort")]
    async fn take(self: Arc<Self>, key: String) -> anyhow::Result<u32> {
        Ok(u32::try_from(key.len())?)
    }
}

fn assert_send<T: Send>(_: T) {}

fn main() {
    let _ = |service: Service, locks: LockClient| {
        assert_send(service.by_ref(1));
        assert_send(generic(&locks, 1, "a", "b"));
        assert_send(pattern(Arc::new(locks.clone()), (1, 2), 3));
        assert_send(service.put("k", 1));
        assert_send(Arc::new(service).take("k".to_owned()));
    };
}
