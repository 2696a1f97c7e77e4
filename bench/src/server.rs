//! What the harness asks the server: command counts, and the reference rates that
//! `redis-benchmark` measures with distlock's own scripts.
//!
//! The last part of this file ("distlock's protocol") is every place where the
//! harness depends on the lock's layout or on the scripts' commands: the script
//! sources, the keys and channel of a lock, the commands the scripts run inside
//! Redis, the requests of a first acquisition and of a release, the prefill of held
//! locks and `redis-benchmark`'s command lines. Adapt there when they change.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use distlock_testkit::{redis_server_binary, RedisServer};

use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::stats::{median, pair_rate};

/// `INFO commandstats`: command name to calls.
pub(crate) fn command_stats(server: &RedisServer) -> Result<HashMap<String, u64>, BoxError> {
    let info = server.cmd_timeout(&["INFO", "commandstats"], Duration::from_secs(30))?;
    Ok(parse_command_stats(&info))
}

/// [`command_stats`] over an async connection, for a snapshot in the middle of a run
/// without blocking its tasks.
pub(crate) async fn command_stats_async(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<HashMap<String, u64>, BoxError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(parse_command_stats(&info))
}

fn parse_command_stats(info: &str) -> HashMap<String, u64> {
    let mut stats = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let calls = fields
            .split(',')
            .find_map(|field| field.strip_prefix("calls="))
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0);
        stats.insert(name.to_owned(), calls);
    }
    stats
}

/// Calls of `command` between two snapshots of [`command_stats`].
pub(crate) fn calls_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    command: &str,
) -> u64 {
    after.get(command).copied().unwrap_or(0) - before.get(command).copied().unwrap_or(0)
}

/// Requests clients sent between two snapshots: every command but `INFO` and the
/// commands that scripts run inside Redis.
pub(crate) fn client_requests_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> u64 {
    after
        .keys()
        .filter(|name| {
            name.as_str() != "info" && !DISTLOCK_SCRIPT_COMMANDS.contains(&name.as_str())
        })
        .map(|name| calls_between(before, after, name))
        .sum()
}

/// A field of `INFO <section>` as a number.
pub(crate) fn info_field(
    server: &RedisServer,
    section: &str,
    field: &str,
) -> Result<u64, BoxError> {
    let info = server.cmd_timeout(&["INFO", section], Duration::from_secs(30))?;
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
        .ok_or_else(|| format!("no {field} in INFO {section}").into())
}

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

/// How `redis-benchmark` drives the server.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub(crate) clients: u32,
    pub(crate) pipeline: u32,
    pub(crate) requests: u64,
}

/// One `redis-benchmark` run of `command`; returns requests per second and the
/// median latency.
fn redis_benchmark(
    binary: &Path,
    port: u16,
    load: Load,
    keyspace: u64,
    command: &[String],
) -> Result<(f64, Duration), BoxError> {
    let output = Command::new(binary)
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", &load.clients.to_string()])
        .args(["-P", &load.pipeline.to_string()])
        .args(["-n", &load.requests.to_string()])
        .args(["-r", &keyspace.to_string()])
        .arg("--csv")
        .args(command)
        .output()?;
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

/// The physical limit of one server for distlock's scripts, measured by
/// `redis-benchmark` (median of the runs).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reference {
    /// EVALSHA acquire.lua on fresh keys, one request in flight (`-c 1`), per second.
    pub(crate) acquire_c1: f64,
    /// EVALSHA release.lua on held keys, `-c 1`, per second.
    pub(crate) release_c1: f64,
    /// As `acquire_c1`, pipelined (`-P 16 -c 8`).
    pub(crate) acquire_ceiling: f64,
    /// As `release_c1`, pipelined.
    pub(crate) release_ceiling: f64,
    /// Share of release requests that found a held key (the rest were cheaper misses).
    pub(crate) release_hits: f64,
    /// redis-benchmark's CPU time per `-c 1` acquire plus per `-c 1` release: its
    /// client-side cost of a lock+unlock pair.
    pub(crate) cpu_per_pair_c1: Duration,
    /// Median latency of the `-c 1` acquire (redis-benchmark's p50).
    pub(crate) acquire_c1_p50: Duration,
    /// Each run's values, for the details.
    pub(crate) runs: Vec<[f64; 4]>,
}

