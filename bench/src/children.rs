//! The scenarios that need a process of their own: the harness binary runs itself as
//! a child (`distlock-bench child-waiter URL`, `distlock-bench child-leases ...`).

use std::io::{BufRead, BufReader, Lines, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::LockClient;
use distlock_testkit::RedisServer;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::kind::{self, Kind};
use crate::server::{
    command_stats, distlock_place_kept, distlock_release_channel, info_field, script_runs_between,
};

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine.
pub(crate) fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// This process's resident set size, in KiB (`VmRSS` of /proc/self/status).
pub(crate) fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:")?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

/// A child process of the harness, talked to by lines.
struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl ChildProcess {
    fn spawn(args: &[String]) -> Result<Self, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        Ok(Self {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
        })
    }

    fn send(&mut self, line: &str) -> Result<(), BoxError> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    /// The next line, which must start with `prefix`; returns the rest.
    fn expect(&mut self, prefix: &str) -> Result<String, BoxError> {
        let line = self
            .stdout
            .next()
            .ok_or_else(|| format!("the child ended before saying {prefix:?}"))??;
        line.strip_prefix(prefix)
            .map(|rest| rest.trim().to_owned())
            .ok_or_else(|| format!("the child said {line:?}, expected {prefix:?}").into())
    }

    fn finish(mut self) -> Result<(), BoxError> {
        drop(self.stdin.take());
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("the child failed: {status}").into());
        }
        Ok(())
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Scenario 5: the lock is released here, and a waiter in another process takes it.
/// Returns release-to-acquired latencies.
pub(crate) async fn wakeup(
    client: &LockClient,
    server: &RedisServer,
    tag: &str,
    rounds: usize,
) -> Result<Vec<Duration>, BoxError> {
    let mut child = ChildProcess::spawn(&["child-waiter".to_owned(), server.url()])?;
    child.expect("ready")?;
    let mut latencies = Vec::new();
    for round in 0..rounds {
        let name = format!("s5:{tag}:{round}");
        latencies.push(hand_off(client, server, &mut child, Kind::Plain, &name).await?);
    }
    child.finish()?;
    Ok(latencies)
}

/// Phase 9: as scenario 5, for each kind of `kinds` (the plain lock, the write lock
/// with a writer waiting behind a writer, the fair lock) in turn, round after round,
/// with one child waiter. Returns each kind's release-to-acquired latencies, in the
/// order of `kinds`.
pub(crate) async fn handoffs(
    client: &LockClient,
    server: &RedisServer,
    tag: &str,
    rounds: usize,
    kinds: &[Kind],
) -> Result<Vec<Vec<Duration>>, BoxError> {
    let mut child = ChildProcess::spawn(&["child-waiter".to_owned(), server.url()])?;
    child.expect("ready")?;
    let mut latencies = vec![Vec::new(); kinds.len()];
    for round in 0..rounds {
        for (index, &kind) in kinds.iter().enumerate() {
            let name = format!("s9:{tag}:{}:{round}", kind.word());
            latencies[index].push(hand_off(client, server, &mut child, kind, &name).await?);
        }
    }
    child.finish()?;
    Ok(latencies)
}

/// One hand-off: the lock `name` of `kind` is taken here, the child waits for it;
/// once the child's subscriber is on the channel (and, for a kind whose waiter keeps
/// a place, its place is in the lock's hash) and 5 ms more, the lock is released.
/// Returns the time from the `unlock()` call to the child holding it (CLOCK_MONOTONIC
/// in both processes).
async fn hand_off(
    client: &LockClient,
    server: &RedisServer,
    child: &mut ChildProcess,
    kind: Kind,
    name: &str,
) -> Result<Duration, BoxError> {
    let guard = kind::request(client, kind, name)
        .ok_or("a hand-off is of one lock")?
        .await?;
    child.send(&format!("{} {name}", kind.word()))?;
    child.expect("waiting")?;
    // The waiter listens once its subscriber is on the channel; give it a moment
    // more for the attempt it makes right after subscribing.
    let channel = distlock_release_channel(name);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let reply = server.cmd(&["PUBSUB", "NUMSUB", &channel])?;
        let listening = reply.lines().nth(1).is_some_and(|n| n.trim() != "0");
        if listening && (!kind.keeps_place() || distlock_place_kept(server, name)?) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("the waiter never subscribed to {channel}").into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let released = monotonic_ns();
    guard.unlock().await?;
    let acquired: u64 = child.expect("acquired")?.parse()?;
    Ok(Duration::from_nanos(acquired.saturating_sub(released)))
}

