//! Machinery of the reliability suite (`tests/reliability_*.rs`): the workload each
//! critical section runs, the participants that record their sections, child
//! processes, the summary lines `cargo xtask reliability` reads, and the clients and
//! proxies the scenarios start from.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard};
use distlock_testkit::{
    monotonic_ns, ChildProcess, Direction, FaultProxy, History, RedisServer, Report, Section,
};

/// The fenced store: a Redis hash that accepts a write only with a fencing token at
/// least as high as the highest it has seen.
///
/// KEYS[1] the store hash (`token`, `value`, `accepted`, `refused`)
/// ARGV[1] the writer's fencing token, ARGV[2] the value
/// Returns 1 (accepted) or 0 (refused: a newer holder wrote already).
pub const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'token')) or 0
local token = tonumber(ARGV[1])
if token < last then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'token', token, 'value', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return 1
";

/// What one critical section does on Redis, besides holding the lock: an unfenced
/// read → yield → write of a counter (a lost update reveals a real overlap) and a
/// fenced write (refused when a newer holder wrote first).
#[derive(Clone)]
pub struct Workload {
    conn: redis::aio::MultiplexedConnection,
    counter: String,
    store: String,
    script: Arc<redis::Script>,
}

impl Workload {
    /// A workload on `url` for lock `name`: keys `rel:{name}:counter` and `rel:{name}:store`.
    pub async fn connect(url: &str, name: &str) -> Workload {
        let client = redis::Client::open(url).expect("url");
        // No response timeout: a holder process frozen (SIGSTOP) with a write in
        // flight must find the reply after SIGCONT, not a timer that ran out while
        // it was stopped.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("workload connection");
        Workload {
            conn,
            counter: format!("rel:{name}:counter"),
            store: format!("rel:{name}:store"),
            script: Arc::new(redis::Script::new(FENCED_WRITE)),
        }
    }

    /// GET, yield, SET counter+1.
    pub async fn unfenced_increment(&self) {
        let value = self.counter().await;
        tokio::task::yield_now().await;
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET")
            .arg(&self.counter)
            .arg(value + 1)
            .query_async(&mut conn)
            .await
            .expect("SET counter");
    }

    /// Writes `value` to the fenced store with `token`; whether it was accepted.
    pub async fn fenced_write(&self, token: u64, value: &str) -> bool {
        let mut conn = self.conn.clone();
        let accepted: i64 = self
            .script
            .key(&self.store)
            .arg(token)
            .arg(value)
            .invoke_async(&mut conn)
            .await
            .expect("fenced write");
        accepted == 1
    }

    /// The counter as stored.
    pub async fn counter(&self) -> u64 {
        let mut conn = self.conn.clone();
        let value: Option<u64> = redis::cmd("GET")
            .arg(&self.counter)
            .query_async(&mut conn)
            .await
            .expect("GET counter");
        value.unwrap_or(0)
    }

    /// How many fenced writes the store refused.
    pub async fn refused(&self) -> u64 {
        let mut conn = self.conn.clone();
        let value: Option<u64> = redis::cmd("HGET")
            .arg(&self.store)
            .arg("refused")
            .query_async(&mut conn)
            .await
            .expect("HGET refused");
        value.unwrap_or(0)
    }
}

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