impl Reference {
    /// Lock+unlock pairs per second with one request in flight.
    pub(crate) fn pairs_c1(&self) -> f64 {
        pair_rate(self.acquire_c1, self.release_c1)
    }

    /// Lock+unlock pairs per second, pipelined: the server's ceiling.
    pub(crate) fn pairs_ceiling(&self) -> f64 {
        pair_rate(self.acquire_ceiling, self.release_ceiling)
    }

    /// The time of one EVALSHA acquire with one request in flight: the median
    /// latency redis-benchmark saw (its mean is dominated by the stalls of a loaded
    /// machine; medians are compared with medians).
    pub(crate) fn evalsha_latency(&self) -> Duration {
        self.acquire_c1_p50
    }

    /// The `-c 1` figures of `c1` with the pipelined ones of `ceiling`.
    pub(crate) fn merge(c1: Reference, ceiling: Reference) -> Reference {
        let runs = c1
            .runs
            .iter()
            .zip(&ceiling.runs)
            .map(|(a, b)| [a[0], a[1], b[2], b[3]])
            .collect();
        Reference {
            acquire_ceiling: ceiling.acquire_ceiling,
            release_ceiling: ceiling.release_ceiling,
            release_hits: (c1.release_hits + ceiling.release_hits) / 2.0,
            runs,
            ..c1
        }
    }

    /// The median of several references, field by field.
    pub(crate) fn combine(references: &[Reference]) -> Reference {
        let column =
            |f: &dyn Fn(&Reference) -> f64| median(&references.iter().map(f).collect::<Vec<_>>());
        Reference {
            acquire_c1: column(&|r| r.acquire_c1),
            release_c1: column(&|r| r.release_c1),
            acquire_ceiling: column(&|r| r.acquire_ceiling),
            release_ceiling: column(&|r| r.release_ceiling),
            release_hits: column(&|r| r.release_hits),
            acquire_c1_p50: Duration::from_secs_f64(column(&|r| r.acquire_c1_p50.as_secs_f64())),
            cpu_per_pair_c1: Duration::from_secs_f64(column(&|r| r.cpu_per_pair_c1.as_secs_f64())),
            runs: references.iter().flat_map(|r| r.runs.clone()).collect(),
        }
    }
}

/// Settings of the reference runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReferenceSettings {
    pub(crate) runs: usize,
    pub(crate) c1_requests: u64,
    pub(crate) ceiling_requests: u64,
    /// Lease of the acquire runs, ms (the client's default watchdog lease).
    pub(crate) lease_ms: u64,
    /// Which loads to measure: `-c 1`, and pipelined.
    pub(crate) loads: [bool; 2],
}

/// Keys of the reference runs: `distlock:{<tag>:<n>}` on a single server, or
/// `distlock:{<tag>}:<n>` with a tag owned by one cluster master (all in one slot).
#[derive(Debug, Clone)]
pub(crate) enum KeyShape {
    Single,
    Slot(String),
}

impl KeyShape {
    /// The key for `run`/`what`, with `number` in place of the counter (a
    /// `__rand_int__` for redis-benchmark, or a Lua format).
    fn key(&self, what: &str, number: &str) -> String {
        match self {
            KeyShape::Single => format!("distlock:{{ref{what}:{number}}}"),
            KeyShape::Slot(tag) => format!("distlock:{{{tag}}}:ref{what}:{number}"),
        }
    }
}

