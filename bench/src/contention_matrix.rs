//! Scenario 4 across its configurations: task counts, with and without think time,
//! one client shared by the tasks or one client per task; distlock and the peer at
//! each, taking turns run by run, each run on a fresh runtime with fresh clients.

use std::future::Future;
use std::time::Duration;

use distlock_testkit::RedisServer;

use crate::contender::{connect_distlock, in_turn, warm, Contender, Subject};
use crate::contention::{contend, Contention, ContentionSettings};
use crate::error::BoxError;
use crate::runtime::{self, Flavor};
use crate::scenarios::{raw_round_trips, RoundTrips};

/// How the tasks of a run get their clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// One client shared by every task.
    Shared,
    /// A client (a connection, a subscriber) of its own for each task, as separate
    /// processes would have.
    PerTask,
}

/// Settings of the contention phase.
#[derive(Debug, Clone)]
pub(crate) struct ContentionMatrix {
    pub(crate) runs: usize,
    pub(crate) task_counts: Vec<usize>,
    pub(crate) thinks: Vec<Duration>,
    pub(crate) sharings: Vec<Sharing>,
    /// The critical section, the duration and the warm-up of every run (its tasks
    /// and think time come from the configuration).
    pub(crate) base: ContentionSettings,
    /// The runtime of every run.
    pub(crate) flavor: Flavor,
    /// Samples of each plain redis-rs round-trip measurement (one per run).
    pub(crate) round_trip_samples: usize,
}

/// One configuration of scenario 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Config {
    pub(crate) tasks: usize,
    pub(crate) think: Duration,
    pub(crate) sharing: Sharing,
}

/// One configuration's runs, per subject.
#[derive(Debug, Clone)]
pub(crate) struct ConfigResults {
    pub(crate) config: Config,
    pub(crate) runs: Vec<(Subject, Vec<Contention>)>,
}

impl ConfigResults {
    /// `subject`'s runs (empty when it was not measured).
    pub(crate) fn of(&self, subject: Subject) -> &[Contention] {
        self.runs
            .iter()
            .find(|(s, _)| *s == subject)
            .map_or(&[], |(_, runs)| runs.as_slice())
    }
}

/// Everything the contention phase measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContentionResults {
    pub(crate) configs: Vec<ConfigResults>,
    /// A plain redis-rs EVALSHA's round trips, measured once per run.
    pub(crate) round_trips: Vec<RoundTrips>,
}

impl ContentionResults {
    /// The configuration `config`'s results.
    pub(crate) fn get(&self, config: Config) -> Option<&ConfigResults> {
        self.configs.iter().find(|c| c.config == config)
    }
}

/// The subjects of scenario 4: distlock; rslock at its defaults and with a 1 ms retry.
pub(crate) fn subjects() -> Vec<Subject> {
    #[allow(unused_mut)]
    let mut subjects = vec![Subject::Distlock];
    #[cfg(feature = "rslock")]
    subjects.extend([
        Subject::Rslock(None),
        Subject::Rslock(Some(Duration::from_millis(1))),
    ]);
    subjects
}

impl ContentionMatrix {
    /// Every configuration, in the order they run.
    pub(crate) fn configs(&self) -> Vec<Config> {
        let mut configs = Vec::new();
        for &tasks in &self.task_counts {
            for &think in &self.thinks {
                for &sharing in &self.sharings {
                    configs.push(Config {
                        tasks,
                        think,
                        sharing,
                    });
                }
            }
        }
        configs
    }
}

/// Runs the phase: per run, the plain redis-rs round trips, then every configuration
/// with every subject in the run's order.
pub(crate) fn run(
    server: &RedisServer,
    matrix: &ContentionMatrix,
    note: &dyn Fn(&str),
) -> Result<ContentionResults, BoxError> {
    let mut results = ContentionResults {
        configs: matrix
            .configs()
            .into_iter()
            .map(|config| ConfigResults {
                config,
                runs: subjects().into_iter().map(|s| (s, Vec::new())).collect(),
            })
            .collect(),
        round_trips: Vec::new(),
    };
    for run in 0..matrix.runs {
        note(&format!("4: contention, run {}", run + 1));
        let (url, samples) = (server.url(), matrix.round_trip_samples);
        let tag = format!("4:{run}");
        let idle = Duration::from_millis(1);
        let rtt = runtime::block_on(matrix.flavor, raw_round_trips(&url, &tag, samples, idle))?;
        results.round_trips.push(rtt);
        for (index, config) in results.configs.iter_mut().enumerate() {
            for subject in in_turn(&subjects(), run) {
                let name = format!("s4:{index}:{subject:?}:{run}").replace(' ', "");
                let contention = run_config(server, matrix, config.config, subject, &name)?;
                if let Some((_, runs)) = config.runs.iter_mut().find(|(s, _)| *s == subject) {
                    runs.push(contention);
                }
            }
        }
    }
    Ok(results)
}

/// One run of `config` by `subject` on the lock `name`.
fn run_config(
    server: &RedisServer,
    matrix: &ContentionMatrix,
    config: Config,
    subject: Subject,
    name: &str,
) -> Result<Contention, BoxError> {
    let settings = ContentionSettings {
        tasks: config.tasks,
        think: config.think,
        ..matrix.base
    };
    let clients = match config.sharing {
        Sharing::Shared => 1,
        Sharing::PerTask => config.tasks,
    };
    let spec = RunSpec {
        server,
        flavor: matrix.flavor,
        clients,
        name,
        settings,
    };
    let url = server.url();
    match subject {
        Subject::Distlock => contend_fresh(&spec, || connect_distlock(&url)),
        #[cfg(feature = "rslock")]
        Subject::Rslock(retry) => {
            contend_fresh(&spec, || async { Ok(crate::peer::manager(&url, retry)) })
        }
    }
}

/// Where and how one contention run runs.
#[derive(Debug)]
struct RunSpec<'a> {
    server: &'a RedisServer,
    flavor: Flavor,
    /// Clients to connect: the tasks take turns on them.
    clients: usize,
    name: &'a str,
    settings: ContentionSettings,
}

/// Connects `spec.clients` clients inside a fresh runtime, warms each, and runs the
/// contention on `spec.name` with them.
fn contend_fresh<C, F, Fut>(spec: &RunSpec<'_>, connect: F) -> Result<Contention, BoxError>
where
    C: Contender,
    BoxError: From<C::Error>,
    F: Fn() -> Fut,
    Fut: Future<Output = Result<C, BoxError>>,
{
    runtime::block_on(spec.flavor, async {
        let mut contenders = Vec::with_capacity(spec.clients);
        for client in 0..spec.clients {
            let contender = connect().await?;
            warm(&contender, &format!("{}:{client}", spec.name), 3).await?;
            contenders.push(contender);
        }
        contend(&contenders, spec.server, spec.name, spec.settings).await
    })
}