/// The child of scenario 5 and phase 9: for each line `<kind> <name>` read from
/// stdin (see [`Kind::word`]), waits for that lock, notes when it got it
/// (CLOCK_MONOTONIC), and gives it back.
pub(crate) async fn child_waiter(url: &str) -> Result<(), BoxError> {
    let client = LockClient::builder().url(url).connect().await?;
    // Warm the connections and the scripts.
    for kind in [Kind::Plain, Kind::Write, Kind::Fair] {
        let warm = format!("s5:warm:{}", kind.word());
        let guard = kind::request(&client, kind, &warm)
            .ok_or("no request")?
            .await?;
        guard.unlock().await?;
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for line in std::io::stdin().lines() {
        let line = line?;
        let (kind, name) = line
            .split_once(' ')
            .and_then(|(word, name)| Some((Kind::from_word(word)?, name)))
            .ok_or_else(|| format!("child-waiter: {line:?} is not `<kind> <name>`"))?;
        writeln!(out, "waiting")?;
        out.flush()?;
        let guard = kind::request(&client, kind, name)
            .ok_or("no request")?
            .wait(Duration::from_secs(10))
            .await?;
        let acquired = monotonic_ns();
        guard.unlock().await?;
        writeln!(out, "acquired {acquired}")?;
        out.flush()?;
    }
    Ok(())
}

/// Counts the watchdog's renewal pipelines: one `distlock.renew` span per pipeline on
/// a single server, with the number of leases in its `locks` field. Every other span
/// and event is disabled at its call site, so it costs nothing.
#[derive(Debug)]
struct RenewCounter;

static PIPELINES: AtomicU64 = AtomicU64::new(0);
static RENEWALS: AtomicU64 = AtomicU64::new(0);

const RENEW_SPAN: &str = "distlock.renew";

struct LocksField;

impl tracing::field::Visit for LocksField {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "locks" {
            RENEWALS.fetch_add(value, Ordering::Relaxed);
        }
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl tracing::Subscriber for RenewCounter {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if metadata.name() == RENEW_SPAN {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.name() == RENEW_SPAN
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        PIPELINES.fetch_add(1, Ordering::Relaxed);
        span.record(&mut LocksField);
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, _: &tracing::Event<'_>) {}

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// Settings of scenario 6.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseSettings {
    /// The client's memory is read once each count is held; the last is the count
    /// the watchdog keeps for the hold.
    pub(crate) stages: [usize; 2],
    pub(crate) hold: Duration,
    pub(crate) lease: Duration,
    /// How long the child waits after the last release before it reads its memory.
    pub(crate) settle: Duration,
}

impl LeaseSettings {
    /// The locks held during the hold.
    pub(crate) fn locks(&self) -> usize {
        self.stages[1]
    }
}

/// What scenario 6 measured.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Leases {
    pub(crate) held: u64,
    pub(crate) lost: u64,
    pub(crate) acquire_secs: f64,
    /// Renewal pipelines the watchdog sent during the hold.
    pub(crate) pipelines: u64,
    /// Renewals in them.
    pub(crate) renewals: u64,
    /// EVALSHA calls the server counted during the hold.
    pub(crate) server_evalsha: u64,
    /// Every command the server counted during the hold (scripts' inner ones too).
    pub(crate) server_commands: u64,
    pub(crate) rss_before_kib: u64,
    /// Once the first stage's count was held.
    pub(crate) rss_first_kib: u64,
    pub(crate) rss_held_kib: u64,
    pub(crate) rss_after_kib: u64,
    /// After every lock was released and the child waited `settle`.
    pub(crate) rss_released_kib: u64,
    /// Then after `malloc_trim(0)` (a diagnostic).
    pub(crate) rss_trimmed_kib: u64,
    /// How long the releases took.
    pub(crate) release_secs: f64,
    /// The server's `used_memory` before the child took a lock, and with every
    /// lock held.
    pub(crate) server_used_before: u64,
    pub(crate) server_used_held: u64,
}

impl Leases {
    /// Renewal periods in the hold.
    pub(crate) fn periods(&self, settings: LeaseSettings) -> f64 {
        settings.hold.as_secs_f64() / (settings.lease.as_secs_f64() / 3.0)
    }

    /// Round trips per 100 leases per renewal period.
    pub(crate) fn round_trips_per_100(&self, settings: LeaseSettings) -> f64 {
        let hundreds = self.held as f64 / 100.0;
        self.pipelines as f64 / (self.periods(settings) * hundreds).max(1e-9)
    }

    /// RSS growth per held lock, bytes, with the first stage's count held.
    pub(crate) fn bytes_per_lock_first(&self, settings: LeaseSettings) -> f64 {
        (self.rss_first_kib.saturating_sub(self.rss_before_kib) * 1024) as f64
            / settings.stages[0].max(1) as f64
    }

    /// RSS growth per held lock, bytes, at the end of the hold.
    pub(crate) fn bytes_per_lock(&self) -> f64 {
        (self.rss_after_kib.saturating_sub(self.rss_before_kib) * 1024) as f64
            / (self.held.max(1)) as f64
    }

    /// The server's memory per held lock, bytes, with whatever records each keeps.
    pub(crate) fn server_bytes_per_lock(&self) -> f64 {
        self.server_used_held
            .saturating_sub(self.server_used_before) as f64
            / self.held.max(1) as f64
    }

    /// RSS once every lock was released, over RSS before any was taken.
    pub(crate) fn released_over_baseline(&self) -> f64 {
        self.rss_released_kib as f64 / self.rss_before_kib.max(1) as f64
    }
}

/// A `name=value` field of a child's line.
fn field(line: &str, name: &str) -> Result<f64, BoxError> {
    line.split_whitespace()
        .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
        .ok_or_else(|| format!("no {name} in {line:?}"))?
        .parse()
        .map_err(|err| format!("{name} in {line:?}: {err}").into())
}

/// Scenario 6: a child takes `settings.stages` locks, holds them under the watchdog
/// for `settings.hold`, then releases them all; the server's command counts are
/// taken around the hold.
pub(crate) fn many_leases(
    server: &RedisServer,
    settings: LeaseSettings,
) -> Result<Leases, BoxError> {
    let server_before = info_field(server, "memory", "used_memory")?;
    let mut child = ChildProcess::spawn(&[
        "child-leases".to_owned(),
        server.url(),
        settings.stages[0].to_string(),
        settings.stages[1].to_string(),
        settings.hold.as_millis().to_string(),
        settings.lease.as_millis().to_string(),
        settings.settle.as_millis().to_string(),
    ])?;
    let held = child.expect("held")?;
    let server_held = info_field(server, "memory", "used_memory")?;
    let before = command_stats(server)?;
    let before_total = info_field(server, "stats", "total_commands_processed")?;
    let result = child.expect("result")?;
    let after = command_stats(server)?;
    let after_total = info_field(server, "stats", "total_commands_processed")?;
    let released = child.expect("released")?;
    child.finish()?;
    crate::server::flush(server)?;
    let kib = |line: &str, name: &str| field(line, name).map(|v| v as u64);
    Ok(Leases {
        held: kib(&result, "held")?,
        lost: kib(&result, "lost")?,
        acquire_secs: field(&held, "secs")?,
        pipelines: kib(&result, "pipelines")?,
        renewals: kib(&result, "renewals")?,
        server_evalsha: script_runs_between(&before, &after),
        // Less the INFO calls of this measurement.
        server_commands: after_total.saturating_sub(before_total + 3),
        rss_before_kib: kib(&held, "rss_before")?,
        rss_first_kib: kib(&held, "rss_first")?,
        rss_held_kib: kib(&held, "rss_held")?,
        rss_after_kib: kib(&result, "rss_after")?,
        rss_released_kib: kib(&released, "rss")?,
        rss_trimmed_kib: kib(&released, "rss_trimmed")?,
        release_secs: field(&released, "secs")?,
        server_used_before: server_before,
        server_used_held: server_held,
    })
}

/// The settings of the child of scenario 6, from its command line.
pub(crate) fn child_lease_settings(args: &[String]) -> Result<LeaseSettings, BoxError> {
    const USAGE: &str = "child-leases URL FIRST LOCKS HOLD_MS LEASE_MS SETTLE_MS";
    let arg = |i: usize| -> Result<u64, BoxError> {
        let text = args.get(i).ok_or(USAGE)?;
        text.parse()
            .map_err(|err| format!("{USAGE}: {text:?}: {err}").into())
    };
    Ok(LeaseSettings {
        stages: [arg(2)? as usize, arg(3)? as usize],
        hold: Duration::from_millis(arg(4)?),
        lease: Duration::from_millis(arg(5)?),
        settle: Duration::from_millis(arg(6)?),
    })
}

/// Takes the locks `s6:<from>` .. `s6:<to - 1>` with `tasks` tasks.
async fn take_locks(
    client: &LockClient,
    from: usize,
    to: usize,
    tasks: usize,
) -> Result<Vec<distlock::LockGuard>, BoxError> {
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let client = client.clone();
        set.spawn(async move {
            let mut guards = Vec::new();
            for i in (from + task..to).step_by(tasks) {
                guards.push(client.lock(format!("s6:{i}")).await?);
            }
            Ok::<_, distlock::LockError>(guards)
        });
    }
    let mut guards = Vec::with_capacity(to.saturating_sub(from));
    while let Some(joined) = set.join_next().await {
        guards.extend(joined??);
    }
    Ok(guards)
}

/// Releases every guard with `tasks` tasks.
async fn release_all(guards: Vec<distlock::LockGuard>, tasks: usize) -> Result<(), BoxError> {
    let mut chunks: Vec<Vec<distlock::LockGuard>> = (0..tasks).map(|_| Vec::new()).collect();
    for (i, guard) in guards.into_iter().enumerate() {
        chunks[i % tasks].push(guard);
    }
    let mut set = tokio::task::JoinSet::new();
    for chunk in chunks {
        set.spawn(async move {
            for guard in chunk {
                guard.unlock().await?;
            }
            Ok::<_, distlock::LockError>(())
        });
    }
    while let Some(joined) = set.join_next().await {
        joined??;
    }
    Ok(())
}

/// Writes one line to the parent.
fn tell(line: &str) -> Result<(), BoxError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// The child of scenario 6: takes the locks in two stages, holds them, releases
/// them, and reports its memory at each step and the watchdog's renewals.
pub(crate) async fn child_leases(url: &str, settings: LeaseSettings) -> Result<(), BoxError> {
    const TASKS: usize = 256;
    tracing::subscriber::set_global_default(RenewCounter)?;
    let client = LockClient::builder()
        .url(url)
        .default_lease(settings.lease)
        .connect()
        .await?;
    for i in 0..100 {
        client.lock(format!("s6:warm:{i}")).await?.unlock().await?;
    }
    let rss_before = rss_kib();
    let start = Instant::now();
    let [first, locks] = settings.stages;
    let mut guards = take_locks(&client, 0, first.min(locks), TASKS).await?;
    let rss_first = rss_kib();
    guards.extend(take_locks(&client, first.min(locks), locks, TASKS).await?);
    let secs = start.elapsed().as_secs_f64();
    let rss_held = rss_kib();
    let (pipelines, renewals) = (
        PIPELINES.load(Ordering::Relaxed),
        RENEWALS.load(Ordering::Relaxed),
    );
    tell(&format!(
        "held secs={secs} rss_before={rss_before} rss_first={rss_first} rss_held={rss_held}"
    ))?;
    tokio::time::sleep(settings.hold).await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    tell(&format!(
        "result held={} lost={lost} pipelines={} renewals={} rss_after={}",
        guards.len(),
        PIPELINES.load(Ordering::Relaxed) - pipelines,
        RENEWALS.load(Ordering::Relaxed) - renewals,
        rss_kib()
    ))?;
    let start = Instant::now();
    release_all(guards, TASKS).await?;
    let secs = start.elapsed().as_secs_f64();
    tokio::time::sleep(settings.settle).await;
    let rss = rss_kib();
    tell(&format!(
        "released secs={secs} rss={rss} rss_trimmed={}",
        trimmed_rss_kib()
    ))?;
    drop(client);
    Ok(())
}

/// RSS after asking the allocator to give its free memory back (glibc's
/// `malloc_trim`): tells memory the allocator keeps from memory still in use. Only a
/// diagnostic; the target is judged without it.
fn trimmed_rss_kib() -> u64 {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    rss_kib()
}
