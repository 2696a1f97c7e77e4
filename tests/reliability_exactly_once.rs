//! Exactly once: every hold in Redis is taken and given back once, whatever the
//! network does to the replies; a caller is told `Ok` only for what is known to have
//! happened, and an error says what is known (a loss, Redis out of reach) rather than
//! what is merely possible.
//!
//! A reply later than the response timeout makes the client retry (a release) or
//! replay in the background (an acquire). Every operation carries its owner's
//! sequence number, and the lock keeps its holder's replay record (the floor and the
//! numbers applied above it, lua/acquire.lua "Exactly once"), so a replay is applied
//! never twice, whatever lands in between. These tests drive real `redis-server`s
//! through the testkit's `FaultProxy` (loopback only) and read the lock
//! (`distlock:{NAME}`: `"<owner> <count> <fence> <floor> <done...>"`) straight from
//! the server.

mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{LockClient, LockContext, LockError, LockGuard};
use distlock_testkit::{Direction, FaultProxy, RedisServer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{eventually, lock_key as key, proxy, redis_count as hold_count, server};
use tokio::time::Instant;

// ---------------------------------------------------------------------------------
// Local helpers.
// ---------------------------------------------------------------------------------

/// A client of `url` with every setting at its default.
async fn plain_client(url: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connect")
}

/// Whether the lock of `name` is held: some owner has a hold count in its hash.
fn exists(server: &RedisServer, name: &str) -> bool {
    support::held(server, &key(name))
}

/// The remaining lease of `name` in ms, as Redis says (`PTTL`).
fn pttl(server: &RedisServer, name: &str) -> String {
    server.cmd(&["PTTL", &key(name)]).expect("PTTL")
}

/// The hold count of `name` once background work (retries, replays, give-backs) has
/// settled: after `grace`, the first value that stays the same for `quiet`, polled
/// for at most `limit` in all.
async fn settled_count(
    server: &RedisServer,
    name: &str,
    grace: Duration,
    quiet: Duration,
    limit: Duration,
) -> u64 {
    let deadline = Instant::now() + limit;
    tokio::time::sleep(grace).await;
    let mut value = hold_count(server, name);
    let mut since = Instant::now();
    loop {
        if since.elapsed() >= quiet || Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = hold_count(server, name);
        if now != value {
            value = now;
            since = Instant::now();
        }
    }
}

/// Gives back a guard a test does not care about any more, ignoring the outcome.
async fn discard(guard: Option<LockGuard>) {
    if let Some(guard) = guard {
        let _ = guard.unlock().await;
    }
}

// ---------------------------------------------------------------------------------
// 1. A release whose reply is late is retried; another operation of the same owner
//    that lands in between makes the retry look new, so it is applied again.
// ---------------------------------------------------------------------------------

/// Outer guard plus two re-entries (count 3). The release of the first re-entry gets
/// its reply 600 ms late (response timeout 400 ms), so it is retried at 400 ms; in
/// between, the second re-entry is dropped and its background release lands. The
/// retry then finds another attempt in `#op` and gives back a third hold: the lock
/// is deleted while the outer guard lives, believes it holds it (`is_lost()` false),
/// and another client takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_retried_after_a_dropped_guard_is_not_applied_twice() {
    const NAME: &str = "twice:dropped";
    let server = server();
    let proxy = proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_millis(400)).await;
    let other = plain_client(&server.url()).await;

    let outer = locks.lock(NAME).await.expect("outer");
    let released = outer
        .scope(async {
            let first = locks.lock(NAME).await.expect("first re-entry");
            let second = locks.lock(NAME).await.expect("second re-entry");
            assert_eq!(hold_count(&server, NAME), 3, "outer + two re-entries");
            // From now on replies come 600 ms late: past the 400 ms response timeout.
            support::replies_late(&proxy, Duration::from_millis(600));
            let release = tokio::spawn(first.unlock());
            // The release is applied at once (requests are not delayed); its reply is
            // on its way. Drop the second re-entry: its background release lands
            // before the first release's retry (at 400 ms).
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(second);
            tokio::time::sleep(Duration::from_millis(50)).await;
            // The retries' replies queue behind the late ones, no later.
            support::replies_late(&proxy, Duration::ZERO);
            release.await.expect("join")
        })
        .await;
    proxy.heal();
    let count = settled_count(
        &server,
        NAME,
        Duration::from_millis(500),
        Duration::from_millis(300),
        Duration::from_secs(3),
    )
    .await;
    let outer_lost = outer.is_lost();
    let intruder = other.try_lock(NAME).await.expect("try_lock");
    let intruded = intruder.is_some();
    discard(intruder).await;
    let _ = outer.unlock().await;
    assert!(
        count == 1 && !intruded,
        "one live guard (the outer one, is_lost() = {outer_lost}), but Redis holds {count} \
         hold(s) and another client {} take the lock (first re-entry's unlock: {released:?})",
        if intruded { "could" } else { "could not" }
    );
}

