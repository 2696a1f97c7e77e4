//! `distlock` on a Redis Cluster (list scans every master, watch uses SSUBSCRIBE)
//! and behind Sentinel (the master is found through the Sentinels).

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::{RedisCluster, SentinelGroup};
use serde_json::Value;
use support::{code, json, json_lines, run_bare, stderr, Running};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_list_scans_every_master_and_watch_hears_releases() {
    let cluster = RedisCluster::start(3, 0).expect("a 3-master cluster");
    let urls = cluster.urls();
    let locks = LockClient::builder()
        .cluster(urls.clone())
        .connect()
        .await
        .expect("a cluster client");
    let names: Vec<String> = (0..12).map(|i| format!("job:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locks.lock(name).await.expect("held"));
    }
    // The names live on more than one master, so one node's SCAN would miss some.
    let masters: BTreeSet<usize> = names
        .iter()
        .map(|name| {
            let key =
                String::from_utf8_lossy(&distlock::layout::lock_key("distlock", name.as_bytes()))
                    .into_owned();
            let slot: u16 = cluster.nodes()[0]
                .cmd(&["CLUSTER", "KEYSLOT", &key])
                .expect("a slot")
                .parse()
                .expect("a number");
            cluster
                .node_for_slot(slot)
                .expect("a master serves the slot")
        })
        .collect();
    assert!(masters.len() > 1, "{masters:?}");

    let joined = urls.join(",");
    let output = run_bare(&["--cluster", &joined, "--json", "list", "job:*"]).await;
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    let found: BTreeSet<String> = json_lines(&output)
        .iter()
        .map(|line| line["name"].as_str().expect("a name").to_owned())
        .collect();
    assert_eq!(found, names.iter().cloned().collect::<BTreeSet<_>>());

    let inspect = run_bare(&["--cluster", &joined, "--json", "inspect", "job:3"]).await;
    assert_eq!(code(&inspect), Some(0));
    assert_eq!(json(&inspect)["held"], true);

    let mut watch = Running::start(&["--cluster", &joined, "--json", "watch", "job:5"]);
    let first: Value =
        serde_json::from_str(&watch.next_line(Duration::from_secs(15)).await).expect("JSON");
    assert_eq!(first["event"], "watching");
    let guard = guards.remove(5);
    guard.unlock().await.expect("released");
    let released: Value =
        serde_json::from_str(&watch.next_line(Duration::from_secs(15)).await).expect("JSON");
    assert_eq!(released["event"], "release", "{released}");
    assert_eq!(released["state"]["held"], false);
    drop(watch);

    let ping = run_bare(&["--cluster", &joined, "--json", "ping"]).await;
    assert_eq!(code(&ping), Some(0), "{}", stderr(&ping));
    assert_eq!(
        json(&ping)["nodes"].as_array().map(Vec::len),
        Some(3),
        "one entry per master"
    );
    for guard in guards {
        guard.unlock().await.expect("released");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_sentinel_the_master_is_found_through_the_sentinels() {
    let group = SentinelGroup::start("locks", 0, 1).expect("a Sentinel group");
    let sentinels = group.sentinel_urls();
    let locks = LockClient::builder()
        .sentinel(sentinels.clone(), "locks")
        .connect()
        .await
        .expect("a Sentinel client");
    let guard = locks.lock("nightly").await.expect("held");
    let joined = sentinels.join(",");
    let target = ["--sentinel", joined.as_str(), "--master", "locks", "--json"];

    let inspect = run_bare(&[&target[..], &["inspect", "nightly"]].concat()).await;
    assert_eq!(code(&inspect), Some(0), "{}", stderr(&inspect));
    assert_eq!(json(&inspect)["held"], true);

    let list = run_bare(&[&target[..], &["list"]].concat()).await;
    assert_eq!(code(&list), Some(0), "{}", stderr(&list));
    let lines = json_lines(&list);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["name"], "nightly");

    let unknown = run_bare(&["--sentinel", &joined, "--master", "nobody", "list"]).await;
    assert_eq!(code(&unknown), Some(3), "{}", stderr(&unknown));
    guard.unlock().await.expect("released");
}
