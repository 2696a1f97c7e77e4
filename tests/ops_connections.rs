//! Operations: every connection of a client is named after its service (`CLIENT
//! LIST` shows `name=distlock:<service>`), also after it reconnects, on one server
//! and on every master of a cluster; a lost server is logged once when it goes and
//! once when it is back.

mod support;

use std::time::Duration;

use distlock::{LockClient, LockError};
use distlock_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// The `CLIENT LIST` lines of the connections named `name`.
fn named(server: &RedisServer, name: &str) -> Vec<String> {
    let list = server.cmd(&["CLIENT", "LIST"]).expect("CLIENT LIST");
    list.lines()
        .filter(|line| line.split(' ').any(|field| field == format!("name={name}")))
        .map(str::to_owned)
        .collect()
}

/// The `id=` of each `CLIENT LIST` line.
fn ids(lines: &[String]) -> std::collections::HashSet<String> {
    lines
        .iter()
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_owned)
        .collect()
}

/// Tries to take and give back `report` up to `tries` times, `pause` apart: whether
/// the client works again.
async fn works_again(locks: &LockClient, tries: usize, pause: Duration) -> bool {
    for _ in 0..tries {
        if let Ok(Some(guard)) = locks.try_lock("report").await {
            guard.unlock().await.expect("released");
            return true;
        }
        tokio::time::sleep(pause).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_is_named_after_the_service_and_again_after_a_reconnect() {
    let server = support::server();
    let locks = support::service_client(&server, "orders-api").await;
    assert_eq!(locks.service(), "orders-api");
    // The command connection and the subscriber's.
    let before = ids(&named(&server, "distlock:orders-api"));
    assert_eq!(before.len(), 2, "{:?}", server.cmd(&["CLIENT", "LIST"]));

    // Cut every connection the client has.
    let killed = server
        .cmd(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
        .expect("CLIENT KILL");
    assert!(killed.parse::<u32>().is_ok_and(|n| n >= 2), "{killed}");

    // The first call may meet the broken connection; the next ones go on a new one.
    let taken = works_again(&locks, 20, Duration::from_millis(50)).await;
    assert!(taken, "the client works again after the kill");
    // Two new connections (other ids), named again.
    let renamed = support::eventually(Duration::from_secs(5), || {
        let now = ids(&named(&server, "distlock:orders-api"));
        now.len() == 2 && now.is_disjoint(&before)
    })
    .await;
    assert!(renamed, "{:?}", server.cmd(&["CLIENT", "LIST"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_service_is_the_executable_s_name() {
    let server = support::server();
    let locks = support::client(&server).await;
    let stem = std::env::current_exe()
        .ok()
        .and_then(|path| Some(path.file_stem()?.to_str()?.to_owned()))
        .expect("the test binary's name");
    // Cargo names a test binary `<name>-<16 hex digits>`: the service is the name.
    let stem = match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_owned()
        }
        _ => stem,
    };
    assert_eq!(locks.service(), stem);
    assert_eq!(named(&server, &format!("distlock:{stem}")).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_redis_cannot_name_a_connection_after_is_refused_before_dialing() {
    let too_long = "a".repeat(distlock::MAX_SERVICE_LEN + 1);
    for bad in ["orders api", "", "orders\napi", "ordérs", too_long.as_str()] {
        // A closed port: only the check of the settings can answer.
        let result = LockClient::builder()
            .url("redis://127.0.0.1:1")
            .service(bad)
            .connect()
            .await;
        match result {
            Err(LockError::InvalidOption { option, reason, .. }) => {
                assert_eq!(option, "service", "{bad:?}");
                assert!(reason.contains("like `orders-api`"), "{reason}");
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let longest = "a".repeat(distlock::MAX_SERVICE_LEN);
    let server = support::server();
    let locks = support::builder(&server)
        .service(longest.as_str())
        .connect()
        .await;
    assert_eq!(locks.expect("64 bytes are fine").service(), longest);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_cluster_lists_the_named_connections() {
    let cluster = RedisCluster::start(3, 0).expect("start a 3-master cluster");
    let locks = LockClient::builder()
        .cluster(cluster.urls())
        .service("orders-api")
        .connect()
        .await
        .expect("connected");
    let guard = locks.lock("report").await.expect("held");
    guard.unlock().await.expect("released");
    for node in cluster.nodes() {
        // The command connection and the sharded subscriber's.
        let named = named(node, "distlock:orders-api");
        assert!(named.len() >= 2, "{}: {named:?}", node.port());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_master_and_the_sentinels_list_the_named_connections() {
    let group = SentinelGroup::start("locks", 1, 3).expect("start a Sentinel group");
    let locks = LockClient::builder()
        .sentinel(group.sentinel_urls(), group.master_name())
        .service("orders-api")
        .connect()
        .await
        .expect("connected");
    let master = group.current_master_index().expect("a master");
    let on_master = named(&group.data_nodes()[master], "distlock:orders-api");
    assert_eq!(on_master.len(), 2, "{on_master:?}");
    // Each Sentinel: the connection that listens for `+switch-master`.
    for sentinel in group.sentinels() {
        let listening = support::eventually(Duration::from_secs(5), || {
            !named(sentinel, "distlock:orders-api").is_empty()
        })
        .await;
        assert!(listening, "{}", sentinel.port());
    }
    drop(locks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_redlock_node_lists_the_named_connections() {
    let nodes = [support::server(), support::server(), support::server()];
    let locks = LockClient::builder()
        .redlock(nodes.iter().map(RedisServer::url))
        .service("orders-api")
        .connect()
        .await
        .expect("connected");
    let guard = locks.lock("report").await.expect("held");
    guard.unlock().await.expect("released");
    for node in &nodes {
        assert_eq!(
            named(node, "distlock:orders-api").len(),
            2,
            "{}",
            node.port()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_restarts_is_logged_lost_once_and_restored_once() {
    let logs = support::capture(tracing::Level::INFO, false);
    let mut server = support::server();
    let addr = format!("127.0.0.1:{}", server.port());
    let locks = support::builder(&server)
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connected");
    let lost = format!("lost the connection to {addr}");
    let restored = format!("connection to {addr} restored after");

    server.stop().expect("stopped");
    // Many calls fail during the outage; one warning tells of it.
    let mut failed = 0;
    for _ in 0..10 {
        if locks.try_lock("report").await.is_err() {
            failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(failed, 10, "the server is down");
    assert_eq!(
        logs.lines_with(&["WARN", &lost]).len(),
        1,
        "{:?}",
        logs.lines_with(&[&addr])
    );
    assert!(logs.lines_with(&[&restored]).is_empty());

    server.restart().expect("back");
    let back = works_again(&locks, 100, Duration::from_millis(100)).await;
    assert!(back, "the client works again");
    // The subscriber's connection answers its next heartbeat (every second).
    let logged = support::eventually(Duration::from_secs(10), || {
        logs.lines_with(&[&restored]).len() == 1
    })
    .await;
    assert!(logged, "{:?}", logs.lines_with(&[&addr]));
    // More calls on a healthy server log nothing more.
    for _ in 0..5 {
        let guard = locks
            .try_lock("report")
            .await
            .expect("asked")
            .expect("free");
        guard.unlock().await.expect("released");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        logs.lines_with(&["WARN", &lost]).len(),
        1,
        "{:?}",
        logs.lines_with(&[&addr])
    );
    let restored = logs.lines_with(&["INFO", &restored]);
    assert_eq!(restored.len(), 1, "{restored:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_node_that_restarts_is_logged_once_and_only_for_its_address() {
    let logs = support::capture(tracing::Level::INFO, false);
    let mut nodes = [support::server(), support::server(), support::server()];
    let addrs: Vec<String> = nodes
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    let locks = LockClient::builder()
        .redlock(nodes.iter().map(RedisServer::url))
        .connect()
        .await
        .expect("connected");

    nodes[0].stop().expect("stopped");
    // The other two are a majority: locks go on, with one node down all along.
    for _ in 0..10 {
        let guard = locks
            .try_lock("report")
            .await
            .expect("a majority answers")
            .expect("free");
        guard.unlock().await.expect("released");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lost = |addr: &str| logs.lines_with(&["WARN", &format!("lost the connection to {addr}")]);
    let restored =
        |addr: &str| logs.lines_with(&["INFO", &format!("connection to {addr} restored after")]);
    assert_eq!(
        lost(&addrs[0]).len(),
        1,
        "{:?}",
        logs.lines_with(&[&addrs[0]])
    );
    for addr in &addrs[1..] {
        assert!(lost(addr).is_empty() && restored(addr).is_empty(), "{addr}");
    }

    nodes[0].restart().expect("back");
    let back = support::eventually(Duration::from_secs(15), || restored(&addrs[0]).len() == 1);
    let mut calls = 0;
    tokio::pin!(back);
    let back = loop {
        tokio::select! {
            back = &mut back => break back,
            () = tokio::time::sleep(Duration::from_millis(100)) => {
                if let Ok(Some(guard)) = locks.try_lock("report").await {
                    let _ = guard.unlock().await;
                }
                calls += 1;
            }
        }
    };
    assert!(
        back,
        "after {calls} calls: {:?}",
        logs.lines_with(&[&addrs[0]])
    );
    assert_eq!(
        lost(&addrs[0]).len(),
        1,
        "{:?}",
        logs.lines_with(&[&addrs[0]])
    );
    for addr in &addrs[1..] {
        assert!(lost(addr).is_empty() && restored(addr).is_empty(), "{addr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_that_goes_away_is_logged_once_by_its_address() {
    let logs = support::capture(tracing::Level::INFO, false);
    let mut cluster = RedisCluster::start(3, 0).expect("start a 3-master cluster");
    let locks = LockClient::builder()
        .cluster(cluster.urls())
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .expect("connected");
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let gone = addr(cluster.nodes()[0].port());
    let others: Vec<String> = cluster.nodes()[1..]
        .iter()
        .map(|n| addr(n.port()))
        .collect();
    let lost = format!("lost the connection to {gone}");
    let restored = format!("connection to {gone} restored after");

    cluster.node_mut(0).stop().expect("SIGKILL a master");
    let warned = support::eventually(Duration::from_secs(10), || {
        !logs.lines_with(&["WARN", &lost]).is_empty()
    })
    .await;
    assert!(warned, "{:?}", logs.lines_with(&["distlock"]));
    // Pinged every second meanwhile: still one warning.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(logs.lines_with(&["WARN", &lost]).len(), 1);
    assert!(logs.lines_with(&[&restored]).is_empty());

    cluster.node_mut(0).restart().expect("back on its port");
    let back = support::eventually(Duration::from_secs(15), || {
        !logs.lines_with(&["INFO", &restored]).is_empty()
    })
    .await;
    assert!(back, "{:?}", logs.lines_with(&["distlock"]));
    assert_eq!(logs.lines_with(&["INFO", &restored]).len(), 1);
    for other in &others {
        assert!(
            logs.lines_with(&["lost the connection to", other])
                .is_empty(),
            "{other} never went away: {:?}",
            logs.lines_with(&[other])
        );
    }
    drop(locks);
}
