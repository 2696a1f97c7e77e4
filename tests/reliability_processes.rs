//! Reliability: many processes on one lock, holders that die, freeze or starve.
//!
//! Every critical section is recorded (owner, fencing token, monotonic times) and the
//! history is checked for two owners at once; each section also does an unfenced
//! read-modify-write of a counter and a fenced write.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock::LockError;
use distlock_testkit::{monotonic_ns, History, Section};
use support::{Plan, Workload};

const PROCESSES: usize = 4;
const TASKS: usize = 4;
const SECTIONS_PER_TASK: usize = 125;

/// The roles a child process plays, chosen by `DISTLOCK_ROLE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn child_role() {
    if !support::is_child() {
        return;
    }
    let env = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} is set"));
    let url = env("DISTLOCK_URL");
    let name = env("DISTLOCK_NAME");
    let label = env("DISTLOCK_LABEL");
    match env("DISTLOCK_ROLE").as_str() {
        "contender" => contender(&url, &name, &label).await,
        "holder" => holder(&url, &name, &label).await,
        other => panic!("unknown role {other}"),
    }
}

/// `TASKS` tasks, each running `SECTIONS_PER_TASK` sections; prints every section.
async fn contender(url: &str, name: &str, label: &str) {
    let locks = support::fenced(url).await;
    let workload = Workload::connect(url, name).await;
    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (locks, workload, history) = (locks.clone(), workload.clone(), history.clone());
        let (name, label) = (name.to_owned(), format!("{label}/t{task}"));
        tasks.push(tokio::spawn(async move {
            let plan = Plan {
                sections: SECTIONS_PER_TASK,
                wait: Duration::from_secs(60),
                lease: None,
            };
            let print = |section: &Section| println!("{}", section.to_line());
            support::participate(&locks, &name, &label, plan, &workload, &history, &print).await
        }));
    }
    let mut lost = 0;
    let mut errors = 0;
    let mut per_task = Vec::new();
    for task in tasks {
        let outcome = task.await.expect("task");
        lost += outcome.lost;
        errors += outcome.errors;
        per_task.push(outcome.sections.to_string());
    }
    println!(
        "DONE lost={lost} errors={errors} per_task={}",
        per_task.join(",")
    );
}

