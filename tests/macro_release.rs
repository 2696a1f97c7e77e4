//! `#[distributed_lock]`: the lock is released on every exit (`Ok`, `?`, panic,
//! cancellation), and `on_lost` decides what a lost lease does to the body.
#![cfg(feature = "macros")]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{distributed_lock, LockClient, LockError};
use tokio::sync::Notify;

/// Promptly: well before the 30 s watchdog lease could end the lock by itself.
const PROMPTLY: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Parse(std::num::ParseIntError),
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Lock(error) => write!(f, "lock: {error}"),
            Self::Parse(error) => write!(f, "parse: {error}"),
        }
    }
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        Self::Lock(error)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(error: std::num::ParseIntError) -> Self {
        Self::Parse(error)
    }
}

#[distributed_lock(key = "job:{name}", client = locks)]
async fn parse_under_lock(locks: &LockClient, name: &str, input: &str) -> Result<u32, AppError> {
    let value: u32 = input.parse()?;
    Ok(value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_on_ok_and_on_question_mark() {
    let server = support::server();
    let locks = support::client(&server).await;

    assert_eq!(parse_under_lock(&locks, "ok", "42").await.expect("ok"), 42);
    assert_eq!(support::redis_count(&server, "job:ok"), 0, "released on Ok");

    let err = parse_under_lock(&locks, "err", "forty-two").await;
    assert!(matches!(err, Err(AppError::Parse(_))), "{err:?}");
    assert_eq!(
        support::redis_count(&server, "job:err"),
        0,
        "released on `?`"
    );
}

#[distributed_lock(key = "job:{name}", client = locks)]
async fn panics_under_lock(locks: &LockClient, name: &str) -> Result<(), LockError> {
    tokio::task::yield_now().await;
    panic!("boom in {name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_on_panic() {
    let server = support::server();
    let locks = support::client(&server).await;

    let task = {
        let locks = locks.clone();
        tokio::spawn(async move { panics_under_lock(&locks, "panic").await })
    };
    let joined = task.await;
    assert!(joined.is_err_and(|err| err.is_panic()));
    let started = Instant::now();
    assert!(
        support::eventually(PROMPTLY, || support::redis_count(&server, "job:panic") == 0).await,
        "released after the panic"
    );
    assert!(started.elapsed() < PROMPTLY);
    let again = locks.try_lock("job:panic").await.expect("try");
    again.expect("free").unlock().await.expect("unlock");
}

#[distributed_lock(key = "job:{name}", client = locks)]
async fn sleeps_under_lock(
    locks: &LockClient,
    name: &str,
    entered: &Notify,
    finished: &AtomicBool,
) -> Result<(), LockError> {
    entered.notify_one();
    tokio::time::sleep(Duration::from_secs(60)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_on_cancellation() {
    let server = support::server();
    let locks = support::client(&server).await;
    let entered = Notify::new();
    let finished = AtomicBool::new(false);

    // Dropped by `select!` once the body is inside.
    tokio::select! {
        result = sleeps_under_lock(&locks, "cancel", &entered, &finished) => {
            panic!("the body cannot finish: {result:?}")
        }
        () = entered.notified() => {}
    }
    assert!(!finished.load(Ordering::SeqCst));
    assert!(
        support::eventually(PROMPTLY, || {
            support::redis_count(&server, "job:cancel") == 0
        })
        .await,
        "released after cancellation"
    );

    // Aborting a task works the same way.
    let entered = Arc::new(Notify::new());
    let task = {
        let locks = locks.clone();
        let entered = entered.clone();
        tokio::spawn(async move {
            let finished = AtomicBool::new(false);
            sleeps_under_lock(&locks, "abort-task", &entered, &finished).await
        })
    };
    entered.notified().await;
    assert_eq!(support::redis_count(&server, "job:abort-task"), 1);
    task.abort();
    assert!(task.await.is_err_and(|err| err.is_cancelled()));
    assert!(
        support::eventually(PROMPTLY, || support::redis_count(&server, "job:abort-task")
            == 0)
        .await,
        "released after abort"
    );
}

#[distributed_lock(key = "busy", client = locks, wait = "0s")]
async fn fail_fast(locks: &LockClient, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "busy", client = locks, wait = "300ms")]
async fn wait_a_little(locks: &LockClient, ran: &AtomicBool) -> Result<(), LockError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lock_returns_the_error_and_skips_the_body() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let held = other.lock("busy").await.expect("lock");

    let ran = AtomicBool::new(false);
    let started = Instant::now();
    let err = fail_fast(&locks, &ran).await.expect_err("busy");
    assert!(err.is_timeout(), "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "wait = \"0s\" fails fast"
    );

    let started = Instant::now();
    let err = wait_a_little(&locks, &ran).await.expect_err("busy");
    assert!(err.is_timeout(), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(300), "waited");
    assert!(!ran.load(Ordering::SeqCst), "the body never ran");
    held.unlock().await.expect("unlock");

    wait_a_little(&locks, &ran).await.expect("free now");
    assert!(ran.load(Ordering::SeqCst));
}

#[distributed_lock(key = "lease:{name}", client = locks, lease = "1s")]
async fn fixed_lease(locks: &LockClient, name: &str) -> Result<Option<Duration>, LockError> {
    Ok(locks
        .inspect(format!("lease:{name}"))
        .await?
        .lease_remaining)
}

/// The longest lease the macro accepts at compile time is the core's maximum.
#[distributed_lock(key = "lease:max", client = locks, lease = "24h")]
async fn longest_lease(locks: &LockClient) -> Result<(), LockError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_bounds_agree_with_the_core() {
    // `#[distributed_lock]` refuses leases outside 10ms..=24h at compile time.
    assert_eq!(distlock::MIN_LEASE, Duration::from_millis(10));
    assert_eq!(distlock::MAX_LEASE, Duration::from_secs(24 * 60 * 60));
    let server = support::server();
    let locks = support::client(&server).await;
    longest_lease(&locks).await.expect("24h is a valid lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_sets_a_fixed_lease() {
    let server = support::server();
    let locks = support::client(&server).await;
    let remaining = fixed_lease(&locks, "a")
        .await
        .expect("lease")
        .expect("a ttl");
    assert!(remaining <= Duration::from_secs(1), "{remaining:?}");
    assert!(remaining > Duration::from_millis(500), "{remaining:?}");
}

#[distributed_lock(key = "lost:{name}", client = locks, on_lost = "abort")]
async fn abort_when_lost(
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
async fn on_lost_abort_cancels_the_body() {
    let server = support::server();
    // A short watchdog lease: renewals every 200 ms notice the loss quickly.
    let locks = support::client_with_lease(&server, Duration::from_millis(600)).await;
    let other = support::client(&server).await;
    let entered = Notify::new();
    let finished = AtomicBool::new(false);

    let call = abort_when_lost(&locks, "a", &entered, &finished);
    let force = async {
        entered.notified().await;
        let started = Instant::now();
        assert!(other.force_unlock("lost:a").await.expect("force"));
        started
    };
    let (result, forced_at) = tokio::join!(call, force);
    let err = result.expect_err("lost");
    assert!(err.is_lost(), "{err}");
    assert!(
        forced_at.elapsed() < Duration::from_secs(2),
        "aborted promptly"
    );
    assert!(!finished.load(Ordering::SeqCst), "the body was cancelled");
}

#[distributed_lock(key = "lost:{name}", client = locks)]
async fn finish_when_lost(
    locks: &LockClient,
    name: &str,
    entered: &Notify,
    saw_loss: &AtomicBool,
) -> Result<u32, LockError> {
    entered.notify_one();
    let held = distlock::current_lock().expect("in the lock scope");
    held.lost().await;
    saw_loss.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(42)
}

// One thread, so that the scoped subscriber sees every event, the watchdog's too.
#[tokio::test(flavor = "current_thread")]
async fn on_lost_finish_returns_the_body_result() {
    let (warnings, _subscriber) = support::capture_here(tracing::Level::WARN);
    let server = support::server();
    let locks = support::client_with_lease(&server, Duration::from_millis(600)).await;
    let other = support::client(&server).await;
    let entered = Notify::new();
    let saw_loss = AtomicBool::new(false);

    let call = finish_when_lost(&locks, "b", &entered, &saw_loss);
    let force = async {
        entered.notified().await;
        assert!(other.force_unlock("lost:b").await.expect("force"));
    };
    let (result, ()) = tokio::join!(call, force);
    assert_eq!(result.expect("the body's result"), 42);
    assert!(
        saw_loss.load(Ordering::SeqCst),
        "the body saw the loss signal"
    );
    let warnings = warnings.lines();
    assert!(
        warnings.iter().any(|warning| warning
            .contains("function=\"macro_release::finish_when_lost\"")
            && warning.contains("returning its result anyway")),
        "{warnings:#?}"
    );
}

#[distributed_lock(key = "short:{name}", client = locks, lease = "300ms", on_lost = "abort")]
async fn outlives_its_lease(
    locks: &LockClient,
    name: &str,
    finished: &AtomicBool,
) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_secs(5)).await;
    finished.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_abort_stops_a_body_that_outlives_a_fixed_lease() {
    let server = support::server();
    let locks = support::client(&server).await;
    let finished = AtomicBool::new(false);

    let started = Instant::now();
    let err = outlives_its_lease(&locks, "a", &finished)
        .await
        .expect_err("the fixed lease ends first");
    assert!(err.is_lost(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!finished.load(Ordering::SeqCst), "the body was cancelled");
    assert_eq!(support::redis_count(&server, "short:a"), 0);
}
