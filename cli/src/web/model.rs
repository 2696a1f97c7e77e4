//! What the page shows of one lock, read from its hash through
//! [`distlock::layout::StoredLock`]: its kind, its holders (with what their clients
//! wrote of them in `#who:<owner>`, when they wrote it), the leases left, and its
//! waiters.
//!
//! A holder whose client has not written its `#who:` field yet (a client may write
//! it late, with the hold's first renewal) is shown by its owner id alone; the next
//! read fills in its service, host, pid and site.

use std::time::UNIX_EPOCH;

use distlock::layout::{Kind, StoredLock};
use distlock::HolderInfo;
use serde::Serialize;

/// One lock, as the page's table shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LockRow {
    /// The lock name (invalid UTF-8 replaced).
    pub(crate) name: String,
    /// The name's bytes in hex: how the page names the lock to force-unlock, so
    /// that a name that is not UTF-8 is still the lock's own.
    pub(crate) id: String,
    /// `exclusive`, `read-write`, `semaphore(N)`, `fair`.
    pub(crate) kind: String,
    /// Every holder.
    pub(crate) holders: Vec<HolderRow>,
    /// The sum of the holders' hold counts.
    pub(crate) hold_count: u64,
    /// The longest time any holder has held it, in milliseconds, when known.
    pub(crate) held_for_ms: Option<u64>,
    /// The longest lease left, in milliseconds, when known.
    pub(crate) lease_left_ms: Option<u64>,
    /// The waiters that keep a place in Redis (`#wait:<owner>`), and the chains
    /// whose wait-for record names this lock.
    pub(crate) waiting: u64,
    /// The owner ids of the waiters that keep a place in Redis.
    pub(crate) waiters: Vec<String>,
    /// Connections subscribed to its release channel (one per client with tasks
    /// waiting for it); `None` when it was not asked.
    pub(crate) listening: Option<u64>,
}

/// One holder of a lock.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct HolderRow {
    /// Its owner id, as the lock's hash names it.
    pub(crate) owner: String,
    /// `exclusive`, `write`, `read`, `permit`.
    pub(crate) mode: &'static str,
    /// Its hold count.
    pub(crate) count: u64,
    /// What its client wrote of it; `None` until the client writes it.
    pub(crate) who: Option<Who>,
    /// For how long it has held the lock, in milliseconds (from `#who:`).
    pub(crate) held_for_ms: Option<u64>,
    /// Its lease left, in milliseconds.
    pub(crate) lease_left_ms: Option<u64>,
}

/// A holder's description, as its client wrote it in `#who:<owner>`
/// (`"<at ms> <pid> <service> <host> <site>"`, see [`distlock::layout::WHO`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Who {
    /// When it took the lock, in ms of the server's clock.
    pub(crate) at_ms: u64,
    /// Its process id.
    pub(crate) pid: u32,
    /// Its service.
    pub(crate) service: String,
    /// Its host.
    pub(crate) host: String,
    /// Where it took the lock: a function or a source location (may be empty).
    pub(crate) site: String,
}

impl Who {
    /// What the page shows of a holder the library read back.
    fn of(info: HolderInfo) -> Self {
        let at_ms = info
            .acquired_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        Self {
            at_ms,
            pid: info.pid,
            service: info.service,
            host: info.host,
            site: info.site,
        }
    }
}

/// What one read of a lock found: its hash and its key's time to live.
#[derive(Debug)]
pub(crate) struct Found<'a> {
    /// The lock name.
    pub(crate) name: &'a [u8],
    /// The hash, read back.
    pub(crate) lock: &'a StoredLock,
    /// The key's time to live in milliseconds (`PTTL`; negative: none).
    pub(crate) pttl_ms: i64,
    /// The server's clock when the lock was read, in milliseconds.
    pub(crate) server_now_ms: u64,
    /// Subscribers of its release channel, when asked.
    pub(crate) listening: Option<u64>,
    /// The wait-for records that name this lock.
    pub(crate) recorded_waits: u64,
}

