//! Reliability: the release channels — forged messages, and no subscription left
//! behind after heavy contention.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock::{layout, LockClient};
use distlock_testkit::{monotonic_ns, History, RedisServer, Section};

/// A fenced client of `server`.
async fn client(server: &RedisServer) -> LockClient {
    support::fenced(&server.url()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_release_message_is_a_spurious_wake_up_never_a_second_holder() {
    let server = support::server();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let history = Arc::new(History::new());

    let guard = holder.lock("forged").await.expect("lock");
    let acquired = monotonic_ns();
    let token = guard.fencing_token();
    let waiting = support::wait_then_release(
        waiter,
        "forged",
        Duration::from_secs(10),
        &history,
        "the waiter gets the lock once it is released",
    );
    assert!(
        support::eventually(Duration::from_secs(3), || {
            server
                .cmd(&["PUBSUB", "NUMSUB", &support::channel_key("forged")])
                .map(|reply| reply.ends_with('1'))
                .unwrap_or(false)
        })
        .await,
        "the waiter subscribed"
    );
    let evals_before = support::script_calls(&server);
    let channel = support::channel_key("forged");
    let mut delivered = 0;
    for _ in 0..100 {
        let receivers: u64 = server
            .cmd(&["PUBLISH", &channel, layout::FORCE_UNLOCK_MESSAGE])
            .expect("PUBLISH")
            .parse()
            .expect("a count");
        delivered += receivers;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let retries = support::script_calls(&server) - evals_before;
    assert!(!waiting.is_finished(), "the waiter got a held lock");
    let released = monotonic_ns();
    history.record(Section {
        owner: "holder".into(),
        token,
        acquired_ns: acquired,
        released_ns: released,
        deadline_ns: None,
    });
    guard.unlock().await.expect("unlock");
    waiting.await.expect("waiter");
    let report = history.check();
    support::summary_of(
        "pubsub_forged_release",
        &report,
        &[
            ("forged", 100),
            ("delivered", delivered),
            ("spurious_retries", retries),
        ],
    );
    assert_eq!(delivered, 100, "every forged message reached the waiter");
    assert!(
        retries > 0,
        "the forged messages woke nobody: the test proves nothing"
    );
    report.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_contended_operations_leave_no_subscription() {
    const CLIENTS: usize = 2;
    const TASKS: usize = 5;
    const ROUNDS: usize = 500;
    let server = support::server();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let locks = client(&server).await;
        for t in 0..TASKS {
            let locks = locks.clone();
            tasks.push(tokio::spawn(async move {
                for n in 0..ROUNDS {
                    let name = format!("sub:{}", (n + t + c) % 3);
                    let guard = locks
                        .lock(&name)
                        .wait(Duration::from_secs(30))
                        .await
                        .expect("lock");
                    guard.unlock().await.expect("unlock");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task");
    }
    let subscribes = support::command_calls(&server, "subscribe");
    let clean = support::eventually(Duration::from_secs(3), || {
        let (keys, channels) = support::leaks(&server);
        keys.is_empty() && channels.is_empty()
    })
    .await;
    let (keys, channels) = support::leaks(&server);
    support::summary(
        "pubsub_no_leftover_subscriptions",
        &[
            ("operations", (CLIENTS * TASKS * ROUNDS) as u64),
            ("subscribes", subscribes),
            ("leaked_keys", keys.len() as u64),
            ("leaked_channels", channels.len() as u64),
        ],
    );
    assert!(
        subscribes > 0,
        "nobody ever waited: the test proves nothing"
    );
    assert!(clean, "left behind: keys {keys:?}, channels {channels:?}");
}
