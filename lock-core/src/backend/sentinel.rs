//! Sentinel: the master is found through the Sentinels, and found again after a
//! failover.
//!
//! A connection manager built for one master keeps dialing that address after a
//! failover, so distlock keeps its own connections (commands and subscriber) and
//! moves them itself. Moving always goes through [`SentinelConn::reresolve`]: it
//! asks every Sentinel for the master again and takes the one named by more than
//! half of those that answer (so one Sentinel that has not yet heard of a failover
//! cannot send the client back to a master about to be demoted), checks with `ROLE`
//! that the node really is a master, swaps both connections to it, and wakes the
//! first waiter of every lock so that it asks the new master (the others follow it
//! in their order). Two paths lead there:
//!
//! - **Proactive**: a background task per configured Sentinel subscribes to its
//!   `+switch-master` channel, on which a Sentinel announces a completed failover
//!   (`<master-name> <old-ip> <old-port> <new-ip> <new-port>`). When a message
//!   names our master, the client moves at once, without waiting for a request to
//!   fail; while the Sentinels it asks still name the old master (they learn of
//!   the switch one after another), it asks again, for a bounded time. A Sentinel
//!   that is down or drops the connection is dialed again with a backoff (100 ms
//!   doubling to 5 s); after each (re)subscription the Sentinel is asked which
//!   master it names, so that a switch announced while we were not listening is
//!   not missed. The tasks stop when the client shuts down.
//! - **Reactive**: when a request fails in a way a failover explains (the master is
//!   unreachable, or answers `READONLY` because it was demoted; see
//!   [`crate::error::master_may_have_moved`]), the client finds the master again. This covers
//!   failovers that no reachable Sentinel announced to us.
//!
//! The Sentinels' URLs carry the Sentinels' own credentials and TLS. The data
//! nodes (the master, and whichever replica a failover promotes) are dialed with
//! [`NodeOptions`]: the credentials, TLS and database the user gave for them, on
//! every connection made to a master (at connect, on every move, and for the
//! subscriber).

use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{
    ConnectionAddr, ConnectionInfo, IntoConnectionInfo, PushInfo, PushKind, RedisConnectionInfo,
    RedisError, RedisResult, Value,
};
use tokio::sync::mpsc::{self, UnboundedSender};
use tokio::sync::{watch, Mutex};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::dial::{dial_once, timeouts};
use super::link::{setname, Link, Links};
use super::tls::{with_certificates, TlsCertificates};
use super::url::resp3;
use crate::error::{master_may_have_moved, refused_credentials};

/// The channel on which a Sentinel announces a completed failover:
/// `<master-name> <old-ip> <old-port> <new-ip> <new-port>`.
const SWITCH_MASTER: &str = "+switch-master";
/// The first pause before a Sentinel that could not be reached is dialed again.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// The longest such pause; a subscription that lasted this long starts the
/// backoff over.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often a watch connection pings its Sentinel, to notice a connection that
/// died without a word.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How long the client keeps asking the Sentinels for a master announced on
/// `+switch-master` while the Sentinels it asks still name another one.
const FOLLOW_LIMIT: Duration = Duration::from_secs(10);
/// The first pause between two such asks; it doubles up to [`FOLLOW_MAX_DELAY`].
const FOLLOW_FIRST_DELAY: Duration = Duration::from_millis(50);
/// The longest pause between two such asks.
const FOLLOW_MAX_DELAY: Duration = Duration::from_secs(1);

/// How to connect to the data nodes the Sentinels name, as the user configured it
/// (`LockClientBuilder::sentinel_node_*`). The default is what the Sentinels' names
/// alone give: no credentials, no TLS, database 0.
#[derive(Clone, Debug, Default)]
pub(crate) struct NodeOptions {
    /// `AUTH` for every data node: an ACL user name (`None`: the `default` user,
    /// as with `requirepass`) and its password.
    pub(crate) auth: Option<NodeAuth>,
    /// Whether the data nodes speak TLS (certificates verified, as `rediss://`).
    pub(crate) tls: bool,
    /// The database the locks live in.
    pub(crate) db: u32,
    /// The certificates of `tls_root_ca` and `tls_client_cert`, for TLS data nodes.
    pub(crate) certs: Option<TlsCertificates>,
}

