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
use crate::server::{calls_between, command_stats, distlock_release_channel, info_field};

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
        let guard = client.lock(name.as_str()).await?;
        child.send(&name)?;
        child.expect("waiting")?;
        // The waiter listens once its subscriber is on the channel; give it a moment
        // more for the attempt it makes right after subscribing.
        let channel = distlock_release_channel(&name);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let reply = server.cmd(&["PUBSUB", "NUMSUB", &channel])?;
            if reply.lines().nth(1).is_some_and(|n| n.trim() != "0") {
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
        latencies.push(Duration::from_nanos(acquired.saturating_sub(released)));
    }
    child.finish()?;
    Ok(latencies)
}

/// The child of scenario 5: for each name read from stdin, waits for the lock, notes
/// when it got it (CLOCK_MONOTONIC), and gives it back.
pub(crate) async fn child_waiter(url: &str) -> Result<(), BoxError> {
    let client = LockClient::builder().url(url).connect().await?;
    // Warm the connections and the scripts.
    client.lock("s5:warm").await?.unlock().await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready")?;
    out.flush()?;
    for name in std::io::stdin().lines() {
        let name = name?;
        writeln!(out, "waiting")?;
        out.flush()?;
        let guard = client
            .lock(name.as_str())
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
    pub(crate) locks: usize,
    pub(crate) hold: Duration,
    pub(crate) lease: Duration,
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
    pub(crate) rss_held_kib: u64,
    pub(crate) rss_after_kib: u64,
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

    /// RSS growth per held lock, bytes (at the end of the hold).
    pub(crate) fn bytes_per_lock(&self) -> f64 {
        (self.rss_after_kib.saturating_sub(self.rss_before_kib) * 1024) as f64
            / (self.held.max(1)) as f64
    }
}

/// Scenario 6: a child holds `settings.locks` locks under the watchdog for
/// `settings.hold`; the server's command counts are taken around the hold.
pub(crate) fn many_leases(
    server: &RedisServer,
    settings: LeaseSettings,
) -> Result<Leases, BoxError> {
    let mut child = ChildProcess::spawn(&[
        "child-leases".to_owned(),
        server.url(),
        settings.locks.to_string(),
        settings.hold.as_millis().to_string(),
        settings.lease.as_millis().to_string(),
    ])?;
    let acquire_secs: f64 = child.expect("held")?.parse()?;
    let before = command_stats(server)?;
    let before_total = info_field(server, "stats", "total_commands_processed")?;
    let result = child.expect("result")?;
    let after = command_stats(server)?;
    let after_total = info_field(server, "stats", "total_commands_processed")?;
    child.finish()?;
    crate::server::flush(server)?;
    let field = |name: &str| -> Result<u64, BoxError> {
        result
            .split_whitespace()
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .ok_or_else(|| format!("no {name} in {result:?}"))?
            .parse()
            .map_err(Into::into)
    };
    Ok(Leases {
        held: field("held")?,
        lost: field("lost")?,
        acquire_secs,
        pipelines: field("pipelines")?,
        renewals: field("renewals")?,
        server_evalsha: calls_between(&before, &after, "evalsha"),
        // Less the INFO calls of this measurement.
        server_commands: after_total.saturating_sub(before_total + 3),
        rss_before_kib: field("rss_before")?,
        rss_held_kib: field("rss_held")?,
        rss_after_kib: field("rss_after")?,
    })
}

/// The child of scenario 6.
pub(crate) async fn child_leases(
    url: &str,
    locks: usize,
    hold: Duration,
    lease: Duration,
) -> Result<(), BoxError> {
    tracing::subscriber::set_global_default(RenewCounter)?;
    let client = LockClient::builder()
        .url(url)
        .default_lease(lease)
        .connect()
        .await?;
    for i in 0..100 {
        client.lock(format!("s6:warm:{i}")).await?.unlock().await?;
    }
    let rss_before = rss_kib();
    let start = Instant::now();
    let tasks = 256;
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let client = client.clone();
        set.spawn(async move {
            let mut guards = Vec::with_capacity(locks / tasks + 1);
            for i in (task..locks).step_by(tasks) {
                guards.push(client.lock(format!("s6:{i}")).await?);
            }
            Ok::<_, distlock::LockError>(guards)
        });
    }
    let mut guards = Vec::with_capacity(locks);
    while let Some(joined) = set.join_next().await {
        guards.extend(joined??);
    }
    let acquire_secs = start.elapsed().as_secs_f64();
    let rss_held = rss_kib();
    let (pipelines, renewals) = (
        PIPELINES.load(Ordering::Relaxed),
        RENEWALS.load(Ordering::Relaxed),
    );
    let mut out = std::io::stdout().lock();
    writeln!(out, "held {acquire_secs}")?;
    out.flush()?;
    tokio::time::sleep(hold).await;
    let lost = guards.iter().filter(|guard| guard.is_lost()).count();
    let rss_after = rss_kib();
    writeln!(
        out,
        "result held={} lost={lost} pipelines={} renewals={} rss_before={rss_before} \
         rss_held={rss_held} rss_after={rss_after}",
        guards.len(),
        PIPELINES.load(Ordering::Relaxed) - pipelines,
        RENEWALS.load(Ordering::Relaxed) - renewals,
    )?;
    out.flush()?;
    // The parent flushes the server: skip 100 000 background releases.
    std::process::exit(0);
}