/// Outer guard plus one re-entry (count 2). The re-entry's release gets its reply
/// 650 ms late (response timeout 500 ms) and is retried at 500 ms; at 320 ms a second
/// re-entry lands (count 2 again, its reply in time). The retry finds the second
/// re-entry's attempt in `#op` and gives back one more hold: two live guards, count 1.
/// The outer `unlock()` then frees the lock while the second re-entry is alive and
/// says `is_lost() == false`, and another client acquires it: two holders.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_retried_after_a_re_entry_is_not_applied_twice() {
    const NAME: &str = "twice:reentry";
    let server = server();
    let proxy = proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_millis(500)).await;
    let other = plain_client(&server.url()).await;

    let outer = locks.lock(NAME).await.expect("outer");
    let (released, second) = outer
        .scope(async {
            let first = locks.lock(NAME).await.expect("first re-entry");
            assert_eq!(hold_count(&server, NAME), 2, "outer + re-entry");
            support::replies_late(&proxy, Duration::from_millis(650));
            let release = tokio::spawn(first.unlock());
            tokio::time::sleep(Duration::from_millis(50)).await;
            // Only that release's reply is late; what follows queues behind it.
            support::replies_late(&proxy, Duration::ZERO);
            tokio::time::sleep(Duration::from_millis(270)).await;
            // Applied before the retry (500 ms); its reply comes at 650 ms, in time.
            let second = locks.lock(NAME).await;
            (release.await.expect("join"), second)
        })
        .await;
    let second = second.expect("second re-entry (its reply was in time)");
    let count = settled_count(
        &server,
        NAME,
        Duration::from_millis(300),
        Duration::from_millis(300),
        Duration::from_secs(3),
    )
    .await;
    let outer_unlock = outer.unlock().await;
    let second_lost = second.is_lost();
    let intruder = other.try_lock(NAME).await.expect("try_lock");
    let intruded = intruder.is_some();
    discard(intruder).await;
    let _ = second.unlock().await;
    assert!(
        count == 2 && !intruded,
        "two live guards (outer and second re-entry), but Redis holds {count} hold(s); after \
         the outer unlock ({outer_unlock:?}) the second re-entry (is_lost() = {second_lost}) \
         was alive and another client {} take the lock (first re-entry's unlock: {released:?})",
        if intruded { "could" } else { "could not" }
    );
}

// ---------------------------------------------------------------------------------
// 2. A re-entry whose reply is lost, retried at once by the caller: the background
//    replay of the first attempt is applied again, and only one give-back follows.
// ---------------------------------------------------------------------------------

/// The re-entry's reply comes 600 ms late (response timeout 400 ms): the caller gets
/// an error and re-enters again at once (its reply in time). The background replay
/// of the first attempt (50 ms later) finds the retry's attempt in `#op`, takes a
/// hold again, and gives back one: a hold too many. After every guard is unlocked the
/// lock stays held, unrenewed, until its 30 s lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_entry_retried_after_a_lost_reply_leaves_no_hold_behind() {
    const NAME: &str = "reenter:retried";
    let server = server();
    let proxy = proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_millis(400)).await;

    let outer = locks.lock(NAME).await.expect("outer");
    let (first, unlocked) = outer
        .scope(async {
            support::replies_late(&proxy, Duration::from_millis(600));
            let first = locks.lock(NAME).await;
            support::replies_late(&proxy, Duration::ZERO);
            // The natural reaction to the error: try again, now (within 50 ms).
            let retry = locks.lock(NAME).await.expect("the caller's retry");
            (first.map(|guard| guard.hold_count()), retry.unlock().await)
        })
        .await;
    let err = first.expect_err("the first re-entry's reply was later than the timeout");
    assert!(err.is_redis(), "{err:?}");
    unlocked.expect("unlock the retried re-entry");
    outer.unlock().await.expect("outer unlock");
    let freed = eventually(Duration::from_secs(2), || !exists(&server, NAME)).await;
    let (count, left) = (hold_count(&server, NAME), pttl(&server, NAME));
    let info = locks.inspect(NAME).await.expect("inspect");
    assert!(
        freed && !info.held,
        "every guard was unlocked, but the lock is still held: count {count} in Redis, \
         {left} ms of lease left, unrenewed"
    );
}

