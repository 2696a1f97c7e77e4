//! Bad input gets a typed error before anything reaches Redis, and changes nothing.

mod support;

use std::net::TcpListener;
use std::time::Duration;

use distlock::{LockClient, LockError, MAX_LEASE, MAX_NAME_LEN};
use tokio::time::Instant;

/// Asserts that `server` saw no client request and holds no key since `before`.
fn untouched(server: &distlock_testkit::RedisServer, before: u64) {
    assert_eq!(
        support::client_requests(server),
        before,
        "a request reached Redis"
    );
    assert_eq!(server.cmd(&["DBSIZE"]).expect("DBSIZE"), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_are_refused_before_anything_is_sent() {
    let server = support::server();
    let locks = support::client(&server).await;
    let before = support::client_requests(&server);

    let err = locks.lock("").await.expect_err("empty name");
    assert!(matches!(err, LockError::InvalidName { .. }), "{err}");
    assert!(err.to_string().contains("empty"), "{err}");

    let long = "x".repeat(MAX_NAME_LEN + 1);
    let err = locks.lock(&long).await.expect_err("long name");
    assert!(matches!(err, LockError::InvalidName { .. }), "{err}");
    assert!(err.to_string().contains(&MAX_NAME_LEN.to_string()), "{err}");

    assert!(locks
        .try_lock("")
        .await
        .expect_err("empty")
        .is_invalid_input());
    assert!(locks
        .inspect("")
        .await
        .expect_err("empty")
        .is_invalid_input());
    assert!(locks
        .force_unlock("")
        .await
        .expect_err("empty")
        .is_invalid_input());
    untouched(&server, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_leases_and_waits_are_refused_before_anything_is_sent() {
    let server = support::server();
    let locks = support::client(&server).await;
    let before = support::client_requests(&server);

    for lease in [
        Duration::ZERO,
        Duration::from_micros(500),
        MAX_LEASE + Duration::from_millis(1),
    ] {
        let err = locks.lock("a").lease(lease).await.expect_err("bad lease");
        assert!(
            matches!(
                err,
                LockError::InvalidOption {
                    option: "lease",
                    ..
                }
            ),
            "{lease:?}: {err}"
        );
    }
    let err = locks
        .lock("a")
        .wait(Duration::MAX)
        .await
        .expect_err("overflowing wait");
    assert!(
        matches!(err, LockError::InvalidOption { option: "wait", .. }),
        "{err}"
    );
    untouched(&server, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_settings_are_refused_before_connecting() {
    let server = support::server();
    let before = support::client_requests(&server);
    let cases: Vec<(distlock::LockClientBuilder, &str)> = vec![
        (LockClient::builder().url("not a url"), "url"),
        (LockClient::builder().url("http://127.0.0.1:1/"), "url"),
        (LockClient::builder(), "url"),
        (support::builder(&server).namespace(""), "namespace"),
        (support::builder(&server).namespace("a{b}"), "namespace"),
        (
            support::builder(&server).default_lease(Duration::ZERO),
            "default_lease",
        ),
        (
            support::builder(&server).default_lease(Duration::from_secs(200_000)),
            "default_lease",
        ),
    ];
    for (builder, option) in cases {
        let err = builder.connect().await.expect_err("bad setting");
        match &err {
            LockError::InvalidOption { option: got, .. } => assert_eq!(*got, option, "{err}"),
            other => panic!("expected InvalidOption {option}, got {other}"),
        }
    }
    untouched(&server, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_a_conflict_and_stays_untouched() {
    let server = support::server();
    let locks = support::fenced_client(&server).await;
    server
        .cmd(&["SET", &support::lock_key("taken"), "user data"])
        .expect("SET");
    let err = locks
        .lock("taken")
        .await
        .expect_err("a string at the lock key");
    assert!(err.is_key_conflict(), "{err}");
    assert!(locks
        .try_lock("taken")
        .await
        .expect_err("conflict")
        .is_key_conflict());
    assert!(locks
        .inspect("taken")
        .await
        .expect_err("conflict")
        .is_key_conflict());
    assert!(locks
        .force_unlock("taken")
        .await
        .expect_err("conflict")
        .is_key_conflict());
    assert_eq!(
        server
            .cmd(&["GET", &support::lock_key("taken")])
            .expect("GET"),
        "user data"
    );

    let fence = support::fence_key("fenced");
    server.cmd(&["SET", &fence, "not a number"]).expect("SET");
    let err = locks
        .lock("fenced")
        .await
        .expect_err("a bad fencing counter");
    assert!(err.is_key_conflict(), "{err}");
    assert_eq!(server.cmd(&["GET", &fence]).expect("GET"), "not a number");
    assert_eq!(
        server
            .cmd(&["EXISTS", &support::lock_key("fenced")])
            .expect("EXISTS"),
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_fails_within_the_connect_timeout() {
    // Nothing listens on this port.
    let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_port = closed.local_addr().expect("addr").port();
    drop(closed);
    // This one accepts connections (the kernel's backlog) but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_port = silent.local_addr().expect("addr").port();

    for port in [closed_port, silent_port] {
        let start = Instant::now();
        let result = LockClient::builder()
            .url(format!("redis://127.0.0.1:{port}/"))
            .connect_timeout(Duration::from_millis(800))
            .connect()
            .await;
        let elapsed = start.elapsed();
        let err = result.expect_err("nothing to connect to");
        assert!(err.is_redis(), "{err}");
        assert!(
            elapsed < Duration::from_millis(1500),
            "took {elapsed:?} on port {port}"
        );
    }
    drop(silent);
}
