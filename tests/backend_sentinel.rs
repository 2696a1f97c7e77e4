//! The lock behind Redis Sentinel: the client follows the master through failovers
//! and never keeps writing to a demoted one.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard, LostReason};
use distlock_testkit::{monotonic_ns, RedisServer, SentinelGroup};
use tokio::time::Instant;

fn group() -> SentinelGroup {
    SentinelGroup::start("locks", 1, 3).expect("start a Sentinel group")
}

async fn client(group: &SentinelGroup, lease: Duration) -> LockClient {
    LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .default_lease(lease)
        .connect()
        .await
        .expect("connect through the Sentinels")
}

/// As [`client`], with `replicas(1, ack)`: acquisitions and renewals count once
/// one replica acknowledged them.
async fn replicated_client(group: &SentinelGroup, lease: Duration, ack: Duration) -> LockClient {
    LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .default_lease(lease)
        .replicas(1, ack)
        .connect()
        .await
        .expect("connect through the Sentinels")
}

/// Asserts that the client moved from `old` to `master` within 5 s: its
/// connections reach `master`, and its subscriber connection has left `old`. The
/// client dials the new master before it switches to it, so connections on the new
/// master alone do not yet mean that requests go there.
async fn assert_moved(old: &RedisServer, master: &RedisServer) {
    let subscribed = |node: &RedisServer| {
        support::client_connections(node)
            .iter()
            .any(|line| support::field(line, "resp") == Some("3"))
    };
    let moved = support::eventually(Duration::from_secs(5), || {
        has_the_client(master) && !subscribed(old)
    })
    .await;
    assert!(
        moved,
        "the client did not move to the new master within 5 s of the switch; on it: {:?}; \
         on the old one: {:?}",
        support::client_connections(master),
        support::client_connections(old)
    );
}

/// Fails the master (at `old_port`) over with `SENTINEL FAILOVER`, waits until the
/// Sentinels name another one, and returns its index among the data nodes.
fn fail_over(group: &SentinelGroup, old_port: u16) -> usize {
    group.failover().expect("SENTINEL FAILOVER");
    let new_port = group
        .wait_for_master_change(old_port, Duration::from_secs(20))
        .expect("a new master");
    group
        .data_nodes()
        .iter()
        .position(|node| node.port() == new_port)
        .expect("the new master is one of ours")
}

