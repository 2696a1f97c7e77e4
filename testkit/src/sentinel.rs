//! [`SentinelGroup`]: a master, its replicas and the Sentinels that watch them.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::TestkitError;
use crate::resp::Reply;
use crate::server::{RedisServer, RedisServerBuilder, TempDir};

/// How long [`SentinelGroup::start`] waits for the group to come together.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long each question to a node may take while polling.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long [`SentinelGroup::failover`] retries while no replica is fit to promote.
const FAILOVER_RETRY: Duration = Duration::from_secs(10);
/// Pause between two polls.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// `sentinel down-after-milliseconds`: how soon a silent master counts as down.
const DOWN_AFTER_MS: u32 = 1000;
/// `sentinel failover-timeout`: also the pause before a failed failover is retried
/// (twice this value).
const FAILOVER_TIMEOUT_MS: u32 = 5000;
/// How many TLS ports [`SentinelGroup::start_tls`] tries for one process.
const TLS_PORT_ATTEMPTS: usize = 5;

/// A Redis Sentinel setup of real `redis-server` processes on `127.0.0.1`, torn
/// down on drop.
///
/// One master, `replicas` replicas of it (`--replicaof`), and `sentinels` Sentinels
/// (`redis-server <config> --sentinel`) that monitor the master under one name with
/// a quorum of a majority (`sentinels / 2 + 1`). A master that does not answer for
/// 1 s is down (`down-after-milliseconds 1000`), so a killed master is replaced in a
/// few seconds; `failover-timeout` is 5 s. Every process is a [`RedisServer`], so it
/// can be paused, stopped and restarted. A data node restarts empty, with the role
/// it was started with: a replica of the first master, or (the first master) a
/// master, which the Sentinels then turn into a replica of the current master within
/// about 10 s. Each Sentinel's configuration file, which Sentinel rewrites as it
/// learns, lives in a temporary directory of the group, removed on drop; a restarted
/// Sentinel reads it again.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use distlock_testkit::SentinelGroup;
///
/// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
/// let sentinels = group.sentinel_urls(); // hand these and "mymaster" to the client
/// # let _ = sentinels;
/// let old = group.data_nodes()[0].port();
/// group.data_node_mut(0).stop()?; // the master crashes
/// let new = group.wait_for_master_change(old, Duration::from_secs(15))?;
/// assert_eq!(new, group.data_nodes()[1].port());
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug)]
pub struct SentinelGroup {
    // Fields drop in this order: the Sentinels go first, so they do not start a
    // failover while the data nodes are being killed; the directory goes last.
    sentinels: Vec<RedisServer>,
    data: Vec<RedisServer>,
    /// The port each data node is known by to the Sentinels (and so to clients):
    /// its TLS port in a [`SentinelGroup::start_tls`] group, else its port.
    announced: Vec<u16>,
    master_name: String,
    quorum: usize,
    config_dir: TempDir,
}

impl SentinelGroup {
    /// Starts a master, `replicas` replicas of it and `sentinels` Sentinels that
    /// monitor it as `master_name`, and waits (up to 30 s) until every replica is in
    /// sync and every Sentinel sees the master, every replica and every other
    /// Sentinel.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::Sentinel`] when `sentinels` is 0, `master_name` is not made
    ///   of ASCII letters, digits, `.`, `-` and `_`, or the group does not come
    ///   together in time.
    /// - The errors of [`RedisServer::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 1, 3)?; // a master, 1 replica, 3 Sentinels
    /// assert_eq!(group.quorum(), 2);
    /// // e.g. `LockClient::builder().sentinel(group.sentinel_urls(), group.master_name())`
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start(
        master_name: &str,
        replicas: usize,
        sentinels: usize,
    ) -> Result<SentinelGroup, TestkitError> {
        Self::start_inner(master_name, replicas, sentinels, None, None)
    }

