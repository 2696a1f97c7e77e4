//! distlock's metrics, served on a Prometheus endpoint and read back (feature
//! `metrics`).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Installs the Prometheus exporter as the process's recorder, its endpoint on a
/// free loopback port; returns the endpoint's address.
pub(crate) fn serve() -> Result<SocketAddr, Error> {
    let addr: SocketAddr = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?;
    PrometheusBuilder::new()
        .with_http_listener(addr)
        // Histograms with buckets (the exporter's default is a summary).
        .set_buckets(&[0.001, 0.005, 0.025, 0.1, 0.5, 1.0, 5.0])?
        .install()?;
    Ok(addr)
}

/// `GET /metrics` over a plain TCP connection: the body.
pub(crate) fn scrape(addr: SocketAddr) -> Result<String, Error> {
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
pub(crate) fn value(scrape: &str, name: &str, lock: &str) -> Option<f64> {
    let label = format!("lock=\"{lock}\"");
    scrape
        .lines()
        .find(|line| line.starts_with(&format!("{name}{{")) && line.contains(&label))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// The `distlock_` counters and gauges of the scrape (histograms by their counts),
/// one line each.
pub(crate) fn summary(scrape: &str) -> Vec<&str> {
    scrape
        .lines()
        .filter(|line| line.starts_with("distlock_"))
        .filter(|line| !line.contains("_bucket{") && !line.contains("_sum{"))
        .collect()
}
