//! Group commit: the new acquisitions, and the releases, that are ready at the same
//! moment go to Redis as one run of `acquire.lua` or `release.lua` (each takes any
//! number of requests and answers each as if it ran alone), so that many tasks
//! locking at once cost the server one script call, one request to parse and one
//! reply to write, instead of one each.
//!
//! Nothing waits to fill a batch: a request finds a free sending slot and goes at
//! once, alone if nothing else is ready, sent by its own task (no hop through
//! another). Only while [`IN_FLIGHT`] batches are on the way do requests queue, and
//! the queue goes as the next batch, from a task of its own, when one returns. So one
//! task sees the round trip it had, and under load the batches grow with the load.
//!
//! Only for one endpoint (a single server, Sentinel's master): a script's keys must
//! share a cluster slot, and a Redlock request is one request per node.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::backend::Conn;
use crate::detach::spawn;
use crate::keys::LockKeys;
use crate::layout::args::{self, Args, Call, ReleaseRun};
use crate::library::{Invocation, Script};
use crate::scripts::{request_answer, unexpected_reply, Scripts};
use crate::sync::locked;

/// A request that runs in batches: it adds its keys and arguments to a run of its
/// script, which answers it with one reply of its own.
pub(crate) trait Request: Clone + Send + Sync + 'static {
    /// The script's name, for errors.
    const SCRIPT: &'static str;
    /// Adds this request's keys and arguments (after those of the requests before
    /// it in the batch).
    fn add_to(&self, invocation: &mut Invocation<'_>);
}

/// How many batches may be on the way at once.
const IN_FLIGHT: usize = 2;

/// The most requests in one batch (three or four keys and five or ten arguments
/// each). The server runs a batch atomically, serving nobody else meanwhile: at
/// 6–13 µs a request (BENCHMARKS.md, "Group commit's batches"), 16 keeps a run
/// under 250 µs, and the script call's own cost (3–4 µs) is already shared by so
/// many that a larger batch would save nothing measurable.
pub(crate) const MAX_BATCH: usize = 16;

/// The most renewals in one run of `renew.lua`: a renewal costs about a third of
/// an acquisition, so 64 keep a run under 250 µs too.
pub(crate) const MAX_RENEWALS: usize = 64;

/// One numbered acquisition of one owner (not a re-entry), as `acquire.lua` takes
/// it (cheap to clone: the keys and ids are shared).
#[derive(Clone, Debug)]
pub(crate) struct Acquisition {
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Arc<str>,
    pub(crate) lease_ms: u64,
    pub(crate) fencing: bool,
    pub(crate) seq: u64,
    pub(crate) floor: u64,
    /// A re-entry: never takes the lock (sent alone, under `allow-oom`).
    pub(crate) reentry: bool,
    /// For a read hold: the owner of the write hold of the caller's chain.
    pub(crate) writer: Option<Arc<str>>,
    /// Whether the caller waits if it cannot have the lock now.
    pub(crate) stays: bool,
    /// What the client says of the holder (`who.rs`).
    pub(crate) who: Option<Arc<str>>,
}

impl Request for Acquisition {
    const SCRIPT: &'static str = "acquire.lua";

    fn add_to(&self, invocation: &mut Invocation<'_>) {
        invocation.push(&args::Acquire {
            lock: &self.keys.lock,
            owner: &self.owner,
            lease_ms: self.lease_ms,
            fencing: self.fencing,
            seq: self.seq,
            floor: self.floor,
            reentry: self.reentry,
            kind: self.keys.kind,
            writer: self.writer.as_deref().unwrap_or(""),
            stays: self.stays,
            who: self.who.as_deref().unwrap_or(""),
        });
    }
}

/// One numbered release of one owner, as `release.lua` takes it (cheap to clone:
/// the keys and the owner id are shared).
#[derive(Clone, Debug)]
pub(crate) struct Item {
    /// The lock's keys: the lock, its release channel, its owner's `:freed:` record.
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Arc<str>,
    pub(crate) lease_ms: u64,
    pub(crate) seq: u64,
    pub(crate) floor: u64,
    /// The waiter of this client that the lock goes to if this release gives back
    /// the last hold (see `handoff.rs`).
    pub(crate) successor: Option<Arc<Successor>>,
    /// Whether a final release leaves its record for a retry (`release.lua`,
    /// "Records"): `false` only when the client can tell an applied final release
    /// from a lost one without it (`release.rs`).
    pub(crate) record: bool,
}

