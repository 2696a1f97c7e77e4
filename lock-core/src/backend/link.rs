//! Every connection the client relies on, as a [`Link`]: named after the service
//! (`CLIENT SETNAME distlock:<service>`, again after each reconnect), and watched,
//! so that a server that goes away is logged once at WARN and once at INFO when it
//! is back, however many calls fail in between. The up/down state of every address
//! is in one place, the client's [`Links`].
//!
//! redis-rs 1.8 has no setting for a connection name (only `CLIENT SETINFO`'s
//! library name and version, which `CLIENT LIST` shows as `lib-name`), and its
//! connection managers reconnect on their own, so a link names its connection
//! itself: before its first request, and before the first request after one that
//! failed for a lost connection. A RESP3 connection that is told it was
//! disconnected (a push) is named again by its owner, through
//! [`Link::rename_soon`].
//!
//! A link over a whole Redis Cluster ([`Links::cluster_link`]) is named in the
//! background and not watched: its errors do not say which node failed. A
//! cluster's masters are watched instead by [`Links::watch_cluster`], which asks
//! each of them by address once a second which server it is, so that a master that
//! goes away is logged once, by its address, and once when it is back, and a master
//! that comes back as another server (or a master that took another's slots) has
//! every hold checked before the client grants anything new.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::Notify;

use crate::sync::locked;

/// The client's connections: their name, which addresses are down, and which
/// server answers at each.
#[derive(Default)]
pub(crate) struct Links {
    /// `distlock:<service>`.
    name: String,
    /// The addresses some link of which lost its connection, since when, and which
    /// of their links have not answered since.
    down: Mutex<HashMap<Arc<str>, Outage>>,
    /// How many addresses are down: an answer while none is takes no lock.
    outages: AtomicUsize,
    next_id: AtomicU64,
    /// The server at each address as last seen (`run_id` and replication id, from
    /// `INFO`), so that a connection that comes back to another one (a restart, a
    /// replacement) is noticed at once.
    servers: Mutex<HashMap<Arc<str>, String>>,
    /// Told when the server at an address was replaced (or a failover moved to a
    /// new master): the client checks every hold there.
    on_replaced: OnceLock<Box<dyn Fn(Replaced) + Send + Sync>>,
    /// The checks of holds after a replaced server under way: a grant counts only
    /// once every check begun before it came back is done ([`Links::settled`]).
    checks: Arc<Checks>,
    /// A cluster: the lost connections to its nodes that hold grants back until
    /// every master was identified again, each since when; `None` once the
    /// cluster's watch has stopped ([`Links::cluster_disconnected`]).
    unsettled: Mutex<Option<Vec<(Instant, Replaced)>>>,
    /// A cluster: the checks begun for grants that contradict a hold of this
    /// client ([`Links::contradicted`]), which the cluster's watch starts after its
    /// next look; `None` while no watch runs (they start at once).
    suspected: Mutex<Option<Vec<Replaced>>>,
    /// Wakes the cluster's watch for a look at once.
    look_now: Notify,
}

/// The checks of holds after a replaced server that are under way, by number.
#[derive(Debug, Default)]
struct Checks {
    /// The number of the next check, and the numbers of those not done yet.
    pending: Mutex<(u64, BTreeSet<u64>)>,
    /// Told whenever a check is done.
    done: Notify,
    /// The same facts for the hot paths, read without the lock: how many checks
    /// were ever begun, and how many are not done (kept with `pending`, under it).
    begun: AtomicU64,
    open: AtomicUsize,
}

/// A server was replaced, or may have been: the check of every hold that it
/// starts is done when this is dropped.
#[derive(Debug)]
pub(crate) struct Replaced {
    /// The address of the new server.
    pub(crate) addr: Arc<str>,
    /// Whether the check was begun for a grant that contradicts a hold of this
    /// client ([`Links::contradicted`]), with no replaced server seen: the holds it
    /// finds gone are lost for their cause, which a replacement seen meanwhile
    /// makes [`ServerReplaced`](crate::LostReason::ServerReplaced).
    pub(crate) suspected: bool,
    /// Its number among the checks.
    number: u64,
    checks: Arc<Checks>,
}

