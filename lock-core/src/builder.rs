//! Configuring a client: [`LockClientBuilder`]'s settings and their validation
//! (pure functions, checked before anything is dialed); connecting is
//! `connect.rs`, fed the checked settings.

use std::fmt;
use std::time::Duration;

use crate::acquire::{check_deadlock_after, check_max_hold, fencing_on_redlock};
use crate::backend::sentinel::{NodeAuth, NodeOptions};
use crate::backend::tls::{self, TlsSettings};
use crate::backend::url::{parse_url, parse_urls, redact};
use crate::client::LockClient;
use crate::connect::{self, Endpoints};
use crate::error::LockError;
use crate::inner::Settings;
use crate::keys::validate_namespace;
use crate::lease::{MAX_LEASE, MIN_WATCHDOG_LEASE};
use crate::ops::order::LockOrderCheck;
use crate::ops::{self, DEFAULT_METRIC_LABELS, MAX_METRIC_LABELS};
use crate::who::MAX_SERVICE_LEN;

impl LockClient {
    /// A builder to configure and connect a client.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder().url("redis://127.0.0.1:6379");
    /// // Then `builder.connect().await?`; see `LockClientBuilder` for every setting.
    /// # let _ = builder;
    /// ```
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::new()
    }
}

/// Configures and connects a [`LockClient`].
///
/// Start from [`LockClient::builder`], name the deployment ([`url`](Self::url),
/// [`sentinel`](Self::sentinel), [`cluster`](Self::cluster) or
/// [`redlock`](Self::redlock)), add settings, then [`connect`](Self::connect). Every
/// setting is checked when `connect` is called, before anything is dialed.
///
/// # Examples
///
/// One example per deployment. The settings that belong to no deployment (the
/// namespace, waits, leases, fencing, timeouts) are shown on one server and work
/// the same on every other.
///
/// ## One server
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
///     // Locks outlive a crashed client by 15 s at most.
///     .default_lease(Duration::from_secs(15))
///     // Every lock gets a fencing token.
///     .fencing(true)
///     .connect_timeout(Duration::from_secs(2))
///     .response_timeout(Duration::from_millis(300))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// ## Sentinel
///
/// The data nodes use an ACL user and database 2; each new lock waits until one
/// replica has it (see also the example of [`sentinel`](Self::sentinel)).
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
///
/// let locks = LockClient::builder()
///     .sentinel(
///         ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
///         "locks",
///     )
///     .sentinel_node_auth("locks-app", "s3cret")
///     .sentinel_node_db(2)
///     .replicas(1, Duration::from_millis(100))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// ## Redis Cluster
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::LockClient;
///
/// // Some of the nodes: the others are found through them.
/// let locks = LockClient::builder()
///     .cluster(["redis://10.0.1.1:7000", "redis://10.0.1.2:7000", "redis://10.0.1.3:7000"])
///     .namespace("checkout")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// ## Redlock
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use std::time::Duration;
/// use distlock::LockClient;
///
/// // Three independent masters: a lock needs two of them.
/// let locks = LockClient::builder()
///     .redlock(["redis://10.0.2.1:6379", "redis://10.0.2.2:6379", "redis://10.0.2.3:6379"])
///     .redlock_node_timeout(Duration::from_millis(100))
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
///
/// ## TLS
///
/// `rediss://` URLs turn TLS on (one server, the nodes of a cluster, Redlock
/// masters, Sentinels), and [`sentinel_node_tls`](Self::sentinel_node_tls) turns it
/// on for the data nodes behind Sentinel. Here every connection of a Sentinel
/// deployment uses TLS, with certificates from a private CA; for one server see the
/// examples of [`tls_root_ca`](Self::tls_root_ca) and
/// [`tls_client_cert`](Self::tls_client_cert).
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::LockClient;
///
/// let locks = LockClient::builder()
///     .sentinel(["rediss://10.0.0.1:26380", "rediss://10.0.0.2:26380"], "locks")
///     .sentinel_node_tls(true)
///     .sentinel_node_password("s3cret")
///     .tls_root_ca(std::fs::read("/etc/redis/tls/ca.pem")?)
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct LockClientBuilder {
    target: Option<Target>,
    tls: TlsSettings,
    /// Every other setting, handed to `connect.rs` once checked.
    settings: Settings,
}

/// The defaults that the builder's setters document.
impl Default for Settings {
    fn default() -> Self {
        Self {
            certs: None,
            namespace: "distlock".to_owned(),
            service: default_service(),
            default_wait: Duration::from_secs(10),
            default_lease: Duration::from_secs(30),
            fencing: false,
            group_commit: true,
            name_at_once: false,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_millis(500),
            replicas: None,
            redlock_node_timeout: Duration::from_millis(50),
            sentinel_node: NodeOptions::default(),
            max_hold: None,
            operators: ops::Settings {
                lock_order: LockOrderCheck::default(),
                share_lock_order: false,
                deadlock_check_after: Some(Duration::from_secs(1)),
                max_metric_labels: DEFAULT_METRIC_LABELS,
            },
        }
    }
}

