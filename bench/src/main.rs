//! The load generator behind `cargo xtask bench`.
//!
//! It starts a throwaway `redis-server` (and a local Redis Cluster) through
//! `distlock-testkit`, measures the physical limit of the server with
//! `redis-benchmark` (with distlock's own scripts, with rslock's commands and with
//! the bare hash scripts, each with the server's CPU per lock+unlock pair), runs
//! every scenario of issues 6 and 13 against the same server in the same run, distlock
//! and the rslock peer taking turns, and prints a Markdown table of medians, each a
//! ratio to its reference. With `--write FILE` it also puts the table into FILE
//! (BENCHMARKS.md) between the `bench:start` and `bench:end` markers.
//!
//! ```text
//! distlock-bench [--runs N] [--write FILE] [--quick] [--skip-cluster] [--cluster-only]
//! ```
//!
//! | file | owns |
//! | --- | --- |
//! | `main.rs` | the command line and the order of the phases |
//! | `throughput.rs` | the references and scenarios 1 and 2 against the peer, run by run |
//! | `contention_matrix.rs` | scenario 4's configurations against the peer, run by run |
//! | `contention.rs` | one contention run and what its log shows |
//! | `scenarios.rs` | lock+unlock pairs, plain redis-rs baselines, re-entry, macro, the lock-order checker (11), costs |
//! | `children.rs` | the scenarios in another process (5: wake-up, 6: many leases, 9: hand-offs) |
//! | `batches.rs` | group commit's mean batch and longest runs at 4 to 256 tasks (`batches [SECONDS]`) |
//! | `churn.rs` | a churn of fresh names, for memory (`churn URL SECONDS [TASKS]`) |
//! | `kind.rs` | a lock kind, and the request for one lock of it |
//! | `kinds.rs` | the lock kinds: 8 (uncontended), 9 (hand-off), 10 (readers) |
//! | `peer.rs`, `contender.rs` | rslock and distlock as clients the scenarios drive |
//! | `reference.rs` | `redis-benchmark` runs |
//! | `steps.rs` | the per-step cost table: the scripts' variants with one step left out (`--steps`) |
//! | `server.rs` | what the server is asked, and every dependency on the lock layout |
//! | `report.rs` | the Markdown report, one function per section |
//! | `runtime.rs`, `settings.rs`, `stats.rs`, `cpu.rs`, `error.rs` | small shared pieces |
//!
//! The binary also runs itself as a child for the scenarios that need another
//! process (`child-waiter`, `child-leases`).

mod batches;
mod children;
mod churn;
mod contender;
mod contention;
mod contention_matrix;
mod cpu;
mod error;
mod kind;
mod kinds;
#[cfg(feature = "rslock")]
mod peer;
mod reference;
mod report;
mod runtime;
mod scenarios;
mod server;
mod settings;
mod stats;
mod steps;
mod throughput;

use std::process::ExitCode;
use std::time::Duration;

use distlock::{LockClient, LockOrderCheck};
use distlock_testkit::{RedisCluster, RedisServer};