impl Drop for Replaced {
    fn drop(&mut self) {
        let mut pending = locked(&self.checks.pending);
        if pending.1.remove(&self.number) {
            self.checks.open.fetch_sub(1, Ordering::Release);
        }
        drop(pending);
        self.checks.done.notify_waiters();
    }
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    links: HashSet<u64>,
}

impl Links {
    /// The links of a client whose service is `service`.
    pub(crate) fn new(service: &str) -> Arc<Self> {
        Arc::new(Self {
            name: format!("distlock:{service}"),
            unsettled: Mutex::new(Some(Vec::new())),
            ..Self::default()
        })
    }

    /// Sets what the client does when a server was replaced (once; later calls are
    /// ignored).
    pub(crate) fn on_replaced(&self, hook: impl Fn(Replaced) + Send + Sync + 'static) {
        let _ = self.on_replaced.set(Box::new(hook));
    }

    /// The server at `addr` is `server` (its `run_id` and replication id): the
    /// first time, remembered; when it differs from the one seen before there (a
    /// restart, a replacement behind the address), the holds are checked
    /// ([`replaced`](Self::replaced)).
    fn identified(&self, addr: &Arc<str>, server: String) {
        let before = locked(&self.servers).insert(addr.clone(), server.clone());
        if before.is_some_and(|before| before != server) {
            tracing::warn!(
                address = %addr,
                "distlock: the Redis server at {addr} is not the one the client knew (restarted \
                 or replaced); checking every lock held there"
            );
            self.replaced(addr.clone());
        }
    }

    /// The server at `addr` was replaced (a restart, or a failover moved to a new
    /// master): every hold is checked, and no grant counts until that is done
    /// ([`settled`](Self::settled)).
    pub(crate) fn replaced(&self, addr: Arc<str>) {
        self.check(self.begin_check(addr));
    }

    /// The first half of [`replaced`](Self::replaced): the check of the holds after
    /// the server at `addr` was replaced counts as under way from now on (a grant
    /// that comes back after this waits for it), although it starts only with
    /// [`check`](Self::check). A failover takes this before it moves the client's
    /// connections, so that no grant on the new master can come back before it.
    pub(crate) fn begin_check(&self, addr: Arc<str>) -> Replaced {
        let mut pending = locked(&self.checks.pending);
        let number = pending.0;
        pending.0 += 1;
        pending.1.insert(number);
        self.checks.begun.store(pending.0, Ordering::Release);
        self.checks.open.fetch_add(1, Ordering::Release);
        Replaced {
            addr,
            suspected: false,
            number,
            checks: self.checks.clone(),
        }
    }

    /// Starts the check that `replaced` stands for: the client's hook (the
    /// watchdog) checks every hold and drops it when done; without a hook, it is
    /// done at once.
    pub(crate) fn check(&self, replaced: Replaced) {
        if let Some(hook) = self.on_replaced.get() {
            hook(replaced);
        }
    }

    /// A grant of this client contradicts a hold another of its call chains
    /// believes it has (`acquire/wait.rs`), or on a cluster a renewal found a hold
    /// gone (`watchdog.rs`): the server that answered forgot that hold (it was
    /// replaced, or failed over to a replica that lacked it, unseen yet; or the
    /// lock was deleted). Every hold is checked as after a replaced
    /// server ([`replaced`](Self::replaced)), and the grant waits for it
    /// ([`settled`](Self::settled)). On a cluster, the watch first looks at once at
    /// which master serves each slot and which server each one is
    /// ([`watch_cluster`](Self::watch_cluster)), so that a master that took the
    /// slot, or came back as another server, is known as replaced before the holds
    /// are checked.
    pub(crate) fn contradicted(&self) {
        let mut check = self.begin_check(self.name.as_str().into());
        check.suspected = true;
        let mut suspected = locked(&self.suspected);
        if let Some(queued) = suspected.as_mut() {
            queued.push(check);
            drop(suspected);
            self.look_now.notify_one();
        } else {
            drop(suspected);
            self.check(check);
        }
    }

