//! [`LockClient::ping`](crate::LockClient::ping): is every server there, which is
//! it, and can distlock run on it safely? One [`NodeHealth`] per server node (the
//! server, the master behind Sentinel, each master of a cluster, each Redlock
//! node), gathered into a [`HealthReport`] with its warnings in plain words.
//!
//! Decisions, for the people who read the report:
//!
//! - Eviction: only `noeviction` is safe. Every lock key carries a TTL, so the
//!   `volatile-*` policies evict held locks just as the `allkeys-*` ones do.
//! - Persistence: with fencing on, a server that neither appends to an AOF nor saves
//!   RDB snapshots forgets its fencing counters on a restart, and tokens go
//!   backwards; that is a warning. (Without fencing a restart frees every lock,
//!   which the watchdog reports to the guards as a loss.)
//! - Permissions are checked with `ACL DRYRUN` for the current user (`ACL WHOAMI`):
//!   every command the client sends and the scripts call, on a key and a channel of
//!   the namespace. When the user may not run `ACL DRYRUN` itself, `EVALSHA` is
//!   probed directly (with a script that does not exist, which changes nothing) and
//!   the rest is reported as not checked.
//! - A value the server will not tell (`CONFIG GET` refused) is shown as unknown,
//!   not as a warning: a locked-down user is common and not a fault.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::backend::link::is_lost_connection;
use crate::backend::{info_field, masters_in_slots, reply_text as text, Conn};
use crate::error::LockError;
use crate::inner::Inner;
use crate::scripts::Scripts;

/// What [`LockClient::ping`](crate::LockClient::ping) found: one [`NodeHealth`]
/// per server node, and the client's settings it was checked against.
///
/// [`Display`](fmt::Display) prints one line: healthy, or the warnings (the
/// `distlock` tool's `ping` lays out every field).
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// let locks = distlock::LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .connect()
///     .await?;
/// let report = locks.ping().await?;
/// if !report.is_healthy() {
///     for warning in report.warnings() {
///         eprintln!("distlock: {warning}");
///     }
/// }
/// println!("{report}");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct HealthReport {
    /// The namespace of the client's locks.
    pub namespace: String,
    /// The client's service ([`LockClient::service`](crate::LockClient::service)).
    pub service: String,
    /// Whether the client has fencing on (which makes persistence matter).
    pub fencing: bool,
    /// One entry per server node, in the order of the client's nodes (a cluster's
    /// masters sorted by address).
    pub nodes: Vec<NodeHealth>,
}

impl HealthReport {
    /// Every node's warnings, each prefixed with its node's address.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// for warning in locks.ping().await?.warnings() {
    ///     tracing::warn!("{warning}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn warnings(&self) -> Vec<String> {
        self.nodes
            .iter()
            .flat_map(|node| {
                node.warnings
                    .iter()
                    .map(move |warning| format!("{}: {warning}", node.address))
            })
            .collect()
    }

    /// Whether no node has a warning: every server answered, the user has every
    /// permission distlock needs, and nothing in the servers' settings can lose a
    /// held lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
    /// let report = locks.ping().await?;
    /// assert_eq!(report.is_healthy(), report.warnings().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_healthy(&self) -> bool {
        self.nodes.iter().all(|node| node.warnings.is_empty())
    }
}

