//! The client: configuration, connections, and every operation on locks.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::{ConnectionInfo, IntoConnectionInfo, ProtocolVersion};
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use crate::acquire::{spawn, Detached, LockRequest, TryLockRequest};
use crate::backend::{Backend, Conn};
use crate::faults::{self, Fault};
use crate::guard::{HeldLock, Hold};
use crate::name::{validate_namespace, LockKeys};
use crate::scripts::{unexpected_reply, ReleaseReply, Scripts, SOURCES};
use crate::sentinel::{NodeAuth, NodeOptions, SentinelConn};
use crate::subscriber::{SubConn, Subscriber};
use crate::watchdog::Watchdog;
use crate::LockError;

/// The shortest lease accepted.
pub const MIN_LEASE: Duration = Duration::from_millis(1);
/// The longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// The shortest watchdog lease accepted ([`LockClientBuilder::default_lease`]): the
/// watchdog renews at a third of it, and each renewal needs a round trip.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);

static NEXT_CLIENT_ID: AtomicU64 = AtomicU64::new(1);
static GLOBAL: RwLock<Option<LockClient>> = RwLock::new(None);

/// Configures and connects a [`LockClient`].
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
///
/// let locks = LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .namespace("billing")
///     .default_wait(Duration::from_secs(5))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClientBuilder {
    target: Option<Target>,
    namespace: String,
    default_wait: Duration,
    default_lease: Duration,
    fencing: bool,
    connect_timeout: Duration,
    response_timeout: Duration,
    replicas: Option<(u32, Duration)>,
    redlock_node_timeout: Duration,
    sentinel_node: NodeOptions,
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl LockClientBuilder {
    /// A builder with every setting at its default; [`url`](Self::url) must be set.
    pub fn new() -> Self {
        Self {
            target: None,
            namespace: "distlock".to_owned(),
            default_wait: Duration::from_secs(10),
            default_lease: Duration::from_secs(30),
            fencing: false,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_millis(500),
            replicas: None,
            redlock_node_timeout: Duration::from_millis(50),
            sentinel_node: NodeOptions::default(),
        }
    }

    /// The Redis server, as a URL: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS. Required.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.target = Some(Target::Single(url.into()));
        self
    }

    /// A Redis Cluster, given the URLs of some of its nodes (the others are found
    /// through them). Replaces [`url`](Self::url).
    ///
    /// The three Redis names of a lock share one hash slot, so each lock lives on one
    /// shard: locks spread over every master, and waiting uses sharded pub/sub
    /// (`SSUBSCRIBE`, `SPUBLISH`). A failover to a replica that had not yet received a
    /// lock loses it (the holder is told at its next renewal).
    pub fn cluster<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.target = Some(Target::Cluster(urls.into_iter().map(Into::into).collect()));
        self
    }

    /// A master managed by Redis Sentinel: the URLs of some Sentinels and the name
    /// they know the master by. Replaces [`url`](Self::url).
    ///
    /// The client asks the Sentinels for the master, checks with `ROLE` that it is
    /// one, and after a failover (the master unreachable, or answering `READONLY`
    /// because it was demoted) asks again and moves to the new master, so it never
    /// keeps writing to a demoted one. A failover to a replica that had not yet
    /// received a lock loses it: see [`replicas`](Self::replicas).
    ///
    /// Each Sentinel URL carries that Sentinel's own credentials and TLS
    /// (`redis://user:password@host:26379`, `rediss://...`). The master is dialed at
    /// the address the Sentinels name, with the settings of
    /// [`sentinel_node_password`](Self::sentinel_node_password) (or
    /// [`sentinel_node_auth`](Self::sentinel_node_auth)),
    /// [`sentinel_node_tls`](Self::sentinel_node_tls) and
    /// [`sentinel_node_db`](Self::sentinel_node_db): by default no password, no TLS
    /// and database 0.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use distlock::LockClient;
    ///
    /// let locks = LockClient::builder()
    ///     .sentinel(
    ///         ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///         "locks",
    ///     )
    ///     // The `requirepass` of the master and its replicas:
    ///     .sentinel_node_password("s3cret")
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel<I, S>(mut self, sentinels: I, master_name: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.target = Some(Target::Sentinel {
            sentinels: sentinels.into_iter().map(Into::into).collect(),
            master_name: master_name.into(),
        });
        self
    }

    /// The password of the data nodes behind [`sentinel`](Self::sentinel) (their
    /// `requirepass`, that is the `default` user), sent to the master the Sentinels
    /// name and to every master after a failover. Default: none. Replaces
    /// [`sentinel_node_auth`](Self::sentinel_node_auth).
    ///
    /// Give every data node the same password (and `masterauth`), since any replica
    /// may become the master. The password never appears in `Debug` output or in
    /// logs. Must not be empty; only with [`sentinel`](Self::sentinel).
    pub fn sentinel_node_password(mut self, password: impl Into<String>) -> Self {
        self.sentinel_node.auth = Some(NodeAuth {
            username: None,
            password: password.into(),
        });
        self
    }

    /// An ACL user and its password for the data nodes behind
    /// [`sentinel`](Self::sentinel), sent to the master the Sentinels name and to
    /// every master after a failover. Default: none. Replaces
    /// [`sentinel_node_password`](Self::sentinel_node_password).
    ///
    /// The user needs the same rules on every data node as on a single server (see
    /// the ACL section of the README). The password never appears in `Debug` output
    /// or in logs. Neither may be empty; only with [`sentinel`](Self::sentinel).
    pub fn sentinel_node_auth(
        mut self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.sentinel_node.auth = Some(NodeAuth {
            username: Some(username.into()),
            password: password.into(),
        });
        self
    }

    /// Whether the data nodes behind [`sentinel`](Self::sentinel) speak TLS, as a
    /// `rediss://` URL would: the certificate is verified against the platform's
    /// roots (which honour `SSL_CERT_FILE`) and must name the address the Sentinels
    /// announce (an IP address unless they announce hostnames). Default: off. Only
    /// with [`sentinel`](Self::sentinel); TLS to the Sentinels themselves is set by
    /// their URLs.
    pub fn sentinel_node_tls(mut self, tls: bool) -> Self {
        self.sentinel_node.tls = tls;
        self
    }

    /// The database of the data nodes behind [`sentinel`](Self::sentinel) that
    /// holds the locks (as `/db` in a URL). Default: 0. Only with
    /// [`sentinel`](Self::sentinel).
    pub fn sentinel_node_db(mut self, db: u32) -> Self {
        self.sentinel_node.db = db;
        self
    }

    /// Redlock over independent Redis masters (no replication between them), given
    /// their URLs; an odd number, 3 or more, is usual. Replaces [`url`](Self::url).
    ///
    /// Every operation goes to all masters in parallel, each bounded by
    /// [`redlock_node_timeout`](Self::redlock_node_timeout). A lock is granted when a
    /// majority granted it while the lease still had time left (lease − elapsed −
    /// clock drift); otherwise it is given back everywhere and tried again after a
    /// short random delay within the wait. Re-entry, the watchdog (a lock is lost when
    /// a majority no longer has it) and waking waiters work as on one server. Fencing
    /// tokens are not available on Redlock: per-node counters do not give a single
    /// order.
    pub fn redlock<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.target = Some(Target::Redlock(urls.into_iter().map(Into::into).collect()));
        self
    }

    /// How long each Redlock node may take to answer one request before it counts as
    /// not granting it. Default: 50 ms; keep it far below the lease.
    pub fn redlock_node_timeout(mut self, timeout: Duration) -> Self {
        self.redlock_node_timeout = timeout;
        self
    }

    /// The prefix of every Redis key and channel distlock uses: `<namespace>:{name}`.
    /// Default: `distlock`. 1 to 128 bytes, without `{` or `}`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// How long [`LockClient::lock`] waits for a busy lock unless the request says
    /// otherwise with `.wait(..)`. Default: 10 s. Zero fails fast.
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.default_wait = wait;
        self
    }

    /// The watchdog lease: how long a lock outlives a client that stops renewing it
    /// (a crash, a partition, a stalled runtime). The watchdog renews it every third
    /// of it. Default: 30 s; from [`MIN_WATCHDOG_LEASE`] to [`MAX_LEASE`].
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease;
        self
    }

    /// Issue fencing tokens for every lock of this client (a request can still turn
    /// them on with `.fencing(true)`). Default: off, because each fenced name keeps a
    /// small counter key in Redis forever, so that tokens never repeat.
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// How long connecting may take before [`connect`](Self::connect) gives up.
    /// Default: 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long a single Redis request may take before it fails. Default: 500 ms.
    /// Keep it well below a third of the lease.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Waits, after each new lock, until `replicas` replicas have received it (Redis
    /// `WAIT`, sent in the same round trip as the acquire), for at most `timeout`.
    /// When fewer acknowledge in time, the lock is released and the acquire fails
    /// with [`LockError::ReplicationNotConfirmed`]. Re-entries do not wait.
    ///
    /// This narrows, but does not close, the window in which a failover to a replica
    /// loses a lock: replication stays asynchronous. Default: off. `timeout` must be
    /// at least 1 ms and below the [`response_timeout`](Self::response_timeout).
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// The namespace that will be used.
    pub fn get_namespace(&self) -> &str {
        &self.namespace
    }

    /// The default wait that will be used.
    pub fn get_default_wait(&self) -> Duration {
        self.default_wait
    }

    /// The watchdog lease that will be used.
    pub fn get_default_lease(&self) -> Duration {
        self.default_lease
    }

    /// Whether every lock will get a fencing token.
    pub fn get_fencing(&self) -> bool {
        self.fencing
    }

    fn validate(&self) -> Result<Endpoints, LockError> {
        validate_namespace(&self.namespace)?;
        if self.default_lease < MIN_WATCHDOG_LEASE || self.default_lease > MAX_LEASE {
            return Err(LockError::invalid_option(
                "default_lease",
                format!(
                    "{:?} is out of range; use {MIN_WATCHDOG_LEASE:?} to {MAX_LEASE:?} (default 30 s)",
                    self.default_lease
                ),
            ));
        }
        if let Some((_, timeout)) = self.replicas {
            if timeout < Duration::from_millis(1) || timeout >= self.response_timeout {
                return Err(LockError::invalid_option(
                    "replicas",
                    format!(
                        "the timeout {timeout:?} must be at least 1 ms and below the response \
                         timeout ({:?}); raise `response_timeout` or lower the replicas timeout",
                        self.response_timeout
                    ),
                ));
            }
        }
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(LockError::invalid_option(
                "connect_timeout",
                "timeouts must be above zero",
            ));
        }
        self.validate_sentinel_node()?;
        match &self.target {
            None => Err(LockError::invalid_option(
                "url",
                "no Redis URL was given; call `.url(\"redis://127.0.0.1:6379\")` (or `.cluster([..])`)",
            )),
            Some(Target::Single(url)) => {
                Ok(Endpoints::Single(parse_url("url", url)?))
            }
            Some(Target::Sentinel {
                sentinels,
                master_name,
            }) => {
                if sentinels.is_empty() || master_name.is_empty() {
                    return Err(LockError::invalid_option(
                        "sentinel",
                        "give the URLs of one or more Sentinels and the master's name, as in \
                         `.sentinel([\"redis://127.0.0.1:26379\"], \"mymaster\")`",
                    ));
                }
                let nodes = parse_urls("sentinel", sentinels, "one or more Sentinels")?;
                Ok(Endpoints::Sentinel(nodes, master_name.clone()))
            }
            Some(Target::Redlock(urls)) => {
                let nodes = parse_urls("redlock", urls, "the independent masters")?;
                if self.fencing {
                    return Err(LockError::invalid_option(
                        "fencing",
                        "fencing tokens are not available on Redlock; use a single server, \
                         Sentinel or a cluster where fencing matters",
                    ));
                }
                if self.replicas.is_some() {
                    return Err(LockError::invalid_option(
                        "replicas",
                        "replica acknowledgements do not apply to Redlock's independent masters",
                    ));
                }
                if self.redlock_node_timeout.is_zero()
                    || self.redlock_node_timeout * 3 > self.default_lease
                {
                    return Err(LockError::invalid_option(
                        "redlock_node_timeout",
                        format!(
                            "{:?} must be above zero and far below the lease ({:?})",
                            self.redlock_node_timeout, self.default_lease
                        ),
                    ));
                }
                Ok(Endpoints::Redlock(nodes))
            }
            Some(Target::Cluster(urls)) => Ok(Endpoints::Cluster(parse_urls(
                "cluster",
                urls,
                "one or more cluster nodes",
            )?)),
        }
    }

    /// Checks the `sentinel_node_*` settings: they apply only to a Sentinel target,
    /// and credentials may not be empty.
    fn validate_sentinel_node(&self) -> Result<(), LockError> {
        let node = &self.sentinel_node;
        let is_sentinel = matches!(self.target, Some(Target::Sentinel { .. }));
        if let (Some(option), Some(_), false) = (node.first_set_option(), &self.target, is_sentinel)
        {
            return Err(LockError::invalid_option(
                option,
                "applies to the data nodes behind `.sentinel(..)` only; with `.url(..)`, \
                 `.cluster(..)` or `.redlock(..)` put the credentials, TLS (`rediss://`) and \
                 database in the URLs",
            ));
        }
        if let Some(auth) = &node.auth {
            if auth.username.as_deref() == Some("") {
                return Err(LockError::invalid_option(
                    "sentinel_node_auth",
                    "the user name is empty; give the ACL user of the data nodes, or use \
                     `.sentinel_node_password(..)` for the `default` user",
                ));
            }
            if auth.password.is_empty() {
                return Err(LockError::invalid_option(
                    node.auth_option(),
                    "the password is empty; give the data nodes' password (their \
                     `requirepass`, or the ACL user's), or leave the option out when they \
                     have none",
                ));
            }
        }
        Ok(())
    }

    /// Connects to Redis: the command connection, the subscriber connection for
    /// waiters, and the watchdog task. The scripts are loaded ahead of use.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidOption`] for a setting out of range or an unparsable URL,
    /// before any connection is tried; [`LockError::Redis`] when the server cannot be
    /// reached within the connect timeout; [`LockError::UnsupportedServer`] for a
    /// server older than Redis 7.0; [`LockError::PermissionDenied`] when the Redis user
    /// may not load scripts.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the half-made connections; nothing is left behind.
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let endpoints = self.validate()?;
        let timeout = self.connect_timeout;
        match tokio::time::timeout(timeout, self.connect_with(endpoints)).await {
            Ok(result) => result,
            Err(_) => Err(LockError::Redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "connect timed out",
                format!(
                    "no connection to Redis within {timeout:?}; check that the server runs and the \
                     URL is right"
                ),
            )))),
        }
    }

    async fn connect_with(self, endpoints: Endpoints) -> Result<LockClient, LockError> {
        let shutdown = CancellationToken::new();
        let manager_config = || {
            ConnectionManagerConfig::new()
                .set_connection_timeout(Some(self.connect_timeout))
                .set_response_timeout(Some(self.response_timeout))
                .set_number_of_retries(4)
                .set_max_delay(Duration::from_secs(1))
        };
        // A command connection and a RESP3 subscriber connection to one server,
        // whose pushes go to `push_tx`.
        let single = |info: ConnectionInfo, push_tx| async move {
            let client = redis::Client::open(info.clone())?;
            let conn = ConnectionManager::new_with_config(client, manager_config()).await?;
            let sub_client = redis::Client::open(resp3(info))?;
            let sub_config = manager_config()
                .set_push_sender(push_tx)
                .set_automatic_resubscription();
            let sub = ConnectionManager::new_with_config(sub_client, sub_config).await?;
            Ok::<_, LockError>((conn, sub))
        };
        let (backend, sub_conn, pushes) = match endpoints {
            Endpoints::Single(info) => {
                let (push_tx, pushes) = tokio::sync::mpsc::unbounded_channel();
                let (conn, sub) = single(info, push_tx).await?;
                (
                    Backend::one(Conn::Single(conn)),
                    SubConn::Single(sub),
                    pushes,
                )
            }
            Endpoints::Sentinel(sentinels, master_name) => {
                let (push_tx, pushes) = tokio::sync::mpsc::unbounded_channel();
                // Also listens for `+switch-master` on every Sentinel until
                // `shutdown`, to move to a new master without waiting for a
                // request to fail.
                let sentinel = SentinelConn::connect(
                    sentinels,
                    &master_name,
                    &self.sentinel_node,
                    push_tx,
                    self.connect_timeout,
                    self.response_timeout,
                    &shutdown,
                )
                .await?;
                let generation = sentinel.current().generation;
                let sub = SubConn::Sentinel(sentinel.clone(), generation);
                (Backend::one(Conn::Sentinel(sentinel)), sub, pushes)
            }
            Endpoints::Redlock(nodes) => {
                let (push_tx, pushes) = tokio::sync::mpsc::unbounded_channel();
                let mut conns = Vec::with_capacity(nodes.len());
                let mut subs = Vec::with_capacity(nodes.len());
                for info in nodes {
                    let (conn, sub) = single(info, push_tx.clone()).await?;
                    conns.push(Conn::Single(conn));
                    subs.push(sub);
                }
                let backend = Backend::redlock(conns, self.redlock_node_timeout);
                (backend, SubConn::Many(subs), pushes)
            }
            Endpoints::Cluster(nodes) => {
                let builder = |nodes: Vec<ConnectionInfo>| {
                    ClusterClientBuilder::new(nodes)
                        .connection_timeout(self.connect_timeout)
                        .response_timeout(self.response_timeout)
                };
                let conn = builder(nodes.clone())
                    .build()?
                    .get_async_connection()
                    .await?;
                let (push_tx, pushes) = tokio::sync::mpsc::unbounded_channel();
                let sub = builder(nodes)
                    .use_protocol(ProtocolVersion::RESP3)
                    .push_sender(push_tx)
                    .build()?
                    .get_async_connection()
                    .await?;
                (
                    Backend::one(Conn::Cluster(conn)),
                    SubConn::Cluster(sub),
                    pushes,
                )
            }
        };
        for conn in backend.nodes() {
            preload(&mut conn.clone()).await?;
        }
        let scripts = Arc::new(Scripts::new());
        let subscriber = Subscriber::start(sub_conn, pushes, shutdown.clone());
        let watchdog = Watchdog::spawn(
            backend.clone(),
            scripts.clone(),
            self.default_lease,
            self.replicas,
            shutdown.clone(),
        );

        let id = NEXT_CLIENT_ID.fetch_add(1, Ordering::Relaxed);
        Ok(LockClient {
            inner: Arc::new(Inner {
                id,
                uuid: uuid::Uuid::new_v4().simple().to_string(),
                backend,
                scripts,
                config: Config {
                    replicas: self.replicas,
                    namespace: self.namespace,
                    default_wait: self.default_wait,
                    default_lease: self.default_lease,
                    fencing: self.fencing,
                },
                owners: AtomicU64::new(0),
                attempts: AtomicU64::new(0),
                holds: AtomicU64::new(0),
                subscriber,
                watchdog,
                _shutdown: shutdown.drop_guard(),
            }),
        })
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("target", &self.target)
            .field("namespace", &self.namespace)
            .field("default_wait", &self.default_wait)
            .field("default_lease", &self.default_lease)
            .field("fencing", &self.fencing)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .field("replicas", &self.replicas)
            .field("redlock_node_timeout", &self.redlock_node_timeout)
            .field("sentinel_node", &self.sentinel_node)
            .finish()
    }
}

