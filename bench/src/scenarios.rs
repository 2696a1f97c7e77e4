//! The scenarios, run with distlock's client inside the harness process.

use std::collections::HashMap;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::{current_lock, distributed_lock, LockClient, LockContext, LockError};
use distlock_testkit::RedisServer;
use tokio::time::Instant;

use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::server::{
    calls_between, client_requests_between, command_stats, command_stats_async,
    distlock_acquire_attempts, distlock_acquire_cmd, distlock_release_cmd, ACQUIRE_LUA,
    RELEASE_LUA,
};
use crate::stats::{percentile, us};

/// Lock+unlock pairs per second of one task on fresh names (scenario 1), and the
/// process's CPU time per pair.
pub(crate) async fn one_task(
    client: &LockClient,
    tag: &str,
    pairs: usize,
    limit: Duration,
) -> Result<(f64, Duration), BoxError> {
    let start = Instant::now();
    let cpu = cpu_time(libc::RUSAGE_SELF);
    let mut done = 0;
    while done < pairs && start.elapsed() < limit {
        let guard = client.lock(format!("s1:{tag}:{done}")).await?;
        guard.unlock().await?;
        done += 1;
    }
    let cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
    let per_pair = cpu / u32::try_from(done.max(1)).unwrap_or(u32::MAX);
    Ok((done as f64 / start.elapsed().as_secs_f64(), per_pair))
}

/// Scenario 1 without distlock: the same two scripts through a plain redis-rs
/// `ConnectionManager`, one request in flight. Pairs per second and client CPU per
/// pair: what redis-rs and Tokio cost by themselves, for the profile of scenario 1.
pub(crate) async fn raw_pairs(url: &str, pairs: usize) -> Result<(f64, Duration), BoxError> {
    let mut conn = redis::Client::open(url)?.get_connection_manager().await?;
    let acquire: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(ACQUIRE_LUA)
        .query_async(&mut conn)
        .await?;
    let release: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE_LUA)
        .query_async(&mut conn)
        .await?;
    let start = Instant::now();
    let cpu = cpu_time(libc::RUSAGE_SELF);
    for i in 0..pairs {
        let name = format!("raw:{i}");
        let _: redis::Value = distlock_acquire_cmd(&acquire, &name, "owner")
            .query_async(&mut conn)
            .await?;
        let _: redis::Value = distlock_release_cmd(&release, &name, "owner")
            .query_async(&mut conn)
            .await?;
    }
    let cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
    let per_pair = cpu / u32::try_from(pairs.max(1)).unwrap_or(u32::MAX);
    Ok((pairs as f64 / start.elapsed().as_secs_f64(), per_pair))
}

/// Lock+unlock pairs per second of `tasks` tasks, each on names of its own (scenario 2).
pub(crate) async fn many_tasks(
    client: &LockClient,
    tag: &str,
    tasks: usize,
    pairs_per_task: usize,
    limit: Duration,
) -> Result<f64, BoxError> {
    many_tasks_with(client, &format!("s2:{tag}"), tasks, pairs_per_task, limit).await
}

/// Scenario 2 with any [`Contender`], on names that start with `prefix`.
pub(crate) async fn many_tasks_with<C>(
    contender: &C,
    prefix: &str,
    tasks: usize,
    pairs_per_task: usize,
    limit: Duration,
) -> Result<f64, BoxError>
where
    C: Contender,
    BoxError: From<C::Error>,
{
    let start = Instant::now();
    let stop = start + limit;
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let (contender, prefix) = (contender.clone(), prefix.to_owned());
        set.spawn(async move {
            let mut done = 0;
            while done < pairs_per_task && Instant::now() < stop {
                let held = contender
                    .acquire(&format!("{prefix}:{task}:{done}"), stop)
                    .await?;
                contender.release(held).await?;
                done += 1;
            }
            Ok::<usize, C::Error>(done)
        });
    }
    let mut total = 0;
    while let Some(joined) = set.join_next().await {
        total += joined??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// Round trips of nested acquires and releases (scenario 3).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reentry {
    /// EVALSHA calls per nested acquire or release.
    pub(crate) evalsha_per_op: f64,
    /// Client requests of any kind per nested acquire or release.
    pub(crate) requests_per_op: f64,
    /// Whether the hold counts went 1, 2, 3.
    pub(crate) counts_ok: bool,
}

