//! The reference and the throughput scenarios (1: one task, 2: many tasks, each on
//! names of its own), distlock against the peer, taking turns run by run: each
//! ratio is taken within its run, and the report gives the medians of the ratios.

use std::future::Future;
use std::time::Duration;

use distlock_testkit::RedisServer;
use tokio::time::Instant;

use crate::contender::{connect_distlock, in_turn, warm, Contender, Subject};
use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::reference::{self, Load, Reference, ReferenceSettings};
use crate::runtime::{self, Flavor};
use crate::scenarios;
use crate::server::{KeyShape, Protocol, ServerUsage};

/// Settings of the throughput phase.
#[derive(Debug, Clone)]
pub(crate) struct ThroughputSettings {
    /// Interleaved runs: the throughput scenarios are the most sensitive to the load
    /// of a shared machine.
    pub(crate) runs: usize,
    pub(crate) reference: ReferenceSettings,
    /// Pairs of the one-task scenario.
    pub(crate) one_task_pairs: usize,
    /// The task counts of scenario 2.
    pub(crate) task_counts: Vec<usize>,
    /// Pairs of each many-task scenario in all, split evenly among its tasks.
    pub(crate) many_pairs: usize,
    /// The runtimes every scenario runs on, for each client.
    pub(crate) flavors: Vec<Flavor>,
    /// Time limit of one scenario.
    pub(crate) limit: Duration,
}

/// One client's measurement of one scenario.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Sample {
    pub(crate) pairs: usize,
    pub(crate) secs: f64,
    /// The harness process's CPU time over the scenario.
    pub(crate) client_cpu: Duration,
    /// See [`ServerUsage`]: the commands' microseconds, and the server's CPU
    /// microseconds.
    pub(crate) server_command_usec: f64,
    pub(crate) server_cpu_usec: f64,
}

impl Sample {
    /// Lock+unlock pairs per second.
    pub(crate) fn rate(&self) -> f64 {
        self.pairs as f64 / self.secs.max(1e-9)
    }

    fn per_pair(&self, value: f64) -> f64 {
        value / self.pairs.max(1) as f64
    }

    /// Client CPU per pair, µs.
    pub(crate) fn client_cpu_us(&self) -> f64 {
        self.per_pair(self.client_cpu.as_secs_f64() * 1e6)
    }

    /// Commands' time per pair (`INFO commandstats`), µs.
    pub(crate) fn server_command_us(&self) -> f64 {
        self.per_pair(self.server_command_usec)
    }

    /// Server CPU per pair (`INFO cpu`), µs.
    pub(crate) fn server_cpu_us(&self) -> f64 {
        self.per_pair(self.server_cpu_usec)
    }
}

/// One scenario on one runtime: each run's sample of distlock and of the peer
/// (rslock at its defaults; none when the peer is not built).
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    pub(crate) tasks: usize,
    pub(crate) flavor: Flavor,
    pub(crate) distlock: Vec<Sample>,
    pub(crate) peer: Vec<Sample>,
}

impl Cell {
    /// The reference load of this scenario: `-c 1` for one task, else pipelined.
    pub(crate) fn load(&self) -> Load {
        if self.tasks <= 1 {
            Load::C1
        } else {
            Load::Pipelined
        }
    }

    /// Each run's `f(distlock) / f(peer)`.
    pub(crate) fn against_peer(&self, f: impl Fn(&Sample) -> f64) -> Vec<f64> {
        self.distlock
            .iter()
            .zip(&self.peer)
            .map(|(d, p)| f(d) / f(p).max(1e-12))
            .collect()
    }
}

/// One run's references: distlock's scripts, rslock's commands (R) and the bare
/// hash scripts.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RunReference {
    pub(crate) distlock: Reference,
    pub(crate) minimal: Reference,
    pub(crate) bare: Reference,
}

impl RunReference {
    /// The reference of `protocol`.
    pub(crate) fn of(&self, protocol: Protocol) -> &Reference {
        match protocol {
            Protocol::Distlock => &self.distlock,
            Protocol::Minimal => &self.minimal,
            Protocol::BareHash => &self.bare,
        }
    }

    /// The reference of `protocol`, to fill.
    fn of_mut(&mut self, protocol: Protocol) -> &mut Reference {
        match protocol {
            Protocol::Distlock => &mut self.distlock,
            Protocol::Minimal => &mut self.minimal,
            Protocol::BareHash => &mut self.bare,
        }
    }
}

