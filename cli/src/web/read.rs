//! One read of a namespace: every lock held in it and every wait-for record, in
//! few round trips, counting the commands it sends.
//!
//! The keys come from `SCAN 0 MATCH <namespace>:{* COUNT 1000` (never `KEYS`), on
//! the one server or on every master of a cluster, as `distlock list` finds them.
//! The main keys are then read in pipelines of [`BATCH`]: `HGETALL` (the lock's
//! hash, read back through [`distlock::layout::StoredLock`]) and `PTTL` (a plain
//! lock's lease) for each, and one `PUBSUB NUMSUB` for the batch's release
//! channels; the wait-for records with one `GET` each, pipelined too. So a read
//! costs `2 × locks + locks / BATCH + keys / 1000 + records + 1` commands.

use std::collections::BTreeMap;

use distlock::layout::{self, StoredLock};
use distlock::redis::{self, RedisResult, Value};

use crate::connect::{Node, Raw};
use crate::names::{channel, name_of_key, owner_of_wait_record, scan_command, scan_pattern};
use crate::web::graph::WaitRecord;
use crate::web::model::{Found, LockRow};

/// How many locks one pipeline reads.
pub(crate) const BATCH: usize = 256;

/// The `COUNT` of each `SCAN`.
pub(crate) const SCAN_COUNT: u32 = 1000;

/// What one read found.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// The locks held, by name.
    pub(crate) locks: Vec<LockRow>,
    /// The wait-for records: owner id → name of the lock its chain waits for.
    pub(crate) waits: Vec<(String, String)>,
    /// Keys at a lock's place that are not of distlock's layout.
    pub(crate) skipped: u64,
    /// The server's clock at the read, in milliseconds.
    pub(crate) server_now_ms: u64,
    /// The commands the read sent.
    pub(crate) commands: u64,
}

/// The keys of a namespace, sorted out.
#[derive(Debug, Default)]
struct Keys {
    /// Lock names and their main keys.
    locks: BTreeMap<Vec<u8>, Vec<u8>>,
    /// Wait-for records: owner id and key.
    records: Vec<(String, Vec<u8>)>,
}

/// Reads every lock and wait-for record of `namespace`.
///
/// # Cancel safety
///
/// Read-only: dropping the future changes nothing on the server.
pub(crate) async fn read(raw: &mut Raw, namespace: &str) -> RedisResult<Read> {
    let mut out = Read::default();
    let time: (u64, u64) = redis::from_redis_value(raw.query(&redis::cmd("TIME")).await?)?;
    out.commands += 1;
    out.server_now_ms = time.0 * 1_000 + time.1 / 1_000;
    let keys = scan(raw, namespace, &mut out.commands).await?;
    let records = read_records(raw, namespace, &keys.records, &mut out.commands).await?;
    let mut waited: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for record in records {
        if let Some(name) = name_of_key(namespace, &record.lock_key) {
            *waited.entry(name.clone()).or_default() += 1;
            let name = String::from_utf8_lossy(&name).into_owned();
            out.waits.push((record.owner, name));
        }
    }
    let numsub = matches!(raw, Raw::Single(_));
    let locks: Vec<(&Vec<u8>, &Vec<u8>)> = keys.locks.iter().collect();
    for batch in locks.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for (_, key) in batch {
            pipe.cmd("HGETALL").arg(key.as_slice());
            pipe.cmd("PTTL").arg(key.as_slice());
        }
        if numsub {
            let numsub = pipe.cmd("PUBSUB").arg("NUMSUB");
            for (name, _) in batch {
                numsub.arg(channel(namespace, name));
            }
        }
        let replies = raw.pipeline(&pipe).await?;
        out.commands += u64::try_from(pipe.len()).unwrap_or(u64::MAX);
        let listening = if numsub {
            numsub_counts(replies.last())
        } else {
            BTreeMap::new()
        };
        for (at, (name, _)) in batch.iter().enumerate() {
            let hash = replies.get(2 * at).cloned().unwrap_or(Value::Nil);
            let pttl = replies.get(2 * at + 1).cloned().unwrap_or(Value::Nil);
            let Some(lock) = stored(hash) else {
                out.skipped += 1;
                continue;
            };
            if lock.holders().is_empty() && lock.waiters().next().is_none() {
                continue; // freed between the scan and the read
            }
            let channel = channel(namespace, name);
            out.locks.push(LockRow::new(&Found {
                name,
                lock: &lock,
                pttl_ms: redis::from_redis_value(pttl).unwrap_or(-2),
                server_now_ms: out.server_now_ms,
                listening: numsub.then(|| listening.get(&channel).copied().unwrap_or(0)),
                recorded_waits: waited.get(*name).copied().unwrap_or(0),
            }));
        }
    }
    Ok(out)
}

