//! Expirable semaphores (issue 14): at most `permits` holders at once across
//! clients, each permit with a lease of its own renewed by the watchdog, reentrant
//! by call chain; a holder whose process is killed gives its permit back when its
//! lease ends; cancellation leaves no permit taken; bad input is refused. Real servers
//! through the testkit; permits are read from Redis.

mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{HoldMode, LockClient, LockError, LockKind, MAX_PERMITS};
use distlock_testkit::{History, RedisServer};
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// The live permit holders of semaphore `name` in Redis: their hold counts, sorted.
fn permits_held(server: &RedisServer, name: &str) -> Vec<u64> {
    let lock = support::stored(server, name);
    if !lock.holders().is_empty() {
        assert_eq!(lock.kind(), Some("semaphore"), "{name}: {lock:?}");
    }
    let mut counts: Vec<u64> = lock.holders().values().copied().collect();
    counts.sort_unstable();
    counts
}

/// Ten tasks on two clients take permits of a 3-permit semaphore in a loop: never
/// more than 3 inside at once, and 3 are reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits() {
    const PERMITS: u32 = 3;
    let server = support::server();
    let clients = support::clients::<2>(&server).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..10 {
        let semaphore = clients[task % 2].semaphore("sem:exports", PERMITS);
        let (inside, most) = (inside.clone(), most.clone());
        tasks.spawn(async move {
            for _ in 0..20 {
                let permit = semaphore.acquire().await.expect("permit");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.unlock().await.expect("unlock");
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    println!("at most {most} holders at once");
    assert_eq!(
        most, PERMITS as usize,
        "never more than the permits, and all of them used"
    );
    assert!(
        permits_held(&server, "sem:exports").is_empty(),
        "a permit left taken"
    );
}

/// A child process's role: takes a permit of `DISTLOCK_NAME` (2 permits) with the
/// watchdog lease `DISTLOCK_LEASE_MS`, prints `HELD`, and keeps it until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn semaphore_child() {
    if !support::is_child() {
        return;
    }
    let env = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} is set"));
    let lease = Duration::from_millis(env("DISTLOCK_LEASE_MS").parse().expect("lease"));
    let locks = LockClient::builder()
        .url(env("DISTLOCK_URL"))
        .default_lease(lease)
        .connect()
        .await
        .expect("connect");
    let permit = locks
        .semaphore(env("DISTLOCK_NAME"), 2)
        .acquire()
        .await
        .expect("permit");
    println!("HELD");
    permit.lost().await;
}

/// A holder whose process is killed (SIGKILL: no release, no more renewals) keeps
/// its permit until its lease ends, and not longer: then a waiter gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_gives_its_permit_back_when_its_lease_ends() {
    const LEASE: Duration = Duration::from_millis(1_500);
    let server = support::server();
    let locks = support::client(&server).await;
    let mut child = support::spawn_child(
        "semaphore_child",
        &[
            ("DISTLOCK_URL", server.url()),
            ("DISTLOCK_NAME", "sem:killed".into()),
            ("DISTLOCK_LEASE_MS", LEASE.as_millis().to_string()),
        ],
    );
    support::read_until(&mut child, "HELD", &History::new(), Duration::from_secs(30));
    let second = locks
        .semaphore("sem:killed", 2)
        .acquire()
        .await
        .expect("permit");
    // The child's last renewal, at most a third of the lease ago: killed now, its
    // permit lasts between two thirds of the lease and the whole lease.
    child.kill().expect("SIGKILL");
    let killed = Instant::now();
    assert!(
        locks
            .semaphore("sem:killed", 2)
            .try_acquire()
            .await
            .expect("try")
            .is_none(),
        "a third permit of two"
    );
    let third = locks
        .semaphore("sem:killed", 2)
        .acquire()
        .wait(Duration::from_secs(10))
        .await
        .expect("the permit came back");
    let after = killed.elapsed();
    println!("the killed holder's permit came back {after:?} after the kill");
    assert!(
        after >= LEASE * 2 / 3 - Duration::from_millis(100),
        "too early: {after:?}"
    );
    assert!(
        after < LEASE + Duration::from_millis(1_200),
        "too late: {after:?}"
    );
    assert_eq!(permits_held(&server, "sem:killed"), [1, 1]);
    third.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
}

/// A call chain that holds a permit re-enters it: one permit, counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_re_enters_its_permit() {
    let server = support::server();
    let locks = support::client(&server).await;
    let exports = locks.semaphore("sem:again", 2);
    let outer = exports.acquire().await.expect("permit");
    let inner = outer
        .scope(async { exports.acquire().await })
        .await
        .expect("re-entry");
    assert_eq!(inner.hold_count(), 2);
    assert_eq!(permits_held(&server, "sem:again"), [2], "one permit, twice");
    let info = locks.inspect("sem:again").await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::Semaphore { permits: 2 }));
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].mode, HoldMode::Permit);
    assert_eq!(info.holders[0].hold_count, 2);
    inner.unlock().await.expect("inner");
    outer.unlock().await.expect("outer");
    assert!(permits_held(&server, "sem:again").is_empty());
}