/// Takes a lock, then re-enters it twice more (three deep) and gives the nested holds
/// back, `rounds` times; counts the commands of the nested part only.
pub(crate) async fn reentry(
    client: &LockClient,
    server: &RedisServer,
    tag: &str,
    rounds: usize,
) -> Result<Reentry, BoxError> {
    let name = format!("s3:{tag}");
    let outer = client.lock(name.as_str()).await?;
    let mut counts_ok = outer.hold_count() == 1;
    let before = command_stats(server)?;
    for _ in 0..rounds {
        let nested = outer
            .scope(async {
                let second = client.lock(name.as_str()).await?;
                let third = second
                    .scope(async {
                        let third = client.lock(name.as_str()).await?;
                        let count = third.hold_count();
                        third.unlock().await?;
                        Ok::<u64, LockError>(count)
                    })
                    .await?;
                let count = second.hold_count();
                second.unlock().await?;
                Ok::<(u64, u64), LockError>((count, third))
            })
            .await?;
        counts_ok &= nested == (2, 3);
    }
    let after = command_stats(server)?;
    outer.unlock().await?;
    let ops = (rounds * 4) as f64;
    Ok(Reentry {
        evalsha_per_op: calls_between(&before, &after, "evalsha") as f64 / ops,
        requests_per_op: client_requests_between(&before, &after) as f64 / ops,
        counts_ok,
    })
}

/// The round trip of one plain redis-rs EVALSHA of acquire.lua on a fresh key (no
/// distlock), p50: sent back to back, and sent after the process idled `idle`, as a
/// waiter's attempt is sent after it slept. A reference for the hand-off.
pub(crate) async fn raw_round_trips(
    url: &str,
    tag: &str,
    samples: usize,
    idle: Duration,
) -> Result<(Duration, Duration), BoxError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(ACQUIRE_LUA)
        .query_async(&mut conn)
        .await?;
    let mut results = [Duration::ZERO; 2];
    for (index, pause) in [Duration::ZERO, idle].into_iter().enumerate() {
        let mut rtts = Vec::with_capacity(samples);
        for i in 0..samples {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let cmd = distlock_acquire_cmd(&sha, &format!("raw:{tag}:{index}:{i}"), "owner");
            let start = Instant::now();
            let _: redis::Value = cmd.query_async(&mut conn).await?;
            rtts.push(start.elapsed());
        }
        results[index] = percentile(&rtts, 50.0);
    }
    Ok((results[0], results[1]))
}

/// One acquisition in the contention scenario.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Acquisition {
    pub(crate) task: usize,
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

/// Settings of the contention scenario (4).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContentionSettings {
    pub(crate) tasks: usize,
    pub(crate) critical: Duration,
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
    /// Share of acquisitions that overtook a task already waiting when they asked
    /// (first come, first served would have none).
    pub(crate) overtaking_share: f64,
    /// Profile of the hand-off (p50s): the release's round trip as the releaser saw
    /// it, release start to the waiter's final attempt, and that attempt's round trip.
    pub(crate) release_rtt_p50: Duration,
    pub(crate) to_woken_p50: Duration,
    pub(crate) woken_to_acquired_p50: Duration,
    /// The critical section as it ran (a 1 ms Tokio sleep lasts 1 to 2 ms: the timer
    /// ticks in whole milliseconds), mean.
    pub(crate) critical_mean: Duration,
}