/// Takes the lock (watchdog lease from `DISTLOCK_LEASE_MS`), prints `LOCKED`, then
/// writes to the fenced store every 10 ms for as long as it believes it holds the
/// lock. When the loss is reported, prints its section (ending at the last action
/// taken in that belief) and `RESULT ...`.
async fn holder(url: &str, name: &str, label: &str) {
    let lease_ms: u64 = std::env::var("DISTLOCK_LEASE_MS")
        .expect("lease")
        .parse()
        .expect("a number");
    let locks = support::fenced_with_lease(url, Duration::from_millis(lease_ms)).await;
    let workload = Workload::connect(url, name).await;
    let guard = locks.lock(name).await.expect("lock");
    let acquired = monotonic_ns();
    let token = guard.fencing_token().expect("fenced");
    println!("LOCKED acquired={acquired} token={token}");
    let mut accepted = 0u64;
    let mut refused = 0u64;
    let mut last_belief = acquired;
    let mut n = 0;
    loop {
        if guard.is_lost() {
            break;
        }
        last_belief = monotonic_ns();
        if workload.fenced_write(token, &format!("{label}#{n}")).await {
            accepted += 1;
        } else {
            refused += 1;
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let noticed = monotonic_ns();
    // A write that was already on its way when the loss was noticed: the store must
    // refuse it if another holder wrote meanwhile.
    let late_accepted = workload.fenced_write(token, &format!("{label}#late")).await;
    let unlock_lost = matches!(guard.unlock().await, Err(LockError::Lost { .. }));
    let section = Section {
        owner: label.to_owned(),
        token: Some(token),
        acquired_ns: acquired,
        released_ns: last_belief,
        deadline_ns: None,
    };
    println!("{}", section.to_line());
    println!(
        "RESULT accepted={accepted} refused={refused} late_accepted={} unlock_lost={} \
         noticed={noticed}",
        u8::from(late_accepted),
        u8::from(unlock_lost)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_of_four_tasks_keep_two_thousand_sections_apart() {
    let server = support::server();
    let name = "contended";
    let history = History::new();
    let started = std::time::Instant::now();
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            support::spawn_child(
                "child_role",
                &[
                    ("DISTLOCK_ROLE", "contender".into()),
                    ("DISTLOCK_URL", server.url()),
                    ("DISTLOCK_NAME", name.into()),
                    ("DISTLOCK_LABEL", format!("p{p}")),
                ],
            )
        })
        .collect();
    let mut lost = 0;
    let mut errors = 0;
    for child in &mut children {
        let done = support::read_until(child, "DONE", &history, Duration::from_secs(240));
        let fields = support::fields(&done);
        lost += fields["lost"].parse::<u64>().expect("lost");
        errors += fields["errors"].parse::<u64>().expect("errors");
        for (task, count) in fields["per_task"].split(',').enumerate() {
            assert_eq!(
                count,
                SECTIONS_PER_TASK.to_string(),
                "task {task} of child {} made too little progress",
                child.pid()
            );
        }
    }
    let report = history.check();
    let workload = Workload::connect(&server.url(), name).await;
    let counter = workload.counter().await;
    let refused = workload.refused().await;
    let (keys, channels) = support::leaks(&server);
    support::summary_of(
        "contention_4_processes_x_4_tasks",
        &report,
        &[
            ("lost", lost),
            ("errors", errors),
            (
                "counter_missing",
                (report.sections as u64).saturating_sub(counter),
            ),
            ("fenced_writes_refused", refused),
            ("leaked_keys", keys.len() as u64),
            ("leaked_channels", channels.len() as u64),
            ("wall_ms", started.elapsed().as_millis() as u64),
        ],
    );
    report.assert_clean();
    assert_eq!(report.sections, PROCESSES * TASKS * SECTIONS_PER_TASK);
    assert_eq!(report.owners, PROCESSES * TASKS);
    assert_eq!(counter, report.sections as u64, "updates were lost");
    assert_eq!(refused, 0, "a holder's fenced write was refused");
    assert_eq!((lost, errors), (0, 0));
    assert!(keys.is_empty(), "leaked keys {keys:?}");
    assert!(
        support::eventually(Duration::from_secs(3), || support::leaks(&server)
            .1
            .is_empty())
        .await,
        "channels left subscribed"
    );
}

/// Starts a `holder` child and waits until it holds `name`; returns it with the
/// monotonic time its acquire returned and its token.
fn start_holder(
    server: &distlock_testkit::RedisServer,
    name: &str,
    label: &str,
    lease: Duration,
) -> (distlock_testkit::ChildProcess, u64, u64) {
    let mut child = support::spawn_child(
        "child_role",
        &[
            ("DISTLOCK_ROLE", "holder".into()),
            ("DISTLOCK_URL", server.url()),
            ("DISTLOCK_NAME", name.into()),
            ("DISTLOCK_LABEL", label.into()),
            ("DISTLOCK_LEASE_MS", lease.as_millis().to_string()),
        ],
    );
    let line = support::read_until(
        &mut child,
        "LOCKED",
        &History::new(),
        Duration::from_secs(30),
    );
    let fields = support::fields(&line);
    (
        child,
        fields["acquired"].parse().expect("acquired"),
        fields["token"].parse().expect("token"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_is_succeeded_after_its_lease_and_not_before() {
    let lease = Duration::from_millis(1500);
    let server = support::server();
    let name = "killed";
    let (mut child, child_acquired, child_token) = start_holder(&server, name, "child", lease);
    // Let the watchdog renew once, so that the lease is fresh at the kill.
    tokio::time::sleep(lease / 2).await;
    child.kill().expect("SIGKILL");
    let killed = monotonic_ns();
    let remaining = server
        .cmd(&["PTTL", &support::lock_key("killed")])
        .expect("PTTL")
        .parse::<u64>()
        .expect("a lease");

    let locks = support::fenced(&server.url()).await;
    let workload = Workload::connect(&server.url(), name).await;
    let sent = monotonic_ns();
    let guard = locks
        .lock(name)
        .wait(Duration::from_secs(10))
        .await
        .expect("acquired after the lease");
    let acquired = monotonic_ns();
    let history = History::new();
    history.record(Section {
        owner: "child".into(),
        token: Some(child_token),
        acquired_ns: child_acquired,
        released_ns: killed,
        deadline_ns: None,
    });
    let (section, lost, refused) =
        support::body(guard, "parent", 0, sent, acquired, None, &workload).await;
    history.record(section);
    let report = history.check();
    let waited_ms = (acquired - killed) / 1_000_000;
    support::summary_of(
        "holder_sigkill",
        &report,
        &[("waited_ms", waited_ms), ("remaining_lease_ms", remaining)],
    );
    report.assert_clean();
    assert!(!lost && !refused);
    assert!(
        acquired - killed + 20_000_000 >= remaining * 1_000_000,
        "acquired {waited_ms} ms after the kill, with {remaining} ms of lease left"
    );
    assert!(
        acquired - killed <= (lease + Duration::from_millis(1000)).as_nanos() as u64,
        "acquired {waited_ms} ms after the kill"
    );
}

/// What [`frozen_holder`] saw.
struct Frozen {
    report: distlock_testkit::Report,
    fields: std::collections::BTreeMap<String, String>,
    thaw_at: u64,
    token: u64,
    store_token: u64,
}

/// A child holds `frozen` with a 600 ms watchdog lease and writes to the fenced
/// store every 10 ms; it is frozen (SIGSTOP) for 3 leases, during which the parent
/// takes the lock and writes, and thawed while the parent still holds it.
async fn frozen_holder() -> Frozen {
    let lease = Duration::from_millis(600);
    let server = support::server();
    let name = "frozen";
    let (mut child, _, child_token) = start_holder(&server, name, "child", lease);
    tokio::time::sleep(lease / 2).await;
    child.stop().expect("SIGSTOP");
    let stopped = monotonic_ns();

    let locks = support::fenced(&server.url()).await;
    let workload = Workload::connect(&server.url(), name).await;
    let guard = locks
        .lock(name)
        .wait(Duration::from_secs(10))
        .await
        .expect("acquired once the frozen holder's lease ended");
    let acquired = monotonic_ns();
    let token = guard.fencing_token().expect("fenced");
    assert!(token > child_token);
    assert!(workload.fenced_write(token, "parent").await);
    // Hold across the thaw, so that a holder acting on a stale belief would overlap.
    let thaw_at = stopped + 3 * lease.as_nanos() as u64;
    tokio::time::sleep(Duration::from_nanos(thaw_at.saturating_sub(monotonic_ns()))).await;
    child.cont().expect("SIGCONT");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(workload.fenced_write(token, "parent").await);
    let released = monotonic_ns();
    guard.unlock().await.expect("unlock");

    let history = History::new();
    history.record(Section {
        owner: "parent".into(),
        token: Some(token),
        acquired_ns: acquired,
        released_ns: released,
        deadline_ns: None,
    });
    let result = support::read_until(&mut child, "RESULT", &history, Duration::from_secs(10));
    let store_token = server
        .cmd(&["HGET", "rel:frozen:store", "token"])
        .expect("HGET")
        .parse()
        .expect("token");
    Frozen {
        report: history.check(),
        fields: support::fields(&result),
        thaw_at,
        token,
        store_token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_is_told_of_its_loss_and_its_fenced_writes_are_refused() {
    let frozen = frozen_holder().await;
    let noticed: u64 = frozen.fields["noticed"].parse().expect("noticed");
    let refused: u64 = frozen.fields["refused"].parse().expect("refused");
    let late_accepted: u64 = frozen.fields["late_accepted"]
        .parse()
        .expect("late_accepted");
    support::summary(
        "holder_sigstop",
        &[
            ("sections", frozen.report.sections as u64),
            ("stale_writes_accepted", late_accepted),
            ("stale_writes_refused", refused + (1 - late_accepted)),
            (
                "loss_noticed_after_thaw_ms",
                noticed.saturating_sub(frozen.thaw_at) / 1_000_000,
            ),
        ],
    );
    assert_eq!(
        frozen.fields["unlock_lost"], "1",
        "unlock reported the loss"
    );
    assert_eq!(
        frozen.fields["late_accepted"], "0",
        "the stale holder's fenced write was accepted"
    );
    assert!(noticed >= frozen.thaw_at, "noticed before it ran again?");
    assert!(
        noticed - frozen.thaw_at < 1_000_000_000,
        "the loss was reported {} ms after the thaw",
        (noticed - frozen.thaw_at) / 1_000_000
    );
    // The child's writes after the takeover (if any) were all refused: the last
    // accepted write is the parent's, made after the thaw.
    assert_eq!(
        frozen.store_token, frozen.token,
        "a stale fenced write was accepted"
    );
    assert!(frozen.report.token_regressions.is_empty());
}

/// A thawed holder must not act on a lease that ended while it was frozen: its
/// belief interval must end before the next holder's begins.
///
/// Observed: after SIGCONT the holder's body runs before the watchdog task has
/// noticed the expired deadline, so `is_lost()` is still false and the body makes
/// one more (refused) fenced write while the parent holds the lock: 1 overlapping
/// belief interval, in every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thawed_holder_never_acts_on_a_lease_that_ended() {
    let frozen = frozen_holder().await;
    support::summary_of("holder_sigstop_belief", &frozen.report, &[]);
    frozen.report.assert_clean();
}

/// What [`starved_runtime`] saw.
struct Starved {
    lost_at_once: bool,
    reported: bool,
}

#[test]
fn a_runtime_starved_past_its_lease_reports_the_loss() {
    let starved = starved_runtime();
    assert!(starved.reported);
}

/// Observed: right after the blocking call returns, `is_lost()` is false (the
/// watchdog task has not run yet), although the lease ended long before and another
/// client took the lock; it turns true at the next await.
#[test]
fn a_starved_holder_sees_the_loss_before_its_next_await() {
    let starved = starved_runtime();
    assert!(
        starved.lost_at_once,
        "is_lost() was false after the blocking call"
    );
}

/// A current-thread runtime holds a lock (300 ms watchdog lease) and blocks its only
/// thread for 6 leases (`std::thread::sleep`); another client takes the lock meanwhile.
fn starved_runtime() -> Starved {
    let lease = Duration::from_millis(300);
    let server = support::server();
    let url = server.url();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let other_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let locks = support::fenced_with_lease(&url, lease).await;
        let guard = locks.lock("starved").await.expect("lock");
        let acquired = monotonic_ns();
        let token = guard.fencing_token().expect("token");
        // Another client, on a runtime of its own, takes the lock while this one is blocked.
        let thief = other_runtime.spawn({
            let url = url.clone();
            async move {
                let locks = support::fenced(&url).await;
                let guard = locks
                    .lock("starved")
                    .wait(Duration::from_secs(5))
                    .await
                    .expect("taken while the holder starves");
                let at = monotonic_ns();
                let token = guard.fencing_token().expect("token");
                guard.unlock().await.expect("unlock");
                (at, token)
            }
        });
        // A blocking call on the only thread of this runtime: no renewal can run.
        let blocked = monotonic_ns();
        std::thread::sleep(lease * 6);
        let unblocked = monotonic_ns();
        let lost_at_once = guard.is_lost();
        let reported = tokio::time::timeout(Duration::from_secs(1), guard.lost())
            .await
            .is_ok();
        let noticed = monotonic_ns();
        let unlock = guard.unlock().await;
        let (thief_at, thief_token) = other_runtime
            .spawn(async move { thief.await.expect("thief") })
            .await
            .expect("join");
        support::summary(
            "runtime_starved",
            &[
                ("loss_reported", u64::from(reported)),
                ("lost_at_once", u64::from(lost_at_once)),
                (
                    "noticed_after_unblock_ms",
                    (noticed - unblocked) / 1_000_000,
                ),
            ],
        );
        assert!(
            thief_at > blocked && thief_at < unblocked,
            "the lock was taken meanwhile"
        );
        assert!(thief_token > token);
        assert!(reported, "the loss was reported once the runtime ran again");
        assert!(matches!(unlock, Err(LockError::Lost { .. })), "{unlock:?}");
        let _ = acquired;
        Starved {
            lost_at_once,
            reported,
        }
    })
}
