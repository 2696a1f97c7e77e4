//! distlock's metrics on a Prometheus endpoint: a contended workload, then the
//! scrape, as Prometheus would see it.
//!
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example metrics
//! --features metrics` (`REDIS_CLUSTER_URLS` for a Redis Cluster,
//! `REDIS_SENTINEL_URLS` for Sentinel). It serves the metrics on a free loopback
//! port with `metrics-exporter-prometheus`, prints every `distlock_` line of the
//! scrape, and exits with a non-zero status if the counts do not match what it did.
//! Its keys start with `distlock-example:`.

use std::time::Duration;

mod common;
use common::scrape::{scrape, serve, value};
use common::Target;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TASKS: u64 = 4;
const EACH: u64 = 5;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let addr = serve()?;

    let target = Target::from_env();
    println!("metrics of a contended workload against {target}, served on http://{addr}/metrics\n");
    let locks = target
        .lock_client()
        .namespace("distlock-example")
        .connect()
        .await?;

    // TASKS tasks take the same lock EACH times: most of them wait.
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let guard = locks.lock("report:7").wait(Duration::from_secs(10)).await?;
                tokio::time::sleep(Duration::from_millis(5)).await;
                guard.unlock().await?;
            }
            Ok::<_, distlock::LockError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    // One wait that runs out.
    let held = locks.lock("export:nightly").await?;
    let timed_out = locks
        .lock("export:nightly")
        .wait(Duration::from_millis(50))
        .await;
    if !timed_out.as_ref().is_err_and(|err| err.is_timeout()) {
        return Err(format!("expected a timeout, got {timed_out:?}").into());
    }
    held.unlock().await?;

    let scrape = scrape(addr)?;
    for line in scrape.lines().filter(|line| line.starts_with("distlock_")) {
        println!("{line}");
    }
    let acquired = value(&scrape, "distlock_acquired_total", "report:{#}");
    let waits = value(&scrape, "distlock_wait_seconds_count", "report:{#}");
    let timeouts = value(&scrape, "distlock_timed_out_total", "export:nightly");
    let held_now = value(&scrape, "distlock_held", "report:{#}");
    if acquired != Some((TASKS * EACH) as f64)
        || waits != Some((TASKS * EACH) as f64)
        || timeouts != Some(1.0)
        || held_now != Some(0.0)
    {
        return Err(format!(
            "unexpected counts: acquired {acquired:?}, waits {waits:?}, timeouts {timeouts:?}, \
             held {held_now:?}"
        )
        .into());
    }
    println!(
        "\nmetrics check passed: {} acquisitions, 1 timeout, nothing held",
        TASKS * EACH
    );
    Ok(())
}
