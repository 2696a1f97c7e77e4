//! `rediss://` in an application that links rustls with both crypto providers, and
//! the TLS settings of the builder (`tls_root_ca`, `tls_client_cert`).
//!
//! This test binary's dev-dependency turns on rustls' `aws-lc-rs` feature beside
//! distlock's `ring`, as reqwest, sqlx or the AWS SDK do in a real application:
//! rustls can then no longer pick a process-level provider by itself. The provider
//! tests run each client in a child process (this binary again, one `#[ignore]`d
//! test), so that what one test installs as the process default cannot help or hurt
//! another; the child trusts the CA through `SSL_CERT_FILE`. The tests of the
//! certificate settings run in this process and trust nothing from the environment.
//! Every certificate is made at test time (rcgen).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use distlock::{layout, LockClient};
use distlock_testkit::RedisServer;
use rustls::crypto::CryptoProvider;
use support::{free_port, tls_server, Pki};

/// Set in a child process started by [`run_child`].
const CHILD: &str = "DISTLOCK_TLS_PROVIDER_CHILD";

/// Which provider is the process default: `ring`, `aws-lc-rs` or `none`.
fn process_provider() -> &'static str {
    match CryptoProvider::get_default() {
        None => "none",
        Some(provider) => {
            let shown = format!("{:?}", provider.key_provider);
            if shown.contains("AwsLcRs") {
                "aws-lc-rs"
            } else if shown.contains("Ring") {
                "ring"
            } else {
                "other"
            }
        }
    }
}

/// Run in a child process: installs the application's provider when
/// `DISTLOCK_APP_PROVIDER=aws-lc-rs`, connects to `DISTLOCK_URL` (trusting the CA
/// file `DISTLOCK_ROOT_CA` with `.tls_root_ca(..)` when set), takes and releases a
/// lock, and prints `TLS_OK provider=<default after connecting>` or `TLS_ERR ...`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn provider_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    println!("TLS_START provider={}", process_provider());
    if std::env::var("DISTLOCK_APP_PROVIDER").as_deref() == Ok("aws-lc-rs") {
        rustls::crypto::aws_lc_rs::default_provider()
            .install_default()
            .expect("the first provider of the process");
    }
    let url = std::env::var("DISTLOCK_URL").expect("DISTLOCK_URL");
    let mut builder = LockClient::builder().url(url);
    if let Ok(ca) = std::env::var("DISTLOCK_ROOT_CA") {
        builder = builder.tls_root_ca(std::fs::read(ca).expect("the CA file"));
    }
    let result = support::lock_once(builder, "tls-provider").await;
    match result {
        Ok(()) => println!("TLS_OK provider={}", process_provider()),
        Err(err) => println!("TLS_ERR {}", err.to_string().replace('\n', " ")),
    }
}

/// Runs [`provider_child`] with `SSL_CERT_FILE=ca`; returns its `TLS_` lines, or
/// everything it printed when it printed none (a panic).
fn run_child(url: &str, ca: &Path, app_provider: Option<&str>) -> Vec<String> {
    run_child_with(url, ca, app_provider, None)
}

/// [`run_child`], and with `root_ca` the child also trusts that file through
/// `.tls_root_ca(..)`.
fn run_child_with(
    url: &str,
    ca: &Path,
    app_provider: Option<&str>,
    root_ca: Option<&Path>,
) -> Vec<String> {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            "--exact",
            "provider_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("DISTLOCK_URL", url)
        .env("SSL_CERT_FILE", ca)
        .env("SSL_CERT_DIR", "")
        .env_remove("DISTLOCK_APP_PROVIDER")
        .env_remove("DISTLOCK_ROOT_CA");
    if let Some(provider) = app_provider {
        command.env("DISTLOCK_APP_PROVIDER", provider);
    }
    if let Some(root_ca) = root_ca {
        command.env("DISTLOCK_ROOT_CA", root_ca);
    }
    let output = command.output().expect("run the child");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.find("TLS_").map(|at| line[at..].to_owned()))
        .collect();
    assert!(
        lines.iter().any(|line| !line.starts_with("TLS_START")),
        "the child gave no verdict; stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    lines
}