/// The credentials of the data nodes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct NodeAuth {
    /// The ACL user; `None` for the `default` user (`requirepass`).
    pub(crate) username: Option<String>,
    /// Never printed.
    pub(crate) password: String,
}

impl NodeOptions {
    /// The builder method that set the credentials, for error messages.
    pub(crate) fn auth_option(&self) -> &'static str {
        match self.auth.as_ref().and_then(|auth| auth.username.as_ref()) {
            Some(_) => "sentinel_node_auth",
            None => "sentinel_node_password",
        }
    }

    /// The first builder method whose setting differs from the default, if any.
    pub(crate) fn first_set_option(&self) -> Option<&'static str> {
        if self.auth.is_some() {
            Some(self.auth_option())
        } else if self.tls {
            Some("sentinel_node_tls")
        } else if self.db != 0 {
            Some("sentinel_node_db")
        } else {
            None
        }
    }

    /// How to connect to the data node at `host:port` that the Sentinels named.
    fn master_info(&self, host: String, port: u16) -> RedisResult<ConnectionInfo> {
        let mut redis = RedisConnectionInfo::default().set_db(i64::from(self.db));
        if let Some(auth) = &self.auth {
            if let Some(username) = &auth.username {
                redis = redis.set_username(username);
            }
            redis = redis.set_password(&auth.password);
        }
        let addr = if self.tls {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            }
        } else {
            ConnectionAddr::Tcp(host, port)
        };
        let info = addr.into_connection_info()?.set_redis_settings(redis);
        with_certificates(info, self.certs.as_ref())
    }
}

impl fmt::Debug for NodeAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeAuth")
            .field("username", &self.username)
            .field("password", &"***")
            .finish()
    }
}

/// The connections to the current master, with a generation that changes on every swap.
#[derive(Clone)]
pub(crate) struct Current {
    /// 0 for the master found at connect, +1 on every swap.
    pub(crate) generation: u64,
    /// The connection for commands and scripts, to the master's `host:port` as the
    /// Sentinels name it.
    pub(crate) commands: Link<ConnectionManager>,
    /// The RESP3 connection of the waiters' subscriptions.
    pub(crate) subscriber: Link<ConnectionManager>,
}

/// How to connect to a master once it is found.
#[derive(Clone)]
pub(crate) struct Settings {
    /// Where the subscriber connection's pushes go (and a `Disconnection` on a swap).
    pub(crate) pushes: UnboundedSender<PushInfo>,
    /// How long a connection attempt may take.
    pub(crate) connect_timeout: Duration,
    /// How long a request may wait for its reply.
    pub(crate) response_timeout: Duration,
    /// The data nodes' settings, for the hint of a refused password.
    pub(crate) nodes: NodeOptions,
    /// The client's links: every master connection is one.
    pub(crate) links: Arc<Links>,
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

/// The Sentinels as the user gave them, and the name of the master they watch.
struct Sentinels {
    infos: Vec<ConnectionInfo>,
    master_name: String,
}

/// A master found through the Sentinels, and the connections to it, moved to the
/// new master after a failover (see the module documentation).
pub(crate) struct SentinelConn {
    /// Held while the master is looked up again: one lookup at a time.
    sentinels: Mutex<Sentinels>,
    current: RwLock<Current>,
    settings: Settings,
    /// Stops the `+switch-master` tasks when the connection goes, even when the
    /// client that made it never finished connecting. (The tasks hold only a
    /// [`Weak`] reference, so this drop does happen.)
    _watch: DropGuard,
}

impl SentinelConn {
    /// Finds the master through `sentinels`, connects to it, and starts the tasks
    /// that listen for `+switch-master` on every Sentinel; they stop when
    /// `shutdown` is cancelled or the returned connection is dropped.
    ///
    /// `settings` say how to connect to the master (and to every later one): the
    /// Sentinels keep them for every lookup. Their `pushes` receive the subscriber
    /// connection's pushes, and a [`PushKind::Disconnection`] whenever the
    /// connections move to a new master.
    pub(crate) async fn connect(
        sentinels: Vec<ConnectionInfo>,
        master_name: &str,
        settings: Settings,
        shutdown: &CancellationToken,
    ) -> RedisResult<Arc<Self>> {
        let lookup = Sentinels {
            infos: sentinels.clone(),
            master_name: master_name.to_owned(),
        };
        let current = async {
            let (master, addr) = find_master(&lookup, &settings).await?;
            connect_master(master, addr, &settings, 0).await
        }
        .await
        .map_err(|err| explain_auth_failure(err, &settings.nodes))?;
        let stop = shutdown.child_token();
        let conn = Arc::new(Self {
            sentinels: Mutex::new(lookup),
            current: RwLock::new(current),
            settings,
            _watch: stop.clone().drop_guard(),
        });
        watch_switches(&conn, sentinels, master_name, &stop);
        Ok(conn)
    }

