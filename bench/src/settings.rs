//! Every setting of a run: the full benchmark and the quick check of the harness.

use std::time::Duration;

use crate::children::LeaseSettings;
use crate::scenarios::ContentionSettings;
use crate::server::ReferenceSettings;

/// Every setting of a run; printed into the report.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) runs: usize,
    /// Runs of the reference and scenarios 1 and 2, interleaved: the throughput
    /// scenarios are the most sensitive to the load of a shared machine.
    pub(crate) interleaved_runs: usize,
    pub(crate) reference: ReferenceSettings,
    pub(crate) one_task_pairs: usize,
    pub(crate) tasks: usize,
    pub(crate) pairs_per_task: usize,
    pub(crate) reentry_rounds: usize,
    pub(crate) contention: ContentionSettings,
    pub(crate) wakeup_rounds: usize,
    pub(crate) leases: LeaseSettings,
    pub(crate) macro_rounds: usize,
    pub(crate) macro_calls: u64,
    pub(crate) cluster: bool,
    /// Only scenario 2 on the cluster (to check the harness).
    pub(crate) cluster_only: bool,
    pub(crate) limit: Duration,
}

impl Settings {
    pub(crate) fn full() -> Self {
        Settings {
            runs: 3,
            interleaved_runs: 5,
            reference: ReferenceSettings {
                runs: 3,
                c1_requests: 20_000,
                ceiling_requests: 100_000,
                lease_ms: 30_000,
                loads: [true, true],
            },
            one_task_pairs: 10_000,
            tasks: 64,
            pairs_per_task: 1_000,
            reentry_rounds: 100,
            contention: ContentionSettings {
                tasks: 8,
                critical: Duration::from_millis(1),
                think: Duration::from_millis(1),
                duration: Duration::from_secs(4),
                warmup: Duration::from_millis(300),
            },
            wakeup_rounds: 200,
            leases: LeaseSettings {
                locks: 100_000,
                hold: Duration::from_secs(30),
                lease: Duration::from_secs(10),
            },
            macro_rounds: 30,
            macro_calls: 200,
            cluster: true,
            cluster_only: false,
            limit: Duration::from_secs(30),
        }
    }

    /// A fast pass to check the harness itself; its figures are not the benchmark.
    pub(crate) fn quick() -> Self {
        let mut settings = Self::full();
        settings.reference.c1_requests = 5_000;
        settings.reference.ceiling_requests = 50_000;
        settings.one_task_pairs = 2_000;
        settings.pairs_per_task = 200;
        settings.reentry_rounds = 20;
        settings.contention.duration = Duration::from_secs(1);
        settings.wakeup_rounds = 30;
        settings.leases = LeaseSettings {
            locks: 10_000,
            hold: Duration::from_secs(5),
            lease: Duration::from_secs(3),
        };
        settings.macro_rounds = 6;
        settings
    }
}
