//! Waiters on a Redis Cluster while the hash slot of a held lock migrates to
//! another master (`SETSLOT IMPORTING` / `MIGRATING`, `MIGRATE`, `SETSLOT NODE`).
//!
//! The old owner tells subscribers of the slot's sharded channels that they are
//! unsubscribed (a `sunsubscribe` push); the waiters must subscribe again, on the
//! new owner, or they sleep until the holder's lease runs out. The holder's
//! renewals follow the keys to the new owner meanwhile.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::{RedisCluster, RedisServer};
use tokio::time::Instant;

use support::channel_key as channel;
use support::{eventually, lock_key, redis_count as count, slot_of};

fn node_id(node: &RedisServer) -> String {
    node.cmd(&["CLUSTER", "MYID"]).expect("CLUSTER MYID")
}

/// The master that serves the slot of lock `name` now, and another one to move it to
/// (node indexes).
fn source_and_target(cluster: &RedisCluster, name: &str) -> (usize, usize) {
    let from = cluster
        .node_for_slot(slot_of(cluster, name))
        .expect("a master serves the slot");
    let to = (0..cluster.masters())
        .find(|&master| master != from)
        .expect("another master");
    (from, to)
}

/// How many connections subscribe to the sharded channel of lock `name` on `node`.
fn shard_subscribers(node: &RedisServer, name: &str) -> u64 {
    node.cmd(&["PUBSUB", "SHARDNUMSUB", &channel(name)])
        .expect("PUBSUB SHARDNUMSUB")
        .lines()
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

/// The remaining lease of lock `name` on `node`, in milliseconds (negative when
/// the key is not there).
fn pttl(node: &RedisServer, name: &str) -> i64 {
    node.cmd(&["PTTL", &lock_key(name)])
        .expect("PTTL")
        .parse()
        .expect("a PTTL")
}

/// Moves the slot of lock `name` with its keys from master `from` to master `to`
/// (node indexes), as `redis-cli --cluster reshard` does, and waits until every
/// master agrees.
async fn migrate_slot(cluster: &RedisCluster, name: &str, from: usize, to: usize) {
    move_keys(cluster, name, from, to);
    hand_over(cluster, name, from, to).await;
}

/// The first half of a migration: the slot of lock `name` is `IMPORTING` on `to`
/// and `MIGRATING` on `from`, and its keys are moved to `to` (requests for them
/// are redirected there with `ASK`); `from` still owns the slot.
fn move_keys(cluster: &RedisCluster, name: &str, from: usize, to: usize) {
    let slot = slot_of(cluster, name).to_string();
    let (source, target) = (&cluster.nodes()[from], &cluster.nodes()[to]);
    target
        .cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &node_id(source)])
        .expect("SETSLOT IMPORTING");
    source
        .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &node_id(target)])
        .expect("SETSLOT MIGRATING");
    let port = target.port().to_string();
    loop {
        let keys = source
            .cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"])
            .expect("CLUSTER GETKEYSINSLOT");
        let keys: Vec<&str> = keys.lines().filter(|key| !key.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        migrate.extend(keys);
        source.cmd(&migrate).expect("MIGRATE");
    }
}

/// The second half: `SETSLOT NODE` gives the slot to `to` on the two masters, then
/// on the others; waits until every master serves the lock's key or redirects to
/// `to` with `MOVED`.
async fn hand_over(cluster: &RedisCluster, name: &str, from: usize, to: usize) {
    let others = (0..cluster.masters()).filter(|&index| index != from && index != to);
    let order: Vec<usize> = [to, from].into_iter().chain(others).collect();
    give_slot(cluster, name, to, &order);
    let slot = slot_of(cluster, name);
    let nodes = &cluster.nodes()[..cluster.masters()];
    let key = lock_key(name);
    let moved = format!("MOVED {slot} 127.0.0.1:{}", nodes[to].port());
    let agreed = eventually(Duration::from_secs(10), || {
        nodes
            .iter()
            .enumerate()
            .all(|(index, node)| match node.cmd(&["EXISTS", &key]) {
                Ok(_) => index == to,
                Err(distlock_testkit::TestkitError::Reply(reply)) => reply == moved,
                Err(_) => false,
            })
    })
    .await;
    assert!(agreed, "the cluster agrees that slot {slot} moved");
}