impl LockClientBuilder {
    /// A builder with every setting at its default; [`url`](Self::url) must be set.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClientBuilder;
    ///
    /// // The same as `LockClient::builder()`.
    /// let builder = LockClientBuilder::new().url("redis://app:s3cret@127.0.0.1:6379");
    /// // `Debug` output never shows a password.
    /// assert!(!format!("{builder:?}").contains("s3cret"));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The Redis server, as a URL: `redis://[user:password@]host:port[/db]`, or
    /// `rediss://` for TLS. Required.
    ///
    /// With `rediss://` the server's certificate is verified against the platform's
    /// roots (which honour `SSL_CERT_FILE` and `SSL_CERT_DIR`), or against
    /// [`tls_root_ca`](Self::tls_root_ca) when it is set, and must name the host of
    /// the URL; see [`tls_client_cert`](Self::tls_client_cert) for servers that ask
    /// for a client certificate. TLS uses the rustls crypto provider the application
    /// installed before connecting, or else installs `ring` as the process default
    /// (see the README's TLS paragraph).
    ///
    /// See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// // The user `app` with its password, database 2; `rediss://` for TLS.
    /// let builder = LockClient::builder().url("redis://app:s3cret@10.0.0.5:6379/2");
    /// // ... then `builder.connect().await?`
    /// # let _ = builder;
    /// ```
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
    ///
    /// See the [Redis Cluster example](Self#redis-cluster).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// // Two of the nodes are enough: the others are found through them.
    /// let builder = LockClient::builder().cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// # let _ = builder;
    /// ```
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
    /// See also the [Sentinel](Self#sentinel) and [TLS](Self#tls) examples.
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
    ///
    /// See the example of [`sentinel`](Self::sentinel).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "locks")
    ///     // The `requirepass` of the master and of every replica.
    ///     .sentinel_node_password("s3cret");
    /// # let _ = builder;
    /// ```
    pub fn sentinel_node_password(self, password: impl Into<String>) -> Self {
        self.node_auth(None, password.into())
    }

    /// An ACL user and its password for the data nodes behind
    /// [`sentinel`](Self::sentinel), sent to the master the Sentinels name and to
    /// every master after a failover. Default: none. Replaces
    /// [`sentinel_node_password`](Self::sentinel_node_password).
    ///
    /// The user needs the same rules on every data node as on a single server (see
    /// the ACL section of the README). The password never appears in `Debug` output
    /// or in logs. Neither may be empty; only with [`sentinel`](Self::sentinel).
    ///
    /// See the [Sentinel example](Self#sentinel).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "locks")
    ///     // An ACL user with distlock's rules on every data node.
    ///     .sentinel_node_auth("locker", "s3cret");
    /// # let _ = builder;
    /// ```
    pub fn sentinel_node_auth(
        self,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.node_auth(Some(username.into()), password.into())
    }

    /// The credentials of the data nodes behind Sentinel: `username` (`None`: the
    /// `default` user) and `password`.
    fn node_auth(mut self, username: Option<String>, password: String) -> Self {
        self.settings.sentinel_node.auth = Some(NodeAuth { username, password });
        self
    }

    /// Whether the data nodes behind [`sentinel`](Self::sentinel) speak TLS, as a
    /// `rediss://` URL would: the certificate is verified against the platform's
    /// roots (which honour `SSL_CERT_FILE`), or [`tls_root_ca`](Self::tls_root_ca)
    /// when set, and must name the address the Sentinels
    /// announce (an IP address unless they announce hostnames). Default: off. Only
    /// with [`sentinel`](Self::sentinel); TLS to the Sentinels themselves is set by
    /// their URLs.
    ///
    /// See the [TLS example](Self#tls).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     // TLS to the Sentinels: their `rediss://` URLs.
    ///     .sentinel(["rediss://10.0.0.1:26380", "rediss://10.0.0.2:26380"], "locks")
    ///     // TLS to the master they name.
    ///     .sentinel_node_tls(true);
    /// # let _ = builder;
    /// ```
    pub fn sentinel_node_tls(mut self, tls: bool) -> Self {
        self.settings.sentinel_node.tls = tls;
        self
    }

    /// The database of the data nodes behind [`sentinel`](Self::sentinel) that
    /// holds the locks (as `/db` in a URL). Default: 0. Only with
    /// [`sentinel`](Self::sentinel).
    ///
    /// See the [Sentinel example](Self#sentinel).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "locks")
    ///     .sentinel_node_db(2); // the locks live in database 2 of the master
    /// # let _ = builder;
    /// ```
    pub fn sentinel_node_db(mut self, db: u32) -> Self {
        self.settings.sentinel_node.db = db;
        self
    }