/// A waiter: takes `name` with `locks`, waiting up to `wait` (panics with `what` if it
/// cannot), gives it back at once and records that section as `waiter` in `history`.
/// Returns the monotonic time it acquired.
pub async fn wait_then_release(
    locks: &LockClient,
    name: &str,
    wait: Duration,
    history: &History,
    what: &str,
) -> u64 {
    let guard = locks.lock(name).wait(wait).await.expect(what);
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

/// Starts this test binary again as a child that runs the ignored test `role`, with
/// `env` set. The child prints its sections as lines.
pub fn spawn_child(role: &str, env: &[(&str, String)]) -> ChildProcess {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command.args([
        "--exact",
        role,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    command.env("DISTLOCK_RELIABILITY_CHILD", "1");
    ChildProcess::spawn(command).expect("spawn child")
}

/// Whether this process is a child started by [`spawn_child`].
pub fn is_child() -> bool {
    std::env::var_os("DISTLOCK_RELIABILITY_CHILD").is_some()
}

/// Reads the child's lines until one starts with `marker` (returned), recording
/// every section line in `history`. Panics after `limit` without it.
pub fn read_until(
    child: &mut ChildProcess,
    marker: &str,
    history: &History,
    limit: Duration,
) -> String {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(line) = child.read_line_timeout(left) else {
            panic!(
                "child {} did not print {marker:?} within {limit:?}",
                child.pid()
            );
        };
        if let Some(section) = Section::parse_line(&line) {
            history.record(section);
        } else if let Some(start) = line.find(marker) {
            // The test harness may have printed `test NAME ... ` before it.
            return line[start..].to_owned();
        }
    }
}

/// `key=value` fields of a line such as `DONE sections=3 lost=0`.
pub fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Prints the machine-readable summary line of a scenario, read by
/// `cargo xtask reliability`: `RELIABILITY scenario=NAME key=value ...`.
pub fn summary(scenario: &str, figures: &[(&str, u64)]) {
    let mut line = format!("RELIABILITY scenario={scenario}");
    for (key, value) in figures {
        line.push_str(&format!(" {key}={value}"));
    }
    println!("{line}");
}

/// Prints the summary of a checked history (sections, overlaps, ...) plus `extra`.
pub fn summary_of(scenario: &str, report: &Report, extra: &[(&str, u64)]) {
    let mut figures = vec![
        ("sections", report.sections as u64),
        ("overlaps", report.overlaps.len() as u64),
        ("token_regressions", report.token_regressions.len() as u64),
        ("late_grants", report.late_grants.len() as u64),
    ];
    figures.extend_from_slice(extra);
    summary(scenario, &figures);
}

/// Keys and channels left behind: every key except the workload's (`rel:*`) and the
/// fencing counters (which live forever by design), and every channel.
pub fn leaks(server: &RedisServer) -> (Vec<String>, Vec<String>) {
    let keys = server.cmd(&["KEYS", "*"]).expect("KEYS");
    let keys = keys
        .lines()
        .filter(|key| !key.is_empty() && !key.starts_with("rel:") && !key.ends_with(":fence"))
        .map(str::to_owned)
        .collect();
    let channels = server.cmd(&["PUBSUB", "CHANNELS"]).expect("PUBSUB");
    let channels = channels
        .lines()
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .collect();
    (keys, channels)
}

/// Whether `key` exists on `server`.
pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]).expect("EXISTS") == "1"
}

/// A client of `url` that issues fencing tokens, with the default watchdog lease.
pub async fn fenced(url: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .fencing(true)
        .connect()
        .await
        .expect("connect")
}

/// A client of `url` that issues fencing tokens, with a watchdog lease of `lease`.
pub async fn fenced_with_lease(url: &str, lease: Duration) -> LockClient {
    LockClient::builder()
        .url(url)
        .fencing(true)
        .default_lease(lease)
        .connect()
        .await
        .expect("connect")
}

/// A plain redis-rs connection to `url`, to look at or tamper with the keys.
pub async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// A fault proxy in front of `server`.
pub fn proxy(server: &RedisServer) -> FaultProxy {
    FaultProxy::start(server.addr()).expect("proxy")
}

/// A thread that resets every connection through a proxy every `period`, until
/// [`Resetter::stop`].
pub struct Resetter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
}

impl Resetter {
    /// Starts resetting the connections of `proxy`, the first time after `period`.
    pub fn start(proxy: Arc<FaultProxy>, period: Duration) -> Resetter {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut resets = 0;
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(period);
                    resets += proxy.reset_all();
                }
                resets
            }
        });
        Resetter { stop, thread }
    }

    /// Stops the thread once its current period ends; how many connections it reset.
    pub fn stop(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().expect("resetter")
    }
}

/// How late every reply reaches the client in [`late_acquire`].
pub const LATE_REPLY: Duration = Duration::from_millis(300);

/// The fixed lease [`late_acquire`] asks for: shorter than [`LATE_REPLY`], so every
/// grant reaches the client after its lease ended.
pub const LATE_LEASE: Duration = Duration::from_millis(100);

/// The late-reply scenario: `proxy` delays every reply to the client by
/// [`LATE_REPLY`] (plus up to `jitter`), then `locks`, connected through it, asks for
/// `late` with a fixed lease of [`LATE_LEASE`] and a wait of 1 s, given up after 3 s
/// (the wait + 2 s). Returns the monotonic time the request was sent and its outcome,
/// `Err` when given up. The proxy is left delaying.
pub async fn late_acquire(
    proxy: &FaultProxy,
    locks: &LockClient,
    jitter: Duration,
) -> (
    u64,
    Result<Result<LockGuard, LockError>, tokio::time::error::Elapsed>,
) {
    proxy.delay(Direction::ToClient, LATE_REPLY, jitter);
    let sent = monotonic_ns();
    let attempt = tokio::time::timeout(
        Duration::from_secs(3),
        locks
            .lock("late")
            .lease(LATE_LEASE)
            .wait(Duration::from_secs(1)),
    )
    .await;
    (sent, attempt)
}
