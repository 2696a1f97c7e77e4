//! Distributed deadlock detection: wait-for records, and the walk that finds a
//! cycle through them across processes and clients.
//!
//! A waiter whose call chain holds locks, once it has waited longer than the
//! client's `deadlock_check_after`, publishes what it waits for: one record per
//! owner id its chain holds a lock under,
//!
//! ```text
//! <ns>:{<owner>}:waits = "<wait id> <locks held> <key of the lock waited for>"
//! ```
//!
//! `<wait id> <locks held> <beat> <key of the lock waited for>`, written again every
//! [`BEAT`] by a task of the waiting process with the next beat number (its proof
//! of life), with an expiry of a few beats, and deleted when the wait ends in any
//! way (granted, given up, dropped). Then it walks: the lock it waits for → the
//! owner ids holding it (read from the lock itself) → the record of each → the lock
//! that chain waits for → … Finding one of its own chain's owner ids again is a
//! cycle. Every edge of the cycle is then read again (the lock still held by that
//! owner, the record the same wait); a holder that released meanwhile, or a waiter
//! that left, breaks the cycle. Then, a few beats later, every record of the cycle
//! must have beaten again: a waiter whose process died (killed while it waited)
//! leaves a record that no longer beats, and is no member of a cycle.
//!
//! Every member of a cycle walks (each waits past the threshold), and each agrees
//! on one victim without talking to the others: the member holding the fewest
//! locks, and among those the greatest wait id. The victim's request fails with
//! [`LockError::Deadlock`](crate::LockError::Deadlock); its locks are released on
//! the way out (by its guards), and the others proceed.
//!
//! The walk costs nothing on the uncontended path, nothing for a chain that holds
//! no lock, and nothing until the threshold has passed; then one round trip per
//! lock and record read, and as many again to re-check a cycle.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use crate::backend::Conn;
use crate::keys::display_key;
use crate::layout::StoredLock;

/// How far a walk goes: the longest cycle it finds has this many locks.
const MAX_DEPTH: usize = 16;

/// How often a waiting chain writes its records again, with the next beat number.
pub(crate) const BEAT: Duration = Duration::from_millis(100);

/// How long a record outlives its last beat, in beats.
const RECORD_BEATS: u32 = 5;

/// How long a walk that found a cycle waits before it reads the records again: every
/// live member has beaten by then.
const PROOF_OF_LIFE: Duration = Duration::from_millis(250);

/// One waiting call chain's view, for its records and its walk.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    /// Unique per wait: `<client uuid>:<n>`.
    pub(crate) wait_id: Arc<str>,
    /// The owner ids the chain holds its locks under.
    pub(crate) owners: Vec<Arc<str>>,
    /// The key of the lock it waits for.
    pub(crate) lock: Vec<u8>,
    /// The client's namespace (the records' prefix).
    pub(crate) namespace: Arc<str>,
}

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    wait_id: String,
    held: u64,
    /// Its writer's beat number: it grows while its chain waits.
    beat: u64,
    lock: Vec<u8>,
}

impl Record {
    fn parse(value: &[u8]) -> Option<Self> {
        let mut words = value.splitn(4, |byte| *byte == b' ');
        let wait_id = String::from_utf8(words.next()?.to_vec()).ok()?;
        let held = std::str::from_utf8(words.next()?).ok()?.parse().ok()?;
        let beat = std::str::from_utf8(words.next()?).ok()?.parse().ok()?;
        let lock = words.next()?.to_vec();
        Some(Self {
            wait_id,
            held,
            beat,
            lock,
        })
    }

    /// Whether `later` is this record's wait, waiting for the same lock.
    fn same_wait(&self, later: &Record) -> bool {
        self.wait_id == later.wait_id && self.held == later.held && self.lock == later.lock
    }
}

/// A chain's records beating while it waits: dropping it stops the beat and
/// deletes the records.
#[derive(Debug)]
pub(crate) struct Beating {
    _stop: tokio_util::sync::DropGuard,
}

/// The key of the record of `owner` in `namespace`.
fn record_key(namespace: &str, owner: &str) -> String {
    format!("{namespace}:{{{owner}}}:waits")
}

impl Waiting {
    fn value(&self, beat: u64) -> Vec<u8> {
        let mut value = format!("{} {} {beat} ", self.wait_id, self.owners.len()).into_bytes();
        value.extend_from_slice(&self.lock);
        value
    }

