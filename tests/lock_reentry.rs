//! Identity by call chain: re-entry, exclusion of concurrent branches, hand-over.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::{current_lock, LockContext, LockError};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_three_deep_counts_in_redis_and_blocks_others() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;

    let outer = locks.lock("order:1").await.expect("outer");
    assert_eq!(outer.hold_count(), 1);
    assert_eq!(support::redis_count(&server, "order:1"), 1);
    outer
        .scope(async {
            let middle = locks.lock("order:1").await.expect("middle");
            assert_eq!(middle.hold_count(), 2);
            assert_eq!(support::redis_count(&server, "order:1"), 2);
            middle
                .scope(async {
                    let inner = locks.lock("order:1").await.expect("inner");
                    assert_eq!(inner.hold_count(), 3);
                    assert_eq!(support::redis_count(&server, "order:1"), 3);
                    assert!(other.try_lock("order:1").await.expect("try").is_none());
                    inner.unlock().await.expect("inner unlock");
                })
                .await;
            assert_eq!(support::redis_count(&server, "order:1"), 2);
            assert!(other.try_lock("order:1").await.expect("try").is_none());
            middle.unlock().await.expect("middle unlock");
        })
        .await;
    assert_eq!(support::redis_count(&server, "order:1"), 1);
    assert!(other.try_lock("order:1").await.expect("try").is_none());
    outer.unlock().await.expect("outer unlock");
    assert_eq!(support::redis_count(&server, "order:1"), 0);
    let taken = other.try_lock("order:1").await.expect("try");
    assert!(taken.is_some(), "free after the outermost release");
    taken.expect("guard").unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncontended_lock_unlock_is_two_round_trips_and_reentry_one() {
    let server = support::server();
    let locks = support::client(&server).await;

    let before = support::client_requests(&server);
    let guard = locks.lock("rt").await.expect("lock");
    assert_eq!(support::client_requests(&server) - before, 1, "acquire");
    let before = support::client_requests(&server);
    guard
        .scope(async {
            let inner = locks.lock("rt").await.expect("re-entry");
            assert_eq!(support::client_requests(&server) - before, 1, "re-entry");
            inner.unlock().await.expect("inner unlock");
            assert_eq!(
                support::client_requests(&server) - before,
                2,
                "inner release"
            );
        })
        .await;
    let before = support::client_requests(&server);
    guard.unlock().await.expect("unlock");
    assert_eq!(support::client_requests(&server) - before, 1, "release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_branches_taking_a_new_name_exclude_each_other() {
    let server = support::server();
    let locks = support::client(&server).await;
    let inside = AtomicUsize::new(0);
    let overlaps = AtomicUsize::new(0);
    let branch = |label: &'static str| {
        let locks = &locks;
        let inside = &inside;
        let overlaps = &overlaps;
        async move {
            let guard = locks
                .lock("shared")
                .wait(Duration::from_secs(5))
                .await
                .expect(label);
            assert_eq!(
                guard.hold_count(),
                1,
                "{label} is a new holder, not a re-entry"
            );
            if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                overlaps.fetch_add(1, Ordering::SeqCst);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.unlock().await.expect("unlock");
        }
    };
    let outer = locks.lock("outer").await.expect("outer");
    outer
        .scope(async {
            tokio::join!(branch("a"), branch("b"), branch("c"));
        })
        .await;
    outer.unlock().await.expect("unlock outer");
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_branches_re_enter_a_name_the_chain_holds() {
    let server = support::server();
    let locks = support::client(&server).await;
    let outer = locks.lock("held").await.expect("outer");
    outer
        .scope(async {
            let (a, b) = tokio::join!(locks.lock("held"), locks.lock("held"));
            let (a, b) = (a.expect("a"), b.expect("b"));
            let mut counts = [a.hold_count(), b.hold_count()];
            counts.sort_unstable();
            assert_eq!(counts, [2, 3]);
            assert_eq!(support::redis_count(&server, "held"), 3);
            a.unlock().await.expect("a");
            b.unlock().await.expect("b");
        })
        .await;
    outer.unlock().await.expect("outer");
    assert_eq!(support::redis_count(&server, "held"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_is_another_holder_unless_handed_the_context() {
    let server = support::server();
    let locks = support::client(&server).await;
    let guard = locks.lock("job").await.expect("lock");
    guard
        .scope(async {
            let spawned = tokio::spawn({
                let locks = locks.clone();
                async move { locks.try_lock("job").await.map(|guard| guard.is_some()) }
            });
            assert!(
                !spawned.await.expect("join").expect("try_lock"),
                "spawned task must not re-enter"
            );

            let context = LockContext::current();
            let handed = tokio::spawn(context.scope({
                let locks = locks.clone();
                async move {
                    let guard = locks.try_lock("job").await?;
                    let count = guard.as_ref().map(|guard| guard.hold_count());
                    if let Some(guard) = guard {
                        guard.unlock().await?;
                    }
                    Ok::<_, LockError>(count)
                }
            }));
            assert_eq!(handed.await.expect("join").expect("try_lock"), Some(2));
        })
        .await;
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_scopes_the_body_and_current_lock_sees_it() {
    let server = support::server();
    let locks = support::fenced_client(&server).await;
    assert!(current_lock().is_none());
    let (name, token, inner_count) = locks
        .with_lock("report", |held| {
            let locks = locks.clone();
            async move {
                let current = current_lock().expect("inside the scope");
                assert_eq!(current.fencing_token(), held.fencing_token());
                let inner = locks.lock("report").await.expect("re-entry");
                let inner_count = inner.hold_count();
                assert_eq!(
                    inner.fencing_token(),
                    held.fencing_token(),
                    "re-entry keeps the token"
                );
                inner.unlock().await.expect("unlock");
                Ok::<_, distlock::LockError>((
                    current.name().to_owned(),
                    current.fencing_token(),
                    inner_count,
                ))
            }
        })
        .await
        .expect("with_lock");
    assert_eq!(name, "report");
    let first = token.expect("a token");
    assert_eq!(inner_count, 2);
    assert!(!locks.inspect("report").await.expect("inspect").held);

    // The next holder gets a higher token.
    let guard = locks.lock("report").await.expect("lock");
    let second = guard.fencing_token().expect("a token");
    assert!(second > first, "token {second} after {first}");
    let info = locks.inspect("report").await.expect("inspect");
    assert!(info.held);
    assert_eq!(info.fencing_token, Some(second));
    assert_eq!(info.last_fencing_token, Some(second));
    guard.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_releases_when_the_body_panics() {
    let server = support::server();
    let locks = support::client(&server).await;
    let task = tokio::spawn({
        let locks = locks.clone();
        async move {
            locks
                .with_lock("panicky", |_| async {
                    if true {
                        panic!("body failed");
                    }
                    Ok::<(), distlock::LockError>(())
                })
                .await
        }
    });
    assert!(task.await.is_err(), "the panic propagates");
    let freed = support::eventually(Duration::from_secs(2), || {
        support::redis_count(&server, "panicky") == 0
    })
    .await;
    assert!(
        freed,
        "released in the background, long before the 30 s lease"
    );
    let again = locks.try_lock("panicky").await.expect("try_lock");
    assert!(again.is_some());
    again.expect("guard").unlock().await.expect("unlock");
}

/// Observed: `.fencing(true)` on a re-entry of a lock taken without fencing was
/// ignored, and the body saw no token. Now it is a typed error, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_asked_on_a_re_entry_shows_the_outer_token_or_is_refused() {
    let server = support::server();
    let locks = support::client(&server).await;

    let plain = locks.lock("fence-reentry").await.expect("lock");
    let refused = plain
        .scope(async { locks.lock("fence-reentry").fencing(true).await })
        .await;
    assert!(
        matches!(
            &refused,
            Err(distlock::LockError::InvalidOption {
                option: "fencing",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(
        support::redis_count(&server, "fence-reentry"),
        1,
        "nothing was sent"
    );
    plain.unlock().await.expect("unlock");

    let fenced = locks
        .lock("fence-reentry")
        .fencing(true)
        .await
        .expect("fenced lock");
    let token = fenced.fencing_token().expect("a token");
    let inner = fenced
        .scope(async { locks.lock("fence-reentry").fencing(true).await })
        .await
        .expect("re-entry");
    assert_eq!(inner.fencing_token(), Some(token), "the outermost token");
    assert_eq!(inner.hold_count(), 2);
    inner.unlock().await.expect("unlock inner");
    fenced.unlock().await.expect("unlock outer");
}

/// Issue 26: `lock("a")` twice in plain code waited until `Timeout`, whose message
/// named the caller itself as the holder and gave no hint. The wait still ends in a
/// timeout (the guard could have gone to another task), but the task that waits for
/// a lock it holds itself is told so at once, at WARN, once per client, and the
/// timeout says that another call chain of this same client holds it, where it was
/// taken, and what re-enters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_lock_the_same_client_holds_says_so() {
    let warnings = support::capture_warnings();
    let server = support::server();
    let locks = support::client(&server).await;
    let said = |name: &str| {
        warnings
            .lines_with(&["this task waits for lock", name])
            .len()
    };

    let first = locks.lock("self:a").await.expect("lock");
    let err = locks
        .lock("self:a")
        .wait(std::time::Duration::from_millis(200))
        .await
        .expect_err("a second chain of the same task waits");
    let text = err.to_string();
    assert!(err.is_timeout(), "{err:?}");
    assert!(
        text.contains("another call chain of this same client"),
        "{text}"
    );
    assert!(
        text.contains("lock_reentry.rs"),
        "where it was taken: {text}"
    );
    assert!(text.contains("guard.scope(..)"), "{text}");
    assert_eq!(said("`self:a`"), 1, "{}", warnings.text());
    let again = locks
        .lock("self:a")
        .wait(std::time::Duration::from_millis(50))
        .await;
    assert!(again.is_err());
    assert_eq!(said("`self:a`"), 1, "once per client");
    first.unlock().await.expect("unlock");

    // Another task of the same client holds it: the timeout says so too, but no task
    // waits for itself, so nothing is warned.
    let other = support::client(&server).await;
    let held = other.lock("self:b").await.expect("lock");
    let waiter = tokio::spawn({
        let other = other.clone();
        async move {
            other
                .lock("self:b")
                .wait(std::time::Duration::from_millis(200))
                .await
                .map(drop)
        }
    });
    let err = waiter
        .await
        .expect("join")
        .expect_err("held by another task");
    assert!(
        err.to_string()
            .contains("another call chain of this same client"),
        "{err}"
    );
    assert_eq!(said("`self:b`"), 0, "{}", warnings.text());
    held.unlock().await.expect("unlock");
}

/// Issue 26 (Redisson's `isHeldByCurrentThread()`): whether the current call chain
/// holds a name through this client, with no round trip: inside a lock's scope,
/// not beside it, not in a spawned task without the context, not through a client
/// of another namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn is_held_by_current_chain_follows_the_context_and_the_client() {
    let server = support::server();
    let locks = support::client_with_lease(&server, Duration::from_millis(600)).await;
    let elsewhere = support::builder(&server)
        .namespace("elsewhere")
        .connect()
        .await
        .expect("connect");
    assert!(!locks.is_held_by_current_chain("held:1"));
    let guard = locks.lock("held:1").await.expect("lock");
    assert!(
        !locks.is_held_by_current_chain("held:1"),
        "a guard alone sets no context"
    );
    guard
        .scope(async {
            assert!(locks.is_held_by_current_chain("held:1"));
            assert!(!locks.is_held_by_current_chain("held:2"));
            assert!(
                !elsewhere.is_held_by_current_chain("held:1"),
                "another client, another namespace"
            );
            assert!(!locks.is_held_by_current_chain(""), "an invalid name");
            let spawned = tokio::spawn({
                let locks = locks.clone();
                async move { locks.is_held_by_current_chain("held:1") }
            });
            assert!(!spawned.await.expect("task"), "a task without the context");
            let handed = tokio::spawn(distlock::LockContext::current().scope({
                let locks = locks.clone();
                async move { locks.is_held_by_current_chain("held:1") }
            }));
            assert!(handed.await.expect("task"), "a task given the context");
        })
        .await;
    let read = locks.read_lock("held:rw").await.expect("read");
    read.scope(async { assert!(locks.is_held_by_current_chain("held:rw")) })
        .await;
    read.unlock().await.expect("unlock");
    assert!(locks.force_unlock("held:1").await.expect("force"));
    guard
        .scope(async {
            tokio::time::timeout(Duration::from_secs(5), guard.lost())
                .await
                .expect("the watchdog finds it gone");
            assert!(
                !locks.is_held_by_current_chain("held:1"),
                "a hold known lost is not held"
            );
        })
        .await;
    let _ = guard.unlock().await;
}