/// Whether the lock client's connections are on `node`: its subscriber
/// connection (the only one that speaks RESP3 to a data node) and a command
/// connection (RESP2).
fn has_the_client(node: &RedisServer) -> bool {
    let connections = support::client_connections(node);
    let speaks = |resp| {
        connections
            .iter()
            .any(|line| support::field(line, "resp") == Some(resp))
    };
    speaks("3") && speaks("2")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_failover_moves_an_idle_client_to_the_new_master() {
    let group = group();
    let locks = client(&group, Duration::from_secs(8)).await;
    let old = group.current_master_index().expect("a master");
    let old_port = group.data_nodes()[old].port();
    assert!(
        has_the_client(&group.data_nodes()[old]),
        "the client is on the master: {:?}",
        support::client_connections(&group.data_nodes()[old])
    );

    let new = fail_over(&group, old_port);

    // No lock operation goes through the client: only the Sentinels'
    // `+switch-master` can tell it. The old master keeps answering as a master
    // for several seconds more (the Sentinels demote it about 8 s after the
    // switch), so no request of the client would fail before then either.
    assert_moved(&group.data_nodes()[old], &group.data_nodes()[new]).await;

    // And it works there.
    let guard = locks
        .lock("after")
        .wait(Duration::from_secs(5))
        .await
        .expect("lock on the new master");
    assert_eq!(support::redis_count(&group.data_nodes()[new], "after"), 1);
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_keeps_held_locks_wakes_waiters_and_leaves_the_demoted_master_alone() {
    let group = group();
    let lease = Duration::from_secs(8);
    // Acquires and renewals count once the replica has them: a renewal that only
    // reached the old master in the moment of the switch does not extend the lease
    // the holder counts on.
    let holder = replicated_client(&group, lease, Duration::from_millis(200)).await;
    let waiter = client(&group, lease).await;
    let old = group.current_master_index().expect("a master");

    let guard = holder.lock("order:1").await.expect("lock");
    guard
        .scope(async {
            let inner = holder.lock("order:1").await.expect("re-entry");
            assert_eq!(support::redis_count(&group.data_nodes()[old], "order:1"), 2);
            inner.unlock().await.expect("unlock");
        })
        .await;
    // When (if ever) the holder is told that it lost the lock.
    let lost_at = tokio::spawn({
        let lost = guard.lost();
        async move {
            tokio::time::timeout(Duration::from_secs(40), lost)
                .await
                .ok()
                .map(|()| Instant::now())
        }
    });
    let waiting = support::acquired_at(&waiter, "order:1", Duration::from_secs(30));

    let new = fail_over(&group, group.data_nodes()[old].port());

    // Once the old master is demoted, it refuses writes (READONLY): the client must
    // notice, find the new master through the Sentinels and carry on there.
    let demoted = support::eventually(Duration::from_secs(15), || {
        group.data_nodes()[old]
            .cmd(&["INFO", "replication"])
            .map(|info| info.contains("role:slave"))
            .unwrap_or(false)
    })
    .await;
    assert!(demoted, "the old master became a replica");

    // The client moves within a bounded time: a new lock works on the new master.
    let start = Instant::now();
    // (The waiter's client asks no replica acknowledgement: right after the switch
    // the demoted node is still catching up as the new master's replica.)
    let probe = waiter
        .lock("probe")
        .wait(Duration::from_secs(15))
        .await
        .expect("locks work after the failover");
    assert!(start.elapsed() < Duration::from_secs(15));
    assert_eq!(support::redis_count(&group.data_nodes()[new], "probe"), 1);
    probe.unlock().await.expect("unlock");

    // From now on nothing reaches the demoted master as a client command.
    let before = support::script_calls(&group.data_nodes()[old]);
    let more = waiter.lock("more").await.expect("lock");
    more.unlock().await.expect("unlock");

    // The held lock survived the planned failover, or the holder was told: never
    // a second holder while the first believes it holds the lock.
    let released = Instant::now();
    let kept = guard.unlock().await;
    let acquired = waiting.await.expect("join").expect("the waiter acquired");
    let told = lost_at.await.expect("join");
    match (kept, told) {
        (Ok(()), _) => assert!(acquired >= released, "the waiter got in before the release"),
        // The switch outlasted the lease: the holder could not confirm its lock,
        // and was told so before anyone else could take it.
        (Err(err), Some(told)) => {
            assert!(err.is_lost(), "{err}");
            assert!(
                acquired >= told,
                "the waiter got in before the holder was told"
            );
        }
        (Err(err), None) => panic!("unlock failed without a loss being reported: {err}"),
    }
    assert!(
        acquired.saturating_duration_since(released) < lease,
        "the waiter woke {:?} after the release",
        acquired.saturating_duration_since(released)
    );
    assert_eq!(
        support::script_calls(&group.data_nodes()[old]),
        before,
        "a script ran on the demoted master"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_replaced_and_the_client_continues() {
    let mut group = group();
    let locks = client(&group, Duration::from_secs(3)).await;
    let guard = locks.lock("before").await.expect("lock");
    guard.unlock().await.expect("unlock");

    let old = group.current_master_index().expect("a master");
    let old_port = group.data_nodes()[old].port();
    group.data_node_mut(old).stop().expect("SIGKILL the master");
    group
        .wait_for_master_change(old_port, Duration::from_secs(30))
        .expect("a new master");
    let start = Instant::now();
    let guard = locks
        .lock("after")
        .wait(Duration::from_secs(20))
        .await
        .expect("the client moved to the new master");
    assert!(start.elapsed() < Duration::from_secs(20));
    guard.unlock().await.expect("unlock");
}

/// The `requirepass` (and `masterauth`) of the data nodes in the tests below.
const PASSWORD: &str = "s3cret-node-pass";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_nodes_that_require_a_password_are_dialed_with_it_before_and_after_a_failover() {
    let group = SentinelGroup::start_with_password("locks", 1, 3, PASSWORD)
        .expect("start a Sentinel group whose data nodes require a password");

    // The Sentinels answer without a password; the master they name does not.
    let start = Instant::now();
    let err = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .connect()
        .await
        .expect_err("the master requires a password that was not given");
    assert!(err.is_redis(), "{err}");
    assert!(
        err.to_string().contains("sentinel_node_password"),
        "the error names the option to set: {err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "a refused password fails at once, not at the connect timeout ({:?})",
        start.elapsed()
    );
    // The same with another database: redis-rs reports the refused SELECT in words
    // of its own, and the hint still names the option.
    let err = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .sentinel_node_db(3)
        .connect()
        .await
        .expect_err("the master requires a password that was not given");
    assert!(
        err.to_string().contains("sentinel_node_password"),
        "the error names the option to set: {err}"
    );

    // A wrong password is told apart from a missing one.
    let err = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .sentinel_node_password("not-the-password")
        .connect()
        .await
        .expect_err("a wrong password");
    assert!(
        err.to_string()
            .contains("refused the credentials given with `.sentinel_node_password(..)`"),
        "{err}"
    );
    assert!(!err.to_string().contains("not-the-password"), "{err}");

    let builder = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .sentinel_node_password(PASSWORD)
        .default_lease(Duration::from_secs(8));
    assert!(
        !format!("{builder:?}").contains(PASSWORD),
        "the password shows in {builder:?}"
    );
    let locks = builder
        .clone()
        .connect()
        .await
        .expect("connect with the data nodes' password");
    let old = group.current_master_index().expect("a master");
    // Both connections, the RESP3 subscriber included, got past `requirepass`.
    assert!(
        has_the_client(&group.data_nodes()[old]),
        "the client is on the master: {:?}",
        support::client_connections(&group.data_nodes()[old])
    );
    let guard = locks.lock("before").await.expect("lock");
    assert_eq!(support::redis_count(&group.data_nodes()[old], "before"), 1);
    guard.unlock().await.expect("unlock");

    let new = fail_over(&group, group.data_nodes()[old].port());

    // The new master is dialed with the password too: both connections move.
    assert_moved(&group.data_nodes()[old], &group.data_nodes()[new]).await;

    // Locks work there, and a waiter is woken through the new subscriber connection.
    let other = builder.connect().await.expect("a second client");
    let guard = locks
        .lock("after")
        .wait(Duration::from_secs(5))
        .await
        .expect("lock on the new master");
    assert_eq!(support::redis_count(&group.data_nodes()[new], "after"), 1);
    let waiting = support::acquired_at(&other, "after", Duration::from_secs(6));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let acquired = waiting.await.expect("join").expect("the waiter acquired");
    assert!(
        acquired.saturating_duration_since(released) < Duration::from_secs(2),
        "the waiter woke {:?} after the release (the lease is 8 s)",
        acquired.saturating_duration_since(released)
    );
}

#[tokio::test]
async fn bad_sentinel_node_settings_are_refused_before_anything_is_sent() {
    // Nothing listens on these: an error other than `InvalidOption` would mean a
    // connection was tried.
    let sentinels = ["redis://127.0.0.1:1"];
    let invalid = |err: LockError| match err {
        LockError::InvalidOption { option, reason, .. } => (option, reason),
        other => panic!("not an invalid option: {other}"),
    };

    let err = LockClient::builder()
        .sentinel(sentinels, "locks")
        .sentinel_node_password("")
        .connect()
        .await
        .expect_err("an empty password");
    let (option, reason) = invalid(err);
    assert_eq!(option, "sentinel_node_password");
    assert!(reason.contains("empty"), "{reason}");

    let err = LockClient::builder()
        .sentinel(sentinels, "locks")
        .sentinel_node_auth("", PASSWORD)
        .connect()
        .await
        .expect_err("an empty user name");
    let (option, reason) = invalid(err);
    assert_eq!(option, "sentinel_node_auth");
    assert!(reason.contains("user name"), "{reason}");
    assert!(!reason.contains(PASSWORD), "{reason}");

    let err = LockClient::builder()
        .sentinel(sentinels, "locks")
        .sentinel_node_auth("locks", "")
        .connect()
        .await
        .expect_err("an empty password");
    assert_eq!(invalid(err).0, "sentinel_node_auth");

    // The data-node settings belong to Sentinel; elsewhere they go in the URLs.
    for (builder, expected) in [
        (
            LockClient::builder().sentinel_node_password(PASSWORD),
            "sentinel_node_password",
        ),
        (
            LockClient::builder().sentinel_node_auth("locks", PASSWORD),
            "sentinel_node_auth",
        ),
        (
            LockClient::builder().sentinel_node_tls(true),
            "sentinel_node_tls",
        ),
        (
            LockClient::builder().sentinel_node_db(2),
            "sentinel_node_db",
        ),
    ] {
        assert!(!format!("{builder:?}").contains(PASSWORD), "{builder:?}");
        let err = builder
            .url("redis://127.0.0.1:1")
            .connect()
            .await
            .expect_err("a Sentinel setting on a single server");
        let (option, reason) = invalid(err);
        assert_eq!(option, expected);
        assert!(reason.contains("sentinel("), "{reason}");
    }
}

/// The ACL user the lock client logs in as on the data nodes, and its password.
const LOCK_USER: &str = "locks";
const LOCK_USER_PASSWORD: &str = "s3cret-lock-user";

/// What the lock user needs beyond [`support::LOCK_USER_ACL`] behind Sentinel:
/// `+role` (the client checks the master), and `+select` (a database other than 0
/// is chosen with `SELECT` on each connection).
const SENTINEL_EXTRA_RULES: &[&str] = &["+role", "+select"];

/// The hold count of lock `name` in database `db` of `node` (whose `default` user
/// has [`PASSWORD`]), read over a connection of its own.
async fn count_in_db(node: &RedisServer, db: u32, name: &str) -> u64 {
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{}/{db}", node.port());
    let mut conn = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the data node");
    support::stored_over(&mut conn, &support::lock_key(name))
        .await
        .total()
}

/// Whether every connection of the lock client on `node` is logged in as
/// [`LOCK_USER`] and uses database `db`, and there are some.
fn the_client_is(node: &RedisServer, user: &str, db: &str) -> bool {
    let connections = support::client_connections(node);
    !connections.is_empty()
        && connections.iter().all(|line| {
            support::field(line, "user") == Some(user) && support::field(line, "db") == Some(db)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_and_a_database_are_used_on_the_data_nodes_before_and_after_a_failover() {
    let group = SentinelGroup::start_with_password("locks", 1, 3, PASSWORD)
        .expect("start a Sentinel group whose data nodes require a password");
    // `ACL SETUSER` is not replicated: the user goes on every node that may become
    // the master.
    for node in group.data_nodes() {
        let secret = format!(">{LOCK_USER_PASSWORD}");
        let mut args = vec!["ACL", "SETUSER", LOCK_USER, "reset", "on", &secret];
        args.extend_from_slice(support::LOCK_USER_ACL);
        args.extend_from_slice(SENTINEL_EXTRA_RULES);
        assert_eq!(node.cmd(&args).expect("ACL SETUSER"), "OK");
    }

    let builder = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .sentinel_node_auth(LOCK_USER, LOCK_USER_PASSWORD)
        .sentinel_node_db(3)
        .default_lease(Duration::from_secs(8));
    assert!(
        !format!("{builder:?}").contains(LOCK_USER_PASSWORD),
        "the password shows in {builder:?}"
    );
    let locks = builder.connect().await.expect("connect as the ACL user");
    let old = group.current_master_index().expect("a master");
    let master = &group.data_nodes()[old];
    assert!(
        has_the_client(master) && the_client_is(master, LOCK_USER, "3"),
        "the client's connections are on the master as {LOCK_USER:?} in db 3: {:?}",
        support::client_connections(master)
    );
    let guard = locks.lock("before").await.expect("lock");
    assert_eq!(count_in_db(master, 3, "before").await, 1, "held in db 3");
    assert_eq!(count_in_db(master, 0, "before").await, 0, "nothing in db 0");
    guard.unlock().await.expect("unlock");
    assert_eq!(count_in_db(master, 3, "before").await, 0, "released");

    let new = fail_over(&group, master.port());
    let master = &group.data_nodes()[new];

    // The new master is dialed as the same user, in the same database.
    let moved = support::eventually(Duration::from_secs(5), || {
        has_the_client(master) && the_client_is(master, LOCK_USER, "3")
    })
    .await;
    assert!(
        moved,
        "the client did not move to the new master as {LOCK_USER:?} in db 3 within 5 s of \
         the switch; on it: {:?}",
        support::client_connections(master)
    );
    let guard = locks
        .lock("after")
        .wait(Duration::from_secs(5))
        .await
        .expect("lock on the new master");
    guard
        .scope(async {
            let inner = locks.lock("after").await.expect("re-entry");
            assert_eq!(count_in_db(master, 3, "after").await, 2, "held in db 3");
            assert_eq!(count_in_db(master, 0, "after").await, 0, "nothing in db 0");
            inner.unlock().await.expect("unlock");
        })
        .await;
    guard.unlock().await.expect("unlock");
    assert_eq!(count_in_db(master, 3, "after").await, 0, "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_that_names_another_master_is_outvoted() {
    let group = group();
    // A lone Sentinel watching another master under the same name stands for one
    // that lags behind a failover: listed first, it answers first.
    let stray = SentinelGroup::start("locks", 0, 1).expect("start a stray Sentinel");
    let mut sentinels = stray.sentinel_urls();
    sentinels.extend(group.sentinel_urls());
    let locks = LockClient::builder()
        .sentinel(sentinels, "locks")
        .connect()
        .await
        .expect("connect through the Sentinels");

    let guard = locks.lock("voted").await.expect("lock");
    let master = group.current_master_index().expect("a master");
    assert_eq!(
        support::redis_count(&group.data_nodes()[master], "voted"),
        1,
        "the lock is on the master that three of the four Sentinels name"
    );
    let stray_master = stray.current_master_index().expect("the stray master");
    assert_eq!(
        support::redis_count(&stray.data_nodes()[stray_master], "voted"),
        0,
        "nothing reached the master that one Sentinel names"
    );
    guard.unlock().await.expect("unlock");

    // One against one: no majority, a clear error rather than a guess.
    let mut even = stray.sentinel_urls();
    even.extend(group.sentinel_urls().into_iter().take(1));
    let err = LockClient::builder()
        .sentinel(even, "locks")
        .connect()
        .await
        .expect_err("the Sentinels disagree");
    assert!(err.to_string().contains("do not agree"), "{err}");
}

/// Makes the replica at `replica` miss every write from now on, while the master
/// at `master` takes them: the replica is frozen (`SIGSTOP`) and its replication
/// link cut, so that nothing waits for it in a socket buffer. Once the master can
/// no longer answer (frozen or killed), [`rejoin`] lets the replica run again: it
/// cannot fetch what it missed, and the Sentinels may promote it.
fn cut_off(group: &SentinelGroup, master: usize, replica: usize) {
    group.data_nodes()[replica]
        .pause()
        .expect("SIGSTOP the replica");
    group.data_nodes()[master]
        .cmd(&["CLIENT", "KILL", "TYPE", "replica"])
        .expect("cut the replication link");
}

/// Lets the replica that [`cut_off`] froze run again.
fn rejoin(group: &SentinelGroup, replica: usize) {
    group.data_nodes()[replica]
        .resume()
        .expect("SIGCONT the replica");
}

/// Polls `CLIENT LIST` of `node` every 5 ms, up to 30 s, until the lock client's
/// connections are on it, and returns that moment (in [`monotonic_ns`]): when the
/// client moved there, give or take the poll. It blocks the test's own thread;
/// the clients run on the runtime's workers meanwhile.
fn moved_to(node: &RedisServer) -> Option<u64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if has_the_client(node) {
            return Some(monotonic_ns());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Spawns another call chain of `client` (a new owner: not in any guard's scope)
/// that asks for `name` within `wait`; its output is the moment it was granted
/// and whether every guard of `watched` was lost by then.
fn granted_after(
    client: &LockClient,
    name: &str,
    wait: Duration,
    watched: Vec<Arc<LockGuard>>,
) -> tokio::task::JoinHandle<(u64, bool)> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = client
            .lock(name.as_str())
            .wait(wait)
            .await
            .expect("granted on the new master");
        let at = monotonic_ns();
        let all_lost = watched.iter().all(|held| held.is_lost());
        guard.unlock().await.expect("unlock");
        (at, all_lost)
    })
}

/// The moment (in [`monotonic_ns`]) `guard` is told it lost its lock.
fn told_at(guard: &LockGuard) -> tokio::task::JoinHandle<u64> {
    let lost = guard.lost();
    tokio::spawn(async move {
        lost.await;
        monotonic_ns()
    })
}

/// Milliseconds from `from` to `to` (in [`monotonic_ns`]), signed.
fn ms(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}

/// Issue 39 (2): the master freezes (a partition) while a renewal to it is in
/// flight; the replica the Sentinels promote never had the holder's lock. The
/// holder must be told `ServerReplaced` as soon as its client moves to the new
/// master, not once the renewal to the frozen one gives up; and another call chain
/// of the same client is granted the name there only after that.
///
/// The holder's response timeout (6 s) is longer than its renewal period (5 s), so
/// from the first renewal after the freeze on, a renewal is always waiting on the
/// frozen master when the client moves. Observed before the fix: the holder was
/// told 2586, 2620 and 2614 ms after its client moved (the rest of that round), in
/// three runs of three; after, within a few ms. (With the default 500 ms the outside
/// review saw +4 to +474 ms, depending on where the round stood.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_s_holds_are_checked_on_the_new_master_at_once() {
    let group = SentinelGroup::start("locks", 1, 3).expect("start a Sentinel group");
    let lease = Duration::from_secs(15);
    let holder = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .default_lease(lease)
        .response_timeout(Duration::from_secs(6))
        .connect()
        .await
        .expect("connect through the Sentinels");
    let old = group.current_master_index().expect("a master");
    let new = 1 - old;
    cut_off(&group, old, new);
    let taken = Instant::now();
    let guard = Arc::new(holder.lock("frozen").await.expect("lock"));
    let told = told_at(&guard);
    // Just before the first renewal (at a third of the lease), which then waits on
    // the frozen master.
    tokio::time::sleep_until(taken + lease / 3 - Duration::from_millis(300)).await;
    group.data_nodes()[old].pause().expect("SIGSTOP the master");
    let frozen = monotonic_ns();
    rejoin(&group, new);

    let moved =
        moved_to(&group.data_nodes()[new]).expect("the client moved to the new master within 30 s");
    // The poll may see the new connections a moment before the client swaps to
    // them: a request sent then waits on the frozen master for the response
    // timeout (6 s), and asks again on the new one.
    let again = granted_after(
        &holder,
        "frozen",
        Duration::from_secs(20),
        vec![guard.clone()],
    );
    let told = tokio::time::timeout(Duration::from_secs(20), told)
        .await
        .expect("the holder is told within 20 s of the move")
        .expect("the watching task");
    let (granted, lost_first) = again.await.expect("the second chain's task");
    let delay = ms(moved, told);
    println!(
        "the client moved {:.1} ms after the freeze; the holder was told {delay:.1} ms after \
         the move ({:?}); another chain of its client granted {:.1} ms after the move (told \
         first: {lost_first})",
        ms(frozen, moved),
        guard.lost_reason(),
        ms(moved, granted),
    );
    support::summary(
        "sentinel_frozen_master_check",
        &[
            ("told_after_move_ms", told.saturating_sub(moved) / 1_000_000),
            ("same_client_grant_before_told", u64::from(!lost_first)),
        ],
    );
    assert_eq!(guard.lost_reason(), Some(LostReason::ServerReplaced));
    assert!(
        lost_first,
        "another chain of the holder's client was granted before the holder was told"
    );
    assert!(
        delay < 150.0,
        "the holder was told {delay:.1} ms after its client moved to the new master \
         (behind a renewal still waiting on the frozen one)"
    );
}

/// Issue 39 (tests): the replacement check on Sentinel. The master dies; the
/// replica promoted never had the holder's 20 locks. Every hold is lost with
/// `ServerReplaced`, and neither a chain of the same client asking for one of the
/// held names nor one asking for a name nobody held is granted anything on the new
/// master before all of them were told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_master_without_the_locks_tells_every_holder_before_a_grant() {
    let mut group = SentinelGroup::start("locks", 1, 3).expect("start a Sentinel group");
    let holder = client(&group, Duration::from_secs(15)).await;
    let old = group.current_master_index().expect("a master");
    let new = 1 - old;
    cut_off(&group, old, new);
    let mut guards = Vec::new();
    for index in 0..20 {
        let name = format!("gone:{index}");
        guards.push(Arc::new(holder.lock(name.as_str()).await.expect("lock")));
    }
    let told: Vec<_> = guards.iter().map(|guard| told_at(guard)).collect();
    group.data_node_mut(old).stop().expect("SIGKILL the master");
    let killed = monotonic_ns();
    rejoin(&group, new);
    // Both ask while the master is down, and again until the client moved.
    let wait = Duration::from_secs(30);
    let held_name = granted_after(&holder, "gone:0", wait, guards.clone());
    let fresh_name = granted_after(&holder, "fresh", wait, guards.clone());

    let moved =
        moved_to(&group.data_nodes()[new]).expect("the client moved to the new master within 30 s");
    let mut last_told = 0;
    for told in told {
        let at = tokio::time::timeout(Duration::from_secs(20), told)
            .await
            .expect("every holder is told within 20 s of the move")
            .expect("the watching task");
        last_told = last_told.max(at);
    }
    let (held_at, held_after) = held_name.await.expect("the chain asking for gone:0");
    let (fresh_at, fresh_after) = fresh_name.await.expect("the chain asking for fresh");
    println!(
        "the client moved {:.1} ms after the kill; the last holder was told {:.1} ms after the \
         move; gone:0 granted again {:.1} ms after (all told first: {held_after}), fresh \
         {:.1} ms after (all told first: {fresh_after})",
        ms(killed, moved),
        ms(moved, last_told),
        ms(moved, held_at),
        ms(moved, fresh_at),
    );
    let reasons: Vec<_> = guards.iter().map(|guard| guard.lost_reason()).collect();
    assert!(
        reasons
            .iter()
            .all(|reason| *reason == Some(LostReason::ServerReplaced)),
        "every hold is lost for the replaced server: {reasons:?}"
    );
    assert!(
        held_after,
        "a held name was granted again before every holder was told"
    );
    assert!(
        fresh_after,
        "a new name was granted on the new master before every holder was told"
    );
    assert!(
        ms(moved, last_told) < 2000.0,
        "the last holder was told {:.1} ms after the client moved",
        ms(moved, last_told)
    );
}

/// Asks for lock `name` on `client` every 20 ms (`try_lock`) until it is granted, up
/// to `limit`; the task's output is the moment it was (the lock is given back).
fn try_every_20ms(
    client: &LockClient,
    name: &'static str,
    limit: Duration,
) -> tokio::task::JoinHandle<Option<Instant>> {
    let client = client.clone();
    tokio::spawn(async move {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Ok(Some(guard)) = client.try_lock(name).await {
                let at = Instant::now();
                let _ = guard.unlock().await;
                return Some(at);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    })
}

/// Observed (issue 39, row 3): the holder's client asks for one replica's
/// acknowledgement; its lock reached replica 2 only (replica 1 was frozen); the
/// master and replica 2 die and replica 1, without the lock, is promoted. The new
/// master has no replica, so `WAIT 1` answered 0 to the check after the switch,
/// and its "not held" answer was dropped with it: the holder was told only when its
/// own lease ran out (`Expired`, 7.9 s), while another client held the lock for
/// 4.6 s. A "not held" answer counts whatever the acknowledgements: the holder is
/// told at the switch (`ServerReplaced`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_without_the_lock_is_told_at_the_switch_whatever_the_acks() {
    let mut group = SentinelGroup::start("locks", 2, 3).expect("start a Sentinel group");
    let lease = Duration::from_secs(8);
    let holder = replicated_client(&group, lease, Duration::from_millis(100)).await;
    let other = client(&group, lease).await;
    let old = group.current_master_index().expect("a master");
    let (promoted, acked) = match old {
        0 => (1, 2),
        _ => panic!("the first data node is the master at the start, not {old}"),
    };

    // The replica that will be promoted misses the lock; the other acknowledges it.
    // Frozen, it would still read what the master had sent it before it died: the
    // master drops the link first (both replicas' links; only replica 2, awake,
    // comes back).
    let master = &group.data_nodes()[old];
    group.data_nodes()[promoted]
        .pause()
        .expect("SIGSTOP replica 1");
    master
        .cmd(&["CLIENT", "KILL", "TYPE", "replica"])
        .expect("CLIENT KILL TYPE replica");
    let relinked = support::eventually(Duration::from_secs(10), || {
        master
            .cmd(&["INFO", "replication"])
            .is_ok_and(|info| info.contains("connected_slaves:1"))
    })
    .await;
    assert!(relinked, "replica 2 linked to the master again");
    let guard = holder
        .lock("row3")
        .await
        .expect("acknowledged by replica 2");
    assert_eq!(support::redis_count(&group.data_nodes()[acked], "row3"), 1);
    let told = tokio::spawn({
        let lost = guard.lost();
        async move {
            tokio::time::timeout(Duration::from_secs(40), lost)
                .await
                .ok()
                .map(|()| Instant::now())
        }
    });
    let granted = try_every_20ms(&other, "row3", Duration::from_secs(40));

    let old_port = group.data_nodes()[old].port();
    let killed = Instant::now();
    group.data_node_mut(old).stop().expect("SIGKILL the master");
    group
        .data_node_mut(acked)
        .stop()
        .expect("SIGKILL replica 2");
    group.data_nodes()[promoted]
        .resume()
        .expect("SIGCONT replica 1");
    let group = std::sync::Arc::new(group);
    let named = tokio::task::spawn_blocking({
        let group = group.clone();
        move || group.wait_for_master_change(old_port, Duration::from_secs(30))
    })
    .await
    .expect("join")
    .expect("a new master");
    let named_at = Instant::now();
    assert_eq!(named, group.data_nodes()[promoted].port());

    let told = told
        .await
        .expect("join")
        .expect("the holder was never told");
    let granted = granted
        .await
        .expect("join")
        .expect("the other client got the lock");
    let since = |at: Instant| at.saturating_duration_since(killed);
    println!(
        "after the kill: new master named {:?}, holder told {:?} ({:?}), other client granted {:?}",
        since(named_at),
        since(told),
        guard.lost_reason(),
        since(granted)
    );
    assert_eq!(
        guard.lost_reason(),
        Some(distlock::LostReason::ServerReplaced)
    );
    // At the switch, not when its lease runs out: within one renewal period of the
    // Sentinels naming the new master (the check after the switch may still wait
    // behind a renewal in flight to the dead master, which is why the other client
    // can, under load, be granted first: issue 39, item 2).
    let period = lease / 3;
    assert!(
        told.saturating_duration_since(named_at) < period,
        "told {:?} after the Sentinels named the new master",
        told.saturating_duration_since(named_at)
    );
    assert!(
        granted + period > told,
        "the other client was granted {:?} before the holder was told",
        told - granted
    );
}

/// Whether `node` (a master) has no replica linked to it.
fn alone(node: &RedisServer) -> bool {
    node.cmd(&["INFO", "replication"])
        .is_ok_and(|info| info.contains("connected_slaves:0"))
}

/// Observed (issue 39, row 5): with `replicas(1, ..)` and the one replica, a clean
/// `SENTINEL FAILOVER` left the new master without a replica for several seconds
/// (until the Sentinels turn the old master into its replica), so no renewal was
/// acknowledged: the holder was told `Expired` when its lease ran out, though every
/// renewal had reached the new master and nobody else could take the lock. A
/// renewal the master answers "held" keeps the hold; only an acknowledged one
/// counts as a whole new lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_failover_to_a_master_without_replicas_costs_no_lock() {
    let group = group();
    let lease = Duration::from_secs(3);
    let holder = replicated_client(&group, lease, Duration::from_millis(100)).await;
    let other = client(&group, lease).await;
    let old = group.current_master_index().expect("a master");
    let guard = holder
        .lock("row5")
        .await
        .expect("acknowledged by the replica");
    let granted = try_every_20ms(&other, "row5", Duration::from_secs(60));

    let switched = Instant::now();
    let new = fail_over(&group, group.data_nodes()[old].port());
    let master = &group.data_nodes()[new];
    // Hold through the time the new master has no replica, and a lease more.
    let mut alone_for = Duration::ZERO;
    let mut seen_alone: Option<Instant> = None;
    let held_until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < held_until && !guard.is_lost() {
        let now = Instant::now();
        if alone(master) {
            let since = *seen_alone.get_or_insert(now);
            alone_for = now - since;
        } else if seen_alone.is_some() && alone_for > lease {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept_for = switched.elapsed();
    println!(
        "the new master had no replica for {alone_for:?}; the holder {} {kept_for:?} after \
         the failover ({:?})",
        if guard.is_lost() {
            "was told of a loss"
        } else {
            "still held its lock"
        },
        guard.lost_reason()
    );
    assert!(
        !guard.is_lost(),
        "the holder lost its lock ({:?}) {kept_for:?} after the failover",
        guard.lost_reason()
    );
    assert!(
        alone_for > lease,
        "the new master had no replica for only {alone_for:?}: not the window this test is about"
    );
    assert!(!granted.is_finished(), "the other client got the lock");
    assert_eq!(
        support::redis_count(master, "row5"),
        1,
        "held on the new master"
    );

    let released = Instant::now();
    guard.unlock().await.expect("unlock");
    let granted = granted
        .await
        .expect("join")
        .expect("the other client gets it after the release");
    assert!(granted >= released, "granted before the release");
}
