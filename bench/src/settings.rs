//! Every setting of a run: the full benchmark and the quick check of the harness.

use std::time::Duration;

use crate::children::LeaseSettings;
use crate::contention::ContentionSettings;
use crate::contention_matrix::{ContentionMatrix, Sharing};
use crate::kind::Kind;
use crate::kinds::KindSettings;
use crate::reference::ReferenceSettings;
use crate::runtime::Flavor;
use crate::throughput::ThroughputSettings;

/// Every setting of a run; printed into the report.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// Runs of the scenarios that do not take turns with the peer (3, 5, 6, 7, the
    /// cluster).
    pub(crate) runs: usize,
    /// The reference and scenarios 1 and 2, distlock and the peer taking turns.
    pub(crate) throughput: ThroughputSettings,
    /// Scenario 4 across its configurations, distlock and the peer taking turns.
    pub(crate) contention: ContentionMatrix,
    pub(crate) reentry_rounds: usize,
    pub(crate) wakeup_rounds: usize,
    pub(crate) leases: LeaseSettings,
    pub(crate) macro_rounds: usize,
    pub(crate) macro_calls: u64,
    /// The lock kinds (8: uncontended, 9: hand-off, 10: readers).
    pub(crate) kinds: KindSettings,
    pub(crate) cluster: bool,
    /// Only scenario 2 on the cluster (to check the harness).
    pub(crate) cluster_only: bool,
}

impl Settings {
    /// The benchmark: about 12 minutes on a 2-core machine.
    pub(crate) fn full() -> Self {
        Settings {
            runs: 3,
            throughput: ThroughputSettings {
                runs: 5,
                reference: ReferenceSettings {
                    c1_requests: 20_000,
                    ceiling_requests: 100_000,
                    lease_ms: 30_000,
                },
                one_task_pairs: 10_000,
                task_counts: vec![4, 16, 64, 256],
                many_pairs: 64_000,
                flavors: vec![Flavor::MultiThread, Flavor::CurrentThread],
                limit: Duration::from_secs(30),
            },
            contention: ContentionMatrix {
                runs: 3,
                task_counts: vec![8, 64],
                thinks: vec![Duration::ZERO, Duration::from_millis(1)],
                sharings: vec![Sharing::Shared, Sharing::PerTask],
                base: ContentionSettings {
                    tasks: 8,
                    critical: Duration::from_millis(1),
                    think: Duration::from_millis(1),
                    duration: Duration::from_secs(3),
                    warmup: Duration::from_millis(300),
                },
                flavor: Flavor::CurrentThread,
                round_trip_samples: 300,
            },
            reentry_rounds: 100,
            wakeup_rounds: 200,
            leases: LeaseSettings {
                stages: [10_000, 100_000],
                hold: Duration::from_secs(30),
                lease: Duration::from_secs(10),
                settle: Duration::from_secs(2),
            },
            macro_rounds: 30,
            macro_calls: 200,
            kinds: KindSettings {
                runs: 3,
                kinds: vec![
                    Kind::Plain,
                    Kind::Read,
                    Kind::Write,
                    Kind::Permit(4),
                    Kind::Fair,
                    Kind::All(3),
                ],
                reference: ReferenceSettings {
                    c1_requests: 3_000,
                    ceiling_requests: 20_000,
                    lease_ms: 30_000,
                },
                one_task_pairs: 1_500,
                tasks: 64,
                many_pairs: 12_800,
                limit: Duration::from_secs(30),
                handoff_kinds: vec![Kind::Plain, Kind::Write, Kind::Fair],
                handoff_rounds: 50,
                round_trip_samples: 100,
                reader_counts: vec![8, 64],
                reader_clients: 2,
                reader_duration: Duration::from_secs(1),
            },
            cluster: true,
            cluster_only: false,
        }
    }

    /// A fast pass to check the harness itself (under a minute); its figures are
    /// not the benchmark.
    pub(crate) fn quick() -> Self {
        let mut settings = Self::full();
        settings.runs = 1;
        let throughput = &mut settings.throughput;
        // Two runs, so that both orders of the clients run.
        throughput.runs = 2;
        throughput.reference.c1_requests = 3_000;
        throughput.reference.ceiling_requests = 20_000;
        throughput.one_task_pairs = 1_000;
        throughput.many_pairs = 6_400;
        let contention = &mut settings.contention;
        contention.runs = 1;
        contention.base.duration = Duration::from_millis(500);
        contention.base.warmup = Duration::from_millis(100);
        contention.round_trip_samples = 50;
        settings.reentry_rounds = 20;
        settings.wakeup_rounds = 20;
        settings.leases = LeaseSettings {
            stages: [2_000, 10_000],
            hold: Duration::from_secs(4),
            lease: Duration::from_secs(3),
            settle: Duration::from_secs(1),
        };
        settings.macro_rounds = 4;
        let kinds = &mut settings.kinds;
        kinds.runs = 1;
        kinds.reference.c1_requests = 500;
        kinds.reference.ceiling_requests = 3_000;
        kinds.one_task_pairs = 200;
        kinds.many_pairs = 1_280;
        kinds.handoff_rounds = 5;
        kinds.round_trip_samples = 20;
        kinds.reader_duration = Duration::from_millis(200);
        settings
    }

    /// `runs` runs of everything (at least one; the phases that take turns need two
    /// for both orders to run).
    pub(crate) fn with_runs(mut self, runs: usize) -> Self {
        self.runs = runs.max(1);
        self.throughput.runs = runs.max(1);
        self.contention.runs = runs.max(1);
        self.kinds.runs = runs.max(1);
        self
    }
}
