//! A churn of fresh names (issue 36, memory): `distlock-bench churn URL SECONDS
//! [TASKS]` runs TASKS tasks (64 by default) that each take and give back a lock of
//! a name never used before, again and again, for SECONDS, on a multi-thread
//! runtime (`DISTLOCK_BENCH_RUNTIME=current-thread` for the other). It prints the
//! process's RSS every 10 s, and at the end the RSS after the first minute (or
//! after a sixth of the run, when shorter), at the end, and their ratio: a client
//! that keeps something of each name it saw grows with the run; one that keeps
//! nothing stays flat.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::children::rss_kib;
use crate::contender::connect_distlock;
use crate::error::BoxError;
use crate::runtime::{block_on, Flavor};

const USAGE: &str = "churn URL SECONDS [TASKS]";

/// How often the RSS is sampled.
const SAMPLE: Duration = Duration::from_secs(10);

/// Runs the churn that `args` (`churn URL SECONDS [TASKS]`) asks for.
pub(crate) fn churn(args: &[String]) -> Result<(), BoxError> {
    let url = args.get(1).ok_or(USAGE)?.clone();
    let number = |i: usize, default: Option<u64>| -> Result<u64, BoxError> {
        match (args.get(i), default) {
            (Some(text), _) => text
                .parse()
                .map_err(|err| format!("{USAGE}: {text:?}: {err}").into()),
            (None, Some(value)) => Ok(value),
            (None, None) => Err(USAGE.into()),
        }
    };
    let run = Duration::from_secs(number(2, None)?);
    let tasks = number(3, Some(64))?;
    let flavor = match std::env::var("DISTLOCK_BENCH_RUNTIME").as_deref() {
        Ok("current-thread") => Flavor::CurrentThread,
        _ => Flavor::MultiThread,
    };
    block_on(flavor, async move {
        let client = connect_distlock(&url).await?;
        let stop = Arc::new(AtomicBool::new(false));
        let pairs = Arc::new(AtomicU64::new(0));
        let mut set = tokio::task::JoinSet::new();
        for task in 0..tasks {
            let (client, stop, pairs) = (client.clone(), stop.clone(), pairs.clone());
            set.spawn(async move {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let guard = client.lock(format!("churn:{task}:{i}")).await?;
                    guard.unlock().await?;
                    pairs.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
                Ok::<_, distlock::LockError>(())
            });
        }
        let start = Instant::now();
        let first_at = Duration::from_secs(60).min(run / 6);
        let (mut first, mut last) = (None, rss_kib());
        let mut next = SAMPLE;
        while start.elapsed() < run {
            tokio::time::sleep(SAMPLE.min(run.saturating_sub(start.elapsed()))).await;
            last = rss_kib();
            let secs = start.elapsed().as_secs();
            if first.is_none() && start.elapsed() >= first_at {
                first = Some(last);
            }
            if start.elapsed() >= next {
                println!(
                    "t={secs}s pairs={} rss_kib={last}",
                    pairs.load(Ordering::Relaxed)
                );
                next += SAMPLE;
            }
        }
        stop.store(true, Ordering::Relaxed);
        while let Some(done) = set.join_next().await {
            done??;
        }
        let first = first.unwrap_or(last);
        println!(
            "result tasks={tasks} secs={} pairs={} first_kib={first} end_kib={last} ratio={:.3} ({flavor})",
            run.as_secs(),
            pairs.load(Ordering::Relaxed),
            last as f64 / first.max(1) as f64
        );
        Ok(())
    })
}