/// `CLUSTER SETSLOT <slot of name> NODE <to>` on each master of `on`, in order.
fn give_slot(cluster: &RedisCluster, name: &str, to: usize, on: &[usize]) {
    let slot = slot_of(cluster, name).to_string();
    let target_id = node_id(&cluster.nodes()[to]);
    for &index in on {
        cluster.nodes()[index]
            .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id])
            .expect("SETSLOT NODE");
    }
}

/// When each waiter got the lock and when it gave it back.
#[derive(Debug, Clone, Copy)]
struct Turn {
    waiter: usize,
    acquired: Instant,
    released: Instant,
}

/// Local waiters of one client, queued in arrival order, each taking the lock for
/// a moment when its turn comes.
struct Waiters {
    tasks: Vec<tokio::task::JoinHandle<Result<(), distlock::LockError>>>,
    turns: Arc<Mutex<Vec<Turn>>>,
}

/// Starts `n` waiters for lock `name`, one after the other, each queued (it asked,
/// found the lock taken, and listens) before the next comes.
async fn queue_waiters(locks: &LockClient, name: &'static str, n: usize) -> Waiters {
    let inside = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(Mutex::new(Vec::<Turn>::new()));
    let mut tasks = Vec::new();
    for waiter in 0..n {
        let (locks, inside, turns) = (locks.clone(), inside.clone(), turns.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locks.lock(name).wait(Duration::from_secs(60)).await?;
            let acquired = Instant::now();
            assert!(
                !inside.swap(true, Ordering::SeqCst),
                "waiter {waiter} got the lock while another waiter held it"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            inside.store(false, Ordering::SeqCst);
            let released = Instant::now();
            guard.unlock().await?;
            turns
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(Turn {
                    waiter,
                    acquired,
                    released,
                });
            Ok(())
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Waiters { tasks, turns }
}

impl Waiters {
    /// Waits for every waiter to have had its turn, the first after `released`;
    /// returns the order they were served in, and how long each took to get the
    /// lock once it was free.
    async fn served(self, released: Instant) -> (Vec<usize>, Vec<Duration>) {
        for task in self.tasks {
            task.await.expect("join").expect("the waiter acquired");
        }
        let turns = self
            .turns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut free_since = released;
        let mut latencies = Vec::new();
        for turn in &turns {
            assert!(
                turn.acquired >= free_since,
                "waiter {} got the lock before it was given back",
                turn.waiter
            );
            latencies.push(turn.acquired - free_since);
            free_since = turn.released;
        }
        (turns.iter().map(|turn| turn.waiter).collect(), latencies)
    }
}

/// Whether every waiter got the lock within a few round trips of it being free.
fn prompt(latencies: &[Duration]) -> bool {
    latencies
        .iter()
        .all(|latency| *latency < Duration::from_secs(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_acquire_promptly_after_the_slot_of_a_held_lock_migrates() {
    let name = "migrating";
    let lease = Duration::from_secs(30);
    let cluster = RedisCluster::start(3, 1).expect("start a 3-master cluster");
    let holder = support::cluster_client(&cluster, lease).await;
    let locks = support::cluster_client(&cluster, lease).await;
    let (from, to) = source_and_target(&cluster, name);

    let guard = holder.lock(name).await.expect("lock");
    let waiters = queue_waiters(&locks, name, 3).await;
    assert_eq!(
        shard_subscribers(&cluster.nodes()[from], name),
        1,
        "the waiters listen on the lock's master"
    );

    migrate_slot(&cluster, name, from, to).await;
    assert_eq!(
        count(&cluster.nodes()[to], name),
        1,
        "the lock moved with its slot"
    );
    assert!(
        !guard.is_lost(),
        "the holder keeps the lock through the move"
    );

    // The watchdog renews the lease on the new owner (every lease / 3): its PTTL,
    // which only falls otherwise, goes up.
    let mut last = pttl(&cluster.nodes()[to], name);
    let renewed = eventually(lease / 3 + Duration::from_secs(3), || {
        let now = pttl(&cluster.nodes()[to], name);
        let up = now > last + 50;
        last = now;
        up
    })
    .await;
    assert!(renewed, "the lease was renewed on the new owner");
    assert!(!guard.is_lost(), "the holder still holds the lock");
    let resubscribed = shard_subscribers(&cluster.nodes()[to], name);

    let released = Instant::now();
    guard.unlock().await.expect("unlock on the new owner");
    let (order, latencies) = waiters.served(released).await;
    assert!(
        prompt(&latencies),
        "waiters {order:?} acquired {latencies:?} after the lock was free (lease {lease:?}); \
         {resubscribed} subscriber(s) on the new owner"
    );
    assert_eq!(order, [0, 1, 2], "the waiters were served in arrival order");
    assert_eq!(
        resubscribed, 1,
        "the waiters listened on the new owner while they waited"
    );
    assert_eq!(count(&cluster.nodes()[to], name), 0, "the lock is free");
}

/// A release on the new owner before the old one gave up the slot is published
/// where nobody listens yet: once the old owner unsubscribes the waiters and they
/// subscribe on the new one, the first of them must look again rather than sleep
/// until the lease it last saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_on_the_new_owner_before_the_hand_over_is_not_missed() {
    let name = "released-mid-migration";
    let lease = Duration::from_secs(30);
    let cluster = RedisCluster::start(3, 1).expect("start a 3-master cluster");
    let holder = support::cluster_client(&cluster, lease).await;
    let locks = support::cluster_client(&cluster, lease).await;
    let (from, to) = source_and_target(&cluster, name);

    let guard = holder.lock(name).await.expect("lock");
    let waiters = queue_waiters(&locks, name, 2).await;
    move_keys(&cluster, name, from, to);
    // The new owner takes the slot; the old one learns it a little later (from
    // the cluster bus, or from the SETSLOT below), and only then unsubscribes.
    give_slot(&cluster, name, to, &[to]);
    let released = Instant::now();
    guard.unlock().await.expect("unlock on the new owner");
    hand_over(&cluster, name, from, to).await;

    let (order, latencies) = waiters.served(released).await;
    assert!(
        prompt(&latencies),
        "waiters {order:?} acquired {latencies:?} after the lock was free (lease {lease:?})"
    );
    assert_eq!(order, [0, 1], "the waiters were served in arrival order");
}

/// Between `MIGRATE` and `SETSLOT NODE` the importing node answers a script whose
/// keys are not all there with `TRYAGAIN` (a release names the lock, its channel
/// and its owner's final-release record; a fenced acquisition names the lock, its
/// counter and its record). A release and a fenced first acquisition made in that
/// window complete once the slot is handed over, within their bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_and_a_fenced_acquisition_complete_across_a_migration() {
    let (released, fenced) = ("released-across-migration", "fenced-across-migration");
    let lease = Duration::from_secs(30);
    let cluster = RedisCluster::start(3, 0).expect("start a 3-master cluster");
    let locks = support::cluster_client(&cluster, lease).await;
    // The counter exists: the fenced acquisition's keys are then only partly on
    // the importing node.
    let first = locks
        .lock(fenced)
        .fencing(true)
        .await
        .expect("a first token");
    let first_token = first.fencing_token().expect("a token");
    first.unlock().await.expect("unlock");
    for name in [released, fenced] {
        let (from, to) = source_and_target(&cluster, name);
        let guard = if name == released {
            Some(locks.lock(name).await.expect("lock"))
        } else {
            None
        };
        move_keys(&cluster, name, from, to);
        let started = Instant::now();
        let request = match guard {
            Some(guard) => tokio::spawn(async move { guard.unlock().await.map(|()| None) }),
            None => {
                let locks = locks.clone();
                tokio::spawn(async move {
                    let guard = locks
                        .lock(fenced)
                        .fencing(true)
                        .wait(Duration::from_secs(10))
                        .await?;
                    let token = guard.fencing_token();
                    guard.unlock().await?;
                    Ok(token)
                })
            }
        };
        tokio::time::sleep(Duration::from_millis(700)).await;
        hand_over(&cluster, name, from, to).await;
        let result = tokio::time::timeout(Duration::from_secs(10), request)
            .await
            .expect("it completes once the slot is handed over")
            .expect("join");
        println!("{name}: {result:?} after {:?}", started.elapsed());
        match result {
            Ok(Some(token)) => assert!(token > first_token, "token {token} after {first_token}"),
            Ok(None) => assert_eq!(name, released),
            Err(err) => panic!("{name}: {err}"),
        }
        assert_eq!(
            count(&cluster.nodes()[to], name),
            0,
            "{name}: free afterwards"
        );
    }
}
