//! Network faults through a [`FaultProxy`]: connections reset over and over, and
//! replies that reach the client after its lease ended, replies late now and then.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard};
use distlock_testkit::{monotonic_ns, Direction, FaultProxy};

/// A thread that resets every connection through a proxy every `period`, until
/// [`Resetter::stop`].
pub struct Resetter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
}

impl Resetter {
    /// Starts resetting the connections of `proxy`, the first time after `period`.
    pub fn start(proxy: Arc<FaultProxy>, period: Duration) -> Resetter {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut resets = 0;
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(period);
                    resets += proxy.reset_all();
                }
                resets
            }
        });
        Resetter { stop, thread }
    }

    /// Stops the thread once its current period ends; how many connections it reset.
    pub fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("resetter")
    }
}

/// How late every reply reaches the client in [`late_acquire`].
pub const LATE_REPLY: Duration = Duration::from_millis(300);

/// The fixed lease [`late_acquire`] asks for: shorter than [`LATE_REPLY`], so every
/// grant reaches the client after its lease ended.
pub const LATE_LEASE: Duration = Duration::from_millis(100);

/// Every reply through `proxy` reaches the client `by` late (no jitter);
/// `Duration::ZERO`: on time again.
pub fn replies_late(proxy: &FaultProxy, by: Duration) {
    proxy.delay(Direction::ToClient, by, Duration::ZERO);
}

/// The late-reply scenario: `proxy` delays every reply to the client by
/// [`LATE_REPLY`] (plus up to `jitter`), then `locks`, connected through it, asks for
/// `late` with a fixed lease of [`LATE_LEASE`] and a wait of 1 s, given up after 3 s
/// (the wait + 2 s). Returns the monotonic time the request was sent and its outcome,
/// `Err` when given up. The proxy is left delaying.
pub async fn late_acquire(
    proxy: &FaultProxy,
    locks: &LockClient,
    jitter: Duration,
) -> (
    u64,
    Result<Result<LockGuard, LockError>, tokio::time::error::Elapsed>,
) {
    proxy.delay(Direction::ToClient, LATE_REPLY, jitter);
    let sent = monotonic_ns();
    let attempt = tokio::time::timeout(
        Duration::from_secs(3),
        locks
            .lock("late")
            .lease(LATE_LEASE)
            .wait(Duration::from_secs(1)),
    )
    .await;
    (sent, attempt)
}

/// Late replies now and then through `proxy` until `stop`: every reply late for a
/// while (past a 250 ms response timeout, so that releases are retried and lost
/// acquires replayed), then prompt long enough for a retry to be answered: one lost
/// reply at a time (a second loss in a row is an outage, whose holds the lease
/// ends). The pattern is drawn from `seed`.
pub fn late_replies(
    proxy: Arc<FaultProxy>,
    seed: u64,
    stop: tokio::time::Instant,
) -> tokio::task::JoinHandle<()> {
    use rand::{Rng, SeedableRng};
    tokio::spawn(async move {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        while tokio::time::Instant::now() < stop {
            let delay = Duration::from_millis(rng.random_range(260..=400));
            replies_late(&proxy, delay);
            tokio::time::sleep(Duration::from_millis(rng.random_range(10..=120))).await;
            replies_late(&proxy, Duration::ZERO);
            tokio::time::sleep(Duration::from_millis(rng.random_range(400..=900))).await;
        }
    })
}
