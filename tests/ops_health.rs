//! Operations: `LockClient::ping`'s report of every server node — version, scripts
//! cached, permissions checked with the server, eviction policy, persistence — and
//! its typed error when a server is not there.

mod support;

use std::time::Duration;

use distlock::{LockClient, LockError};
use distlock_testkit::{RedisCluster, RedisServer};
use support::{set_user, LOCK_USER_ACL};

/// A field of `INFO server`, as the server tells it.
fn info_field(server: &RedisServer, name: &str) -> String {
    let info = server.cmd(&["INFO", "server"]).expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
        .expect("the field")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_server_reports_its_version_and_no_warning() {
    let server = support::server();
    let locks = support::service_client(&server, "orders-api").await;
    let report = locks.ping().await.expect("a report");
    assert_eq!(report.nodes.len(), 1);
    let node = &report.nodes[0];
    assert_eq!(node.address, format!("127.0.0.1:{}", server.port()));
    assert_eq!(
        node.version.as_deref(),
        Some(info_field(&server, "redis_version").as_str())
    );
    assert_eq!(node.role.as_deref(), Some("master"));
    assert_eq!(node.replicas, Some(0));
    assert_eq!(node.maxmemory_policy.as_deref(), Some("noeviction"));
    // The testkit's servers save nothing.
    assert_eq!((node.aof, node.rdb_saves), (Some(false), Some(false)));
    assert_eq!(node.user.as_deref(), Some("default"));
    assert!(node.missing_permissions.is_empty(), "{node:?}");
    assert_eq!(node.permissions_unchecked, None);
    assert!(node.round_trip < Duration::from_secs(1));
    assert!(report.is_healthy(), "{:?}", report.warnings());
    assert_eq!(report.service, "orders-api");
    assert_eq!(report.to_string(), "healthy (1 node(s) checked)");
    // (The whole report laid out for people: the CLI's `ping` tests.)
}

/// The scripts are reported loaded while distlock's function library is on the
/// server, not once it is flushed (as by a restart without persistence), and
/// loaded again after the next lock, which loads the library back. A client that
/// may use functions puts nothing in the script cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_are_reported_as_they_go_and_come_back() {
    let server = support::server();
    let locks = support::client(&server).await;
    let node = locks.ping().await.expect("a report").nodes.remove(0);
    assert_eq!(node.scripts_loaded, Some(true), "connect loads the library");
    assert_eq!(node.scripts_cached, Some(0), "no script by EVALSHA");

    assert_eq!(node.library_loaded, Some(true), "the scripts run by FCALL");
    // (How `distlock ping` words it: the CLI's `ping_reports_the_server_and_the_scripts`.)

    server.cmd(&["FUNCTION", "FLUSH"]).expect("flushed");
    let report = locks.ping().await.expect("a report");
    let node = report.nodes[0].clone();
    assert_eq!(node.scripts_loaded, Some(false));
    assert_eq!(node.library_loaded, Some(false));
    assert!(
        report.is_healthy(),
        "a flushed library is no fault: {report}"
    );

    // A lock taken and released loads the library again.
    let guard = locks.lock("report").await.expect("held");
    guard.unlock().await.expect("released");
    let node = locks.ping().await.expect("a report").nodes.remove(0);
    assert_eq!(node.scripts_loaded, Some(true));
    assert_eq!(node.scripts_cached, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_evalsha_is_told_so() {
    let server = support::server();
    // The minimal ACL (which the check must find complete) without EVALSHA, and
    // the ACL subcommands that let the check ask the server.
    let mut rules: Vec<&str> = LOCK_USER_ACL
        .iter()
        .copied()
        .filter(|rule| *rule != "+evalsha")
        .collect();
    rules.extend(["+acl|whoami", "+acl|dryrun"]);
    let url = set_user(&server, "locker", &rules);
    let locks = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connecting needs no EVALSHA");
    let report = locks.ping().await.expect("a report");
    let node = &report.nodes[0];
    assert_eq!(node.user.as_deref(), Some("locker"));
    assert_eq!(node.permissions_unchecked, None);
    assert_eq!(node.missing_permissions, ["evalsha"]);
    assert!(!report.is_healthy());
    let warnings = report.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("`locker` may not run evalsha") && w.contains("+evalsha")),
        "{warnings:?}"
    );

    // With the minimal ACL itself, nothing is missing.
    let mut rules = LOCK_USER_ACL.to_vec();
    rules.extend(["+acl|whoami", "+acl|dryrun"]);
    let url = set_user(&server, "complete", &rules);
    let locks = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connected");
    let node = locks.ping().await.expect("a report").nodes.remove(0);
    assert!(node.missing_permissions.is_empty(), "{node:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_ask_the_acl_still_learns_evalsha_is_missing() {
    let server = support::server();
    let rules: Vec<&str> = LOCK_USER_ACL
        .iter()
        .copied()
        .filter(|rule| *rule != "+evalsha")
        .collect();
    let url = set_user(&server, "locker", &rules);
    let locks = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connected");
    let node = locks.ping().await.expect("a report").nodes.remove(0);
    assert!(node.permissions_unchecked.is_some(), "{node:?}");
    assert_eq!(node.missing_permissions, ["evalsha"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_policy_that_can_delete_locks_is_a_warning() {
    let server = support::server();
    let locks = support::client(&server).await;
    server
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"])
        .expect("set");
    let report = locks.ping().await.expect("a report");
    assert_eq!(
        report.nodes[0].maxmemory_policy.as_deref(),
        Some("allkeys-lru")
    );
    assert!(!report.is_healthy());
    let warnings = report.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("maxmemory-policy is allkeys-lru")
            && warnings[0].contains("noeviction"),
        "{warnings:?}"
    );

    server
        .cmd(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"])
        .expect("set");
    let report = locks.ping().await.expect("a report");
    assert!(
        !report.is_healthy(),
        "lock keys have TTLs: volatile-* evicts them too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_on_a_server_that_saves_nothing_is_a_warning() {
    let server = support::server();
    let locks = support::fenced_client(&server).await;
    let report = locks.ping().await.expect("a report");
    let warnings = report.warnings();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("fencing is on") && w.contains("appendonly yes")),
        "{warnings:?}"
    );
    server
        .cmd(&["CONFIG", "SET", "appendonly", "yes"])
        .expect("AOF on");
    let report = locks.ping().await.expect("a report");
    assert_eq!(report.nodes[0].aof, Some(true));
    assert!(report.is_healthy(), "{:?}", report.warnings());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_server_is_a_connect_error_naming_it() {
    let mut server = support::server();
    let addr = format!("127.0.0.1:{}", server.port());
    let locks = support::client(&server).await;
    server.stop().expect("stopped");
    let err = locks.ping().await.expect_err("no server");
    assert!(err.is_connect(), "{err:?}");
    match &err {
        LockError::Connect { server, .. } => assert_eq!(server, &addr),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_master_of_a_cluster_is_checked() {
    let cluster = RedisCluster::start(3, 0).expect("start a 3-master cluster");
    let locks = LockClient::builder()
        .cluster(cluster.urls())
        .connect()
        .await
        .expect("connected");
    let report = locks.ping().await.expect("a report");
    let mut addresses: Vec<String> = report.nodes.iter().map(|n| n.address.clone()).collect();
    addresses.sort();
    let mut ports: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    ports.sort();
    assert_eq!(addresses, ports);
    for node in &report.nodes {
        assert_eq!(node.scripts_loaded, Some(true), "{node:?}");
        assert!(node.missing_permissions.is_empty(), "{node:?}");
    }
}
