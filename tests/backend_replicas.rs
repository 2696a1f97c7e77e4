//! `.replicas(n, timeout)`: a new lock counts only once replicas have it.

mod support;

use std::time::Duration;

use distlock::{LockClient, LockError};
use distlock_testkit::RedisServer;
use tokio::time::Instant;

fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = support::server();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(master.port().to_string())
        .start()
        .expect("start the replica");
    let synced = support::eventually_blocking(Duration::from_secs(20), || {
        replica
            .cmd(&["INFO", "replication"])
            .expect("INFO")
            .contains("master_link_status:up")
    });
    assert!(synced, "the replica never synced");
    (master, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_granted_once_a_replica_has_it_and_refused_otherwise() {
    let (master, replica) = master_and_replica();
    let locks = support::builder(&master)
        .replicas(1, Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");

    let guard = locks.lock("acked").await.expect("the replica acknowledges");
    assert_eq!(
        support::redis_count(&replica, "acked"),
        1,
        "the replica has the lock"
    );
    guard
        .scope(async {
            let before = support::command_calls(&master, "wait");
            let inner = locks.lock("acked").await.expect("re-entry");
            assert_eq!(
                support::command_calls(&master, "wait"),
                before,
                "re-entries do not wait"
            );
            inner.unlock().await.expect("unlock");
        })
        .await;
    guard.unlock().await.expect("unlock");

    replica.pause().expect("SIGSTOP the replica");
    let start = std::time::Instant::now();
    let err = locks
        .lock("unacked")
        .wait(Duration::from_millis(800))
        .await
        .expect_err("no replica can acknowledge");
    match err {
        LockError::ReplicationNotConfirmed { acked, needed, .. } => {
            assert_eq!((acked, needed), (0, 1));
        }
        other => panic!("expected ReplicationNotConfirmed, got {other}"),
    }
    assert!(
        start.elapsed() >= Duration::from_millis(600),
        "asked again within the wait, gave up after {:?}",
        start.elapsed()
    );
    // An attempt cut short by the end of the wait is given back in the background.
    assert!(
        support::eventually(Duration::from_secs(2), || support::redis_count(
            &master, "unacked"
        ) == 0)
        .await,
        "released again"
    );

    // A replica that comes back within the wait acknowledges a later attempt.
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock("later").wait(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "granted without a replica");
    replica.resume().expect("SIGCONT the replica");
    let guard = waiting
        .await
        .expect("join")
        .expect("granted once the replica is back");
    assert_eq!(support::redis_count(&replica, "later"), 1);
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_timeout_out_of_range_is_refused_before_connecting() {
    let server = support::server();
    for timeout in [
        Duration::ZERO,
        Duration::from_millis(500),
        Duration::from_secs(3),
    ] {
        let err = LockClient::builder()
            .url(server.url())
            .replicas(1, timeout)
            .connect()
            .await
            .expect_err("out of range");
        assert!(
            matches!(
                err,
                LockError::InvalidOption {
                    option: "replicas",
                    ..
                }
            ),
            "{timeout:?}: {err}"
        );
    }
}

/// Observed: when too few replicas acknowledged a new lock, the give-back ran inside
/// the attempt, not detached: a wait that ended during it (here: while the server
/// reloads the release script after `SCRIPT FLUSH`, every reply 300 ms late) cut it
/// short, and the lock stayed held, with no guard, for its whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_lock_is_given_back_even_when_the_wait_ends_during_the_give_back() {
    // No replica: `WAIT 1` answers 0 after its timeout.
    let server = support::server();
    let proxy = support::proxy(&server);
    let locks = LockClient::builder()
        .url(proxy.url())
        .replicas(1, Duration::from_millis(50))
        .connect()
        .await
        .expect("connect through the proxy");
    server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    support::replies_late(&proxy, Duration::from_millis(300));
    // Replies at about: 350 ms NOSCRIPT, 650 ms loaded, 1000 ms granted with 0
    // acknowledgements; the give-back: 1300 ms NOSCRIPT, 1600 ms loaded, then the
    // release. The wait ends in between, at 1450 ms.
    let result = locks
        .lock("refused")
        .wait(Duration::from_millis(1450))
        .await;
    assert!(result.is_err(), "granted without a replica: {result:?}");
    proxy.heal();
    let freed = support::eventually(Duration::from_secs(3), || {
        !support::held(&server, &support::lock_key("refused"))
    })
    .await;
    assert!(
        freed,
        "the refused lock is still held ({} hold(s), no guard) after the wait ended with {result:?}",
        support::redis_count(&server, "refused")
    );
}

/// Observed: with `replicas(1, ..)`, a renewal that fewer replicas acknowledged was
/// dropped whole, its "not held" answer with it: a lock force-unlocked while the
/// replica was unreachable stayed believed held until the holder's own lease ran
/// out (`Expired`, a whole lease later), while anybody could take it. A "not held"
/// answer needs no acknowledgement: the holder is told at its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_gone_while_no_replica_acknowledges_is_told_at_the_next_renewal() {
    let (master, replica) = master_and_replica();
    let lease = Duration::from_secs(6);
    let period = lease / 3;
    let holder = support::builder(&master)
        .replicas(1, Duration::from_millis(100))
        .default_lease(lease)
        .connect()
        .await
        .expect("connect");
    let operator = support::client(&master).await;
    let guard = holder.lock("unacked-loss").await.expect("acknowledged");
    let taken = Instant::now();

    // From now on `WAIT 1` answers 0: no renewal is acknowledged.
    replica.pause().expect("SIGSTOP the replica");
    assert!(
        operator
            .force_unlock("unacked-loss")
            .await
            .expect("force_unlock"),
        "the lock was held"
    );
    let unlocked = Instant::now();
    let told = tokio::time::timeout(lease, guard.lost()).await;
    let after = unlocked.elapsed();
    replica.resume().expect("SIGCONT the replica");
    println!(
        "force-unlocked {:?} after the grant; the holder was told {after:?} later, reason {:?}",
        unlocked - taken,
        guard.lost_reason()
    );
    assert!(told.is_ok(), "the holder was never told");
    assert_eq!(guard.lost_reason(), Some(distlock::LostReason::NotHeld));
    // At its first renewal (one period after the grant), not when its own lease
    // runs out (a whole lease after the grant).
    assert!(
        taken.elapsed() < period + Duration::from_millis(1500),
        "told {:?} after the grant: not at the first renewal ({period:?})",
        taken.elapsed()
    );
}

/// The other side of keeping holds through a failover to a master that has no
/// replica yet: a master that had its replica and lost it looks like a master cut
/// off from the others while another one is promoted, which may lack the renewals
/// it answers. Its "held" answers do not extend the lease: the holder is told
/// `Expired` when its last acknowledged lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_lost_its_replica_does_not_keep_holds_past_their_lease() {
    let (master, replica) = master_and_replica();
    let lease = Duration::from_secs(3);
    let holder = support::builder(&master)
        .replicas(1, Duration::from_millis(100))
        .default_lease(lease)
        .connect()
        .await
        .expect("connect");
    let guard = holder.lock("cut-off").await.expect("acknowledged");
    let taken = Instant::now();
    replica.pause().expect("SIGSTOP the replica");
    let told = tokio::time::timeout(lease * 2, guard.lost()).await;
    let after = taken.elapsed();
    let in_redis = support::redis_count(&master, "cut-off");
    replica.resume().expect("SIGCONT the replica");
    println!(
        "told {after:?} after the grant ({:?}); the master still had it: {in_redis}",
        guard.lost_reason()
    );
    assert!(
        told.is_ok(),
        "the holder kept its lock on unacknowledged renewals"
    );
    assert_eq!(guard.lost_reason(), Some(distlock::LostReason::Expired));
    assert!(
        after >= lease * 9 / 10,
        "told {after:?} after the grant, before the lease of {lease:?} ended"
    );
    assert_eq!(in_redis, 1, "the master renewed it all along");
}