    /// The connections to the master as last resolved.
    pub(crate) fn current(&self) -> Current {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Runs `op` on the connections to the master as last resolved, and finds the
    /// master again when `op` failed in a way a failover explains.
    ///
    /// # Cancel safety
    ///
    /// As `op`'s: a dropped call may skip the lookup, which the next failure makes.
    pub(crate) async fn on_master<T, Fut>(&self, op: impl FnOnce(Current) -> Fut) -> RedisResult<T>
    where
        Fut: std::future::Future<Output = RedisResult<T>>,
    {
        let current = self.current();
        let seen = current.generation;
        let result = op(current).await;
        if matches!(&result, Err(err) if master_may_have_moved(err)) {
            self.reresolve(seen).await;
        }
        result
    }

    /// Asks the Sentinels for the master again, unless someone already did since
    /// `seen` was current; swaps to it if it moved, and wakes the first waiter of
    /// every lock.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the lookups in flight are aborted and nothing is swapped; the
    /// swap itself happens without an await, all at once or not at all.
    pub(crate) async fn reresolve(&self, seen: u64) {
        let sentinels = self.sentinels.lock().await;
        let current = self.current();
        if current.generation != seen {
            return;
        }
        let next = match find_master(&sentinels, &self.settings).await {
            // Still there: no new connections.
            Ok((_, addr)) if addr == current.commands.addr() => return,
            Ok((master, addr)) => {
                connect_master(master, addr, &self.settings, current.generation + 1).await
            }
            Err(err) => Err(err),
        };
        match next {
            Ok(next) => {
                tracing::warn!(master = %next.commands.addr(), "distlock: the Sentinels name a new master; moving to it");
                // The new master may never have had some locks: check them all now.
                // The check counts as under way before any request can reach the
                // new master, so that no grant there counts before it is done.
                let check = self.settings.links.begin_check(next.commands.addr().into());
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = next;
                self.settings.links.check(check);
                let _ = self.settings.pushes.send(PushInfo {
                    kind: PushKind::Disconnection,
                    data: Vec::new(),
                });
            }
            Err(err) if refused_credentials(&err) => {
                let err = explain_auth_failure(err, &self.settings.nodes);
                tracing::warn!(error = %err, "distlock: the master the Sentinels name refused the credentials; staying where the client is");
            }
            Err(err) => {
                tracing::debug!(error = %err, "distlock: could not ask the Sentinels for the master");
            }
        }
    }
}

/// Adds to an authentication failure of the master a hint at the options that give
/// the data nodes' credentials (the Sentinels' URLs do not).
fn explain_auth_failure(err: RedisError, nodes: &NodeOptions) -> RedisError {
    if !refused_credentials(&err) {
        return err;
    }
    let hint = if nodes.auth.is_some() {
        format!(
            "{err}; the master refused the credentials given with `.{}(..)`: check them \
             against the data nodes' `requirepass` or ACL users",
            nodes.auth_option()
        )
    } else {
        format!(
            "{err}; the master requires a password: give it with \
             `.sentinel_node_password(..)` (or `.sentinel_node_auth(user, password)` for an ACL \
             user). Credentials in the Sentinels' URLs are for the Sentinels only"
        )
    };
    RedisError::from((
        redis::ErrorKind::AuthenticationFailed,
        "the master named by the Sentinels refused the connection",
        hint,
    ))
}

/// Asks every Sentinel at once which master it names, and takes the one that more
/// than half of those that answered name: a Sentinel that has not yet heard of a
/// failover (or that watches another deployment by mistake) cannot steer the client
/// on its own. Returns a client for the master, with the data nodes' settings, and
/// its `host:port`.
async fn find_master(
    sentinels: &Sentinels,
    settings: &Settings,
) -> RedisResult<(redis::Client, String)> {
    let config = timeouts(settings.connect_timeout, settings.response_timeout);
    let mut asks = tokio::task::JoinSet::new();
    for info in &sentinels.infos {
        let (info, name, config) = (info.clone(), sentinels.master_name.clone(), config.clone());
        let client_name = settings.links.name().to_owned();
        asks.spawn(async move {
            let mut conn = redis::Client::open(info)?
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            name_sentinel_connection(&mut conn, &client_name).await;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&name)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        });
    }
    let mut named: Vec<(String, u16)> = Vec::new();
    let (mut answered, mut last_err) = (0, None);
    while let Some(asked) = asks.join_next().await {
        match asked.unwrap_or_else(|err| Err(RedisError::from(std::io::Error::other(err)))) {
            Ok(master) => {
                answered += 1;
                named.extend(master);
            }
            Err(err) => last_err = Some(err),
        }
    }
    if answered == 0 {
        return Err(last_err.unwrap_or_else(|| {
            RedisError::from((redis::ErrorKind::Client, "no Sentinel was given"))
        }));
    }
    let votes = |candidate: &(String, u16)| named.iter().filter(|m| *m == candidate).count();
    let Some((host, port)) = named
        .iter()
        .find(|candidate| votes(candidate) * 2 > answered)
        .cloned()
    else {
        let names: Vec<String> = named.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        return Err(RedisError::from((
            redis::ErrorKind::Client,
            "the Sentinels do not agree on a master",
            format!(
                "{answered} Sentinels answered for `{}`, naming {names:?}; a master needs \
                 more than half of them (check the master name, or wait for the Sentinels \
                 to settle after a failover)",
                sentinels.master_name
            ),
        )));
    };
    let client = redis::Client::open(settings.nodes.master_info(host, port)?)?;
    let addr = client.get_connection_info().addr().to_string();
    Ok((client, addr))
}

/// Names a connection to a Sentinel `name` (`distlock:<service>`), as every
/// connection of the client is named (see `link.rs`). These connections live for one
/// lookup or one listening session, so naming them once is enough; a Sentinel that
/// refuses the name is left unnamed.
///
/// # Cancel safety
///
/// Safe to drop: the connection is unnamed, nothing else.
async fn name_sentinel_connection(conn: &mut MultiplexedConnection, name: &str) {
    let named: RedisResult<Value> = setname(name).query_async(conn).await;
    if let Err(err) = named {
        tracing::debug!(error = %err, "distlock: a Sentinel refused the connection's name");
    }
}

/// Connects to the master that [`find_master`] found, after checking that it says
/// it is one.
async fn connect_master(
    client: redis::Client,
    addr: String,
    settings: &Settings,
    generation: u64,
) -> RedisResult<Current> {
    let info = client.get_connection_info().clone();
    // A refused password or database ends here, without the managers' retries.
    dial_once(&client, settings.connect_timeout, settings.response_timeout).await?;
    let commands = ConnectionManager::new_with_config(client, settings.manager_config()).await?;
    let mut commands = settings.links.link(commands, addr.clone());
    let role: Vec<Value> = redis::cmd("ROLE").query_async(&mut commands).await?;
    if role.first().and_then(super::reply_text).as_deref() != Some("master") {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "the node the Sentinels named is not a master (yet)",
            addr,
        )));
    }
    let sub_client = redis::Client::open(resp3(info))?;
    let sub_config = settings
        .manager_config()
        .set_push_sender(settings.pushes.clone())
        .set_automatic_resubscription();
    let subscriber = ConnectionManager::new_with_config(sub_client, sub_config).await?;
    let mut subscriber = settings.links.link(subscriber, addr);
    subscriber.ensure_named().await;
    Ok(Current {
        generation,
        commands,
        subscriber,
    })
}

