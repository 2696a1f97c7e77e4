//! Sentinel: the master is found through the Sentinels, and found again after a
//! failover.
//!
//! A connection manager built for one master keeps dialing that address after a
//! failover, so distlock keeps its own: when a request fails in a way a failover
//! explains (the master is unreachable, or answers `READONLY` because it was
//! demoted), it asks the Sentinels for the master again, checks with `ROLE` that
//! the node really is a master, and swaps both connections (commands and
//! subscriber) to it. Waiters are woken so that they ask the new master.

use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{ConnectionInfo, PushInfo, PushKind, RedisResult, Value};
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Mutex;

/// The connections to the current master, with a generation that changes on every swap.
#[derive(Clone)]
pub(crate) struct Current {
    pub(crate) generation: u64,
    addr: String,
    pub(crate) commands: ConnectionManager,
    pub(crate) subscriber: ConnectionManager,
}

/// How to connect to a master once it is found.
#[derive(Clone)]
struct Settings {
    pushes: UnboundedSender<PushInfo>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl Settings {
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500))
    }
}

pub(crate) struct SentinelConn {
    sentinel: Mutex<SentinelClient>,
    current: RwLock<Current>,
    settings: Settings,
}

impl SentinelConn {
    pub(crate) async fn connect(
        sentinels: Vec<ConnectionInfo>,
        master_name: &str,
        pushes: UnboundedSender<PushInfo>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> RedisResult<Self> {
        let mut sentinel =
            SentinelClient::build(sentinels, master_name, None, SentinelServerType::Master)?;
        let settings = Settings {
            pushes,
            connect_timeout,
            response_timeout,
        };
        let current = resolve(&mut sentinel, &settings, 0).await?;
        Ok(Self {
            sentinel: Mutex::new(sentinel),
            current: RwLock::new(current),
            settings,
        })
    }

    /// The connections to the master as last resolved.
    pub(crate) fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Asks the Sentinels for the master again, unless someone already did since
    /// `seen` was current; swaps to it if it moved, and wakes every waiter.
    pub(crate) async fn reresolve(&self, seen: u64) {
        let mut sentinel = self.sentinel.lock().await;
        let current = self.current();
        if current.generation != seen {
            return;
        }
        match resolve(&mut sentinel, &self.settings, current.generation + 1).await {
            Ok(next) if next.addr != current.addr => {
                tracing::warn!(master = %next.addr, "distlock: the Sentinels name a new master; moving to it");
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = next;
                let _ = self.settings.pushes.send(PushInfo {
                    kind: PushKind::Disconnection,
                    data: Vec::new(),
                });
            }
            Ok(_) => {}
            Err(err) => {
                tracing::debug!(error = %err, "distlock: could not ask the Sentinels for the master");
            }
        }
    }
}

/// Whether a failed request may mean that the master moved.
pub(crate) fn master_may_have_moved(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || matches!(err.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
}

/// Finds the master through the Sentinels, checks that it says it is one, and
/// connects to it.
async fn resolve(
    sentinel: &mut SentinelClient,
    settings: &Settings,
    generation: u64,
) -> RedisResult<Current> {
    let client = sentinel.async_get_client().await?;
    let info = client.get_connection_info().clone();
    let addr = info.addr().to_string();
    let mut commands =
        ConnectionManager::new_with_config(client, settings.manager_config()).await?;
    let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut commands).await?;
    let is_master = matches!(role.first(), Some(Value::BulkString(role)) if role == b"master")
        || matches!(role.first(), Some(Value::SimpleString(role)) if role == "master");
    if !is_master {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "the node the Sentinels named is not a master (yet)",
            addr,
        )));
    }
    let settings_resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let sub_client = redis::Client::open(info.set_redis_settings(settings_resp3))?;
    let sub_config = settings
        .manager_config()
        .set_push_sender(settings.pushes.clone())
        .set_automatic_resubscription();
    let subscriber = ConnectionManager::new_with_config(sub_client, sub_config).await?;
    Ok(Current {
        generation,
        addr,
        commands,
        subscriber,
    })
}
