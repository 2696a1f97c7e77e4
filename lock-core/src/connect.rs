//! Connecting a client, fed the builder's settings once they are checked
//! (`builder.rs`): one small connect function per deployment (one server,
//! Sentinel, Redlock, Cluster), the scripts loaded ahead of use, and the client's
//! parts started (the subscriber, the watchdog, the operator features).

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisResult};
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio_util::sync::CancellationToken;

use crate::backend::dial::dial_once;
use crate::backend::link::{Link, Links};
use crate::backend::sentinel::{self, NodeOptions, SentinelConn};
use crate::backend::tls::{self, TlsCertificates};
use crate::backend::url::resp3;
use crate::backend::{reply_text, Backend, Conn, SubConn};
use crate::client::LockClient;
use crate::error::LockError;
use crate::inner::{Inner, Settings};
use crate::ops::Operators;
use crate::scripts::Scripts;
use crate::subscriber;
use crate::watchdog::Watchdog;
use crate::who::Describer;

/// Connects to `endpoints` with `settings`, within the connect timeout: the
/// command connection, the subscriber connection for waiters, and the watchdog
/// task. The scripts are loaded ahead of use.
///
/// # Cancel safety
///
/// Dropping the future drops the half-made connections; nothing is left behind.
pub(crate) async fn connect(
    settings: Settings,
    endpoints: Endpoints,
) -> Result<LockClient, LockError> {
    let timeout = settings.connect_timeout;
    let servers = endpoints.describe();
    match tokio::time::timeout(timeout, settings.connect_with(endpoints)).await {
        Ok(result) => result,
        Err(_) => Err(LockError::connect(
            servers,
            redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection within the connect timeout ({timeout:?})"),
            )),
        )),
    }
}

impl Settings {
    /// [`connect`] within its timeout.
    ///
    /// # Cancel safety
    ///
    /// As [`connect`].
    async fn connect_with(self, endpoints: Endpoints) -> Result<LockClient, LockError> {
        let service = self.service.clone();
        let links = Links::new(&service);
        let shutdown = CancellationToken::new();
        let (push_tx, pushes) = mpsc::unbounded_channel();
        #[cfg(feature = "tls")]
        if endpoints.use_tls(&self.sentinel_node) {
            tls::ensure_provider();
        }
        let certs = self.certs.clone();
        let endpoints = endpoints.with_certificates(certs.as_ref())?;
        let (backend, sub_conn) = match endpoints {
            Endpoints::Single(info) => {
                let (conn, sub) = self.server(info, push_tx, &links).await?;
                (
                    Backend::one(Conn::Single(conn)),
                    SubConn::Servers(vec![sub]),
                )
            }
            Endpoints::Sentinel(sentinels, master_name) => {
                self.connect_sentinel(sentinels, &master_name, certs, push_tx, &links, &shutdown)
                    .await?
            }
            Endpoints::Redlock(nodes) => self.connect_redlock(nodes, push_tx, &links).await?,
            Endpoints::Cluster(nodes) => {
                self.connect_cluster(nodes, certs, push_tx, &links, &shutdown)
                    .await?
            }
        };
        let scripts = Arc::new(Scripts::new());
        let mut persists_nothing = false;
        for conn in backend.nodes() {
            persists_nothing |= preload(&mut conn.clone(), &scripts, self.fencing).await?;
        }
        let waiters = subscriber::start(sub_conn, pushes, shutdown.clone());
        let client = Describer::new(&service);
        let ops = Arc::new(Operators::new(
            self.operators.clone(),
            &backend,
            &scripts,
            &self.namespace,
            client.client(),
        ));
        let watchdog = Watchdog::spawn(
            backend.clone(),
            links.clone(),
            scripts.clone(),
            self.default_lease,
            self.replicas,
            ops.clone(),
            shutdown.clone(),
        );
        links.on_replaced(watchdog.replaced_hook());
        Ok(LockClient::new(Inner::new(
            backend,
            links,
            scripts,
            self,
            persists_nothing,
            waiters,
            watchdog,
            ops,
            shutdown.drop_guard(),
        )))
    }