/// What one server node said.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// for node in &locks.ping().await?.nodes {
///     println!("{} runs Redis {:?}, {:?} away", node.address, node.version, node.round_trip);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeHealth {
    /// The node, as `host:port`.
    pub address: String,
    /// `redis` or `valkey`, from `INFO server`.
    pub server: Option<String>,
    /// Its version, from `INFO server`.
    pub version: Option<String>,
    /// Why `INFO` gave nothing, when it did not.
    pub info_error: Option<String>,
    /// `master` or `slave`, from `INFO replication`.
    pub role: Option<String>,
    /// The replicas connected to it, from `INFO replication`.
    pub replicas: Option<u32>,
    /// The round trip of one `PING`.
    pub round_trip: Duration,
    /// Whether distlock's scripts are on the server: its function library
    /// (`FUNCTION LIST`), or every script in the script cache (`SCRIPT EXISTS`) where
    /// the server refuses functions; `None` when the server would not say. Scripts
    /// missing (after a `FUNCTION FLUSH`, a `SCRIPT FLUSH` or a restart) are loaded
    /// again by the next call that needs them.
    pub scripts_loaded: Option<bool>,
    /// How many of distlock's scripts are in the script cache (for `EVALSHA`), of
    /// [`scripts_total`](Self::scripts_total); `None` when the server would not say.
    pub scripts_cached: Option<usize>,
    /// How many scripts distlock has.
    pub scripts_total: usize,
    /// Whether distlock's function library is on the server (`FUNCTION LIST`): the
    /// scripts then run by `FCALL`, and the script cache is not used; `None` when
    /// the server would not say (functions refused: the scripts run by `EVALSHA`).
    pub library_loaded: Option<bool>,
    /// The Redis user the client runs as (`ACL WHOAMI`), when the server said.
    pub user: Option<String>,
    /// The commands distlock needs that the user may not run, as ACL rules
    /// (`evalsha`, `script|load`); empty when none is missing or they could not be
    /// checked (see [`permissions_unchecked`](Self::permissions_unchecked)).
    pub missing_permissions: Vec<String>,
    /// Why some permissions could not be checked, when they could not.
    pub permissions_unchecked: Option<String>,
    /// `maxmemory-policy`, from `CONFIG GET`.
    pub maxmemory_policy: Option<String>,
    /// Why `CONFIG GET` gave nothing (refused by an ACL, or renamed away).
    pub config_error: Option<String>,
    /// Whether the server appends to an AOF (`INFO persistence`'s `aof_enabled`).
    pub aof: Option<bool>,
    /// Whether the server saves RDB snapshots on a schedule (`CONFIG GET save`).
    pub rdb_saves: Option<bool>,
    /// What is wrong, in plain words; empty when nothing is.
    pub warnings: Vec<String>,
}

