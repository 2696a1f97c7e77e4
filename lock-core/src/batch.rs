//! Group commit of releases: the releases that are ready at the same moment go to
//! Redis as one run of `release.lua` (which takes any number of releases and
//! answers each as if it ran alone), so that many tasks releasing at once cost the
//! server one script call, one request to parse and one reply to write, instead of
//! one each.
//!
//! Nothing waits to fill a batch: a release finds a free sending slot and goes at
//! once, alone if nothing else is ready, sent by its own task (no hop through
//! another). Only while [`IN_FLIGHT`] batches are on the way do releases queue, and
//! the queue goes as the next batch, from a task of its own, when one returns. So one
//! task sees the round trip it had, and under load the batches grow with the load.
//!
//! Only for one endpoint (a single server, Sentinel's master): a script's keys must
//! share a cluster slot, and a Redlock release is one request per node.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use crate::backend::Conn;
use crate::detach::spawn;
use crate::keys::LockKeys;
use crate::scripts::Scripts;

/// How many batches may be on the way at once.
const IN_FLIGHT: usize = 2;

/// The most releases in one batch (three or four keys and five arguments each).
const MAX_BATCH: usize = 64;

/// One numbered release of one owner, as `release.lua` takes it (cheap to clone:
/// the keys and the owner id are shared).
#[derive(Clone, Debug)]
pub(crate) struct Item {
    /// The lock's keys: the lock, its release channel, its `:freed` record.
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Arc<str>,
    pub(crate) lease_ms: u64,
    pub(crate) seq: u64,
    pub(crate) floor: u64,
    /// The waiter of this client that the lock goes to if this release gives back
    /// the last hold (see `handoff.rs`).
    pub(crate) successor: Option<Arc<Successor>>,
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
    /// What the client writes of the successor as the holder (`who.rs`).
    pub(crate) who: Arc<str>,
}

impl Successor {
    /// As `release.lua` takes it: "<owner> <lease> <seq> <floor> <fencing> <who>".
    fn encode(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.owner,
            self.lease_ms,
            self.seq,
            self.floor,
            u8::from(self.fencing),
            self.who
        )
    }
}

/// The answer of one release: `release.lua`'s reply for it.
type Answer = redis::RedisResult<Vec<i64>>;

/// The releases of one client: sent in batches to one endpoint, else one by one.
pub(crate) struct Batcher {
    scripts: Arc<Scripts>,
    publish: &'static str,
    remember_ms: u64,
    /// Whether releases go in batches (one endpoint), or each alone (a cluster, whose
    /// script keys must share a slot, or a Redlock node).
    batches: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queue: Vec<(Item, oneshot::Sender<Answer>)>,
    in_flight: usize,
}

impl Batcher {
    pub(crate) fn new(
        scripts: Arc<Scripts>,
        publish: &'static str,
        remember_ms: u64,
        batches: bool,
    ) -> Self {
        Self {
            scripts,
            publish,
            remember_ms,
            batches,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `item` on `conn`, in a batch with the releases ready at the same moment.
    ///
    /// # Cancel safety
    ///
    /// Callers run it to the end (a release is always finished in the background,
    /// see `release.rs`). Dropped while it sends a batch, the other releases of that
    /// batch are answered with an error of unknown outcome (their callers retry them
    /// under the same number, which the script applies at most once), and the
    /// releases queued meanwhile are still sent.
    pub(crate) async fn release(self: &Arc<Self>, mut conn: Conn, item: Item) -> Answer {
        if !self.batches {
            let replies = self.run(&[&item], &mut conn).await?;
            return match <[Vec<i64>; 1]>::try_from(replies) {
                Ok([reply]) => Ok(reply),
                Err(replies) => Err(unexpected_count(replies.len(), 1)),
            };
        }
        let (answer, answered) = oneshot::channel();
        let batch = {
            let mut state = self.state();
            state.queue.push((item, answer));
            if state.in_flight < IN_FLIGHT {
                state.in_flight += 1;
                Some(take(&mut state.queue))
            } else {
                None
            }
        };
        if let Some(batch) = batch {
            // Hands the sending slot on when the batch is answered (or this future
            // dropped): to a task for what queued meanwhile, or back.
            let slot = Slot {
                batcher: self.clone(),
                conn: conn.clone(),
            };
            self.send(conn, batch).await;
            drop(slot);
        }
        answered.await.unwrap_or_else(|_| {
            // The sending task was dropped with its runtime: the outcome is unknown.
            Err(redis::RedisError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "the release was not answered: its runtime shut down",
            )))
        })
    }

    /// Sends `batch`, then whatever queued meanwhile, until the queue is empty.
    async fn send_all(
        self: Arc<Self>,
        conn: Conn,
        mut batch: Vec<(Item, oneshot::Sender<Answer>)>,
    ) {
        loop {
            self.send(conn.clone(), batch).await;
            let mut state = self.state();
            if state.queue.is_empty() {
                state.in_flight -= 1;
                return;
            }
            batch = take(&mut state.queue);
        }
    }

    /// One run of `release.lua` for every release of `batch`, each answered in turn.
    async fn send(&self, mut conn: Conn, batch: Vec<(Item, oneshot::Sender<Answer>)>) {
        let items: Vec<&Item> = batch.iter().map(|(item, _)| item).collect();
        let result = self.run(&items, &mut conn).await;
        match result {
            Ok(replies) if replies.len() == batch.len() => {
                for ((_, answer), reply) in batch.into_iter().zip(replies) {
                    let _ = answer.send(Ok(reply));
                }
            }
            Ok(replies) => {
                let err = unexpected_count(replies.len(), batch.len());
                for (_, answer) in batch {
                    let _ = answer.send(Err(err.clone()));
                }
            }
            Err(err) => {
                for (_, answer) in batch {
                    let _ = answer.send(Err(err.clone()));
                }
            }
        }
    }
}

/// A sending slot in use by the task that sends a batch itself.
struct Slot {
    batcher: Arc<Batcher>,
    conn: Conn,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let next = {
            let mut state = self.batcher.state();
            if state.queue.is_empty() {
                state.in_flight -= 1;
                return;
            }
            take(&mut state.queue)
        };
        spawn(self.batcher.clone().send_all(self.conn.clone(), next));
    }
}

/// The next batch: the oldest [`MAX_BATCH`] releases of `queue`.
fn take<T>(queue: &mut Vec<T>) -> Vec<T> {
    let rest = queue.split_off(queue.len().min(MAX_BATCH));
    std::mem::replace(queue, rest)
}

impl Batcher {
    /// Runs `release.lua` once for `items`, in order: one reply per item.
    async fn run(&self, items: &[&Item], conn: &mut Conn) -> redis::RedisResult<Vec<Vec<i64>>> {
        let mut invocation = self.scripts.release.prepare_invoke();
        for item in items {
            invocation
                .key(&item.keys.lock)
                .key(item.keys.channel())
                .key(item.keys.freed_for(&item.owner));
            if item.successor.as_ref().is_some_and(|next| next.fencing) {
                invocation.key(item.keys.fence());
            }
        }
        invocation.arg(self.publish).arg(self.remember_ms);
        for item in items {
            invocation
                .arg(&*item.owner)
                .arg(item.lease_ms)
                .arg(item.seq)
                .arg(item.floor);
            match &item.successor {
                Some(next) => invocation.arg(next.encode()),
                None => invocation.arg(""),
            };
        }
        invocation.invoke_async(conn).await
    }
}

fn unexpected_count(got: usize, sent: usize) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected script reply",
        format!("release.lua answered {got} releases of {sent}"),
    ))
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
