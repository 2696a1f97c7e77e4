//! Connections: a `LockClient` for what the library can do (inspect, force-unlock,
//! loading the scripts), and a plain redis-rs connection to the same deployment for
//! what it cannot (SCAN, SUBSCRIBE, INFO, CONFIG GET).

use std::time::Duration;

use distlock::redis::aio::{AsyncPushSender, ConnectionLike, MultiplexedConnection};
use distlock::redis::cluster::ClusterClientBuilder;
use distlock::redis::cluster_async::ClusterConnection;
use distlock::redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use distlock::redis::{
    self, AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo,
    ProtocolVersion, RedisConnectionInfo, RedisResult, TlsCertificates, Value,
};
use distlock::{LockClient, LockClientBuilder};

use crate::args::{TargetArgs, DEFAULT_URL};
use crate::error::{CliError, Exit};

/// How long dialing may take, for the library's client and the command's own
/// connections alike.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request of the command's own connections may take (a SCAN of a
/// large COUNT on a busy server takes a while).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The deployment named on the command line.
#[derive(Debug)]
pub(crate) enum Deployment {
    /// One server.
    Single(String),
    /// A Redis Cluster, by some of its nodes.
    Cluster(Vec<String>),
    /// A master behind Sentinel.
    Sentinel {
        /// The Sentinels' URLs.
        sentinels: Vec<String>,
        /// The master's name.
        master: String,
        /// How to reach the data nodes.
        node: NodeSettings,
    },
}

/// The settings of the data nodes behind Sentinel.
#[derive(Debug, Default)]
pub(crate) struct NodeSettings {
    user: Option<String>,
    password: Option<String>,
    tls: bool,
    db: Option<u32>,
}

/// Where and how to connect: the deployment, the namespace, the TLS roots.
#[derive(Debug)]
pub(crate) struct Target {
    /// The deployment.
    pub(crate) deployment: Deployment,
    /// The namespace of the locks.
    pub(crate) namespace: String,
    /// The CA certificate, as PEM, when `--tls-ca` was given.
    tls_ca: Option<Vec<u8>>,
    /// The client certificate and its key, as PEM, when `--tls-cert` and
    /// `--tls-key` were given.
    tls_client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Target {
    /// The target of the command line's options; `redis_url` is `$REDIS_URL`.
    pub(crate) fn from_args(args: TargetArgs, redis_url: Option<String>) -> Result<Self, CliError> {
        let node_flag = [
            ("--sentinel-node-user", args.sentinel_node_user.is_some()),
            ("--sentinel-node-tls", args.sentinel_node_tls),
            ("--sentinel-node-db", args.sentinel_node_db.is_some()),
        ]
        .into_iter()
        .find(|(_, given)| *given)
        .map(|(flag, _)| flag);
        let deployment = match (args.cluster.is_empty(), args.sentinel.is_empty()) {
            (false, _) | (_, false) if args.url.is_some() => return Err(CliError::usage(
                "--url names one server, --cluster and --sentinel a deployment: give one of them",
            )),
            (false, _) => {
                if let Some(flag) = node_flag {
                    return Err(CliError::usage(format!(
                        "{flag} applies to --sentinel only"
                    )));
                }
                Deployment::Cluster(args.cluster)
            }
            (_, false) => {
                let master = args.master.ok_or_else(|| {
                    CliError::usage(
                        "--sentinel needs --master NAME, the name the Sentinels know the master by",
                    )
                })?;
                Deployment::Sentinel {
                    sentinels: args.sentinel,
                    master,
                    node: NodeSettings {
                        user: args.sentinel_node_user,
                        password: args.sentinel_node_password,
                        tls: args.sentinel_node_tls,
                        db: args.sentinel_node_db,
                    },
                }
            }
            (true, true) => {
                if args.master.is_some() {
                    return Err(CliError::usage("--master applies to --sentinel only"));
                }
                if let Some(flag) = node_flag {
                    return Err(CliError::usage(format!(
                        "{flag} applies to --sentinel only"
                    )));
                }
                Deployment::Single(
                    args.url
                        .or(redis_url)
                        .unwrap_or_else(|| DEFAULT_URL.to_owned()),
                )
            }
        };
        let read = |flag: &str, path: &Option<std::path::PathBuf>, what: &str| {
            path.as_ref()
                .map(|path| {
                    std::fs::read(path).map_err(|err| {
                        CliError::usage(format!("{flag} {}: {err}; give {what}", path.display()))
                    })
                })
                .transpose()
        };
        let tls_ca = read(
            "--tls-ca",
            &args.tls_ca,
            "the PEM file of the CA that signed the servers' certificates",
        )?;
        let cert = read(
            "--tls-cert",
            &args.tls_cert,
            "the client certificate's PEM file",
        )?;
        let key = read(
            "--tls-key",
            &args.tls_key,
            "the PEM file of its private key",
        )?;
        Ok(Self {
            deployment,
            namespace: args.namespace,
            tls_ca,
            tls_client: cert.zip(key),
        })
    }

    /// The servers, for messages: `host:port` of each, never a password.
    pub(crate) fn describe(&self) -> String {
        let list = |urls: &[String]| {
            urls.iter()
                .map(|url| host_port(url))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.deployment {
            Deployment::Single(url) => host_port(url),
            Deployment::Cluster(urls) => format!("the cluster nodes {}", list(urls)),
            Deployment::Sentinel {
                sentinels, master, ..
            } => format!("master `{master}` of the Sentinels {}", list(sentinels)),
        }
    }

    /// The library's client, connected (which loads distlock's scripts).
    pub(crate) async fn lock_client(&self) -> Result<LockClient, CliError> {
        ensure_crypto_provider();
        let mut builder = LockClientBuilder::new()
            .service("distlock-cli")
            .namespace(self.namespace.clone())
            .connect_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT);
        builder = match &self.deployment {
            Deployment::Single(url) => builder.url(url.clone()),
            Deployment::Cluster(urls) => builder.cluster(urls.clone()),
            Deployment::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let mut builder = builder
                    .sentinel(sentinels.clone(), master.clone())
                    .sentinel_node_tls(node.tls);
                if let Some(db) = node.db {
                    builder = builder.sentinel_node_db(db);
                }
                match (&node.user, &node.password) {
                    (Some(user), Some(password)) => builder.sentinel_node_auth(user, password),
                    (None, Some(password)) => builder.sentinel_node_password(password),
                    (Some(_), None) => {
                        return Err(CliError::usage(
                            "--sentinel-node-user needs --sentinel-node-password (or \
                             DISTLOCK_SENTINEL_NODE_PASSWORD)",
                        ))
                    }
                    (None, None) => builder,
                }
            }
        };
        if let Some(pem) = &self.tls_ca {
            builder = builder.tls_root_ca(pem.clone());
        }
        if let Some((cert, key)) = &self.tls_client {
            builder = builder.tls_client_cert(cert.clone(), key.clone());
        }
        Ok(builder.connect().await?)
    }