/// A waiter's owner that a final release hands the lock to, and how it holds it:
/// the operation of that owner that the hand-off is (numbered as an acquire).
#[derive(Debug)]
pub(crate) struct Successor {
    pub(crate) owner: Arc<str>,
    pub(crate) lease_ms: u64,
    pub(crate) seq: u64,
    pub(crate) floor: u64,
    pub(crate) fencing: bool,
    /// What the client writes of the successor as the holder (`who.rs`): `None`
    /// when its first renewal names it instead.
    pub(crate) who: Option<Arc<str>>,
}

impl Successor {
    /// As `release.lua` takes it.
    fn args(&self) -> args::Successor<'_> {
        args::Successor {
            owner: &self.owner,
            lease_ms: self.lease_ms,
            seq: self.seq,
            floor: self.floor,
            fencing: self.fencing,
            who: self.who.as_deref().unwrap_or(""),
        }
    }
}

impl Request for Item {
    const SCRIPT: &'static str = "release.lua";

    fn add_to(&self, invocation: &mut Invocation<'_>) {
        invocation.push(&args::Release {
            lock: &self.keys.lock,
            owner: &self.owner,
            lease_ms: self.lease_ms,
            seq: self.seq,
            floor: self.floor,
            successor: self.successor.as_deref().map(Successor::args),
            record: self.record,
        });
    }
}

/// The answer of one request: its script's reply for it.
type Answer = redis::RedisResult<Vec<i64>>;

/// A request waiting for its batch, and where its answer goes.
type Queued<R> = (R, oneshot::Sender<Answer>);

/// The requests of one kind of one client: sent in batches to one endpoint, else
/// one by one.
pub(crate) struct Batcher<R: Request> {
    script: Script,
    /// The script's arguments before the requests' own.
    header: Call,
    /// Whether requests go in batches (one endpoint), or each alone (a cluster, whose
    /// script keys must share a slot, or a Redlock node).
    batches: bool,
    state: Mutex<State<R>>,
}

struct State<R> {
    queue: Vec<Queued<R>>,
    in_flight: usize,
}

/// The releases of a client, as one run of `release.lua` each batch.
pub(crate) fn releases(
    scripts: &Scripts,
    publish: &'static str,
    remember_ms: u64,
    batches: bool,
) -> Batcher<Item> {
    let header = ReleaseRun {
        publish,
        remember_ms,
    }
    .to_call();
    Batcher::new(scripts.release.clone(), header, batches)
}

/// The new acquisitions of a client, as one run of `acquire.lua` each batch.
pub(crate) fn acquisitions(scripts: &Scripts, batches: bool) -> Batcher<Acquisition> {
    Batcher::new(scripts.acquire.clone(), Call::default(), batches)
}

impl<R: Request> Batcher<R> {
    fn new(script: Script, header: Call, batches: bool) -> Self {
        Self {
            script,
            header,
            batches,
            state: Mutex::new(State {
                queue: Vec::new(),
                in_flight: 0,
            }),
        }
    }