use crate::contender::connect_distlock;
use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::reference::{Load, Reference};
use crate::report::Results;
use crate::runtime::Flavor;
use crate::scenarios::Micro;
use crate::server::{KeyShape, Protocol};
use crate::settings::Settings;
use crate::stats::median;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let current = Flavor::CurrentThread;
    let result = match args.first().map(String::as_str) {
        Some("child-waiter") => match args.get(1) {
            Some(url) => runtime::block_on(current, children::child_waiter(url)),
            None => Err("child-waiter URL".into()),
        },
        Some("child-leases") => children::child_lease_settings(&args).and_then(|settings| {
            let url = args.get(1).ok_or("child-leases URL ...")?;
            runtime::block_on(current, children::child_leases(url, settings))
        }),
        Some("one-task") => profile_pairs(&args, 1),
        Some("many-tasks") => profile_pairs(&args, 64),
        Some("raw-pairs") => raw_pairs(&args),
        Some("churn") => churn::churn(&args),
        Some("batches") => batches::batches(&args),
        Some("contention") => contention_alone(&args),
        Some("kinds") => kinds_alone(&args),
        _ if args.iter().any(|a| a == "--steps") => steps_alone(&args),
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

/// URL and count arguments of the profiling modes.
fn url_and_count(args: &[String], usage: &str) -> Result<(String, usize), BoxError> {
    let url = args.get(1).ok_or(usage)?.clone();
    let count = args.get(2).ok_or(usage)?;
    let count = count
        .parse()
        .map_err(|err| format!("{usage}: {count:?}: {err}"))?;
    Ok((url, count))
}

/// For profilers: scenario 1 (`one-task URL PAIRS`) or 2 (`many-tasks URL
/// PAIRS_PER_TASK`, 64 tasks) alone against a running server, on a current-thread
/// runtime (`DISTLOCK_BENCH_RUNTIME=multi-thread` for the other), with distlock, or
/// with the peer when `DISTLOCK_BENCH_PEER=rslock` (feature `rslock`).
fn profile_pairs(args: &[String], tasks: usize) -> Result<(), BoxError> {
    let usage = if tasks == 1 {
        "one-task URL PAIRS"
    } else {
        "many-tasks URL PAIRS_PER_TASK"
    };
    let (url, pairs) = url_and_count(args, usage)?;
    let flavor = match std::env::var("DISTLOCK_BENCH_RUNTIME").as_deref() {
        Ok("multi-thread") => Flavor::MultiThread,
        _ => Flavor::CurrentThread,
    };
    let peer = std::env::var("DISTLOCK_BENCH_PEER").is_ok_and(|peer| peer == "rslock");
    runtime::block_on(flavor, async {
        if !peer {
            let client = connect_distlock(&url).await?;
            return profile_with(&client, "distlock", tasks, pairs, flavor).await;
        }
        #[cfg(feature = "rslock")]
        return profile_with(&peer::manager(&url, None), "rslock", tasks, pairs, flavor).await;
        #[cfg(not(feature = "rslock"))]
        Err("DISTLOCK_BENCH_PEER=rslock needs the feature `rslock`".into())
    })
}

/// The pairs of [`profile_pairs`] with `contender` (called `who`), and what they
/// cost this process.
async fn profile_with<C>(
    contender: &C,
    who: &str,
    tasks: usize,
    pairs: usize,
    flavor: Flavor,
) -> Result<(), BoxError>
where
    C: contender::Contender,
    BoxError: From<C::Error>,
{
    let cpu = cpu_time(libc::RUSAGE_SELF);
    let switched = cpu::switches();
    let polled = runtime_counts();
    #[cfg(tokio_unstable)]
    runtime::polls().clear();
    let start = std::time::Instant::now();
    let limit = Duration::from_secs(120);
    let done = scenarios::pairs(contender, "profile", tasks, pairs, limit).await?;
    let polls = runtime_counts().map(|now| {
        let before = polled.unwrap_or_default();
        let per = |a: u64, b: u64| (a - b) as f64 / done.max(1) as f64;
        format!(
            ", {:.2} task polls, {:.2} tasks spawned and {:.2} parks per pair",
            per(now.0, before.0),
            per(now.1, before.1),
            per(now.2, before.2)
        )
    });
    let rate = done as f64 / start.elapsed().as_secs_f64();
    let cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
    let (voluntary, involuntary) = cpu::switches();
    let per = |n: u64| n as f64 / done.max(1) as f64;
    #[cfg(tokio_unstable)]
    for (at, n) in runtime::polls().iter() {
        println!(
            "  polls of the task spawned at {at}: {:.2} per pair",
            per(*n)
        );
    }
    println!(
        "{who}: {rate:.0} pairs/s, {:.1} µs CPU per pair, {:.2} voluntary and {:.2} \
         involuntary context switches per pair{} ({flavor})",
        per(cpu.as_micros() as u64),
        per(voluntary - switched.0),
        per(involuntary - switched.1),
        polls.unwrap_or_default(),
    );
    Ok(())
}

/// The runtime's task polls, tasks spawned and parks so far, summed over its
/// workers: only in a build with `RUSTFLAGS="--cfg tokio_unstable"` (tokio's
/// unstable metrics), else `None`.
fn runtime_counts() -> Option<(u64, u64, u64)> {
    #[cfg(tokio_unstable)]
    {
        let metrics = tokio::runtime::Handle::current().metrics();
        let workers = 0..metrics.num_workers();
        let polls = workers.clone().map(|w| metrics.worker_poll_count(w)).sum();
        let parks = workers.map(|w| metrics.worker_park_count(w)).sum();
        Some((polls, metrics.spawned_tasks_count(), parks))
    }
    #[cfg(not(tokio_unstable))]
    None
}

/// Scenario 1's requests through plain redis-rs (`raw-pairs URL PAIRS`), to split the
/// client's cost.
fn raw_pairs(args: &[String]) -> Result<(), BoxError> {
    let (url, pairs) = url_and_count(args, "raw-pairs URL PAIRS")?;
    runtime::block_on(Flavor::CurrentThread, async {
        let tag = format!("main:{}", std::process::id());
        let (rate, cpu) = scenarios::raw_pairs(&url, &tag, pairs).await?;
        println!(
            "{rate:.0} pairs/s, {:.1} µs CPU per pair",
            cpu.as_secs_f64() * 1e6
        );
        Ok(())
    })
}

/// Scenario 4 alone (`contention [SECONDS] [TASKS] [THINK_MS]`), one shared distlock
/// client, on a server of its own, to iterate on the hand-off.
fn contention_alone(args: &[String]) -> Result<(), BoxError> {
    let number = |i: usize, default: u64| -> Result<u64, BoxError> {
        args.get(i).map_or(Ok(default), |s| {
            s.parse()
                .map_err(|err| format!("contention [SECONDS] [TASKS] [THINK_MS]: {err}").into())
        })
    };
    let mut settings = Settings::full().contention.base;
    settings.duration = Duration::from_secs(number(1, 5)?);
    settings.tasks = number(2, 8)? as usize;
    settings.think = Duration::from_millis(number(3, 1)?);
    let server = RedisServer::start()?;
    let c = runtime::block_on(Flavor::CurrentThread, async {
        let client = connect_distlock(&server.url()).await?;
        contention::contend(&[client], &server, "alone", settings).await
    })?;
    println!(
        "{:.0} acq/s, hand-off p50 {:?} p99 {:?}, same task {:.1} %, overtaking {:.1} %, \
         wait p99 {:?} max {:?}, {:.3} requests ({:.3} with the warm-up) and {:.3} \
         acquire calls per acquisition, {} overlaps; critical section {:?} on average, \
         starvation bound {:?}",
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
        c.starvation_bound(settings.tasks)
    );
    Ok(())
}

/// Phases 8 to 10 alone (`kinds [--quick]`), on a server of their own, to iterate
/// on the lock kinds: prints their rows of the report.
fn kinds_alone(args: &[String]) -> Result<(), BoxError> {
    let mut settings = Settings::full();
    if args.iter().any(|a| a == "--quick") {
        settings = Settings::quick();
    }
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "noeviction"])
        .start()?;
    let results = report::Results {
        kinds: kinds::run(&server, &settings.kinds, &note)?,
        ..report::Results::default()
    };
    println!("{}", report::kinds_markdown(&settings, &results));
    Ok(())
}

