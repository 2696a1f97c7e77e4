//! The scenarios with one client: lock+unlock pairs with any [`Contender`], the
//! plain redis-rs baselines, re-entry, the macro, and the client-side costs.

use std::future::IntoFuture;
use std::time::Duration;

use distlock::{current_lock, distributed_lock, LockClient, LockContext, LockError, LockGuard};
use distlock_testkit::RedisServer;
use tokio::time::Instant;

use crate::contender::Contender;
use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::server::{
    client_requests_between, command_stats, distlock_acquire_cmd, distlock_release_cmd,
    load_function_async, script_runs_between, DISTLOCK_SCRIPT_COMMANDS,
};
use crate::stats::{percentile, us};

/// Lock+unlock pairs on fresh names under `prefix` (scenarios 1 and 2): one task runs
/// them on the calling task, as a `main` would; more run as spawned tasks, each on
/// names of its own. Returns the pairs done before `limit`.
pub(crate) async fn pairs<C>(
    contender: &C,
    prefix: &str,
    tasks: usize,
    pairs_per_task: usize,
    limit: Duration,
) -> Result<usize, BoxError>
where
    C: Contender,
    BoxError: From<C::Error>,
{
    let stop = Instant::now() + limit;
    if tasks <= 1 {
        return pairs_of_task(
            contender.clone(),
            format!("{prefix}:0"),
            pairs_per_task,
            stop,
        )
        .await
        .map_err(BoxError::from);
    }
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let prefix = format!("{prefix}:{task}");
        set.spawn(pairs_of_task(
            contender.clone(),
            prefix,
            pairs_per_task,
            stop,
        ));
    }
    let mut total = 0;
    while let Some(joined) = set.join_next().await {
        total += joined??;
    }
    Ok(total)
}

/// One task's lock+unlock pairs on the names `prefix:0`, `prefix:1`, ...
async fn pairs_of_task<C: Contender>(
    contender: C,
    prefix: String,
    pairs: usize,
    stop: Instant,
) -> Result<usize, C::Error> {
    let mut done = 0;
    while done < pairs && Instant::now() < stop {
        let held = contender.acquire(&format!("{prefix}:{done}"), stop).await?;
        contender.release(held).await?;
        done += 1;
    }
    Ok(done)
}

/// Scenario 1 without distlock: the same two requests (acquire.lua and release.lua,
/// as the client sends a first acquisition and its release) on fresh names under
/// `tag`, through a plain redis-rs `ConnectionManager`, one request in flight. Pairs
/// per second and client CPU per pair: what redis-rs and Tokio cost by themselves,
/// for the profile of scenario 1.
pub(crate) async fn raw_pairs(
    url: &str,
    tag: &str,
    pairs: usize,
) -> Result<(f64, Duration), BoxError> {
    let mut conn = redis::Client::open(url)?.get_connection_manager().await?;
    let acquire = &load_function_async(&mut conn, "acquire").await?;
    let release = &load_function_async(&mut conn, "release").await?;
    let start = Instant::now();
    let cpu = cpu_time(libc::RUSAGE_SELF);
    for i in 0..pairs {
        // Fresh names in every call: a release's record outlives it for a while,
        // and an acquisition of its name by the same owner would find it.
        let name = format!("raw:{tag}:{i}");
        let _: redis::Value = distlock_acquire_cmd(acquire, &name)
            .query_async(&mut conn)
            .await?;
        let _: redis::Value = distlock_release_cmd(release, &name)
            .query_async(&mut conn)
            .await?;
    }
    let cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
    let per_pair = cpu / u32::try_from(pairs.max(1)).unwrap_or(u32::MAX);
    Ok((pairs as f64 / start.elapsed().as_secs_f64(), per_pair))
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
        evalsha_per_op: script_runs_between(&before, &after) as f64 / ops,
        requests_per_op: client_requests_between(&before, &after, DISTLOCK_SCRIPT_COMMANDS) as f64
            / ops,
        counts_ok,
    })
}

