//! Reliability: `rediss://` against a TLS redis-server, with certificates made at
//! test time (rcgen). Verification is on by default; a wrong CA is a typed error.
//!
//! The client trusts the platform's roots (rustls-native-certs), which honour
//! `SSL_CERT_FILE`: each client runs in a child process with `SSL_CERT_FILE` set to
//! the CA under test, so that no test changes the environment of another.

mod support;

use std::path::Path;
use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::History;
use support::{tls_server, Pki};

/// Run in a child process: connects to `DISTLOCK_URL`, takes and releases a lock,
/// and prints `TLS_OK` or `TLS_ERR redis=<0|1> <message>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn tls_child() {
    if !support::is_child() {
        return;
    }
    let url = std::env::var("DISTLOCK_URL").expect("DISTLOCK_URL");
    let result = support::lock_once(LockClient::builder().url(url), "tls").await;
    match result {
        Ok(()) => println!("TLS_OK"),
        Err(err) => println!(
            "TLS_ERR redis={} {}",
            u8::from(err.is_redis()),
            err.to_string().replace('\n', " ")
        ),
    }
}

/// Runs [`tls_child`] with `SSL_CERT_FILE=ca` against `url`; returns its verdict line.
fn client_verdict(url: &str, ca: &Path) -> String {
    let mut child = support::spawn_child(
        "tls_child",
        &[
            ("DISTLOCK_URL", url.to_owned()),
            ("SSL_CERT_FILE", ca.display().to_string()),
            ("SSL_CERT_DIR", String::new()),
        ],
    );
    support::read_until(&mut child, "TLS_", &History::new(), Duration::from_secs(30))
}

#[test]
fn rediss_with_the_right_ca_locks_and_a_wrong_ca_is_a_typed_error() {
    let pki = Pki::new("tls");
    let good = pki.make_ca("good", true);
    let wrong = pki.make_ca("wrong", false);
    let (server, port) = tls_server(&pki, &good, false);
    let url = format!("rediss://127.0.0.1:{port}/");

    let trusted = client_verdict(&url, &good);
    let untrusted = client_verdict(&url, &wrong);
    let held_after = support::leaks(&server).0.len();
    support::summary(
        "security_tls",
        &[
            ("verified_connect", u64::from(trusted == "TLS_OK")),
            (
                "wrong_ca_typed_error",
                u64::from(untrusted.starts_with("TLS_ERR redis=1")),
            ),
        ],
    );
    assert_eq!(trusted, "TLS_OK", "with the right CA");
    assert!(
        untrusted.starts_with("TLS_ERR redis=1"),
        "with a wrong CA: {untrusted}"
    );
    assert_eq!(held_after, 0, "nothing left held");
}