    /// How many servers were found replaced so far (the checks ever begun): an
    /// answer read from a server after this number changed may come from a server
    /// that lacks what the one before had (`release.rs`).
    pub(crate) fn replacements(&self) -> u64 {
        self.checks.begun.load(Ordering::Acquire)
    }

    /// Whether a check of holds after a replaced server is under way.
    pub(crate) fn checking(&self) -> bool {
        self.checks.open.load(Ordering::Acquire) > 0
    }

    /// Waits until every check of holds after a replaced server that was under way
    /// when it was first polled is done: the gate every grant passes before it
    /// counts (`acquire/wait.rs`), so that this client grants nothing new on a
    /// replaced server before the holds lost there were told so. A check ends on
    /// its own within about one renewal period of the last server found replaced
    /// while it ran (the watchdog starts over then, `watchdog.rs`), and at once
    /// when the watchdog stops; checks that begin meanwhile are not waited for
    /// (each later grant waits for them itself).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: it only waits.
    pub(crate) async fn settled(&self) {
        let before = locked(&self.checks.pending).0;
        loop {
            let notified = self.checks.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let first = locked(&self.checks.pending).1.first().copied();
            if first.is_none_or(|first| first >= before) {
                return;
            }
            notified.await;
        }
    }

    /// The name every connection gets: `distlock:<service>`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A link of `conn`, a connection to `addr` (`host:port`, or a description of a
    /// cluster's nodes).
    pub(crate) fn link<C>(self: &Arc<Self>, conn: C, addr: impl Into<Arc<str>>) -> Link<C> {
        Link {
            conn,
            addr: addr.into(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            links: self.clone(),
            named: Arc::new(AtomicBool::new(false)),
            cluster: false,
            naming: Arc::new(AtomicBool::new(false)),
            losses: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A link of `conn`, a connection to every node of a cluster (described by
    /// `addr`). Its name goes to every node (`CLIENT SETNAME` is routed to all of
    /// them), in the background, so that a node that is down delays no request;
    /// and it is not watched: its errors do not say which node failed, and a
    /// cluster that loses one master keeps answering for the others, so an
    /// up/down state of the whole would flap with every request. The masters are
    /// watched one by one instead ([`Links::watch_cluster`]).
    pub(crate) fn cluster_link<C>(self: &Arc<Self>, conn: C, addr: impl Into<Arc<str>>) -> Link<C> {
        Link {
            cluster: true,
            ..self.link(conn, addr)
        }
    }

    /// Link `id` of `addr` lost its connection: the first of the address's links
    /// to do so logs it.
    fn lost(&self, addr: &Arc<str>, id: u64, err: &RedisError) {
        let mut down = locked(&self.down);
        if let Some(outage) = down.get_mut(addr) {
            outage.links.insert(id);
            return;
        }
        tracing::warn!(
            address = %addr,
            error = %err,
            "distlock: lost the connection to {addr}: {err}"
        );
        self.outages.fetch_add(1, Ordering::AcqRel);
        down.insert(
            addr.clone(),
            Outage {
                since: Instant::now(),
                links: HashSet::from([id]),
            },
        );
    }

    /// Link `id` of `addr` got an answer: when every link of the address that lost
    /// its connection has, the address is back, and that is logged.
    fn answered(&self, addr: &str, id: u64) {
        if self.outages.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut down = locked(&self.down);
        let Some(outage) = down.get_mut(addr) else {
            return;
        };
        outage.links.remove(&id);
        if outage.links.is_empty() {
            // Cut to whole milliseconds, for the message.
            let after = Duration::from_millis(outage.since.elapsed().as_millis() as u64);
            down.remove(addr);
            self.outages.fetch_sub(1, Ordering::AcqRel);
            tracing::info!(
                address = %addr,
                after_ms = after.as_millis() as u64,
                "distlock: connection to {addr} restored after {after:?}"
            );
        }
    }
}

/// How often a cluster's masters are looked at ([`Links::watch_cluster`]).
const CLUSTER_WATCH: Duration = Duration::from_secs(1);
/// How soon they are looked at again while a lost connection to a master holds
/// grants back ([`Links::cluster_disconnected`]) and not every master answered.
const CLUSTER_RETRY: Duration = Duration::from_millis(50);
/// How long a lost connection to a master holds grants back at most, while some
/// master does not answer: a master that stays away longer is identified at the
/// first look after it is back (within [`CLUSTER_WATCH`]).
const CLUSTER_SETTLE: Duration = Duration::from_secs(3);

impl Links {
    /// A connection of the client to a node of its cluster was lost (a RESP3
    /// disconnection push of the cluster's subscriber connection, which has one to
    /// every master, `builder.rs`): the node may come back as another server (a
    /// restart without persistence) before the cluster connection's own
    /// reconnection, which no error shows, reaches it. So a check counts as under
    /// way (grants wait, [`settled`](Self::settled)) until every master answered
    /// [`watch_cluster`](Self::watch_cluster)'s next look and was identified by its
    /// `run_id` (a replaced one is checked in turn), or [`CLUSTER_SETTLE`] passed.
    pub(crate) fn cluster_disconnected(&self) {
        let check = self.begin_check(self.name.as_str().into());
        if let Some(unsettled) = locked(&self.unsettled).as_mut() {
            unsettled.push((Instant::now(), check));
        }
        self.look_now.notify_one();
    }

    /// After a look at the masters that began with the lost connections
    /// `taken`: they are settled when every master answered; else those younger
    /// than [`CLUSTER_SETTLE`] wait for the next look. Whether any still waits.
    fn settle(&self, taken: Vec<(Instant, Replaced)>, all_answered: bool) -> bool {
        let mut unsettled = locked(&self.unsettled);
        let Some(unsettled) = unsettled.as_mut() else {
            return false;
        };
        if !all_answered {
            let now = Instant::now();
            let (young, old): (Vec<_>, Vec<_>) = taken
                .into_iter()
                .partition(|(since, _)| now.duration_since(*since) < CLUSTER_SETTLE);
            if !old.is_empty() {
                tracing::debug!("distlock: a cluster master still does not answer; grants no longer wait for it");
            }
            unsettled.extend(young);
        }
        !unsettled.is_empty()
    }

    /// Watches the masters of the cluster behind `conn` until `shutdown`: once a
    /// [`CLUSTER_WATCH`] (at once after a lost connection, and every
    /// [`CLUSTER_RETRY`] while one holds grants back), reads which master serves
    /// each slot (`CLUSTER SLOTS`) and asks each master over a connection of its
    /// own (made from `template`, a node's settings with its TLS certificates), within
    /// `timeout`, which server it is (`INFO server replication`). A master known
    /// by another `run_id` before (restarted empty on its port), or a master that
    /// took slots another one served (a failover, `MOVED`), has every hold checked
    /// ([`replaced`](Self::replaced)) before this client grants anything new
    /// there. A question that fails for a lost connection marks the address down
    /// (logged once), an answer marks it up (logged once when it was down); one
    /// that times out changes nothing: a slow node is not a lost one. Addresses
    /// that were seen down stay watched until they answer, also after the cluster
    /// moved their slots elsewhere. (The cluster connection's own routing by
    /// address is not used: it answers from another node when it has no
    /// connection to the address.)
    ///
    /// The first look is made before this returns, so that every master is known
    /// from the start.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the watch then does not start.
    pub(crate) async fn watch_cluster(
        self: &Arc<Self>,
        conn: redis::cluster_async::ClusterConnection,
        template: redis::ConnectionInfo,
        timeout: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let mut watch = ClusterWatch {
            links: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            conn,
            template,
            timeout,
            watched: Vec::new(),
            open: HashMap::new(),
            ranges: None,
        };
        watch.look(Vec::new()).await;
        locked(&self.suspected).get_or_insert_with(Vec::new);
        tokio::spawn(watch.run(shutdown));
    }

    /// Whether `addr` is down now.
    fn is_down_now(&self, addr: &str) -> bool {
        self.outages.load(Ordering::Acquire) > 0 && locked(&self.down).contains_key(addr)
    }
}

/// The task of [`Links::watch_cluster`], and what it knows of the cluster.
struct ClusterWatch {
    links: Arc<Links>,
    /// Its id among the links, for the up/down state of the addresses.
    id: u64,
    conn: redis::cluster_async::ClusterConnection,
    template: redis::ConnectionInfo,
    timeout: Duration,
    /// The addresses asked at each look: the masters, and those seen down.
    watched: Vec<(String, u16)>,
    /// A connection to each watched address, once made.
    open: HashMap<(String, u16), redis::aio::MultiplexedConnection>,
    /// Which master served each range of slots at the last look (and so which
    /// masters there are).
    ranges: Option<Vec<super::SlotRange>>,
}

impl Drop for ClusterWatch {
    fn drop(&mut self) {
        // No look comes any more: grants wait for none, and the checks of
        // contradicted grants start now (later ones start at once).
        locked(&self.links.unsettled).take();
        let suspected = locked(&self.links.suspected).take();
        for check in suspected.into_iter().flatten() {
            self.links.check(check);
        }
    }
}

impl ClusterWatch {
    /// Looks at the masters until `shutdown` (see [`Links::watch_cluster`]).
    ///
    /// # Cancel safety
    ///
    /// Spawned, and ends with `shutdown`: dropping it stops the watch, nothing else.
    async fn run(mut self, shutdown: tokio_util::sync::CancellationToken) {
        let mut pause = CLUSTER_WATCH;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
                () = self.links.look_now.notified() => {}
            }
            let taken = take_queued(&mut locked(&self.links.unsettled));
            pause = if self.look(taken).await {
                CLUSTER_RETRY
            } else {
                CLUSTER_WATCH
            };
        }
    }

    /// One look at the masters, which settles the lost connections `taken` if
    /// every master answered, and then starts the checks of the grants that
    /// contradicted a hold before it began (a master found replaced by the look is
    /// known so by then): whether lost connections still hold grants back.
    ///
    /// # Cancel safety
    ///
    /// Only reads and pings; dropped, the lost connections in `taken` stop holding
    /// grants back, and the checks of contradicted grants are done (their tokens
    /// are dropped: each grant then tells the hold it contradicts itself).
    async fn look(&mut self, taken: Vec<(Instant, Replaced)>) -> bool {
        let suspected = take_queued(&mut locked(&self.links.suspected));
        self.read_slots().await;
        let all_answered = self.ask_masters().await;
        for check in suspected {
            self.links.check(check);
        }
        self.links.settle(taken, all_answered)
    }

    /// Reads which master serves each slot; a master that took slots another one
    /// served has every hold checked.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: it only reads; a check it started goes on.
    async fn read_slots(&mut self) {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let slots = self.conn.route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        );
        let Ok(Ok(slots)) = tokio::time::timeout(self.timeout, slots).await else {
            return;
        };
        let ranges = super::slot_ranges(&slots);
        if let Some(before) = &self.ranges {
            for master in super::masters_gaining_slots(before, &ranges) {
                tracing::warn!(
                    address = %address(&master),
                    "distlock: a cluster master took slots another master served; checking \
                     every lock held there"
                );
                self.links.replaced(address(&master).into());
            }
        }
        let masters = super::masters_of(&ranges);
        self.ranges = Some(ranges);
        let links = &self.links;
        self.watched
            .retain(|node| masters.contains(node) || links.is_down_now(&address(node)));
        for master in &masters {
            if !self.watched.contains(master) {
                self.watched.push(master.clone());
            }
        }
        let watched = &self.watched;
        self.open.retain(|node, _| watched.contains(node));
    }

    /// Asks every watched address which server it is: whether every master
    /// answered.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: it only asks; a check it started goes on.
    async fn ask_masters(&mut self) -> bool {
        let masters = super::masters_of(self.ranges.as_deref().unwrap_or_default());
        let mut all_answered = true;
        for node in self.watched.clone() {
            let addr: Arc<str> = address(&node).into();
            match tokio::time::timeout(self.timeout, self.identify(&node)).await {
                Ok(Ok(info)) => {
                    self.links.answered(&addr, self.id);
                    if let Some(server) = server_identity(&info) {
                        self.links.identified(&addr, server);
                    }
                    continue;
                }
                Ok(Err(err)) if is_lost_connection(&err) => self.links.lost(&addr, self.id, &err),
                _ => {}
            }
            all_answered &= !masters.contains(&node);
        }
        all_answered
    }

    /// `INFO server replication` of `node`, over its own connection (made first
    /// when there is none), which is kept for the next look once it answered.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the connection is dropped with it, and made again at the next
    /// look.
    async fn identify(&mut self, node: &(String, u16)) -> RedisResult<Value> {
        let mut conn = match self.open.remove(node) {
            Some(conn) => conn,
            None => {
                let config = super::dial::timeouts(self.timeout, self.timeout);
                redis::Client::open(node_info(&self.template, node))?
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?
            }
        };
        let info = server_info().query_async::<Value>(&mut conn).await;
        if info.is_ok() {
            self.open.insert(node.clone(), conn);
        }
        info
    }
}

/// What `queue` holds, taken out of it (nothing when there is no queue: the
/// cluster's watch has stopped, or has not started).
fn take_queued<T>(queue: &mut Option<Vec<T>>) -> Vec<T> {
    queue.as_mut().map(std::mem::take).unwrap_or_default()
}

/// `host:port`.
fn address((host, port): &(String, u16)) -> String {
    format!("{host}:{port}")
}

/// `template` with the address of `node`, in the form of `template`'s (plain or
/// TLS, with its TLS settings).
fn node_info(
    template: &redis::ConnectionInfo,
    (host, port): &(String, u16),
) -> redis::ConnectionInfo {
    let addr = match template.addr() {
        redis::ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => redis::ConnectionAddr::TcpTls {
            host: host.clone(),
            port: *port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => redis::ConnectionAddr::Tcp(host.clone(), *port),
    };
    template.clone().set_addr(addr)
}

/// Whether `err` says the connection is gone (closed, reset, refused), as opposed
/// to a slow reply or an error the server answered.
pub(crate) fn is_lost_connection(err: &RedisError) -> bool {
    (err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal())
        && !err.is_timeout()
}

/// One connection the client relies on: named, and watched (see the module
/// documentation).
#[derive(Clone)]
pub(crate) struct Link<C> {
    conn: C,
    addr: Arc<str>,
    id: u64,
    links: Arc<Links>,
    /// Whether the current connection was named (or the server refused the name
    /// for good, an ACL without `client|setname`); shared by the link's clones.
    named: Arc<AtomicBool>,
    /// A link over a whole cluster (see [`Links::cluster_link`]).
    cluster: bool,
    /// Whether a background naming is under way (cluster links).
    naming: Arc<AtomicBool>,
    /// How many times the link saw its connection lost, shared by its clones: a
    /// request that got an answer while another saw the connection lost may have
    /// travelled on the new connection, before the server there was identified.
    losses: Arc<AtomicU64>,
}

impl<C> Link<C> {
    /// The address of the connection, for messages.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    /// The connection itself, for calls that are not commands (pub/sub); report
    /// their result with [`observe`](Self::observe).
    pub(crate) fn conn(&mut self) -> &mut C {
        &mut self.conn
    }

    /// Records the result of a call on the connection: a lost connection marks
    /// the address down (and the next request names the new connection), an
    /// answer marks it up.
    pub(crate) fn observe<T>(&self, result: &RedisResult<T>) {
        match result {
            Err(err) if is_lost_connection(err) => {
                self.named.store(false, Ordering::Release);
                self.losses.fetch_add(1, Ordering::AcqRel);
                if !self.cluster {
                    self.links.lost(&self.addr, self.id, err);
                }
            }
            _ if self.cluster => {}
            _ => self.links.answered(&self.addr, self.id),
        }
    }
}

impl<C: ConnectionLike + Send> Link<C> {
    /// Names the connection `distlock:<service>` unless it already is.
    ///
    /// A refusal by the server (an ACL without `client|setname`) is final for this
    /// connection and logged at DEBUG; a lost connection is recorded and tried
    /// again before the next request.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the name is then sent again before the next request.
    pub(crate) async fn ensure_named(&mut self) {
        if self.named.load(Ordering::Acquire) {
            return;
        }
        let set_name = setname(self.links.name());
        if self.cluster {
            // A cluster's INFO would answer from any node: only the name.
            let result = self.conn.req_packed_command(&set_name).await;
            note_naming(&result, &self.named, &self.addr);
            self.observe(&result);
            return;
        }
        // One round trip: the name, and which server this is (a user without
        // `info` is not told of a replaced server this way; its holds learn at
        // their next renewal).
        let mut pipe = redis::pipe();
        pipe.add_command(set_name).add_command(server_info());
        let result = self.conn.req_packed_commands(&pipe, 0, 2).await;
        let (naming, info) = match result.map(<[Value; 2]>::try_from) {
            Ok(Ok([Value::ServerError(err), info])) => (Err(RedisError::from(err)), Some(info)),
            Ok(Ok([naming, info])) => (Ok(naming), Some(info)),
            Ok(Err(_)) => (Ok(Value::Nil), None),
            Err(err) => (Err(err), None),
        };
        note_naming(&naming, &self.named, &self.addr);
        self.observe(&naming);
        if let Some(server) = info.as_ref().and_then(server_identity) {
            self.links.identified(&self.addr, server);
        }
    }
}

/// Which server answered `INFO server replication`: its `run_id` (new at every
/// start) and `master_replid` (new when a replica becomes a master), or `None`
/// when the reply has neither (a user without `info`).
fn server_identity(info: &Value) -> Option<String> {
    let text = super::reply_text(info)?;
    let run_id = super::info_field(&text, "run_id")?;
    let replid = super::info_field(&text, "master_replid").unwrap_or("");
    Some(format!("{run_id} {replid}"))
}

/// `CLIENT SETNAME name`.
pub(super) fn setname(name: &str) -> Cmd {
    redis::cmd("CLIENT").arg("SETNAME").arg(name).clone()
}

/// `INFO server replication`: the reply [`server_identity`] reads.
fn server_info() -> Cmd {
    redis::cmd("INFO").arg("server").arg("replication").clone()
}

/// Records the reply to `CLIENT SETNAME`: named, unless the connection was lost or
/// the reply did not come (then the name is sent again); a refusal by the server
/// is final.
fn note_naming(result: &RedisResult<Value>, named: &AtomicBool, addr: &str) {
    match result {
        Ok(_) => named.store(true, Ordering::Release),
        Err(err) if is_lost_connection(err) || err.is_timeout() => {}
        Err(err) => {
            tracing::debug!(
                address = %addr,
                error = %err,
                "distlock: the server refused the connection's name"
            );
            named.store(true, Ordering::Release);
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Link<C> {
    /// The connection was replaced (a RESP3 disconnection push): names the new one
    /// in the background, so that a server still down holds up no other call of
    /// the link's owner.
    pub(crate) fn rename_soon(&self) {
        // The next `ensure_named` names the new connection.
        self.named.store(false, Ordering::Release);
        let mut link = self.clone();
        tokio::spawn(async move { link.ensure_named().await });
    }

    /// Names the connection before a request: here, on one server (where the
    /// request would meet the same connection); in the background, once at a
    /// time, on a cluster.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the name is then sent again before the next request; a
    /// background naming runs to its end on its own.
    pub(crate) async fn name_before_request(&mut self) {
        if !self.cluster {
            self.ensure_named().await;
            return;
        }
        if self.named.load(Ordering::Acquire) || self.naming.swap(true, Ordering::AcqRel) {
            return;
        }
        let (mut conn, named, naming) =
            (self.conn.clone(), self.named.clone(), self.naming.clone());
        let (addr, name) = (self.addr.clone(), self.links.name().to_owned());
        tokio::spawn(async move {
            let result = conn.req_packed_command(&setname(&name)).await;
            note_naming(&result, &named, &addr);
            naming.store(false, Ordering::Release);
        });
    }

    /// [`observe`](Self::observe)s `result`; then, after a request that was
    /// answered while another request of the link saw the connection lost
    /// (`losses` is the count before it was sent): the answer may have come from
    /// the new connection, so the server there is identified before the answer is
    /// used (one server; a replaced one is then checked, and the grant this answer
    /// may carry waits for that, `Links::settled`).
    ///
    /// # Cancel safety
    ///
    /// Safe to drop, as [`ensure_named`](Self::ensure_named).
    async fn after_request<T>(&mut self, losses: u64, result: &RedisResult<T>) {
        self.observe(result);
        if result.is_ok() && !self.cluster && self.losses.load(Ordering::Acquire) != losses {
            self.ensure_named().await;
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> ConnectionLike for Link<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let losses = self.losses.load(Ordering::Acquire);
            self.name_before_request().await;
            let result = self.conn.req_packed_command(cmd).await;
            self.after_request(losses, &result).await;
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let losses = self.losses.load(Ordering::Acquire);
            self.name_before_request().await;
            let result = self.conn.req_packed_commands(pipeline, offset, count).await;
            self.after_request(losses, &result).await;
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `addr` is down in `links`: a link of it lost its connection and has
    /// not answered since.
    fn is_down(links: &Links, addr: &str) -> bool {
        locked(&links.down).contains_key(addr)
    }

    fn io(kind: std::io::ErrorKind) -> RedisError {
        RedisError::from(std::io::Error::new(kind, "test"))
    }

    #[test]
    fn only_a_connection_that_is_gone_counts_as_lost() {
        assert!(is_lost_connection(&io(
            std::io::ErrorKind::ConnectionRefused
        )));
        assert!(is_lost_connection(&io(std::io::ErrorKind::ConnectionReset)));
        assert!(!is_lost_connection(&io(std::io::ErrorKind::TimedOut)));
        let answered = RedisError::from((redis::ErrorKind::Client, "no"));
        assert!(!is_lost_connection(&answered));
    }

    #[test]
    fn an_address_is_back_when_every_link_that_lost_it_answered() {
        let links = Links::new("orders-api");
        assert_eq!(links.name(), "distlock:orders-api");
        let commands = links.link((), "127.0.0.1:1");
        let subscriber = links.link((), "127.0.0.1:1");
        let lost = Err::<(), _>(io(std::io::ErrorKind::ConnectionRefused));
        commands.observe(&lost);
        subscriber.observe(&lost);
        commands.observe(&lost);
        assert!(is_down(&links, "127.0.0.1:1"));
        commands.observe(&Ok(()));
        assert!(
            is_down(&links, "127.0.0.1:1"),
            "the subscriber has not answered"
        );
        subscriber.observe(&Ok(()));
        assert!(!is_down(&links, "127.0.0.1:1"));
    }
}