/// Empties the server without blocking it (a blocked cluster node would be failed
/// over), and waits until the memory is given back, up to 60 s.
pub(crate) fn flush(server: &RedisServer) -> Result<(), BoxError> {
    server.cmd(&["FLUSHALL", "ASYNC"])?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while info_field(server, "memory", "lazyfree_pending_objects")? > 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Measures the reference on `server`.
pub(crate) fn measure_reference(
    server: &RedisServer,
    shape: &KeyShape,
    settings: ReferenceSettings,
) -> Result<Reference, BoxError> {
    let binary = redis_benchmark_binary()?;
    let mut runs = Vec::new();
    let mut hits = Vec::new();
    let mut p50s = Vec::new();
    let mut cpu_per_pair = Vec::new();
    for run in 0..settings.runs {
        let mut values = [0.0; 4];
        for (index, (clients, pipeline, requests)) in [
            (1, 1, settings.c1_requests),
            (8, 16, settings.ceiling_requests),
        ]
        .into_iter()
        .enumerate()
        .filter(|(index, _)| settings.loads[*index])
        {
            let load = Load {
                clients,
                pipeline,
                requests,
            };
            let tag = format!("{run}{}", ["c", "p"][index]);
            let commands = distlock_reference_commands(server, shape, &tag, settings.lease_ms)?;
            let cpu_before = cpu_time(libc::RUSAGE_CHILDREN);
            let (rate, p50) = redis_benchmark(
                &binary,
                server.port(),
                load,
                1_000_000_000,
                &commands.acquire,
            )?;
            values[index * 2] = rate;
            let acquire_cpu = cpu_time(libc::RUSAGE_CHILDREN) - cpu_before;
            if index == 0 {
                p50s.push(p50.as_secs_f64());
            }
            // Release on keys held by the owner: four times as many held keys as
            // requests, so most requests release a held lock; the share that hit is
            // measured.
            let keyspace = requests * 4;
            prefill_distlock_locks(server, shape, &tag, keyspace)?;
            let before = command_stats(server)?;
            let cpu_before = cpu_time(libc::RUSAGE_CHILDREN);
            values[index * 2 + 1] =
                redis_benchmark(&binary, server.port(), load, keyspace, &commands.release)?.0;
            let release_cpu = cpu_time(libc::RUSAGE_CHILDREN) - cpu_before;
            if index == 0 {
                let n = u32::try_from(requests).unwrap_or(u32::MAX);
                cpu_per_pair.push((acquire_cpu / n + release_cpu / n).as_secs_f64());
            }
            let released = distlock_releases_that_freed(&before, &command_stats(server)?);
            hits.push(released as f64 / requests as f64);
        }
        flush(server)?;
        runs.push(values);
    }
    let column = |i: usize| median(&runs.iter().map(|run| run[i]).collect::<Vec<_>>());
    Ok(Reference {
        acquire_c1: column(0),
        release_c1: column(1),
        acquire_ceiling: column(2),
        release_ceiling: column(3),
        release_hits: median(&hits),
        acquire_c1_p50: Duration::from_secs_f64(median(&p50s)),
        cpu_per_pair_c1: Duration::from_secs_f64(median(&cpu_per_pair)),
        runs,
    })
}

// ---- distlock's protocol --------------------------------------------------------

/// distlock's scripts, byte for byte as the client sends them (first line,
/// `hash.lua`, the script): `SCRIPT LOAD` gives the SHA the client uses.
pub(crate) const ACQUIRE_LUA: &str = concat!(
    "#!lua\n",
    include_str!("../../lua/hash.lua"),
    include_str!("../../lua/acquire.lua")
);
pub(crate) const RELEASE_LUA: &str = concat!(
    "#!lua flags=allow-oom\n",
    include_str!("../../lua/hash.lua"),
    include_str!("../../lua/release.lua")
);

/// How long the release script keeps the record of a final release in these runs
/// (`ARGV[6]` of `release.lua`; the client uses four response timeouts).
const REMEMBER_MS: u64 = 2_000;

/// Commands that distlock's scripts run inside Redis: `INFO commandstats` counts those
/// too, but they cost no round trip. (A command the client also sends itself would
/// have to be told apart another way.)
pub(crate) const DISTLOCK_SCRIPT_COMMANDS: &[&str] = &[
    "type", "hget", "hset", "hincrby", "pexpire", "pttl", "incr", "get", "del", "publish",
    "spublish", "hexists", "hgetall", "set",
];

/// The owner id of the reference's locks (a client's uuid and counter).
const DISTLOCK_OWNER: &str = "0123456789abcdef0123456789abcdef:1";

/// distlock's acquire attempts between two [`command_stats`] snapshots, of which
/// `acquisitions` succeeded: every EVALSHA less one release per acquisition.
pub(crate) fn distlock_acquire_attempts(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    acquisitions: u64,
) -> u64 {
    calls_between(before, after, "evalsha").saturating_sub(acquisitions)
}

/// Release requests between two [`command_stats`] snapshots that really released a
/// held lock: each publishes once.
fn distlock_releases_that_freed(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> u64 {
    calls_between(before, after, "publish")
}

/// The channel a waiter for `name` subscribes to (`name` needs no escaping).
pub(crate) fn distlock_release_channel(name: &str) -> String {
    format!("distlock:{{{name}}}:released")
}

/// A first acquisition of the lock `name` by `owner`, as the client sends it, for
/// plain redis-rs (`sha`: acquire.lua's); the reply is not looked at.
pub(crate) fn distlock_acquire_cmd(sha: &str, name: &str, owner: &str) -> redis::Cmd {
    let key = format!("distlock:{{{name}}}");
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(2)
        .arg(&key)
        .arg(format!("{key}:fence"))
        .arg(owner)
        .arg(30_000)
        .arg(0)
        .arg(1)
        .arg(0)
        .arg(0);
    cmd
}

/// The release of what [`distlock_acquire_cmd`] took (`sha`: release.lua's).
pub(crate) fn distlock_release_cmd(sha: &str, name: &str, owner: &str) -> redis::Cmd {
    let key = format!("distlock:{{{name}}}");
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha)
        .arg(3)
        .arg(&key)
        .arg(format!("{key}:released"))
        .arg(format!("{key}:freed"))
        .arg(owner)
        .arg(30_000)
        .arg(2)
        .arg(1)
        .arg("PUBLISH")
        .arg(REMEMBER_MS);
    cmd
}

/// `redis-benchmark`'s command lines of one reference run: a first acquisition on
/// fresh keys, and a release of a held lock (keys [`prefill_distlock_locks`] filled).
#[derive(Debug, Clone)]
struct ReferenceCommands {
    acquire: Vec<String>,
    release: Vec<String>,
}

/// distlock's reference: EVALSHA acquire.lua on fresh keys (a keyspace far larger
/// than the request count), EVALSHA release.lua on the keys [`prefill_distlock_locks`]
/// filled, as operation 2 of the owner (acquire.lua's "Exactly once": the prefilled
/// locks record operation 1 as applied, with a floor of 0).
fn distlock_reference_commands(
    server: &RedisServer,
    shape: &KeyShape,
    tag: &str,
    lease_ms: u64,
) -> Result<ReferenceCommands, BoxError> {
    let acquire_sha = server.cmd(&["SCRIPT", "LOAD", ACQUIRE_LUA])?;
    let release_sha = server.cmd(&["SCRIPT", "LOAD", RELEASE_LUA])?;
    let rand = "__rand_int__";
    let lease = lease_ms.to_string();
    let acquire = [
        "EVALSHA",
        &acquire_sha,
        "2",
        &shape.key(&format!("a{tag}"), rand),
        &shape.key(&format!("a{tag}f"), rand),
        DISTLOCK_OWNER,
        &lease,
        "0",
        "1",
        "0",
        "0",
    ];
    let release = [
        "EVALSHA",
        &release_sha,
        "3",
        &shape.key(&format!("r{tag}"), rand),
        &shape.key(&format!("r{tag}c"), rand),
        &shape.key(&format!("r{tag}x"), rand),
        DISTLOCK_OWNER,
        &lease,
        "2",
        "0",
        "PUBLISH",
        &REMEMBER_MS.to_string(),
    ];
    Ok(ReferenceCommands {
        acquire: acquire.iter().map(|s| s.to_string()).collect(),
        release: release.iter().map(|s| s.to_string()).collect(),
    })
}

/// Fills `keys` release keys of the run `tag` with a lock held once by the
/// reference's owner, exactly as acquire.lua leaves a first acquisition, in
/// server-side loops of 10 000 keys: a longer script would stall a cluster node past
/// its node timeout and start a failover.
fn prefill_distlock_locks(
    server: &RedisServer,
    shape: &KeyShape,
    tag: &str,
    keys: u64,
) -> Result<(), BoxError> {
    const CHUNK: u64 = 10_000;
    let template = shape.key(&format!("r{tag}"), "%012d");
    let script =
        "local template, from, to, owner = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] \
        for i = from, to - 1 do \
          local key = string.format(template, i) \
          redis.call('HSET', key, owner, 1, '#fence', 0, '#floor', 0, '#done', '1') \
          redis.call('PEXPIRE', key, 600000) \
        end \
        return to - from";
    let mut from = 0;
    while from < keys {
        let to = (from + CHUNK).min(keys);
        server.cmd_timeout(
            &[
                "EVAL",
                script,
                "0",
                &template,
                &from.to_string(),
                &to.to_string(),
                DISTLOCK_OWNER,
            ],
            Duration::from_secs(30),
        )?;
        from = to;
    }
    Ok(())
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
