//! The load generator behind `cargo xtask bench`.
//!
//! It starts a throwaway `redis-server` (and a local Redis Cluster) through
//! `distlock-testkit`, measures the physical limit of the server for distlock's own
//! scripts with `redis-benchmark`, runs every scenario of issue 6 against the same
//! server in the same run, each at least three times, and prints a Markdown table of
//! medians, each a ratio to its reference. With `--write FILE` it also puts the table
//! into FILE (BENCHMARKS.md) between the `bench:start` and `bench:end` markers.
//!
//! ```text
//! distlock-bench [--runs N] [--write FILE] [--quick] [--skip-cluster]
//! ```
//!
//! The binary also runs itself as a child for the scenarios that need another
//! process (`child-waiter`, `child-leases`).

mod children;
mod cpu;
mod error;
#[cfg(feature = "rslock")]
mod peer;
mod report;
mod scenarios;
mod server;
mod settings;
mod stats;

use std::process::ExitCode;
use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::{RedisCluster, RedisServer};

use crate::children::Leases;
use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::report::Results;
use crate::scenarios::{Contention, Micro, Reentry};
use crate::server::{KeyShape, Reference};
use crate::settings::Settings;
use crate::stats::median;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("child-waiter") => runtime().and_then(|rt| {
            let url = args.get(1).ok_or("child-waiter URL")?;
            rt.block_on(children::child_waiter(url))
        }),
        Some("child-leases") => runtime().and_then(|rt| {
            let arg = |i: usize| -> Result<u64, BoxError> {
                Ok(args
                    .get(i)
                    .ok_or("child-leases URL LOCKS HOLD_MS LEASE_MS")?
                    .parse()?)
            };
            let url = args.get(1).ok_or("child-leases URL")?;
            rt.block_on(children::child_leases(
                url,
                arg(2)? as usize,
                Duration::from_millis(arg(3)?),
                Duration::from_millis(arg(4)?),
            ))
        }),
        Some("one-task") => runtime().and_then(|rt| {
            // For profilers: scenario 1 alone against a running server.
            let url = args.get(1).ok_or("one-task URL PAIRS")?;
            let pairs: usize = args.get(2).ok_or("one-task URL PAIRS")?.parse()?;
            rt.block_on(async {
                let client = LockClient::builder().url(url.as_str()).connect().await?;
                let (rate, cpu) =
                    scenarios::one_task(&client, "profile", pairs, Duration::from_secs(120))
                        .await?;
                println!(
                    "{rate:.0} pairs/s, {:.1} µs CPU per pair",
                    cpu.as_secs_f64() * 1e6
                );
                Ok(())
            })
        }),
        Some("raw-pairs") => runtime().and_then(|rt| {
            // Scenario 1's requests through plain redis-rs, to split the client's cost.
            let url = args.get(1).ok_or("raw-pairs URL PAIRS")?;
            let pairs: usize = args.get(2).ok_or("raw-pairs URL PAIRS")?.parse()?;
            rt.block_on(async {
                let (rate, cpu) = scenarios::raw_pairs(url, pairs).await?;
                println!(
                    "{rate:.0} pairs/s, {:.1} µs CPU per pair",
                    cpu.as_secs_f64() * 1e6
                );
                Ok(())
            })
        }),
        Some("many-tasks") => runtime().and_then(|rt| {
            // For profilers: scenario 2 alone against a running server.
            let url = args.get(1).ok_or("many-tasks URL PAIRS_PER_TASK")?;
            let pairs: usize = args
                .get(2)
                .ok_or("many-tasks URL PAIRS_PER_TASK")?
                .parse()?;
            rt.block_on(async {
                let client = LockClient::builder().url(url.as_str()).connect().await?;
                let cpu = cpu_time(libc::RUSAGE_SELF);
                let rate =
                    scenarios::many_tasks(&client, "profile", 64, pairs, Duration::from_secs(120))
                        .await?;
                let cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
                let per_pair = cpu.as_secs_f64() * 1e6 / (64 * pairs) as f64;
                println!("{rate:.0} pairs/s, {per_pair:.1} µs CPU per pair");
                Ok(())
            })
        }),
        Some("contention") => runtime().and_then(|rt| {
            // Scenario 4 alone on a server of its own, to iterate on the hand-off.
            let seconds: u64 = args.get(1).map_or(Ok(5), |s| s.parse())?;
            rt.block_on(async {
                let server = RedisServer::start()?;
                let client = LockClient::builder().url(server.url()).connect().await?;
                let mut settings = Settings::full().contention;
                settings.duration = Duration::from_secs(seconds);
                let c = scenarios::contention(&client, &server, "alone", settings).await?;
                println!(
                    "{:.0} acq/s, hand-off p50 {:?} p99 {:?}, same task {:.1} %, overtaking {:.1} %, \
                     wait p99 {:?} max {:?}, {:.3} requests ({:.3} with the warm-up) and {:.3} \
                     acquire calls per acquisition, {} overlaps; critical section {:?} on \
                     average, starvation bound {:?}",
                    c.per_second,
                    c.handoff_p50,
                    c.handoff_p99,
                    c.same_task_share * 100.0,
                    c.overtaking_share * 100.0,
                    c.wait_p99,
                    c.wait_max,
                    c.requests_per_acquisition,
                    c.requests_per_acquisition_whole,
                    c.acquire_calls_per_acquisition,
                    c.overlaps,
                    c.critical_mean,
                    (c.critical_mean + c.handoff_p50) * settings.tasks as u32
                );
                Ok(())
            })
        }),
        _ => harness(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("distlock-bench: error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The client's runtime: one thread, as `redis-benchmark` drives the server from one
/// thread; the server gets the other core.
fn runtime() -> Result<tokio::runtime::Runtime, BoxError> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn harness(args: &[String]) -> Result<(), BoxError> {
    let mut settings = Settings::full();
    let mut write = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--quick" => settings = Settings::quick(),
            "--runs" => {
                let runs: usize = iter.next().ok_or("--runs N")?.parse()?;
                settings.runs = runs.max(1);
                settings.interleaved_runs = runs.max(1);
                settings.reference.runs = runs.max(1);
            }
            "--write" => write = Some(iter.next().ok_or("--write FILE")?.clone()),
            "--skip-cluster" => settings.cluster = false,
            "--cluster-only" => settings.cluster_only = true,
            "-h" | "--help" => {
                println!("distlock-bench [--runs N] [--write FILE] [--quick] [--skip-cluster] [--cluster-only]");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let load_before = report::load_average();
    let started = std::time::Instant::now();
    let rt = runtime()?;
    let mut results = rt.block_on(run_all(&settings))?;
    results.load_before = load_before;
    results.load_after = report::load_average();
    results.elapsed = started.elapsed();
    let markdown = report::markdown(&settings, &results);
    println!("{markdown}");
    if let Some(path) = write {
        report::write_into(&path, &markdown)?;
        eprintln!("distlock-bench: wrote the results into {path}");
    }
    Ok(())
}

fn note(what: &str) {
    eprintln!("distlock-bench: {what}");
}

async fn run_all(settings: &Settings) -> Result<Results, BoxError> {
    if settings.cluster_only {
        return Ok(Results {
            cluster: Some(cluster_scenario(settings).await?),
            ..Results::default()
        });
    }
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "noeviction"])
        .start()?;
    note(&format!("started redis-server at {}", server.url()));
    let mut results = Results::default();

    let client = LockClient::builder().url(server.url()).connect().await?;
    // Warm the connections and the scripts.
    for i in 0..100 {
        client.lock(format!("warm:{i}")).await?.unlock().await?;
    }

    note("micro: client-side costs");
    let mut micro = Vec::new();
    for run in 0..settings.runs {
        micro.push(scenarios::micro(&client, &run.to_string(), 3, 200_000).await?);
    }
    results.micro = Micro {
        lock_builder_ns: median(&micro.iter().map(|m| m.lock_builder_ns).collect::<Vec<_>>()),
        context_current_ns: median(
            &micro
                .iter()
                .map(|m| m.context_current_ns)
                .collect::<Vec<_>>(),
        ),
        current_lock_ns: median(&micro.iter().map(|m| m.current_lock_ns).collect::<Vec<_>>()),
    };

    // The reference and scenarios 1 and 2 (and the peer's) take turns, run by run, so
    // that a change in the machine's load hits them alike; each ratio is taken within
    // its run, and the median of the ratios is reported.
    #[cfg(feature = "rslock")]
    let peer_settings: Vec<Option<Duration>> = vec![None, Some(Duration::from_millis(1))];
    #[cfg(feature = "rslock")]
    let managers: Vec<rslock::LockManager> = peer_settings
        .iter()
        .map(|delay| peer::manager(&server.url(), *delay))
        .collect();
    #[cfg(feature = "rslock")]
    {
        results.peers = peer_settings
            .iter()
            .map(|delay| report::PeerResults {
                retry: *delay,
                ..Default::default()
            })
            .collect();
    }
    let mut references = Vec::new();
    for run in 0..settings.interleaved_runs {
        note(&format!(
            "run {}: reference (redis-benchmark with distlock's scripts), 1: one task, \
             2: many tasks",
            run + 1
        ));
        // Each reference right before the scenario it is the reference of.
        let mut reference_settings = settings.reference;
        reference_settings.runs = 1;
        reference_settings.loads = [true, false];
        let reference_c1 =
            server::measure_reference(&server, &KeyShape::Single, reference_settings)?;
        let tag = run.to_string();
        let (one, cpu) =
            scenarios::one_task(&client, &tag, settings.one_task_pairs, settings.limit).await?;
        results.one_task_cpu.push(cpu.as_secs_f64());
        let (raw, raw_cpu) = scenarios::raw_pairs(&server.url(), settings.one_task_pairs).await?;
        results.raw_pairs.push(raw);
        results.raw_pairs_cpu.push(raw_cpu.as_secs_f64());
        results.one_task_vs_raw.push(one / raw);
        #[cfg(feature = "rslock")]
        let mut peer_one = Vec::new();
        #[cfg(feature = "rslock")]
        for (index, manager) in managers.iter().enumerate() {
            let tag = format!("{index}:{run}");
            peer_one.push(
                peer::one_task(manager, &tag, settings.one_task_pairs, settings.limit).await?,
            );
        }
        reference_settings.loads = [false, true];
        let reference_ceiling =
            server::measure_reference(&server, &KeyShape::Single, reference_settings)?;
        let reference = server::Reference::merge(reference_c1, reference_ceiling);
        let many = scenarios::many_tasks(
            &client,
            &tag,
            settings.tasks,
            settings.pairs_per_task,
            settings.limit,
        )
        .await?;
        results.one_task.push(one);
        results.one_task_ratio.push(one / reference.pairs_c1());
        results.raw_pairs_ratio.push(raw / reference.pairs_c1());
        results.many_tasks.push(many);
        results
            .many_tasks_ratio
            .push(many / reference.pairs_ceiling());
        #[cfg(feature = "rslock")]
        for (index, manager) in managers.iter().enumerate() {
            let tag = format!("{index}:{run}");
            let one = peer_one[index];
            let many = peer::many_tasks(
                manager,
                &tag,
                settings.tasks,
                settings.pairs_per_task,
                settings.limit,
            )
            .await?;
            let peer = &mut results.peers[index];
            peer.one_task.push(one);
            peer.one_task_ratio.push(one / reference.pairs_c1());
            peer.many_tasks.push(many);
            peer.many_tasks_ratio.push(many / reference.pairs_ceiling());
        }
        references.push(reference);
    }
    results.reference = server::Reference::combine(&references);

    note("3: re-entry");
    let mut reentries: Vec<Reentry> = Vec::new();
    for run in 0..settings.runs {
        reentries.push(
            scenarios::reentry(&client, &server, &run.to_string(), settings.reentry_rounds).await?,
        );
    }
    results.reentry = reentries;
    note("4: contention");
    let mut contention: Vec<Contention> = Vec::new();
    for run in 0..settings.runs {
        results.raw_rtt.push(
            scenarios::raw_round_trips(
                &server.url(),
                &run.to_string(),
                300,
                settings.contention.think,
            )
            .await?,
        );
        contention.push(
            scenarios::contention(&client, &server, &run.to_string(), settings.contention).await?,
        );
    }
    results.contention = contention;
    note("5: wake-up in another process");
    for run in 0..settings.runs {
        results.wakeup.push(
            children::wakeup(&client, &server, &run.to_string(), settings.wakeup_rounds).await?,
        );
    }
    note("7: the macro against the guard API");
    for run in 0..settings.runs {
        results.macro_ratio.push(
            scenarios::macro_overhead(
                &client,
                (run as u64 + 1) << 32,
                settings.macro_rounds,
                settings.macro_calls,
            )
            .await?,
        );
    }
    drop(client);

    #[cfg(feature = "rslock")]
    for (index, manager) in managers.iter().enumerate() {
        note(&format!(
            "peer: rslock, retry {:?}: 4",
            peer_settings[index]
        ));
        for run in 0..settings.runs {
            let tag = format!("{index}:{run}");
            let contention = peer::contention(manager, &server, &tag, settings.contention).await?;
            results.peers[index].contention.push(contention);
        }
    }

    note("6: many leases (a child process)");
    crate::server::flush(&server)?;
    let mut leases: Vec<Leases> = Vec::new();
    for _ in 0..settings.runs {
        leases.push(children::many_leases(&server, settings.leases)?);
    }
    results.leases = leases;
    drop(server);

    if settings.cluster {
        note("2 on a Redis Cluster (3 masters, 1 replica each)");
        match cluster_scenario(settings).await {
            Ok(cluster) => results.cluster = Some(cluster),
            Err(err) => {
                note(&format!("the cluster scenario failed: {err}"));
                results.cluster_error = Some(err.to_string());
            }
        }
    }
    Ok(results)
}

/// Scenario 2 on a local cluster, against the ceiling of one of its masters.
async fn cluster_scenario(settings: &Settings) -> Result<report::ClusterResults, BoxError> {
    let cluster = RedisCluster::start(3, 1)?;
    let master = &cluster.nodes()[0];
    // A hash tag whose slot the first master owns (as it says itself): every
    // reference key lands there.
    let nodes = master.cmd(&["CLUSTER", "NODES"])?;
    let ranges: Vec<(u16, u16)> = nodes
        .lines()
        .find(|line| line.contains("myself"))
        .ok_or("no `myself` in CLUSTER NODES")?
        .split_whitespace()
        .skip(8)
        .filter_map(|range| {
            let mut bounds = range.split('-');
            let first = bounds.next()?.parse().ok()?;
            let last = bounds.next().map_or(Some(first), |n| n.parse().ok())?;
            Some((first, last))
        })
        .collect();
    let tag = (0..100_000)
        .map(|i| format!("m{i}"))
        .find(|tag| {
            let slot = crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384;
            ranges.iter().any(|&(a, b)| a <= slot && slot <= b)
        })
        .ok_or("no hash tag on the first master")?;
    let client = LockClient::builder()
        .cluster(cluster.urls())
        .connect()
        .await?;
    for i in 0..100 {
        client.lock(format!("warm:{i}")).await?.unlock().await?;
    }
    let shape = KeyShape::Slot(tag);
    let mut reference_settings = settings.reference;
    reference_settings.runs = 1;
    reference_settings.loads = [false, true];
    let mut references = Vec::new();
    let mut many = Vec::new();
    let mut ratios = Vec::new();
    for run in 0..settings.runs {
        let reference = server::measure_reference(master, &shape, reference_settings)?;
        let value = scenarios::many_tasks(
            &client,
            &format!("c{run}"),
            settings.tasks,
            settings.pairs_per_task,
            settings.limit,
        )
        .await?;
        many.push(value);
        ratios.push(value / reference.pairs_ceiling());
        references.push(reference);
    }
    Ok(report::ClusterResults {
        reference: Reference::combine(&references),
        many_tasks: many,
        many_tasks_ratio: ratios,
    })
}