/// A permission distlock needs: the ACL rule, the `ACL DRYRUN` arguments that
/// test it (`KEY` and `CHANNEL` stand for a key and channel of the namespace),
/// and, for a permission distlock can do without, what a user without it gets.
type Need = (&'static str, &'static [&'static str], Option<&'static str>);

/// What a user without `fcall` or `function|load` gets.
const NO_FUNCTIONS: Option<&str> = Some(
    "distlock's scripts run by EVALSHA instead of as a function library (about 3 µs more \
     server time per call)",
);

/// What a user without `info` gets.
const NO_INFO: Option<&str> = Some(
    "a restarted or replaced server is noticed at the holds' next renewal, not as soon as a \
     connection comes back",
);

/// What the client sends and the scripts call (the README's ACL section).
const NEEDS: &[Need] = &[
    ("evalsha", &["EVALSHA", "SHA", "1", "KEY"], None),
    ("script|load", &["SCRIPT", "LOAD", "return 1"], None),
    ("fcall", &["FCALL", "distlock", "1", "KEY"], NO_FUNCTIONS),
    (
        "function|load",
        &["FUNCTION", "LOAD", "return 1"],
        NO_FUNCTIONS,
    ),
    ("ping", &["PING"], None),
    ("set", &["SET", "KEY", "1", "NX", "PX", "1000"], None),
    ("get", &["GET", "KEY"], None),
    ("pexpire", &["PEXPIRE", "KEY", "1000"], None),
    ("pttl", &["PTTL", "KEY"], None),
    ("del", &["DEL", "KEY"], None),
    ("hlen", &["HLEN", "KEY"], None),
    ("hmget", &["HMGET", "KEY", "f"], None),
    ("hgetall", &["HGETALL", "KEY"], None),
    ("hincrby", &["HINCRBY", "KEY", "f", "1"], None),
    ("exists", &["EXISTS", "KEY"], None),
    ("hset", &["HSET", "KEY", "f", "1"], None),
    ("hdel", &["HDEL", "KEY", "f"], None),
    ("time", &["TIME"], None),
    ("pubsub|numsub", &["PUBSUB", "NUMSUB", "CHANNEL"], None),
    ("info", &["INFO", "server"], NO_INFO),
    (
        "client|setname",
        &["CLIENT", "SETNAME", "distlock"],
        Some("the client's connections stay unnamed in CLIENT LIST"),
    ),
];

/// The pub/sub permissions: sharded on a cluster.
const PLAIN_PUBSUB: &[Need] = &[
    ("publish", &["PUBLISH", "CHANNEL", "m"], None),
    ("subscribe", &["SUBSCRIBE", "CHANNEL"], None),
    ("unsubscribe", &["UNSUBSCRIBE", "CHANNEL"], None),
];
const SHARDED_PUBSUB: &[Need] = &[
    ("spublish", &["SPUBLISH", "CHANNEL", "m"], None),
    ("ssubscribe", &["SSUBSCRIBE", "CHANNEL"], None),
    ("sunsubscribe", &["SUNSUBSCRIBE", "CHANNEL"], None),
    (
        "pubsub|shardnumsub",
        &["PUBSUB", "SHARDNUMSUB", "CHANNEL"],
        None,
    ),
];

/// The permission a client that waits for replicas needs too.
const WAIT: Need = ("wait", &["WAIT", "1", "1"], None);

/// What a node check needs to know of the client.
struct Checks {
    namespace: String,
    sharded: bool,
    fencing: bool,
    replicas: Option<u32>,
    hashes: Vec<String>,
    /// The name of distlock's function library.
    library: String,
}

impl Checks {
    /// The checks of a client with `scripts` in `namespace` (sharded pub/sub on a
    /// cluster), that neither fences nor waits for replicas.
    fn new(scripts: &Scripts, namespace: &str, sharded: bool) -> Self {
        Self {
            namespace: namespace.to_owned(),
            sharded,
            fencing: false,
            replicas: None,
            hashes: scripts
                .all()
                .iter()
                .map(|script| script.hash().to_owned())
                .collect(),
            library: scripts.library().name().to_owned(),
        }
    }
}

/// Checks every node of the client's deployment.
///
/// # Cancel safety
///
/// Safe to drop: the checks only read (`ACL DRYRUN` runs nothing).
pub(crate) async fn check(inner: &Arc<Inner>) -> Result<HealthReport, LockError> {
    let sharded = inner.backend.first().is_cluster();
    let checks = Checks {
        fencing: inner.config.fencing,
        replicas: inner.config.replicas.map(|(replicas, _)| replicas),
        ..Checks::new(&inner.scripts, &inner.config.namespace, sharded)
    };
    let mut nodes = Vec::new();
    for conn in inner.backend.nodes() {
        match conn {
            Conn::Cluster(link) => {
                let mut cluster = link.clone().conn().clone();
                let masters = masters(&mut cluster)
                    .await
                    .map_err(|err| LockError::connect(link.addr(), err))?;
                for (host, port) in masters {
                    let address = format!("{host}:{port}");
                    let route = SingleNodeRoutingInfo::ByAddress { host, port };
                    let conn = cluster.clone();
                    nodes.push(check_node(&mut OnNode { conn, route }, address, &checks).await?);
                }
            }
            conn => nodes.push(check_node(&mut conn.clone(), conn.addr(), &checks).await?),
        }
    }
    Ok(HealthReport {
        namespace: checks.namespace,
        service: inner.service().to_owned(),
        fencing: checks.fencing,
        nodes,
    })
}

impl NodeHealth {
    /// Checks one server over a connection of your own, as
    /// [`LockClient::ping`](crate::LockClient::ping) checks each of its nodes: for
    /// tools that must report on a server the client cannot connect to (a user who
    /// may not load the scripts). `address` names it in the report; `namespace` is
    /// the one whose keys and channels the permissions are checked on;
    /// `sharded_pubsub` says the server is a cluster node (the client then needs
    /// `spublish` and `ssubscribe` rather than `publish` and `subscribe`). The
    /// warnings that depend on the client's settings (fencing, replicas) are left
    /// out.
    ///
    /// # Errors
    ///
    /// [`LockError::Connect`] naming `address` when the server does not answer a
    /// `PING` (a lost or refused connection, a timeout).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop at any await: the checks only read.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::{redis, NodeHealth};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let node = NodeHealth::check(&mut conn, "127.0.0.1:6379", "distlock", false).await?;
    /// println!("{:?} missing: {:?}", node.version, node.missing_permissions);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn check<C: ConnectionLike + Send>(
        conn: &mut C,
        address: impl Into<String>,
        namespace: &str,
        sharded_pubsub: bool,
    ) -> Result<Self, LockError> {
        let checks = Checks::new(&Scripts::new(), namespace, sharded_pubsub);
        check_node(conn, address.into(), &checks).await
    }
}

