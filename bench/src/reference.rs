//! The physical limit of one server, measured by `redis-benchmark`: with distlock's
//! scripts, with rslock's commands (the minimal protocol, "R") and with the bare hash
//! scripts, at one request in flight and pipelined, with the server's CPU per
//! request around each run. The commands themselves come from `server.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use distlock_testkit::{redis_server_binary, RedisServer};

use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::server::{self, command_stats, KeyShape, ServerUsage, Workload};
use crate::stats::{median, pair_rate};

/// The `redis-benchmark` next to `redis-server`, or the one on PATH.
pub(crate) fn redis_benchmark_binary() -> Result<PathBuf, BoxError> {
    if let Ok(server) = redis_server_binary() {
        if let Some(dir) = server.parent() {
            let candidate = dir.join("redis-benchmark");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("redis-benchmark");
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(
        "redis-benchmark not found next to redis-server nor on PATH (Debian: apt-get install \
         redis-tools)"
            .into(),
    )
}

/// The two loads of a reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Load {
    /// `-c 1`, no pipelining: one request in flight, as one task has.
    C1,
    /// `-P 16 -c 8`: the server's ceiling.
    Pipelined,
}

impl Load {
    /// Clients and pipeline depth.
    fn shape(self) -> (u32, u32) {
        match self {
            Load::C1 => (1, 1),
            Load::Pipelined => (8, 16),
        }
    }
}

/// One `redis-benchmark` run of `command`; returns requests per second and the
/// median latency.
pub(crate) fn redis_benchmark(
    binary: &Path,
    port: u16,
    load: Load,
    requests: u64,
    keyspace: u64,
    command: &[String],
) -> Result<(f64, Duration), BoxError> {
    let (clients, pipeline) = load.shape();
    let output = Command::new(binary)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &clients.to_string()])
        .args(["-P", &pipeline.to_string()])
        .args(["-n", &requests.to_string()])
        .args(["-r", &keyspace.to_string()])
        .arg("--csv")
        .args(command)
        .output()
        .map_err(|err| format!("could not run {}: {err}", binary.display()))?;
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    parse_csv(&String::from_utf8_lossy(&output.stdout)).ok_or_else(|| {
        format!(
            "no rate in redis-benchmark's output: {:?}",
            String::from_utf8_lossy(&output.stdout)
        )
        .into()
    })
}

/// The `rps` and `p50_latency_ms` columns of `redis-benchmark --csv`: the 7th and
/// 4th fields from the end of the data line (the title, a command line, comes first).
fn parse_csv(text: &str) -> Option<(f64, Duration)> {
    text.lines()
        .filter(|line| !line.starts_with("\"test\""))
        .find_map(|line| {
            let fields: Vec<&str> = line.trim().trim_matches('"').split("\",\"").collect();
            let at = |back: usize| -> Option<f64> {
                fields
                    .len()
                    .checked_sub(back)
                    .and_then(|i| fields[i].parse().ok())
            };
            Some((at(7)?, Duration::from_secs_f64(at(4)? / 1000.0)))
        })
}

/// One protocol's rates at one load.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rates {
    /// First acquisitions on fresh keys, per second.
    pub(crate) acquire: f64,
    /// Releases of held keys, per second.
    pub(crate) release: f64,
    /// Share of release requests that found a held key (the rest were cheaper misses).
    pub(crate) release_hits: f64,
    /// redis-benchmark's CPU time per acquire plus per release request: its
    /// client-side cost of a lock+unlock pair.
    pub(crate) cpu_per_pair: Duration,
    /// redis-benchmark's median latency of the acquire.
    pub(crate) acquire_p50: Duration,
    /// The server's CPU (`INFO cpu`, user + sys) per acquire request, µs.
    pub(crate) server_acquire_us: f64,
    /// The server's CPU per release request, µs (a share of them found no lock:
    /// [`Rates::release_hits`]).
    pub(crate) server_release_us: f64,
}

impl Rates {
    /// Lock+unlock pairs per second.
    pub(crate) fn pairs(&self) -> f64 {
        pair_rate(self.acquire, self.release)
    }

    /// The server's CPU per lock+unlock pair (an acquire and a release request), µs.
    pub(crate) fn server_cpu_per_pair(&self) -> f64 {
        self.server_acquire_us + self.server_release_us
    }

    /// The median of several, field by field.
    fn combine(all: &[Rates]) -> Rates {
        let column = |f: &dyn Fn(&Rates) -> f64| median(&all.iter().map(f).collect::<Vec<_>>());
        Rates {
            acquire: column(&|r| r.acquire),
            release: column(&|r| r.release),
            release_hits: column(&|r| r.release_hits),
            cpu_per_pair: Duration::from_secs_f64(column(&|r| r.cpu_per_pair.as_secs_f64())),
            acquire_p50: Duration::from_secs_f64(column(&|r| r.acquire_p50.as_secs_f64())),
            server_acquire_us: column(&|r| r.server_acquire_us),
            server_release_us: column(&|r| r.server_release_us),
        }
    }
}

