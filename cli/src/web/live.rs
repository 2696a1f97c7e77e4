//! The one reader behind every browser tab: a task that reads the namespace
//! (`read.rs`) at most every refresh period, paced so that it never sends more
//! than its budget of commands per second on average, and a task subscribed to
//! every lock's release channel (`PSUBSCRIBE <namespace>:{*}:released`) whose
//! messages become marks on the timeline and wake the reader for a read sooner
//! (still within the budget). What they find is published as one [`Snapshot`]
//! on a watch channel, which the page's requests and event streams read.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::layout::ReleaseMessage;
use distlock::redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::connect::{Raw, Target};
use crate::names::{channel_pattern, name_of_channel};
use crate::web::graph::Graph;
use crate::web::model::LockRow;
use crate::web::read::{read, Read};
use crate::web::timeline::{Bar, Mark, Seen, Span, Timeline};

/// How the reader paces itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pacing {
    /// The longest time between two reads.
    pub(crate) refresh: Duration,
    /// The most commands per second the reader sends, on average.
    pub(crate) budget: u32,
    /// The shortest time between two reads, when releases ask for them.
    pub(crate) min_gap: Duration,
}

/// What the page shows: the last read, and how it went.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Grows with every read.
    pub(crate) revision: u64,
    /// The locks held, sorted by name.
    pub(crate) locks: Vec<LockRow>,
    /// The wait-for graph.
    pub(crate) graph: Graph,
    /// The timeline's bars.
    pub(crate) spans: Vec<Span>,
    /// The timeline's marks.
    pub(crate) marks: Vec<Mark>,
    /// The timeline's window.
    pub(crate) window_ms: u64,
    /// When the last good read was, on this process's clock (ms since the epoch).
    pub(crate) read_at_ms: Option<u64>,
    /// Why the last read failed (the server is unreachable, ...); `None` when it
    /// did not.
    pub(crate) error: Option<String>,
    /// Whether release messages come in (the subscription is up).
    pub(crate) live: bool,
    /// Keys at a lock's place not of distlock's layout.
    pub(crate) skipped: u64,
    /// The commands of the last read.
    pub(crate) commands: u64,
    /// Every command sent since the start.
    pub(crate) commands_total: u64,
    /// How long the last read took, in ms.
    pub(crate) read_ms: u64,
    /// When the last read started, in ms since the epoch on this process's clock:
    /// the pacing holds from one read's start to the next.
    pub(crate) read_started_ms: u64,
}

