//! Redlock over five independent masters: majority grants, every failure mask,
//! minority and majority outages.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError};
use distlock_testkit::{History, RedisServer};
use tokio::time::Instant;

fn five() -> Vec<RedisServer> {
    distlock_testkit::start_many(5).expect("start five servers")
}

async fn redlock(nodes: &[RedisServer], lease: Duration) -> LockClient {
    LockClient::builder()
        .redlock(nodes.iter().map(RedisServer::url))
        .default_lease(lease)
        .connect()
        .await
        .expect("connect to the Redlock nodes")
}

/// Whether any node still has a trace of an owner other than `foreign` at `name`.
fn traces(nodes: &[RedisServer], name: &str, foreign: &str) -> Vec<String> {
    let key = support::lock_key(name);
    nodes
        .iter()
        .flat_map(|node| {
            // Each holder is a field of the lock's hash (distlock::layout); a free
            // lock has none.
            support::stored_at(node, &key)
                .holders()
                .keys()
                .filter(|owner| owner.as_str() != foreign)
                .map(|owner| format!("{}: {owner}", node.port()))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_re_enter_on_every_node() {
    let nodes = five();
    let locks = redlock(&nodes, Duration::from_secs(30)).await;
    let guard = locks.lock("order:1").await.expect("lock");
    guard
        .scope(async {
            let inner = locks.lock("order:1").await.expect("re-entry");
            assert_eq!(inner.hold_count(), 2);
            for node in &nodes {
                assert_eq!(support::redis_count(node, "order:1"), 2);
            }
            inner.unlock().await.expect("unlock");
        })
        .await;
    guard.unlock().await.expect("unlock");
    for node in &nodes {
        assert_eq!(support::redis_count(node, "order:1"), 0);
    }

    // Contention on Redlock is covered by tests/backend_parity.rs.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mask_of_foreign_holds_grants_exactly_with_a_free_majority() {
    let nodes = five();
    let locks = redlock(&nodes, Duration::from_secs(30)).await;
    let foreign = "foreign-owner";
    for mask in 0u32..32 {
        let name = format!("mask:{mask}");
        let key = support::lock_key(&name);
        for (index, node) in nodes.iter().enumerate() {
            if mask & (1 << index) != 0 {
                // Another owner holds it there (busy, not a foreign value).
                let fields = support::plain_lock_fields(foreign, "1", "0 1");
                support::write_hash(node, &key, fields, Some(30_000));
            }
        }
        let free = 5 - mask.count_ones();
        let result = locks.lock(&name).wait(Duration::ZERO).await;
        if free >= 3 {
            let guard = result.unwrap_or_else(|err| panic!("mask {mask:05b}: {err}"));
            guard.unlock().await.expect("unlock");
        } else {
            let err = result.expect_err("a foreign owner holds a majority");
            assert!(err.is_busy(), "mask {mask:05b}: {err}");
            match err {
                LockError::QuorumNotReached {
                    got,
                    needed,
                    held_elsewhere,
                    ..
                } => {
                    assert_eq!(got, free as usize, "mask {mask:05b}: grants");
                    assert_eq!(needed, 3, "mask {mask:05b}: majority");
                    assert_eq!(held_elsewhere, 5 - free as usize, "mask {mask:05b}");
                }
                other => panic!("mask {mask:05b}: expected QuorumNotReached, got {other}"),
            }
            // The lock is busy, which try_lock answers with None.
            let tried = locks.try_lock(&name).await.expect("try_lock");
            assert!(tried.is_none(), "mask {mask:05b}: try_lock took it");
        }
        let left = traces(&nodes, &name, foreign);
        assert!(left.is_empty(), "mask {mask:05b} left {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_keeps_working_and_a_majority_down_fails_clearly() {
    let mut nodes = five();
    let lease = Duration::from_millis(900);
    let locks = redlock(&nodes, lease).await;
    nodes[3].stop().expect("kill");
    nodes[4].stop().expect("kill");
    let guard = locks.lock("outage").await.expect("a majority is up");
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "renewed on the majority");
    guard.unlock().await.expect("unlock");

    nodes[2].stop().expect("kill");
    let start = Instant::now();
    let err = locks
        .lock("outage")
        .wait(Duration::from_millis(300))
        .await
        .expect_err("only two of five nodes are up");
    match err {
        LockError::QuorumNotReached {
            got,
            needed,
            held_elsewhere,
            ..
        } => {
            assert_eq!(needed, 3);
            assert!(got <= 2, "got {got}");
            assert_eq!(held_elsewhere, 0, "an outage, not contention");
        }
        other => panic!("expected QuorumNotReached, got {other}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "failed in {:?}",
        start.elapsed()
    );
    for node in &nodes[..2] {
        assert_eq!(
            support::redis_count(node, "outage"),
            0,
            "grants were given back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_on_the_majority_and_reports_the_loss() {
    let nodes = five();
    let lease = Duration::from_millis(900);
    let locks = redlock(&nodes, lease).await;
    let guard = locks.lock("renewed").await.expect("lock");
    tokio::time::sleep(lease * 3).await;
    assert!(!guard.is_lost());
    let key = support::lock_key("renewed");
    // Take it away from a majority, behind the client's back.
    for node in &nodes[..3] {
        node.cmd(&["DEL", &key]).expect("DEL");
    }
    tokio::time::timeout(lease / 3 + Duration::from_millis(500), guard.lost())
        .await
        .expect("the loss is reported");
    assert!(guard.unlock().await.expect_err("lost").is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_is_refused_on_redlock_before_anything_is_sent() {
    let nodes = five();
    let err = LockClient::builder()
        .redlock(nodes.iter().map(RedisServer::url))
        .fencing(true)
        .connect()
        .await
        .expect_err("no fencing on Redlock");
    assert!(
        matches!(
            err,
            LockError::InvalidOption {
                option: "fencing",
                ..
            }
        ),
        "{err}"
    );
    let locks = redlock(&nodes, Duration::from_secs(30)).await;
    let err = locks.lock("f").fencing(true).await.expect_err("no fencing");
    assert!(
        matches!(
            err,
            LockError::InvalidOption {
                option: "fencing",
                ..
            }
        ),
        "{err}"
    );
    for node in &nodes {
        assert_eq!(node.cmd(&["DBSIZE"]).expect("DBSIZE"), "0");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_restarted_empty_at_once_shows_the_hazard() {
    let mut nodes = five();
    let holder = redlock(&nodes, Duration::from_secs(3)).await;
    let other = redlock(&nodes, Duration::from_secs(3)).await;
    let guard = holder.lock("hazard").await.expect("lock");
    // Three nodes crash and come back at once, empty (no persistence): the lock is
    // gone from the majority, and another owner can take it while the first still
    // believes it holds it. This is the documented hazard of Redlock without
    // persistence or delayed restarts. The first holder is told soon (its client
    // sees the replaced servers and checks its holds at once), but that may come
    // after the second owner got the lock: the window between is the hazard.
    // All three are down before any comes back: restarted one after another, the
    // holder's check after each replaced node would write its lock back there
    // (it still held a majority), and there would be no hazard to show.
    for node in &mut nodes[..3] {
        node.stop().expect("crash");
    }
    for node in &mut nodes[..3] {
        node.restart().expect("restart empty");
    }
    let second = other
        .lock("hazard")
        .wait(Duration::from_secs(2))
        .await
        .expect("the majority is free again");
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the first holder is told its lock is gone, within a renewal check");
    assert!(guard.is_lost());
    // Told the cause, whichever renewal finds it: the check after the replaced
    // servers, or a regular renewal that reached them first (observed: `NotHeld`
    // in 3 trials of 5).
    assert_eq!(
        guard.lost_reason(),
        Some(distlock::LostReason::ServerReplaced)
    );
    second.unlock().await.expect("unlock");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_restarted_after_the_lease_never_gives_two_holders() {
    let lease = Duration::from_millis(1500);
    let mut nodes = five();
    let holder = redlock(&nodes, lease).await;
    let other = redlock(&nodes, lease).await;
    let guard = holder.lock("delayed").await.expect("lock");
    for node in &mut nodes[..3] {
        node.stop().expect("crash");
    }
    // While the majority is down nobody can take the lock...
    let err = other
        .lock("delayed")
        .wait(Duration::from_millis(200))
        .await
        .expect_err("no majority");
    assert!(err.is_quorum_not_reached(), "{err}");
    // ...and the holder learns it lost the lock when its lease runs out.
    tokio::time::timeout(lease + Duration::from_millis(500), guard.lost())
        .await
        .expect("the holder is told");
    // The crashed nodes come back only after the lease, so the second holder below
    // starts after the first was told: no overlap is possible.
    tokio::time::sleep(lease).await;
    for node in &mut nodes[..3] {
        node.restart().expect("restart empty");
    }
    let second = other
        .lock("delayed")
        .wait(Duration::from_secs(5))
        .await
        .expect("acquired after the restart");
    second.unlock().await.expect("unlock");
    assert!(guard.unlock().await.expect_err("lost").is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_local_waiter_though_every_node_announces_it() {
    let nodes = five();
    let holder = redlock(&nodes, Duration::from_secs(30)).await;
    let waiters = redlock(&nodes, Duration::from_secs(30)).await;
    let guard = holder.lock("handoff").await.expect("lock");
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let waiters = waiters.clone();
        tasks.push(tokio::spawn(async move {
            let guard = waiters
                .lock("handoff")
                .wait(Duration::from_secs(20))
                .await
                .expect("lock");
            tokio::time::sleep(Duration::from_millis(700)).await;
            guard.unlock().await.expect("unlock");
        }));
    }
    assert!(
        support::eventually(Duration::from_secs(2), || support::channel_subscribers(
            &nodes[0], "handoff"
        ) == 1)
        .await,
        "the waiters' client subscribed"
    );
    // Let every waiter's first attempts come back.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let before = support::script_calls(&nodes[0]);
    guard.unlock().await.expect("unlock");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        support::script_calls(&nodes[0]) - before,
        2,
        "the release, then one waiter's attempt: five nodes' messages woke one waiter"
    );
    for task in tasks {
        task.await.expect("waiter");
    }
}

/// Seen under load: the first node's release message woke the waiter, whose attempt
/// reached nodes that had not run the release yet: a minority of grants, given
/// back, and a retry (4 script calls on a node where 2 do). A release is now heard
/// once a quorum of nodes announced it; fewer wake the waiter only after a grace
/// (a node that never held the lock, or is down, announces nothing). The messages
/// here are published by hand while the lock is still held, so every attempt
/// shows as a script call that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_once_a_quorum_of_nodes_announced_it() {
    let nodes = five();
    let holder = redlock(&nodes, Duration::from_secs(30)).await;
    let waiters = redlock(&nodes, Duration::from_secs(30)).await;
    let guard = holder.lock("announce").await.expect("lock");
    let waiter = support::wait_then_release(
        waiters,
        "announce",
        Duration::from_secs(20),
        &Arc::new(History::new()),
        "the waiter gets the lock after the real release",
    );
    let subscribed = support::eventually(Duration::from_secs(2), || {
        nodes
            .iter()
            .all(|node| support::channel_subscribers(node, "announce") == 1)
    })
    .await;
    assert!(subscribed, "the waiter's client subscribed on every node");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let channel = support::channel_key("announce");
    let announce = |node: &RedisServer, message: &str| {
        node.cmd(&["PUBLISH", &channel, message]).expect("PUBLISH");
    };
    let attempts = || support::script_calls(&nodes[0]);

    let before = attempts();
    announce(&nodes[0], "elsewhere:1");
    announce(&nodes[1], "elsewhere:1");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        attempts(),
        before,
        "two nodes of five announced: no attempt yet"
    );
    announce(&nodes[2], "elsewhere:1");
    let woken = support::eventually(Duration::from_millis(500), || attempts() > before).await;
    assert!(woken, "the third announcement (a quorum) woke the waiter");
    tokio::time::sleep(Duration::from_millis(100)).await;
    announce(&nodes[3], "elsewhere:1");
    announce(&nodes[4], "elsewhere:1");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after_quorum = attempts();
    assert_eq!(after_quorum, before + 1, "one release, one attempt");

    // Two nodes alone (the others never held it, say): heard after the grace.
    announce(&nodes[0], "elsewhere:2");
    announce(&nodes[1], "elsewhere:2");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(attempts(), after_quorum, "not at once");
    let woken = support::eventually(Duration::from_secs(2), || attempts() > after_quorum).await;
    assert!(
        woken,
        "a release that too few nodes announced still wakes the waiter"
    );

    guard.unlock().await.expect("unlock");
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter got the lock after the real release")
        .expect("waiter");
}

/// Observed: a waiter that lost a split vote gave its minority grants back, which
/// published its owner id; when it later won and released, it published the same
/// id, which the client's channel already kept among the releases it had heard,
/// so nobody woke: the next waiter slept a whole lease. Now every release message
/// is unique (owner and operation number).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_a_split_vote_still_wakes_the_next_waiter() {
    let nodes: Vec<RedisServer> = distlock_testkit::start_many(3).expect("three servers");
    let lease = Duration::from_secs(20);
    let locks = redlock(&nodes, lease).await;
    let key = support::lock_key("split");
    // Two other owners hold one node each: every attempt gets one grant of three,
    // gives it back, and tries again.
    for (node, owner) in [(&nodes[1], "x"), (&nodes[2], "y")] {
        let fields = support::plain_lock_fields(owner, "1", "0 1");
        support::write_hash(node, &key, fields, Some(20_000));
    }
    let contend = |locks: LockClient| async move {
        let guard = locks.lock("split").wait(Duration::from_secs(15)).await?;
        let took = Instant::now();
        tokio::time::sleep(Duration::from_millis(100)).await;
        guard.unlock().await?;
        Ok::<_, LockError>(took)
    };
    let first = tokio::spawn(contend(locks.clone()));
    let second = tokio::spawn(contend(locks.clone()));
    // Let both lose some split votes (each gives back, and its release is heard).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grant_backs = support::script_calls(&nodes[0]);
    assert!(
        grant_backs >= 4,
        "{grant_backs} script calls: no split votes yet"
    );
    // The other owners go away without a word: the next attempt wins.
    for node in &nodes[1..] {
        node.cmd(&["DEL", &key]).expect("DEL");
    }
    let started = Instant::now();
    let (a, b) = (first.await.expect("task"), second.await.expect("task"));
    let (a, b) = (a.expect("first acquires"), b.expect("second acquires"));
    let (early, late) = if a < b { (a, b) } else { (b, a) };
    assert!(
        late - early < Duration::from_secs(2),
        "the second acquired {:?} after the first (held 100 ms; the lease is {lease:?})",
        late - early
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The nodes of `nodes` where `owner` holds lock `name`.
fn holding(nodes: &[RedisServer], name: &str, owner: &str) -> usize {
    nodes
        .iter()
        .filter(|node| support::redis_holder(node, name).as_deref() == Some(owner))
        .count()
}

/// Observed (issue 40): renewals never wrote a lock back on a node that came back
/// empty, so restarts spread over time added up to a lost majority: 2 nodes of 5
/// restarted, then 2 more, and the holder was told its lock was gone while another
/// client took it. A renewal that finds the lock free on a node while the holder
/// still has a majority now writes it back there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staggered_restarts_never_add_up_to_a_lost_majority() {
    let mut nodes = five();
    let lease = Duration::from_secs(3);
    let holder = redlock(&nodes, lease).await;
    let other = redlock(&nodes, lease).await;
    let guard = holder.lock("staggered").await.expect("lock");
    let owner = support::redis_holder(&nodes[0], "staggered").expect("held");
    // Another client asks every 20 ms; it must never get the lock while the holder
    // believes it holds it.
    let asking = tokio::spawn({
        let other = other.clone();
        async move {
            loop {
                if let Ok(Some(second)) = other.try_lock("staggered").await {
                    let _ = second.unlock().await;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let mut not_repaired = Vec::new();
    for group in [&[0usize, 1][..], &[2, 3], &[4]] {
        let restarted = Instant::now();
        for &index in group {
            nodes[index].restart().expect("restart empty");
        }
        // Written back on every node within a few renewal periods (the other client's
        // minority grants, given back at once, may hold up a write-back for one).
        let repaired = support::eventually(lease * 2, || {
            holding(&nodes, "staggered", &owner) == nodes.len() || guard.is_lost()
        })
        .await;
        println!(
            "restarted {group:?}: {} (on {} of 5 nodes {:?} later)",
            if guard.is_lost() {
                format!("the holder was told {:?}", guard.lost_reason())
            } else {
                "the holder keeps its lock".to_owned()
            },
            holding(&nodes, "staggered", &owner),
            restarted.elapsed()
        );
        assert!(
            !guard.is_lost(),
            "the holder lost its lock ({:?}) after restarting {group:?}",
            guard.lost_reason()
        );
        assert!(!asking.is_finished(), "the other client got the lock");
        not_repaired.extend((!repaired).then_some(group));
    }
    assert!(
        not_repaired.is_empty(),
        "not written back on every node after restarting {not_repaired:?}"
    );
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let second = other
        .lock("staggered")
        .wait(Duration::from_secs(5))
        .await
        .expect("the other client gets it after the release");
    assert!(released.elapsed() < lease, "the release freed every node");
    second.unlock().await.expect("unlock");
    asking.abort();
}