impl Contention {
    /// Derives the figures from the log of acquisitions.
    pub(crate) fn from_log(
        mut log: Vec<Acquisition>,
        elapsed: Duration,
        counts: RequestCounts,
    ) -> Self {
        log.sort_by_key(|a| a.acquired);
        let mut handoffs = Vec::new();
        let mut release_rtts = Vec::new();
        let mut to_woken = Vec::new();
        let mut woken_to_acquired = Vec::new();
        let mut same = 0;
        let mut overlaps = 0;
        for pair in log.windows(2) {
            let (prev, next) = (pair[0], pair[1]);
            if next.acquired < prev.unlocking {
                overlaps += 1;
            }
            if next.task == prev.task {
                same += 1;
            } else {
                handoffs.push(next.acquired.saturating_duration_since(prev.unlocking));
                release_rtts.push(prev.unlocked.saturating_duration_since(prev.unlocking));
                to_woken.push(next.woken.saturating_duration_since(prev.unlocking));
                woken_to_acquired.push(next.acquired.saturating_duration_since(next.woken));
            }
        }
        let waits: Vec<Duration> = log.iter().map(|a| a.acquired - a.requested).collect();
        let overtaking = log
            .iter()
            .filter(|a| {
                log.iter().any(|b| {
                    b.task != a.task && b.requested < a.requested && b.acquired > a.acquired
                })
            })
            .count();
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
            handoff_p50: percentile(&handoffs, 50.0),
            handoff_p99: percentile(&handoffs, 99.0),
            same_task_share: same as f64 / (log.len().saturating_sub(1).max(1)) as f64,
            wait_p99: percentile(&waits, 99.0),
            wait_max: crate::stats::max(&waits),
            requests_per_acquisition: counts.steady as f64 / steady,
            requests_per_acquisition_whole: counts.whole as f64 / n,
            acquire_calls_per_acquisition: counts.steady_acquire_calls as f64 / steady,
            overlaps,
            acquisitions: log.len(),
            overtaking_share: overtaking as f64 / n,
            release_rtt_p50: percentile(&release_rtts, 50.0),
            to_woken_p50: percentile(&to_woken, 50.0),
            woken_to_acquired_p50: percentile(&woken_to_acquired, 50.0),
            critical_mean,
        }
    }
}

/// A lock client that scenario 4 can drive: distlock's, or a peer's.
pub(crate) trait Contender: Clone + Send + Sync + 'static {
    /// What an acquisition hands back, to give to [`Contender::release`].
    type Held: Send;
    /// Why an acquisition or release failed.
    type Error: Send + 'static;

    /// Takes `name`, waiting for it. `stop` is when the run ends; a waiter may go
    /// on past it, each client with its own bound.
    fn acquire(
        &self,
        name: &str,
        stop: Instant,
    ) -> impl std::future::Future<Output = Result<Self::Held, Self::Error>> + Send;

    /// Gives back what [`Contender::acquire`] took.
    fn release(
        &self,
        held: Self::Held,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send;

    /// The acquire attempts of a run (`acquisitions` of them succeeded), from the
    /// server's command counts before and after it.
    fn acquire_calls(
        before: &HashMap<String, u64>,
        after: &HashMap<String, u64>,
        acquisitions: u64,
    ) -> u64;
}

impl Contender for LockClient {
    type Held = distlock::LockGuard;
    type Error = LockError;

    fn acquire(
        &self,
        name: &str,
        _stop: Instant,
    ) -> impl std::future::Future<Output = Result<Self::Held, LockError>> + Send {
        self.lock(name).wait(Duration::from_secs(10)).into_future()
    }

    fn release(
        &self,
        guard: Self::Held,
    ) -> impl std::future::Future<Output = Result<(), LockError>> + Send {
        guard.unlock()
    }

    fn acquire_calls(
        before: &HashMap<String, u64>,
        after: &HashMap<String, u64>,
        acquisitions: u64,
    ) -> u64 {
        distlock_acquire_attempts(before, after, acquisitions)
    }
}

/// `settings.tasks` tasks on one name: lock, critical section, unlock, think (scenario 4).
pub(crate) async fn contention(
    client: &LockClient,
    server: &RedisServer,
    tag: &str,
    settings: ContentionSettings,
) -> Result<Contention, BoxError> {
    contend(client, server, &format!("s4:{tag}"), settings).await
}

/// Scenario 4 with any [`Contender`] on `name`: runs the tasks, logs each
/// acquisition, and counts the server's commands around the run.
pub(crate) async fn contend<C>(
    contender: &C,
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
        let (contender, name, log) = (contender.clone(), name.to_owned(), log.clone());
        set.spawn(async move {
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
                    requested,
                    woken: woken.unwrap_or(requested),
                    acquired,
                    unlocking,
                    unlocked,
                });
                tokio::time::sleep(settings.think).await;
            }
            Ok::<(), C::Error>(())
        });
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    let elapsed = start.elapsed();
    let after = command_stats(server)?;
    let warm_stats = snapshot.await??;
    let log = std::mem::take(&mut *lock_log(&log));
    let steady_acquisitions = log.iter().filter(|a| a.acquired >= warm).count() as u64;
    let counts = RequestCounts {
        whole: client_requests_between(&before, &after),
        steady: client_requests_between(&warm_stats, &after),
        steady_acquire_calls: C::acquire_calls(&warm_stats, &after, steady_acquisitions),
        warm: Some(warm),
    };
    Ok(Contention::from_log(log, elapsed, counts))
}