/// What the reader, the subscriber and the HTTP handlers share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The deployment and namespace.
    pub(crate) target: Target,
    /// The last snapshot.
    pub(crate) snapshot: watch::Sender<Arc<Snapshot>>,
    /// Marks not yet taken by the reader.
    marks: Mutex<Vec<Mark>>,
    /// Wakes the reader for a read sooner.
    wake: Notify,
    /// Whether the release subscription is up.
    live: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// The shared state of a page for `target`.
    pub(crate) fn new(target: Target) -> Arc<Self> {
        Arc::new(Self {
            target,
            snapshot: watch::channel(Arc::new(Snapshot::default())).0,
            marks: Mutex::new(Vec::new()),
            wake: Notify::new(),
            live: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Asks the reader for a read as soon as its pacing allows.
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Milliseconds since the epoch on this process's clock.
pub(crate) fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The pacing of commands: a bucket of `budget` tokens (one second's worth) that
/// refills at `budget` a second; a read takes its commands from it, and the next
/// read waits until the bucket is no longer in debt.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    balance: f64,
    at: Instant,
}

impl Bucket {
    fn new(budget: u32) -> Self {
        let rate = f64::from(budget.max(1));
        Self {
            rate,
            balance: rate,
            at: Instant::now(),
        }
    }

    /// Takes `commands` from the bucket; returns when the next read may start.
    fn spend(&mut self, commands: u64) -> Instant {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.rate;
        self.balance = (self.balance + refill).min(self.rate);
        self.at = now;
        #[allow(clippy::cast_precision_loss)]
        let cost = commands as f64;
        self.balance -= cost;
        if self.balance >= 0.0 {
            now
        } else {
            now + Duration::from_secs_f64(-self.balance / self.rate)
        }
    }
}

/// Reads the namespace for ever, publishing each read.
///
/// # Cancel safety
///
/// Read-only on the server: dropping it stops the reads.
pub(crate) async fn run_reader(shared: Arc<Shared>, pacing: Pacing, window: Duration) {
    let mut timeline = Timeline::new(u64::try_from(window.as_millis()).unwrap_or(u64::MAX));
    let mut bucket = Bucket::new(pacing.budget);
    let mut raw: Option<Raw> = None;
    let mut revision = 0u64;
    let mut total = 0u64;
    loop {
        let started = Instant::now();
        let started_ms = now_ms();
        let outcome = read_or_connect(&shared, &mut raw).await;
        let read_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        revision += 1;
        let marks: Vec<Mark> = match shared.marks.lock() {
            Ok(mut marks) => std::mem::take(&mut *marks),
            Err(_) => Vec::new(),
        };
        for mark in marks {
            timeline.mark(mark);
        }
        let commands = outcome.as_ref().map_or(0, |read| read.commands);
        total += commands;
        let previous = shared.snapshot.borrow().clone();
        let snapshot = match outcome {
            Ok(read) => {
                let now = now_ms();
                timeline.observe(now, seen(&read, now));
                let graph = graph_of(&read);
                Snapshot {
                    locks: read.locks,
                    graph,
                    read_at_ms: Some(now),
                    error: None,
                    skipped: read.skipped,
                    ..Snapshot::default()
                }
            }
            Err(message) => Snapshot {
                locks: previous.locks.clone(),
                graph: previous.graph.clone(),
                read_at_ms: previous.read_at_ms,
                error: Some(message),
                skipped: previous.skipped,
                ..Snapshot::default()
            },
        };
        shared.snapshot.send_replace(Arc::new(Snapshot {
            revision,
            spans: timeline.spans().to_vec(),
            marks: timeline.marks().cloned().collect(),
            window_ms: timeline.window_ms(),
            live: shared.live.load(std::sync::atomic::Ordering::Relaxed),
            commands,
            commands_total: total,
            read_ms,
            read_started_ms: started_ms,
            ..snapshot
        }));
        let allowed = bucket.spend(commands).max(started + pacing.min_gap);
        tokio::time::sleep_until(allowed).await;
        let deadline = started + pacing.refresh;
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => {}
            () = shared.wake.notified() => {
                // A burst of releases makes one read.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One read, connecting first when there is no connection; a failed read drops
/// the connection, so the next one dials again.
///
/// # Cancel safety
///
/// Read-only on the server.
async fn read_or_connect(shared: &Shared, raw: &mut Option<Raw>) -> Result<Read, String> {
    let servers = shared.target.describe();
    if raw.is_none() {
        match shared.target.raw(None).await {
            Ok(conn) => *raw = Some(conn),
            Err(err) => return Err(err.message),
        }
    }
    let Some(conn) = raw.as_mut() else {
        return Err(format!("no connection to {servers}"));
    };
    match read(conn, &shared.target.namespace).await {
        Ok(read) => Ok(read),
        Err(err) => {
            *raw = None;
            Err(format!("reading {servers}: Redis error: {err}"))
        }
    }
}

/// What a read saw, as timeline bars: each holder's hold, each waiter's wait, and
/// a wait of the subscribed clients of a lock whose waiters keep no place.
fn seen(read: &Read, now: u64) -> Vec<Seen> {
    let mut seen = Vec::new();
    for row in &read.locks {
        for holder in &row.holders {
            seen.push(Seen {
                name: row.name.clone(),
                lane: holder.owner.clone(),
                label: holder.who.as_ref().map(|who| who.service.clone()),
                bar: Bar::Hold,
                since_ms: holder.held_for_ms.map(|held| now.saturating_sub(held)),
            });
        }
        for waiter in &row.waiters {
            seen.push(wait(&row.name, waiter));
        }
        if row.waiters.is_empty() && row.listening.unwrap_or(0) > 0 {
            seen.push(wait(&row.name, "subscribers"));
        }
    }
    for (owner, name) in &read.waits {
        seen.push(wait(name, owner));
    }
    seen
}

fn wait(name: &str, lane: &str) -> Seen {
    Seen {
        name: name.to_owned(),
        lane: lane.to_owned(),
        label: None,
        bar: Bar::Wait,
        since_ms: None,
    }
}

/// The wait-for graph of a read.
fn graph_of(read: &Read) -> Graph {
    let holders = |name: &str| {
        read.locks
            .iter()
            .find(|row| row.name == name)
            .map(|row| row.holders.iter().map(|h| h.owner.clone()).collect())
            .unwrap_or_default()
    };
    let service = |owner: &str| {
        read.locks
            .iter()
            .flat_map(|row| &row.holders)
            .find(|holder| holder.owner == owner)
            .and_then(|holder| holder.who.as_ref())
            .map(|who| format!("{}:{}", who.service, who.pid))
    };
    Graph::build(&read.waits, holders, service)
}

/// Listens to every release channel of the namespace for ever, subscribing
/// again a second after the connection is lost.
///
/// # Cancel safety
///
/// Dropping it closes the subscription.
pub(crate) async fn run_subscriber(shared: Arc<Shared>) {
    loop {
        listen(&shared).await;
        shared
            .live
            .store(false, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One subscription, until its connection is lost. A Redis Cluster publishes on
/// shard channels, which take no pattern: there the page has periodic reads only.
///
/// # Cancel safety
///
/// Dropping it closes the subscription.
async fn listen(shared: &Shared) {
    let (push, mut pushes) = mpsc::unbounded_channel();
    let Ok(mut raw) = shared.target.raw(Some(push)).await else {
        return;
    };
    let namespace = shared.target.namespace.clone();
    let Raw::Single(conn) = &mut raw else {
        std::future::pending::<()>().await;
        return;
    };
    if conn.psubscribe(channel_pattern(&namespace)).await.is_err() {
        return;
    }
    shared
        .live
        .store(true, std::sync::atomic::Ordering::Relaxed);
    shared.wake();
    while let Some(PushInfo { kind, data }) = pushes.recv().await {
        match kind {
            PushKind::PMessage => {
                if let Some(mark) = mark_of(&namespace, &data) {
                    if let Ok(mut marks) = shared.marks.lock() {
                        marks.push(mark);
                    }
                    shared.wake();
                }
            }
            PushKind::Disconnection => return,
            _ => {}
        }
    }
}

/// The mark of a pattern message (`[pattern, channel, payload]`).
fn mark_of(namespace: &str, data: &[Value]) -> Option<Mark> {
    let bytes = |value: &Value| -> Option<Vec<u8>> {
        match value {
            Value::BulkString(bytes) => Some(bytes.clone()),
            Value::SimpleString(text) => Some(text.clone().into_bytes()),
            _ => None,
        }
    };
    let name = name_of_channel(namespace, &bytes(data.get(1)?)?)?;
    let payload = bytes(data.get(2)?)?;
    let what = match ReleaseMessage::parse(&payload) {
        ReleaseMessage::Release { next: Some(_) } => "handoff",
        ReleaseMessage::Release { next: None } => "release",
        ReleaseMessage::Withdraw { .. } => "withdraw",
        ReleaseMessage::ForceUnlock => "force_unlock",
        _ => return None,
    };
    Some(Mark {
        name: String::from_utf8_lossy(&name).into_owned(),
        what,
        at_ms: now_ms(),
    })
}