// ---------------------------------------------------------------------------------
// 3. A final release whose first reply is lost: the retry answers "not held".
// ---------------------------------------------------------------------------------

/// Holds `name` through `proxy`, then runs `between` and unlocks with the first reply
/// 450 ms late (response timeout 300 ms), so the release is retried and the retry's
/// reply is in time. Checks that the release script ran twice (try and retry);
/// returns what `unlock()` returned.
async fn unlock_with_a_late_first_reply(
    server: &RedisServer,
    proxy: &FaultProxy,
    name: &str,
    between: impl std::future::Future<Output = ()>,
) -> Result<(), LockError> {
    let holder = support::client_with_timeout(&proxy.url(), Duration::from_millis(300)).await;
    let guard = holder.lock(name).await.expect("lock");
    between.await;
    assert!(
        !guard.is_lost(),
        "not yet known lost (the watchdog renews at 10 s)"
    );
    let before = support::script_calls(server);
    support::replies_late(proxy, Duration::from_millis(450));
    let unlock = tokio::spawn(guard.unlock());
    tokio::time::sleep(Duration::from_millis(50)).await;
    support::replies_late(proxy, Duration::ZERO);
    let result = unlock.await.expect("join");
    assert_eq!(
        support::script_calls(server) - before,
        2,
        "the release was sent twice: its first try and one retry"
    );
    result
}

/// The first try applies (the lock is freed), its reply is late, the retry finds the
/// lock gone: that is this release, and `unlock()` says `Ok`. Passes today; must keep
/// passing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_whose_first_reply_is_late_is_ok_when_it_applied() {
    const NAME: &str = "final:applied";
    let server = server();
    let proxy = proxy(&server);
    let result = unlock_with_a_late_first_reply(&server, &proxy, NAME, async {}).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(!exists(&server, NAME), "the lock is free");
}

/// The first try applies and frees the lock; its reply is late, and a waiter of
/// another client takes the lock before the retry arrives. The retry finds its
/// owner holding nothing and no force-unlock's record (the client asked the release
/// for none: `lua/release.lua`, "Records"), so the first try applied it, and
/// `unlock()` says `Ok`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_retried_after_a_waiter_took_the_lock_is_ok() {
    const NAME: &str = "final:handed";
    let server = server();
    let proxy = proxy(&server);
    let other = plain_client(&server.url()).await;
    let holder = support::client_with_timeout(&proxy.url(), Duration::from_millis(300)).await;
    let guard = holder.lock(NAME).await.expect("lock");
    let waiter = tokio::spawn({
        let other = other.clone();
        async move { other.lock(NAME).wait(Duration::from_secs(5)).await }
    });
    let waiting = eventually(Duration::from_secs(2), || {
        support::channel_subscribers(&server, NAME) > 0
    })
    .await;
    assert!(waiting, "the waiter never subscribed");
    let before = support::script_calls(&server);
    support::replies_late(&proxy, Duration::from_millis(450));
    let unlock = tokio::spawn(guard.unlock());
    let taken = waiter
        .await
        .expect("join")
        .expect("the waiter takes the lock");
    support::replies_late(&proxy, Duration::ZERO);
    let result = unlock.await.expect("join");
    assert!(
        support::script_calls(&server) - before >= 3,
        "the release, the waiter's acquire and the release's retry"
    );
    assert_eq!(hold_count(&server, NAME), 1, "the waiter holds it");
    discard(Some(taken)).await;
    assert!(
        result.is_ok(),
        "the release applied, yet unlock() returned {result:?}"
    );
}

/// The lock is force-unlocked and taken by another holder; the old holder's release
/// (first reply late) is answered "not held" twice. Nothing says that this release
/// was applied, yet `unlock()` says `Ok`: the holder believes it held the lock until
/// it gave it back, while another owner held it. Expected: `LockError::Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_retried_after_a_takeover_reports_the_loss() {
    const NAME: &str = "final:taken";
    let server = server();
    let proxy = proxy(&server);
    let other = plain_client(&server.url()).await;
    let taken = std::sync::Mutex::new(None);
    let result = unlock_with_a_late_first_reply(&server, &proxy, NAME, async {
        assert!(other.force_unlock(NAME).await.expect("force_unlock"));
        let guard = other.try_lock(NAME).await.expect("try_lock");
        *taken.lock().expect("mutex") = Some(guard.expect("free after the force-unlock"));
    })
    .await;
    let taken = taken.lock().expect("mutex").take();
    assert_eq!(
        hold_count(&server, NAME),
        1,
        "the new holder still holds it"
    );
    discard(taken).await;
    assert!(
        matches!(&result, Err(err) if err.is_lost()),
        "force-unlocked and taken by another holder, yet unlock() returned {result:?}"
    );
}