pub(crate) fn lock_log<T>(log: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    log.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The annotated function of scenario 7.
#[distributed_lock(key = "bench:{id}", client = locks)]
pub(crate) async fn with_macro(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    Ok(std::hint::black_box(id))
}

/// The same body with the guard API, written as a user would without the macro.
pub(crate) async fn with_guard(locks: &LockClient, id: u64) -> Result<u64, LockError> {
    let guard = locks.lock(format!("bench:{id}")).await?;
    let output = guard
        .scope(async { Ok::<u64, LockError>(std::hint::black_box(id)) })
        .await;
    guard.unlock().await?;
    output
}

/// Ratio of the macro's time to the guard API's, median over `rounds` interleaved
/// blocks of `calls` calls each (scenario 7).
pub(crate) async fn macro_overhead(
    client: &LockClient,
    first_id: u64,
    rounds: usize,
    calls: u64,
) -> Result<f64, BoxError> {
    let mut ratios = Vec::new();
    let mut id = first_id;
    for round in 0..rounds {
        let mut times = [Duration::ZERO; 2];
        // Alternate which goes first, so a drift in load favours neither.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let start = Instant::now();
            for _ in 0..calls {
                id += 1;
                if which == 0 {
                    with_macro(client, id).await?;
                } else {
                    with_guard(client, id).await?;
                }
            }
            times[which] = start.elapsed();
        }
        ratios.push(times[0].as_secs_f64() / times[1].as_secs_f64());
    }
    Ok(crate::stats::median(&ratios))
}

/// Client-side costs, measured through the public API, in nanoseconds per call.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Micro {
    /// `LockClient::lock(name)`: name checks and key encoding, the request builder.
    pub(crate) lock_builder_ns: f64,
    /// `LockContext::current()` inside a scope three locks deep.
    pub(crate) context_current_ns: f64,
    /// `current_lock()` inside a scope three locks deep.
    pub(crate) current_lock_ns: f64,
}

/// Measures [`Micro`] (median of `runs` batches of `iterations`).
pub(crate) async fn micro(
    client: &LockClient,
    tag: &str,
    runs: usize,
    iterations: u32,
) -> Result<Micro, BoxError> {
    let per_call = |elapsed: Duration| elapsed.as_nanos() as f64 / f64::from(iterations);
    let mut builder = Vec::new();
    for _ in 0..runs {
        let start = std::time::Instant::now();
        for _ in 0..iterations {
            drop(std::hint::black_box(
                client.lock(std::hint::black_box("order:42")),
            ));
        }
        builder.push(per_call(start.elapsed()));
    }
    let measure = || {
        let mut contexts = Vec::new();
        let mut currents = Vec::new();
        for _ in 0..runs {
            let start = std::time::Instant::now();
            for _ in 0..iterations {
                std::hint::black_box(LockContext::current());
            }
            contexts.push(per_call(start.elapsed()));
            let start = std::time::Instant::now();
            for _ in 0..iterations {
                std::hint::black_box(current_lock());
            }
            currents.push(per_call(start.elapsed()));
        }
        (contexts, currents)
    };
    // Three locks deep: each taken inside the scope of the one before.
    let a = client.lock(format!("micro:{tag}:a")).await?;
    let (contexts, currents) = a
        .scope(async {
            let b = client.lock(format!("micro:{tag}:b")).await?;
            let measured = b
                .scope(async {
                    let c = client.lock(format!("micro:{tag}:c")).await?;
                    let measured = c.scope(async { measure() }).await;
                    c.unlock().await?;
                    Ok::<_, LockError>(measured)
                })
                .await?;
            b.unlock().await?;
            Ok::<_, LockError>(measured)
        })
        .await?;
    a.unlock().await?;
    Ok(Micro {
        lock_builder_ns: crate::stats::median(&builder),
        context_current_ns: crate::stats::median(&contexts),
        current_lock_ns: crate::stats::median(&currents),
    })
}

/// Microseconds of a duration, for the details.
pub(crate) fn fmt_us(duration: Duration) -> String {
    format!("{:.0} µs", us(duration))
}