/// The per-step cost table alone (see [`STEPS_USAGE`]; as `cargo xtask bench
/// --steps` runs it), on a server of its own: prints it, and with `--write` puts it
/// into FILE between its own markers. `--library FILE` writes the function library
/// as this build ships it into FILE and runs nothing: at the commit before a change
/// to the scripts, that file is what `--before FILE` compares the change with
/// (`--before-who`: its client sent what it says of a holder with a first
/// acquisition); `--only WORDS` runs only the steps whose name holds one of the
/// comma-separated words.
fn steps_alone(args: &[String]) -> Result<(), BoxError> {
    let mut settings = steps::StepSettings::full();
    let mut choice = steps::Choice::default();
    let (mut write, mut before, mut before_who) = (None, None, false);
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--steps" => {}
            "--quick" => settings = steps::StepSettings::quick(),
            "--blocks" => {
                let n = iter.next().ok_or("--blocks N")?;
                settings.blocks = n.parse().map_err(|err| format!("--blocks {n:?}: {err}"))?;
            }
            "--write" => write = Some(iter.next().ok_or("--write FILE")?.clone()),
            "--library" => {
                let path = iter.next().ok_or("--library FILE")?;
                std::fs::write(path, distlock::layout::function_library().text)?;
                eprintln!("distlock-bench: wrote the function library into {path}");
                return Ok(());
            }
            "--before" => before = Some(iter.next().ok_or("--before FILE")?.clone()),
            "--before-who" => before_who = true,
            "--only" => {
                let words = iter.next().ok_or("--only WORDS")?;
                choice.only = words.split(',').map(str::to_owned).collect();
            }
            other => return Err(format!("unknown argument {other:?}; {STEPS_USAGE}").into()),
        }
    }
    if let Some(path) = before {
        choice.before = Some(steps::Before {
            text: std::fs::read_to_string(&path).map_err(|err| format!("{path}: {err}"))?,
            label: path,
            who_at_acquisition: before_who,
        });
    }
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "noeviction"])
        .start()?;
    let table = steps::run(&server, settings, &choice, &note)?;
    let markdown = steps::markdown(&table);
    println!("{markdown}");
    if let Some(path) = write {
        report::write_between(&path, (steps::STEPS_START, steps::STEPS_END), &markdown)?;
        eprintln!("distlock-bench: wrote the per-step table into {path}");
    }
    Ok(())
}

