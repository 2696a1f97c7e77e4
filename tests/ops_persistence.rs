//! Issue 24 (1): a client with fencing on says at connect, once, at WARN, that the
//! server persists nothing (a restart then loses every lock); a client without
//! fencing says it once at the first request that asks for fencing; without
//! fencing, or with persistence, it says nothing.

mod support;

use distlock::LockClient;
use distlock_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_against_a_server_that_persists_nothing_is_warned_of_once_at_connect() {
    let warnings = support::capture_warnings();
    let persists_nothing = |text: String| {
        text.lines()
            .filter(|line| line.contains("persists nothing"))
            .count()
    };
    // The testkit's servers run with `--save "" --appendonly no`.
    let server = support::server();
    let plain = support::client(&server).await;
    assert_eq!(
        persists_nothing(warnings.text()),
        0,
        "no fencing, no warning"
    );
    let fenced = support::fenced_client(&server).await;
    assert_eq!(persists_nothing(warnings.text()), 1, "{}", warnings.text());
    let guard = fenced.lock("persist:a").await.expect("lock");
    guard.unlock().await.expect("unlock");
    assert_eq!(persists_nothing(warnings.text()), 1, "once, at connect");

    let durable = RedisServer::builder()
        .args(["--appendonly", "yes"])
        .start()
        .expect("a server with an AOF");
    let _fenced = LockClient::builder()
        .url(durable.url())
        .fencing(true)
        .connect()
        .await
        .expect("connect");
    assert_eq!(persists_nothing(warnings.text()), 1, "an AOF persists");

    // A client without fencing whose requests ask for it (`.fencing(true)`) is
    // warned once, at the first such request (the warnings are the process's: one
    // test here reads them).
    for name in ["persist:fenced:1", "persist:fenced:2"] {
        let guard = plain.lock(name).fencing(true).await.expect("a fenced lock");
        assert!(guard.fencing_token().is_some());
        guard.unlock().await.expect("unlock");
    }
    assert_eq!(persists_nothing(warnings.text()), 2, "{}", warnings.text());
}