/// `good-ca.pem`, `server.pem` and `server.key` (for 127.0.0.1), `client.pem` and
/// `client.key` signed by the same CA, and `other-ca.pem`, a CA that signed none
/// of them, in a directory removed on drop.
fn pki(tag: &str) -> Pki {
    let pki = Pki::new(&format!("provider-{tag}"));
    pki.make("good", true, true);
    pki.make_ca("other", false);
    pki
}

#[test]
fn this_binary_links_both_providers_and_installs_none() {
    // Both are compiled in, which is what keeps rustls from choosing by itself.
    let ring = rustls::crypto::ring::default_provider();
    let aws = rustls::crypto::aws_lc_rs::default_provider();
    assert!(!ring.cipher_suites.is_empty() && !aws.cipher_suites.is_empty());
}

#[test]
fn rediss_connects_when_the_application_installed_no_provider() {
    let certs = pki("none");
    let (_server, port) = tls_server(&certs, &certs.path("good-ca.pem"), false);
    let url = format!("rediss://127.0.0.1:{port}/");
    let lines = run_child(&url, &certs.path("good-ca.pem"), None);
    assert_eq!(
        lines,
        ["TLS_START provider=none", "TLS_OK provider=ring"],
        "no panic; distlock fell back on ring, the provider it is built with"
    );
}