    /// A plain redis-rs connection to the same deployment (RESP3), with `push` given
    /// every pub/sub message (for `watch`).
    pub(crate) async fn raw(
        &self,
        push: Option<tokio::sync::mpsc::UnboundedSender<redis::PushInfo>>,
    ) -> Result<Raw, CliError> {
        ensure_crypto_provider();
        let servers = self.describe();
        let failed =
            |err: redis::RedisError| CliError::redis(&format!("connecting to {servers}"), &err);
        match &self.deployment {
            Deployment::Single(url) => {
                let info = resp3(parse("--url", url)?);
                let conn = self.single(info, push).await.map_err(failed)?;
                Ok(Raw::Single(conn))
            }
            Deployment::Cluster(urls) => {
                let nodes = urls
                    .iter()
                    .map(|url| parse("--cluster", url))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut builder = ClusterClientBuilder::new(nodes)
                    .use_protocol(ProtocolVersion::RESP3)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT);
                if let Some(certs) = self.certificates() {
                    builder = builder.certs(certs);
                }
                if let Some(push) = push {
                    builder = builder.push_sender(push);
                }
                let client = builder.build().map_err(failed)?;
                let conn = client.get_async_connection().await.map_err(failed)?;
                Ok(Raw::Cluster(conn))
            }
            Deployment::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let info = self
                    .master_of(sentinels, master, node)
                    .await
                    .map_err(failed)?;
                let conn = self.single(info, push).await.map_err(failed)?;
                Ok(Raw::Single(conn))
            }
        }
    }

    /// A connection to one server.
    async fn single(
        &self,
        info: ConnectionInfo,
        push: Option<impl AsyncPushSender>,
    ) -> RedisResult<MultiplexedConnection> {
        let client = self.client(info)?;
        let mut config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        if let Some(push) = push {
            config = config.set_push_sender(push);
        }
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// A redis-rs client for `info`, with `--tls-ca` on a TLS address.
    fn client(&self, info: ConnectionInfo) -> RedisResult<redis::Client> {
        match self.certificates() {
            Some(certs) if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) => {
                redis::Client::build_with_tls(info, certs)
            }
            _ => redis::Client::open(info),
        }
    }

    /// The certificates of `--tls-ca`, `--tls-cert` and `--tls-key`.
    fn certificates(&self) -> Option<TlsCertificates> {
        if self.tls_ca.is_none() && self.tls_client.is_none() {
            return None;
        }
        Some(TlsCertificates {
            client_tls: self
                .tls_client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.tls_ca.clone(),
        })
    }

    /// The master's address as the first Sentinel that knows it says, with the data
    /// nodes' settings.
    async fn master_of(
        &self,
        sentinels: &[String],
        master: &str,
        node: &NodeSettings,
    ) -> RedisResult<ConnectionInfo> {
        let mut last = redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "no Sentinel URL was given",
        ));
        for url in sentinels {
            let info = url.as_str().into_connection_info()?;
            let asked = async {
                let mut conn = self
                    .single(info, None::<tokio::sync::mpsc::UnboundedSender<_>>)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(master)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match asked.await {
                Ok(Some((host, port))) => {
                    let addr = if node.tls {
                        ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure: false,
                            tls_params: None,
                        }
                    } else {
                        ConnectionAddr::Tcp(host, port)
                    };
                    let mut settings = RedisConnectionInfo::default()
                        .set_protocol(ProtocolVersion::RESP3)
                        .set_db(i64::from(node.db.unwrap_or(0)));
                    if let Some(user) = &node.user {
                        settings = settings.set_username(user);
                    }
                    if let Some(password) = &node.password {
                        settings = settings.set_password(password);
                    }
                    return Ok(addr.into_connection_info()?.set_redis_settings(settings));
                }
                Ok(None) => {
                    last = redis::RedisError::from((
                        redis::ErrorKind::MasterNameNotFoundBySentinel,
                        "a Sentinel does not know the master name",
                        master.to_owned(),
                    ));
                }
                Err(err) => last = err,
            }
        }
        Err(last)
    }
}