/// Where the client connects.
#[derive(Clone)]
enum Target {
    Single(String),
    Cluster(Vec<String>),
    Sentinel {
        sentinels: Vec<String>,
        master_name: String,
    },
    Redlock(Vec<String>),
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Single(url) => f.debug_tuple("Single").field(&redact(url)).finish(),
            Self::Cluster(urls) => f
                .debug_tuple("Cluster")
                .field(&urls.iter().map(|url| redact(url)).collect::<Vec<_>>())
                .finish(),
            Self::Sentinel {
                sentinels,
                master_name,
            } => f
                .debug_struct("Sentinel")
                .field(
                    "sentinels",
                    &sentinels.iter().map(|url| redact(url)).collect::<Vec<_>>(),
                )
                .field("master_name", master_name)
                .finish(),
            Self::Redlock(urls) => f
                .debug_tuple("Redlock")
                .field(&urls.iter().map(|url| redact(url)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// A validated [`Target`].
enum Endpoints {
    Single(ConnectionInfo),
    Cluster(Vec<ConnectionInfo>),
    Sentinel(Vec<ConnectionInfo>, String),
    Redlock(Vec<ConnectionInfo>),
}

fn parse_url(option: &'static str, url: &str) -> Result<ConnectionInfo, LockError> {
    url.into_connection_info().map_err(|err| {
        LockError::invalid_option(
            option,
            format!(
                "`{}` is not a Redis URL ({err}); write it as \
                 `redis://[user:password@]host:port[/db]` or `rediss://...` for TLS",
                redact(url)
            ),
        )
    })
}

/// Parses the URLs of a multi-node target; none at all is refused, with a hint of
/// which nodes to list.
fn parse_urls(
    option: &'static str,
    urls: &[String],
    nodes: &str,
) -> Result<Vec<ConnectionInfo>, LockError> {
    if urls.is_empty() {
        return Err(LockError::invalid_option(
            option,
            format!("no node URL was given; pass the URLs of {nodes}"),
        ));
    }
    urls.iter().map(|url| parse_url(option, url)).collect()
}

/// The same server, spoken to in RESP3 (push messages for pub/sub).
fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.set_redis_settings(settings)
}

/// A URL with any password replaced, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Loads every script (so the first lock needs no extra round trip) and warns when the
/// eviction policy can remove lock keys. One round trip on a single server; on a
/// cluster each `SCRIPT LOAD` goes to every node.
async fn preload(conn: &mut Conn) -> Result<(), LockError> {
    let refused = |err: redis::RedisError| {
        if err.code() == Some("NOPERM") {
            return LockError::from(err);
        }
        LockError::UnsupportedServer {
            reason: format!(
                "the server refused distlock's scripts ({err}); distlock needs Redis 7.0 or \
                 newer (or Valkey 7.2 or newer)"
            ),
        }
    };
    if conn.is_cluster() {
        for source in SOURCES {
            let loaded: redis::RedisResult<redis::Value> = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(source)
                .query_async(conn)
                .await;
            match loaded {
                Err(err) if err.code().is_some() => return Err(refused(err)),
                other => {
                    other?;
                }
            }
        }
        return Ok(());
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for source in SOURCES {
        pipe.cmd("SCRIPT").arg("LOAD").arg(source);
    }
    pipe.cmd("CONFIG").arg("GET").arg("maxmemory-policy");
    let replies: Vec<redis::Value> = pipe.query_async(conn).await?;
    for reply in replies.iter().take(SOURCES.len()) {
        if let redis::Value::ServerError(err) = reply {
            return Err(refused(redis::RedisError::from(err.clone())));
        }
    }
    if let Some(redis::Value::Array(pair)) = replies.last() {
        let policy = pair.get(1).and_then(|value| match value {
            redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        });
        if let Some(policy) = policy {
            if policy != "noeviction" {
                tracing::warn!(
                    maxmemory_policy = %policy,
                    "distlock: this Redis evicts keys under memory pressure (maxmemory-policy \
                     {policy}), which can delete a held lock; use `noeviction` on servers that hold locks"
                );
            }
        }
    }
    Ok(())
}

#[derive(Debug)]
pub(crate) struct Config {
    /// Replicas that must acknowledge each new lock, and how long to wait for them.
    pub(crate) replicas: Option<(u32, Duration)>,
    pub(crate) namespace: String,
    pub(crate) default_wait: Duration,
    pub(crate) default_lease: Duration,
    pub(crate) fencing: bool,
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    uuid: String,
    pub(crate) backend: Backend,
    pub(crate) scripts: Arc<Scripts>,
    pub(crate) config: Config,
    owners: AtomicU64,
    attempts: AtomicU64,
    holds: AtomicU64,
    pub(crate) subscriber: Subscriber,
    pub(crate) watchdog: Watchdog,
    _shutdown: DropGuard,
}

/// A connection to Redis that takes, re-enters, waits for and releases locks.
///
/// Cheap to clone (an `Arc`): clone it into every task that needs it. Background
/// tasks (the watchdog, the waiters' subscriber) stop when the last clone and the last
/// guard are gone.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
///
/// let locks = LockClient::builder().url("redis://127.0.0.1:6379").connect().await?;
/// let guard = locks.lock("report:daily").wait(Duration::from_secs(2)).await?;
/// // ... exclusive work ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("namespace", &self.inner.config.namespace)
            .field("default_wait", &self.inner.config.default_wait)
            .field("default_lease", &self.inner.config.default_lease)
            .field("fencing", &self.inner.config.fencing)
            .finish_non_exhaustive()
    }
}

/// What [`LockClient::inspect`] found about a lock. Owner ids are never shown.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Whether some owner holds the lock.
    pub held: bool,
    /// The holder's hold count (its re-entry depth); 0 when free.
    pub hold_count: u64,
    /// How long the lease still runs; `None` when free, or when the key has no expiry.
    pub lease_remaining: Option<Duration>,
    /// The holder's fencing token, when it took one.
    pub fencing_token: Option<u64>,
    /// The last fencing token ever issued for this name; `None` when none was.
    pub last_fencing_token: Option<u64>,
}

