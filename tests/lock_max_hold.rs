//! `max_hold`: the watchdog stops renewing a hold once it has lasted that long, the
//! lock is then lost with `LostReason::MaxHoldExceeded` and free for others within
//! one lease; other losses say why they happened; bad values change nothing.

mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use distlock::layout;
use distlock::{distributed_lock, LockClient, LockError, LostReason};
use redis::AsyncCommands;
use tokio::sync::Notify;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_millis(300);
const MAX_HOLD: Duration = Duration::from_millis(600);
/// Scheduling and round trips on a loaded machine.
const SLACK: Duration = Duration::from_millis(150);

/// Who holds lock `name` and when its key expires, as an instant: now plus its
/// PTTL (`None` when it is free).
async fn expiry(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
) -> Option<(String, Instant)> {
    let now = Instant::now();
    let lock = support::stored_over(conn, &support::lock_key(name)).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(support::lock_key(name))
        .query_async(conn)
        .await
        .expect("PTTL");
    let owner = lock.holders().keys().next()?.clone();
    let ms = u64::try_from(pttl).ok()?;
    Some((owner, now + Duration::from_millis(ms)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_stops_at_max_hold_and_the_next_holder_gets_the_lock_within_a_lease() {
    let warnings = support::capture_warnings();
    let server = support::server();
    let locks = support::client_with_lease(&server, LEASE).await;
    let other = support::client(&server).await;
    let mut conn = support::conn(&server.url()).await;

    let guard = locks
        .lock("bounded")
        .max_hold(MAX_HOLD)
        .await
        .expect("lock");
    let taken = Instant::now();
    let next = support::acquired_at(&other, "bounded", Duration::from_secs(5));

    // Sample the key's expiry until the hold is gone: it moves later while the watchdog
    // renews, and no more once `max_hold` has passed.
    let (holder, first) = expiry(&mut conn, "bounded").await.expect("a lease");
    let mut latest_before = first;
    let mut latest_after: Option<Instant> = None;
    loop {
        let sampled = Instant::now();
        // Until the first holder's hold ends (the next holder may take it at once).
        let Some((owner, at)) = expiry(&mut conn, "bounded").await else {
            break;
        };
        if owner != holder {
            break;
        }
        if sampled < taken + MAX_HOLD {
            latest_before = latest_before.max(at);
        } else {
            latest_after = Some(latest_after.map_or(at, |latest| latest.max(at)));
        }
        assert!(
            taken.elapsed() < MAX_HOLD + LEASE + SLACK * 2,
            "the key outlived max_hold by more than a lease"
        );
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    assert!(
        latest_before > first + LEASE / 3,
        "renewed before max_hold: the expiry moved from {first:?} to {latest_before:?}"
    );
    if let Some(after) = latest_after {
        // A sample near `max_hold` may still see the last renewal land (its PTTL
        // read a few ms late): nothing after that grows it.
        assert!(
            after <= latest_before + Duration::from_millis(20),
            "renewed after max_hold: the expiry moved {:?} later",
            after - latest_before
        );
    }

    let got = next.await.expect("task").expect("the next holder's lock");
    assert!(
        got >= taken + MAX_HOLD - LEASE / 3,
        "the next holder got it {:?} after the first, before max_hold",
        got - taken
    );
    assert!(
        got <= taken + MAX_HOLD + LEASE + SLACK,
        "the next holder got it {:?} after the first: more than a lease after max_hold",
        got - taken
    );
    tokio::time::timeout(SLACK, guard.lost())
        .await
        .expect("lost() fired once the lease ran out");
    assert_eq!(guard.lost_reason(), Some(LostReason::MaxHoldExceeded));
    assert_eq!(
        guard.held().lost_reason(),
        Some(LostReason::MaxHoldExceeded)
    );
    let text = warnings.text();
    let warning = text
        .lines()
        .find(|line| line.contains("bounded") && line.contains("max_hold"))
        .unwrap_or_else(|| panic!("no warning names the lock and max_hold: {text}"));
    assert!(warning.contains("600ms"), "{warning}");
    assert!(warning.contains("WARN"), "{warning}");
    let err = guard.unlock().await.expect_err("lost");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: Some(LostReason::MaxHoldExceeded),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("(it was held for its whole max_hold)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_max_hold_bounds_every_lock_and_re_entries_do_not_extend_it() {
    let server = support::server();
    let locks = support::builder(&server)
        .default_lease(LEASE)
        .max_hold(MAX_HOLD)
        .connect()
        .await
        .expect("connect");
    let guard = locks.lock("client-bound").await.expect("lock");
    let taken = Instant::now();
    assert_eq!(guard.lost_reason(), None);
    // A re-entry late in the hold: the bound still counts from the first acquisition.
    tokio::time::sleep(MAX_HOLD * 2 / 3).await;
    let inner = guard
        .scope(async { locks.lock("client-bound").await })
        .await
        .expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    tokio::time::timeout(MAX_HOLD + LEASE + SLACK, inner.lost())
        .await
        .expect("lost within a lease after max_hold");
    assert!(
        taken.elapsed() <= MAX_HOLD + LEASE + SLACK,
        "lost {:?} after the first acquisition",
        taken.elapsed()
    );
    assert_eq!(inner.lost_reason(), Some(LostReason::MaxHoldExceeded));
    // The guard counts the lease less clock drift: Redis frees it a little later.
    assert!(
        support::eventually(SLACK, || !support::held(
            &server,
            &support::lock_key("client-bound")
        ))
        .await,
        "free in Redis once the lease ran out"
    );
    assert!(inner.unlock().await.expect_err("lost").is_lost());
    assert!(guard.unlock().await.expect_err("lost").is_lost());

    // Without a bound, the same lease keeps the lock past `max_hold`.
    let unbounded = support::client_with_lease(&server, LEASE).await;
    let kept = unbounded.lock("unbounded").await.expect("lock");
    tokio::time::sleep(MAX_HOLD + LEASE + SLACK).await;
    assert_eq!(kept.lost_reason(), None);
    kept.unlock().await.expect("still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_max_hold_values_are_refused_and_change_nothing() {
    let server = support::server();
    let locks = support::client_with_lease(&server, LEASE).await;
    let cases = [
        (locks.lock("bad").max_hold(Duration::ZERO), "zero"),
        (
            locks
                .lock("bad")
                .max_hold(LEASE / 3 - Duration::from_millis(1)),
            "renewal period",
        ),
        (
            locks
                .lock("bad")
                .lease(MAX_HOLD + Duration::from_millis(1))
                .max_hold(MAX_HOLD),
            "outlasts",
        ),
    ];
    for (request, needle) in cases {
        let err = request.await.expect_err("refused");
        assert!(
            matches!(
                &err,
                LockError::InvalidOption {
                    option: "max_hold",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains(needle), "{err}");
        assert!(!support::exists(&server, &support::lock_key("bad")));
    }
    // A re-entry's fixed lease may not outlast the outermost acquisition's bound.
    let outer = locks
        .lock("bounded-outer")
        .max_hold(MAX_HOLD)
        .await
        .expect("lock");
    let err = outer
        .scope(async {
            locks
                .lock("bounded-outer")
                .lease(Duration::from_secs(60))
                .await
        })
        .await
        .expect_err("a re-entry's lease past max_hold");
    assert!(
        matches!(
            &err,
            LockError::InvalidOption {
                option: "max_hold",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        support::redis_count(&server, "bounded-outer"),
        1,
        "nothing changed"
    );
    let inner = outer
        .scope(async { locks.lock("bounded-outer").lease(MAX_HOLD / 2).await })
        .await
        .expect("a re-entry's lease within the bound");
    inner.unlock().await.expect("unlock");
    outer.unlock().await.expect("unlock");

    // The builder refuses it before it connects.
    let built = support::builder(&server)
        .default_lease(LEASE)
        .max_hold(Duration::from_millis(50))
        .connect()
        .await
        .expect_err("max_hold shorter than the renewal period");
    assert!(
        matches!(
            &built,
            LockError::InvalidOption {
                option: "max_hold",
                ..
            }
        ),
        "{built:?}"
    );
    // A fixed lease no longer than `max_hold` is fine: it ends by itself.
    let fixed = locks
        .lock("fixed")
        .lease(MAX_HOLD)
        .max_hold(MAX_HOLD)
        .await
        .expect("a fixed lease within max_hold");
    fixed.unlock().await.expect("unlock");
    let keys: Vec<String> = support::conn(&server.url())
        .await
        .keys("*")
        .await
        .expect("KEYS");
    let mut keys = keys;
    keys.sort();
    let records: Vec<String> = ["bounded-outer", "fixed"]
        .iter()
        .map(|name| format!("{}{}", support::lock_key(name), layout::FREED_SUFFIX))
        .collect();
    assert!(
        keys.len() == records.len()
            && keys
                .iter()
                .zip(&records)
                .all(|(key, record)| key.starts_with(record.as_str())),
        "only the records of the final releases of the released locks: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_not_held_and_a_paused_server_is_an_expired_lease() {
    let server = support::server();
    let locks = support::client_with_lease(&server, LEASE).await;
    let mut conn = support::conn(&server.url()).await;

    let deleted = locks.lock("deleted").await.expect("lock");
    let _: () = conn.del(support::lock_key("deleted")).await.expect("DEL");
    tokio::time::timeout(LEASE, deleted.lost())
        .await
        .expect("the next renewal finds the key gone");
    assert_eq!(deleted.lost_reason(), Some(LostReason::NotHeld));
    let err = deleted.unlock().await.expect_err("lost");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: Some(LostReason::NotHeld),
                ..
            }
        ),
        "{err:?}"
    );

    let paused = locks.lock("paused").await.expect("lock");
    server.pause().expect("SIGSTOP redis");
    let lost = tokio::time::timeout(LEASE + SLACK, paused.lost()).await;
    server.resume().expect("SIGCONT redis");
    lost.expect("lost once the lease ran out unrenewed");
    assert_eq!(paused.lost_reason(), Some(LostReason::Expired));
    let held = paused.held();
    // The first reason stays: the release that finds the key gone does not replace it.
    let err = paused.unlock().await.expect_err("lost");
    assert!(
        matches!(
            err,
            LockError::Lost {
                reason: Some(LostReason::Expired),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(held.lost_reason(), Some(LostReason::Expired));
}

#[distributed_lock(key = "job:{name}", client = locks, max_hold = "600ms", on_lost = "abort")]
async fn bounded_job(
    locks: &LockClient,
    name: &str,
    entered: &Notify,
    finished: &AtomicBool,
) -> Result<u32, LockError> {
    entered.notify_one();
    tokio::time::sleep(Duration::from_secs(10)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macros_max_hold_with_on_lost_abort_cancels_the_body() {
    let server = support::server();
    let locks = support::client_with_lease(&server, LEASE).await;
    let entered = Notify::new();
    let finished = AtomicBool::new(false);
    let started = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(5),
        bounded_job(&locks, "stuck", &entered, &finished),
    )
    .await
    .expect("cancelled long before the body's 10 s")
    .expect_err("the lock was lost");
    assert!(err.is_lost(), "{err}");
    assert!(!finished.load(Ordering::SeqCst), "the body was cancelled");
    assert!(
        started.elapsed() >= MAX_HOLD - LEASE / 3,
        "lost after {:?}, before max_hold",
        started.elapsed()
    );
    assert!(
        started.elapsed() <= MAX_HOLD + LEASE + SLACK,
        "lost after {:?}",
        started.elapsed()
    );
    assert!(
        support::eventually(SLACK, || !support::held(
            &server,
            &support::lock_key("job:stuck")
        ))
        .await,
        "free in Redis once the lease ran out"
    );
}

#[distributed_lock(key = "job:{name}", client = locks, max_hold = "600ms")]
async fn finishing_job(locks: &LockClient, name: &str, work: Duration) -> Result<u32, LockError> {
    tokio::time::sleep(work).await;
    Ok(7)
}

/// Issue 26: the macro's docs said that with `max_hold` and `on_lost = "finish"`
/// (the default) the function returns `LockError::Lost`. It does what `on_lost`'s
/// docs say: the body runs to its end, its result is returned as is, and a warning
/// names the lost lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macros_max_hold_with_on_lost_finish_returns_the_bodys_result_and_warns() {
    let warnings = support::capture_warnings();
    let server = support::server();
    let locks = support::client_with_lease(&server, LEASE).await;
    let work = MAX_HOLD + LEASE + SLACK;
    let result = finishing_job(&locks, "finishing", work).await;
    assert_eq!(result.ok(), Some(7), "the body's result, as is");
    let lost = warnings.lines_with(&["job:finishing", "lost"]);
    assert!(
        !lost.is_empty(),
        "a warning names the lost lock: {}",
        warnings.text()
    );
}

/// Observed on main: with `default_lease` 3 s and `max_hold` 1 s, a holder that keeps
/// its outer guard and re-enters every 200 ms kept the key until 5.8 s (each
/// re-entry pushed the expiry a lease ahead). A re-entry or a partial release may
/// not move the expiry past `max_hold` + one lease: the next holder gets the lock
/// by then, and the key's expiry never goes beyond it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entries_do_not_keep_the_lock_past_max_hold_and_a_lease() {
    const LEASE: Duration = Duration::from_millis(900);
    const MAX_HOLD: Duration = Duration::from_millis(300);
    let server = support::server();
    let locks = support::client_with_lease(&server, LEASE).await;
    let other = support::client(&server).await;
    let mut conn = support::conn(&server.url()).await;
    let outer = locks
        .lock("capped:reentered")
        .max_hold(MAX_HOLD)
        .await
        .expect("lock");
    let taken = Instant::now();
    let bound = taken + MAX_HOLD + LEASE;
    let next = support::acquired_at(&other, "capped:reentered", Duration::from_secs(5));
    // Re-enter (and give back, a partial release) every 60 ms until the hold is lost.
    let mut rounds = 0;
    while !outer.is_lost() && taken.elapsed() < Duration::from_secs(4) {
        if let Ok(inner) = outer
            .scope(locks.lock("capped:reentered").into_future())
            .await
        {
            let _ = inner.unlock().await;
        }
        rounds += 1;
        if let Some((_, expires)) = expiry(&mut conn, "capped:reentered").await {
            assert!(
                expires <= bound + SLACK,
                "round {rounds}: the key expires {:?} after max_hold + a lease",
                expires - bound
            );
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let got = next.await.expect("task").expect("the next holder's lock");
    support::summary(
        "max_hold_with_re_entries",
        &[
            ("re_entries", rounds),
            (
                "next_holder_after_bound_ms",
                got.saturating_duration_since(bound).as_millis() as u64,
            ),
        ],
    );
    assert!(rounds > 10, "only {rounds} re-entries");
    assert!(
        got <= bound + SLACK,
        "the next holder got it {:?} after max_hold + a lease",
        got - bound
    );
    drop(outer);
}

/// Observed: after a server was found replaced (here restarted from a snapshot, so
/// it still has the lock), the watchdog's check renewed every hold it watches with
/// a whole lease, those whose `max_hold` had stopped their renewals included: such
/// a lock then lasted a lease past the check, beyond `max_hold` and a lease. The
/// check confirms a capped hold without moving its end past `max_hold` and a lease,
/// and the client counts on no more than that either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_after_a_replaced_server_does_not_renew_a_hold_past_max_hold() {
    let lease = Duration::from_millis(1500);
    let max_hold = Duration::from_millis(500);
    let mut server = support::server();
    let locks = support::client_with_lease(&server, lease).await;
    let guard = locks
        .lock("capped:check")
        .max_hold(max_hold)
        .await
        .expect("lock");
    let taken = Instant::now();
    let ends_by = taken + max_hold + lease;
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.cmd(&["SAVE"]).expect("SAVE");
    server.restart_keeping(&["dump.rdb"]).expect("restart");
    assert!(support::held(&server, &support::lock_key("capped:check")));
    // A grant on the new server comes after the check of every hold there.
    let other = locks
        .lock("capped:other")
        .await
        .expect("lock after the restart");
    let now = Instant::now();
    assert!(
        now < ends_by - Duration::from_millis(300),
        "too slow to tell"
    );
    let pttl: u64 = server
        .cmd(&["PTTL", &support::lock_key("capped:check")])
        .expect("PTTL")
        .parse()
        .expect("a lease left");
    let expires = now + Duration::from_millis(pttl);
    assert!(
        expires <= ends_by + SLACK,
        "the check renewed the capped hold to {:?} after its grant, past max_hold and a \
         lease ({:?})",
        expires - taken,
        max_hold + lease
    );
    assert!(!guard.is_lost(), "the hold is still there");
    tokio::time::sleep_until(ends_by + SLACK).await;
    assert!(
        guard.is_lost(),
        "the client counted on the hold past its end"
    );
    assert_eq!(guard.lost_reason(), Some(LostReason::MaxHoldExceeded));
    other.unlock().await.expect("unlock");
}
