//! The lock kinds beside the plain lock: read and write holds of a read-write lock,
//! a semaphore's permits, the fair lock and `lock_all`. Three phases, each against a
//! reference measured on the same server in the same run:
//!
//! - 8: uncontended acquire+release pairs of each kind on fresh names (one task, and
//!   many tasks each on names of its own), each against `redis-benchmark` running
//!   that kind's own scripts, the plain lock measured the same way in the same runs;
//! - 9: hand-off of the plain, write and fair locks to a waiter in another process
//!   (see `children.rs`), interleaved round by round;
//! - 10: readers of one name (split over two clients) against the same tasks on the
//!   plain lock of one name.

use std::future::Future;
use std::time::Duration;

use distlock::{LockAllRequest, LockClient, LockError, LockGuard, LockRequest, MultiLockGuard};
use distlock_testkit::RedisServer;
use tokio::time::Instant;

use crate::children;
use crate::contender::{connect_distlock, warm, Contender};
use crate::cpu::cpu_time;
use crate::error::BoxError;
use crate::kind::{request, Kind};
use crate::reference::{self, Load, Reference, ReferenceSettings};
use crate::runtime::{self, Flavor};
use crate::scenarios::{self, RoundTrips};
use crate::server::{
    command_stats, distlock_acquire_attempts, hash_fields, script_runs_between, KeyShape,
    ServerUsage, Workload, DISTLOCK_SCRIPT_COMMANDS,
};

/// A distlock client asking for one kind of lock: the scenarios' [`Contender`].
#[derive(Clone)]
pub(crate) struct KindClient {
    pub(crate) client: LockClient,
    pub(crate) kind: Kind,
}

/// What a [`KindClient`] asks for: one lock, or a set.
enum Pending {
    One(LockRequest),
    Set(LockAllRequest),
}

/// What a [`KindClient`] holds: one guard, or a set's.
pub(crate) enum KindHeld {
    One(LockGuard),
    Set(MultiLockGuard),
}

impl Contender for KindClient {
    type Held = KindHeld;
    type Error = LockError;

    const SCRIPT_COMMANDS: &'static [&'static str] = DISTLOCK_SCRIPT_COMMANDS;

    fn acquire(
        &self,
        name: &str,
        _stop: Instant,
    ) -> impl Future<Output = Result<KindHeld, LockError>> + Send {
        let wait = Duration::from_secs(10);
        let pending = match request(&self.client, self.kind, name) {
            Some(one) => Pending::One(one.wait(wait)),
            None => Pending::Set(self.client.lock_all(self.kind.names(name)).wait(wait)),
        };
        async move {
            match pending {
                Pending::One(one) => one.await.map(KindHeld::One),
                Pending::Set(set) => set.await.map(KindHeld::Set),
            }
        }
    }

    async fn release(&self, held: KindHeld) -> Result<(), LockError> {
        match held {
            KindHeld::One(guard) => guard.unlock().await,
            KindHeld::Set(guard) => guard.unlock().await,
        }
    }

    fn acquire_calls(
        before: &std::collections::HashMap<String, u64>,
        after: &std::collections::HashMap<String, u64>,
        acquisitions: u64,
    ) -> u64 {
        distlock_acquire_attempts(before, after, acquisitions)
    }
}

/// Settings of the three phases.
#[derive(Debug, Clone)]
pub(crate) struct KindSettings {
    pub(crate) runs: usize,
    /// The kinds of phase 8, the plain lock first (the baseline).
    pub(crate) kinds: Vec<Kind>,
    /// The references of phase 8 (shorter than the plain lock's of scenarios 1 and 2).
    pub(crate) reference: ReferenceSettings,
    /// Pairs of the one-task scenario.
    pub(crate) one_task_pairs: usize,
    /// Tasks of the many-task scenario, each on names of its own.
    pub(crate) tasks: usize,
    /// Pairs of the many-task scenario in all.
    pub(crate) many_pairs: usize,
    /// Time limit of one scenario.
    pub(crate) limit: Duration,
    /// The kinds of phase 9, the plain lock first.
    pub(crate) handoff_kinds: Vec<Kind>,
    /// Hand-offs of each kind per run.
    pub(crate) handoff_rounds: usize,
    /// Samples of the plain redis-rs round trip measured before each run of phase 9.
    pub(crate) round_trip_samples: usize,
    /// The reader task counts of phase 10.
    pub(crate) reader_counts: Vec<usize>,
    /// The clients the readers are split over.
    pub(crate) reader_clients: usize,
    /// How long each reader run lasts.
    pub(crate) reader_duration: Duration,
}

