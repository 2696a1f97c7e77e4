//! Participants of the reliability suite: they take the lock, run their critical
//! sections and record each in a [`History`].

use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard};
use distlock_testkit::{monotonic_ns, History, Section};

use super::Workload;

/// How a participant takes the lock.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Critical sections to run.
    pub sections: usize,
    /// The wait of each acquire.
    pub wait: Duration,
    /// A fixed lease (the believed deadline is its send time plus the lease), or
    /// `None` for a watchdog lease.
    pub lease: Option<Duration>,
}

/// What a participant saw besides its sections.
#[derive(Debug, Default, Clone, Copy)]
pub struct Outcome {
    pub sections: usize,
    pub lost: usize,
    pub refused: usize,
    pub errors: usize,
}

/// Runs `plan.sections` critical sections on lock `name` as owner `label`, recording
/// each in `history` (and through `emit`, e.g. to print it from a child process).
pub async fn participate(
    locks: &LockClient,
    name: &str,
    label: &str,
    plan: Plan,
    workload: &Workload,
    history: &History,
    emit: &(dyn Fn(&Section) + Sync),
) -> Outcome {
    let mut outcome = Outcome::default();
    for n in 0..plan.sections {
        let sent = monotonic_ns();
        let mut request = locks.lock(name).wait(plan.wait);
        if let Some(lease) = plan.lease {
            request = request.lease(lease);
        }
        let guard = match request.await {
            Ok(guard) => guard,
            Err(err) => {
                eprintln!("{label}: acquire failed: {err}");
                outcome.errors += 1;
                continue;
            }
        };
        let acquired = monotonic_ns();
        let (section, lost, refused) =
            body(guard, label, n, sent, acquired, plan.lease, workload).await;
        outcome.sections += 1;
        outcome.lost += usize::from(lost);
        outcome.refused += usize::from(refused);
        emit(&section);
        history.record(section);
    }
    outcome
}

/// A waiter, on a task of its own: takes `name` with `locks`, waiting up to `wait`
/// (panics with `what` if it cannot), gives it back at once and records that
/// section as `waiter` in `history`. The task's output is the monotonic time it
/// acquired.
pub fn wait_then_release(
    locks: LockClient,
    name: &str,
    wait: Duration,
    history: &Arc<History>,
    what: &str,
) -> tokio::task::JoinHandle<u64> {
    let (name, history, what) = (name.to_owned(), history.clone(), what.to_owned());
    tokio::spawn(async move {
        let guard = locks.lock(name.as_str()).wait(wait).await.expect(&what);
        let acquired = monotonic_ns();
        let token = guard.fencing_token();
        let released = monotonic_ns();
        guard.unlock().await.expect("unlock");
        history.record(Section {
            owner: "waiter".into(),
            token,
            acquired_ns: acquired,
            released_ns: released,
            deadline_ns: None,
        });
        acquired
    })
}

/// The critical section itself; returns the section, whether the lock was reported
/// lost at release, and whether the fenced write was refused.
pub async fn body(
    guard: LockGuard,
    label: &str,
    n: usize,
    sent: u64,
    acquired: u64,
    lease: Option<Duration>,
    workload: &Workload,
) -> (Section, bool, bool) {
    let token = guard.fencing_token();
    workload.unfenced_increment().await;
    let refused = match token {
        Some(token) => !workload.fenced_write(token, &format!("{label}#{n}")).await,
        None => false,
    };
    let released = monotonic_ns();
    let lost = match guard.unlock().await {
        Ok(()) => false,
        Err(LockError::Lost { .. }) => true,
        Err(err) => panic!("{label}: unlock failed: {err}"),
    };
    let section = Section {
        owner: label.to_owned(),
        token,
        acquired_ns: acquired,
        released_ns: released,
        deadline_ns: lease.map(|lease| sent + lease.as_nanos() as u64),
    };
    (section, lost, refused)
}