/// Requests dropped at random points and guards dropped or unlocked at random leave
/// no permit taken: afterwards every permit can be had at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_random_points_leaves_no_permit_taken() {
    const PERMITS: u32 = 2;
    let server = support::server();
    let clients = support::clients::<2>(&server).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let over = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..5 {
        let semaphore = clients[task % 2].semaphore("sem:chaos", PERMITS);
        let (inside, over) = (inside.clone(), over.clone());
        tasks.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(task as u64);
            for _ in 0..60 {
                let cut = Duration::from_micros(rng.random_range(0..3_000));
                let request = semaphore.acquire().into_future();
                let Ok(Ok(permit)) = tokio::time::timeout(cut, request).await else {
                    continue;
                };
                if inside.fetch_add(1, Ordering::SeqCst) >= PERMITS as usize {
                    over.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..800))).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                if rng.random_bool(0.5) {
                    drop(permit);
                } else {
                    let _ = permit.unlock().await;
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task");
    }
    assert_eq!(over.load(Ordering::SeqCst), 0, "more holders than permits");
    let freed = support::eventually(Duration::from_millis(1_500), || {
        permits_held(&server, "sem:chaos").is_empty()
    })
    .await;
    assert!(
        freed,
        "permits left taken: {:?}",
        permits_held(&server, "sem:chaos")
    );
    let locks = support::client(&server).await;
    let semaphore = locks.semaphore("sem:chaos", PERMITS);
    let a = semaphore
        .try_acquire()
        .await
        .expect("try")
        .expect("a permit");
    let b = semaphore
        .try_acquire()
        .await
        .expect("try")
        .expect("a second permit");
    a.unlock().await.expect("unlock");
    b.unlock().await.expect("unlock");
}

/// 0 permits, too many permits and fencing are refused before anything is sent;
/// another permit count while permits are held is refused and changes nothing;
/// once none is held, the next acquisition sets the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = support::server();
    let locks = support::client(&server).await;
    let calls = support::script_calls(&server);
    for permits in [0, MAX_PERMITS + 1] {
        let result = locks.semaphore("sem:bad", permits).acquire().await;
        assert!(
            matches!(
                &result,
                Err(LockError::InvalidOption {
                    option: "permits",
                    ..
                })
            ),
            "{permits}: {result:?}"
        );
    }
    let fenced = locks.semaphore("sem:bad", 2).acquire().fencing(true).await;
    assert!(
        matches!(
            &fenced,
            Err(LockError::InvalidOption {
                option: "fencing",
                ..
            })
        ),
        "{fenced:?}"
    );
    assert_eq!(support::script_calls(&server), calls, "something was sent");
    assert!(!support::exists(&server, &support::lock_key("sem:bad")));

    let permit = locks
        .semaphore("sem:bad", 2)
        .acquire()
        .await
        .expect("permit");
    let before = support::stored(&server, "sem:bad");
    assert_eq!(before.permits(), Some(2));
    let other = support::client(&server).await;
    let mismatch = other.semaphore("sem:bad", 5).acquire().await;
    match &mismatch {
        Err(LockError::PermitsMismatch { permits, asked, .. }) => {
            assert_eq!((*permits, *asked), (2, 5));
        }
        other => panic!("expected a permit mismatch, got {other:?}"),
    }
    let after = support::stored(&server, "sem:bad");
    assert_eq!(after, before, "Redis changed");
    permit.unlock().await.expect("unlock");
    let five = other
        .semaphore("sem:bad", 5)
        .acquire()
        .await
        .expect("a new count");
    let info = other.inspect("sem:bad").await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::Semaphore { permits: 5 }));
    five.unlock().await.expect("unlock");
}

/// Issue 26 (what Redisson users look for, `RSemaphore.availablePermits()`): the
/// free permits, one read: each live holder takes one (a re-entry counts once), a
/// mismatched permit count and another kind at the name are the errors `acquire`
/// gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn available_permits_counts_each_live_holder_once() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let exports = locks.semaphore("sem:free", 3);
    assert_eq!(exports.available_permits().await.expect("free"), 3);

    let outer = exports.acquire().await.expect("permit");
    let inner = outer
        .scope(async { exports.acquire().await })
        .await
        .expect("re-entry");
    assert_eq!(exports.available_permits().await.expect("one held"), 2);
    let theirs = other
        .semaphore("sem:free", 3)
        .acquire()
        .await
        .expect("another permit");
    assert_eq!(
        other
            .semaphore("sem:free", 3)
            .available_permits()
            .await
            .expect("two held"),
        1
    );

    let err = locks
        .semaphore("sem:free", 5)
        .available_permits()
        .await
        .expect_err("5 is not its count");
    assert!(
        matches!(
            err,
            LockError::PermitsMismatch {
                permits: 3,
                asked: 5,
                ..
            }
        ),
        "{err}"
    );
    let plain = locks.lock("sem:plain").await.expect("a plain lock");
    let err = locks
        .semaphore("sem:plain", 2)
        .available_permits()
        .await
        .expect_err("a plain lock is there");
    assert!(matches!(err, LockError::KindConflict { .. }), "{err}");
    let err = locks
        .semaphore("sem:free", 0)
        .available_permits()
        .await
        .expect_err("no permits");
    assert!(err.is_invalid_input(), "{err}");

    theirs.unlock().await.expect("theirs");
    inner.unlock().await.expect("inner");
    assert_eq!(exports.available_permits().await.expect("one held"), 2);
    outer.unlock().await.expect("outer");
    assert_eq!(exports.available_permits().await.expect("free again"), 3);
    plain.unlock().await.expect("plain");
}

/// A permit taken with a fixed lease is extended like a lock (its own lease, on
/// the server's clock), and counts as held while it lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_lease_permit_is_extended() {
    let server = support::server();
    let locks = support::client(&server).await;
    let exports = locks.semaphore("sem:extend", 2);
    let permit = exports
        .acquire()
        .lease(Duration::from_millis(300))
        .await
        .expect("permit");
    permit
        .extend(Duration::from_secs(5))
        .await
        .expect("extended");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!permit.is_lost());
    assert_eq!(exports.available_permits().await.expect("held"), 1);
    let info = locks.inspect("sem:extend").await.expect("inspect");
    let left = info.holders[0].lease_remaining.expect("a lease");
    assert!(left > Duration::from_secs(4), "{left:?}");
    permit.unlock().await.expect("unlock");
}
