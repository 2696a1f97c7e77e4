//! Clients of a server: lock clients with default settings, with fencing tokens or
//! with a watchdog lease of their own, and plain redis-rs connections.

use std::time::Duration;

use distlock::{LockClient, LockClientBuilder, LockError};
use distlock_testkit::{RedisCluster, RedisServer};

/// A builder pointed at `server`.
pub fn builder(server: &RedisServer) -> LockClientBuilder {
    LockClient::builder().url(server.url())
}

/// A connected client with default settings.
pub async fn client(server: &RedisServer) -> LockClient {
    builder(server).connect().await.expect("connect")
}

/// A connected client of `server` whose connections are named after `service`.
pub async fn service_client(server: &RedisServer, service: &str) -> LockClient {
    builder(server)
        .service(service)
        .connect()
        .await
        .expect("connected")
}

/// `N` connected clients of `server` with default settings, connected one after
/// another: `let [holder, waiter] = support::clients(&server).await;`.
pub async fn clients<const N: usize>(server: &RedisServer) -> [LockClient; N] {
    let mut clients = Vec::with_capacity(N);
    for _ in 0..N {
        clients.push(client(server).await);
    }
    let Ok(clients) = clients.try_into() else {
        unreachable!("{N} clients were connected")
    };
    clients
}

/// A connected client that gives every lock a fencing token.
pub async fn fenced_client(server: &RedisServer) -> LockClient {
    fenced(&server.url()).await
}

/// A connected client whose watchdog lease is `lease`.
pub async fn client_with_lease(server: &RedisServer, lease: Duration) -> LockClient {
    builder(server)
        .default_lease(lease)
        .connect()
        .await
        .expect("connect")
}

/// A connected client of `cluster` whose watchdog lease is `lease`.
pub async fn cluster_client(cluster: &RedisCluster, lease: Duration) -> LockClient {
    LockClient::builder()
        .cluster(cluster.urls())
        .default_lease(lease)
        .connect()
        .await
        .expect("connect to the cluster")
}

/// A client of `url` (a fault proxy, often) whose requests time out after
/// `response_timeout`, so that a late reply makes it retry or replay.
pub async fn client_with_timeout(url: &str, response_timeout: Duration) -> LockClient {
    LockClient::builder()
        .url(url)
        .response_timeout(response_timeout)
        .connect()
        .await
        .expect("connect")
}

/// A client of `url` that issues fencing tokens, with the default watchdog lease.
pub async fn fenced(url: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .fencing(true)
        .connect()
        .await
        .expect("connect")
}

/// A client of `url` that issues fencing tokens, with a watchdog lease of `lease`.
pub async fn fenced_with_lease(url: &str, lease: Duration) -> LockClient {
    LockClient::builder()
        .url(url)
        .fencing(true)
        .default_lease(lease)
        .connect()
        .await
        .expect("connect")
}

/// Connects with `builder` (within 3 s), takes lock `name` and gives it back: can
/// a client so built lock at all.
pub async fn lock_once(builder: LockClientBuilder, name: &str) -> Result<(), LockError> {
    let locks = builder
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await?;
    let guard = locks.lock(name).await?;
    guard.unlock().await
}

/// A plain redis-rs connection to `url`, to look at or tamper with the keys.
pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}
