//! What `connect()` says when it cannot connect, against real redis-servers on
//! loopback: every message names the server (`host:port`, never a password), and
//! each common mistake gets a hint of its own instead of "check that the server is
//! reachable": a wrong database number, `rediss://` to a plain-text port, a
//! certificate from a CA the client does not trust, a refused password (which is
//! not retried, so it fails fast). Certificates are made at test time (rcgen).

mod support;

use std::time::{Duration, Instant};

use distlock::{LockClient, LockClientBuilder, LockError};
use distlock_testkit::RedisServer;
use support::{free_port, tls_server, Pki};

/// How long the failing connects may take at most; a refused password must fail
/// well before the 2.5 s that retrying it would take.
const FAST: Duration = Duration::from_millis(1_500);

/// Connects with `builder`, which must fail; the error, and how long it took.
async fn connect_error(builder: LockClientBuilder) -> (LockError, Duration) {
    let start = Instant::now();
    let result = builder
        .connect_timeout(Duration::from_secs(4))
        .connect()
        .await;
    let took = start.elapsed();
    match result {
        Ok(_) => panic!("connect succeeded, and should not have"),
        Err(err) => (err, took),
    }
}

/// Issue 37 (4): a port nothing listens on refuses the connection: that fails at
/// once, says "connection refused" and names the address, instead of waiting out
/// the connect timeout.
#[tokio::test]
async fn a_refused_connection_fails_at_once_and_names_the_address() {
    let port = free_port();
    let (err, took) =
        connect_error(LockClient::builder().url(format!("redis://127.0.0.1:{port}"))).await;
    let text = err.to_string();
    println!("{took:?}: {text}");
    assert!(err.is_redis(), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("connection refused"), "{text}");
    assert!(took < FAST, "a refused connection took {took:?}: {text}");
}

/// A port that accepts nothing and refuses nothing (a listener that never
/// answers) still waits for the connect timeout: it may be a slow server.
#[tokio::test]
async fn a_port_that_does_not_answer_waits_for_the_connect_timeout() {
    // Bound, never accepted from: the handshake completes in the kernel's backlog,
    // and the server never says anything.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let start = Instant::now();
    let result = LockClient::builder()
        .url(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(1_500))
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await;
    let took = start.elapsed();
    let err = result.expect_err("nothing answers");
    let text = err.to_string();
    println!("{took:?}: {text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("connection refused"), "{text}");
    assert!(
        took >= Duration::from_millis(300),
        "gave up after {took:?}: {text}"
    );
    drop(listener);
}

#[tokio::test]
async fn a_wrong_database_number_says_how_many_the_server_has() {
    let server = RedisServer::start().expect("redis-server");
    let (err, took) =
        connect_error(LockClient::builder().url(format!("redis://{}/99", server.addr()))).await;
    let text = err.to_string();
    assert!(text.contains(&server.addr().to_string()), "{text}");
    assert!(
        text.contains("database") && text.contains("`databases`"),
        "{text}"
    );
    assert!(!text.contains("reachable"), "{text}");
    assert!(took < FAST, "took {took:?}: {text}");
}

#[tokio::test]
async fn rediss_to_a_plain_text_port_says_the_port_does_not_speak_tls() {
    let server = RedisServer::start().expect("redis-server");
    let (err, took) =
        connect_error(LockClient::builder().url(format!("rediss://{}", server.addr()))).await;
    let text = err.to_string();
    assert!(text.contains(&server.addr().to_string()), "{text}");
    assert!(
        text.contains("does not speak TLS") && text.contains("redis://"),
        "{text}"
    );
    assert!(!text.contains("reachable"), "{text}");
    assert!(took < FAST, "took {took:?}: {text}");
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_points_at_the_trusted_roots() {
    // A CA and a server certificate signed by it, and a second CA that signed nothing.
    let certs = Pki::new("connect-errors");
    let ca = certs.make_ca("good", true);
    certs.make_ca("other", false);
    let (_server, port) = tls_server(&certs, &ca, false);
    let builder = LockClient::builder()
        .url(format!("rediss://127.0.0.1:{port}"))
        .tls_root_ca(certs.read("other-ca.pem"));
    let (err, took) = connect_error(builder).await;
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(
        text.contains("not signed by a CA the client trusts") && text.contains("tls_root_ca"),
        "{text}"
    );
    assert!(!text.contains("reachable"), "{text}");
    assert!(took < FAST, "took {took:?}: {text}");
}

#[tokio::test]
async fn a_refused_password_fails_fast_with_a_password_hint_and_no_password() {
    let server = RedisServer::builder()
        .password("right-horse-battery")
        .start()
        .expect("redis-server with a password");
    let url = format!("redis://:wrong-staple-9@{}", server.addr());
    let (err, took) = connect_error(LockClient::builder().url(url)).await;
    let text = err.to_string();
    let debug = format!("{err:?}");
    assert!(text.contains(&server.addr().to_string()), "{text}");
    assert!(text.contains("password"), "{text}");
    assert!(!text.contains("reachable"), "{text}");
    for shown in [&text, &debug] {
        assert!(
            !shown.contains("wrong-staple-9") && !shown.contains("right-horse-battery"),
            "{shown}"
        );
    }
    assert!(
        took < FAST,
        "a refused password was retried: took {took:?}: {text}"
    );
}

/// Issue 26: a password sent to a server that has none said only that the
/// authentication failed; it says to remove the password or set one on the server,
/// at once.
#[tokio::test]
async fn a_password_for_a_server_without_one_says_to_remove_it_or_set_requirepass() {
    let server = RedisServer::start().expect("redis-server");
    let url = format!("redis://:needless-pass-3@{}", server.addr());
    let (err, took) = connect_error(LockClient::builder().url(url)).await;
    let text = err.to_string();
    assert!(text.contains(&server.addr().to_string()), "{text}");
    assert!(text.contains("has no password set"), "{text}");
    assert!(
        text.contains("remove the password from the URL") && text.contains("`requirepass`"),
        "{text}"
    );
    assert!(!text.contains("needless-pass-3"), "{text}");
    assert!(!text.contains("reachable"), "{text}");
    assert!(took < FAST, "took {took:?}: {text}");
}
