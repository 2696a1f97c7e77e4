//! The lock behind Redis Sentinel with data nodes that serve clients over TLS only
//! (as far as the Sentinels tell): `.sentinel_node_tls(true)` dials the master the
//! Sentinels name over verified TLS, before and after a failover. Certificates are
//! made at test time (rcgen).
//!
//! The client trusts the platform's roots (rustls-native-certs), which honour
//! `SSL_CERT_FILE`: as in `tests/reliability_tls.rs`, each client runs in a child
//! process with `SSL_CERT_FILE` set to the CA under test, so that no test changes
//! the environment of another.

mod support;

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use distlock::LockClient;
use distlock_testkit::{ChildProcess, RedisServer, SentinelGroup};
// `redis_count` reads a data node over its plain port.
use support::{redis_count, Pki};

/// Marks a child process started by [`spawn_child`].
const CHILD_ENV: &str = "DISTLOCK_SENTINEL_TLS_CHILD";

/// Whether this process is a child started by [`spawn_child`].
fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Run in a child process: connects through the Sentinels `DISTLOCK_SENTINELS`
/// (comma-separated) to master `DISTLOCK_MASTER`, with `.sentinel_node_tls(..)`
/// set to `DISTLOCK_NODE_TLS == "1"`, then follows orders read from its standard
/// input, one a line: `lock NAME` (prints `HELD NAME`), `unlock` (prints
/// `UNLOCKED`), `exit`. Prints `CONNECTED` first; any failure prints
/// `TLS_ERR ms=<since the call> redis=<0|1> <message>` and ends the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn sentinel_tls_child() {
    if !is_child() {
        return;
    }
    let var = |name| std::env::var(name).unwrap_or_else(|_| panic!("{name}"));
    let sentinels: Vec<String> = var("DISTLOCK_SENTINELS")
        .split(',')
        .map(str::to_owned)
        .collect();
    let tls = var("DISTLOCK_NODE_TLS") == "1";
    let failed = |start: Instant, err: distlock::LockError| {
        println!(
            "TLS_ERR ms={} redis={} {}",
            start.elapsed().as_millis(),
            u8::from(err.is_redis()),
            err.to_string().replace('\n', " ")
        );
    };

    let start = Instant::now();
    let connected = LockClient::builder()
        .sentinel(sentinels, var("DISTLOCK_MASTER"))
        .sentinel_node_tls(tls)
        .connect_timeout(Duration::from_secs(3))
        .default_lease(Duration::from_secs(8))
        .connect()
        .await;
    let locks = match connected {
        Ok(locks) => locks,
        Err(err) => return failed(start, err),
    };
    println!("CONNECTED");

    let mut held = None;
    loop {
        let mut line = String::new();
        let read = tokio::task::block_in_place(|| std::io::stdin().lock().read_line(&mut line));
        let order = line.trim();
        if read.map_or(true, |n| n == 0) || order == "exit" {
            return;
        }
        let start = Instant::now();
        if let Some(name) = order.strip_prefix("lock ") {
            match locks.lock(name).wait(Duration::from_secs(10)).await {
                Ok(guard) => {
                    held = Some(guard);
                    println!("HELD {name}");
                }
                Err(err) => return failed(start, err),
            }
        } else if order == "unlock" {
            let guard = held.take().expect("a lock to release");
            match guard.unlock().await {
                Ok(()) => println!("UNLOCKED"),
                Err(err) => return failed(start, err),
            }
        } else {
            panic!("unknown order {order:?}");
        }
    }
}

/// Starts [`sentinel_tls_child`] against `group`, trusting the CA in `ca` (and no
/// other), with or without `.sentinel_node_tls(true)`.
fn spawn_child(group: &SentinelGroup, tls: bool, ca: &Path) -> ChildProcess {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "sentinel_tls_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .env("DISTLOCK_SENTINELS", group.sentinel_urls().join(","))
        .env("DISTLOCK_MASTER", group.master_name())
        .env("DISTLOCK_NODE_TLS", if tls { "1" } else { "0" })
        .env("SSL_CERT_FILE", ca)
        .env("SSL_CERT_DIR", "")
        .stdin(Stdio::piped());
    ChildProcess::spawn(command).expect("spawn child")
}

/// Reads the child's lines until one holds `TLS_ERR` or one of `markers`, and
/// returns it from there on. Panics after 30 s without one.
fn read_until(child: &mut ChildProcess, markers: &[&str]) -> String {
    let limit = Duration::from_secs(30);
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(line) = child.read_line_timeout(left) else {
            panic!(
                "child {} did not print any of {markers:?} within {limit:?}",
                child.pid()
            );
        };
        // The test harness may have printed `test NAME ... ` before it.
        if let Some(start) = ["TLS_ERR"]
            .iter()
            .chain(markers)
            .find_map(|marker| line.find(marker))
        {
            return line[start..].to_owned();
        }
    }
}

/// Sends one order to the child and returns its answer, which must be `expected`.
fn order(child: &mut ChildProcess, order: &str, expected: &str) {
    let stdin = child.stdin().expect("the child's stdin");
    writeln!(stdin, "{order}").expect("write an order");
    stdin.flush().expect("flush");
    let answer = read_until(child, &[expected]);
    assert_eq!(answer, expected, "the child's answer to {order:?}");
}