impl LockRow {
    /// The row of a lock read back.
    pub(crate) fn new(found: &Found<'_>) -> Self {
        let lock = found.lock;
        let key_lease = u64::try_from(found.pttl_ms).ok();
        let holders: Vec<HolderRow> = lock
            .holders()
            .iter()
            .map(|(owner, &count)| {
                let info = lock.holder_info(owner, found.server_now_ms);
                let held_for_ms = info
                    .as_ref()
                    .map(|info| u64::try_from(info.held_for.as_millis()).unwrap_or(u64::MAX));
                let who = info.map(Who::of);
                // A plain lock's lease is its key's; the other kinds keep each
                // holder's own lease end.
                let lease_left_ms = lock
                    .lease_end(owner)
                    .map(|end| end.saturating_sub(found.server_now_ms))
                    .or(key_lease);
                HolderRow {
                    owner: owner.clone(),
                    mode: mode(lock, owner),
                    count,
                    who,
                    held_for_ms,
                    lease_left_ms,
                }
            })
            .collect();
        let waiting = u64::try_from(lock.waiters().count()).unwrap_or(u64::MAX);
        Self {
            name: String::from_utf8_lossy(found.name).into_owned(),
            id: hex(found.name),
            kind: kind_label(lock),
            hold_count: lock.total(),
            held_for_ms: holders.iter().filter_map(|h| h.held_for_ms).max(),
            lease_left_ms: holders.iter().filter_map(|h| h.lease_left_ms).max(),
            holders,
            waiting: waiting.saturating_add(found.recorded_waits),
            waiters: lock.waiters().map(str::to_owned).collect(),
            listening: found.listening,
        }
    }
}

/// The kind as people read it.
fn kind_label(lock: &StoredLock) -> String {
    let permits = lock
        .permits()
        .and_then(|permits| u32::try_from(permits).ok());
    match lock
        .kind()
        .and_then(|word| Kind::of_word(word, permits.unwrap_or(0)))
    {
        Some(Kind::Exclusive) => "exclusive".to_owned(),
        Some(Kind::Read | Kind::Write) => "read-write".to_owned(),
        Some(Kind::Fair) => "fair".to_owned(),
        Some(Kind::Permit { .. }) => match permits {
            Some(permits) => format!("semaphore({permits})"),
            None => "semaphore".to_owned(),
        },
        None => lock.kind().unwrap_or("-").to_owned(),
    }
}

/// How `owner` holds `lock`.
fn mode(lock: &StoredLock, owner: &str) -> &'static str {
    match lock.kind().and_then(|word| Kind::of_word(word, 0)) {
        Some(Kind::Read | Kind::Write) if lock.writer() == Some(owner) => "write",
        Some(Kind::Read | Kind::Write) => "read",
        Some(Kind::Permit { .. }) => "permit",
        _ => "exclusive",
    }
}

/// `bytes` in lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The bytes of a lower-case or upper-case hex string; `None` when it is not one.
pub(crate) fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|at| u8::from_str_radix(text.get(at..at + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_without_its_description_is_shown_by_owner_id() {
        let lock = StoredLock::from_fields([
            ("#kind", "lock"),
            ("#layout", "1"),
            ("c1:1", "2"),
            ("c2:1", "1"),
            ("#who:c2:1", "1000 42 orders-api host-3 orders::place"),
        ])
        .expect("a lock");
        let row = LockRow::new(&Found {
            name: b"order:1",
            lock: &lock,
            pttl_ms: 5_000,
            server_now_ms: 3_500,
            listening: Some(1),
            recorded_waits: 0,
        });
        assert_eq!(row.kind, "exclusive");
        assert_eq!(row.hold_count, 3);
        let first = &row.holders[0];
        assert_eq!((first.owner.as_str(), first.who.as_ref()), ("c1:1", None));
        assert_eq!(first.lease_left_ms, Some(5_000));
        let second = &row.holders[1];
        let who = second.who.as_ref().expect("described");
        assert_eq!((who.service.as_str(), who.pid), ("orders-api", 42));
        assert_eq!(who.site, "orders::place");
        assert_eq!(second.held_for_ms, Some(2_500));
        assert_eq!(row.held_for_ms, Some(2_500));
    }

    #[test]
    fn names_go_to_the_page_and_back_as_hex() {
        assert_eq!(hex(b"a\xff"), "61ff");
        assert_eq!(unhex("61ff"), Some(b"a\xff".to_vec()));
        assert_eq!(unhex("6"), None);
        assert_eq!(unhex("zz"), None);
    }
}