/// As above without the new holder: the lock was force-unlocked, so the release that
/// found it gone was not applied. Expected: `LockError::Lost`, as without the late
/// reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_retried_after_a_force_unlock_reports_the_loss() {
    const NAME: &str = "final:forced";
    let server = server();
    let proxy = proxy(&server);
    let other = plain_client(&server.url()).await;
    let result = unlock_with_a_late_first_reply(&server, &proxy, NAME, async {
        assert!(other.force_unlock(NAME).await.expect("force_unlock"));
    })
    .await;
    assert!(
        matches!(&result, Err(err) if err.is_lost()),
        "force-unlocked before the release, yet unlock() returned {result:?}"
    );
}

// ---------------------------------------------------------------------------------
// 4. A loss already known wins over a transport error at unlock.
// ---------------------------------------------------------------------------------

/// Asserts that `unlock()` of a guard known lost says so, whatever Redis does.
async fn assert_unlock_reports_the_loss(guard: LockGuard, outage: &str) {
    assert!(
        guard.is_lost(),
        "the loss was signalled before the {outage}"
    );
    let result = tokio::time::timeout(Duration::from_secs(15), guard.unlock())
        .await
        .expect("unlock ended");
    assert!(
        matches!(&result, Err(err) if err.is_lost()),
        "the guard was known lost, Redis {outage}: unlock() returned {result:?}, expected \
         LockError::Lost"
    );
}

/// A fixed lease ends (`lost()` fires), then Redis is killed: `unlock()` returns the
/// connection error instead of `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_of_a_lost_guard_reports_the_loss_while_redis_is_killed() {
    let mut server = server();
    let locks = plain_client(&server.url()).await;
    let guard = locks
        .lock("lost:killed")
        .lease(Duration::from_millis(300))
        .await
        .expect("lock");
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost() fired when the fixed lease ended");
    server.stop().expect("kill redis-server");
    assert_unlock_reports_the_loss(guard, "killed").await;
}

/// The lock is force-unlocked and the watchdog reports it (`lost()` fires), then Redis
/// is frozen (`SIGSTOP`): `unlock()` returns the timeout instead of `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_of_a_lost_guard_reports_the_loss_while_redis_is_frozen() {
    let server = server();
    let locks = LockClient::builder()
        .url(server.url())
        .default_lease(Duration::from_millis(600))
        .response_timeout(Duration::from_millis(150))
        .connect()
        .await
        .expect("connect");
    let operator = plain_client(&server.url()).await;
    let guard = locks.lock("lost:frozen").await.expect("lock");
    assert!(operator.force_unlock("lost:frozen").await.expect("force"));
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the watchdog reported the force-unlock");
    server.pause().expect("SIGSTOP");
    assert_unlock_reports_the_loss(guard, "frozen").await;
    server.resume().expect("SIGCONT");
}

/// The link is blackholed: the watchdog cannot renew, and the guard says `is_lost()`
/// once its lease deadline passes. `unlock()` then returns the timeout instead of
/// `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_of_a_lost_guard_reports_the_loss_behind_a_blackhole() {
    let server = server();
    let proxy = proxy(&server);
    let locks = LockClient::builder()
        .url(proxy.url())
        .default_lease(Duration::from_millis(600))
        .response_timeout(Duration::from_millis(150))
        .connect()
        .await
        .expect("connect");
    let guard = locks.lock("lost:blackholed").await.expect("lock");
    proxy.blackhole(Direction::ToServer, true);
    proxy.blackhole(Direction::ToClient, true);
    assert!(
        eventually(Duration::from_secs(2), || guard.is_lost()).await,
        "is_lost() once the lease deadline passed"
    );
    assert_unlock_reports_the_loss(guard, "behind a blackhole").await;
    proxy.heal();
}