#[test]
fn rediss_uses_the_provider_the_application_installed() {
    let certs = pki("app");
    let (_server, port) = tls_server(&certs, &certs.path("good-ca.pem"), false);
    let url = format!("rediss://127.0.0.1:{port}/");
    let lines = run_child(&url, &certs.path("good-ca.pem"), Some("aws-lc-rs"));
    assert_eq!(
        lines,
        ["TLS_START provider=none", "TLS_OK provider=aws-lc-rs"],
        "the application's provider is kept, not replaced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_ca_given_to_the_builder_is_the_one_trusted() {
    let certs = pki("root-ca");
    let (_server, port) = tls_server(&certs, &certs.path("good-ca.pem"), false);
    let url = format!("rediss://127.0.0.1:{port}/");

    let trusted = support::lock_once(
        LockClient::builder()
            .url(&url)
            .tls_root_ca(certs.read("good-ca.pem")),
        "tls-settings",
    )
    .await;
    assert!(trusted.is_ok(), "with the server's CA: {trusted:?}");

    let other = support::lock_once(
        LockClient::builder()
            .url(&url)
            .tls_root_ca(certs.read("other-ca.pem")),
        "tls-settings",
    )
    .await
    .expect_err("a CA that did not sign the server's certificate");
    assert!(other.is_redis(), "{other}");
    assert!(other.to_string().contains("certificate"), "{other}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_to_a_server_that_requires_one() {
    let certs = pki("client-cert");
    let (server, port) = tls_server(&certs, &certs.path("good-ca.pem"), true);
    let url = format!("rediss://127.0.0.1:{port}/");
    let builder = || {
        LockClient::builder()
            .url(&url)
            .tls_root_ca(certs.read("good-ca.pem"))
    };

    let without = support::lock_once(builder(), "tls-settings")
        .await
        .expect_err("a server that requires a client certificate refuses a client without one");
    assert!(
        without.is_connect() && without.to_string().contains("tls_client_cert"),
        "the hint names the setting: {without}"
    );
    let with = support::lock_once(
        builder().tls_client_cert(certs.read("client.pem"), certs.read("client.key")),
        "tls-settings",
    )
    .await;
    assert!(with.is_ok(), "with the client certificate: {with:?}");
    assert_eq!(
        held_keys(&server),
        Vec::<String>::new(),
        "nothing left held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_nodes_behind_sentinel_are_verified_with_the_builders_root_ca() {
    let certs = pki("sentinel");
    let group = distlock_testkit::SentinelGroup::start_tls(
        "locks",
        0,
        1,
        &certs.path("server.pem"),
        &certs.path("server.key"),
        &certs.path("good-ca.pem"),
    )
    .expect("a Sentinel group whose data nodes serve TLS");
    let builder = |ca: &str| {
        LockClient::builder()
            .sentinel(group.sentinel_urls(), group.master_name())
            .sentinel_node_tls(true)
            .tls_root_ca(certs.read(ca))
    };

    let trusted = support::lock_once(builder("good-ca.pem"), "tls-settings").await;
    assert!(trusted.is_ok(), "with the data nodes' CA: {trusted:?}");
    let other = support::lock_once(builder("other-ca.pem"), "tls-settings")
        .await
        .expect_err("a CA that did not sign the data nodes' certificates");
    assert!(other.to_string().contains("certificate"), "{other}");
}

#[test]
fn an_unreadable_ssl_cert_file_is_named_even_with_a_root_ca() {
    // redis-rs reads the platform's roots (which honour `SSL_CERT_FILE`) before it
    // uses the builder's CA, so a variable naming a missing file fails the connect.
    let certs = pki("ssl-cert-file");
    let (_server, port) = tls_server(&certs, &certs.path("good-ca.pem"), false);
    let url = format!("rediss://127.0.0.1:{port}/");
    let missing = certs.path("no-such-bundle.pem");
    let lines = run_child_with(&url, &missing, None, Some(&certs.path("good-ca.pem")));
    let verdict = lines.last().map_or("", String::as_str);
    assert!(
        verdict.starts_with("TLS_ERR")
            && verdict.contains("SSL_CERT_FILE")
            && !verdict.contains("reachable"),
        "the hint points at the variable: {verdict}"
    );
}

/// A one-node Redis Cluster (every slot on it) that serves clients and its bus over
/// TLS (`tls-cluster yes`); returns its TLS port.
fn tls_cluster_node(certs: &Pki) -> (RedisServer, u16) {
    for _ in 0..5 {
        let (port, bus) = (free_port(), free_port());
        let started = RedisServer::builder()
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf"])
            .arg("--cluster-port")
            .arg(bus.to_string())
            .arg("--tls-port")
            .arg(port.to_string())
            .args(["--tls-cluster", "yes"])
            .arg("--tls-cert-file")
            .arg(certs.path("server.pem"))
            .arg("--tls-key-file")
            .arg(certs.path("server.key"))
            .arg("--tls-ca-cert-file")
            .arg(certs.path("good-ca.pem"))
            .args(["--tls-auth-clients", "no"])
            .start();
        let node = match started {
            Ok(node) => node,
            Err(err) if err.to_string().contains("Address already in use") => continue,
            Err(err) => panic!("a TLS cluster node: {err}"),
        };
        node.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])
            .expect("CLUSTER ADDSLOTSRANGE");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !node
            .cmd(&["CLUSTER", "INFO"])
            .is_ok_and(|info| info.contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the cluster did not become healthy"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        return (node, port);
    }
    panic!("no free ports for a TLS cluster node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_is_verified_with_the_builders_root_ca() {
    let certs = pki("cluster");
    let (node, port) = tls_cluster_node(&certs);
    let builder = |ca: &str| {
        LockClient::builder()
            .cluster([format!("rediss://127.0.0.1:{port}")])
            .tls_root_ca(certs.read(ca))
    };

    let trusted = support::lock_once(builder("good-ca.pem"), "tls-settings").await;
    assert!(trusted.is_ok(), "with the node's CA: {trusted:?}");
    assert_eq!(held_keys(&node), Vec::<String>::new(), "nothing left held");
    let other = support::lock_once(builder("other-ca.pem"), "tls-settings")
        .await
        .expect_err("a CA that did not sign the node's certificate");
    let text = other.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{port}")) && text.contains("tls_root_ca"),
        "{text}"
    );
}

/// The keys on `server` but the short-lived records of final releases
/// (`<ns>:{name}:freed:<owner>`, see `distlock::layout`).
fn held_keys(server: &RedisServer) -> Vec<String> {
    // A side key of a lock that is not its fencing counter: a final release's record.
    let release_record =
        |key: &str| layout::is_side_key(key.as_bytes()) && !key.ends_with(layout::FENCE_SUFFIX);
    server
        .cmd(&["KEYS", "*"])
        .expect("KEYS")
        .lines()
        .filter(|key| !key.is_empty() && !release_record(key))
        .map(str::to_owned)
        .collect()
}