    /// As [`SentinelGroup::start`], with data nodes that require `password`: each
    /// runs with `--requirepass` and `--masterauth` set to it (any of them may
    /// become the master), and the Sentinels monitor the master with
    /// `sentinel auth-pass`. The Sentinels themselves require none, so
    /// [`SentinelGroup::sentinel_urls`] are unchanged; the data nodes'
    /// [`RedisServer::url`] carry the password, and their [`RedisServer::cmd`]
    /// authenticates.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::Sentinel`] when `password` is empty or holds whitespace, a
    ///   quote or a control character (it goes into a configuration file), and for
    ///   the reasons of [`SentinelGroup::start`].
    /// - The errors of [`RedisServer::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start_with_password("mymaster", 1, 3, "s3cret")?;
    /// // The client needs the sentinel URLs, the name, and "s3cret" for the data nodes.
    /// assert_eq!(group.data_nodes()[0].cmd(&["PING"])?, "PONG");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start_with_password(
        master_name: &str,
        replicas: usize,
        sentinels: usize,
        password: &str,
    ) -> Result<SentinelGroup, TestkitError> {
        let usable = !password.is_empty()
            && password
                .chars()
                .all(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\'' | '\\'));
        if !usable {
            return Err(sentinel_error(
                "the password is not usable in a Sentinel configuration file; use printable \
                 ASCII without spaces, quotes or backslashes",
            ));
        }
        Self::start_inner(master_name, replicas, sentinels, Some(password), None)
    }

    /// As [`SentinelGroup::start`], with data nodes that serve clients over TLS:
    /// what the Sentinels know and announce of them is their TLS port only.
    ///
    /// Each data node listens with TLS on a port of its own
    /// ([`SentinelGroup::data_node_tls_port`]), with `cert_file` and `key_file` (a
    /// certificate for `127.0.0.1`) and `ca_file`, and asks no certificate of its
    /// clients (`tls-auth-clients no`). Replication runs over TLS
    /// (`tls-replication yes`), so a replica tells its master its TLS port, and the
    /// Sentinels monitor the master on its TLS port. The Sentinels answer clients on
    /// plain TCP ([`SentinelGroup::sentinel_urls`] are unchanged), and with
    /// `tls-replication yes` they speak TLS to the data nodes and to each other (on
    /// a TLS port of their own, which they announce to each other).
    ///
    /// Every process also keeps its plain port ([`RedisServer::port`]), which only
    /// the testkit uses: its readiness checks and [`RedisServer::cmd`] speak plain
    /// RESP. No Sentinel names it, so a client that follows the Sentinels connects
    /// over TLS. [`SentinelGroup::current_master_port`] and
    /// [`SentinelGroup::wait_for_master_change`] still give (and take) plain ports,
    /// as [`RedisServer::port`] does.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::Sentinel`] for the reasons of [`SentinelGroup::start`].
    /// - The errors of [`RedisServer::start`], e.g. [`TestkitError::Exited`] when
    ///   redis-server is built without TLS or a file cannot be read.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::path::Path;
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let dir = Path::new("/tmp/pki"); // made by the test, e.g. with rcgen
    /// let group = SentinelGroup::start_tls(
    ///     "mymaster",
    ///     1,
    ///     3,
    ///     &dir.join("server.pem"),
    ///     &dir.join("server.key"),
    ///     &dir.join("ca.pem"),
    /// )?;
    /// let tls_port = group.data_node_tls_port(0); // what the Sentinels announce
    /// # let _ = tls_port;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start_tls(
        master_name: &str,
        replicas: usize,
        sentinels: usize,
        cert_file: &Path,
        key_file: &Path,
        ca_file: &Path,
    ) -> Result<SentinelGroup, TestkitError> {
        let tls = TlsFiles {
            cert: cert_file.to_path_buf(),
            key: key_file.to_path_buf(),
            ca: ca_file.to_path_buf(),
        };
        Self::start_inner(master_name, replicas, sentinels, None, Some(&tls))
    }

    fn start_inner(
        master_name: &str,
        replicas: usize,
        sentinels: usize,
        password: Option<&str>,
        tls: Option<&TlsFiles>,
    ) -> Result<SentinelGroup, TestkitError> {
        if sentinels == 0 {
            return Err(sentinel_error(
                "a group needs at least one sentinel; pass sentinels >= 1 (3 for a realistic quorum)",
            ));
        }
        let name_ok = !master_name.is_empty()
            && master_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !name_ok {
            return Err(sentinel_error(&format!(
                "the master name {master_name:?} is not usable in a Sentinel configuration \
                 file; use ASCII letters, digits, '.', '-' and '_' only"
            )));
        }
        let quorum = sentinels / 2 + 1;

        // Roles change with failovers, so every data node syncs without delay.
        let data_node = || {
            let builder = RedisServer::builder().args(["--repl-diskless-sync-delay", "0"]);
            match password {
                Some(password) => builder.password(password).arg("--masterauth").arg(password),
                None => builder,
            }
        };
        let (master, announced_port) = start_node(data_node(), tls, true)?;
        let master_port = announced_port.to_string();
        let mut data = vec![master];
        let mut announced = vec![announced_port];
        for _ in 0..replicas {
            let (node, port) = start_node(
                data_node().args(["--replicaof", "127.0.0.1", &master_port]),
                tls,
                true,
            )?;
            data.push(node);
            announced.push(port);
        }

        let mut group = SentinelGroup {
            sentinels: Vec::with_capacity(sentinels),
            data,
            announced,
            master_name: master_name.to_owned(),
            quorum,
            config_dir: TempDir::new()?,
        };
        let port = group.data[0].port();
        // Sentinels read a replica's state every 10 s: start them once it is final.
        group.wait_until(START_TIMEOUT, "the replicas to sync", |group| {
            group.check_data(port).map(drop)
        })?;
        for index in 0..sentinels {
            let path = group
                .config_dir
                .path()
                .join(format!("sentinel-{index}.conf"));
            write_config(&path, master_name, &master_port, quorum, password)?;
            // Sentinel writes its working directory into the file: it must be
            // one that outlives a restart, unlike each start's own directory.
            let builder = RedisServer::builder()
                .config_file(path)
                .arg("--dir")
                .arg(group.config_dir.path())
                .arg("--sentinel");
            group.sentinels.push(start_node(builder, tls, false)?.0);
        }
        group.wait_until(START_TIMEOUT, "the group to come together", |group| {
            group.check(port)
        })?;
        Ok(group)
    }

    /// The name the Sentinels monitor the master under.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("locks", 1, 3)?;
    /// assert_eq!(group.master_name(), "locks");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// How many Sentinels must agree that the master is down: a majority.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
    /// assert_eq!(group.quorum(), 2);
    /// group.sentinel_mut(2).stop()?; // two Sentinels still make a quorum
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// The URLs of the Sentinels, `redis://127.0.0.1:PORT/`: hand them and
    /// [`SentinelGroup::master_name`] to the client under test.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 1, 3)?;
    /// let urls = group.sentinel_urls();
    /// assert_eq!(urls.len(), 3);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// The Sentinel processes, in the order they were started.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 1, 3)?;
    /// for sentinel in group.sentinels() {
    ///     let master = sentinel.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])?;
    ///     println!("{} names {master:?}", sentinel.url());
    /// }
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// One Sentinel, to stop, pause or restart it (it keeps its configuration file,
    /// so it comes back with its identity and what it had learnt).
    ///
    /// # Panics
    ///
    /// When `index` is out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
    /// group.sentinel_mut(0).restart()?; // back with its identity and what it learnt
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn sentinel_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.sentinels[index]
    }

    /// The data nodes, the first master first, then the replicas, as started (roles
    /// change after failovers: ask [`SentinelGroup::current_master_port`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 2, 3)?;
    /// let master = &group.data_nodes()[0];
    /// assert!(master.cmd(&["ROLE"])?.starts_with("master"));
    /// assert_eq!(group.data_nodes().len(), 3);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// One data node, to stop, pause or restart it. Index 0 is the first master.
    ///
    /// # Panics
    ///
    /// When `index` is out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
    /// group.data_node_mut(1).pause()?; // the replica hangs
    /// group.data_node_mut(1).resume()?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn data_node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.data[index]
    }

    /// The TLS port of a data node in a [`SentinelGroup::start_tls`] group: the port
    /// the Sentinels announce for it. `None` in a group without TLS.
    ///
    /// # Panics
    ///
    /// When `index` is out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 1, 3)?;
    /// assert_eq!(group.data_node_tls_port(0), None); // no TLS: see `start_tls`
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn data_node_tls_port(&self, index: usize) -> Option<u16> {
        let announced = self.announced[index];
        (announced != self.data[index].port()).then_some(announced)
    }

    /// The port of the master as the first running Sentinel that answers sees it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`); `None` when no Sentinel answers. In a
    /// [`SentinelGroup::start_tls`] group, the node's plain port
    /// ([`RedisServer::port`]), not the TLS port the Sentinel names.
    ///
    /// Sentinels may disagree for a moment during a failover; see
    /// [`SentinelGroup::wait_for_master_change`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 1, 3)?;
    /// assert_eq!(group.current_master_port(), Some(group.data_nodes()[0].port()));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn current_master_port(&self) -> Option<u16> {
        self.sentinels
            .iter()
            .find_map(|sentinel| self.master_port_seen_by(sentinel))
    }

    /// The index in [`SentinelGroup::data_nodes`] of the current master (see
    /// [`SentinelGroup::current_master_port`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
    /// let master = group.current_master_index().expect("a master");
    /// group.data_node_mut(master).stop()?; // crash whichever node is the master now
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn current_master_index(&self) -> Option<usize> {
        let port = self.current_master_port()?;
        self.data.iter().position(|node| node.port() == port)
    }

    /// Waits until every running Sentinel that answers names the same master, other
    /// than the one on `from_port`, and that node says it is a master; returns its port.
    ///
    /// A killed master is normally replaced within 2 to 4 s. When the Sentinels split
    /// their votes, they try again after 10 s (twice the failover timeout), so give
    /// it 15 s or more.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Sentinel`] when that does not happen within `timeout`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
    /// let old = group.data_nodes()[0].port();
    /// group.data_node_mut(0).stop()?;
    /// let new = group.wait_for_master_change(old, Duration::from_secs(15))?;
    /// assert_ne!(new, old);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn wait_for_master_change(
        &self,
        from_port: u16,
        timeout: Duration,
    ) -> Result<u16, TestkitError> {
        let mut found = None;
        self.wait_until(
            timeout,
            &format!("a new master (other than 127.0.0.1:{from_port})"),
            |group| {
                let port = group.agreed_master_port()?;
                if port == from_port {
                    return Err(format!("the sentinels still name 127.0.0.1:{port}"));
                }
                group.check_role_master(port)?;
                found = Some(port);
                Ok(())
            },
        )?;
        found.ok_or_else(|| sentinel_error("internal: no port found"))
    }

    /// Asks a running Sentinel for a failover (`SENTINEL FAILOVER <name>`), which
    /// promotes a replica without waiting for the master to fail. Returns once the
    /// Sentinel has accepted; then [`SentinelGroup::wait_for_master_change`].
    ///
    /// While the Sentinel finds no replica fit to promote (`NOGOODSLAVE`, e.g. just
    /// after a restart), asks again for up to 10 s. A Sentinel does not start another
    /// failover of the same master within 10 s of its last one.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::Reply`] when the Sentinel refuses (e.g. `INPROG`: a failover
    ///   is already running, or still `NOGOODSLAVE` after 10 s).
    /// - [`TestkitError::Sentinel`] when no Sentinel answers.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let group = SentinelGroup::start("mymaster", 1, 3)?;
    /// let old = group.current_master_port().expect("a master");
    /// group.failover()?; // the replica is promoted; the old master becomes its replica
    /// group.wait_for_master_change(old, Duration::from_secs(15))?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn failover(&self) -> Result<(), TestkitError> {
        let deadline = Instant::now() + FAILOVER_RETRY;
        loop {
            let mut answered = None;
            for sentinel in &self.sentinels {
                if let Ok(reply) =
                    sentinel.request(&["SENTINEL", "FAILOVER", &self.master_name], PROBE_TIMEOUT)
                {
                    answered = Some(reply);
                    break;
                }
            }
            match answered {
                None => {
                    return Err(sentinel_error(
                        "no sentinel answered SENTINEL FAILOVER; restart or resume one first",
                    ))
                }
                Some(Reply::Error(message)) => {
                    if !message.starts_with("NOGOODSLAVE") || Instant::now() >= deadline {
                        return Err(TestkitError::Reply(message));
                    }
                }
                Some(_) => return Ok(()),
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (up to `timeout`) until the group is whole again around the master the
    /// Sentinels name: every running data node other than the master is an in-sync
    /// replica of it (as the node itself says), and every running Sentinel names
    /// that master, sees it up, knows the other running Sentinels and lists every
    /// such replica as up. Useful after a failover, or after restarting a node.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Sentinel`] when that does not happen in time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::SentinelGroup;
    ///
    /// let mut group = SentinelGroup::start("mymaster", 1, 3)?;
    /// group.data_node_mut(1).restart()?; // the replica comes back empty
    /// group.wait_healthy(Duration::from_secs(30))?; // and in sync again
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn wait_healthy(&self, timeout: Duration) -> Result<(), TestkitError> {
        self.wait_until(timeout, "the group to be healthy", |group| {
            let port = group.agreed_master_port()?;
            group.check(port)
        })
    }

    /// Polls `check` until it passes or `timeout` runs out; the error names the last
    /// reason it gave.
    fn wait_until(
        &self,
        timeout: Duration,
        what: &str,
        mut check: impl FnMut(&SentinelGroup) -> Result<(), String>,
    ) -> Result<(), TestkitError> {
        let deadline = Instant::now() + timeout;
        loop {
            let reason = match check(self) {
                Ok(()) => return Ok(()),
                Err(reason) => reason,
            };
            if Instant::now() >= deadline {
                return Err(sentinel_error(&format!(
                    "timed out after {timeout:?} waiting for {what}: {reason}; the machine \
                     may be overloaded (give it more time), or redis-server lacks Sentinel \
                     mode (`redis-server <config> --sentinel`). Sentinel configuration \
                     files are in {}",
                    self.config_dir.path().display()
                )));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// The master port every running Sentinel that answers agrees on.
    fn agreed_master_port(&self) -> Result<u16, String> {
        let mut seen: Vec<(u16, Option<u16>)> = Vec::new();
        for sentinel in self.reachable_sentinels() {
            seen.push((sentinel.port(), self.master_port_seen_by(sentinel)));
        }
        match seen.first() {
            None => Err("no sentinel answers".to_owned()),
            Some(&(_, Some(port))) if seen.iter().all(|&(_, p)| p == Some(port)) => Ok(port),
            _ => {
                let views = seen
                    .iter()
                    .map(|(sentinel, master)| match master {
                        Some(port) => format!("sentinel :{sentinel} names :{port}"),
                        None => format!("sentinel :{sentinel} names none"),
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                Err(format!("the sentinels disagree ({views})"))
            }
        }
    }

    /// The Sentinels that run and answer `PING`.
    fn reachable_sentinels(&self) -> impl Iterator<Item = &RedisServer> {
        self.sentinels.iter().filter(|sentinel| {
            matches!(
                sentinel.request(&["PING"], PROBE_TIMEOUT),
                Ok(Reply::Simple(_))
            )
        })
    }

    fn master_port_seen_by(&self, sentinel: &RedisServer) -> Option<u16> {
        let reply = sentinel
            .request(
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.master_name],
                PROBE_TIMEOUT,
            )
            .ok()?;
        match reply {
            Reply::Array(items) if items.len() == 2 => {
                Some(self.node_port(text(&items[1])?.parse().ok()?))
            }
            _ => None,
        }
    }

    /// The [`RedisServer::port`] of the data node the Sentinels know by `announced`
    /// (the same port unless it is a TLS port of ours).
    fn node_port(&self, announced: u16) -> u16 {
        self.announced
            .iter()
            .position(|&port| port == announced)
            .map_or(announced, |index| self.data[index].port())
    }

    /// The port the Sentinels and replicas know the data node on `port` by.
    fn announced_port(&self, port: u16) -> u16 {
        self.data
            .iter()
            .position(|node| node.port() == port)
            .map_or(port, |index| self.announced[index])
    }

    /// Whether the data node on `port` (when it is one of ours) says it is a master.
    fn check_role_master(&self, port: u16) -> Result<(), String> {
        let Some(node) = self.data.iter().find(|node| node.port() == port) else {
            return Ok(());
        };
        let info = info_replication(node)?;
        if info.get("role").map(String::as_str) == Some("master") {
            Ok(())
        } else {
            Err(format!("127.0.0.1:{port} is named but is not a master yet"))
        }
    }

    /// Checks the whole group around the master on `master_port`; the error says
    /// what is missing.
    fn check(&self, master_port: u16) -> Result<(), String> {
        let replica_ports = self.check_data(master_port)?;
        self.check_sentinels(master_port, &replica_ports)
    }

    /// Checks that the node on `master_port` is a master and every other running
    /// data node an in-sync replica of it; returns the replicas' ports.
    fn check_data(&self, master_port: u16) -> Result<Vec<u16>, String> {
        self.check_role_master(master_port)?;
        // A replica names its master as the Sentinels do.
        let announced_master = self.announced_port(master_port).to_string();
        let mut replica_ports = Vec::new();
        for node in self.data.iter().filter(|node| node.port() != master_port) {
            let Ok(info) = info_replication(node) else {
                continue; // stopped or paused: not expected to be a replica
            };
            let port = node.port();
            let master = info.get("master_port").map(String::as_str);
            let link = info.get("master_link_status").map(String::as_str);
            if info.get("role").map(String::as_str) != Some("slave")
                || master != Some(&announced_master)
                || link != Some("up")
            {
                return Err(format!(
                    "the replica on 127.0.0.1:{port} is not in sync with 127.0.0.1:{master_port}"
                ));
            }
            replica_ports.push(port);
        }
        Ok(replica_ports)
    }

    /// Checks that every reachable Sentinel names the master on `master_port`, sees
    /// it up, knows the other reachable Sentinels and lists `replica_ports` as up.
    fn check_sentinels(&self, master_port: u16, replica_ports: &[u16]) -> Result<(), String> {
        let sentinels: Vec<&RedisServer> = self.reachable_sentinels().collect();
        if sentinels.is_empty() {
            return Err("no sentinel answers".to_owned());
        }
        for sentinel in &sentinels {
            let me = sentinel.port();
            if self.master_port_seen_by(sentinel) != Some(master_port) {
                return Err(format!(
                    "sentinel :{me} does not name 127.0.0.1:{master_port} as the master"
                ));
            }
            let master = sentinel
                .request(&["SENTINEL", "MASTER", &self.master_name], PROBE_TIMEOUT)
                .map_err(|err| format!("sentinel :{me}: {err}"))?;
            let master = fields(&master);
            let flags = master.get("flags").map(String::as_str).unwrap_or("");
            if flags != "master" {
                return Err(format!("sentinel :{me} flags the master {flags:?}"));
            }
            let others: usize = master
                .get("num-other-sentinels")
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            if others + 1 < sentinels.len() {
                return Err(format!(
                    "sentinel :{me} knows {others} other sentinels, not {}",
                    sentinels.len() - 1
                ));
            }
            let listed = sentinel
                .request(&["SENTINEL", "REPLICAS", &self.master_name], PROBE_TIMEOUT)
                .map_err(|err| format!("sentinel :{me}: {err}"))?;
            let Reply::Array(listed) = listed else {
                return Err(format!("sentinel :{me} lists no replicas"));
            };
            // Only the flags: a Sentinel refreshes a replica's link status every 10 s,
            // and the link itself is checked on the replica (`check_data`).
            let healthy: Vec<u16> = listed
                .iter()
                .map(fields)
                .filter(|replica| replica.get("flags").map(String::as_str) == Some("slave"))
                .filter_map(|replica| replica.get("port")?.parse().ok())
                .map(|port| self.node_port(port))
                .collect();
            if let Some(missing) = replica_ports.iter().find(|port| !healthy.contains(port)) {
                return Err(format!(
                    "sentinel :{me} does not see 127.0.0.1:{missing} as a replica that is up"
                ));
            }
        }
        Ok(())
    }
}

/// The certificate, key and CA files of a [`SentinelGroup::start_tls`] group.
#[derive(Debug)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
}

/// Starts `builder`; with `tls`, on a free TLS port as well (retried when another
/// process takes it first), with replication over TLS. Returns the server and the
/// port the Sentinels are to know it by: the TLS port of a data node (`data`), else
/// the plain port. A Sentinel's TLS port serves the other Sentinels.
fn start_node(
    builder: RedisServerBuilder,
    tls: Option<&TlsFiles>,
    data: bool,
) -> Result<(RedisServer, u16), TestkitError> {
    let Some(tls) = tls else {
        let server = builder.start()?;
        let port = server.port();
        return Ok((server, port));
    };
    let mut last = None;
    for _ in 0..TLS_PORT_ATTEMPTS {
        let port = free_port()?;
        let mut args: Vec<OsString> = vec![
            "--tls-port".into(),
            port.to_string().into(),
            "--tls-cert-file".into(),
            tls.cert.clone().into(),
            "--tls-key-file".into(),
            tls.key.clone().into(),
            "--tls-ca-cert-file".into(),
            tls.ca.clone().into(),
            "--tls-replication".into(),
            "yes".into(),
        ];
        if data {
            args.extend(["--tls-auth-clients".into(), "no".into()]);
        }
        match builder.clone().args(args).start() {
            Ok(server) => {
                let announced = if data { port } else { server.port() };
                return Ok((server, announced));
            }
            // The builder tries other plain ports, with the same (taken) TLS port.
            Err(err @ TestkitError::NoFreePort { .. }) => last = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last.unwrap_or_else(|| sentinel_error("internal: no TLS port tried")))
}

/// A port nothing listens on at the moment (another process may take it).
fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| TestkitError::io("could not find a free TLS port", source))
}

/// Writes the configuration file of one Sentinel. Port, bind address and working
/// directory come from the command line ([`RedisServer`] sets them).
fn write_config(
    path: &Path,
    name: &str,
    master_port: &str,
    quorum: usize,
    password: Option<&str>,
) -> Result<(), TestkitError> {
    let mut config = String::from(
        "# Written by distlock-testkit; Sentinel rewrites it as it learns.\n\
         # The port, bind address and directory are set on the command line.\n\
         bind 127.0.0.1\n\
         sentinel resolve-hostnames no\n\
         sentinel announce-hostnames no\n",
    );
    // Writing to a String cannot fail.
    let _ = writeln!(
        config,
        "sentinel monitor {name} 127.0.0.1 {master_port} {quorum}"
    );
    let _ = writeln!(
        config,
        "sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}"
    );
    let _ = writeln!(
        config,
        "sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}"
    );
    if let Some(password) = password {
        let _ = writeln!(config, "sentinel auth-pass {name} {password}");
    }
    fs::write(path, config).map_err(|source| {
        TestkitError::io(
            format!(
                "could not write the sentinel configuration {} (set TMPDIR to a writable directory)",
                path.display()
            ),
            source,
        )
    })
}

/// `INFO replication` of `node` as a map, or why it could not be had.
fn info_replication(node: &RedisServer) -> Result<HashMap<String, String>, String> {
    match node.request(&["INFO", "replication"], PROBE_TIMEOUT) {
        Ok(Reply::Bulk(info)) => Ok(String::from_utf8_lossy(&info)
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.to_owned(), value.trim().to_owned()))
            .collect()),
        Ok(other) => Err(format!(
            "127.0.0.1:{} answered INFO with {}",
            node.port(),
            other.render()
        )),
        Err(err) => Err(format!("127.0.0.1:{}: {err}", node.port())),
    }
}

/// A flat array of names and values (`SENTINEL MASTER`) as a map.
fn fields(reply: &Reply) -> HashMap<String, String> {
    let Reply::Array(items) = reply else {
        return HashMap::new();
    };
    items
        .chunks_exact(2)
        .filter_map(|pair| Some((text(&pair[0])?, text(&pair[1])?)))
        .collect()
}

fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bulk(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Reply::Simple(text) => Some(text.clone()),
        Reply::Integer(n) => Some(n.to_string()),
        _ => None,
    }
}