    /// The certificate authority that signed the servers' certificates, as PEM (one
    /// or more `-----BEGIN CERTIFICATE-----` blocks, e.g. the contents of `ca.pem`),
    /// trusted instead of the platform's roots. Default: none, so the platform's
    /// roots are used, which honour the `SSL_CERT_FILE` and `SSL_CERT_DIR`
    /// environment variables.
    ///
    /// Applies to every TLS connection of the client: `rediss://` URLs (one server,
    /// every cluster node, every Redlock master, the Sentinels) and the data nodes
    /// behind Sentinel with [`sentinel_node_tls`](Self::sentinel_node_tls). Checked
    /// before anything is dialed: PEM without a certificate, or that does not parse,
    /// is refused with [`LockError::InvalidOption`], and so is this setting when no
    /// connection uses TLS. redis-rs still reads the platform's roots when this is
    /// set, so `SSL_CERT_FILE` and `SSL_CERT_DIR`, if set, must name readable files
    /// (the connect fails with a hint saying so otherwise).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::LockClient;
    ///
    /// let locks = LockClient::builder()
    ///     .url("rediss://10.0.0.5:6380")
    ///     .tls_root_ca(std::fs::read("/etc/redis/tls/ca.pem")?)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_root_ca(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_ca = Some(pem.into());
        self
    }

    /// A client certificate (PEM: the certificate, then any intermediates) and its
    /// private key (PEM), presented to servers that ask for one (redis-server's
    /// `tls-auth-clients yes`). Default: none.
    ///
    /// Applies to the same connections as [`tls_root_ca`](Self::tls_root_ca).
    /// Checked before anything is dialed: a certificate or key that does not parse,
    /// or a key that does not belong to the certificate, is refused with
    /// [`LockError::InvalidOption`], and so is this setting when no connection uses
    /// TLS. The key never appears in `Debug` output or in messages.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::LockClient;
    ///
    /// let locks = LockClient::builder()
    ///     .url("rediss://10.0.0.5:6380")
    ///     .tls_root_ca(std::fs::read("/etc/redis/tls/ca.pem")?)
    ///     .tls_client_cert(
    ///         std::fs::read("/etc/redis/tls/client.pem")?,
    ///         std::fs::read("/etc/redis/tls/client.key")?,
    ///     )
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_cert = Some((cert_pem.into(), key_pem.into()));
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
    ///
    /// See the [Redlock example](Self#redlock).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// // Three independent masters: a lock needs two of them.
    /// let builder = LockClient::builder().redlock([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ]);
    /// # let _ = builder;
    /// ```
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
    ///
    /// See the [Redlock example](Self#redlock).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .redlock(["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"])
    ///     // Nodes in one data centre answer fast: do not wait long for a slow one.
    ///     .redlock_node_timeout(Duration::from_millis(20));
    /// # let _ = builder;
    /// ```
    pub fn redlock_node_timeout(mut self, timeout: Duration) -> Self {
        self.settings.redlock_node_timeout = timeout;
        self
    }

    /// The prefix of every Redis key and channel distlock uses: `<namespace>:{name}`.
    /// Default: `distlock`. 1 to 128 bytes, without `{` or `}`.
    ///
    /// See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// // The keys of lock `order:42` are `shop:{order:42}` and its kin; every service that
    /// // shares these locks uses the same namespace.
    /// let builder = LockClient::builder().url("redis://127.0.0.1:6379").namespace("shop");
    /// # let _ = builder;
    /// ```
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.settings.namespace = namespace.into();
        self
    }

    /// The name of the service that takes the locks, like `orders-api`: every
    /// connection of the client is named `distlock:<service>` (`CLIENT SETNAME`, so
    /// `CLIENT LIST` shows whose connections these are), and it is what
    /// [`LockClient::service`] returns. Default: the file stem of the running
    /// executable (without the `-<hash>` Cargo appends to test binaries), or
    /// `distlock` when that is unknown. The holder record kept with each lock
    /// (`#who:<owner>`, see [`crate::layout`]) shortens a long service or host name
    /// to its first 12 bytes where that keeps the record within 50 bytes.
    ///
    /// It must be 1 to [`MAX_SERVICE_LEN`] bytes of
    /// printable ASCII without spaces (`!` to `~`), which is what Redis accepts in a
    /// connection name; `connect` refuses anything else with
    /// [`LockError::InvalidOption`] naming `service`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// // `CLIENT LIST` on the server shows `name=distlock:orders-api`.
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .service("orders-api");
    /// # let _ = builder;
    /// ```
    pub fn service(mut self, service: impl Into<String>) -> Self {
        self.settings.service = service.into();
        self
    }

    /// How long [`LockClient::lock`] waits for a busy lock unless the request says
    /// otherwise with `.wait(..)`. Default: 10 s. Zero fails fast.
    ///
    /// See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// // A busy lock fails after 2 s unless the request says `.wait(..)`.
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .default_wait(Duration::from_secs(2));
    /// # let _ = builder;
    /// ```
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.settings.default_wait = wait;
        self
    }

    /// The watchdog lease: how long a lock outlives a client that stops renewing it
    /// (a crash, a partition, a stalled runtime). The watchdog renews it every third
    /// of it. Default: 30 s; from [`MIN_WATCHDOG_LEASE`] to [`MAX_LEASE`].
    ///
    /// See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// // A crashed holder's locks free themselves after 10 s; renewed every ~3.3 s.
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .default_lease(Duration::from_secs(10));
    /// # let _ = builder;
    /// ```
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.settings.default_lease = lease;
        self
    }

    /// Issue fencing tokens for every lock of this client (a request can still turn
    /// them on with `.fencing(true)`). Default: off, because each fenced name keeps a
    /// small counter key in Redis forever, so that tokens never repeat.
    ///
    /// Not available on Redlock. See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// // Every lock of this client carries a fencing token (`HeldLock::fencing_token`).
    /// let builder = LockClient::builder().url("redis://127.0.0.1:6379").fencing(true);
    /// # let _ = builder;
    /// ```
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.settings.fencing = fencing;
        self
    }

    /// Whether the new acquisitions, and the releases, of this client's tasks that
    /// are ready at the same moment go to Redis as one script run each (group
    /// commit), on a single server or a Sentinel master. Default: `true`. Each
    /// request is answered as if it ran alone; a run carries at most 16 requests
    /// (about 150 µs of the server's time, which serves nobody else meanwhile),
    /// and at most two runs of each are on the way at once, so a request waits
    /// for at most the run before it. Turn it off to send every request on its
    /// own (one script run each), for example to compare. A cluster and Redlock
    /// always send requests one by one (a run's keys must share a hash slot).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .group_commit(false); // one script run per acquisition and release
    /// # let _ = builder;
    /// ```
    pub fn group_commit(mut self, group_commit: bool) -> Self {
        self.settings.group_commit = group_commit;
        self
    }

    /// Whether each acquisition names its holder (`#who:<owner>`: service, host,
    /// pid, site and when it took the lock; see [`Holder::info`](crate::Holder::info))
    /// in the same script run. Default: `false`: a hold the watchdog renews is named
    /// by its first renewal, 1 s after its grant (sooner when a third of its lease
    /// is shorter), so that the many locks held for less than a second cost the
    /// server no clock read and no record; a fixed lease, and a hold whose
    /// `max_hold` ends by its first renewal, are named at once either way. Turn it
    /// on when every holder must be named from its grant (a timeout shorter than a
    /// second that names the holder, say), at about 15 % more of the server's time
    /// per first acquisition and 90 bytes per held lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .name_holders_at_once(true); // `inspect` names every holder at once
    /// # let _ = builder;
    /// ```
    pub fn name_holders_at_once(mut self, at_once: bool) -> Self {
        self.settings.name_at_once = at_once;
        self
    }

    /// How long connecting may take before [`connect`](Self::connect) gives up.
    /// Default: 5 s.
    ///
    /// See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .connect_timeout(Duration::from_secs(1)); // fail fast at start-up
    /// # let _ = builder;
    /// ```
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long a single Redis request may take before it fails. Default: 500 ms.
    /// Keep it well below a third of the lease.
    ///
    /// See the [one-server example](Self#one-server).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// // A 30 s lease is renewed every 10 s: 200 ms per request leaves room for retries.
    /// let builder = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .response_timeout(Duration::from_millis(200));
    /// # let _ = builder;
    /// ```
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
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
    ///
    /// See the [Sentinel example](Self#sentinel).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// // Every new lock waits until one replica has it, for up to 100 ms.
    /// let builder = LockClient::builder()
    ///     .sentinel(["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"], "locks")
    ///     .replicas(1, Duration::from_millis(100));
    /// # let _ = builder;
    /// ```
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.settings.replicas = Some((replicas, timeout));
        self
    }

    /// What the lock-order checker does when a call chain takes two locks in the
    /// order opposite to one seen before (two chains doing that can deadlock):
    /// [`LockOrderCheck::Warn`] (the default) warns once per pair of lock classes,
    /// naming both and the four call sites; [`LockOrderCheck::Strict`] refuses the
    /// acquisition with [`LockError::LockOrderInversion`] (for tests and CI);
    /// [`LockOrderCheck::Off`] records nothing.
    ///
    /// A lock's class is the label of its request ([`LockRequest::label`]; the
    /// macro gives its key template), or else its name with every part that varies
    /// folded: digits, hex, UUIDs (`order:42` is `order:{#}`). Only new acquisitions
    /// made while the chain holds other locks of this client are checked: it costs
    /// nothing otherwise.
    /// Re-entries and the names of one `lock_all` are never inversions.
    ///
    /// [`LockRequest::label`]: crate::LockRequest::label
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use distlock::{LockClient, LockOrderCheck};
    ///
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .lock_order(LockOrderCheck::Strict)
    ///     .connect()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock_order(mut self, check: LockOrderCheck) -> Self {
        self.settings.operators.lock_order = check;
        self
    }

    /// Whether the lock-order checker also keeps its edges in Redis, in one hash per
    /// namespace (`<namespace>:lock-order`) that every client of the namespace
    /// shares, so that two services (or two processes) taking two classes of locks
    /// in opposite orders are found too, not only two call chains of one client.
    /// Default: `false` (edges in memory only).
    ///
    /// Each edge is sent once per client, the first time the client sees it (one
    /// script run; nothing in the steady state). With [`LockOrderCheck::Warn`] it
    /// goes in the background and an inversion is warned of with the other side's
    /// service, host, pid and call sites; with [`LockOrderCheck::Strict`] the
    /// acquisition waits for the answer and fails with
    /// [`LockError::LockOrderInversion`]. The hash keeps at most 10,000 edges and
    /// expires a day after its last new one; a Redis that cannot be reached skips
    /// the check, never the lock. The ACL needs `hget`, `hexists`, `hlen`, `hset`
    /// and `pexpire` on the namespace's keys. On Redlock the graph is kept on the
    /// first node.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use distlock::{LockClient, LockOrderCheck};
    ///
    /// // In every service's integration tests: fail on an inversion between services.
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .lock_order(LockOrderCheck::Strict)
    ///     .share_lock_order(true)
    ///     .connect()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn share_lock_order(mut self, share: bool) -> Self {
        self.settings.operators.share_lock_order = share;
        self
    }

    /// How long a waiter whose call chain holds other locks waits before it looks for
    /// a deadlock (a cycle of chains, each waiting for a lock the next holds, across
    /// processes and clients), and then how often it looks again while it waits.
    /// One member of the cycles (the one without which none is left, else the one
    /// holding the fewest locks) gets [`LockError::Deadlock`] at the second check
    /// that finds the same cycles once every member has waited its own threshold,
    /// and the others proceed (the README's "Deadlocks" bounds how long that takes).
    /// Default: `Some(1 s)`; `None` turns detection off. A request may set its own
    /// with
    /// [`LockRequest::deadlock_check_after`](crate::LockRequest::deadlock_check_after).
    ///
    /// It costs nothing for a waiter that holds no lock, and nothing for a wait
    /// shorter than 100 ms; a longer one announces what it waits for once (one
    /// write per lock its chain holds, deleted at its end); past the threshold, a
    /// write every 100 ms and a few round trips per check. Not on Redlock (each
    /// node has its own holders; a deadlock there ends when a wait runs out).
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
    ///     .deadlock_check_after(Some(Duration::from_millis(500)))
    ///     .connect()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn deadlock_check_after(mut self, after: Option<Duration>) -> Self {
        self.settings.operators.deadlock_check_after = after;
        self
    }

    /// The longest any lock of this client is held: the watchdog stops renewing a
    /// hold once `max_hold` has passed since its first acquisition (re-entries do
    /// not extend it), so a holder that is stuck but alive cannot keep a lock
    /// forever. When the lease then runs out, the guard's
    /// [`lost`](crate::LockGuard::lost) fires with
    /// [`LostReason::MaxHoldExceeded`](crate::LostReason::MaxHoldExceeded) and a
    /// warning names the lock. The lock is free for others at most one lease after
    /// `max_hold`. Default: no bound. A request may set its own with
    /// [`LockRequest::max_hold`](crate::LockRequest::max_hold).
    ///
    /// It must be at least a third of the [`default_lease`](Self::default_lease)
    /// (one renewal period); a request's fixed lease must not be longer than it
    /// (both are refused with [`LockError::InvalidOption`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use std::time::Duration;
    /// use distlock::LockClient;
    ///
    /// // No job holds a lock for more than 5 minutes (plus one lease).
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .max_hold(Duration::from_secs(300))
    ///     .connect()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.settings.max_hold = Some(max_hold);
        self
    }

    /// How many distinct values of the `lock` label this client's metrics (feature
    /// `metrics`) use at most. Default: 256. A lock's label is its request's
    /// [`label`](crate::LockRequest::label) (the macro's key template), else its
    /// name with every part that varies folded (`order:42` and
    /// `job:123e4567-e89b-12d3-a456-426614174000` are `order:{#}` and `job:{#}`);
    /// once this many are in use, every new one is counted under `{other}`, and a
    /// warning says once which setting raises the cap and how to label the names.
    /// 1 to 100,000 (else [`LockError::InvalidOption`]). Without the feature it
    /// changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use distlock_core as distlock;
    /// # async fn demo() -> Result<(), distlock::LockError> {
    /// use distlock::LockClient;
    ///
    /// // A service with many lock templates, scraped by a Prometheus that can take it.
    /// let locks = LockClient::builder()
    ///     .url("redis://127.0.0.1:6379")
    ///     .max_metric_labels(1_000)
    ///     .connect()
    ///     .await?;
    /// # let _ = locks;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_metric_labels(mut self, labels: usize) -> Self {
        self.settings.operators.max_metric_labels = labels;
        self
    }

    /// Checks every setting, before anything is dialed: the endpoints to connect to,
    /// or the first setting out of range.
    fn validate(&self) -> Result<Endpoints, LockError> {
        validate_namespace(&self.settings.namespace)?;
        check_service(&self.settings.service)?;
        check_default_lease(self.settings.default_lease)?;
        check_replicas(&self.settings)?;
        check_timeouts(&self.settings)?;
        if let Some(after) = self.settings.operators.deadlock_check_after {
            check_deadlock_after(after)?;
        }
        if !(1..=MAX_METRIC_LABELS).contains(&self.settings.operators.max_metric_labels) {
            return Err(LockError::invalid_option(
                "max_metric_labels",
                format!(
                    "max_metric_labels is {}; it must be 1 to {MAX_METRIC_LABELS} (default \
                     {DEFAULT_METRIC_LABELS})",
                    self.settings.operators.max_metric_labels
                ),
            ));
        }
        if let Some(max_hold) = self.settings.max_hold {
            check_max_hold(max_hold, self.settings.default_lease, true)?;
        }
        self.validate_sentinel_node()?;
        let endpoints = self.validate_target()?;
        if self.tls.certificates()?.is_some() && !endpoints.use_tls(&self.settings.sentinel_node) {
            return Err(LockError::invalid_option(
                self.tls.first_set_option().unwrap_or("tls_root_ca"),
                "applies to TLS connections only, and none of the client's is one; use \
                 `rediss://` URLs (or `.sentinel_node_tls(true)` for the data nodes behind \
                 Sentinel), or leave the option out",
            ));
        }
        Ok(endpoints)
    }

    /// Checks the target's URLs.
    fn validate_target(&self) -> Result<Endpoints, LockError> {
        let target = self.target.as_ref().ok_or_else(|| {
            LockError::invalid_option(
                "url",
                "no Redis URL was given; call `.url(\"redis://127.0.0.1:6379\")` (or `.cluster([..])`)",
            )
        })?;
        Ok(match target {
            Target::Single(url) => Endpoints::Single(parse_url("url", url)?),
            Target::Sentinel {
                sentinels,
                master_name,
            } => {
                if sentinels.is_empty() || master_name.is_empty() {
                    return Err(LockError::invalid_option(
                        "sentinel",
                        "give the URLs of one or more Sentinels and the master's name, as in \
                         `.sentinel([\"redis://127.0.0.1:26379\"], \"mymaster\")`",
                    ));
                }
                let nodes = parse_urls("sentinel", sentinels, "one or more Sentinels")?;
                Endpoints::Sentinel(nodes, master_name.clone())
            }
            Target::Redlock(urls) => {
                let nodes = parse_urls("redlock", urls, "the independent masters")?;
                check_redlock(&self.settings)?;
                Endpoints::Redlock(nodes)
            }
            Target::Cluster(urls) => {
                Endpoints::Cluster(parse_urls("cluster", urls, "one or more cluster nodes")?)
            }
        })
    }

    /// Checks the `sentinel_node_*` settings: they apply only to a Sentinel target,
    /// and credentials may not be empty.
    fn validate_sentinel_node(&self) -> Result<(), LockError> {
        let node = &self.settings.sentinel_node;
        if node.tls && !cfg!(feature = "tls") {
            return Err(LockError::invalid_option(
                "sentinel_node_tls",
                tls::needs_feature("TLS to the data nodes (`sentinel_node_tls`)"),
            ));
        }
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
    /// [`LockError::InvalidOption`] for a setting out of range, an unparsable URL or
    /// PEM, before any connection is tried; [`LockError::Connect`], naming the server
    /// (`host:port`), when it cannot be reached within the connect timeout or refuses
    /// the connection: a refused password, a database number beyond the server's
    /// `databases`, `rediss://` to a plain-text port, a certificate from a CA the
    /// client does not trust each fail at once, with a hint of their own; [`LockError::UnsupportedServer`] for a
    /// server older than Redis 7.0; [`LockError::PermissionDenied`] when the Redis user
    /// may not load scripts.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the half-made connections; nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use distlock::LockClient;
    ///
    /// // Settings are checked before anything is dialed: no server is needed to learn
    /// // that Redlock has no fencing tokens.
    /// let refused = LockClient::builder()
    ///     .redlock([
    ///         "redis://10.0.2.1:6379",
    ///         "redis://10.0.2.2:6379",
    ///         "redis://10.0.2.3:6379",
    ///     ])
    ///     .fencing(true)
    ///     .connect()
    ///     .await;
    /// assert!(refused.is_err_and(|err| err.is_invalid_input()));
    /// # }
    /// ```
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let endpoints = self.validate()?;
        let settings = Settings {
            certs: self.tls.certificates()?,
            ..self.settings
        };
        connect::connect(settings, endpoints).await
    }
}