/// The masters of a cluster, from `CLUSTER SLOTS`, sorted.
///
/// # Cancel safety
///
/// Safe to drop: it only reads.
async fn masters(conn: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let slots = conn
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    Ok(masters_in_slots(&slots))
}

/// One node of a cluster, by address: every command goes to it.
struct OnNode {
    conn: ClusterConnection,
    route: SingleNodeRoutingInfo,
}

impl ConnectionLike for OnNode {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let routing = RoutingInfo::SingleNode(self.route.clone());
        Box::pin(self.conn.route_command(cmd.clone(), routing))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let route = self.route.clone();
        Box::pin(
            self.conn
                .route_pipeline(pipeline.clone(), offset, count, route),
        )
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// Sends `cmd`; the reply, or the error as text.
///
/// # Cancel safety
///
/// Safe to drop: a read whose reply nobody waits for.
async fn ask<C: ConnectionLike + Send>(conn: &mut C, cmd: &Cmd) -> Result<Value, String> {
    match conn.req_packed_command(cmd).await {
        Ok(Value::ServerError(err)) => Err(redis::RedisError::from(err).to_string()),
        Ok(value) => Ok(value),
        Err(err) => Err(err.to_string()),
    }
}

/// The checks of one node.
///
/// # Cancel safety
///
/// Safe to drop: the checks only read.
async fn check_node<C: ConnectionLike + Send>(
    conn: &mut C,
    address: String,
    checks: &Checks,
) -> Result<NodeHealth, LockError> {
    let started = Instant::now();
    let pong = conn.req_packed_command(&redis::cmd("PING")).await;
    let round_trip = started.elapsed();
    let mut warnings = Vec::new();
    match pong {
        Err(err) if is_lost_connection(&err) || err.is_timeout() => {
            return Err(LockError::connect(address, err));
        }
        Err(err) => warnings.push(format!("PING failed: {err}")),
        Ok(_) => {}
    }
    let mut node = NodeHealth {
        address,
        server: None,
        version: None,
        info_error: None,
        role: None,
        replicas: None,
        round_trip,
        scripts_loaded: None,
        scripts_cached: None,
        scripts_total: checks.hashes.len(),
        library_loaded: None,
        user: None,
        missing_permissions: Vec::new(),
        permissions_unchecked: None,
        maxmemory_policy: None,
        config_error: None,
        aof: None,
        rdb_saves: None,
        warnings,
    };
    read_info(conn, &mut node).await;
    read_config(conn, &mut node).await;
    let mut exists = redis::cmd("SCRIPT");
    exists.arg("EXISTS").arg(&checks.hashes);
    if let Ok(Value::Array(flags)) = ask(conn, &exists).await {
        let cached = flags
            .iter()
            .filter(|flag| matches!(flag, Value::Int(1)))
            .count();
        node.scripts_cached = Some(cached);
        node.scripts_loaded = Some(cached == checks.hashes.len());
    }
    let mut list = redis::cmd("FUNCTION");
    list.arg("LIST").arg("LIBRARYNAME").arg(&checks.library);
    if let Ok(Value::Array(libraries)) = ask(conn, &list).await {
        // The name has no pattern characters: only that library matches.
        node.library_loaded = Some(!libraries.is_empty());
        if !libraries.is_empty() {
            node.scripts_loaded = Some(true);
        }
    }
    check_permissions(conn, &mut node, checks).await;
    warn_of_settings(&mut node, checks);
    Ok(node)
}

/// `INFO server replication persistence`: the server, its role and replicas, AOF.
///
/// # Cancel safety
///
/// Safe to drop: it only reads.
async fn read_info<C: ConnectionLike + Send>(conn: &mut C, node: &mut NodeHealth) {
    let mut info = redis::cmd("INFO");
    info.arg("server").arg("replication").arg("persistence");
    let info = match ask(conn, &info).await {
        Ok(info) => text(&info).unwrap_or_default(),
        Err(err) => {
            node.info_error = Some(err);
            return;
        }
    };
    let field = |name: &str| info_field(&info, name).map(str::to_owned);
    let name = field("server_name").unwrap_or_else(|| "redis".to_owned());
    node.version = field(&format!("{name}_version")).or_else(|| field("redis_version"));
    node.server = Some(name);
    node.role = field("role");
    node.replicas = field("connected_slaves").and_then(|n| n.parse().ok());
    node.aof = field("aof_enabled").map(|on| on == "1");
}

/// `CONFIG GET maxmemory-policy save`.
///
/// # Cancel safety
///
/// Safe to drop: it only reads.
async fn read_config<C: ConnectionLike + Send>(conn: &mut C, node: &mut NodeHealth) {
    let mut config = redis::cmd("CONFIG");
    config.arg("GET").arg("maxmemory-policy").arg("save");
    match ask(conn, &config).await {
        Ok(reply) => {
            node.maxmemory_policy = config_value(&reply, "maxmemory-policy");
            node.rdb_saves = config_value(&reply, "save").map(|save| !save.trim().is_empty());
            if node.maxmemory_policy.is_none() {
                node.config_error = Some("no value in the reply".to_owned());
            }
        }
        Err(err) => node.config_error = Some(err),
    }
}

/// One value of a `CONFIG GET` reply: a map in RESP3, a flat `[name, value, ..]`
/// array in RESP2.
fn config_value(reply: &Value, name: &str) -> Option<String> {
    match reply {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(key, _)| text(key).as_deref() == Some(name))
            .and_then(|(_, value)| text(value)),
        Value::Array(items) => items
            .chunks(2)
            .find(|pair| text(&pair[0]).as_deref() == Some(name))
            .and_then(|pair| pair.get(1).and_then(text)),
        _ => None,
    }
}