/// One measurement of uncontended pairs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KindSample {
    pub(crate) pairs: usize,
    pub(crate) secs: f64,
    /// The harness process's CPU time over the scenario.
    pub(crate) client_cpu: Duration,
    /// The server's CPU (`INFO cpu`) over the scenario, µs.
    pub(crate) server_cpu_usec: f64,
    /// Script runs (`EVALSHA`) over the scenario: a run of acquire.lua or release.lua
    /// carries one or several acquisitions or releases of one client (several under
    /// load), a run of acquire_all.lua one set.
    pub(crate) script_runs: u64,
}

impl KindSample {
    /// Acquire+release pairs per second.
    pub(crate) fn rate(&self) -> f64 {
        self.pairs as f64 / self.secs.max(1e-9)
    }

    fn per_pair(&self, value: f64) -> f64 {
        value / self.pairs.max(1) as f64
    }

    /// Script runs per pair.
    pub(crate) fn script_runs_per_pair(&self) -> f64 {
        self.per_pair(self.script_runs as f64)
    }

    /// Client CPU per pair, µs.
    pub(crate) fn client_cpu_us(&self) -> f64 {
        self.per_pair(self.client_cpu.as_secs_f64() * 1e6)
    }

    /// Server CPU per pair, µs.
    pub(crate) fn server_cpu_us(&self) -> f64 {
        self.per_pair(self.server_cpu_usec)
    }
}

/// One kind in one run of phase 8: its scripts' reference at both loads, one task
/// (against `-c 1`) and many tasks (against the pipelined ceiling).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KindRun {
    pub(crate) reference: Reference,
    pub(crate) one: KindSample,
    pub(crate) many: KindSample,
}

/// Phase 8 for one kind, run by run.
#[derive(Debug, Clone)]
pub(crate) struct KindResults {
    pub(crate) kind: Kind,
    pub(crate) runs: Vec<KindRun>,
}

/// One run of phase 9: the plain round trip measured right before, and each kind's
/// hand-offs, in the order of [`KindSettings::handoff_kinds`].
#[derive(Debug, Clone, Default)]
pub(crate) struct HandoffRun {
    pub(crate) round_trips: RoundTrips,
    pub(crate) latencies: Vec<(Kind, Vec<Duration>)>,
}

/// One measurement of phase 10.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadersSample {
    pub(crate) pairs: usize,
    pub(crate) secs: f64,
    /// Fields of the lock's hash once the run is over (holders and their records,
    /// places kept: lua/lock.lua); 0 when there is no key.
    pub(crate) fields: u64,
}

impl ReadersSample {
    pub(crate) fn rate(&self) -> f64 {
        self.pairs as f64 / self.secs.max(1e-9)
    }
}

/// One run of phase 10 at one task count: readers, and the plain lock.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReadersRun {
    pub(crate) tasks: usize,
    pub(crate) read: ReadersSample,
    pub(crate) exclusive: ReadersSample,
}

/// Everything the three phases measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct KindsResults {
    pub(crate) uncontended: Vec<KindResults>,
    pub(crate) handoffs: Vec<HandoffRun>,
    pub(crate) readers: Vec<ReadersRun>,
}

impl KindsResults {
    /// Phase 8's runs of `kind`.
    pub(crate) fn of(&self, kind: Kind) -> Option<&KindResults> {
        self.uncontended.iter().find(|k| k.kind == kind)
    }

    /// Phase 10's runs at `tasks` tasks.
    pub(crate) fn readers_at(&self, tasks: usize) -> Vec<ReadersRun> {
        self.readers
            .iter()
            .filter(|r| r.tasks == tasks)
            .copied()
            .collect()
    }