/// The usage line of the per-step table.
const STEPS_USAGE: &str = "distlock-bench --steps [--quick] [--blocks N] [--write FILE] \
     [--only WORDS] [--before FILE [--before-who]] | --steps --library FILE";

/// The usage line of the harness.
const USAGE: &str =
    "distlock-bench [--runs N] [--write FILE] [--quick] [--skip-cluster] [--cluster-only]";

fn harness(args: &[String]) -> Result<(), BoxError> {
    let mut settings = Settings::full();
    let mut runs = None;
    let mut write = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--quick" => settings = Settings::quick(),
            "--runs" => {
                let n = iter.next().ok_or("--runs N")?;
                runs = Some(n.parse().map_err(|err| format!("--runs {n:?}: {err}"))?);
            }
            "--write" => write = Some(iter.next().ok_or("--write FILE")?.clone()),
            "--skip-cluster" => settings.cluster = false,
            "--cluster-only" => settings.cluster_only = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument {other:?}; {USAGE}").into()),
        }
    }
    if let Some(runs) = runs {
        settings = settings.with_runs(runs);
    }
    let load_before = report::load_average();
    let started = std::time::Instant::now();
    let mut results = run_all(&settings)?;
    results.load_before = load_before;
    results.load_after = report::load_average();
    results.elapsed = started.elapsed();
    let markdown = report::markdown(&settings, &results);
    println!("{markdown}");
    if let Some(path) = write {
        report::write_into(&path, &markdown)?;
        let summary = report::summary::markdown(&settings, &results);
        let markers = (report::summary::SUMMARY_START, report::summary::SUMMARY_END);
        report::write_between(&path, markers, &summary)?;
        let folder = std::path::Path::new(&path)
            .parent()
            .unwrap_or(std::path::Path::new(""));
        let chart = folder.join(report::summary::CHART_PATH);
        std::fs::write(&chart, report::chart_svg(&results.throughput)?)?;
        eprintln!(
            "distlock-bench: wrote the results into {path} and the chart into {}",
            chart.display()
        );
    }
    Ok(())
}

fn note(what: &str) {
    eprintln!("distlock-bench: {what}");
}

/// Every phase, each on a fresh runtime (the throughput and contention phases make
/// one per measurement).
fn run_all(settings: &Settings) -> Result<Results, BoxError> {
    if settings.cluster_only {
        return Ok(Results {
            cluster: Some(cluster_scenario(settings)?),
            ..Results::default()
        });
    }
    let server = RedisServer::builder()
        .args(["--maxmemory-policy", "noeviction"])
        .start()?;
    note(&format!("started redis-server at {}", server.url()));
    let mut results = Results {
        throughput: throughput::run(&server, &settings.throughput, &note)?,
        contention: contention_matrix::run(&server, &settings.contention, &note)?,
        ..Results::default()
    };
    runtime::block_on(
        Flavor::CurrentThread,
        one_client_scenarios(&server, settings, &mut results),
    )?;
    server::flush(&server)?;
    results.kinds = kinds::run(&server, &settings.kinds, &note)?;
    note("6: many leases (a child process)");
    server::flush(&server)?;
    for _ in 0..settings.runs {
        results
            .leases
            .push(children::many_leases(&server, settings.leases)?);
    }
    drop(server);
    if settings.cluster {
        note("2 on a Redis Cluster (3 masters, 1 replica each)");
        match cluster_scenario(settings) {
            Ok(cluster) => results.cluster = Some(cluster),
            Err(err) => {
                note(&format!("the cluster scenario failed: {err}"));
                results.cluster_error = Some(err.to_string());
            }
        }
    }
    Ok(results)
}