/// A plain connection: to one server (or the master behind Sentinel), or to a
/// Redis Cluster.
pub(crate) enum Raw {
    /// One server.
    Single(MultiplexedConnection),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Raw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "Raw::Single",
            Self::Cluster(_) => "Raw::Cluster",
        })
    }
}

/// A master of a Redis Cluster, by the address the cluster announces.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Node {
    /// Its host (or IP address).
    pub(crate) host: String,
    /// Its port.
    pub(crate) port: u16,
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl Raw {
    /// Sends `cmd` (to any node of a cluster, unless the command names a key).
    pub(crate) async fn query(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            Self::Single(conn) => conn.req_packed_command(cmd).await,
            Self::Cluster(conn) => conn.req_packed_command(cmd).await,
        }
    }

    /// Sends `cmd` to `node` of the cluster (or to the one server).
    pub(crate) async fn query_on(&mut self, node: Option<&Node>, cmd: Cmd) -> RedisResult<Value> {
        match (self, node) {
            (Self::Cluster(conn), Some(node)) => {
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: node.host.clone(),
                    port: node.port,
                });
                conn.route_command(cmd, routing).await
            }
            (raw, _) => raw.query(&cmd).await,
        }
    }

    /// Sends the commands of `pipe` in one round trip (on a cluster, each to the
    /// node of its key), and returns their replies.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave all or some of the commands sent: the
    /// connection drops their replies, and whatever they change on the server stays
    /// changed. `distlock web` sends only reads through it.
    pub(crate) async fn pipeline(&mut self, pipe: &redis::Pipeline) -> RedisResult<Vec<Value>> {
        match self {
            Self::Single(conn) => pipe.query_async(conn).await,
            Self::Cluster(conn) => pipe.query_async(conn).await,
        }
    }

    /// The masters of the cluster, from `CLUSTER SLOTS`; `None` for one server.
    pub(crate) async fn masters(&mut self) -> RedisResult<Option<Vec<Node>>> {
        let Self::Cluster(conn) = self else {
            return Ok(None);
        };
        let slots = conn
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        let masters = distlock::admin::masters_in_slots(&slots)
            .into_iter()
            .map(|(host, port)| Node { host, port })
            .collect();
        Ok(Some(masters))
    }
}