    /// The settings of every connection manager: timeouts and reconnection.
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            // Attempts at most 100 ms apart, for about two seconds: a server that
            // comes back is found at once (and a replaced one checked, `link.rs`).
            .set_number_of_retries(20)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
    }

    /// A command connection and a RESP3 subscriber connection to one server, whose
    /// pushes go to `push_tx`.
    async fn server(
        &self,
        info: ConnectionInfo,
        push_tx: UnboundedSender<redis::PushInfo>,
        links: &Arc<Links>,
    ) -> Result<(Link<ConnectionManager>, Link<ConnectionManager>), LockError> {
        let server = info.addr().to_string();
        let failed = |err| LockError::connect(server.clone(), err);
        let client = redis::Client::open(info.clone()).map_err(failed)?;
        dial_once(&client, self.connect_timeout, self.response_timeout)
            .await
            .map_err(failed)?;
        let conn = ConnectionManager::new_with_config(client, self.manager_config())
            .await
            .map_err(failed)?;
        let sub_client = redis::Client::open(resp3(info)).map_err(failed)?;
        let sub_config = self
            .manager_config()
            .set_push_sender(push_tx)
            .set_automatic_resubscription();
        let sub = ConnectionManager::new_with_config(sub_client, sub_config)
            .await
            .map_err(failed)?;
        let mut conn = links.link(conn, server.clone());
        let mut sub = links.link(sub, server);
        conn.ensure_named().await;
        sub.ensure_named().await;
        Ok((conn, sub))
    }

    /// The master the Sentinels name; also listens for `+switch-master` on every
    /// Sentinel until `shutdown`, to move to a new master without waiting for a
    /// request to fail.
    async fn connect_sentinel(
        &self,
        sentinels: Vec<ConnectionInfo>,
        master_name: &str,
        certs: Option<TlsCertificates>,
        push_tx: UnboundedSender<redis::PushInfo>,
        links: &Arc<Links>,
        shutdown: &CancellationToken,
    ) -> Result<(Backend, SubConn), LockError> {
        let settings = sentinel::Settings {
            pushes: push_tx,
            connect_timeout: self.connect_timeout,
            response_timeout: self.response_timeout,
            nodes: NodeOptions {
                certs,
                ..self.sentinel_node.clone()
            },
            links: links.clone(),
        };
        let servers = Endpoints::Sentinel(sentinels.clone(), master_name.to_owned()).describe();
        let sentinel = SentinelConn::connect(sentinels, master_name, settings, shutdown)
            .await
            .map_err(|err| LockError::connect(servers, err))?;
        let generation = sentinel.current().generation;
        let sub = SubConn::Sentinel(sentinel.clone(), generation);
        Ok((Backend::one(Conn::Sentinel(sentinel)), sub))
    }

    /// Redlock's independent masters, each a server of its own.
    async fn connect_redlock(
        &self,
        nodes: Vec<ConnectionInfo>,
        push_tx: UnboundedSender<redis::PushInfo>,
        links: &Arc<Links>,
    ) -> Result<(Backend, SubConn), LockError> {
        let mut conns = Vec::with_capacity(nodes.len());
        let mut subs = Vec::with_capacity(nodes.len());
        for info in nodes {
            let (conn, sub) = self.server(info, push_tx.clone(), links).await?;
            conns.push(Conn::Single(conn));
            subs.push(sub);
        }
        let backend = Backend::redlock(conns, self.redlock_node_timeout);
        Ok((backend, SubConn::Servers(subs)))
    }

    /// A Redis Cluster: a command connection, and a RESP3 one for sharded pub/sub.
    async fn connect_cluster(
        &self,
        nodes: Vec<ConnectionInfo>,
        certs: Option<TlsCertificates>,
        push_tx: UnboundedSender<redis::PushInfo>,
        links: &Arc<Links>,
        shutdown: &CancellationToken,
    ) -> Result<(Backend, SubConn), LockError> {
        let builder = |nodes: Vec<ConnectionInfo>| {
            let builder = ClusterClientBuilder::new(nodes)
                .connection_timeout(self.connect_timeout)
                .response_timeout(self.response_timeout);
            match &certs {
                #[cfg(feature = "tls")]
                Some(certs) => builder.certs(certs.clone()),
                #[cfg(not(feature = "tls"))]
                Some(certs) => match *certs {},
                None => builder,
            }
        };
        let servers = Endpoints::Cluster(nodes.clone()).describe();
        let first_node = nodes.first().cloned();
        let failed = |err| LockError::connect(servers.clone(), err);
        let conn = builder(nodes.clone())
            .build()
            .map_err(failed)?
            .get_async_connection()
            .await
            .map_err(failed)?;
        // A lost connection to a node may come back to another server: grants wait
        // until every master was identified again (`link.rs`).
        let watching = links.clone();
        let pushes = move |push: redis::PushInfo| {
            if push.kind == redis::PushKind::Disconnection {
                watching.cluster_disconnected();
            }
            push_tx.send(push)
        };
        let sub = builder(nodes)
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()
            .map_err(failed)?
            .get_async_connection()
            .await
            .map_err(failed)?;
        if let Some(template) = first_node {
            links
                .watch_cluster(
                    conn.clone(),
                    template,
                    self.response_timeout,
                    shutdown.clone(),
                )
                .await;
        }
        let mut conn = links.cluster_link(conn, servers.clone());
        let mut sub = links.cluster_link(sub, servers.clone());
        conn.ensure_named().await;
        sub.ensure_named().await;
        Ok((Backend::one(Conn::Cluster(conn)), SubConn::Cluster(sub)))
    }
}

