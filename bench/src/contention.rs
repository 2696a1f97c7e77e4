//! Scenario 4, contention: tasks on one name, each lock → critical section → unlock
//! → think, with any [`Contender`]; the log of every acquisition and what it shows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_testkit::RedisServer;
use tokio::time::Instant;

use crate::contender::Contender;
use crate::error::BoxError;
use crate::server::{
    client_requests_between, command_stats, command_stats_async, log_every_command,
};
use crate::stats::percentile;

/// One acquisition in the contention scenario.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquisition {
    pub(crate) task: usize,
    /// Which of the run's clients the task used.
    pub(crate) client: usize,
    pub(crate) requested: Instant,
    /// The poll of the lock future before the last one: when the waiter, woken, sent
    /// the attempt that succeeded (profiling through the public API).
    pub(crate) woken: Instant,
    pub(crate) acquired: Instant,
    pub(crate) unlocking: Instant,
    /// When `unlock().await` returned: the release's round trip is over.
    pub(crate) unlocked: Instant,
}

/// Wraps a future and notes when it was polled, for the profile of a hand-off.
pub(crate) struct PollTimes<F> {
    inner: std::pin::Pin<Box<F>>,
    pub(crate) previous: Option<Instant>,
    last: Option<Instant>,
}

impl<F: std::future::Future> PollTimes<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self {
            inner: Box::pin(inner),
            previous: None,
            last: None,
        }
    }
}

impl<F: std::future::Future> std::future::Future for PollTimes<F> {
    type Output = (F::Output, Option<Instant>);

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let now = Instant::now();
        self.previous = self.last.replace(now);
        match self.inner.as_mut().poll(cx) {
            std::task::Poll::Ready(output) => std::task::Poll::Ready((output, self.previous)),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// Settings of one contention run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContentionSettings {
    pub(crate) tasks: usize,
    pub(crate) critical: Duration,
    /// The pause after an unlock before the task asks again; zero for none.
    pub(crate) think: Duration,
    pub(crate) duration: Duration,
    /// The start of the run that the request counts leave out: the first contention
    /// on a name sets up the subscription (one `SUBSCRIBE`, and one more look by each
    /// task that began waiting before it was confirmed), once, not per acquisition.
    pub(crate) warmup: Duration,
}

/// The server's request counts of a contention run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RequestCounts {
    /// Every client request of the run.
    pub(crate) whole: u64,
    /// Client requests after the warm-up.
    pub(crate) steady: u64,
    /// Acquire attempts after the warm-up.
    pub(crate) steady_acquire_calls: u64,
    /// When the warm-up ended.
    pub(crate) warm: Option<Instant>,
}

/// What the contention scenario measured.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Contention {
    pub(crate) per_second: f64,
    pub(crate) handoff_p50: Duration,
    pub(crate) handoff_p99: Duration,
    /// Share of acquisitions by the task that released just before.
    pub(crate) same_task_share: f64,
    pub(crate) wait_p99: Duration,
    pub(crate) wait_max: Duration,
    /// After the warm-up (see [`ContentionSettings::warmup`]).
    pub(crate) requests_per_acquisition: f64,
    /// Over the whole run, subscription set-up included.
    pub(crate) requests_per_acquisition_whole: f64,
    /// After the warm-up.
    pub(crate) acquire_calls_per_acquisition: f64,
    pub(crate) overlaps: usize,
    pub(crate) acquisitions: usize,
    /// Share of acquisitions that overtook a task of the same client already waiting
    /// when they asked (first come, first served within a client would have none).
    pub(crate) overtaking_share: f64,
    /// As `overtaking_share`, for a waiting task of any client.
    pub(crate) overtaking_any_share: f64,
    /// Profile of the hand-off (p50s): the release's round trip as the releaser saw
    /// it, release start to the waiter's final attempt, and that attempt's round trip.
    pub(crate) release_rtt_p50: Duration,
    pub(crate) to_woken_p50: Duration,
    pub(crate) woken_to_acquired_p50: Duration,
    /// The critical section as it ran (a 1 ms Tokio sleep lasts 1 to 2 ms: the timer
    /// ticks in whole milliseconds), mean.
    pub(crate) critical_mean: Duration,
}

/// Hand-offs between consecutive acquisitions of a log sorted by acquisition.
#[derive(Debug, Default)]
struct Handoffs {
    gaps: Vec<Duration>,
    release_rtts: Vec<Duration>,
    to_woken: Vec<Duration>,
    woken_to_acquired: Vec<Duration>,
    same_task: usize,
    overlaps: usize,
}

impl Handoffs {
    fn of(log: &[Acquisition]) -> Self {
        let mut h = Handoffs::default();
        for pair in log.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            if next.acquired < prev.unlocking {
                h.overlaps += 1;
            }
            if next.task == prev.task {
                h.same_task += 1;
            } else {
                h.gaps
                    .push(next.acquired.saturating_duration_since(prev.unlocking));
                h.release_rtts
                    .push(prev.unlocked.saturating_duration_since(prev.unlocking));
                h.to_woken
                    .push(next.woken.saturating_duration_since(prev.unlocking));
                h.woken_to_acquired
                    .push(next.acquired.saturating_duration_since(next.woken));
            }
        }
        h
    }
}

/// Acquisitions that overtook another task already waiting (of the same client when
/// `same_client`): it asked before them and got the lock after them.
fn overtaking(log: &[Acquisition], same_client: bool) -> usize {
    log.iter()
        .filter(|a| {
            log.iter().any(|b| {
                b.task != a.task
                    && (!same_client || b.client == a.client)
                    && b.requested < a.requested
                    && b.acquired > a.acquired
            })
        })
        .count()
}