/// Whether the lock client is on `node` through its TLS port `tls_port` only: its
/// subscriber connection (RESP3) and a command connection (RESP2), and no
/// connection of a client on another port.
fn has_the_client_over_tls(node: &RedisServer, tls_port: u16) -> bool {
    let connections = support::client_connections(node);
    let tls_addr = SocketAddr::from(([127, 0, 0, 1], tls_port)).to_string();
    let speaks = |resp| {
        connections
            .iter()
            .any(|line| support::field(line, "resp") == Some(resp))
    };
    speaks("3")
        && speaks("2")
        && connections
            .iter()
            .all(|line| support::field(line, "laddr") == Some(tls_addr.as_str()))
}

#[test]
fn tls_data_nodes_behind_sentinel_are_dialed_over_verified_tls_before_and_after_a_failover() {
    let pki = Pki::new("sentinel-tls");
    let ca = pki.make_ca("good", true);
    let wrong = pki.make_ca("wrong", false);
    let group = SentinelGroup::start_tls(
        "locks",
        1,
        3,
        &pki.path("server.pem"),
        &pki.path("server.key"),
        &ca,
    )
    .expect("start a Sentinel group whose data nodes serve TLS");
    let tls_port = |index: usize| group.data_node_tls_port(index).expect("a TLS port");
    let index_of = |port: u16| {
        group
            .data_nodes()
            .iter()
            .position(|node| node.port() == port)
            .expect("one of ours")
    };

    // The Sentinels know the data nodes by their TLS ports only: that is all a
    // client following them can dial.
    let old = group.current_master_index().expect("a master");
    for sentinel in group.sentinels() {
        let master = sentinel
            .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "locks"])
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        assert_eq!(master, format!("127.0.0.1\n{}", tls_port(old)));
        let replicas = sentinel
            .cmd(&["SENTINEL", "REPLICAS", "locks"])
            .expect("SENTINEL REPLICAS");
        let replica = 1 - old;
        assert!(
            replicas.contains(&format!("\nport\n{}\n", tls_port(replica)))
                && !replicas.contains(&format!("\nport\n{}\n", group.data_nodes()[replica].port())),
            "the replica is known by its TLS port: {replicas}"
        );
    }

    // Without TLS the client cannot talk to the master the Sentinels name: an
    // error, soon.
    let mut plain = spawn_child(&group, false, &ca);
    let verdict = read_until(&mut plain, &["CONNECTED"]);
    assert!(
        verdict.starts_with("TLS_ERR"),
        "a plain connection to a TLS port: {verdict}"
    );
    let ms: u64 = support::field(&verdict, "ms")
        .and_then(|ms| ms.parse().ok())
        .expect("ms");
    assert!(
        ms < 5_000,
        "the plain client failed after {ms} ms: {verdict}"
    );

    // With TLS, a certificate from an unknown CA is refused.
    let mut untrusted = spawn_child(&group, true, &wrong);
    let verdict = read_until(&mut untrusted, &["CONNECTED"]);
    assert!(
        verdict.starts_with("TLS_ERR")
            && support::field(&verdict, "redis") == Some("1")
            && verdict.contains("certificate"),
        "with a wrong CA: {verdict}"
    );

    // With TLS and the right CA, locks work on the master, over its TLS port.
    let mut child = spawn_child(&group, true, &ca);
    assert_eq!(read_until(&mut child, &["CONNECTED"]), "CONNECTED");
    let master = &group.data_nodes()[old];
    assert!(
        support::eventually_blocking(Duration::from_secs(2), || has_the_client_over_tls(
            master,
            tls_port(old)
        )),
        "the client is on the master's TLS port {}: {:?}",
        tls_port(old),
        support::client_connections(master)
    );
    order(&mut child, "lock before", "HELD before");
    assert_eq!(redis_count(master, "before"), 1);
    order(&mut child, "unlock", "UNLOCKED");
    assert_eq!(redis_count(master, "before"), 0);

    // A failover: the client follows the Sentinels to the new master's TLS port.
    group.failover().expect("SENTINEL FAILOVER");
    let new = index_of(
        group
            .wait_for_master_change(master.port(), Duration::from_secs(20))
            .expect("a new master"),
    );
    let master = &group.data_nodes()[new];
    assert!(
        support::eventually_blocking(Duration::from_secs(5), || has_the_client_over_tls(
            master,
            tls_port(new)
        )),
        "the client did not move to the new master's TLS port {} within 5 s of the switch; \
         on it: {:?}",
        tls_port(new),
        support::client_connections(master)
    );
    // The client checks the new master's role over a connection of its own before
    // its command connection moves: until then a lock could still land on the old
    // master (not demoted yet: Sentinel reconfigures it seconds later) and vanish
    // when that node resyncs as a replica (Sentinel's asynchronous replication, not
    // what this test is about). So wait until none of its connections is left there.
    let previous = &group.data_nodes()[old];
    assert!(
        support::eventually_blocking(Duration::from_secs(5), || support::client_connections(
            previous
        )
        .is_empty()),
        "the client still talks to the old master: {:?}",
        support::client_connections(previous)
    );
    order(&mut child, "lock after", "HELD after");
    assert_eq!(redis_count(master, "after"), 1);
    order(&mut child, "unlock", "UNLOCKED");
    assert_eq!(redis_count(master, "after"), 0);
    order_exit(&mut child);
}

/// Asks the child to exit and waits for it.
fn order_exit(child: &mut ChildProcess) {
    let stdin = child.stdin().expect("the child's stdin");
    writeln!(stdin, "exit").expect("write an order");
    stdin.flush().expect("flush");
    let status = child
        .wait_timeout(Duration::from_secs(10))
        .expect("wait for the child");
    assert!(
        status.is_some_and(|status| status.success()),
        "the child ended with {status:?}"
    );
}
