//! Distributed deadlock detection: wait-for records, and the walk that finds a
//! cycle through them across processes and clients.
//!
//! A waiter whose call chain holds locks announces what it waits for early in its
//! wait, after 100 ms ([`ANNOUNCE`]) or its client's `deadlock_check_after` if that
//! is shorter: one record per owner id its chain holds a lock under,
//!
//! ```text
//! <ns>:{<owner>}:waits = "<wait id> <locks held> <beat> <key of the lock waited for>"
//! ```
//!
//! written once (beat 0), to last until a little after its threshold. From its
//! threshold on, a task of the waiting process writes it again every [`BEAT`] with
//! the next beat number (its proof of life), with an expiry of a few beats; the
//! wait's end deletes it in any way it ends (granted, given up, dropped). Then, at
//! its threshold and every threshold after, the chain walks: the lock it waits for →
//! the owner ids holding it (read from the lock itself) → the record of each → the
//! lock that chain waits for → … Finding one of its own chain's owner ids again is a
//! cycle. Every edge of the cycle is then read again (the lock still held by that
//! owner, the record the same wait); a holder that released meanwhile, or a waiter
//! that left, breaks the cycle. Then, a few beats later, every record of the cycle
//! must have beaten again: a waiter whose process died (killed while it waited)
//! leaves a record that no longer beats, and is no member of a cycle; nor, yet, is
//! one still short of its threshold (announced, not beating): a knot with such a
//! member waits until it beats (or its record expires).
//!
//! Every member of a cycle walks (each waits past its threshold) the whole graph it
//! can reach, and takes its knot: the chains in a cycle with it (with read locks
//! and semaphores, several cycles can share members). Each member agrees on one
//! victim per knot without talking to the others: the first member, in the order
//! of fewest locks held and then greatest wait id, without which no cycle is left,
//! or when none is, the first member (the next check finds the cycles left).
//!
//! So that every member decides on the whole knot, whatever the thresholds: a
//! chain's record is there from early in its wait, whatever its threshold, and
//! nobody acts on a knot until all its members beat (each past its own threshold);
//! and a member acts only when a look at least [`SETTLE`] before found the same
//! members, so that a chain waiting since that look has announced itself by now
//! and is counted. The victim's request fails with
//! [`LockError::Deadlock`](crate::LockError::Deadlock); its locks are released on
//! the way out (by its guards), and the others proceed.
//!
//! The bound: a knot is broken within `T + 2 × max(t, w) + w` after the last of
//! its waits began, where `T` is its longest threshold, `t` its victim's, and `w`
//! how long a look that finds a knot takes ([`PROOF_OF_LIFE`] and round trips):
//! every member beats by `T`; the victim's next look finds the whole knot, one
//! look later ([`SETTLE`] is shorter than `w`) it acts, and that look ends `w`
//! later.
//!
//! The cost: nothing on the uncontended path, nothing for a chain that holds no
//! lock, nothing for a wait shorter than [`ANNOUNCE`]; a longer wait writes one
//! record per owner id of its chain, and deletes them at its end; past its
//! threshold, a write per owner id every [`BEAT`], and one round trip per lock and
//! record read, and as many again to re-check a cycle, at every check.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use tokio::time::Instant;

use crate::backend::Conn;
use crate::layout::StoredLock;
use crate::layout::{display_key, wait_record_key};

/// How far a walk goes: the longest cycle it finds has this many locks.
const MAX_DEPTH: usize = 16;

/// How often a waiting chain writes its records again, with the next beat number.
pub(crate) const BEAT: Duration = Duration::from_millis(100);

/// How long a wait goes before its chain announces what it waits for, when its
/// threshold is longer: so that a member with a long threshold is seen by those
/// with short ones (and a knot with it is not broken in part), while a short wait
/// writes nothing.
pub(crate) const ANNOUNCE: Duration = Duration::from_millis(100);

/// How long before a look a member's earlier look must have found the same knot
/// for it to act: [`ANNOUNCE`] and a margin for a late write, so that every chain
/// that was waiting at the earlier look has announced itself by the later one.
pub(crate) const SETTLE: Duration = Duration::from_millis(200);

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