/// Everything the throughput phase measured, run by run.
#[derive(Debug, Clone, Default)]
pub(crate) struct ThroughputResults {
    pub(crate) references: Vec<RunReference>,
    pub(crate) cells: Vec<Cell>,
    /// Scenario 1's requests through plain redis-rs (current-thread): pairs/s and
    /// client CPU per pair, each run.
    pub(crate) raw: Vec<(f64, Duration)>,
    /// Scenario 2g: distlock with group commit (the cells' `distlock`) against
    /// distlock without it (their `peer`, `group_commit(false)`).
    pub(crate) group_commit: Vec<Cell>,
}

/// The task counts of scenario 2g.
pub(crate) const GROUP_COMMIT_TASKS: [usize; 3] = [4, 16, 64];

impl ThroughputResults {
    /// The cell of `tasks` tasks on `flavor`.
    pub(crate) fn cell(&self, tasks: usize, flavor: Flavor) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.tasks == tasks && c.flavor == flavor)
    }

    /// Each run's rate of `f(sample)` over the pair rate of `protocol`'s reference at
    /// the cell's load.
    pub(crate) fn against_reference(
        &self,
        cell: &Cell,
        samples: &[Sample],
        protocol: Protocol,
    ) -> Vec<f64> {
        samples
            .iter()
            .zip(&self.references)
            .map(|(s, r)| s.rate() / r.of(protocol).at(cell.load()).pairs().max(1e-9))
            .collect()
    }

    /// The median reference of `protocol` over the runs.
    pub(crate) fn reference(&self, protocol: Protocol) -> Reference {
        let all: Vec<Reference> = self.references.iter().map(|r| *r.of(protocol)).collect();
        Reference::combine(&all)
    }
}

/// The subjects of the throughput phase: distlock, and rslock at its defaults (its
/// retries never matter on names of their own).
fn subjects() -> Vec<Subject> {
    #[allow(unused_mut)]
    let mut subjects = vec![Subject::Distlock];
    #[cfg(feature = "rslock")]
    subjects.push(Subject::Rslock(None));
    subjects
}

/// Runs the phase: per run, the `-c 1` references, scenario 1 on every runtime (and
/// plain redis-rs), the pipelined references, scenario 2 at every task count on every
/// runtime. Each reference is measured right before the scenarios it is the
/// reference of; the order of the clients and of the protocols alternates.
pub(crate) fn run(
    server: &RedisServer,
    settings: &ThroughputSettings,
    note: &dyn Fn(&str),
) -> Result<ThroughputResults, BoxError> {
    let mut results = ThroughputResults::default();
    for run in 0..settings.runs {
        note(&format!(
            "run {}: references (distlock's scripts, rslock's commands, the bare hash \
             scripts), 1: one task, 2: {:?} tasks, on {:?}",
            run + 1,
            settings.task_counts,
            settings.flavors
        ));
        let mut reference = RunReference::default();
        measure_references(server, settings, run, Load::C1, &mut reference)?;
        for &flavor in &settings.flavors {
            scenario(server, settings, run, 1, flavor, &mut results)?;
        }
        let pairs = settings.one_task_pairs;
        let raw = runtime::block_on(
            Flavor::CurrentThread,
            scenarios::raw_pairs(&server.url(), &run.to_string(), pairs),
        )?;
        results.raw.push(raw);
        measure_references(server, settings, run, Load::Pipelined, &mut reference)?;
        for &tasks in &settings.task_counts {
            for &flavor in &settings.flavors {
                scenario(server, settings, run, tasks, flavor, &mut results)?;
            }
        }
        for tasks in GROUP_COMMIT_TASKS {
            for &flavor in &settings.flavors {
                group_commit(server, settings, run, tasks, flavor, &mut results)?;
            }
        }
        results.references.push(reference);
    }
    Ok(results)
}

/// Every protocol's reference at `load`, in the run's order.
fn measure_references(
    server: &RedisServer,
    settings: &ThroughputSettings,
    run: usize,
    load: Load,
    into: &mut RunReference,
) -> Result<(), BoxError> {
    let mut protocols = Protocol::ALL;
    if run % 2 == 1 {
        protocols.reverse();
    }
    for protocol in protocols {
        let tag = format!("{run}{}", if load == Load::C1 { "c" } else { "p" });
        let rates = reference::measure(
            server,
            &KeyShape::Single,
            protocol,
            load,
            settings.reference,
            &tag,
        )?;
        let target = into.of_mut(protocol);
        match load {
            Load::C1 => target.c1 = rates,
            Load::Pipelined => target.pipelined = rates,
        }
    }
    Ok(())
}

