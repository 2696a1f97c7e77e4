//! Sensitivity of the reliability checks: with each seeded fault of the core on, the
//! scenario that targets it must make a check fail; with the fault off, the same
//! scenario must pass. A checker that cannot catch a broken lock proves nothing.
//!
//! Built only with `--features fault-injection` (see `[[test]]` in Cargo.toml). The
//! faults are process-global, so the tests of this file take turns (`SERIAL`).

mod support;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use distlock::__private::faults::{self, Fault};
use distlock::{LockClient, LockError};
use distlock_testkit::{monotonic_ns, History, RedisServer, Report};
use support::{fenced, Workload};

static SERIAL: Mutex<()> = Mutex::new(());

/// Holds the turn of one test and turns `fault` on (or none) until dropped.
struct Seeded {
    _turn: MutexGuard<'static, ()>,
}

impl Seeded {
    fn new(fault: Option<Fault>) -> Seeded {
        let turn = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
        faults::clear();
        if let Some(fault) = fault {
            faults::inject(fault);
        }
        Seeded { _turn: turn }
    }
}

impl Drop for Seeded {
    fn drop(&mut self) {
        faults::clear();
    }
}

/// A holds `name` with a 200 ms fixed lease and overstays it; B takes the lock when
/// the lease ends and holds it 600 ms; A's late release comes while B holds it; C
/// waits meanwhile. Returns the checked history of A, B and C.
async fn late_release(server: &RedisServer) -> Report {
    let name = "late-release";
    let url = server.url();
    let history = std::sync::Arc::new(History::new());
    let workload = Workload::connect(&url, name).await;
    let (a, b, c) = (fenced(&url).await, fenced(&url).await, fenced(&url).await);
    let lease = Duration::from_millis(200);

    let sent = monotonic_ns();
    let guard_a = a.lock(name).lease(lease).await.expect("A");
    let a_acquired = monotonic_ns();
    let b_task = tokio::spawn({
        let (history, workload) = (history.clone(), workload.clone());
        async move {
            let sent = monotonic_ns();
            let guard = b.lock(name).wait(Duration::from_secs(5)).await.expect("B");
            let acquired = monotonic_ns();
            tokio::time::sleep(Duration::from_millis(600)).await;
            let (section, _, _) =
                support::body(guard, "B", 0, sent, acquired, None, &workload).await;
            history.record(section);
        }
    });
    // A overstays its lease; B gets the lock meanwhile.
    tokio::time::sleep(lease + Duration::from_millis(150)).await;
    let c_task = tokio::spawn({
        let (history, workload) = (history.clone(), workload.clone());
        async move {
            let sent = monotonic_ns();
            let guard = c.lock(name).wait(Duration::from_secs(5)).await.expect("C");
            let acquired = monotonic_ns();
            let (section, _, _) =
                support::body(guard, "C", 0, sent, acquired, None, &workload).await;
            history.record(section);
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (section, _, _) =
        support::body(guard_a, "A", 0, sent, a_acquired, Some(lease), &workload).await;
    history.record(section);
    b_task.await.expect("B task");
    c_task.await.expect("C task");
    history.check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_without_owner_check_is_caught_by_the_history_checker() {
    let control = {
        let _off = Seeded::new(None);
        let server = support::server();
        late_release(&server).await
    };
    control.assert_clean();
    let seeded = {
        let _on = Seeded::new(Some(Fault::ReleaseWithoutOwnerCheck));
        let server = support::server();
        late_release(&server).await
    };
    support::summary(
        "fault_release_without_owner_check",
        &[
            ("seeded_faults", 1),
            ("caught", u64::from(!seeded.is_clean())),
        ],
    );
    assert!(
        !seeded.overlaps.is_empty(),
        "the checker missed a release of another owner's hold:\n{seeded}"
    );
}

/// A guard is dropped without `unlock`; another client must get the lock well before
/// 3 leases. Returns whether the leak check passed (lock free, no key left).
async fn dropped_guard(server: &RedisServer) -> bool {
    let lease = Duration::from_millis(300);
    let url = server.url();
    let holder = LockClient::builder()
        .url(&url)
        .default_lease(lease)
        .connect()
        .await
        .expect("connect");
    let other = LockClient::builder()
        .url(&url)
        .connect()
        .await
        .expect("connect");
    let guard = holder.lock("dropped").await.expect("lock");
    drop(guard);
    let taken = other.lock("dropped").wait(lease * 3).await;
    let free = match taken {
        Ok(guard) => {
            guard.unlock().await.expect("unlock");
            true
        }
        Err(LockError::Timeout { .. }) => false,
        Err(err) => panic!("{err}"),
    };
    let no_key = !support::held(server, &support::lock_key("dropped"));
    free && no_key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_outliving_a_drop_is_caught_by_the_leak_check() {
    let control = {
        let _off = Seeded::new(None);
        dropped_guard(&support::server()).await
    };
    assert!(control, "the leak check fails without the fault");
    let seeded = {
        let _on = Seeded::new(Some(Fault::WatchdogOutlivesDrop));
        dropped_guard(&support::server()).await
    };
    support::summary(
        "fault_watchdog_outlives_drop",
        &[("seeded_faults", 1), ("caught", u64::from(!seeded))],
    );
    assert!(
        !seeded,
        "the leak check missed a guard renewed after its drop"
    );
}

/// A zero lease must be refused with a typed error, at once, before anything is
/// written; a lock granted anyway must be caught by the checker. Returns (refused
/// with a typed error within 2 s, the history).
async fn zero_lease(server: &RedisServer) -> (bool, Report) {
    let url = server.url();
    let locks = fenced(&url).await;
    let workload = Workload::connect(&url, "zero").await;
    let history = History::new();
    let mut refused = true;
    for n in 0..2 {
        let sent = monotonic_ns();
        let request = locks.lock("zero").lease(Duration::ZERO);
        match tokio::time::timeout(Duration::from_secs(2), request).await {
            Ok(Ok(guard)) => {
                refused = false;
                let acquired = monotonic_ns();
                let (section, _, _) = support::body(
                    guard,
                    &format!("t{n}"),
                    n,
                    sent,
                    acquired,
                    Some(Duration::ZERO),
                    &workload,
                )
                .await;
                history.record(section);
            }
            Ok(Err(err)) if err.is_invalid_input() => {}
            // The bad lease reached Redis, which refused it in its own words: not
            // the typed error that the check gives.
            Ok(Err(err)) => {
                assert!(err.is_redis(), "{err}");
                refused = false;
            }
            // No answer in bounded time: the check fails as well.
            Err(_) => refused = false,
        }
    }
    (refused, history.check())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unvalidated_lease_is_caught_by_the_bad_input_check() {
    let (control_refused, control) = {
        let _off = Seeded::new(None);
        zero_lease(&support::server()).await
    };
    assert!(control_refused);
    control.assert_clean();
    let (refused, report) = {
        let _on = Seeded::new(Some(Fault::LeaseNotValidated));
        zero_lease(&support::server()).await
    };
    support::summary(
        "fault_lease_not_validated",
        &[("seeded_faults", 1), ("caught", u64::from(!refused))],
    );
    // Observed: the zero lease is sent; the lock's hash (lua/lock.lua) vanishes at
    // once (`PEXPIRE ... 0`), every reply counts as late, and the acquire retries
    // until the 2 s bound (when the first acquisition was a plain `SET ... PX 0`,
    // Redis refused it with its own error).
    assert!(
        !refused,
        "the bad-input check missed a zero lease (history: {report})"
    );
}

/// Replies from Redis are delayed 300 ms; the fixed lease is 100 ms, so every acquire
/// reply arrives after the lease ended. Returns the history (empty when no body ran)
/// and whether the lock was left free.
async fn late_reply(server: &RedisServer) -> (Report, bool) {
    let proxy = support::proxy(server);
    let locks = LockClient::builder()
        .url(proxy.url())
        .fencing(true)
        .response_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect");
    let workload = Workload::connect(&server.url(), "late").await;
    let history = History::new();
    // Bounded: without the fault, the acquire is dropped if it has not ended (see
    // `reliability_proxy.rs`), which must leave nothing behind either.
    let (sent, attempt) = support::late_acquire(&proxy, &locks, Duration::ZERO).await;
    if let Ok(Ok(guard)) = attempt {
        let acquired = monotonic_ns();
        let lease = Some(support::LATE_LEASE);
        let (section, _, _) =
            support::body(guard, "late", 0, sent, acquired, lease, &workload).await;
        history.record(section);
    }
    proxy.heal();
    let free = support::eventually(Duration::from_secs(3), || {
        !support::held(server, &support::lock_key("late"))
    })
    .await;
    (history.check(), free)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_a_late_acquire_reply_is_caught_by_the_checker() {
    let (control, control_free) = {
        let _off = Seeded::new(None);
        late_reply(&support::server()).await
    };
    assert_eq!(control.sections, 0, "a body ran on a late grant");
    assert!(control_free);
    let (seeded, _) = {
        let _on = Seeded::new(Some(Fault::NoPostReplyLeaseCheck));
        late_reply(&support::server()).await
    };
    support::summary(
        "fault_no_post_reply_lease_check",
        &[
            ("seeded_faults", 1),
            ("caught", u64::from(!seeded.late_grants.is_empty())),
        ],
    );
    assert_eq!(
        seeded.late_grants.len(),
        1,
        "the checker missed a lock trusted after its lease:\n{seeded}"
    );
}