impl Contention {
    /// Derives the figures from the log of acquisitions.
    pub(crate) fn from_log(
        mut log: Vec<Acquisition>,
        elapsed: Duration,
        counts: RequestCounts,
    ) -> Self {
        log.sort_by_key(|a| a.acquired);
        let h = Handoffs::of(&log);
        let waits: Vec<Duration> = log.iter().map(|a| a.acquired - a.requested).collect();
        let n = log.len().max(1) as f64;
        let steady = log
            .iter()
            .filter(|a| counts.warm.is_none_or(|warm| a.acquired >= warm))
            .count()
            .max(1) as f64;
        let critical: Duration = log.iter().map(|a| a.unlocking - a.acquired).sum();
        let critical_mean = critical / u32::try_from(log.len().max(1)).unwrap_or(u32::MAX);
        Contention {
            per_second: log.len() as f64 / elapsed.as_secs_f64(),
            handoff_p50: percentile(&h.gaps, 50.0),
            handoff_p99: percentile(&h.gaps, 99.0),
            same_task_share: h.same_task as f64 / (log.len().saturating_sub(1).max(1)) as f64,
            wait_p99: percentile(&waits, 99.0),
            wait_max: crate::stats::max(&waits),
            requests_per_acquisition: counts.steady as f64 / steady,
            requests_per_acquisition_whole: counts.whole as f64 / n,
            acquire_calls_per_acquisition: counts.steady_acquire_calls as f64 / steady,
            overlaps: h.overlaps,
            acquisitions: log.len(),
            overtaking_share: overtaking(&log, true) as f64 / n,
            overtaking_any_share: overtaking(&log, false) as f64 / n,
            release_rtt_p50: percentile(&h.release_rtts, 50.0),
            to_woken_p50: percentile(&h.to_woken, 50.0),
            woken_to_acquired_p50: percentile(&h.woken_to_acquired, 50.0),
            critical_mean,
        }
    }

    /// The bound of "no task starved": every other task's critical section (as run)
    /// and hand-off (p50) once.
    pub(crate) fn starvation_bound(&self, tasks: usize) -> Duration {
        (self.critical_mean + self.handoff_p50) * u32::try_from(tasks).unwrap_or(u32::MAX)
    }
}

/// One task of a contention run: lock, critical section, unlock, think, until `stop`.
async fn contend_task<C>(
    contender: C,
    task: usize,
    client: usize,
    name: String,
    settings: ContentionSettings,
    stop: Instant,
    log: Arc<Mutex<Vec<Acquisition>>>,
) -> Result<(), C::Error>
where
    C: Contender,
{
    while Instant::now() < stop {
        let requested = Instant::now();
        let (held, woken) = PollTimes::new(contender.acquire(&name, stop)).await;
        let held = held?;
        let acquired = Instant::now();
        tokio::time::sleep(settings.critical).await;
        let unlocking = Instant::now();
        contender.release(held).await?;
        let unlocked = Instant::now();
        lock_log(&log).push(Acquisition {
            task,
            client,
            requested,
            woken: woken.unwrap_or(requested),
            acquired,
            unlocking,
            unlocked,
        });
        if !settings.think.is_zero() {
            tokio::time::sleep(settings.think).await;
        }
    }
    Ok(())
}

/// Scenario 4 on `name`: `settings.tasks` tasks, task `i` on `contenders[i % len]`
/// (one client shared by all, or one per task); logs each acquisition and counts the
/// server's commands around the run.
pub(crate) async fn contend<C>(
    contenders: &[C],
    server: &RedisServer,
    name: &str,
    settings: ContentionSettings,
) -> Result<Contention, BoxError>
where
    C: Contender,
    BoxError: From<C::Error>,
{
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut info = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    // Every command in the slow log, to tell a client's requests from its scripts'
    // commands, and acquire.lua's runs from release.lua's.
    log_every_command(server, true)?;
    let before = command_stats(server)?;
    let start = Instant::now();
    let stop = start + settings.duration;
    let warm = start + settings.warmup;
    let snapshot = tokio::spawn(async move {
        tokio::time::sleep_until(warm).await;
        command_stats_async(&mut info).await
    });
    let mut set = tokio::task::JoinSet::new();
    for task in 0..settings.tasks {
        let client = task % contenders.len().max(1);
        let contender = contenders.get(client).ok_or("no client to contend with")?;
        let run = contend_task(
            contender.clone(),
            task,
            client,
            name.to_owned(),
            settings,
            stop,
            log.clone(),
        );
        set.spawn(run);
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    let elapsed = start.elapsed();
    let after = command_stats(server)?;
    let warm_stats = snapshot.await??;
    log_every_command(server, false)?;
    let log = std::mem::take(&mut *lock_log(&log));
    let steady_acquisitions = log.iter().filter(|a| a.acquired >= warm).count() as u64;
    let inner = C::SCRIPT_COMMANDS;
    let counts = RequestCounts {
        whole: client_requests_between(&before, &after, inner),
        steady: client_requests_between(&warm_stats, &after, inner),
        steady_acquire_calls: C::acquire_calls(&warm_stats, &after, steady_acquisitions),
        warm: Some(warm),
    };
    Ok(Contention::from_log(log, elapsed, counts))
}

/// The log's lock, also after a panic elsewhere.
pub(crate) fn lock_log<T>(log: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