fn sentinel_error(detail: &str) -> TestkitError {
    TestkitError::Sentinel {
        detail: detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_flat_field_arrays() {
        let reply = Reply::Array(vec![
            Reply::Bulk(b"name".to_vec()),
            Reply::Bulk(b"mymaster".to_vec()),
            Reply::Bulk(b"num-other-sentinels".to_vec()),
            Reply::Integer(2),
            Reply::Bulk(b"dangling".to_vec()),
        ]);
        let map = fields(&reply);
        assert_eq!(map.get("name").map(String::as_str), Some("mymaster"));
        assert_eq!(
            map.get("num-other-sentinels").map(String::as_str),
            Some("2")
        );
        assert_eq!(map.len(), 2);
        assert!(fields(&Reply::Nil).is_empty());
    }

    #[test]
    fn rejects_bad_arguments_before_starting_anything() {
        let err = SentinelGroup::start("mymaster", 1, 0).expect_err("no sentinels");
        assert!(err.to_string().contains("at least one sentinel"), "{err}");
        let err = SentinelGroup::start("my master", 1, 1).expect_err("a space");
        assert!(err.to_string().contains("not usable"), "{err}");
        let err = SentinelGroup::start("", 1, 1).expect_err("empty");
        assert!(err.to_string().contains("not usable"), "{err}");
        for password in ["", "two words", "quo\"te", "new\nline"] {
            let err = SentinelGroup::start_with_password("mymaster", 1, 1, password)
                .expect_err("an unusable password");
            assert!(err.to_string().contains("password"), "{err}");
        }
    }
}