    /// Phase 9's hand-offs of `kind`, run by run.
    pub(crate) fn handoffs_of(&self, kind: Kind) -> Vec<&[Duration]> {
        self.handoffs
            .iter()
            .filter_map(|run| {
                run.latencies
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .map(|(_, l)| l.as_slice())
            })
            .collect()
    }
}

/// Runs the three phases on `server`.
pub(crate) fn run(
    server: &RedisServer,
    settings: &KindSettings,
    note: &dyn Fn(&str),
) -> Result<KindsResults, BoxError> {
    Ok(KindsResults {
        uncontended: uncontended(server, settings, note)?,
        handoffs: handoffs(server, settings, note)?,
        readers: readers_phase(server, settings, note)?,
    })
}

/// Phase 8: per run, every kind in turn (the order alternates run by run, so that
/// a drift favours none).
fn uncontended(
    server: &RedisServer,
    settings: &KindSettings,
    note: &dyn Fn(&str),
) -> Result<Vec<KindResults>, BoxError> {
    let mut results: Vec<KindResults> = settings
        .kinds
        .iter()
        .map(|&kind| KindResults {
            kind,
            runs: Vec::new(),
        })
        .collect();
    for run in 0..settings.runs {
        note(&format!(
            "8, run {}: uncontended pairs of each lock kind against its scripts",
            run + 1
        ));
        let mut kinds = settings.kinds.clone();
        if run % 2 == 1 {
            kinds.reverse();
        }
        for kind in kinds {
            let measured = kind_run(server, settings, run, kind)?;
            if let Some(k) = results.iter_mut().find(|k| k.kind == kind) {
                k.runs.push(measured);
            }
        }
    }
    crate::server::flush(server)?;
    Ok(results)
}

/// Phase 9: per run, a plain redis-rs round trip, then the hand-offs of every kind
/// to one child waiter, kinds interleaved round by round.
fn handoffs(
    server: &RedisServer,
    settings: &KindSettings,
    note: &dyn Fn(&str),
) -> Result<Vec<HandoffRun>, BoxError> {
    note("9: hand-off of the plain, write and fair locks to another process");
    runtime::block_on(Flavor::CurrentThread, async {
        let client = connect_distlock(&server.url()).await?;
        warm(&client, "k9:warm", 20).await?;
        let mut runs = Vec::new();
        for run in 0..settings.runs {
            let tag = format!("9:{run}");
            let idle = Duration::from_millis(1);
            let samples = settings.round_trip_samples;
            let round_trips =
                scenarios::raw_round_trips(&server.url(), &tag, samples, idle).await?;
            let latencies = children::handoffs(
                &client,
                server,
                &tag,
                settings.handoff_rounds,
                &settings.handoff_kinds,
            )
            .await?;
            runs.push(HandoffRun {
                round_trips,
                latencies: settings
                    .handoff_kinds
                    .iter()
                    .copied()
                    .zip(latencies)
                    .collect(),
            });
        }
        Ok(runs)
    })
}

/// Phase 10: per run and task count, the readers and the plain lock in turn (the
/// order alternates run by run), each on a fresh runtime with fresh clients.
fn readers_phase(
    server: &RedisServer,
    settings: &KindSettings,
    note: &dyn Fn(&str),
) -> Result<Vec<ReadersRun>, BoxError> {
    note(&format!(
        "10: {:?} readers of one name against the plain lock",
        settings.reader_counts
    ));
    let mut runs = Vec::new();
    for run in 0..settings.runs {
        for &tasks in &settings.reader_counts {
            let mut measured = ReadersRun {
                tasks,
                ..ReadersRun::default()
            };
            let mut order = [false, true];
            if run % 2 == 1 {
                order.reverse();
            }
            for exclusive in order {
                let name = format!("k10:{run}:{tasks}:{}", u8::from(exclusive));
                let sample = runtime::block_on(
                    Flavor::CurrentThread,
                    readers(&server.url(), &name, tasks, settings, exclusive),
                )?;
                if exclusive {
                    measured.exclusive = sample;
                } else {
                    measured.read = ReadersSample {
                        fields: hash_fields(server, &name)?,
                        ..sample
                    };
                }
            }
            runs.push(measured);
        }
    }
    Ok(runs)
}