/// The keys under `<namespace>:{` on every node.
///
/// # Cancel safety
///
/// Read-only.
async fn scan(raw: &mut Raw, namespace: &str, commands: &mut u64) -> RedisResult<Keys> {
    let nodes: Vec<Option<Node>> = match raw.masters().await? {
        Some(masters) => {
            *commands += 1;
            masters.into_iter().map(Some).collect()
        }
        None => vec![None],
    };
    let matching = scan_pattern(namespace, b"*");
    let mut keys = Keys::default();
    for node in &nodes {
        let mut cursor: u64 = 0;
        loop {
            let scan = scan_command(cursor, &matching, SCAN_COUNT);
            let reply = raw.query_on(node.as_ref(), scan).await?;
            *commands += 1;
            let (next, found): (u64, Vec<Vec<u8>>) = redis::from_redis_value(reply)?;
            for key in found {
                if let Some(name) = name_of_key(namespace, &key) {
                    keys.locks.insert(name, key);
                } else if let Some(owner) = owner_of_wait_record(namespace, &key) {
                    keys.records.push((owner, key));
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(keys)
}

/// The wait-for records of `keys` that are still there and read.
///
/// # Cancel safety
///
/// Read-only.
async fn read_records(
    raw: &mut Raw,
    _namespace: &str,
    keys: &[(String, Vec<u8>)],
    commands: &mut u64,
) -> RedisResult<Vec<WaitRecord>> {
    let mut records = Vec::new();
    for batch in keys.chunks(BATCH) {
        let mut pipe = redis::pipe();
        for (_, key) in batch {
            pipe.cmd("GET").arg(key.as_slice());
        }
        let replies = raw.pipeline(&pipe).await?;
        *commands += u64::try_from(batch.len()).unwrap_or(u64::MAX);
        for ((owner, _), reply) in batch.iter().zip(replies) {
            let value: Option<Vec<u8>> = redis::from_redis_value(reply).unwrap_or(None);
            if let Some(record) = value.and_then(|value| WaitRecord::parse(owner.clone(), &value)) {
                records.push(record);
            }
        }
    }
    Ok(records)
}

/// A lock's hash read back; `None` when it is not of distlock's layout (or not a
/// hash).
fn stored(hash: Value) -> Option<StoredLock> {
    let fields: Vec<(Vec<u8>, Vec<u8>)> = match hash {
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(field, value)| {
                Some((
                    redis::from_redis_value(field).ok()?,
                    redis::from_redis_value(value).ok()?,
                ))
            })
            .collect::<Option<_>>()?,
        other => redis::from_redis_value(other).ok()?,
    };
    let text = fields.iter().map(|(field, value)| {
        (
            String::from_utf8_lossy(field).into_owned(),
            String::from_utf8_lossy(value).into_owned(),
        )
    });
    layout::StoredLock::from_fields(text).ok()
}

/// The subscriber counts of a `PUBSUB NUMSUB` reply, by channel.
fn numsub_counts(reply: Option<&Value>) -> BTreeMap<Vec<u8>, u64> {
    let pairs: Vec<(Vec<u8>, u64)> = match reply {
        Some(Value::Map(pairs)) => pairs
            .iter()
            .filter_map(|(channel, count)| {
                Some((
                    redis::from_redis_value(channel.clone()).ok()?,
                    redis::from_redis_value(count.clone()).ok()?,
                ))
            })
            .collect(),
        Some(Value::Array(items)) => items
            .chunks(2)
            .filter_map(|pair| {
                Some((
                    redis::from_redis_value(pair.first()?.clone()).ok()?,
                    redis::from_redis_value(pair.get(1)?.clone()).ok()?,
                ))
            })
            .collect(),
        _ => Vec::new(),
    };
    pairs.into_iter().collect()
}
