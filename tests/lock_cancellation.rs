//! Cancel safety: dropped acquire futures leave no hold, no lease and no miscount.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_dropped_acquires_leave_nothing_behind() {
    const DROPS: usize = 500;
    // Long enough that a hold leaked by a dropped request would outlive the checks
    // below, short enough to watch the watchdog for two renewal periods.
    let lease = Duration::from_secs(3);
    let server = support::server();
    let locks = support::client_with_lease(&server, lease).await;
    let dropped = Arc::new(AtomicUsize::new(0));
    let acquired = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for _ in 0..8 {
        let locks = locks.clone();
        let dropped = dropped.clone();
        let acquired = acquired.clone();
        tasks.push(tokio::spawn(async move {
            while dropped.load(Ordering::SeqCst) < DROPS {
                let micros = rand::rng().random_range(0..3000);
                let request = locks.lock("cancel").wait(Duration::from_secs(5));
                match tokio::time::timeout(Duration::from_micros(micros), request).await {
                    Err(_) => {
                        dropped.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(result) => {
                        let guard = result.expect("lock");
                        assert_eq!(
                            guard.hold_count(),
                            1,
                            "a count was added that nobody released"
                        );
                        acquired.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        // A lost lock here would mean a release took away a hold it
                        // did not add.
                        guard.unlock().await.expect("unlock of a hold we own");
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert!(dropped.load(Ordering::SeqCst) >= DROPS);
    assert!(
        acquired.load(Ordering::SeqCst) > 0,
        "no request ever completed"
    );

    let key = support::lock_key("cancel");
    let freed = support::eventually(Duration::from_secs(1), || !support::held(&server, &key)).await;
    assert!(freed, "a dropped request left a hold in Redis");

    // No lease is still renewed: over several renewal periods nobody calls the script.
    let before = support::script_calls(&server);
    tokio::time::sleep(lease * 2 / 3 + Duration::from_millis(300)).await;
    assert_eq!(
        support::script_calls(&server),
        before,
        "a lease is still being renewed"
    );
    assert!(!support::held(&server, &key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_dropped_in_flight_gives_back_only_its_own_hold() {
    let server = support::server();
    // A generous response timeout: on a loaded machine the paused request must not
    // turn into a timed-out one (that path is covered by the reliability suite).
    let locks = support::builder(&server)
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    let guard = locks.lock("nested").await.expect("lock");
    let mut evalsha_before = 0;
    guard
        .scope(async {
            // The server holds every write for 300 ms: the re-entry is sent, and
            // dropped before its reply; the server applies it after the drop.
            server
                .cmd(&["CLIENT", "PAUSE", "300", "WRITE"])
                .expect("CLIENT PAUSE");
            evalsha_before = support::script_calls(&server);
            let request = locks.lock("nested");
            let outcome = tokio::time::timeout(Duration::from_millis(100), request).await;
            assert!(
                outcome.is_err(),
                "the request was still in flight when dropped"
            );
        })
        .await;
    // Settled: the dropped re-entry ran on the server, and so did the release that
    // gave its hold back (two scripts), leaving the outer hold alone.
    let settled = support::eventually(Duration::from_secs(5), || {
        support::script_calls(&server) >= evalsha_before + 2
            && support::redis_count(&server, "nested") == 1
    })
    .await;
    assert!(
        settled,
        "count is {}, expected the outer hold only",
        support::redis_count(&server, "nested")
    );
    guard.unlock().await.expect("the outer hold is intact");
    assert_eq!(support::redis_count(&server, "nested"), 0);
}