// ---------------------------------------------------------------------------------
// 5. A wait that ends because Redis is out of reach gives the Redis error, not
//    `Timeout` ("another owner still holds it").
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Outage {
    /// `SIGKILL`: connections are refused.
    Killed,
    /// `SIGSTOP`: connections stay open, nothing answers.
    Frozen,
    /// A proxy drops every byte both ways.
    Blackholed,
}

/// A client (default settings) of a Redis that is out of reach.
struct Down {
    locks: LockClient,
    _server: RedisServer,
    _proxy: Option<FaultProxy>,
}

/// Connects a client, checks that it works, then makes Redis unreachable.
async fn down(outage: Outage) -> Down {
    let mut server = server();
    let proxy = matches!(outage, Outage::Blackholed).then(|| proxy(&server));
    let url = proxy.as_ref().map_or_else(|| server.url(), FaultProxy::url);
    let locks = plain_client(&url).await;
    let guard = locks.lock("warm-up").await.expect("lock while Redis is up");
    guard.unlock().await.expect("unlock while Redis is up");
    match outage {
        Outage::Killed => server.stop().expect("kill redis-server"),
        Outage::Frozen => server.pause().expect("SIGSTOP"),
        Outage::Blackholed => {
            let proxy = proxy.as_ref().expect("a proxy");
            proxy.blackhole(Direction::ToServer, true);
            proxy.blackhole(Direction::ToClient, true);
        }
    }
    Down {
        locks,
        _server: server,
        _proxy: proxy,
    }
}

/// How many calls each test makes: the wrong answer came in 2 of 5.
const RUNS: usize = 5;