    /// Starts the chain's beat: a task writes its records now and again every
    /// [`BEAT`], each time with the next beat number, until the returned guard is
    /// dropped; then it deletes them. A write that fails is tried at the next beat.
    pub(crate) fn beat(self, conn: Conn) -> Beating {
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        crate::detach::spawn(async move {
            let mut beat = 0u64;
            loop {
                let mut writer = conn.clone();
                if let Err(err) = self.publish(&mut writer, beat).await {
                    tracing::debug!(error = %err, "distlock: could not write wait-for records; trying again");
                }
                beat += 1;
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep(BEAT) => {}
                }
            }
            let mut writer = conn.clone();
            if let Err(err) = self.withdraw(&mut writer).await {
                tracing::debug!(error = %err, "distlock: could not delete wait-for records; they expire");
            }
        });
        Beating {
            _stop: stop.drop_guard(),
        }
    }

    /// Writes (or renews) the chain's records, beat `beat`, to last
    /// [`RECORD_BEATS`] beats.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may leave some records written: they expire, and the wait's end
    /// deletes them.
    async fn publish(&self, conn: &mut Conn, beat: u64) -> redis::RedisResult<()> {
        let ttl = (BEAT * RECORD_BEATS).as_millis() as u64;
        let value = self.value(beat);
        for owner in &self.owners {
            let () = redis::cmd("SET")
                .arg(record_key(&self.namespace, owner))
                .arg(&value)
                .arg("PX")
                .arg(ttl)
                .query_async(conn)
                .await?;
        }
        Ok(())
    }

    /// Deletes the chain's records.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may leave some records: they expire within a few beats.
    async fn withdraw(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        for owner in &self.owners {
            let _: i64 = conn.del(record_key(&self.namespace, owner)).await?;
        }
        Ok(())
    }

    /// Walks the wait-for graph from the lock this chain waits for. `Some(cycle)`
    /// (the names of its locks, from the one this chain waits for) when a cycle
    /// through this chain was found, every edge re-checked, and this chain is its
    /// victim.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping it changes nothing.
    pub(crate) async fn walk(&self, conn: &mut Conn) -> redis::RedisResult<Option<Vec<String>>> {
        let mine: HashSet<&str> = self.owners.iter().map(|owner| owner.as_ref()).collect();
        let mut seen: HashSet<Vec<u8>> = HashSet::from([self.lock.clone()]);
        // Paths from the lock this chain waits for: each step a lock, an owner
        // holding it, and that owner's record (what its chain waits for next).
        let mut frontier: Vec<Vec<Step>> = vec![Vec::new()];
        for _ in 0..MAX_DEPTH {
            let mut next = Vec::new();
            for path in frontier {
                let lock = path
                    .last()
                    .map_or(&self.lock, |step| &step.record.lock)
                    .clone();
                for holder in holders(conn, &lock).await? {
                    if mine.contains(holder.as_str()) {
                        return self.confirm(conn, path, lock, holder).await;
                    }
                    let Some(record) = read_record(conn, &self.namespace, &holder).await? else {
                        continue;
                    };
                    if !seen.insert(record.lock.clone()) {
                        continue;
                    }
                    let mut longer = path.clone();
                    longer.push(Step {
                        lock: lock.clone(),
                        holder,
                        record,
                    });
                    next.push(longer);
                }
            }
            if next.is_empty() {
                return Ok(None);
            }
            frontier = next;
        }
        Ok(None)
    }

    /// A cycle: the steps of `path`, then `last`, held by `holder`, one of this
    /// chain's owner ids. Reads every edge again, and picks the victim.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping it changes nothing.
    async fn confirm(
        &self,
        conn: &mut Conn,
        path: Vec<Step>,
        last: Vec<u8>,
        holder: String,
    ) -> redis::RedisResult<Option<Vec<String>>> {
        for step in &path {
            let held = holders(conn, &step.lock).await?.contains(&step.holder);
            let record = read_record(conn, &self.namespace, &step.holder).await?;
            if !held || !record.is_some_and(|record| step.record.same_wait(&record)) {
                return Ok(None);
            }
        }
        if !holders(conn, &last).await?.contains(&holder) {
            return Ok(None);
        }
        // Proof of life: every other member's record beats on.
        tokio::time::sleep(PROOF_OF_LIFE).await;
        for step in &path {
            let record = read_record(conn, &self.namespace, &step.holder).await?;
            let alive = record.is_some_and(|record| {
                step.record.same_wait(&record) && record.beat > step.record.beat
            });
            if !alive {
                return Ok(None);
            }
        }
        // The victim: the fewest locks held, then the greatest wait id.
        let members = path
            .iter()
            .map(|step| (step.record.wait_id.as_str(), step.record.held))
            .chain([(&*self.wait_id, self.owners.len() as u64)]);
        let victim = members
            .min_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(id, _)| id.to_owned());
        if victim.as_deref() != Some(&*self.wait_id) {
            return Ok(None);
        }
        let cycle = path
            .iter()
            .map(|step| display_key(&step.lock))
            .chain([display_key(&last)])
            .collect();
        Ok(Some(cycle))
    }
}

/// One step of a walk: `lock` is held by `holder`, whose chain waits for the lock
/// of `record`.
#[derive(Debug, Clone)]
struct Step {
    lock: Vec<u8>,
    holder: String,
    record: Record,
}

/// The owner ids that hold the lock at `key`: its hash's holder fields (see
/// `layout.rs`); none when the key holds what distlock did not write.
///
/// # Cancel safety
///
/// Read-only: dropping it changes nothing.
async fn holders(conn: &mut Conn, key: &[u8]) -> redis::RedisResult<Vec<String>> {
    let fields: Vec<(String, String)> = match conn.hgetall(key).await {
        Ok(fields) => fields,
        Err(err) if err.code() == Some("WRONGTYPE") => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    Ok(StoredLock::from_fields(fields)
        .map(|lock| lock.holders().keys().cloned().collect())
        .unwrap_or_default())
}

/// The record of `owner`'s chain, if it has one.
///
/// # Cancel safety
///
/// Read-only: dropping it changes nothing.
async fn read_record(
    conn: &mut Conn,
    namespace: &str,
    owner: &str,
) -> redis::RedisResult<Option<Record>> {
    let value: Option<Vec<u8>> = conn.get(record_key(namespace, owner)).await?;
    Ok(value.as_deref().and_then(Record::parse))
}
