//! Who holds a lock: a hold's first renewal (1 s after its grant, sooner with a
//! short lease) writes its holder's service, host, pid, site and acquisition time
//! (server clock), a fixed lease's acquisition at once; inspect reads it back, a
//! waiter's timeout names it, and re-entries, renewals and hand-offs keep it right.
#![cfg(feature = "macros")]

mod support;

use std::future::IntoFuture;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{distributed_lock, HolderInfo, LockClient, LockError};
use distlock_testkit::RedisServer;

/// The server's clock now.
fn server_time(server: &RedisServer) -> SystemTime {
    let reply = server.cmd(&["TIME"]).expect("TIME");
    let mut lines = reply.lines();
    let secs: u64 = lines
        .next()
        .and_then(|s| s.trim().parse().ok())
        .expect("secs");
    let micros: u64 = lines
        .next()
        .and_then(|s| s.trim().parse().ok())
        .expect("micros");
    UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_micros(micros)
}

/// This machine's host name, as the kernel has it.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_default()
}

/// The holder that inspect shows for `name`, once it is named (within 3 s).
async fn holder_of(locks: &LockClient, name: &str) -> HolderInfo {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let info = locks.inspect(name).await.expect("inspect");
        assert!(info.held, "`{name}` is not held");
        if let Some(holder) = info.holder() {
            return holder.clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no holder info for `{name}` within 3 s: {info:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `a` and `b` within `ms` of each other.
fn close(a: SystemTime, b: SystemTime, ms: u64) -> bool {
    let gap = a.duration_since(b).unwrap_or_else(|e| e.duration());
    gap <= Duration::from_millis(ms)
}

fn check_process(holder: &HolderInfo) {
    assert!(
        holder.service.starts_with("ops_holder"),
        "the default service is the executable's name: {holder:?}"
    );
    assert_eq!(holder.pid, std::process::id());
    let host = host_name();
    if !host.is_empty() {
        assert_eq!(holder.host, host);
    }
}

#[tokio::test]
async fn a_plain_lock_shows_who_took_it_where_and_since_when() {
    let server = support::server();
    let locks = support::client_with_lease(&server, Duration::from_millis(300)).await;

    let before = server_time(&server);
    let line = line!() + 1;
    let guard = locks.lock("holder:plain").await.expect("lock");
    let after = server_time(&server);
    // The acquisition wrote the holder, not who it is: its first renewal (after a
    // third of the 300 ms lease) names it, with the time it was taken.
    let owner = support::redis_holder(&server, "holder:plain").expect("a holder");
    let stored = support::stored(&server, "holder:plain");
    assert_eq!(
        stored.who(&owner),
        None,
        "named by the acquisition: {stored:?}"
    );
    let first_who = support::named(&server, "holder:plain")
        .await
        .who(&owner)
        .expect("named")
        .to_owned();

    let holder = holder_of(&locks, "holder:plain").await;
    check_process(&holder);
    assert_eq!(holder.site, format!("tests/ops_holder.rs:{line}"));
    // The renewal's server time less how long the client had held it: within the
    // renewal's one-way trip of the grant.
    assert!(
        holder.acquired_at >= before - Duration::from_millis(2)
            && holder.acquired_at <= after + Duration::from_millis(20),
        "taken between {before:?} and {after:?}, shown {:?}",
        holder.acquired_at
    );

    // A re-entry, then several renewals (every 100 ms): the time stays the first
    // acquisition's, and how long it was held grows on the server's clock.
    let inner = guard
        .scope(locks.lock("holder:plain").into_future())
        .await
        .expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    tokio::time::sleep(Duration::from_millis(450)).await;
    let stored = support::stored(&server, "holder:plain");
    assert_eq!(
        stored.who(&owner),
        Some(first_who.as_str()),
        "re-entry and renewals left what the first renewal wrote: {stored:?}"
    );
    let later = holder_of(&locks, "holder:plain").await;
    assert!(
        close(later.acquired_at, holder.acquired_at, 2),
        "re-entry and renewals kept the time: {:?} then {:?}",
        holder.acquired_at,
        later.acquired_at
    );
    assert!(
        later.held_for >= Duration::from_millis(440),
        "{:?}",
        later.held_for
    );
    assert_eq!(
        later.site, holder.site,
        "a re-entry does not change the site"
    );
    inner.unlock().await.expect("unlock inner");
    guard.unlock().await.expect("unlock");
    assert!(locks
        .inspect("holder:plain")
        .await
        .expect("inspect")
        .holder()
        .is_none());
}

#[tokio::test]
async fn a_fenced_lock_is_written_by_the_script_with_the_servers_time() {
    let server = support::server();
    let locks = support::fenced_client(&server).await;
    let before = server_time(&server);
    let guard = locks
        .lock("holder:fenced")
        .function("billing::charge")
        .await
        .expect("lock");
    let holder = holder_of(&locks, "holder:fenced").await;
    check_process(&holder);
    assert_eq!(holder.site, "billing::charge");
    assert!(close(holder.acquired_at, before, 50), "{holder:?}");
    assert!(guard.fencing_token().is_some());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_timeout_names_the_holder() {
    let server = support::server();
    let [holder_client, waiter_client] = support::clients(&server).await;
    let line = line!() + 1;
    let guard = holder_client.lock("holder:busy").await.expect("lock");

    // Before its first renewal the holder is not named, and the timeout says so.
    let err = waiter_client
        .lock("holder:busy")
        .wait(Duration::from_millis(150))
        .await
        .expect_err("held by the other client");
    let LockError::Timeout { holder: None, .. } = &err else {
        panic!("expected a timeout naming nobody yet, got {err:?}");
    };
    assert!(
        err.to_string()
            .contains("not named yet: a holder is named once it has held the lock for 1 s"),
        "{err}"
    );

    support::named(&server, "holder:busy").await;
    let err = waiter_client
        .lock("holder:busy")
        .wait(Duration::from_millis(200))
        .await
        .expect_err("held by the other client");
    let LockError::Timeout { holder, .. } = &err else {
        panic!("expected a timeout, got {err:?}");
    };
    let holder = holder.as_ref().expect("the timeout names the holder");
    check_process(holder);
    assert_eq!(holder.site, format!("tests/ops_holder.rs:{line}"));
    assert!(
        holder.held_for >= Duration::from_millis(1_150),
        "{holder:?}"
    );
    let message = err.to_string();
    let expected = format!(
        "held by {} on {}, pid {}, in tests/ops_holder.rs:{line}, for ",
        holder.service, holder.host, holder.pid
    );
    assert!(message.contains(&expected), "{message}");

    // A try that finds it held says nothing of a holder: it did not wait.
    assert!(waiter_client
        .try_lock("holder:busy")
        .await
        .expect("try")
        .is_none());
    guard.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_hand_off_writes_the_waiter_as_the_new_holder() {
    let server = support::server();
    let locks = support::client(&server).await;
    let guard = locks
        .lock("holder:handoff")
        .function("first::holder")
        .await
        .expect("lock");
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks
                .lock("holder:handoff")
                .function("second::holder")
                .wait(Duration::from_secs(5))
                .await
                .expect("handed the lock");
            let holder = holder_of(&locks, "holder:handoff").await;
            guard.unlock().await.expect("unlock");
            holder
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let messages_before = support::command_calls(&server, "publish");
    guard.unlock().await.expect("unlock");
    let holder = waiter.await.expect("waiter");
    assert_eq!(holder.site, "second::holder", "{holder:?}");
    check_process(&holder);
    // Handed over by the release script (no release message went out before the
    // waiter's own release), not taken by the waiter after a message.
    assert_eq!(
        support::command_calls(&server, "publish"),
        messages_before + 1,
        "one message: the waiter's own final release"
    );
}

#[tokio::test]
async fn readers_writers_permits_and_sets_each_show_their_holder() {
    let server = support::server();
    let locks = support::client(&server).await;

    let reader = locks
        .read_lock("holder:rw")
        .function("catalogue::read")
        .await
        .expect("read");
    support::named(&server, "holder:rw").await;
    let info = locks.inspect("holder:rw").await.expect("inspect");
    assert_eq!(info.holders.len(), 1);
    let shown = info.holders[0].info.as_ref().expect("a reader's info");
    assert_eq!(shown.site, "catalogue::read");
    check_process(shown);
    reader.unlock().await.expect("unlock");

    let permit = locks
        .semaphore("holder:sem", 2)
        .acquire()
        .function("exports::run")
        .await
        .expect("permit");
    let shown = holder_of(&locks, "holder:sem").await;
    assert_eq!(shown.site, "exports::run");
    permit.unlock().await.expect("unlock");

    let other = support::client(&server).await;
    let writer = locks
        .write_lock("holder:rw")
        .function("catalogue::write")
        .await
        .expect("write");
    support::named(&server, "holder:rw").await;
    let err = other
        .read_lock("holder:rw")
        .wait(Duration::from_millis(150))
        .await
        .expect_err("the writer holds it");
    let LockError::Timeout {
        holder: Some(holder),
        ..
    } = &err
    else {
        panic!("a timeout naming the writer, got {err:?}");
    };
    assert_eq!(holder.site, "catalogue::write");
    assert!(err.to_string().contains("in catalogue::write"), "{err}");
    writer.unlock().await.expect("unlock");

    let set = locks
        .lock_all(["holder:set:a", "holder:set:b"])
        .function("ledger::transfer")
        .await
        .expect("set");
    for name in ["holder:set:a", "holder:set:b"] {
        assert_eq!(holder_of(&locks, name).await.site, "ledger::transfer");
    }
    set.unlock().await.expect("unlock");
}

#[distributed_lock(key = "holder:macro:{id}", client = locks)]
async fn place_order(locks: &LockClient, id: u32) -> Result<HolderInfo, LockError> {
    Ok(holder_of(locks, &format!("holder:macro:{id}")).await)
}

#[tokio::test]
async fn the_macro_names_the_annotated_function() {
    let server = support::server();
    let locks = support::client(&server).await;
    let holder = place_order(&locks, 7).await.expect("place_order");
    assert_eq!(holder.site, "ops_holder::place_order");
    check_process(&holder);
}

#[tokio::test]
async fn spans_record_each_outcome_and_the_locked_body() {
    let spans = support::capture(tracing::Level::INFO, true);
    let server = support::server();
    let [locks, other] = support::clients(&server).await;

    let guard = locks.lock("spans:a").await.expect("lock");
    let inner = guard
        .scope(locks.lock("spans:a").into_future())
        .await
        .expect("re-enter");
    let err = other
        .lock("spans:a")
        .wait(Duration::from_millis(100))
        .await
        .expect_err("held");
    assert!(err.is_timeout());
    inner.unlock().await.expect("unlock");
    guard.unlock().await.expect("unlock");
    let total = locks
        .with_lock("spans:b", |_| async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok::<_, LockError>(1)
        })
        .await
        .expect("with_lock");
    assert_eq!(total, 1);
    place_order(&locks, 9).await.expect("place_order");

    let text = spans.text();
    let closed = |name: &str, fields: &[&str]| {
        text.lines().any(|line| {
            line.contains(&format!("{name}{{"))
                && line.contains(": close")
                && fields.iter().all(|field| line.contains(field))
        })
    };
    for outcome in ["acquired", "re-entered", "timed out"] {
        assert!(
            closed(
                "distlock.acquire",
                &[
                    "lock.name=spans:a",
                    &format!("lock.outcome=\"{outcome}\""),
                    "lock.waited_ms="
                ]
            ),
            "an acquire span that says `{outcome}`:\n{text}"
        );
    }
    let held_for = text
        .lines()
        .find(|line| line.contains("distlock.locked{lock.name=spans:b") && line.contains(": close"))
        .and_then(|line| line.split("lock.held_ms=").nth(1))
        .and_then(|rest| rest.split(['}', ' ']).next())
        .and_then(|ms| ms.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("a locked span for with_lock:\n{text}"));
    assert!(
        held_for >= 60,
        "the body slept 60 ms, the span says {held_for}"
    );
    assert!(
        closed(
            "distlock.locked",
            &[
                "lock.name=holder:macro:9",
                "function=\"ops_holder::place_order\"",
                "lock.held_ms="
            ]
        ),
        "the macro's body span:\n{text}"
    );
}

/// Issue 37 (1): `with_lock` takes the lock on its caller's behalf, so the holder's
/// site is the caller's line, as with `lock()`, not distlock's own file.
#[tokio::test]
async fn with_lock_shows_its_callers_line_as_the_site() {
    let server = support::server();
    let locks = support::client(&server).await;
    let line = line!() + 2;
    let holder = locks
        .with_lock("holder:with", |_| {
            let locks = locks.clone();
            async move { Ok::<_, LockError>(holder_of(&locks, "holder:with").await) }
        })
        .await
        .expect("with_lock");
    assert_eq!(
        holder.site,
        format!("tests/ops_holder.rs:{line}"),
        "{holder:?}"
    );
}

/// A fixed lease, which no renewal names later, names its holder with the
/// acquisition itself; a lock the watchdog renews, given back before its first
/// renewal, is never named, and costs the server nothing to name.
#[tokio::test]
async fn a_fixed_lease_is_named_at_once_and_a_short_hold_never() {
    let server = support::server();
    let locks = support::client(&server).await;
    let line = line!() + 2;
    let fixed = locks
        .lock("holder:fixed")
        .lease(Duration::from_secs(30))
        .await
        .expect("lock");
    let owner = support::redis_holder(&server, "holder:fixed").expect("a holder");
    let stored = support::stored(&server, "holder:fixed");
    assert!(
        stored.who(&owner).is_some(),
        "named by the acquisition: {stored:?}"
    );
    let holder = holder_of(&locks, "holder:fixed").await;
    assert_eq!(holder.site, format!("tests/ops_holder.rs:{line}"));
    fixed.unlock().await.expect("unlock");

    let namings = support::command_calls(&server, "hsetnx");
    let short = locks.lock("holder:short").await.expect("lock");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stored = support::stored(&server, "holder:short");
    let owner = support::redis_holder(&server, "holder:short").expect("a holder");
    assert_eq!(
        stored.who(&owner),
        None,
        "named before its first renewal: {stored:?}"
    );
    short.unlock().await.expect("unlock");
    assert_eq!(
        support::command_calls(&server, "hsetnx"),
        namings,
        "a naming was sent"
    );
}

/// The shortest `max_hold` a request takes, a renewal period (a third of the
/// lease), ends at the hold's first renewal when that period is a second or less:
/// the watchdog never renews the hold, yet the lock stays held for its lease (up to
/// 3 s) unless it is given back. It was never named, so a lock held for over a
/// second did not say who held it. Such a hold is named by its acquisition, as a
/// fixed lease is.
#[tokio::test]
async fn a_hold_whose_max_hold_ends_at_its_first_renewal_is_named_at_once() {
    let lease = Duration::from_secs(3);
    let server = support::server();
    let locks = support::client_with_lease(&server, lease).await;
    let line = line!() + 2;
    let capped = locks
        .lock("holder:capped")
        .max_hold(lease / 3)
        .await
        .expect("lock");
    let owner = support::redis_holder(&server, "holder:capped").expect("a holder");
    let stored = support::stored(&server, "holder:capped");
    assert!(
        stored.who(&owner).is_some(),
        "named by the acquisition: {stored:?}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(support::held(&server, &support::lock_key("holder:capped")));
    let holder = holder_of(&locks, "holder:capped").await;
    assert_eq!(holder.site, format!("tests/ops_holder.rs:{line}"));
    drop(capped);

    // One renewed past its first renewal is named by that renewal, as before.
    let renewed = locks
        .lock("holder:renewed")
        .max_hold(lease)
        .await
        .expect("lock");
    let owner = support::redis_holder(&server, "holder:renewed").expect("a holder");
    let stored = support::stored(&server, "holder:renewed");
    assert_eq!(stored.who(&owner), None, "named before its first renewal");
    tokio::time::sleep(lease / 3 + Duration::from_millis(200)).await;
    let stored = support::stored(&server, "holder:renewed");
    assert!(
        stored.who(&owner).is_some(),
        "named by its first renewal: {stored:?}"
    );
    renewed.unlock().await.expect("unlock");
}

/// `name_holders_at_once(true)`: every acquisition names its holder in the same
/// script run, and a timeout shorter than a second names it.
#[tokio::test]
async fn a_client_may_name_every_holder_at_once() {
    let server = support::server();
    let at_once = LockClient::builder()
        .url(server.url())
        .name_holders_at_once(true)
        .connect()
        .await
        .expect("connect");
    let other = support::client(&server).await;
    let guard = at_once.lock("holder:at-once").await.expect("lock");
    let owner = support::redis_holder(&server, "holder:at-once").expect("a holder");
    let stored = support::stored(&server, "holder:at-once");
    assert!(
        stored.who(&owner).is_some(),
        "named by the acquisition: {stored:?}"
    );
    let err = other
        .lock("holder:at-once")
        .wait(Duration::from_millis(100))
        .await
        .expect_err("held");
    let LockError::Timeout {
        holder: Some(holder),
        ..
    } = &err
    else {
        panic!("a timeout naming the holder, got {err:?}");
    };
    check_process(holder);
    guard.unlock().await.expect("unlock");
}