/// A service name fits in a Redis connection name: printable ASCII without spaces,
/// 1 to [`MAX_SERVICE_LEN`] bytes.
fn check_service(service: &str) -> Result<(), LockError> {
    if service.is_empty() || service.len() > MAX_SERVICE_LEN {
        return Err(LockError::invalid_option(
            "service",
            format!(
                "`{}` is {} bytes long; use 1 to {MAX_SERVICE_LEN} bytes, like `orders-api`",
                service.escape_debug(),
                service.len()
            ),
        ));
    }
    if let Some(bad) = service.chars().find(|c| !matches!(c, '!'..='~')) {
        return Err(LockError::invalid_option(
            "service",
            format!(
                "`{}` contains {bad:?}, which Redis refuses in a connection name; use \
                 letters, digits and punctuation without spaces, like `orders-api`",
                service.escape_debug()
            ),
        ));
    }
    Ok(())
}

/// The service name when none is set: the running executable's file stem (when it
/// is a valid name), else `distlock`.
fn default_service() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|path| path.file_stem()?.to_str().map(str::to_owned))
        .map(|stem| without_build_hash(&stem).to_owned())
        .map(|stem| stem.chars().take(MAX_SERVICE_LEN).collect::<String>())
        .filter(|stem| check_service(stem).is_ok())
        .unwrap_or_else(|| "distlock".to_owned())
}

