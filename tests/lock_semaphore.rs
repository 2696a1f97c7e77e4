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

use distlock::{layout, HoldMode, LockClient, LockError, LockKind, MAX_PERMITS};
use distlock_testkit::{History, RedisServer};
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// The live permit holders of semaphore `name` in Redis: their hold counts, sorted.
fn permits_held(server: &RedisServer, name: &str) -> Vec<u64> {
    let lock = support::stored(server, name);
    if !lock.holders().is_empty() {
        let semaphore = layout::Kind::Permit { permits: 1 }.word();
        assert_eq!(lock.kind(), Some(semaphore), "{name}: {lock:?}");
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

    // Once none is held, the next acquisition sets the count.
    let two = locks
        .semaphore("sem:bad", 2)
        .acquire()
        .await
        .expect("permit");
    assert_eq!(support::stored(&server, "sem:bad").permits(), Some(2));
    two.unlock().await.expect("unlock");
    let five = locks
        .semaphore("sem:bad", 5)
        .acquire()
        .await
        .expect("a new count");
    let info = locks.inspect("sem:bad").await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::Semaphore { permits: 5 }));
    five.unlock().await.expect("unlock");
}

/// Issue 26 (what Redisson users look for, `RSemaphore.availablePermits()`): the
/// free permits, one read: each live holder takes one (a re-entry counts once),
/// under the smaller of the count asked and the count in force; another kind at the
/// name is the error `acquire` gives.
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

    // Asked with another count: the count in force (3) bounds a larger one, and a
    // smaller one bounds itself.
    assert_eq!(
        locks
            .semaphore("sem:free", 5)
            .available_permits()
            .await
            .expect("another count"),
        1
    );
    assert_eq!(
        locks
            .semaphore("sem:free", 2)
            .available_permits()
            .await
            .expect("a smaller count"),
        0
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

/// The holders of a semaphore inside the test, by the permit count each asked for:
/// checked at every acquisition against the rule that no holder shares the
/// semaphore with more holders than it asked for.
#[derive(Default)]
struct Inside {
    holders: std::sync::Mutex<Vec<u32>>,
    most: std::sync::Mutex<Vec<(usize, u32)>>,
}

impl Inside {
    /// A holder that asked for `asked` came in: the holders now, the smallest count
    /// among them.
    fn enter(&self, asked: u32) -> (usize, u32) {
        let mut holders = self.holders.lock().expect("inside");
        holders.push(asked);
        let least = holders.iter().copied().min().unwrap_or(asked);
        let now = (holders.len(), least);
        self.most.lock().expect("most").push(now);
        now
    }

    fn leave(&self, asked: u32) {
        let mut holders = self.holders.lock().expect("inside");
        if let Some(at) = holders.iter().position(|&n| n == asked) {
            holders.swap_remove(at);
        }
    }

    /// The most holders seen at once since the last call.
    fn take_most(&self) -> usize {
        let seen = std::mem::take(&mut *self.most.lock().expect("most"));
        seen.iter().map(|&(n, _)| n).max().unwrap_or(0)
    }
}

/// `tasks` tasks of one version of a service (its own client), each taking a permit
/// of `asked` in a loop until `stop`, holding it a few milliseconds; every count of
/// holders is checked on entry. The errors they met, if any.
fn version(
    locks: LockClient,
    asked: u32,
    tasks: usize,
    inside: Arc<Inside>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinSet<Result<usize, String>> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (locks, inside, stop) = (locks.clone(), inside.clone(), stop.clone());
        set.spawn(async move {
            let mut runs = 0;
            while !stop.load(Ordering::Relaxed) {
                let permit = locks
                    .semaphore("sem:rolling", asked)
                    .acquire()
                    .wait(Duration::from_secs(20))
                    .await
                    .map_err(|err| format!("asked for {asked}: {err}"))?;
                let (holders, least) = inside.enter(asked);
                if holders > least as usize {
                    return Err(format!(
                        "{holders} holders while one of them asked for {least} permits"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.leave(asked);
                permit
                    .unlock()
                    .await
                    .map_err(|err| format!("unlock: {err}"))?;
                runs += 1;
            }
            Ok(runs)
        });
    }
    set
}

/// Waits for every task of `set`; panics with the first error one met.
async fn finish(set: &mut tokio::task::JoinSet<Result<usize, String>>) -> usize {
    let mut runs = 0;
    while let Some(joined) = set.join_next().await {
        runs += joined.expect("task").unwrap_or_else(|err| panic!("{err}"));
    }
    runs
}

/// Issue 37 (3): a rolling deploy that changes a semaphore's size, `from` permits
/// to `to`, with holders of both versions at once: nobody gets an error, no holder
/// ever shares the semaphore with more holders than it asked for, and once the old
/// version is gone the new count is what holds: reached when it is a raise, never
/// passed when it is a cut.
async fn rolling_change(from: u32, to: u32) {
    let server = support::server();
    let [old, new] = support::clients(&server).await;
    let inside = Arc::new(Inside::default());
    let stop_old = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_new = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut olds = version(old, from, 5, inside.clone(), stop_old.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alone = inside.take_most();
    assert_eq!(
        alone, from as usize,
        "the old version alone reaches its count"
    );
    // Both versions at once.
    let mut news = version(new, to, 5, inside.clone(), stop_new.clone());
    tokio::time::sleep(Duration::from_millis(600)).await;
    let both = inside.take_most();
    assert!(
        both <= from.max(to) as usize,
        "{both} holders with both versions"
    );
    stop_old.store(true, Ordering::Relaxed);
    let old_runs = finish(&mut olds).await;
    inside.take_most();
    // The new version alone.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let after = inside.take_most();
    stop_new.store(true, Ordering::Relaxed);
    let new_runs = finish(&mut news).await;
    println!(
        "{from} -> {to}: {alone} alone, {both} with both, {after} after; runs {old_runs} old, {new_runs} new"
    );
    assert!(new_runs > 0 && old_runs > 0, "both versions ran");
    assert_eq!(
        after, to as usize,
        "the new count holds once the old version is gone"
    );
    assert_eq!(permits_held(&server, "sem:rolling"), Vec::<u64>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_raise_from_two_to_three_permits_serves_both_versions() {
    rolling_change(2, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_cut_from_three_to_two_permits_serves_both_versions() {
    rolling_change(3, 2).await;
}

/// The rule in Redis, step by step: a holder that asks for another count keeps it
/// beside its hold (`#permits:<owner>`), the count in force is the smallest, and
/// its field goes with its hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_asks_for_another_count_keeps_it_beside_its_hold() {
    let server = support::server();
    let locks = support::client(&server).await;
    let three = locks.semaphore("sem:sizes", 3);
    let two = locks.semaphore("sem:sizes", 2);
    let a = three.acquire().await.expect("first of 3");
    let b = two.acquire().await.expect("one of 2");
    let stored = support::stored(&server, "sem:sizes");
    assert_eq!(stored.permits(), Some(3), "{stored:?}");
    let asked: Vec<Option<u64>> = stored
        .holders()
        .keys()
        .map(|owner| stored.asked_permits(owner))
        .collect();
    assert!(
        asked.contains(&Some(2)) && asked.contains(&None),
        "{stored:?}"
    );
    let info = locks.inspect("sem:sizes").await.expect("inspect");
    assert_eq!(
        info.kind,
        Some(LockKind::Semaphore { permits: 2 }),
        "in force"
    );
    // Two hold, and one of them asked for 2: a third is refused whatever it asks.
    assert!(three.try_acquire().await.expect("try").is_none());
    b.unlock().await.expect("unlock");
    let stored = support::stored(&server, "sem:sizes");
    assert!(
        stored
            .meta()
            .keys()
            .all(|field| !field.starts_with(layout::PERMITS_OF)),
        "the field went with its hold: {stored:?}"
    );
    // Back to 3 in force: two more may come.
    let c = three.try_acquire().await.expect("try").expect("3 in force");
    let d = three.try_acquire().await.expect("try").expect("3 in force");
    for guard in [a, c, d] {
        guard.unlock().await.expect("unlock");
    }
}