/// One kind in one run: the `-c 1` reference, one task, the pipelined reference,
/// many tasks; each reference right before the scenario it is the reference of.
fn kind_run(
    server: &RedisServer,
    settings: &KindSettings,
    run: usize,
    kind: Kind,
) -> Result<KindRun, BoxError> {
    let mut measured = KindRun::default();
    let workload = Workload::Kind(kind);
    for load in [Load::C1, Load::Pipelined] {
        let letter = if load == Load::C1 { "c" } else { "p" };
        let tag = format!("k{run}{}{letter}", kind.code());
        let rates = reference::measure(
            server,
            &KeyShape::Single,
            workload,
            load,
            settings.reference,
            &tag,
        )?;
        let (tasks, pairs_per_task) = match load {
            Load::C1 => (1, settings.one_task_pairs),
            Load::Pipelined => (
                settings.tasks,
                (settings.many_pairs / settings.tasks.max(1)).max(1),
            ),
        };
        let prefix = format!("k8:{}:{run}:{tasks}", kind.code());
        let sample = pairs(server, kind, &prefix, tasks, pairs_per_task, settings.limit)?;
        match load {
            Load::C1 => {
                measured.reference.c1 = rates;
                measured.one = sample;
            }
            Load::Pipelined => {
                measured.reference.pipelined = rates;
                measured.many = sample;
            }
        }
    }
    Ok(measured)
}

/// Uncontended pairs of `kind` on fresh names under `prefix`, on a fresh
/// current-thread runtime with a fresh client (warmed with 100 pairs first).
fn pairs(
    server: &RedisServer,
    kind: Kind,
    prefix: &str,
    tasks: usize,
    pairs_per_task: usize,
    limit: Duration,
) -> Result<KindSample, BoxError> {
    runtime::block_on(Flavor::CurrentThread, async {
        let client = KindClient {
            client: connect_distlock(&server.url()).await?,
            kind,
        };
        warm(&client, prefix, 100).await?;
        let stats = command_stats(server)?;
        let usage = ServerUsage::take(server)?;
        let cpu = cpu_time(libc::RUSAGE_SELF);
        let start = Instant::now();
        let pairs = scenarios::pairs(&client, prefix, tasks, pairs_per_task, limit).await?;
        let secs = start.elapsed().as_secs_f64();
        let client_cpu = cpu_time(libc::RUSAGE_SELF) - cpu;
        let (_, server_cpu_usec) = ServerUsage::take(server)?.since(&usage);
        let after = command_stats(server)?;
        Ok(KindSample {
            pairs,
            secs,
            client_cpu,
            server_cpu_usec,
            script_runs: script_runs_between(&stats, &after),
        })
    })
}

/// Phase 10's measurement: `tasks` tasks split over the clients, each taking and
/// giving back a read hold of `name` (or, `exclusive`, the plain lock of `name`) in
/// a loop until the run's time is up; the time runs until the last task is done.
async fn readers(
    url: &str,
    name: &str,
    tasks: usize,
    settings: &KindSettings,
    exclusive: bool,
) -> Result<ReadersSample, BoxError> {
    let mut clients = Vec::new();
    for i in 0..settings.reader_clients.max(1) {
        let client = connect_distlock(url).await?;
        warm(&client, &format!("{name}:warm{i}"), 20).await?;
        clients.push(client);
    }
    let kind = if exclusive { Kind::Plain } else { Kind::Read };
    let start = Instant::now();
    let stop = start + settings.reader_duration;
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let client = clients[task % clients.len()].clone();
        let name = name.to_owned();
        set.spawn(async move {
            let mut done = 0usize;
            while Instant::now() < stop {
                // The wait outlasts the run: every task that asks gets its turn.
                let request = request(&client, kind, &name).ok_or("no request")?;
                let guard = request.wait(Duration::from_secs(30)).await?;
                guard.unlock().await?;
                done += 1;
            }
            Ok::<usize, BoxError>(done)
        });
    }
    let mut pairs = 0;
    while let Some(joined) = set.join_next().await {
        pairs += joined??;
    }
    Ok(ReadersSample {
        pairs,
        secs: start.elapsed().as_secs_f64(),
        fields: 0,
    })
}