/// The deployment to connect to, as the builder checked its URLs.
#[derive(Clone)]
pub(crate) enum Endpoints {
    Single(ConnectionInfo),
    Cluster(Vec<ConnectionInfo>),
    Sentinel(Vec<ConnectionInfo>, String),
    Redlock(Vec<ConnectionInfo>),
}

impl Endpoints {
    /// Whether any connection of the deployment is TLS: a `rediss://` URL, or the
    /// data nodes behind Sentinel with `sentinel_node_tls`.
    pub(crate) fn use_tls(&self, sentinel_node: &NodeOptions) -> bool {
        let tls = |info: &ConnectionInfo| matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        match self {
            Self::Single(info) => tls(info),
            Self::Cluster(nodes) | Self::Redlock(nodes) => nodes.iter().any(tls),
            Self::Sentinel(sentinels, _) => sentinel_node.tls || sentinels.iter().any(tls),
        }
    }

    /// The servers, for messages: `host:port` of each (never a password).
    pub(crate) fn describe(&self) -> String {
        let list = |nodes: &[ConnectionInfo]| {
            nodes
                .iter()
                .map(|info| info.addr().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::Single(info) => info.addr().to_string(),
            Self::Cluster(nodes) => format!("the cluster nodes {}", list(nodes)),
            Self::Redlock(nodes) => format!("the Redlock masters {}", list(nodes)),
            Self::Sentinel(sentinels, name) => {
                format!("master `{name}` of the Sentinels {}", list(sentinels))
            }
        }
    }

    /// The endpoints with the certificates of `tls_root_ca` and `tls_client_cert` on
    /// every TLS connection (the data nodes behind Sentinel get them when dialed).
    pub(crate) fn with_certificates(self, certs: Option<&TlsCertificates>) -> RedisResult<Self> {
        let each = |nodes: Vec<ConnectionInfo>| {
            nodes
                .into_iter()
                .map(|info| tls::with_certificates(info, certs))
                .collect::<RedisResult<Vec<_>>>()
        };
        Ok(match self {
            Self::Single(info) => Self::Single(tls::with_certificates(info, certs)?),
            Self::Cluster(nodes) => Self::Cluster(each(nodes)?),
            Self::Redlock(nodes) => Self::Redlock(each(nodes)?),
            Self::Sentinel(sentinels, name) => Self::Sentinel(each(sentinels)?, name),
        })
    }
}

/// Loads distlock's function library, or where the server refuses functions every
/// script (so the first lock needs no extra round trip; see `library.rs`), and warns
/// when the eviction policy can remove lock keys, and, for a client with fencing on,
/// when the server persists nothing (a restart then loses every lock, and the
/// fencing counters: tokens stay unique, see `lua/lock.lua`'s `next_token`, but the
/// locks are gone). Two round trips on a single server; on a cluster the library
/// goes to every master. Whether the server persists nothing (`false` when it
/// could not be read, and on a cluster).
///
/// # Cancel safety
///
/// Safe to drop: what was loaded stays loaded; `connect` as a whole starts again.
async fn preload(conn: &mut Conn, scripts: &Scripts, fencing: bool) -> Result<bool, LockError> {
    let functions = match scripts.library().load(conn).await {
        Ok(loaded) => loaded,
        Err(err) => {
            // Not refused as such (a server out of memory, a cluster node down):
            // calls try the library again, and go by EVALSHA while it cannot load.
            tracing::debug!(error = %err, "distlock: could not load the function library at connect");
            false
        }
    };
    let sources: Vec<&str> = if functions {
        Vec::new()
    } else {
        scripts.all().iter().map(|script| script.code()).collect()
    };
    if conn.is_cluster() {
        load_on_cluster(conn, &sources).await?;
        return Ok(false);
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for source in &sources {
        pipe.cmd("SCRIPT").arg("LOAD").arg(*source);
    }
    for setting in SETTINGS {
        pipe.cmd("CONFIG").arg("GET").arg(setting);
    }
    let replies: Vec<redis::Value> = pipe.query_async(conn).await?;
    let (loads, settings) = replies.split_at(sources.len().min(replies.len()));
    if let Some(redis::Value::ServerError(err)) = loads
        .iter()
        .find(|reply| matches!(reply, redis::Value::ServerError(_)))
    {
        return Err(scripts_refused(redis::RedisError::from(err.clone())));
    }
    Ok(check_settings(settings, fencing))
}

/// The settings `preload` reads, in this order: eviction, persistence (AOF, RDB).
const SETTINGS: [&str; 3] = ["maxmemory-policy", "appendonly", "save"];

/// A cluster: each script loaded on its own (`SCRIPT LOAD` goes to every node).
async fn load_on_cluster(conn: &mut Conn, sources: &[&str]) -> Result<(), LockError> {
    for source in sources {
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(*source);
        load.query_async::<redis::Value>(conn)
            .await
            .map_err(|err| match err.code() {
                Some(_) => scripts_refused(err),
                None => LockError::from(err),
            })?;
    }
    Ok(())
}

/// The error of a server that refused distlock's scripts: a missing permission
/// as such, else a server too old.
fn scripts_refused(err: redis::RedisError) -> LockError {
    if err.code() == Some("NOPERM") {
        return LockError::from(err);
    }
    LockError::UnsupportedServer {
        reason: format!(
            "the server refused distlock's scripts ({err}); distlock needs Redis 7.0 or newer \
             (or Valkey 7.2 or newer)"
        ),
    }
}

/// Reads the answers to `CONFIG GET` of [`SETTINGS`]: warns of an evicting
/// `maxmemory-policy`, and of fencing on a server that persists nothing; whether
/// it persists nothing.
fn check_settings(replies: &[redis::Value], fencing: bool) -> bool {
    // Each CONFIG GET answers [name, value] (RESP2) or {name: value} (RESP3); a
    // user without `config|get` gets an error, and no warning.
    let value = |index: usize| match replies.get(index) {
        Some(redis::Value::Array(pair)) => pair.get(1).and_then(reply_text),
        Some(redis::Value::Map(pairs)) => pairs.first().and_then(|(_, value)| reply_text(value)),
        _ => None,
    };
    let persists_nothing =
        value(1).as_deref() == Some("no") && value(2).is_some_and(|save| save.trim().is_empty());
    if fencing && persists_nothing {
        crate::inner::warn_of_no_persistence();
    }
    if let Some(policy) = value(0).filter(|policy| policy != "noeviction") {
        tracing::warn!(
            maxmemory_policy = %policy,
            "distlock: this Redis evicts keys under memory pressure (maxmemory-policy \
             {policy}), which can delete a held lock; use `noeviction` on servers that hold locks"
        );
    }
    persists_nothing
}