/// Starts the proactive path: one task per Sentinel that listens for
/// `+switch-master`, and one that moves `conn` to the master they announce. All
/// stop when `stop` is cancelled.
fn watch_switches(
    conn: &Arc<SentinelConn>,
    sentinels: Vec<ConnectionInfo>,
    master_name: &str,
    stop: &CancellationToken,
) {
    let (announce, announced) = watch::channel(None);
    for info in sentinels {
        let watcher = Watcher {
            conn: Arc::downgrade(conn),
            info: resp3(info),
            master_name: master_name.to_owned(),
            client_name: conn.settings.links.name().to_owned(),
            announce: announce.clone(),
            connect_timeout: conn.settings.connect_timeout,
            response_timeout: conn.settings.response_timeout,
        };
        spawn_until(stop, watcher.run());
    }
    spawn_until(stop, follow(Arc::downgrade(conn), announced));
}

/// Spawns `task`, which ends early when `stop` is cancelled.
fn spawn_until(stop: &CancellationToken, task: impl Future<Output = ()> + Send + 'static) {
    let stop = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = stop.cancelled() => {}
            () = task => {}
        }
    });
}

/// Listens for `+switch-master` on one Sentinel, and tells [`follow`] (through
/// `announce`) where a failover of our master went.
struct Watcher {
    /// The connection to move; once it is gone, the task ends.
    conn: Weak<SentinelConn>,
    /// The Sentinel as the user gave it (TLS, credentials), in RESP3.
    info: ConnectionInfo,
    /// The name the Sentinels monitor our master under.
    master_name: String,
    /// The name of the client's connections, `distlock:<service>`.
    client_name: String,
    /// The address (`host:port`) of the master last announced.
    announce: watch::Sender<Option<String>>,
    /// How long dialing the Sentinel may take.
    connect_timeout: Duration,
    /// How long the Sentinel may take to answer (also the heartbeat's limit).
    response_timeout: Duration,
}