/// Checks every permission distlock needs with `ACL DRYRUN`, or probes `EVALSHA`
/// when the user may not dry-run.
///
/// # Cancel safety
///
/// Safe to drop: `ACL DRYRUN` runs nothing, and the probe's script does not exist.
async fn check_permissions<C: ConnectionLike + Send>(
    conn: &mut C,
    node: &mut NodeHealth,
    checks: &Checks,
) {
    let key = format!("{}:{{distlock-ping}}", checks.namespace);
    let user = match ask(conn, redis::cmd("ACL").arg("WHOAMI")).await {
        Ok(user) => text(&user),
        Err(_) => None,
    };
    node.user = user.clone();
    let (mut missing, mut optional_missing) = match &user {
        Some(user) => dry_run(conn, node, checks, user, &key).await,
        None => {
            node.permissions_unchecked = Some("ACL WHOAMI refused".to_owned());
            (Vec::new(), Vec::new())
        }
    };
    if node.permissions_unchecked.is_some() {
        missing.clear();
        optional_missing.clear();
        if evalsha_refused(conn, &key).await {
            missing.push("evalsha".to_owned());
        }
    }
    warn_of_missing(node, user.as_deref(), &missing, optional_missing);
    node.missing_permissions = missing;
}

/// A script hash no server has: the probes name it, so nothing runs.
fn unknown_sha() -> String {
    "0".repeat(40)
}

/// Asks `ACL DRYRUN` for each command distlock needs of `user` (on `key`): the
/// rules missing, and the optional ones missing with what goes without them. A
/// refused `ACL DRYRUN` is noted in `node` (the permissions are then unchecked).
async fn dry_run<C: ConnectionLike + Send>(
    conn: &mut C,
    node: &mut NodeHealth,
    checks: &Checks,
    user: &str,
    key: &str,
) -> (Vec<String>, Vec<(&'static str, &'static str)>) {
    let pubsub = if checks.sharded {
        SHARDED_PUBSUB
    } else {
        PLAIN_PUBSUB
    };
    let wait = checks.replicas.map(|_| &WAIT);
    let mut missing = Vec::new();
    let mut optional_missing = Vec::new();
    for &(rule, args, without) in NEEDS.iter().chain(pubsub).chain(wait) {
        let mut dryrun = redis::cmd("ACL");
        dryrun.arg("DRYRUN").arg(user);
        for arg in args {
            match *arg {
                "KEY" | "CHANNEL" => dryrun.arg(key),
                "SHA" => dryrun.arg(unknown_sha()),
                arg => dryrun.arg(arg),
            };
        }
        match ask(conn, &dryrun).await {
            Ok(Value::Okay) => {}
            Ok(Value::SimpleString(ok)) if ok == "OK" => {}
            Ok(_) => match without {
                None => missing.push(rule.to_owned()),
                Some(without) => optional_missing.push((rule, without)),
            },
            Err(err) => {
                node.permissions_unchecked = Some(format!("ACL DRYRUN refused: {err}"));
                break;
            }
        }
    }
    (missing, optional_missing)
}