/// A knot a walk found: the chains in a cycle with the walking one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Knot {
    /// The wait ids of its members, the walking chain's own included, in order.
    pub(crate) members: Vec<String>,
    /// When the walking chain is the knot's victim: the names of the locks of a
    /// cycle through it, from the one it waits for.
    pub(crate) cycle: Option<Vec<String>>,
}

/// A chain's records beating while it waits: dropping it stops the beat and
/// deletes the records.
#[derive(Debug)]
pub(crate) struct Beating {
    _stop: tokio_util::sync::DropGuard,
}

impl Waiting {
    /// Starts the chain's records: a task writes them now (beat 0, to last until a
    /// few beats past `beats_from`), then from `beats_from` on every [`BEAT`], each
    /// time with the next beat number, until the returned guard is dropped; then it
    /// deletes them. A write that fails is tried at the next beat.
    pub(crate) fn beat(self, conn: Conn, beats_from: Instant) -> Beating {
        let stop = tokio_util::sync::CancellationToken::new();
        let stopped = stop.clone();
        crate::detach::spawn(async move {
            let mut beat = 0u64;
            loop {
                let quiet = beats_from.saturating_duration_since(Instant::now());
                let mut writer = conn.clone();
                if let Err(err) = self.publish(&mut writer, beat, quiet).await {
                    tracing::debug!(error = %err, "distlock: could not write wait-for records; trying again");
                }
                beat += 1;
                let wake = beats_from.max(Instant::now() + BEAT);
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep_until(wake) => {}
                }
            }
            let mut writer = conn.clone();
            if let Err(err) = self.remove_record(&mut writer).await {
                tracing::debug!(error = %err, "distlock: could not delete wait-for records; they expire");
            }
        });
        Beating {
            _stop: stop.drop_guard(),
        }
    }

    /// Writes (or renews) the chain's records, beat `beat`, to last `quiet` (until
    /// the chain beats) and [`RECORD_BEATS`] beats more.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may leave some records written: they expire, and the wait's end
    /// deletes them.
    async fn publish(&self, conn: &mut Conn, beat: u64, quiet: Duration) -> redis::RedisResult<()> {
        let ttl = (quiet + BEAT * RECORD_BEATS).as_millis() as u64;
        // `<wait id> <locks held> <beat> <lock>`, as `Record::parse` reads it.
        let mut value = format!("{} {} {beat} ", self.wait_id, self.owners.len()).into_bytes();
        value.extend_from_slice(&self.lock);
        for owner in &self.owners {
            let () = redis::cmd("SET")
                .arg(wait_record_key(&self.namespace, owner))
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
    async fn remove_record(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        for owner in &self.owners {
            let _: i64 = conn.del(wait_record_key(&self.namespace, owner)).await?;
        }
        Ok(())
    }

    /// Walks the wait-for graph from the lock this chain waits for. `Some(knot)`
    /// when this chain is in a knot of chains waiting for each other (the chains
    /// that wait, directly or not, for this one and for which it waits), every edge
    /// of the knot re-checked and every member alive; with the locks of a cycle
    /// through this chain when it is the knot's victim ([`victim`]).
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping it changes nothing.
    pub(crate) async fn walk(&self, conn: &mut Conn) -> redis::RedisResult<Option<Knot>> {
        let graph = self.explore(conn).await?;
        let knot = graph.knot(&self.wait_id);
        if knot.len() < 2 || !self.confirm(conn, &graph, &knot).await? {
            return Ok(None);
        }
        let cycle = if victim(&graph, &knot) == Some(&*self.wait_id) {
            graph.cycle(&self.wait_id, &knot)
        } else {
            None
        };
        let mut members: Vec<String> = knot.iter().map(|member| (*member).to_owned()).collect();
        members.sort_unstable();
        Ok(Some(Knot { members, cycle }))
    }

    /// Reads the wait-for graph reachable from this chain: the lock it waits for,
    /// its holders, the records of their chains, the locks those wait for, and so
    /// on, up to [`MAX_LOCKS`] locks.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping it changes nothing.
    async fn explore(&self, conn: &mut Conn) -> redis::RedisResult<Graph> {
        let mine: HashSet<&str> = self.owners.iter().map(|owner| owner.as_ref()).collect();
        let me = self.wait_id.to_string();
        let mut graph = Graph::default();
        graph.chains.insert(
            me.clone(),
            Chain {
                lock: self.lock.clone(),
                held: self.owners.len() as u64,
                seen: None,
            },
        );
        let mut queue = VecDeque::from([self.lock.clone()]);
        let mut queued: HashSet<Vec<u8>> = HashSet::from([self.lock.clone()]);
        while let Some(lock) = queue.pop_front() {
            if graph.locks.len() >= MAX_LOCKS {
                break;
            }
            let mut edges = Vec::new();
            for holder in holders(conn, &lock).await? {
                if mine.contains(holder.as_str()) {
                    edges.push((holder, me.clone()));
                    continue;
                }
                let Some(record) = read_record(conn, &self.namespace, &holder).await? else {
                    continue;
                };
                if queued.insert(record.lock.clone()) {
                    queue.push_back(record.lock.clone());
                }
                edges.push((holder.clone(), record.wait_id.clone()));
                graph.chains.entry(record.wait_id.clone()).or_insert(Chain {
                    lock: record.lock.clone(),
                    held: record.held,
                    seen: Some((holder, record)),
                });
            }
            graph.locks.insert(lock, edges);
        }
        Ok(graph)
    }

    /// Reads every edge of `knot` again (each holder still holds its lock, each
    /// record is the same wait); then, a few beats later, every other member's
    /// record must have beaten again: a waiter whose process died is no member.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping it changes nothing.
    async fn confirm(
        &self,
        conn: &mut Conn,
        graph: &Graph,
        knot: &HashSet<&str>,
    ) -> redis::RedisResult<bool> {
        for member in knot {
            let Some(chain) = graph.chains.get(*member) else {
                return Ok(false);
            };
            let edges = graph
                .locks
                .get(&chain.lock)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let now = holders(conn, &chain.lock).await?;
            for (holder, target) in edges.iter().filter(|(_, t)| knot.contains(t.as_str())) {
                if !now.contains(holder) {
                    return Ok(false);
                }
                if let Some((_, seen)) = graph.chains.get(target).and_then(|c| c.seen.as_ref()) {
                    let record = read_record(conn, &self.namespace, holder).await?;
                    if !record.is_some_and(|record| seen.same_wait(&record)) {
                        return Ok(false);
                    }
                }
            }
        }
        // Proof of life: every other member's record beats on.
        tokio::time::sleep(PROOF_OF_LIFE).await;
        for member in knot {
            let Some((owner, seen)) = graph.chains.get(*member).and_then(|c| c.seen.as_ref())
            else {
                continue;
            };
            let record = read_record(conn, &self.namespace, owner).await?;
            if !record.is_some_and(|record| seen.same_wait(&record) && record.beat > seen.beat) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The most locks a walk reads.
const MAX_LOCKS: usize = 4 * MAX_DEPTH;

/// The wait-for graph a walk read: the chains that wait, and the locks they wait for.
#[derive(Debug, Default)]
struct Graph {
    /// Each waiting chain met, by wait id (the walking chain's own included).
    chains: HashMap<String, Chain>,
    /// Each lock read: its holders, each with the wait id of its chain.
    locks: HashMap<Vec<u8>, Vec<(String, String)>>,
}

/// A waiting chain of the graph.
#[derive(Debug)]
struct Chain {
    /// The lock it waits for.
    lock: Vec<u8>,
    /// How many locks (owner ids) it holds.
    held: u64,
    /// One of its owner ids and the record read under it; `None` for the walking
    /// chain.
    seen: Option<(String, Record)>,
}

impl Graph {
    /// The wait ids of the chains `chain` waits for (the chains of the holders of
    /// its lock).
    fn next<'a>(&'a self, chain: &str) -> impl Iterator<Item = &'a str> + 'a {
        self.chains
            .get(chain)
            .and_then(|chain| self.locks.get(&chain.lock))
            .into_iter()
            .flatten()
            .map(|(_, target)| target.as_str())
    }

    /// The knot of `me`: every chain that `me` waits for, directly or not, and that
    /// waits for `me` in the same way, `me` included: the chains in a cycle with it.
    fn knot<'a>(&'a self, me: &'a str) -> HashSet<&'a str> {
        let mut ahead = HashSet::from([me]);
        let mut queue = vec![me];
        while let Some(chain) = queue.pop() {
            for next in self.next(chain) {
                if ahead.insert(next) {
                    queue.push(next);
                }
            }
        }
        let mut knot = HashSet::from([me]);
        loop {
            let before = knot.len();
            for chain in &ahead {
                if !knot.contains(chain) && self.next(chain).any(|n| knot.contains(n)) {
                    knot.insert(chain);
                }
            }
            if knot.len() == before {
                return knot;
            }
        }
    }

    /// Whether the chains of `members` but `without` wait for each other in a cycle.
    fn cyclic_without(&self, members: &HashSet<&str>, without: &str) -> bool {
        // Kahn's algorithm: a cycle is what cannot be peeled off.
        let left: HashSet<&str> = members.iter().copied().filter(|m| *m != without).collect();
        let mut waited_by: HashMap<&str, usize> = left.iter().map(|m| (*m, 0)).collect();
        for member in &left {
            for next in self.next(member).filter(|n| left.contains(n)) {
                *waited_by.entry(next).or_default() += 1;
            }
        }
        let mut free: Vec<&str> = waited_by
            .iter()
            .filter(|(_, count)| **count == 0)
            .map(|(member, _)| *member)
            .collect();
        let mut peeled = 0;
        while let Some(member) = free.pop() {
            peeled += 1;
            for next in self.next(member).filter(|n| left.contains(n)) {
                if let Some(count) = waited_by.get_mut(next) {
                    *count -= 1;
                    if *count == 0 {
                        free.push(next);
                    }
                }
            }
        }
        peeled < left.len()
    }

    /// The names of the locks of a shortest cycle from `me` through `knot`, from
    /// the lock `me` waits for.
    fn cycle(&self, me: &str, knot: &HashSet<&str>) -> Option<Vec<String>> {
        let mut came_from: HashMap<&str, &str> = HashMap::new();
        let mut queue = VecDeque::from([me]);
        let mut last = None;
        'search: while let Some(chain) = queue.pop_front() {
            for next in self.next(chain).filter(|n| knot.contains(n)) {
                if next == me {
                    last = Some(chain);
                    break 'search;
                }
                if !came_from.contains_key(next) {
                    came_from.insert(next, chain);
                    queue.push_back(next);
                }
            }
        }
        let mut path = vec![last?];
        while let Some(before) = path.last().and_then(|chain| came_from.get(chain)) {
            path.push(before);
        }
        if path.last() != Some(&me) {
            path.push(me);
        }
        path.reverse();
        Some(
            path.iter()
                .filter_map(|chain| self.chains.get(*chain))
                .map(|chain| display_key(&chain.lock))
                .collect(),
        )
    }
}

/// The victim of `knot`, which every member computes alike from the same graph:
/// the first member, in the order of fewest locks held and then greatest wait id,
/// without which no cycle is left (so that one victim frees every chain when one
/// can: a chain that every cycle passes through, say a writer waiting for several
/// readers that each wait for it); when none is, the first member (the next check
/// finds the cycles left). `None` for an empty knot.
fn victim<'a>(graph: &Graph, knot: &HashSet<&'a str>) -> Option<&'a str> {
    let mut order: Vec<&str> = knot.iter().copied().collect();
    let held = |member: &str| {
        graph
            .chains
            .get(member)
            .map_or(u64::MAX, |chain| chain.held)
    };
    order.sort_by(|a, b| held(a).cmp(&held(b)).then_with(|| b.cmp(a)));
    order
        .iter()
        .copied()
        .find(|member| !graph.cyclic_without(knot, member))
        .or_else(|| order.first().copied())
}