/// Asserts that every result is a Redis error and none says "busy".
fn assert_all_redis_errors(outage: Outage, api: &str, results: &[Result<String, LockError>]) {
    let wrong: Vec<String> = results
        .iter()
        .enumerate()
        .filter_map(|(run, result)| match result {
            Err(err) if err.is_redis() && !err.is_busy() => None,
            Err(err) => Some(format!(
                "run {run}: {err:?} (is_busy = {}, is_redis = {})",
                err.is_busy(),
                err.is_redis()
            )),
            Ok(what) => Some(format!("run {run}: {what}")),
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "Redis {outage:?}, no owner ever seen: {} of {RUNS} {api} calls did not end in the \
         Redis error:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// The wait of the issue (1 s, twice the default response timeout of 500 ms).
const WAIT: Duration = Duration::from_secs(1);
/// A wait shorter than the response timeout: the first attempt is cut short by it.
const SHORT_WAIT: Duration = Duration::from_millis(300);

async fn wait_for_a_fresh_lock(outage: Outage, wait: Duration) {
    let down = down(outage).await;
    let mut results = Vec::new();
    for run in 0..RUNS {
        let request = down.locks.lock(format!("fresh:wait:{run}")).wait(wait);
        let result = tokio::time::timeout(wait + Duration::from_secs(10), request)
            .await
            .expect("the wait ended within 10 s of its end");
        results.push(result.map(|_| "acquired".to_owned()));
    }
    assert_all_redis_errors(outage, &format!("lock().wait({wait:?})"), &results);
}

async fn try_a_fresh_lock(outage: Outage) {
    let down = down(outage).await;
    let mut results = Vec::new();
    for run in 0..RUNS {
        let request = down.locks.try_lock(format!("fresh:try:{run}"));
        let result = tokio::time::timeout(Duration::from_secs(10), request)
            .await
            .expect("try_lock ended within 10 s");
        results.push(result.map(|guard| match guard {
            Some(_) => "acquired".to_owned(),
            None => "Ok(None): busy".to_owned(),
        }));
    }
    assert_all_redis_errors(outage, "try_lock()", &results);
}

#[cfg(feature = "macros")]
#[distlock::distributed_lock(key = "fresh:macro:{run}", client = locks, wait = "1s")]
async fn annotated(locks: &LockClient, run: usize, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[cfg(feature = "macros")]
#[distlock::distributed_lock(key = "fresh:macro:short:{run}", client = locks, wait = "300ms")]
async fn annotated_short(
    locks: &LockClient,
    run: usize,
    ran: &AtomicBool,
) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

/// Calls `annotated` (`wait = "1s"`), or `annotated_short` (`wait = "300ms"`).
#[cfg(feature = "macros")]
async fn call_an_annotated_function(outage: Outage, short: bool) {
    let down = down(outage).await;
    let ran = AtomicBool::new(false);
    let mut results = Vec::new();
    for run in 0..RUNS {
        let call = async {
            if short {
                annotated_short(&down.locks, run, &ran).await
            } else {
                annotated(&down.locks, run, &ran).await
            }
        };
        let result = tokio::time::timeout(Duration::from_secs(11), call)
            .await
            .expect("the annotated call ended within 10 s of its wait");
        results.push(result.map(|()| "the body ran".to_owned()));
    }
    assert!(!ran.load(Ordering::SeqCst), "a body ran without the lock");
    let wait = if short { "300ms" } else { "1s" };
    assert_all_redis_errors(
        outage,
        &format!("#[distributed_lock(wait = \"{wait}\")]"),
        &results,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_redis_killed_ends_in_the_redis_error() {
    wait_for_a_fresh_lock(Outage::Killed, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_redis_frozen_ends_in_the_redis_error() {
    wait_for_a_fresh_lock(Outage::Frozen, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_a_request_with_redis_frozen_ends_in_the_redis_error() {
    wait_for_a_fresh_lock(Outage::Frozen, SHORT_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_behind_a_blackhole_ends_in_the_redis_error() {
    wait_for_a_fresh_lock(Outage::Blackholed, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_shorter_than_a_request_behind_a_blackhole_ends_in_the_redis_error() {
    wait_for_a_fresh_lock(Outage::Blackholed, SHORT_WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_with_redis_killed_ends_in_the_redis_error() {
    try_a_fresh_lock(Outage::Killed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_with_redis_frozen_ends_in_the_redis_error() {
    try_a_fresh_lock(Outage::Frozen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_lock_behind_a_blackhole_ends_in_the_redis_error() {
    try_a_fresh_lock(Outage::Blackholed).await;
}

#[cfg(feature = "macros")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_call_with_redis_killed_ends_in_the_redis_error() {
    call_an_annotated_function(Outage::Killed, false).await;
}

#[cfg(feature = "macros")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_call_with_redis_frozen_ends_in_the_redis_error() {
    call_an_annotated_function(Outage::Frozen, false).await;
}

#[cfg(feature = "macros")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_short_wait_with_redis_frozen_ends_in_the_redis_error() {
    call_an_annotated_function(Outage::Frozen, true).await;
}

#[cfg(feature = "macros")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_call_behind_a_blackhole_ends_in_the_redis_error() {
    call_an_annotated_function(Outage::Blackholed, false).await;
}

#[cfg(feature = "macros")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotated_short_wait_behind_a_blackhole_ends_in_the_redis_error() {
    call_an_annotated_function(Outage::Blackholed, true).await;
}

// ---------------------------------------------------------------------------------
// 6. Random interleavings of one owner's operations under late replies.
// ---------------------------------------------------------------------------------

const RANDOM_NAME: &str = "random";
/// The response timeout of the random test's client.
const RANDOM_TIMEOUT: Duration = Duration::from_millis(200);
const RANDOM_STEPS: usize = 40;
const RANDOM_BUDGET: Duration = Duration::from_secs(45);

/// One operation of a random step.
enum Op {
    /// No guard is left: a new holder takes the lock.
    Fresh,
    /// A re-entry in this task, inside the scope of a live guard.
    Reenter(LockContext),
    /// A re-entry from a spawned task handed the context (`LockContext::current()`).
    Spawned(LockContext),
    Unlock(LockGuard),
    /// Dropped without `unlock`: released in the background.
    Drop(LockGuard),
}

/// Runs `op` after `offset`; returns the guard it produced, if any, and what happened.
async fn run_op(locks: LockClient, offset: Duration, op: Op) -> (Option<LockGuard>, String) {
    tokio::time::sleep(offset).await;
    let at = offset.as_millis();
    let reentry = |what: &str, result: Result<LockGuard, LockError>| match result {
        Ok(guard) => {
            let line = format!("@{at}ms {what}: count {}", guard.hold_count());
            (Some(guard), line)
        }
        Err(err) => (None, format!("@{at}ms {what}: {err}")),
    };
    match op {
        Op::Fresh => {
            let result = locks.lock(RANDOM_NAME).wait(Duration::from_secs(5)).await;
            reentry("fresh lock", result)
        }
        Op::Reenter(context) => reentry(
            "re-entry",
            context.scope(locks.lock(RANDOM_NAME).into_future()).await,
        ),
        Op::Spawned(context) => {
            let handed = context.scope(async { LockContext::current() }).await;
            let task = tokio::spawn(handed.scope(async move { locks.lock(RANDOM_NAME).await }));
            reentry("spawned re-entry", task.await.expect("join"))
        }
        Op::Unlock(guard) => {
            let count = guard.hold_count();
            let result = guard.unlock().await;
            (None, format!("@{at}ms unlock (count {count}): {result:?}"))
        }
        Op::Drop(guard) => {
            let count = guard.hold_count();
            drop(guard);
            (None, format!("@{at}ms drop (count {count})"))
        }
    }
}

/// One to three operations for a step, each with its start offset.
fn plan(rng: &mut StdRng, live: &mut Vec<LockGuard>) -> Vec<(Duration, Op)> {
    if live.is_empty() {
        return vec![(Duration::ZERO, Op::Fresh)];
    }
    let limit = RANDOM_TIMEOUT.as_millis() as u64 * 6 / 5;
    let mut ops = Vec::new();
    for _ in 0..rng.random_range(1..=3) {
        let offset = Duration::from_millis(rng.random_range(0..=limit));
        let op = match rng.random_range(0..6) {
            0 | 1 if !live.is_empty() => {
                let context = live[rng.random_range(0..live.len())].context();
                Op::Reenter(context)
            }
            2 if !live.is_empty() => {
                let context = live[rng.random_range(0..live.len())].context();
                Op::Spawned(context)
            }
            3 | 4 if !live.is_empty() => {
                Op::Unlock(live.swap_remove(rng.random_range(0..live.len())))
            }
            5 if !live.is_empty() => Op::Drop(live.swap_remove(rng.random_range(0..live.len()))),
            _ => continue,
        };
        ops.push((offset, op));
    }
    if ops.is_empty() {
        let context = live[0].context();
        ops.push((Duration::ZERO, Op::Reenter(context)));
    }
    ops
}

/// Re-entries, unlocks, background drops and re-entries from spawned tasks of one
/// owner, one to three at a time at random offsets, with replies randomly late past
/// the response timeout (200 ms). After each step, once background work settled, the
/// hold count in Redis equals the live guards, and the lock is free exactly when
/// none is left. Seeded: `DISTLOCK_EXACT_SEED=<seed>` replays the same plan (timings
/// differ from run to run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_interleavings_keep_the_count_equal_to_the_live_guards() {
    let seed = std::env::var("DISTLOCK_EXACT_SEED")
        .ok()
        .and_then(|seed| seed.parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    println!("seed {seed}: replay with DISTLOCK_EXACT_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let server = server();
    let proxy = proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), RANDOM_TIMEOUT).await;
    let mut live: Vec<LockGuard> = Vec::new();
    let mut log: Vec<String> = Vec::new();
    let started = Instant::now();
    let mut steps = 0;
    let (mut late_steps, mut operations) = (0u64, 0u64);

    while steps < RANDOM_STEPS && started.elapsed() < RANDOM_BUDGET {
        steps += 1;
        let late = rng.random_bool(0.6);
        let delay = if late {
            RANDOM_TIMEOUT + Duration::from_millis(rng.random_range(30..=150))
        } else {
            Duration::ZERO
        };
        // Lifted within the step, so that every retry and replay gets an answer in the
        // end (a link late for good makes a lost acquire's replay give up, which is
        // another matter).
        let heal_at = late.then(|| Duration::from_millis(rng.random_range(20..=300)));
        late_steps += u64::from(late);
        let planned = plan(&mut rng, &mut live);
        operations += planned.len() as u64;
        let mut ops = planned.into_iter();
        log.push(format!(
            "step {steps}: replies {}ms late{}",
            delay.as_millis(),
            heal_at.map_or(String::new(), |at| format!(" until @{}ms", at.as_millis()))
        ));
        support::replies_late(&proxy, delay);
        let slot = |op: Option<(Duration, Op)>| {
            let locks = locks.clone();
            async move {
                match op {
                    Some((offset, op)) => Some(run_op(locks, offset, op).await),
                    None => None,
                }
            }
        };
        let heal = async {
            if let Some(at) = heal_at {
                tokio::time::sleep(at).await;
                support::replies_late(&proxy, Duration::ZERO);
            }
        };
        let step =
            async { tokio::join!(slot(ops.next()), slot(ops.next()), slot(ops.next()), heal) };
        let (a, b, c, ()) = tokio::time::timeout(Duration::from_secs(10), step)
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: step {steps} did not end in 10 s"));
        for (guard, line) in [a, b, c].into_iter().flatten() {
            log.push(format!("  {line}"));
            live.extend(guard);
        }
        proxy.heal();
        let count = settled_count(
            &server,
            RANDOM_NAME,
            RANDOM_TIMEOUT * 2 + Duration::from_millis(100),
            Duration::from_millis(400),
            Duration::from_secs(4),
        )
        .await;
        let held = exists(&server, RANDOM_NAME);
        let lost = live.iter().filter(|guard| guard.is_lost()).count();
        log.push(format!(
            "  settled: count {count} in Redis, {} live guard(s), {lost} lost",
            live.len()
        ));
        let free = !held;
        if count != live.len() as u64 || free != live.is_empty() {
            let tail = log[log.len().saturating_sub(30)..].join("\n");
            panic!(
                "seed {seed} (replay: DISTLOCK_EXACT_SEED={seed}), step {steps}: Redis holds \
                 {count} hold(s) (key {}) for {} live guard(s)\n{tail}",
                if held { "present" } else { "absent" },
                live.len()
            );
        }
    }
    for guard in live.drain(..) {
        let _ = guard.unlock().await;
    }
    let freed = eventually(Duration::from_secs(3), || !exists(&server, RANDOM_NAME)).await;
    assert!(
        freed,
        "seed {seed}: every guard unlocked, the lock still held (count {})",
        hold_count(&server, RANDOM_NAME)
    );
    println!("seed {seed}: {steps} steps clean");
    println!(
        "RELIABILITY scenario=exactly_once_random_interleavings steps={steps} \
         late_steps={late_steps} operations={operations} mismatches=0"
    );
}

/// Issue 34 (3), through a replaced server: a final release applied on the old
/// server, whose reply was lost, is retried on a server restarted empty, which has
/// no record of it and answers "not held". That answer cannot tell whether the
/// release applied (the record was on the old server), so `unlock()` must not say
/// `Lost`: the release did apply, and the work under the lock overlapped nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_retried_on_a_replaced_server_is_not_read_as_not_held() {
    let mut server = server();
    let proxy = proxy(&server);
    let locks = support::client_with_timeout(&proxy.url(), Duration::from_millis(400)).await;
    let guard = locks.lock("ex:replaced").await.expect("lock");
    proxy.blackhole(Direction::ToClient, true);
    let unlocking = tokio::spawn(guard.unlock());
    let applied = eventually(Duration::from_secs(2), || {
        hold_count(&server, "ex:replaced") == 0
    })
    .await;
    assert!(applied, "the release never reached the server");
    server.restart().expect("restart empty");
    proxy.reset_all();
    proxy.blackhole(Direction::ToClient, false);
    let result = tokio::time::timeout(Duration::from_secs(10), unlocking)
        .await
        .expect("unlock returned")
        .expect("join");
    println!("unlock after a replaced server: {result:?}");
    assert!(
        !matches!(result, Err(LockError::Lost { .. })),
        "an applied release retried on a replaced server was reported lost: {result:?}"
    );
}

/// A release applied well within its lease whose reply comes after the end the
/// client counted on for the hold (its deadline): the server's "released" says the
/// lock was held until this release, so `unlock()` says `Ok`. It said `Lost`: the
/// deadline passing during the release's own round trip was taken for a loss known
/// before it. (A response timeout longer than the delay: no retry.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_applied_in_its_lease_and_answered_after_it_is_ok() {
    const NAME: &str = "final:answered-late";
    let lease = Duration::from_millis(600);
    let server = server();
    let proxy = proxy(&server);
    let holder = LockClient::builder()
        .url(proxy.url())
        .default_lease(lease)
        .response_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect");
    let guard = holder.lock(NAME).await.expect("lock");
    assert!(!guard.is_lost());
    // Every reply a lease and 200 ms late: past the deadline the hold counts on,
    // which is at most a lease after its last confirmation, before this release.
    support::replies_late(&proxy, lease + Duration::from_millis(200));
    let sent = Instant::now();
    let unlock = tokio::spawn(guard.unlock());
    assert!(eventually(Duration::from_secs(1), || !exists(&server, NAME)).await);
    assert!(
        sent.elapsed() < lease / 2,
        "the release applied {:?} after it was sent, within the lease",
        sent.elapsed()
    );
    let result = unlock.await.expect("join");
    assert!(
        sent.elapsed() >= lease + Duration::from_millis(200),
        "the reply came after the hold's deadline"
    );
    support::replies_late(&proxy, Duration::ZERO);
    assert!(result.is_ok(), "{result:?}");
}