/// One scenario in one run: every subject in the run's order, into its cell.
fn scenario(
    server: &RedisServer,
    settings: &ThroughputSettings,
    run: usize,
    tasks: usize,
    flavor: Flavor,
    results: &mut ThroughputResults,
) -> Result<(), BoxError> {
    let pairs_per_task = if tasks <= 1 {
        settings.one_task_pairs
    } else {
        (settings.many_pairs / tasks).max(1)
    };
    let work = Work {
        prefix: format!("t{tasks}:{flavor}:{run}"),
        tasks,
        pairs_per_task,
        limit: settings.limit,
    };
    for subject in in_turn(&subjects(), run) {
        let sample = sample(server, subject, flavor, &work)?;
        let cell = cell_in(&mut results.cells, tasks, flavor);
        match subject {
            Subject::Distlock => cell.distlock.push(sample),
            #[cfg(feature = "rslock")]
            Subject::Rslock(_) => cell.peer.push(sample),
        }
    }
    Ok(())
}

/// Scenario 2g in one run: distlock with and without group commit, in the run's
/// order, into its cell.
fn group_commit(
    server: &RedisServer,
    settings: &ThroughputSettings,
    run: usize,
    tasks: usize,
    flavor: Flavor,
    results: &mut ThroughputResults,
) -> Result<(), BoxError> {
    let url = server.url();
    let mut samples = [Sample::default(); 2];
    let order: [bool; 2] = if run.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    };
    for on in order {
        let work = Work {
            prefix: format!("g{tasks}:{flavor}:{run}:{on}"),
            tasks,
            pairs_per_task: (settings.many_pairs / tasks).max(1),
            limit: settings.limit,
        };
        let url = url.clone();
        samples[usize::from(!on)] = measure(server, flavor, &work, || async move {
            Ok(distlock::LockClient::builder()
                .url(url)
                .group_commit(on)
                .connect()
                .await?)
        })?;
    }
    let cell = cell_in(&mut results.group_commit, tasks, flavor);
    cell.distlock.push(samples[0]);
    cell.peer.push(samples[1]);
    Ok(())
}

/// The cell of `tasks` tasks on `flavor` in `cells`, added empty when there is none.
fn cell_in(cells: &mut Vec<Cell>, tasks: usize, flavor: Flavor) -> &mut Cell {
    let index = match cells
        .iter()
        .position(|c| c.tasks == tasks && c.flavor == flavor)
    {
        Some(index) => index,
        None => {
            cells.push(Cell {
                tasks,
                flavor,
                distlock: Vec::new(),
                peer: Vec::new(),
            });
            cells.len() - 1
        }
    };
    &mut cells[index]
}

/// What one measurement runs.
#[derive(Debug, Clone)]
struct Work {
    prefix: String,
    tasks: usize,
    pairs_per_task: usize,
    limit: Duration,
}

/// `subject`'s sample of `work` on a fresh runtime of `flavor`.
fn sample(
    server: &RedisServer,
    subject: Subject,
    flavor: Flavor,
    work: &Work,
) -> Result<Sample, BoxError> {
    let url = server.url();
    match subject {
        Subject::Distlock => measure(server, flavor, work, || connect_distlock(&url)),
        #[cfg(feature = "rslock")]
        Subject::Rslock(retry) => measure(server, flavor, work, || async {
            Ok(crate::peer::manager(&url, retry))
        }),
    }
}

/// Connects a client inside a fresh runtime of `flavor`, warms it, and measures
/// `work`: its rate, the harness process's CPU time, and the server's usage around it.
fn measure<C, F, Fut>(
    server: &RedisServer,
    flavor: Flavor,
    work: &Work,
    connect: F,
) -> Result<Sample, BoxError>
where
    C: Contender,
    BoxError: From<C::Error>,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<C, BoxError>>,
{
    runtime::block_on(flavor, async {
        let contender = connect().await?;
        warm(&contender, &work.prefix, 100).await?;
        let before = ServerUsage::take(server)?;
        let cpu = cpu_time(libc::RUSAGE_SELF);
        let start = Instant::now();
        let pairs = scenarios::pairs(
            &contender,
            &work.prefix,
            work.tasks,
            work.pairs_per_task,
            work.limit,
        )
        .await?;
        let secs = start.elapsed().as_secs_f64();
        let client_cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
        let (server_command_usec, server_cpu_usec) = ServerUsage::take(server)?.since(&before);
        Ok(Sample {
            pairs,
            secs,
            client_cpu,
            server_command_usec,
            server_cpu_usec,
        })
    })
}