/// `url` parsed, or a usage error naming `option` (and never the password).
fn parse(option: &str, url: &str) -> Result<ConnectionInfo, CliError> {
    url.into_connection_info().map_err(|err| {
        CliError::new(
            Exit::Usage,
            format!(
                "{option}: `{}` is not a Redis URL ({err}); use redis://[user:password@]host:port[/db] \
                 or rediss://...",
                redact(url)
            ),
        )
    })
}

/// `info` speaking RESP3 (for pub/sub pushes on a multiplexed connection).
fn resp3(info: ConnectionInfo) -> ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    info.set_redis_settings(settings)
}

/// `host:port` of a URL, for messages; the URL with its credentials removed when it
/// does not parse.
fn host_port(url: &str) -> String {
    match url.into_connection_info() {
        Ok(info) => info.addr().to_string(),
        Err(_) => redact(url),
    }
}

/// `url` without what stands between `://` and the last `@` (user and password).
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let after = &url[scheme_end + 3..];
    let authority_end = after.find('/').unwrap_or(after.len());
    match after[..authority_end].rfind('@') {
        Some(at) => format!("{}://***@{}", &url[..scheme_end], &after[at + 1..]),
        None => url.to_owned(),
    }
}

/// Makes sure rustls has a process-wide crypto provider before any TLS connection
/// is dialed: the command's own connections are made by redis-rs, which takes the
/// process default (the library installs `ring` the same way for its own).
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer is fine: a provider is there.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_show_a_password() {
        assert_eq!(
            host_port("redis://user:hunter2@10.0.0.1:6390/2"),
            "10.0.0.1:6390"
        );
        assert_eq!(redact("redis://:hunter2@host:1/0"), "redis://***@host:1/0");
        assert_eq!(redact("redis://host:1"), "redis://host:1");
        assert!(!redact("rediss://a:b@c@host:1").contains('b'));
    }

    fn args(url: Option<&str>, cluster: &[&str], sentinel: &[&str]) -> TargetArgs {
        TargetArgs {
            url: url.map(str::to_owned),
            cluster: cluster.iter().map(|s| s.to_string()).collect(),
            sentinel: sentinel.iter().map(|s| s.to_string()).collect(),
            master: None,
            sentinel_node_user: None,
            sentinel_node_password: None,
            sentinel_node_tls: false,
            sentinel_node_db: None,
            namespace: "distlock".into(),
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }

    #[test]
    fn the_url_comes_from_the_option_then_the_environment() {
        let target = Target::from_args(args(None, &[], &[]), Some("redis://env:1".into()));
        assert!(
            matches!(target, Ok(Target { deployment: Deployment::Single(url), .. }) if url == "redis://env:1")
        );
        let target = Target::from_args(
            args(Some("redis://opt:1"), &[], &[]),
            Some("redis://env:1".into()),
        );
        assert!(
            matches!(target, Ok(Target { deployment: Deployment::Single(url), .. }) if url == "redis://opt:1")
        );
        let target = Target::from_args(args(None, &[], &[]), None);
        assert!(
            matches!(target, Ok(Target { deployment: Deployment::Single(url), .. }) if url == DEFAULT_URL)
        );
        let target = Target::from_args(
            args(None, &["redis://a:1"], &[]),
            Some("redis://env:1".into()),
        );
        assert!(matches!(
            target,
            Ok(Target {
                deployment: Deployment::Cluster(_),
                ..
            })
        ));
    }

    #[test]
    fn deployments_that_conflict_are_usage_errors() {
        let both = Target::from_args(args(Some("redis://a:1"), &["redis://b:1"], &[]), None);
        assert!(matches!(
            both,
            Err(CliError {
                exit: Exit::Usage,
                ..
            })
        ));
        let no_master = Target::from_args(args(None, &[], &["redis://s:1"]), None);
        assert!(matches!(
            no_master,
            Err(CliError {
                exit: Exit::Usage,
                ..
            })
        ));
        let mut stray = args(None, &[], &[]);
        stray.sentinel_node_tls = true;
        assert!(matches!(
            Target::from_args(stray, None),
            Err(CliError {
                exit: Exit::Usage,
                ..
            })
        ));
    }
}
