//! `SentinelGroup` against real redis-server processes.

use std::time::{Duration, Instant};

use distlock_testkit::SentinelGroup;

/// Time a killed master gets to be replaced: normally 2 to 4 s, but a split vote
/// among the Sentinels costs another 10 s.
const PROMOTION_BUDGET: Duration = Duration::from_secs(15);

/// Whether `pid` no longer names a live process (gone, or a zombie nobody reaped).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses: "123 (redis-server) Z ...".
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

fn pids(group: &SentinelGroup) -> Vec<u32> {
    group
        .data_nodes()
        .iter()
        .chain(group.sentinels())
        .map(|node| node.pid())
        .collect()
}

/// Waits until `check` holds, up to 15 s.
fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn group_starts_and_every_sentinel_reports_the_master() {
    let group = SentinelGroup::start("mymaster", 2, 3).expect("start the sentinel group");
    assert_eq!(group.master_name(), "mymaster");
    assert_eq!(group.quorum(), 2);
    assert_eq!(group.data_nodes().len(), 3);
    assert_eq!(group.sentinels().len(), 3);
    let urls = group.sentinel_urls();
    assert_eq!(urls.len(), 3);
    for (url, sentinel) in urls.iter().zip(group.sentinels()) {
        assert_eq!(url, &format!("redis://127.0.0.1:{}/", sentinel.port()));
    }

    let master = &group.data_nodes()[0];
    assert_eq!(group.current_master_port(), Some(master.port()));
    assert_eq!(group.current_master_index(), Some(0));
    for sentinel in group.sentinels() {
        let addr = sentinel
            .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
            .expect("ask the sentinel");
        assert_eq!(addr, format!("127.0.0.1\n{}", master.port()));
        let info = sentinel.cmd(&["INFO", "sentinel"]).expect("INFO sentinel");
        assert!(
            info.contains("slaves=2,sentinels=3"),
            "sentinel :{} sees {info}",
            sentinel.port()
        );
    }

    // The replicas copy the master.
    master.cmd(&["SET", "k", "v"]).expect("SET on the master");
    master.cmd(&["WAIT", "2", "5000"]).expect("WAIT");
    for replica in &group.data_nodes()[1..] {
        assert_eq!(replica.cmd(&["GET", "k"]).expect("GET on a replica"), "v");
    }
    group
        .wait_healthy(Duration::from_secs(5))
        .expect("a fresh group is healthy");
}

#[test]
fn failover_moves_the_master_to_the_replica() {
    let group = SentinelGroup::start("failover-me", 1, 3).expect("start the sentinel group");
    let old = group.data_nodes()[0].port();
    let replica = group.data_nodes()[1].port();

    group.failover().expect("SENTINEL FAILOVER");
    let new = group
        .wait_for_master_change(old, PROMOTION_BUDGET)
        .expect("a new master");
    assert_eq!(new, replica);
    assert_eq!(group.current_master_port(), Some(replica));
    assert_eq!(group.current_master_index(), Some(1));
    let role = group.data_nodes()[1]
        .cmd(&["INFO", "replication"])
        .expect("INFO replication");
    assert!(role.contains("role:master"), "{role}");

    // The old master is turned into a replica of the new one.
    eventually("the old master to follow the new one", || {
        group.data_nodes()[0]
            .cmd(&["INFO", "replication"])
            .is_ok_and(|info| {
                info.contains("role:slave") && info.contains(&format!("master_port:{replica}"))
            })
    });
    group
        .wait_healthy(Duration::from_secs(15))
        .expect("the group is whole again");
}

#[test]
fn a_killed_master_is_replaced_by_the_replica() {
    let mut group = SentinelGroup::start("kill-me", 1, 3).expect("start the sentinel group");
    let old = group.data_nodes()[0].port();
    let replica = group.data_nodes()[1].port();

    group.data_node_mut(0).stop().expect("SIGKILL the master");
    let killed = Instant::now();
    let new = group
        .wait_for_master_change(old, PROMOTION_BUDGET)
        .expect("the sentinels promote the replica");
    eprintln!("promoted after {:?}", killed.elapsed());
    assert_eq!(new, replica);
    assert_eq!(group.current_master_port(), Some(replica));
    group.data_nodes()[1]
        .cmd(&["SET", "after", "failover"])
        .expect("the new master takes writes");

    // The old master comes back empty; the Sentinels make it a replica of the new one.
    group
        .data_node_mut(0)
        .restart()
        .expect("restart the old master");
    group
        .wait_healthy(Duration::from_secs(30))
        .expect("the old master rejoins as a replica");
    // Healthy skips a data node that does not answer yet, and a Sentinel turns a
    // returning master into a replica only after seeing it as a master for a while
    // (observed: up to 30 s and more on a loaded 2-core machine). On such a machine
    // the Sentinels may also fail over once more, back to the old node once it has
    // joined (seen once in a clean CI run): a correct outcome too. So wait until the
    // two nodes settle as one master and its replica, link up (its first sync done),
    // then read the write on both.
    let (master, copy) = settled(&group, Duration::from_secs(90));
    for node in [master, copy] {
        let copied = group.data_nodes()[node]
            .cmd(&["GET", "after"])
            .expect("GET");
        assert_eq!(
            copied, "failover",
            "node {node} (master {master}, replica {copy}) has the new master's write"
        );
    }
    let master_port = group.data_nodes()[master].port();
    assert_eq!(
        group.current_master_port(),
        Some(master_port),
        "the Sentinels name the master the nodes settled on"
    );

    // A restarted Sentinel keeps its configuration file, and so its knowledge.
    group.sentinel_mut(0).restart().expect("restart a sentinel");
    group
        .wait_healthy(Duration::from_secs(30))
        .expect("the sentinel rejoins");
    assert_eq!(group.current_master_port(), Some(master_port));
}

/// The indexes of the master and the replica among `group`'s two data nodes once
/// one replicates the other with its link up, waiting at most `budget`; panics
/// with both nodes' `INFO replication` when they do not settle.
fn settled(group: &SentinelGroup, budget: Duration) -> (usize, usize) {
    let until = Instant::now() + budget;
    let mut infos = Vec::new();
    while Instant::now() < until {
        infos = group
            .data_nodes()
            .iter()
            .map(|node| node.cmd(&["INFO", "replication"]).unwrap_or_default())
            .collect();
        for (copy, info) in infos.iter().enumerate() {
            let master = 1 - copy;
            let master_port = group.data_nodes()[master].port();
            if info.contains("role:slave")
                && info.contains("master_link_status:up")
                && info.contains(&format!("master_port:{master_port}"))
                && infos[master].contains("role:master")
            {
                return (master, copy);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the two data nodes never settled as a master and its replica: {infos:?}");
}

#[test]
fn everything_is_gone_after_drop() {
    let group = SentinelGroup::start("drop-me", 1, 2).expect("start the sentinel group");
    let pids = pids(&group);
    assert_eq!(pids.len(), 4);
    assert!(pids.iter().all(|&pid| !process_gone(pid)));
    drop(group);
    for pid in pids {
        assert!(process_gone(pid), "process {pid} outlived the group");
    }
}

#[test]
fn a_single_sentinel_without_replicas_starts() {
    let group = SentinelGroup::start("lonely", 0, 1).expect("start the sentinel group");
    assert_eq!(group.quorum(), 1);
    assert_eq!(group.data_nodes().len(), 1);
    assert_eq!(
        group.current_master_port(),
        Some(group.data_nodes()[0].port())
    );
}
