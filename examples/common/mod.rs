//! What the examples share: where Redis is.
//!
//! The first of these that is set (and not empty) wins:
//!
//! 1. `REDIS_CLUSTER_URLS`: the nodes of a Redis Cluster, comma-separated (as
//!    `cargo xtask cluster` prints them). Locks and data go to the cluster.
//! 2. `REDIS_SENTINEL_URLS`: Redis Sentinels, comma-separated (as
//!    `cargo xtask sentinel` prints them), that watch a master named
//!    `REDIS_SENTINEL_MASTER` (default `mymaster`, the name `cargo xtask sentinel`
//!    uses). Locks and data go to the master the Sentinels name.
//! 3. `REDIS_URL`: one server; default `redis://127.0.0.1:6379`.

// Each example uses a part of this module.
#![allow(dead_code)]

#[cfg(feature = "metrics")]
pub(crate) mod scrape;

use std::fmt;

use distlock::LockClientBuilder;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// The master name used when `REDIS_SENTINEL_MASTER` is not set.
pub(crate) const DEFAULT_SENTINEL_MASTER: &str = "mymaster";

/// Where Redis is, from the environment.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server.
    Single(String),
    /// Some nodes of a Redis Cluster (the others are found through them).
    Cluster(Vec<String>),
    /// The master that these Sentinels know by this name.
    Sentinel {
        /// The Sentinels' URLs.
        urls: Vec<String>,
        /// The name the Sentinels monitor the master under.
        master: String,
    },
}

impl Target {
    /// The target the environment names; see the module documentation for the
    /// variables and their precedence.
    pub(crate) fn from_env() -> Target {
        if let Some(urls) = url_list("REDIS_CLUSTER_URLS") {
            return Target::Cluster(urls);
        }
        if let Some(urls) = url_list("REDIS_SENTINEL_URLS") {
            let master = std::env::var("REDIS_SENTINEL_MASTER")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| DEFAULT_SENTINEL_MASTER.to_owned());
            return Target::Sentinel { urls, master };
        }
        let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        Target::Single(url)
    }

    /// A lock client builder pointed at the target.
    pub(crate) fn lock_client(&self) -> LockClientBuilder {
        let builder = LockClientBuilder::new();
        match self {
            Target::Single(url) => builder.url(url),
            Target::Cluster(urls) => builder.cluster(urls.clone()),
            Target::Sentinel { urls, master } => builder.sentinel(urls.clone(), master.clone()),
        }
    }

    /// A plain Redis connection for the example's own data: on Sentinel, to the
    /// master the Sentinels name now (it does not follow a later failover).
    pub(crate) async fn data(&self) -> redis::RedisResult<Data> {
        Ok(match self {
            Target::Single(url) => Data::Single(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            ),
            Target::Cluster(urls) => Data::Cluster(
                redis::cluster::ClusterClient::new(urls.clone())?
                    .get_async_connection()
                    .await?,
            ),
            Target::Sentinel { urls, master } => {
                let mut sentinel = SentinelClient::build(
                    urls.clone(),
                    master.clone(),
                    None,
                    SentinelServerType::Master,
                )?;
                Data::Single(
                    sentinel
                        .async_get_client()
                        .await?
                        .get_multiplexed_async_connection()
                        .await?,
                )
            }
        })
    }
}

/// The non-empty entries of the comma-separated list in the variable `name`; `None`
/// when it is unset or holds none.
fn url_list(name: &str) -> Option<Vec<String>> {
    let urls: Vec<String> = std::env::var(name)
        .ok()?
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect();
    (!urls.is_empty()).then_some(urls)
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Single(url) => write!(f, "{url}"),
            Target::Cluster(urls) => write!(f, "the Redis Cluster at {}", urls.join(", ")),
            Target::Sentinel { urls, master } => write!(
                f,
                "the master {master:?} of the Sentinels at {}",
                urls.join(", ")
            ),
        }
    }
}

/// A connection to one server (also the master behind Sentinels) or to a cluster;
/// commands and scripts work the same on both (each command of the examples touches
/// one key).
#[derive(Clone)]
pub(crate) enum Data {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Data {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Data::Single(conn) => conn.req_packed_command(cmd),
            Data::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Data::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Data::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Data::Single(conn) => conn.get_db(),
            Data::Cluster(conn) => conn.get_db(),
        }
    }
}
