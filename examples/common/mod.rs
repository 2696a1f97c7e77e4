//! What the examples share: where Redis is.
//!
//! - `REDIS_CLUSTER_URLS`: the nodes of a Redis Cluster, comma-separated (as
//!   `cargo xtask cluster` prints them). When set, locks and data go to the cluster.
//! - otherwise `REDIS_URL`: one server; default `redis://127.0.0.1:6379`.

// Each example uses a part of this module.
#![allow(dead_code)]

use std::fmt;

use distlock::LockClientBuilder;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

/// Where Redis is, from the environment.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server.
    Single(String),
    /// Some nodes of a Redis Cluster (the others are found through them).
    Cluster(Vec<String>),
}

impl Target {
    pub(crate) fn from_env() -> Target {
        if let Ok(urls) = std::env::var("REDIS_CLUSTER_URLS") {
            let urls: Vec<String> = urls
                .split(',')
                .map(str::trim)
                .filter(|url| !url.is_empty())
                .map(str::to_owned)
                .collect();
            if !urls.is_empty() {
                return Target::Cluster(urls);
            }
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
        }
    }

    /// A plain Redis connection for the example's own data.
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
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Single(url) => write!(f, "{url}"),
            Target::Cluster(urls) => write!(f, "the Redis Cluster at {}", urls.join(", ")),
        }
    }
}

/// A connection to one server or to a cluster; commands and scripts work the same on
/// both (each command of the examples touches one key).
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