/// The one probe that changes nothing, where `ACL` cannot say: a script that does
/// not exist, on `key`. Whether the server refused it for want of permission.
async fn evalsha_refused<C: ConnectionLike + Send>(conn: &mut C, key: &str) -> bool {
    let mut probe = redis::cmd("EVALSHA");
    probe.arg(unknown_sha()).arg(1).arg(key);
    match conn.req_packed_command(&probe).await {
        Ok(Value::ServerError(err)) => redis::RedisError::from(err).code() == Some("NOPERM"),
        Err(err) => err.code() == Some("NOPERM"),
        Ok(_) => false,
    }
}

/// The warnings of the permissions `user` lacks: those distlock needs, then each
/// optional one, unless a warning says already what goes without it.
fn warn_of_missing(
    node: &mut NodeHealth,
    user: Option<&str>,
    missing: &[String],
    optional_missing: Vec<(&'static str, &'static str)>,
) {
    if !missing.is_empty() {
        node.warnings.push(format!(
            "the Redis user `{}` may not run {}, which distlock needs; add `+{}` to its ACL \
             (see the README's ACL section)",
            user.unwrap_or("default"),
            missing.join(", "),
            missing.join(" +"),
        ));
    }
    for (rule, without) in optional_missing {
        if node
            .warnings
            .iter()
            .any(|warning| warning.contains(without))
        {
            continue;
        }
        node.warnings.push(format!(
            "the Redis user may not run {rule}: {without}; add `+{rule}` to its ACL"
        ));
    }
}

/// The warnings of what the node's settings mean for locks.
fn warn_of_settings(node: &mut NodeHealth, checks: &Checks) {
    if let Some(policy) = node
        .maxmemory_policy
        .as_deref()
        .filter(|p| *p != "noeviction")
    {
        node.warnings.push(format!(
            "maxmemory-policy is {policy}: under memory pressure Redis evicts keys, held \
             locks among them (every lock key has a TTL, so volatile-* policies evict them \
             too); use noeviction on servers that hold locks"
        ));
    }
    if checks.fencing && node.aof == Some(false) && node.rdb_saves == Some(false) {
        node.warnings.push(
            "fencing is on, but this server neither appends to an AOF nor saves RDB \
             snapshots: a restart forgets the fencing counters and tokens go backwards; set \
             `appendonly yes` (or a `save` schedule)"
                .to_owned(),
        );
    }
    if node.role.as_deref() == Some("slave") {
        node.warnings.push(
            "this server is a replica: locks taken here are refused or lost; point the \
             client at the master"
                .to_owned(),
        );
    }
    if let (Some(wanted), Some(connected)) = (checks.replicas, node.replicas) {
        if connected < wanted {
            node.warnings.push(format!(
                "the client waits for {wanted} replica(s) to acknowledge every lock, but only \
                 {connected} are connected: locks will fail with ReplicationNotConfirmed"
            ));
        }
    }
}

impl fmt::Display for HealthReport {
    /// One line: `healthy (N nodes)`, or the warnings, each after its node's
    /// address, separated by `; `. (`distlock ping` lays the whole report out.)
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let warnings = self.warnings();
        if warnings.is_empty() {
            write!(f, "healthy ({} node(s) checked)", self.nodes.len())
        } else {
            f.write_str(&warnings.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_are_read_from_either_protocol() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("maxmemory-policy"),
            bulk("noeviction"),
            bulk("save"),
            bulk(""),
        ]);
        let resp3 = Value::Map(vec![(bulk("maxmemory-policy"), bulk("allkeys-lru"))]);
        assert_eq!(
            config_value(&resp2, "maxmemory-policy").as_deref(),
            Some("noeviction")
        );
        assert_eq!(config_value(&resp2, "save").as_deref(), Some(""));
        assert_eq!(
            config_value(&resp3, "maxmemory-policy").as_deref(),
            Some("allkeys-lru")
        );
        assert_eq!(config_value(&Value::Array(vec![]), "save"), None);
    }
}
