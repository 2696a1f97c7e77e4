//! The lock on a Redis Cluster: same behaviour, names spread over every master,
//! sharded pub/sub for waiters, failover of the master holding a lock.

mod support;

use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::RedisCluster;
use tokio::time::Instant;

fn cluster() -> RedisCluster {
    RedisCluster::start(3, 1).expect("start a 3-master cluster")
}

/// The hold count stored for `name`, read from the node that serves its slot.
fn cluster_count(cluster: &RedisCluster, name: &str) -> u64 {
    let slot = support::slot_of(cluster, name);
    let node = cluster.node_for_slot(slot).expect("a node serves the slot");
    support::redis_count(&cluster.nodes()[node], name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_re_enter_and_spread_over_every_master() {
    let cluster = cluster();
    let locks = support::cluster_client(&cluster, Duration::from_secs(30)).await;

    let guard = locks.lock("order:1").await.expect("lock");
    guard
        .scope(async {
            let inner = locks.lock("order:1").await.expect("re-entry");
            assert_eq!(inner.hold_count(), 2);
            assert_eq!(cluster_count(&cluster, "order:1"), 2);
            inner.unlock().await.expect("unlock");
        })
        .await;
    assert_eq!(cluster_count(&cluster, "order:1"), 1);
    guard.unlock().await.expect("unlock");
    assert_eq!(cluster_count(&cluster, "order:1"), 0);

    let mut guards = Vec::new();
    for n in 0..60 {
        guards.push(locks.lock(format!("spread:{n}")).await.expect("lock"));
    }
    for master in &cluster.nodes()[..cluster.masters()] {
        let keys: u64 = master.cmd(&["DBSIZE"]).expect("DBSIZE").parse().expect("n");
        assert!(keys > 0, "master {} holds no lock", master.port());
    }
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_leases_on_every_shard() {
    let lease = Duration::from_millis(900);
    let cluster = cluster();
    let locks = support::cluster_client(&cluster, lease).await;
    let mut guards = Vec::new();
    for n in 0..50 {
        guards.push(locks.lock(format!("renew:{n}")).await.expect("lock"));
    }
    tokio::time::sleep(lease * 3).await;
    assert_eq!(guards.iter().filter(|guard| guard.is_lost()).count(), 0);
    let info = locks.inspect("renew:7").await.expect("inspect");
    assert!(info.held);
    assert!(locks.force_unlock("renew:7").await.expect("force_unlock"));
    tokio::time::timeout(lease / 3 + Duration::from_millis(500), guards[7].lost())
        .await
        .expect("the loss is reported");
    for (n, guard) in guards.into_iter().enumerate() {
        let result = guard.unlock().await;
        assert_eq!(result.is_err(), n == 7, "lock {n}: {result:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manual_failover_keeps_the_holder_valid() {
    let lease = Duration::from_millis(1500);
    let cluster = cluster();
    let locks = support::cluster_client(&cluster, lease).await;
    let guard = locks.lock("failover").await.expect("lock");

    let (slot, _, replica) = support::placement(&cluster, "failover");
    cluster.nodes()[replica]
        .cmd(&["CLUSTER", "FAILOVER"])
        .expect("CLUSTER FAILOVER");
    let promoted = support::eventually(Duration::from_secs(10), || {
        cluster.node_for_slot(slot) == Some(replica)
    })
    .await;
    assert!(promoted, "the replica took over the slot");

    // Several renewal periods later the holder still holds it, on the new master.
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "the lock survived the failover");
    assert_eq!(
        support::redis_count(&cluster.nodes()[replica], "failover"),
        1
    );
    guard.unlock().await.expect("unlock after the failover");
    assert_eq!(
        support::redis_count(&cluster.nodes()[replica], "failover"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_fails_over_and_waiters_still_acquire() {
    let mut cluster = cluster();
    // Longer than a failover takes, so the holder keeps its lock through it.
    let lease = Duration::from_secs(8);
    let holder = support::cluster_client(&cluster, lease).await;
    let waiter = support::cluster_client(&cluster, lease).await;
    let (slot, master, replica) = support::placement(&cluster, "killed");
    let guard = holder.lock("killed").await.expect("lock");
    // Let the lock reach the replica before the crash.
    cluster.nodes()[master]
        .cmd(&["WAIT", "1", "1000"])
        .expect("WAIT");
    let waiting = support::acquired_at(&waiter, "killed", Duration::from_secs(30));
    cluster.node_mut(master).stop().expect("SIGKILL the master");
    let promoted = support::eventually(Duration::from_secs(20), || {
        cluster.node_for_slot(slot) == Some(replica)
    })
    .await;
    assert!(promoted, "the replica took over");
    assert_eq!(
        support::redis_count(&cluster.nodes()[replica], "killed"),
        1,
        "the lock survived"
    );
    tokio::time::sleep(lease / 2).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock on the new master");
    let acquired = waiting.await.expect("join").expect("the waiter acquired");
    assert!(
        acquired >= released,
        "the waiter got the lock before the holder let go"
    );
    assert!(
        acquired.saturating_duration_since(released) < lease + Duration::from_secs(1),
        "woke {:?} after the release",
        acquired.saturating_duration_since(released)
    );
}

/// What a replication loss did to the first holder: whether the second client
/// was granted while the first still believed in its lock, and when (after the
/// promotion was seen) and why the first was told.
#[derive(Debug)]
struct Loss {
    both: bool,
    told_after: Option<Duration>,
    reason: Option<distlock::LostReason>,
}

async fn replication_loss(with_replicas: bool) -> Result<Loss, distlock::LockError> {
    let mut cluster = cluster();
    // Longer than a failover takes on a loaded machine, so that the first holder
    // still believes in its lock when the second takes it: with 3 s, a slow
    // failover let the first guard's deadline pass first. (Its first renewal, 1 s
    // after the grant, may reach the new master before the cluster's watch looks:
    // it then has the watch look before the holder is told.)
    let lease = Duration::from_secs(30);
    let mut builder = LockClient::builder()
        .cluster(cluster.urls())
        .default_lease(lease);
    if with_replicas {
        builder = builder.replicas(1, Duration::from_millis(200));
    }
    let first = builder.connect().await.expect("connect");
    let second = support::cluster_client(&cluster, lease).await;
    let (slot, master, replica) = support::placement(&cluster, "replicated");

    // The replica stops hearing from its master (frozen, and its replication link
    // cut, so nothing waits in its socket buffer); the lock is taken meanwhile.
    cluster.nodes()[replica]
        .pause()
        .expect("SIGSTOP the replica");
    cluster.nodes()[master]
        .cmd(&["CLIENT", "KILL", "TYPE", "replica"])
        .expect("cut the replication link");
    let guard = match first.lock("replicated").await {
        Ok(guard) => guard,
        Err(err) => {
            cluster.nodes()[replica]
                .resume()
                .expect("SIGCONT the replica");
            return Err(err);
        }
    };
    // The master dies before the replica caught up; the replica is promoted.
    cluster.node_mut(master).stop().expect("SIGKILL the master");
    cluster.nodes()[replica]
        .resume()
        .expect("SIGCONT the replica");
    let promoted = support::eventually(Duration::from_secs(20), || {
        cluster.node_for_slot(slot) == Some(replica)
    })
    .await;
    assert!(promoted, "the replica took over");
    let promoted_at = Instant::now();
    let again = second
        .lock("replicated")
        .wait(Duration::from_secs(5))
        .await
        .expect("the new master has no lock");
    let both = !guard.is_lost();
    let told = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
    let told_after = told.is_ok().then(|| promoted_at.elapsed());
    let reason = guard.lost_reason();
    again.unlock().await.expect("unlock");
    drop(guard);
    Ok(Loss {
        both,
        told_after,
        reason,
    })
}

/// Without replica acknowledgements a lock the replica never got is lost at the
/// failover: another client is granted it on the promoted replica. The first
/// holder is told after a look of the cluster's watch (the replica took the slots
/// of its master), with `ServerReplaced`, whether the watch looked on its own or a
/// renewal that found the lock gone on the new master asked it to; the other
/// client may be granted first (README's per-topology table), which this prints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_loss_without_replica_acknowledgement_is_told_at_the_failover() {
    let loss = replication_loss(false)
        .await
        .expect("the first lock is granted");
    println!(
        "second client granted while the first still believed: {}; first told {:?} after \
         the promotion was seen, reason {:?}",
        loss.both, loss.told_after, loss.reason
    );
    let told_after = loss.told_after.expect("the first holder is told");
    assert!(
        told_after < Duration::from_secs(5),
        "told {told_after:?} after the promotion: by the cluster watch, not the renewal"
    );
    assert_eq!(loss.reason, Some(distlock::LostReason::ServerReplaced));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_loss_is_refused_with_replica_acknowledgement() {
    let err = replication_loss(true)
        .await
        .expect_err("the lock must be refused while the replica cannot acknowledge");
    assert!(
        matches!(
            err,
            distlock::LockError::ReplicationNotConfirmed {
                acked: 0,
                needed: 1,
                ..
            }
        ),
        "{err}"
    );
}
