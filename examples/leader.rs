//! Leader election: one instance holds a lock for as long as it lives, and learns
//! at once when it loses it.
//!
//! Each instance runs the same loop: wait for the lock `leader:reports` (waiters
//! wake on a release message, or when the holder's lease ends), lead while holding
//! it (the watchdog renews its lease), and step down the moment `guard.lost()`
//! completes: the lock was force-unlocked, or could not be renewed in time, and
//! another instance may lead already. Then it waits again.
//!
//! Instance A is another process (this example started again); instance B runs
//! here. A leads, B waits. A is killed (SIGKILL: nothing gives the lock back), and
//! B takes over within one lease (2 s here). Then an operator force-unlocks the
//! lock: B learns it within a renewal period, steps down, and leads again.
//!
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example leader`
//! (or `cargo xtask demo leader`; `REDIS_CLUSTER_URLS` for a Redis Cluster,
//! `REDIS_SENTINEL_URLS` for Sentinel). Its keys start with `distlock-example:`; it
//! exits with a non-zero status if a step does not behave as described.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use distlock::{LockClient, LockError, LostReason};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

mod common;
use common::Target;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The lock the instances compete for.
const LEADER: &str = "leader:reports";
/// The watchdog lease of every instance: how long a dead leader keeps the lock.
const LEASE: Duration = Duration::from_secs(2);
/// A loaded machine's slack on every bound this example checks.
const SLACK: Duration = Duration::from_millis(1_500);
/// The argument that makes this program an instance (A, in a process of its own).
const INSTANCE: &str = "--instance";

/// What an instance's loop tells the code that watches it.
#[derive(Debug)]
enum Event {
    /// It holds the lock and leads.
    Leading(Instant),
    /// It lost the lock, for this reason, and stopped leading.
    SteppedDown(Option<LostReason>),
}

/// Fails the example with `message` unless `condition` holds.
fn expect(condition: bool, message: &str) -> Result<(), Error> {
    if condition {
        Ok(())
    } else {
        Err(format!("unexpected: {message}").into())
    }
}

/// One instance: leads whenever it holds the lock, and steps down the moment it
/// loses it; until `stop` changes (then it gives the lock back).
async fn lead(
    locks: LockClient,
    me: &str,
    events: mpsc::UnboundedSender<Event>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), LockError> {
    loop {
        let guard = tokio::select! {
            guard = locks.lock(LEADER).wait(Duration::from_secs(3600)) => guard?,
            _ = stop.changed() => return Ok(()),
        };
        println!("{me}: leading");
        let _ = events.send(Event::Leading(Instant::now()));
        // The leader's work runs here, in a `select!` with `guard.lost()`, so that it
        // stops as soon as another instance may lead.
        tokio::select! {
            () = guard.lost() => {
                let reason = guard.lost_reason();
                println!("{me}: lost the lock ({reason:?}): stepping down at once");
                let _ = events.send(Event::SteppedDown(reason));
                // Reports the loss; nothing is held any more.
                let _ = guard.unlock().await;
            }
            _ = stop.changed() => return guard.unlock().await,
        }
    }
}

/// Instance A: another process, killed with SIGKILL when dropped. Its lines are
/// printed here, prefixed, and its first `leading` is sent on `leading`.
struct OtherProcess(Child);

impl OtherProcess {
    fn start(leading: mpsc::UnboundedSender<()>) -> Result<Self, Error> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(INSTANCE)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("   [process {line}]");
                if line.ends_with("leading") {
                    let _ = leading.send(());
                }
            }
        });
        Ok(Self(child))
    }

    /// SIGKILL: the process gives nothing back.
    fn kill(&mut self) -> Result<(), Error> {
        self.0.kill()?;
        self.0.wait()?;
        Ok(())
    }
}

impl Drop for OtherProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn connect(target: &Target) -> Result<LockClient, LockError> {
    target
        .lock_client()
        .namespace("distlock-example")
        .default_lease(LEASE)
        .connect()
        .await
}

/// Waits up to `limit` for the next event.
async fn next(
    events: &mut mpsc::UnboundedReceiver<Event>,
    limit: Duration,
) -> Result<Event, Error> {
    match tokio::time::timeout(limit, events.recv()).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err("the instance stopped".into()),
        Err(_) => Err(format!("no news from the instance within {limit:?}").into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let target = Target::from_env();
    if std::env::args().nth(1).as_deref() == Some(INSTANCE) {
        // Instance A: leads until it is killed.
        let (events, _) = mpsc::unbounded_channel();
        let (_stop, stop) = watch::channel(false);
        lead(connect(&target).await?, "A", events, stop).await?;
        return Ok(());
    }
    println!("leader election, against {target}\n");
    let operator = connect(&target).await?;
    // A run of this example just before may have left a leader's lock to its lease.
    operator.force_unlock(LEADER).await?;

    // 1. A starts first and leads.
    let (a_leading, mut a_leads) = mpsc::unbounded_channel();
    let mut a = OtherProcess::start(a_leading)?;
    tokio::time::timeout(Duration::from_secs(30), a_leads.recv())
        .await
        .map_err(|_| "instance A did not lead")?;
    println!("1. instance A (another process) leads");

    // 2. B waits while A lives: A's watchdog renews its lease.
    let (events, mut b_events) = mpsc::unbounded_channel();
    let (stop, stopped) = watch::channel(false);
    let b = tokio::spawn(lead(connect(&target).await?, "B", events, stopped));
    tokio::time::sleep(LEASE + LEASE / 2).await;
    expect(b_events.try_recv().is_err(), "B led while A lived")?;
    println!("2. instance B waits: after 3 s, longer than a lease, A still leads");

    // 3. A dies: B takes over within one lease.
    let killed = Instant::now();
    a.kill()?;
    println!("3. instance A killed (SIGKILL: nothing gives the lock back)");
    let Event::Leading(at) = next(&mut b_events, LEASE * 3).await? else {
        return Err("B stepped down instead of leading".into());
    };
    let after = at.duration_since(killed);
    println!(
        "   B took over {:?} after A died (the lease is {LEASE:?})",
        Duration::from_millis(after.as_millis() as u64)
    );
    expect(
        after <= LEASE + SLACK,
        "B did not take over within one lease",
    )?;

    // 4. B loses the lock (an operator breaks it): it learns within a renewal
    //    period, steps down at once, and then leads again (nobody else wants it).
    let forced = Instant::now();
    operator.force_unlock(LEADER).await?;
    println!("4. an operator force-unlocks `{LEADER}`");
    let Event::SteppedDown(reason) = next(&mut b_events, LEASE + SLACK).await? else {
        return Err("B did not step down".into());
    };
    let told = forced.elapsed();
    println!(
        "   B was told {:?} later (a renewal period is {:?})",
        Duration::from_millis(told.as_millis() as u64),
        Duration::from_millis((LEASE / 3).as_millis() as u64)
    );
    expect(reason == Some(LostReason::NotHeld), "another reason")?;
    expect(told <= LEASE / 3 + SLACK, "B was told late")?;
    let Event::Leading(_) = next(&mut b_events, LEASE + SLACK).await? else {
        return Err("B did not lead again".into());
    };
    println!("   B leads again");

    // 5. B stops: it gives the lock back.
    let _ = stop.send(true);
    b.await??;
    expect(
        !operator.inspect(LEADER).await?.held,
        "the lock is still held",
    )?;
    println!("5. instance B stopped and gave the lock back");

    println!("\nleader election finished");
    Ok(())
}