/// One protocol's reference in one run: both loads.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reference {
    pub(crate) c1: Rates,
    pub(crate) pipelined: Rates,
}

impl Reference {
    /// Lock+unlock pairs per second with one request in flight.
    pub(crate) fn pairs_c1(&self) -> f64 {
        self.c1.pairs()
    }

    /// Lock+unlock pairs per second, pipelined: the server's ceiling.
    pub(crate) fn pairs_ceiling(&self) -> f64 {
        self.pipelined.pairs()
    }

    /// The rates at `load`.
    pub(crate) fn at(&self, load: Load) -> &Rates {
        match load {
            Load::C1 => &self.c1,
            Load::Pipelined => &self.pipelined,
        }
    }

    /// The median of several references, field by field.
    pub(crate) fn combine(references: &[Reference]) -> Reference {
        let c1: Vec<Rates> = references.iter().map(|r| r.c1).collect();
        let pipelined: Vec<Rates> = references.iter().map(|r| r.pipelined).collect();
        Reference {
            c1: Rates::combine(&c1),
            pipelined: Rates::combine(&pipelined),
        }
    }
}

/// Settings of the reference runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReferenceSettings {
    /// Requests of each `-c 1` run.
    pub(crate) c1_requests: u64,
    /// Requests of each pipelined run.
    pub(crate) ceiling_requests: u64,
    /// Lease of the acquire runs, ms (the client's default watchdog lease).
    pub(crate) lease_ms: u64,
}

/// Measures the rates of `workload` (a protocol's plain lock, or a lock kind's
/// scripts) at `load` on `server`, and the server's CPU around each redis-benchmark
/// run (one `INFO cpu` right before and one right after); `tag` keeps the run's keys
/// apart from every other run's.
pub(crate) fn measure(
    server: &RedisServer,
    shape: &KeyShape,
    workload: impl Into<Workload>,
    load: Load,
    settings: ReferenceSettings,
    tag: &str,
) -> Result<Rates, BoxError> {
    let workload = workload.into();
    let binary = redis_benchmark_binary()?;
    let requests = match load {
        Load::C1 => settings.c1_requests,
        Load::Pipelined => settings.ceiling_requests,
    };
    let commands = server::reference_commands(server, workload, shape, tag, settings.lease_ms)?;
    let server_before = ServerUsage::take(server)?;
    let cpu_before = cpu_time(libc::RUSAGE_CHILDREN);
    let (acquire, acquire_p50) = redis_benchmark(
        &binary,
        server.port(),
        load,
        requests,
        1_000_000_000,
        &commands.acquire,
    )?;
    let acquire_cpu = cpu_time(libc::RUSAGE_CHILDREN) - cpu_before;
    let (_, acquire_server) = ServerUsage::take(server)?.since(&server_before);
    // Four times as many held keys as requests (for each name of a set), so that
    // most requests release a held lock; the share that did is measured.
    let keyspace = requests * 4;
    server::prefill_held(server, workload, shape, tag, keyspace)?;
    let before = command_stats(server)?;
    let server_before = ServerUsage::take(server)?;
    let cpu_before = cpu_time(libc::RUSAGE_CHILDREN);
    let (release, _) = redis_benchmark(
        &binary,
        server.port(),
        load,
        requests,
        keyspace,
        &commands.release,
    )?;
    let release_cpu = cpu_time(libc::RUSAGE_CHILDREN) - cpu_before;
    let (_, release_server) = ServerUsage::take(server)?.since(&server_before);
    let freed = server::releases_that_freed(workload, &before, &command_stats(server)?);
    server::flush(server)?;
    let n = u32::try_from(requests.max(1)).unwrap_or(u32::MAX);
    let releases = requests.max(1) * workload.releases_per_request();
    Ok(Rates {
        acquire,
        release,
        release_hits: freed as f64 / releases as f64,
        cpu_per_pair: acquire_cpu / n + release_cpu / n,
        acquire_p50,
        server_acquire_us: acquire_server / requests.max(1) as f64,
        server_release_us: release_server / requests.max(1) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_rate_from_csv() {
        let text = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                    \"EVALSHA abc 2 k1 k2 o 30000 0 1 0\",\"12345.67\",\"0.071\",\"0.040\",\"0.071\",\"0.087\",\"0.111\",\"0.543\"\n";
        assert_eq!(parse_csv(text), Some((12345.67, Duration::from_micros(71))));
    }
}
