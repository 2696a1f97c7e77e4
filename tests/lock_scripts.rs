//! The scripts survive the server forgetting them.

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_while_held_still_releases_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    let guard = locks.lock("flush").await.expect("lock");
    guard
        .scope(async {
            let inner = locks.lock("flush").await.expect("re-entry");
            assert_eq!(support::redis_count(&server, "flush"), 2);
            server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
            inner.unlock().await.expect("release after SCRIPT FLUSH");
            assert_eq!(
                support::redis_count(&server, "flush"),
                1,
                "applied exactly once"
            );
        })
        .await;
    server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    guard.unlock().await.expect("release after SCRIPT FLUSH");
    assert_eq!(support::redis_count(&server, "flush"), 0);
    let again = locks
        .try_lock("flush")
        .await
        .expect("acquire after SCRIPT FLUSH");
    again.expect("free").unlock().await.expect("unlock");
}