/// The scenarios with one distlock client and no peer: client-side costs (micro),
/// re-entry (3), wake-up in another process (5) and the macro (7).
async fn one_client_scenarios(
    server: &RedisServer,
    settings: &Settings,
    results: &mut Results,
) -> Result<(), BoxError> {
    let client = connect_distlock(&server.url()).await?;
    contender::warm(&client, "warm", 100).await?;
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
    note("3: re-entry");
    for run in 0..settings.runs {
        let tag = run.to_string();
        let reentry = scenarios::reentry(&client, server, &tag, settings.reentry_rounds).await?;
        results.reentry.push(reentry);
    }
    note("5: wake-up in another process");
    let samples = settings.contention.round_trip_samples;
    for run in 0..settings.runs {
        let tag = format!("5:{run}");
        let idle = Duration::from_millis(1);
        let rtt = scenarios::raw_round_trips(&server.url(), &tag, samples, idle).await?;
        results.wakeup_round_trips.push(rtt);
        let rounds = settings.wakeup_rounds;
        results
            .wakeup
            .push(children::wakeup(&client, server, &run.to_string(), rounds).await?);
    }
    note("7: the macro against the guard API");
    for run in 0..settings.runs {
        let first_id = (run as u64 + 1) << 32;
        let (rounds, calls) = (settings.macro_rounds, settings.macro_calls);
        let ratio = scenarios::macro_overhead(&client, first_id, rounds, calls).await?;
        results.macro_ratio.push(ratio);
    }
    note("11: the lock-order checker against none");
    let unchecked = LockClient::builder()
        .url(server.url())
        .lock_order(LockOrderCheck::Off)
        .connect()
        .await?;
    contender::warm(&unchecked, "warm-off", 100).await?;
    for run in 0..settings.runs {
        let first_id = (run as u64 + 1) << 40;
        let (rounds, calls) = (settings.macro_rounds, settings.macro_calls);
        let ratio =
            scenarios::order_check_overhead(&client, &unchecked, first_id, rounds, calls).await?;
        results.order_check_ratio.push(ratio);
    }
    Ok(())
}

/// A hash tag whose slot the cluster's first master owns (as it says itself): every
/// reference key lands there.
fn first_master_tag(master: &RedisServer) -> Result<String, BoxError> {
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
    (0..100_000)
        .map(|i| format!("m{i}"))
        .find(|tag| {
            let slot = crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384;
            ranges.iter().any(|&(a, b)| a <= slot && slot <= b)
        })
        .ok_or_else(|| "no hash tag on the first master".into())
}

/// Scenario 2 (the first task count) on a local cluster, against the ceiling of one of
/// its masters with distlock's scripts.
fn cluster_scenario(settings: &Settings) -> Result<report::ClusterResults, BoxError> {
    let cluster = RedisCluster::start(3, 1)?;
    let master = &cluster.nodes()[0];
    let shape = KeyShape::Slot(first_master_tag(master)?);
    let t = &settings.throughput;
    let tasks = t.task_counts.first().copied().unwrap_or(64);
    let pairs_per_task = (t.many_pairs / tasks.max(1)).max(1);
    runtime::block_on(Flavor::CurrentThread, async {
        let client = LockClient::builder()
            .cluster(cluster.urls())
            .connect()
            .await?;
        contender::warm(&client, "warm", 100).await?;
        let mut results = report::ClusterResults {
            tasks,
            ..Default::default()
        };
        let mut references = Vec::new();
        for run in 0..settings.runs {
            let tag = format!("c{run}");
            let (protocol, load) = (Protocol::Distlock, Load::Pipelined);
            let rates = reference::measure(master, &shape, protocol, load, t.reference, &tag)?;
            let start = std::time::Instant::now();
            let done = scenarios::pairs(&client, &tag, tasks, pairs_per_task, t.limit).await?;
            let rate = done as f64 / start.elapsed().as_secs_f64();
            results.many_tasks.push(rate);
            results.many_tasks_ratio.push(rate / rates.pairs());
            references.push(Reference {
                pipelined: rates,
                ..Reference::default()
            });
        }
        results.reference = Reference::combine(&references);
        Ok(results)
    })
}