/// The round trip of one plain redis-rs EVALSHA (p50), a reference for the hand-offs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RoundTrips {
    /// Sent back to back.
    pub(crate) back_to_back: Duration,
    /// Sent after the process idled (1 ms), as a waiter's attempt is sent after it
    /// slept.
    pub(crate) after_idle: Duration,
}

/// Measures [`RoundTrips`]: `samples` acquisitions of fresh names by acquire.lua (as
/// a waiter's attempt runs it) through a plain redis-rs connection (no distlock),
/// each way.
pub(crate) async fn raw_round_trips(
    url: &str,
    tag: &str,
    samples: usize,
    idle: Duration,
) -> Result<RoundTrips, BoxError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let sha = load_function_async(&mut conn, "acquire").await?;
    let mut results = [Duration::ZERO; 2];
    for (index, pause) in [Duration::ZERO, idle].into_iter().enumerate() {
        let mut rtts = Vec::with_capacity(samples);
        for i in 0..samples {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let cmd = distlock_acquire_cmd(&sha, &format!("rtt:{tag}:{index}:{i}"));
            let start = Instant::now();
            let _: redis::Value = cmd.query_async(&mut conn).await?;
            rtts.push(start.elapsed());
        }
        results[index] = percentile(&rtts, 50.0);
    }
    Ok(RoundTrips {
        back_to_back: results[0],
        after_idle: results[1],
    })
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
    interleaved_ratio(
        first_id,
        rounds,
        calls,
        async |id| Ok(with_macro(client, id).await.map(drop)?),
        async |id| Ok(with_guard(client, id).await.map(drop)?),
    )
    .await
}

/// Ratio of the time of a nested acquire+release with the lock-order checker on
/// (`checked`, the default `Warn`) to the same with it off (`unchecked`), median
/// over `rounds` interleaved blocks of `calls` calls each (scenario 11). Each client
/// holds one lock the whole time, and each call takes and gives back a fresh name
/// inside its scope: a new acquisition under a held lock, what the checker checks.
pub(crate) async fn order_check_overhead(
    checked: &LockClient,
    unchecked: &LockClient,
    first_id: u64,
    rounds: usize,
    calls: u64,
) -> Result<f64, BoxError> {
    let outer_checked = checked.lock(format!("order-check:{first_id}:on")).await?;
    let outer_unchecked = unchecked
        .lock(format!("order-check:{first_id}:off"))
        .await?;
    let nested = async |locks: &LockClient, outer: &LockGuard, id: u64| {
        let inner = outer
            .scope(locks.lock(format!("order-check:{id}")).into_future())
            .await?;
        inner.unlock().await?;
        Ok::<(), BoxError>(())
    };
    let ratio = interleaved_ratio(
        first_id,
        rounds,
        calls,
        async |id| nested(checked, &outer_checked, id).await,
        async |id| nested(unchecked, &outer_unchecked, id).await,
    )
    .await;
    outer_checked.unlock().await?;
    outer_unchecked.unlock().await?;
    ratio
}

/// Ratio of `a`'s time to `b`'s, median over `rounds` blocks of `calls` calls of
/// each, which goes first alternating so that a drift in load favours neither. Each
/// call gets an id of its own, counting up from `first_id`.
async fn interleaved_ratio(
    first_id: u64,
    rounds: usize,
    calls: u64,
    mut a: impl AsyncFnMut(u64) -> Result<(), BoxError>,
    mut b: impl AsyncFnMut(u64) -> Result<(), BoxError>,
) -> Result<f64, BoxError> {
    let mut ratios = Vec::new();
    let mut id = first_id;
    for round in 0..rounds {
        let mut times = [Duration::ZERO; 2];
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let start = Instant::now();
            for _ in 0..calls {
                id += 1;
                if which == 0 {
                    a(id).await?;
                } else {
                    b(id).await?;
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
