//! distlock's metrics on a Prometheus endpoint: a contended workload, then the
//! scrape, as Prometheus would see it.
//!
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example metrics
//! --features metrics` (`REDIS_CLUSTER_URLS` for a Redis Cluster,
//! `REDIS_SENTINEL_URLS` for Sentinel). It serves the metrics on a free loopback
//! port with `metrics-exporter-prometheus`, prints every `distlock_` line of the
//! scrape, and exits with a non-zero status if the counts do not match what it did.
//! Its keys start with `distlock-example:`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

mod common;
use common::Target;

type Error = Box<dyn std::error::Error + Send + Sync>;

const TASKS: u64 = 4;
const EACH: u64 = 5;

#[tokio::main]
async fn main() -> Result<(), Error> {
    // A free loopback port for the endpoint.
    let addr: SocketAddr = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        // Histograms with buckets (the exporter's default is a summary).
        .set_buckets(&[0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 5.0])?
        .install()?;

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

/// `GET /metrics` over a plain TCP connection: the body.
fn scrape(addr: SocketAddr) -> Result<String, Error> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    // HTTP/1.0: the body ends with the connection, never chunked.
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("no end of the response's headers")?;
    if !head.starts_with("HTTP/1.") || !head.contains(" 200 ") {
        return Err(format!("the endpoint answered {head}").into());
    }
    Ok(body.to_owned())
}

/// The value of the series `name` whose `lock` label is `lock`.
fn value(scrape: &str, name: &str, lock: &str) -> Option<f64> {
    let label = format!("lock=\"{lock}\"");
    scrape
        .lines()
        .find(|line| line.starts_with(&format!("{name}{{")) && line.contains(&label))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}