impl Watcher {
    /// Subscribes, and subscribes again whenever the Sentinel cannot be reached or
    /// drops the connection, after a pause that doubles from [`MIN_BACKOFF`] to
    /// [`MAX_BACKOFF`]. Returns once the connection to the master is gone.
    async fn run(self) {
        let mut backoff = MIN_BACKOFF;
        loop {
            let mut subscribed_at = None;
            let Err(err) = self.session(&mut subscribed_at).await else {
                return;
            };
            if subscribed_at.is_some_and(|at: Instant| at.elapsed() >= MAX_BACKOFF) {
                backoff = MIN_BACKOFF;
            }
            tracing::debug!(
                sentinel = %self.info.addr(),
                error = %err,
                retry_in = ?backoff,
                "distlock: not listening for +switch-master on this Sentinel"
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if self.conn.strong_count() == 0 {
                return;
            }
        }
    }

    /// One connection to the Sentinel: subscribes, catches up on a switch it may
    /// have missed, then passes on every switch of our master until the connection
    /// fails (the error) or the connection to the master is gone (`Ok`).
    async fn session(&self, subscribed_at: &mut Option<Instant>) -> RedisResult<()> {
        let (push_tx, mut pushes) = mpsc::unbounded_channel();
        let config = timeouts(self.connect_timeout, self.response_timeout).set_push_sender(push_tx);
        let mut sentinel = redis::Client::open(self.info.clone())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        name_sentinel_connection(&mut sentinel, &self.client_name).await;
        sentinel.subscribe(SWITCH_MASTER).await?;
        *subscribed_at = Some(Instant::now());
        tracing::debug!(sentinel = %self.info.addr(), "distlock: listening for +switch-master");

        // A switch announced while we were not listening (or before the first
        // subscription) shows as a master other than ours.
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master_name)
            .query_async(&mut sentinel)
            .await?;
        if let Some((host, port)) = named {
            let Some(conn) = self.conn.upgrade() else {
                return Ok(());
            };
            let current = conn.current();
            let named = format!("{host}:{port}");
            if current.commands.addr() != named {
                tracing::debug!(
                    sentinel = %self.info.addr(),
                    named = %named,
                    ours = %current.commands.addr(),
                    "distlock: a Sentinel names another master; asking the Sentinels again"
                );
                conn.reresolve(current.generation).await;
            }
        }

        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                push = pushes.recv() => match push {
                    None | Some(PushInfo { kind: PushKind::Disconnection, .. }) => {
                        return Err(dropped())
                    }
                    Some(PushInfo { kind: PushKind::Message, data }) => {
                        if let Some(addr) = switched_to(&data, &self.master_name) {
                            tracing::debug!(
                                sentinel = %self.info.addr(),
                                master = %addr,
                                "distlock: a Sentinel announced a new master"
                            );
                            self.announce.send_replace(Some(addr));
                        }
                    }
                    Some(_) => {}
                },
                _ = heartbeat.tick() => {
                    if self.conn.strong_count() == 0 {
                        return Ok(());
                    }
                    redis::cmd("PING").query_async::<Value>(&mut sentinel).await?;
                }
            }
        }
    }
}