impl LockClient {
    /// A builder to configure and connect a client.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::new()
    }

    /// Makes this client the one [`global`] returns (and that `#[distributed_lock]` uses
    /// without `client = ..`), replacing any installed before. Returns the client.
    pub fn install_global(self) -> LockClient {
        let mut global = GLOBAL.write().unwrap_or_else(PoisonError::into_inner);
        *global = Some(self.clone());
        self
    }

    /// The namespace of every key this client uses.
    pub fn namespace(&self) -> &str {
        &self.inner.config.namespace
    }

    /// How long a lock request waits unless it says otherwise.
    pub fn default_wait(&self) -> Duration {
        self.inner.config.default_wait
    }

    /// The watchdog lease.
    pub fn default_lease(&self) -> Duration {
        self.inner.config.default_lease
    }

    /// Whether every lock of this client gets a fencing token.
    pub fn fencing(&self) -> bool {
        self.inner.config.fencing
    }

    /// A request for the lock `name`; await it to get a [`LockGuard`](crate::LockGuard).
    ///
    /// Set `.wait(d)` (how long to wait when busy; default [`default_wait`]),
    /// `.lease(d)` (a fixed lease with no watchdog; default: a watchdog lease) and
    /// `.fencing(true)` before awaiting. If the current call chain already holds
    /// `name`, the request re-enters it: one round trip, no waiting.
    ///
    /// Names are bytes (`&str`, `String`, `&[u8]`, `Vec<u8>`), 1 to
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) long.
    ///
    /// [`default_wait`]: LockClientBuilder::default_wait
    pub fn lock(&self, name: impl AsRef<[u8]>) -> LockRequest {
        LockRequest::new(self.clone(), self.keys(name.as_ref()))
    }

    /// A request for the lock `name` that does not wait: it resolves to `Ok(None)`
    /// when another owner holds it.
    pub fn try_lock(&self, name: impl AsRef<[u8]>) -> TryLockRequest {
        TryLockRequest::new(self.lock(name))
    }

    /// Takes the lock `name`, runs `body` inside its scope, and releases it.
    ///
    /// `body` gets a [`HeldLock`] (name, fencing token, loss signal). Nested acquires of
    /// `name` inside `body` re-enter. The lock is released on every exit: return, panic
    /// (during unwinding, in the background), or cancellation (in the background).
    ///
    /// # Errors
    ///
    /// The errors of [`lock`](Self::lock) (the body does not run), and
    /// [`LockError::Lost`] when the lock was lost before it was released (the body ran,
    /// its output is dropped: treat its effects as unprotected).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future while it waits leaves no hold behind; dropping it while
    /// `body` runs drops `body` and releases the lock in the background.
    pub async fn with_lock<F, Fut, T>(
        &self,
        name: impl AsRef<[u8]>,
        body: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(name).await?;
        let output = guard.scope(body(guard.held())).await;
        guard.unlock().await?;
        Ok(output)
    }

    /// Reads the state of the lock `name` without changing it. One round trip.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`]; [`LockError::KeyConflict`] when a key of the lock
    /// holds another type; [`LockError::QuorumNotReached`] on Redlock when too few
    /// nodes answer; [`LockError::PermissionDenied`]; [`LockError::Redis`].
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    pub async fn inspect(&self, name: impl AsRef<[u8]>) -> Result<LockInfo, LockError> {
        let keys = self.keys(name.as_ref())?;
        let scripts = self.inner.scripts.clone();
        let replies = self
            .inner
            .backend
            .each(|mut conn| {
                let (scripts, keys) = (scripts.clone(), keys.clone());
                async move {
                    let reply: Vec<i64> = scripts
                        .inspect
                        .key(&keys.lock)
                        .key(&keys.fence)
                        .invoke_async(&mut conn)
                        .await?;
                    Ok(reply)
                }
            })
            .await;
        let positive = |value: i64| u64::try_from(value).ok().filter(|v| *v > 0);
        let mut views = Vec::with_capacity(replies.len());
        for reply in replies {
            let reply = match reply {
                Ok(reply) => reply,
                // On Redlock a minority of unreachable nodes does not hide the state.
                Err(_) if self.inner.backend.is_redlock() => continue,
                Err(err) => return Err(err.into()),
            };
            match *reply {
                [-2] => {
                    return Err(LockError::KeyConflict {
                        name: keys.display(),
                    })
                }
                [held @ (0 | 1), count, pttl, token, counter] => views.push(LockInfo {
                    held: held == 1,
                    hold_count: u64::try_from(count).unwrap_or(0),
                    lease_remaining: positive(pttl).map(Duration::from_millis),
                    fencing_token: positive(token),
                    last_fencing_token: positive(counter),
                }),
                _ => return Err(unexpected_reply("inspect.lua", &reply).into()),
            }
        }
        let quorum = self.inner.backend.quorum();
        if views.len() < quorum {
            return Err(LockError::QuorumNotReached {
                got: views.len(),
                needed: quorum,
                held_elsewhere: 0,
            });
        }
        // The view of the majority: held when a majority holds it.
        let holding: Vec<&LockInfo> = views.iter().filter(|view| view.held).collect();
        if holding.len() >= quorum {
            let mut info = holding[0].clone();
            info.hold_count = holding
                .iter()
                .map(|view| view.hold_count)
                .max()
                .unwrap_or(0);
            info.lease_remaining = holding.iter().filter_map(|view| view.lease_remaining).min();
            return Ok(info);
        }
        let mut info = views
            .iter()
            .find(|view| !view.held)
            .cloned()
            .unwrap_or_else(|| views[0].clone());
        info.last_fencing_token = views
            .iter()
            .filter_map(|view| view.last_fencing_token)
            .max();
        Ok(info)
    }

    /// Deletes the lock `name` whoever holds it, and wakes its waiters. For operators:
    /// the holder is told at its next renewal (its guard reports the loss). Returns
    /// whether a lock was deleted.
    ///
    /// # Errors
    ///
    /// [`LockError::InvalidName`]; [`LockError::KeyConflict`] (nothing is deleted);
    /// [`LockError::PermissionDenied`]; [`LockError::Redis`].
    ///
    /// # Cancel safety
    ///
    /// The request may still be applied after the future is dropped.
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>) -> Result<bool, LockError> {
        let keys = self.keys(name.as_ref())?;
        let scripts = self.inner.scripts.clone();
        let publish = self.inner.backend.publish_command();
        let replies = self
            .inner
            .backend
            .each(|mut conn| {
                let (scripts, keys) = (scripts.clone(), keys.clone());
                async move {
                    let reply: i64 = scripts
                        .force_release
                        .key(&keys.lock)
                        .key(&keys.channel)
                        .arg(publish)
                        .invoke_async(&mut conn)
                        .await?;
                    Ok(reply)
                }
            })
            .await;
        let mut deleted = false;
        let mut first_error = None;
        for reply in replies {
            match reply {
                Ok(0) => {}
                Ok(1) => deleted = true,
                Ok(-2) => {
                    return Err(LockError::KeyConflict {
                        name: keys.display(),
                    })
                }
                Ok(other) => return Err(unexpected_reply("force_release.lua", &[other]).into()),
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        match first_error {
            Some(err) if !deleted => Err(err.into()),
            _ => Ok(deleted),
        }
    }

    /// The owner id that holds `keys` now (for the seeded fault that skips the owner check).
    async fn current_holder(&self, keys: &LockKeys) -> Option<String> {
        let mut conn = self.inner.backend.first();
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&keys.lock)
            .query_async(&mut conn)
            .await
            .ok()?;
        fields.into_iter().find(|field| !field.starts_with('#'))
    }

    pub(crate) fn keys(&self, name: &[u8]) -> Result<Arc<LockKeys>, LockError> {
        LockKeys::new(&self.inner.config.namespace, name).map(Arc::new)
    }

    pub(crate) fn next_owner(&self) -> Arc<str> {
        let n = self.inner.owners.fetch_add(1, Ordering::Relaxed);
        format!("{}:{n}", self.inner.uuid).into()
    }

    pub(crate) fn next_attempt(&self) -> u64 {
        self.inner.attempts.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn next_hold_id(&self) -> u64 {
        self.inner.holds.fetch_add(1, Ordering::Relaxed)
    }

    /// Gives back one hold of `hold`: the body of [`LockGuard::unlock`](crate::LockGuard::unlock).
    pub(crate) async fn release_hold(&self, hold: Arc<Hold>) -> Result<(), LockError> {
        self.inner.watchdog.guard_gone(&hold);
        let call = Detached::new(Box::pin(self.clone().release_call(hold.clone())), |_| {
            Box::pin(async {})
        });
        match call.await? {
            ReleaseReply::Released { .. } if !hold.is_lost() => Ok(()),
            ReleaseReply::Released { .. } => Err(hold.lost_error()),
            ReleaseReply::NotHeld => {
                hold.mark_lost("the lock was not held by its owner at release");
                Err(hold.lost_error())
            }
            ReleaseReply::Conflict => Err(LockError::KeyConflict {
                name: hold.display.to_string(),
            }),
        }
    }

    /// The release that a dropped guard leaves to a background task.
    pub(crate) fn release_in_background(&self, hold: Arc<Hold>) {
        if faults::active(Fault::WatchdogOutlivesDrop) {
            return;
        }
        self.inner.watchdog.guard_gone(&hold);
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(
                lock.name = %hold.display,
                "distlock: a lock guard was dropped outside a Tokio runtime; the lock stays held \
                 until its lease ends"
            );
            return;
        }
        spawn(log_failure(self.clone().release_call(hold)));
    }

    /// Gives back one hold of `owner` in the background (no guard involved).
    pub(crate) fn release_owner_in_background(
        &self,
        keys: Arc<LockKeys>,
        owner: Arc<str>,
        lease_ms: u64,
    ) {
        let client = self.clone();
        spawn(log_failure(async move {
            client.release_owner(&keys, &owner, lease_ms).await
        }));
    }

    async fn release_call(self, hold: Arc<Hold>) -> Result<ReleaseReply, LockError> {
        let lease_ms = hold.state().lease.as_millis() as u64;
        self.release_owner(&hold.keys, &hold.owner, lease_ms).await
    }

    /// One release round trip, retried once with the same attempt id when the reply
    /// was lost (the script recognises a replay and does not apply it twice).
    pub(crate) async fn release_owner(
        &self,
        keys: &LockKeys,
        owner: &str,
        lease_ms: u64,
    ) -> Result<ReleaseReply, LockError> {
        let span = tracing::debug_span!(
            "distlock.release",
            lock.name = %keys.display(),
            lock.hold_count = tracing::field::Empty,
        );
        let attempt = self.next_attempt();
        let holder;
        let owner = if faults::active(Fault::ReleaseWithoutOwnerCheck) {
            holder = self
                .current_holder(keys)
                .await
                .unwrap_or_else(|| owner.to_owned());
            holder.as_str()
        } else {
            owner
        };
        let scripts = self.inner.scripts.clone();
        let publish = self.inner.backend.publish_command();
        let (lock, channel, owner) = (keys.lock.clone(), keys.channel.clone(), owner.to_owned());
        let replies = self
            .inner
            .backend
            .each(|conn| {
                release_on(
                    conn,
                    scripts.clone(),
                    [lock.clone(), channel.clone()],
                    owner.clone(),
                    lease_ms,
                    attempt,
                    publish,
                )
            })
            .instrument(span.clone())
            .await;
        let quorum = self.inner.backend.quorum();
        let mut released = Vec::new();
        let mut first_error = None;
        for reply in replies {
            match reply {
                Ok(ReleaseReply::Released { remaining }) => released.push(remaining),
                Ok(ReleaseReply::Conflict) => {
                    return Ok(ReleaseReply::Conflict);
                }
                Ok(ReleaseReply::NotHeld) => {}
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        if released.len() >= quorum {
            let remaining = released.into_iter().max().unwrap_or(0);
            span.record("lock.hold_count", remaining);
            return Ok(ReleaseReply::Released { remaining });
        }
        match first_error {
            Some(err) => Err(err.into()),
            None => Ok(ReleaseReply::NotHeld),
        }
    }
}

/// One release on one node, retried once with the same attempt id when the reply
/// was lost (the script recognises a replay and does not apply it twice).
pub(crate) async fn release_on(
    mut conn: Conn,
    scripts: Arc<Scripts>,
    [lock, channel]: [Vec<u8>; 2],
    owner: String,
    lease_ms: u64,
    attempt: u64,
    publish: &'static str,
) -> redis::RedisResult<ReleaseReply> {
    let mut retried = false;
    loop {
        let result: redis::RedisResult<Vec<i64>> = scripts
            .release
            .key(&lock)
            .key(&channel)
            .arg(&owner)
            .arg(lease_ms)
            .arg(attempt)
            .arg(publish)
            .invoke_async(&mut conn)
            .await;
        match result {
            Ok(reply) => {
                let decoded = ReleaseReply::decode(&reply)
                    .ok_or_else(|| unexpected_reply("release.lua", &reply))?;
                // A replayed final release finds the lock gone: the first try freed it.
                if retried && decoded == ReleaseReply::NotHeld {
                    return Ok(ReleaseReply::Released { remaining: 0 });
                }
                return Ok(decoded);
            }
            // Lost reply (maybe applied: the replay is recognised), or a demoted
            // master that refused it (not applied; the connection moved on).
            Err(err)
                if !retried
                    && (outcome_unknown(&err)
                        || matches!(err.code(), Some("READONLY" | "MASTERDOWN"))) =>
            {
                tracing::debug!(error = %err, "distlock: release failed; retrying once");
                retried = true;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Runs a background operation, logging its failure at debug level.
async fn log_failure<T>(operation: impl Future<Output = Result<T, LockError>>) {
    if let Err(err) = operation.await {
        tracing::debug!(error = %err, "distlock: background release failed; the lease will end the lock");
    }
}

/// Whether a request may have been applied although its reply did not arrive.
pub(crate) fn outcome_unknown(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_timeout() || err.is_connection_dropped()
}

/// The client installed with [`LockClient::install_global`].
///
/// # Errors
///
/// [`LockError::NoGlobalClient`] when none was installed.
pub fn global() -> Result<LockClient, LockError> {
    GLOBAL
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or(LockError::NoGlobalClient)
}