    /// Runs `item` on `conn`, in a batch with the requests ready at the same moment.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it sends a batch, the other requests of that batch are
    /// answered with an error of unknown outcome (their callers retry or replay them
    /// under the same number, which the script applies at most once), and the
    /// requests queued meanwhile are still sent. Dropped while queued, its request
    /// is still sent, and its answer dropped: callers whose request must be settled
    /// (every release, every acquisition) run it inside `Detached`.
    pub(crate) async fn submit(self: &Arc<Self>, mut conn: Conn, item: R) -> Answer {
        if !self.batches {
            let mut replies = self.run(&[&item], &mut conn).await?;
            return replies
                .pop()
                .unwrap_or_else(|| Err(unexpected_count(R::SCRIPT, 0, 1)));
        }
        let (answer, answered) = oneshot::channel();
        let batch = {
            let mut state = locked(&self.state);
            state.queue.push((item, answer));
            (state.in_flight < IN_FLIGHT).then(|| {
                state.in_flight += 1;
                take(&mut state.queue)
            })
        };
        if let Some(batch) = batch {
            // Hands the sending slot on when the batch is answered (or this future
            // dropped): to a task for what queued meanwhile, or back.
            let slot = Sending {
                batcher: self.clone(),
                conn: conn.clone(),
            };
            self.send(conn, batch).await;
            drop(slot);
        }
        answered.await.unwrap_or_else(|_| {
            // What sent its batch was dropped midway: the outcome is unknown.
            Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                format!(
                    "the {} request was not answered: the call sending its batch was \
                     dropped (its caller gave up, or its runtime shut down)",
                    R::SCRIPT
                ),
            )))
        })
    }

    /// Sends `batch`, then whatever queued meanwhile, until the queue is empty.
    ///
    /// # Cancel safety
    ///
    /// Runs in a task of its own (spawned when a sending slot is handed on), so it
    /// is dropped only with its runtime: the requests of the batch under way and
    /// those queued are then answered with an error of unknown outcome by their
    /// dropped senders (see [`submit`](Self::submit)).
    async fn send_all(self: Arc<Self>, conn: Conn, batch: Vec<Queued<R>>) {
        let mut next = Some(batch);
        while let Some(batch) = next {
            self.send(conn.clone(), batch).await;
            next = self.next_batch();
        }
    }

    /// What queued while a batch was on the way, as the next batch; `None`, and the
    /// sending slot given back, when nothing did.
    fn next_batch(&self) -> Option<Vec<Queued<R>>> {
        let mut state = locked(&self.state);
        if state.queue.is_empty() {
            state.in_flight -= 1;
            return None;
        }
        Some(take(&mut state.queue))
    }

    /// Runs the script once for `items`, in order: one answer per item (an error
    /// when the script answered another number of requests).
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, the run may or may not have been applied; its callers tell
    /// their requests' callers so (see [`submit`](Self::submit)).
    async fn run(&self, items: &[&R], conn: &mut Conn) -> redis::RedisResult<Vec<Answer>> {
        let mut invocation = self.script.invoke(&self.header);
        for item in items {
            item.add_to(&mut invocation);
        }
        let replies: Vec<redis::Value> = invocation.invoke_async(conn).await?;
        if replies.len() != items.len() {
            return Err(unexpected_count(R::SCRIPT, replies.len(), items.len()));
        }
        Ok(replies
            .into_iter()
            .map(|reply| request_answer(R::SCRIPT, reply))
            .collect())
    }

    /// One run of the script for every request of `batch`, each answered in turn.
    ///
    /// # Cancel safety
    ///
    /// Dropped midway, the requests of `batch` are answered with an error of
    /// unknown outcome by their dropped senders (see [`submit`](Self::submit)).
    async fn send(&self, mut conn: Conn, batch: Vec<Queued<R>>) {
        let items: Vec<&R> = batch.iter().map(|(item, _)| item).collect();
        let replies = self.run(&items, &mut conn).await;
        // A run that failed answers every request with its error.
        let replies = replies.unwrap_or_else(|err| vec![Err(err); batch.len()]);
        for ((_, answer), reply) in batch.into_iter().zip(replies) {
            let _ = answer.send(reply);
        }
    }
}

/// A sending slot in use by the task that sends a batch itself.
struct Sending<R: Request> {
    batcher: Arc<Batcher<R>>,
    conn: Conn,
}

impl<R: Request> Drop for Sending<R> {
    fn drop(&mut self) {
        if let Some(next) = self.batcher.next_batch() {
            spawn(self.batcher.clone().send_all(self.conn.clone(), next));
        }
    }
}

/// The next batch: the oldest [`MAX_BATCH`] releases of `queue`.
fn take<T>(queue: &mut Vec<T>) -> Vec<T> {
    let rest = queue.split_off(queue.len().min(MAX_BATCH));
    std::mem::replace(queue, rest)
}

fn unexpected_count(script: &'static str, got: usize, sent: usize) -> redis::RedisError {
    unexpected_reply(script, &format_args!("{got} requests of {sent}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_takes_the_oldest_releases_up_to_the_limit() {
        let mut queue: Vec<usize> = (0..MAX_BATCH + 3).collect();
        let batch = take(&mut queue);
        assert_eq!(batch, (0..MAX_BATCH).collect::<Vec<_>>());
        assert_eq!(queue, vec![MAX_BATCH, MAX_BATCH + 1, MAX_BATCH + 2]);
        assert_eq!(take(&mut queue).len(), 3);
        assert!(queue.is_empty());
    }
}