/// The error of a Sentinel connection that went away.
fn dropped() -> RedisError {
    RedisError::from((redis::ErrorKind::Io, "the Sentinel dropped the connection"))
}

/// The new master (`host:port`) that a `+switch-master` message announces for
/// `master_name`; `None` for another master or anything else.
fn switched_to(data: &[Value], master_name: &str) -> Option<String> {
    let [Value::BulkString(channel), Value::BulkString(payload)] = data else {
        return None;
    };
    let payload = std::str::from_utf8(payload).ok()?;
    let fields: Vec<&str> = payload.split_ascii_whitespace().collect();
    let [name, _old_host, _old_port, host, port] = fields.as_slice() else {
        return None;
    };
    let port: u16 = port.parse().ok()?;
    (channel == SWITCH_MASTER.as_bytes() && *name == master_name).then(|| format!("{host}:{port}"))
}

/// Moves `conn` to each master announced on `announced`: asks the Sentinels at
/// once ([`SentinelConn::reresolve`]), and again, for up to [`FOLLOW_LIMIT`], while
/// those it asks still name another master (Sentinels learn of a switch one after
/// another). A newer announcement replaces the one being followed.
async fn follow(conn: Weak<SentinelConn>, mut announced: watch::Receiver<Option<String>>) {
    'announcement: loop {
        if announced.changed().await.is_err() {
            return;
        }
        let mut target = announced.borrow_and_update().clone();
        let mut deadline = Instant::now() + FOLLOW_LIMIT;
        let mut delay = FOLLOW_FIRST_DELAY;
        loop {
            let Some(addr) = target.as_deref() else {
                continue 'announcement;
            };
            let Some(conn) = conn.upgrade() else {
                return;
            };
            let current = conn.current();
            if current.commands.addr() == addr {
                continue 'announcement;
            }
            conn.reresolve(current.generation).await;
            if conn.current().commands.addr() == addr {
                continue 'announcement;
            }
            drop(conn);
            if Instant::now() >= deadline {
                tracing::debug!(
                    announced = %addr,
                    "distlock: the Sentinels still name another master than the one announced; \
                     leaving it to the next failed request"
                );
                continue 'announcement;
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => delay = (delay * 2).min(FOLLOW_MAX_DELAY),
                changed = announced.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    target = announced.borrow_and_update().clone();
                    deadline = Instant::now() + FOLLOW_LIMIT;
                    delay = FOLLOW_FIRST_DELAY;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &str) -> Vec<Value> {
        vec![
            Value::BulkString(SWITCH_MASTER.as_bytes().to_vec()),
            Value::BulkString(payload.as_bytes().to_vec()),
        ]
    }

    #[test]
    fn a_switch_of_our_master_names_the_new_address() {
        let data = message("locks 127.0.0.1 6380 127.0.0.1 6381");
        assert_eq!(
            switched_to(&data, "locks").as_deref(),
            Some("127.0.0.1:6381")
        );
    }

    #[test]
    fn other_masters_and_malformed_messages_are_ignored() {
        let other = message("orders 127.0.0.1 6380 127.0.0.1 6381");
        assert_eq!(switched_to(&other, "locks"), None);
        let prefix = message("lock 127.0.0.1 6380 127.0.0.1 6381");
        assert_eq!(switched_to(&prefix, "locks"), None);
        let short = message("locks 127.0.0.1 6380 127.0.0.1");
        assert_eq!(switched_to(&short, "locks"), None);
        let bad_port = message("locks 127.0.0.1 6380 127.0.0.1 http");
        assert_eq!(switched_to(&bad_port, "locks"), None);
        let mut elsewhere = message("locks 127.0.0.1 6380 127.0.0.1 6381");
        elsewhere[0] = Value::BulkString(b"+sdown".to_vec());
        assert_eq!(switched_to(&elsewhere, "locks"), None);
    }
}