/// An executable's name without the `-<16 hex digits>` that Cargo appends to the
/// binaries of tests and benchmarks (`orders-3f2a9c0b1d4e5f67` is `orders`).
fn without_build_hash(stem: &str) -> &str {
    match stem.rsplit_once('-') {
        Some((name, hash))
            if !name.is_empty()
                && hash.len() == 16
                && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            name
        }
        _ => stem,
    }
}

/// The watchdog lease must leave room for renewals.
fn check_default_lease(lease: Duration) -> Result<(), LockError> {
    if lease < MIN_WATCHDOG_LEASE || lease > MAX_LEASE {
        return Err(LockError::invalid_option(
            "default_lease",
            format!(
                "{lease:?} is out of range; use {MIN_WATCHDOG_LEASE:?} to {MAX_LEASE:?} (default 30 s)"
            ),
        ));
    }
    Ok(())
}

/// Waiting for replicas must end before the request times out.
fn check_replicas(settings: &Settings) -> Result<(), LockError> {
    let response_timeout = settings.response_timeout;
    match settings.replicas {
        Some((_, timeout)) if timeout < Duration::from_millis(1) || timeout >= response_timeout => {
            Err(LockError::invalid_option(
                "replicas",
                format!(
                    "the timeout {timeout:?} must be at least 1 ms and below the response \
                     timeout ({response_timeout:?}); raise `response_timeout` or lower the \
                     replicas timeout"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Timeouts of zero would fail every request.
fn check_timeouts(settings: &Settings) -> Result<(), LockError> {
    if settings.connect_timeout.is_zero() || settings.response_timeout.is_zero() {
        return Err(LockError::invalid_option(
            "connect_timeout",
            "timeouts must be above zero",
        ));
    }
    Ok(())
}

/// What Redlock cannot do, and its node timeout.
fn check_redlock(settings: &Settings) -> Result<(), LockError> {
    let (node_timeout, lease) = (settings.redlock_node_timeout, settings.default_lease);
    if settings.fencing {
        return Err(fencing_on_redlock());
    }
    if settings.replicas.is_some() {
        return Err(LockError::invalid_option(
            "replicas",
            "replica acknowledgements do not apply to Redlock's independent masters",
        ));
    }
    if node_timeout.is_zero() || node_timeout * 3 > lease {
        return Err(LockError::invalid_option(
            "redlock_node_timeout",
            format!("{node_timeout:?} must be above zero and far below the lease ({lease:?})"),
        ));
    }
    Ok(())
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
        let redacted = |urls: &[String]| urls.iter().map(|url| redact(url)).collect::<Vec<_>>();
        match self {
            Self::Single(url) => f.debug_tuple("Single").field(&redact(url)).finish(),
            Self::Cluster(urls) => f.debug_tuple("Cluster").field(&redacted(urls)).finish(),
            Self::Sentinel {
                sentinels,
                master_name,
            } => f
                .debug_struct("Sentinel")
                .field("sentinels", &redacted(sentinels))
                .field("master_name", master_name)
                .finish(),
            Self::Redlock(urls) => f.debug_tuple("Redlock").field(&redacted(urls)).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option_of(result: Result<Endpoints, LockError>) -> Option<&'static str> {
        match result {
            Err(LockError::InvalidOption { option, .. }) => Some(option),
            _ => None,
        }
    }

    fn valid() -> LockClientBuilder {
        LockClientBuilder::new().url("redis://127.0.0.1:6379")
    }

    #[test]
    fn a_service_must_fit_in_a_connection_name() {
        assert!(valid().service("orders-api").validate().is_ok());
        assert!(valid()
            .service("a".repeat(MAX_SERVICE_LEN))
            .validate()
            .is_ok());
        for bad in [
            "",
            "orders api",
            "tab\there",
            "ünï",
            &"a".repeat(MAX_SERVICE_LEN + 1),
        ] {
            assert_eq!(
                option_of(valid().service(bad).validate()),
                Some("service"),
                "{bad:?}"
            );
        }
        assert!(check_service(&default_service()).is_ok());
        // This test's binary is `distlock_core-<hash>`.
        assert_eq!(default_service(), "distlock_core");
        assert_eq!(without_build_hash("orders-3f2a9c0b1d4e5f67"), "orders");
        assert_eq!(without_build_hash("orders-api"), "orders-api");
        assert_eq!(without_build_hash("-3f2a9c0b1d4e5f67"), "-3f2a9c0b1d4e5f67");
    }

    #[test]
    fn a_builder_with_a_url_is_valid() {
        assert!(matches!(valid().validate(), Ok(Endpoints::Single(_))));
        assert_eq!(option_of(LockClientBuilder::new().validate()), Some("url"));
        assert_eq!(option_of(valid().url("not a url").validate()), Some("url"));
    }

    #[test]
    fn settings_out_of_range_name_their_option() {
        let short = valid().default_lease(MIN_WATCHDOG_LEASE - Duration::from_millis(1));
        assert_eq!(option_of(short.validate()), Some("default_lease"));
        let long = valid().default_lease(MAX_LEASE + Duration::from_millis(1));
        assert_eq!(option_of(long.validate()), Some("default_lease"));
        let slow_replicas = valid().replicas(1, Duration::from_millis(500));
        assert_eq!(option_of(slow_replicas.validate()), Some("replicas"));
        let no_timeout = valid().connect_timeout(Duration::ZERO);
        assert_eq!(option_of(no_timeout.validate()), Some("connect_timeout"));
        assert_eq!(
            option_of(valid().namespace("a{b}").validate()),
            Some("namespace")
        );
    }

    #[test]
    fn redlock_refuses_what_it_cannot_do() {
        let nodes = [
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ];
        let redlock = || LockClientBuilder::new().redlock(nodes);
        assert!(matches!(redlock().validate(), Ok(Endpoints::Redlock(n)) if n.len() == 3));
        assert_eq!(
            option_of(redlock().fencing(true).validate()),
            Some("fencing")
        );
        let replicas = redlock().replicas(1, Duration::from_millis(10));
        assert_eq!(option_of(replicas.validate()), Some("replicas"));
        let slow = redlock().redlock_node_timeout(Duration::from_secs(11));
        assert_eq!(option_of(slow.validate()), Some("redlock_node_timeout"));
        let none: [&str; 0] = [];
        assert_eq!(
            option_of(LockClientBuilder::new().redlock(none).validate()),
            Some("redlock")
        );
    }

    #[test]
    fn sentinel_settings_apply_to_sentinel_only() {
        let sentinel = || LockClientBuilder::new().sentinel(["redis://127.0.0.1:26379"], "locks");
        assert!(
            matches!(sentinel().validate(), Ok(Endpoints::Sentinel(_, name)) if name == "locks")
        );
        assert_eq!(
            option_of(
                LockClientBuilder::new()
                    .sentinel(["redis://127.0.0.1:26379"], "")
                    .validate()
            ),
            Some("sentinel")
        );
        assert_eq!(
            option_of(valid().sentinel_node_db(2).validate()),
            Some("sentinel_node_db")
        );
        assert_eq!(
            option_of(sentinel().sentinel_node_password("").validate()),
            Some("sentinel_node_password")
        );
        assert_eq!(
            option_of(sentinel().sentinel_node_auth("", "pw").validate()),
            Some("sentinel_node_auth")
        );
    }

    /// A CA certificate, and a client certificate and key signed by it, as PEM.
    #[cfg(feature = "tls")]
    fn test_pki() -> (String, String, String) {
        let ca_key = rcgen::KeyPair::generate().expect("CA key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).expect("CA");
        let key = rcgen::KeyPair::generate().expect("client key");
        let cert = rcgen::CertificateParams::new(vec!["client".to_owned()])
            .expect("client params")
            .signed_by(&key, &ca_cert, &ca_key)
            .expect("client certificate");
        (ca_cert.pem(), cert.pem(), key.serialize_pem())
    }

    #[test]
    #[cfg(feature = "tls")]
    fn tls_settings_are_checked_before_dialing() {
        let (ca, cert, key) = test_pki();
        let tls = || LockClientBuilder::new().url("rediss://127.0.0.1:6380");
        assert!(matches!(
            tls().tls_root_ca(ca.clone()).validate(),
            Ok(Endpoints::Single(_))
        ));
        let both = tls()
            .tls_root_ca(ca.clone())
            .tls_client_cert(cert.clone(), key.clone());
        assert!(both.validate().is_ok());
        assert_eq!(
            option_of(tls().tls_root_ca("not a certificate").validate()),
            Some("tls_root_ca")
        );
        assert_eq!(
            option_of(tls().tls_root_ca(key.clone()).validate()),
            Some("tls_root_ca"),
            "a key is not a CA"
        );
        assert_eq!(
            option_of(tls().tls_client_cert(cert.clone(), "no key").validate()),
            Some("tls_client_cert")
        );
        assert_eq!(
            option_of(tls().tls_client_cert(key.clone(), key.clone()).validate()),
            Some("tls_client_cert")
        );
        let (_, _, other_key) = test_pki();
        assert_eq!(
            option_of(tls().tls_client_cert(cert.clone(), other_key).validate()),
            Some("tls_client_cert"),
            "a key of another certificate"
        );
        // Certificates with no TLS connection to use them are a mistake.
        assert_eq!(
            option_of(valid().tls_root_ca(ca.clone()).validate()),
            Some("tls_root_ca")
        );
        assert_eq!(
            option_of(
                valid()
                    .tls_client_cert(cert.clone(), key.clone())
                    .validate()
            ),
            Some("tls_client_cert")
        );
        let sentinel = || LockClientBuilder::new().sentinel(["redis://127.0.0.1:26379"], "locks");
        assert_eq!(
            option_of(sentinel().tls_root_ca(ca.clone()).validate()),
            Some("tls_root_ca")
        );
        assert!(sentinel()
            .sentinel_node_tls(true)
            .tls_root_ca(ca.clone())
            .validate()
            .is_ok());
        let cluster = LockClientBuilder::new().cluster(["rediss://127.0.0.1:7000"]);
        assert!(cluster.tls_root_ca(ca).validate().is_ok());
    }

    /// Issue 37 (6): without the `tls` feature, every TLS setting is refused before
    /// anything is dialed, with an error that names the feature.
    #[test]
    #[cfg(not(feature = "tls"))]
    fn without_the_tls_feature_every_tls_setting_names_the_feature() {
        let cases = [
            (
                "url",
                LockClientBuilder::new().url("rediss://127.0.0.1:6380"),
            ),
            (
                "cluster",
                LockClientBuilder::new().cluster(["rediss://127.0.0.1:7000"]),
            ),
            (
                "tls_root_ca",
                LockClientBuilder::new()
                    .url("redis://127.0.0.1:6380")
                    .tls_root_ca("-----BEGIN CERTIFICATE-----"),
            ),
            (
                "sentinel_node_tls",
                LockClientBuilder::new()
                    .sentinel(["redis://127.0.0.1:26379"], "locks")
                    .sentinel_node_tls(true),
            ),
        ];
        for (option, builder) in cases {
            let err = builder.validate().err().map(|err| err.to_string());
            let text = err.unwrap_or_else(|| panic!("`{option}` was accepted"));
            assert!(text.contains(option), "{text}");
            assert!(text.contains("`tls` feature"), "{text}");
        }
    }

    #[test]
    #[cfg(feature = "tls")]
    fn a_refused_tls_setting_does_not_show_the_key() {
        let (_, cert, key) = test_pki();
        let err = LockClientBuilder::new()
            .url("rediss://127.0.0.1:6380")
            .tls_client_cert(key.clone(), key.clone())
            .validate()
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
        let secret = key.lines().nth(1).unwrap_or("-");
        assert!(
            err.contains("tls_client_cert") && !err.contains(secret),
            "{err}"
        );
        let builder = LockClientBuilder::new()
            .url("rediss://127.0.0.1:6380")
            .tls_client_cert(cert, key.clone());
        let shown = format!("{builder:?}");
        assert!(!shown.contains(secret), "{shown}");
    }

    #[test]
    fn the_servers_of_a_message_carry_no_password() {
        let described = |builder: LockClientBuilder| {
            builder
                .validate()
                .map(|endpoints| endpoints.describe())
                .unwrap_or_default()
        };
        let one = described(LockClientBuilder::new().url("redis://:hunter2@10.0.0.1:6390/2"));
        assert_eq!(one, "10.0.0.1:6390");
        let cluster = described(
            LockClientBuilder::new()
                .cluster(["redis://u:hunter2@10.0.0.1:7000", "redis://10.0.0.2:7001"]),
        );
        assert_eq!(cluster, "the cluster nodes 10.0.0.1:7000, 10.0.0.2:7001");
        let sentinel = described(
            LockClientBuilder::new()
                .sentinel(["redis://:hunter2@10.0.0.3:26379"], "locks")
                .sentinel_node_password("s3cret"),
        );
        assert_eq!(sentinel, "master `locks` of the Sentinels 10.0.0.3:26379");
    }

    #[test]
    fn debug_output_hides_passwords() {
        let builder = LockClientBuilder::new()
            .url("redis://user:hunter2@127.0.0.1:6379")
            .sentinel_node_password("s3cret");
        let shown = format!("{builder:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("s3cret"),
            "{shown}"
        );
    }
}