/// The owner ids that hold the lock at `key`: its hash's holder fields (see
/// `layout/`); none when the key holds what distlock did not write.
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
    let value: Option<Vec<u8>> = conn.get(wait_record_key(namespace, owner)).await?;
    Ok(value.as_deref().and_then(Record::parse))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A graph of chains: (wait id, locks held, the lock it waits for), and
    /// (lock, the wait ids of its holders' chains).
    fn graph(chains: &[(&str, u64, &str)], locks: &[(&str, &[&str])]) -> Graph {
        let mut graph = Graph::default();
        for (id, held, lock) in chains {
            graph.chains.insert(
                (*id).to_owned(),
                Chain {
                    lock: lock.as_bytes().to_vec(),
                    held: *held,
                    seen: None,
                },
            );
        }
        for (lock, holders) in locks {
            let edges = holders
                .iter()
                .map(|id| (format!("owner-of-{id}"), (*id).to_owned()))
                .collect();
            graph.locks.insert(lock.as_bytes().to_vec(), edges);
        }
        graph
    }

    /// A writer `a` (two locks) waits for `x`, read by `b` and `c` (one lock each),
    /// which both wait for `y`, held by `a`: two cycles, and `a` is on both. Each
    /// cycle's own rule (fewest locks) would take `b` and `c`, two victims where one
    /// frees everyone; every member picks `a`.
    #[test]
    fn a_chain_on_every_cycle_is_the_one_victim() {
        let graph = graph(
            &[("a", 2, "x"), ("b", 1, "y"), ("c", 1, "y")],
            &[("x", &["b", "c"]), ("y", &["a"])],
        );
        for me in ["a", "b", "c"] {
            let knot = graph.knot(me);
            assert_eq!(knot.len(), 3, "{me}: {knot:?}");
            assert_eq!(victim(&graph, &knot), Some("a"), "as {me} sees it");
        }
        assert_eq!(graph.cycle("a", &graph.knot("a")).map(|c| c.len()), Some(2));
    }

    /// Two chains waiting for each other: the one holding fewer locks is the victim;
    /// with as many, the greater wait id.
    #[test]
    fn in_a_plain_cycle_the_fewest_locks_then_the_greatest_id_go() {
        let fewer = graph(
            &[("a", 1, "x"), ("b", 2, "y")],
            &[("x", &["b"]), ("y", &["a"])],
        );
        assert_eq!(victim(&fewer, &fewer.knot("b")), Some("a"));
        let tie = graph(
            &[("a", 1, "x"), ("b", 1, "y")],
            &[("x", &["b"]), ("y", &["a"])],
        );
        assert_eq!(victim(&tie, &tie.knot("a")), Some("b"));
    }

    /// Two cycles joined into one knot (`a` ⇄ `b`, `c` ⇄ `d`, `b` → `c`, `d` → `a`):
    /// no one member breaks every cycle, so the first in order goes (the next check
    /// finds the cycle left); a chain that waits for the knot but is not waited for
    /// by it is no member.
    #[test]
    fn without_a_single_breaker_the_first_in_order_goes() {
        let graph = graph(
            &[
                ("a", 1, "xa"),
                ("b", 3, "xb"),
                ("c", 2, "xc"),
                ("d", 3, "xd"),
                ("e", 1, "xa"),
            ],
            &[
                ("xa", &["b"]),
                ("xb", &["a", "c"]),
                ("xc", &["d"]),
                ("xd", &["c", "a"]),
            ],
        );
        for me in ["a", "b", "c", "d"] {
            let knot = graph.knot(me);
            assert_eq!(knot.len(), 4, "{me}: {knot:?}");
            assert!(!knot.contains("e"), "{knot:?}");
            assert_eq!(victim(&graph, &knot), Some("a"), "as {me} sees it");
        }
        assert_eq!(graph.knot("e").len(), 1, "e is in no cycle");
    }
}
