//! A local Redis Cluster: masters and replicas on free loopback ports.

use std::net::TcpListener;
use std::thread;
use std::time::{Duration, Instant};

use crate::error::TestkitError;
use crate::server::RedisServer;

/// Slots in a Redis Cluster.
const SLOTS: u16 = 16384;

/// A Redis Cluster of real `redis-server` processes on `127.0.0.1`, torn down on drop.
///
/// Masters split the 16384 slots evenly; each master gets the same number of
/// replicas. Nodes time out after 1 s (`cluster-node-timeout`), so a killed master
/// fails over within a few seconds. The cluster is assembled with `CLUSTER
/// ADDSLOTSRANGE`, `CLUSTER MEET` and `CLUSTER REPLICATE`, so no `redis-cli` is needed.
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::RedisCluster;
///
/// let cluster = RedisCluster::start(3, 1)?; // 3 masters, 3 replicas
/// let urls = cluster.urls();
/// # let _ = urls;
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas` replicas each, and waits until the
    /// cluster reports `cluster_state:ok` on every node and every replica is in sync.
    ///
    /// # Errors
    ///
    /// The errors of [`RedisServer::start`], and [`TestkitError::Cluster`] when the
    /// nodes do not form a healthy cluster within 30 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let cluster = RedisCluster::start(3, 1)?; // 3 masters, each with 1 replica
    /// assert_eq!(cluster.nodes().len(), 6);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start(masters: usize, replicas: usize) -> Result<RedisCluster, TestkitError> {
        if masters == 0 {
            return Err(cluster_error("a cluster needs at least one master"));
        }
        let total = masters * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        let mut buses = Vec::with_capacity(total);
        for _ in 0..total {
            let bus = TcpListener::bind("127.0.0.1:0")
                .and_then(|listener| listener.local_addr())
                .map_err(|source| TestkitError::Io {
                    context: "finding a free port for the cluster bus".into(),
                    source,
                })?
                .port();
            buses.push(bus);
            nodes.push(
                RedisServer::builder()
                    .args(["--cluster-enabled", "yes"])
                    .args(["--cluster-config-file", "nodes.conf"])
                    .args(["--cluster-node-timeout", "1000"])
                    .arg("--cluster-port")
                    .arg(bus.to_string())
                    .args(["--cluster-replica-validity-factor", "0"])
                    .args(["--cluster-allow-replica-migration", "no"])
                    .start()?,
            );
        }
        let cluster = RedisCluster { nodes, masters };
        cluster.assemble(replicas, buses[0])?;
        Ok(cluster)
    }

    fn assemble(&self, replicas: usize, first_bus: u16) -> Result<(), TestkitError> {
        let per_master = SLOTS as usize / self.masters;
        for (index, node) in self.nodes.iter().enumerate() {
            node.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &(index + 1).to_string()])?;
        }
        for (index, master) in self.nodes[..self.masters].iter().enumerate() {
            let first = index * per_master;
            let last = if index + 1 == self.masters {
                SLOTS as usize - 1
            } else {
                first + per_master - 1
            };
            master.cmd(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ])?;
        }
        let first_port = self.nodes[0].port().to_string();
        let first_bus = first_bus.to_string();
        for node in &self.nodes[1..] {
            node.cmd(&["CLUSTER", "MEET", "127.0.0.1", &first_port, &first_bus])?;
        }
        let total = self.nodes.len();
        self.wait_for("every node to know every other", |cluster| {
            cluster.nodes.iter().all(|node| {
                node.cmd(&["CLUSTER", "NODES"])
                    .map(|nodes| nodes.lines().filter(|line| !line.is_empty()).count() == total)
                    .unwrap_or(false)
            })
        })?;
        let ids = self
            .nodes
            .iter()
            .map(|node| node.cmd(&["CLUSTER", "MYID"]))
            .collect::<Result<Vec<_>, _>>()?;
        for replica in 0..self.masters * replicas {
            let master = replica % self.masters;
            self.nodes[self.masters + replica].cmd(&["CLUSTER", "REPLICATE", &ids[master]])?;
        }
        self.wait_for("cluster_state:ok and replicas in sync", |cluster| {
            cluster.is_healthy()
        })
    }

    /// Whether every running node says `cluster_state:ok` and every replica's link
    /// to its master is up.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let mut cluster = RedisCluster::start(3, 1)?;
    /// assert!(cluster.is_healthy());
    /// cluster.node_mut(0).stop()?; // a master crashes
    /// assert!(!cluster.is_healthy());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn is_healthy(&self) -> bool {
        self.nodes.iter().all(|node| {
            let ok = node
                .cmd(&["CLUSTER", "INFO"])
                .map(|info| info.contains("cluster_state:ok"))
                .unwrap_or(false);
            let replication = node.cmd(&["INFO", "replication"]).unwrap_or_default();
            let synced = !replication.contains("role:slave")
                || replication.contains("master_link_status:up");
            ok && synced
        })
    }

    /// Waits up to 30 s for `check`.
    fn wait_for(
        &self,
        what: &str,
        check: impl Fn(&RedisCluster) -> bool,
    ) -> Result<(), TestkitError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if check(self) {
                return Ok(());
            }
            thread::sleep(Duration::from_millis(50));
        }
        Err(cluster_error(&format!("timed out waiting for {what}")))
    }

    /// The URLs of every node, masters first: hand them to the client under test.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let cluster = RedisCluster::start(3, 0)?;
    /// // e.g. `LockClient::builder().cluster(cluster.urls())`
    /// assert_eq!(cluster.urls().len(), 3);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Every node, masters first (as started; roles change after failovers).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let cluster = RedisCluster::start(3, 1)?;
    /// for node in &cluster.nodes()[..cluster.masters()] {
    ///     assert_eq!(node.cmd(&["PING"])?, "PONG");
    /// }
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// One node, to stop, pause or restart it.
    ///
    /// # Panics
    ///
    /// When `index` is out of range.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let mut cluster = RedisCluster::start(3, 1)?;
    /// cluster.node_mut(1).pause()?; // a master hangs
    /// cluster.node_mut(1).resume()?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn node_mut(&mut self, index: usize) -> &mut RedisServer {
        &mut self.nodes[index]
    }

    /// How many masters the cluster was started with.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let cluster = RedisCluster::start(3, 1)?;
    /// assert_eq!(cluster.masters(), 3);
    /// let replicas = &cluster.nodes()[cluster.masters()..];
    /// assert_eq!(replicas.len(), 3);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn masters(&self) -> usize {
        self.masters
    }

    /// The index of the node that serves `slot` now, as a running node sees it
    /// (`CLUSTER NODES`); `None` when no running node answers or none serves it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let mut cluster = RedisCluster::start(3, 1)?;
    /// let slot = 5_000; // the slot of the lock under test
    /// let owner = cluster.node_for_slot(slot).expect("a node serves it");
    /// cluster.node_mut(owner).stop()?; // its master crashes
    /// cluster.wait_healthy()?; // a replica took over
    /// assert_ne!(cluster.node_for_slot(slot), Some(owner));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn node_for_slot(&self, slot: u16) -> Option<usize> {
        let view = self
            .nodes
            .iter()
            .find_map(|node| node.cmd(&["CLUSTER", "NODES"]).ok())?;
        for line in view.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let serves = fields[8..].iter().any(|range| {
                let mut bounds = range.split('-');
                let first = bounds.next().and_then(|n| n.parse::<u16>().ok());
                let last = bounds.next().and_then(|n| n.parse::<u16>().ok()).or(first);
                matches!((first, last), (Some(a), Some(b)) if a <= slot && slot <= b)
            });
            if serves {
                let port: u16 = fields[1].split(['@', ':']).nth(1)?.parse().ok()?;
                return self.nodes.iter().position(|node| node.port() == port);
            }
        }
        None
    }

    /// Waits until the cluster is healthy again (after a failover), up to 30 s.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Cluster`] when it is not healthy in time.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let mut cluster = RedisCluster::start(3, 1)?;
    /// cluster.node_mut(0).stop()?; // a master crashes; its replica is promoted
    /// cluster.wait_healthy()?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn wait_healthy(&self) -> Result<(), TestkitError> {
        self.wait_for("the cluster to be healthy", RedisCluster::is_healthy)
    }
}

fn cluster_error(detail: &str) -> TestkitError {
    TestkitError::Cluster {
        detail: detail.to_owned(),
    }
}
