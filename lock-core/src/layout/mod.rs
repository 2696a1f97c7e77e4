//! What distlock stores in Redis, named in one place: the fields of a lock's hash
//! and the keys beside it (the table at the top of `lua/lock.lua`), and
//! [`StoredLock`], a lock read back from `HGETALL`.
//!
//! Every kind of lock is one hash at `<ns>:{name}`: each holder is a field, its
//! owner id, whose value is its hold count; everything else is in fields whose
//! names start with `#`. The key's expiry is the lease. `redis-cli HGETALL` shows
//! who holds a lock and how many times:
//!
//! ```text
//! 1) "#kind"       2) "lock"
//! 3) "#layout"     4) "1"
//! 5) "3f0c…:1"     6) "3"              <- a holder, three holds deep
//! 7) "#op:3f0c…:1" 8) "2 4"            <- its replay record
//! 9) "#who:3f0c…:1" 10) "1764650000000 4121 orders-api host-3 orders::place_order"
//! ```
//!
//! The CLI, the benchmarks and the tests read the layout through this module only:
//! the keys (`keys.rs`: a name's keys and channel, and a key read back into its
//! name), the kind table (`kind.rs`: every word and number a kind is spelled
//! with), and, hidden from the documentation, every script's keys and arguments
//! (`args.rs`), written by the client and read back by the tests.

use std::collections::BTreeMap;

use crate::who::HolderInfo;

#[doc(hidden)]
pub mod args;
mod keys;
pub(crate) mod kind;
pub(crate) mod lua;

pub use keys::{
    channel, channel_key, display_key, escape_name_into, fence_key, freed_key, is_side_key,
    lock_key, name_of_key, name_of_side_key, owner_of_wait_record, unescape_name, wait_record_key,
    CHANNEL_SUFFIX, FENCE_SUFFIX, FREED_SUFFIX, WAITS_SUFFIX,
};
#[doc(hidden)]
pub use kind::Kind;

/// The version of the layout this crate writes (the `#layout` field).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::LAYOUT_VERSION, "1");
/// ```
pub const LAYOUT_VERSION: &str = "1";

/// The field that names the kind of lock: `lock`, `rw`, `semaphore` or `fair`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::KIND, "#kind");
/// ```
pub const KIND: &str = "#kind";
/// The field that holds [`LAYOUT_VERSION`].
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::LAYOUT, "#layout");
/// ```
pub const LAYOUT: &str = "#layout";
/// The field of the fencing token of a plain or fair lock's holder, or of a writer.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::FENCE, "#fence");
/// ```
pub const FENCE: &str = "#fence";
/// The field of a read-write lock's writer: its owner id.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::WRITER, "#writer");
/// ```
pub const WRITER: &str = "#writer";
/// The field of a semaphore's number of permits.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::PERMITS, "#permits");
/// ```
pub const PERMITS: &str = "#permits";
/// The prefix of the field where a semaphore's holder keeps the number of permits
/// it asked for, `#permits:<owner>`, when that is not the semaphore's
/// [`PERMITS`]: the count in force is the smallest any holder asked for.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::PERMITS_OF, "#permits:");
/// ```
pub const PERMITS_OF: &str = "#permits:";
/// The field of a fair lock's next ticket.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::NEXT_TICKET, "#next");
/// ```
pub const NEXT_TICKET: &str = "#next";
/// The prefix of a holder's replay record field, `#op:<owner>`: `"<floor> <done...>"`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::OP, "#op:");
/// ```
pub const OP: &str = "#op:";
/// The prefix of a holder's description, `#who:<owner>`: `"<at ms> <pid> <service>
/// <host> <site>"`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::WHO, "#who:");
/// ```
pub const WHO: &str = "#who:";
/// The prefix of the field where a holder of a read-write, fair or semaphore lock
/// keeps the end of its own lease, `#until:<owner>` (ms of the server's clock).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::UNTIL, "#until:");
/// ```
pub const UNTIL: &str = "#until:";
/// The prefix of the field where a waiter keeps its place, `#wait:<owner>` (when it
/// ends, ms of the server's clock).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::WAIT, "#wait:");
/// ```
pub const WAIT: &str = "#wait:";
/// The prefix of a fair waiter's ticket field, `#ticket:<owner>`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::TICKET, "#ticket:");
/// ```
pub const TICKET: &str = "#ticket:";

/// What a message on a lock's release [`channel`] says, as the scripts publish it
/// (`lock.lua`'s `release_message`): `<owner>:<n>` for a release (operation `n` of
/// the owner), `<owner>:-` when a waiter gives up its place, either followed by a
/// space and the next waiter's owner id when a fair lock's queue names who is next;
/// `released` for a force-unlock. The one place that reads one: the client's
/// waiters and `distlock watch` call [`ReleaseMessage::parse`].
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::ReleaseMessage;
///
/// assert_eq!(ReleaseMessage::parse(b"abc:1:7"), ReleaseMessage::Release { next: None });
/// assert_eq!(
///     ReleaseMessage::parse(b"abc:1:- def:2"),
///     ReleaseMessage::Withdraw { next: Some(&b"def:2"[..]) }
/// );
/// assert_eq!(ReleaseMessage::parse(b"released"), ReleaseMessage::ForceUnlock);
/// assert_eq!(ReleaseMessage::parse(b"hello"), ReleaseMessage::Other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseMessage<'a> {
    /// A holder released the lock; `next` is the fair lock's next waiter, if named.
    Release {
        /// The owner id of the waiter that is next, when the message names one.
        next: Option<&'a [u8]>,
    },
    /// A waiter gave up its place; `next` as for a release.
    Withdraw {
        /// The owner id of the waiter that is next, when the message names one.
        next: Option<&'a [u8]>,
    },
    /// An operator force-unlocked the lock.
    ForceUnlock,
    /// Not a message distlock publishes.
    Other,
}

impl<'a> ReleaseMessage<'a> {
    /// Reads one message of a release channel.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::ReleaseMessage;
    ///
    /// let message = ReleaseMessage::parse(b"abc:1:3 def:4");
    /// assert_eq!(message.next(), Some(&b"def:4"[..]));
    /// ```
    pub fn parse(message: &'a [u8]) -> Self {
        if message == FORCE_UNLOCK_MESSAGE.as_bytes() {
            return Self::ForceUnlock;
        }
        let mut parts = message.splitn(2, |&byte| byte == b' ');
        let first = parts.next().unwrap_or_default();
        let next = parts.next().filter(|next| !next.is_empty());
        let seq = match first.iter().rposition(|&byte| byte == b':') {
            Some(colon) if colon > 0 => &first[colon + 1..],
            _ => return Self::Other,
        };
        match seq {
            b"-" => Self::Withdraw { next },
            _ if !seq.is_empty() && seq.iter().all(u8::is_ascii_digit) => Self::Release { next },
            _ => Self::Other,
        }
    }

    /// The waiter the message names as next, if it names one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::ReleaseMessage;
    ///
    /// assert_eq!(ReleaseMessage::parse(b"abc:1:3").next(), None);
    /// ```
    pub fn next(&self) -> Option<&'a [u8]> {
        match *self {
            Self::Release { next } | Self::Withdraw { next } => next,
            Self::ForceUnlock | Self::Other => None,
        }
    }
}

/// What `force_release.lua` publishes on the lock's channel when an operator
/// force-unlocks it.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::FORCE_UNLOCK_MESSAGE, "released");
/// ```
pub const FORCE_UNLOCK_MESSAGE: &str = "released";

/// A lock as Redis stores it: its hash read back with `HGETALL`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::StoredLock;
/// let fields = [("#kind", "lock"), ("#layout", "1"), ("c1:1", "3"), ("#op:c1:1", "2 4")];
/// let lock = StoredLock::from_fields(fields).expect("distlock's layout");
/// assert_eq!(lock.kind(), Some("lock"));
/// assert_eq!(lock.count("c1:1"), 3);
/// assert_eq!(lock.holders().len(), 1);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredLock {
    holders: BTreeMap<String, u64>,
    meta: BTreeMap<String, String>,
}

/// Why a hash is not a lock of distlock's layout.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::StoredLock;
/// let err = StoredLock::from_fields([("owner", "x")]).unwrap_err();
/// assert!(err.to_string().contains("owner"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a lock of distlock's layout {LAYOUT_VERSION}: {0}")]
pub struct LayoutError(String);

impl StoredLock {
    /// Reads a lock from its fields and values, as `HGETALL` gives them. No fields:
    /// a free lock.
    ///
    /// # Errors
    ///
    /// [`LayoutError`] when the fields are not of the layout: a hold count that is
    /// not a positive integer, or a hash with fields but no `#kind` or another
    /// `#layout`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::StoredLock;
    /// let free = StoredLock::from_fields(Vec::<(String, String)>::new()).expect("free");
    /// assert!(free.holders().is_empty());
    /// ```
    pub fn from_fields<F, V>(fields: impl IntoIterator<Item = (F, V)>) -> Result<Self, LayoutError>
    where
        F: AsRef<str>,
        V: AsRef<str>,
    {
        let mut lock = Self::default();
        for (field, value) in fields {
            let (field, value) = (field.as_ref(), value.as_ref());
            if field.starts_with('#') {
                lock.meta.insert(field.to_owned(), value.to_owned());
                continue;
            }
            let Some(count) = value.parse::<u64>().ok().filter(|count| *count > 0) else {
                let why = format!("holder `{field}` has `{value}` where a hold count belongs");
                return Err(LayoutError(why));
            };
            lock.holders.insert(field.to_owned(), count);
        }
        if lock.holders.is_empty() && lock.meta.is_empty() {
            return Ok(lock);
        }
        let layout = lock.meta.get(LAYOUT);
        if layout.map(String::as_str) != Some(LAYOUT_VERSION) {
            return Err(LayoutError(format!("`{LAYOUT}` is {layout:?}")));
        }
        if lock.kind().is_none() {
            return Err(LayoutError(format!("no `{KIND}` field")));
        }
        Ok(lock)
    }

    /// The kind of lock: `lock`, `rw`, `semaphore` or `fair`; `None` for a free lock.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.kind(), None);
    /// ```
    pub fn kind(&self) -> Option<&str> {
        self.meta.get(KIND).map(String::as_str)
    }

    /// Every holder's owner id and hold count.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// let total: u64 = lock.holders().values().sum();
    /// # assert_eq!(total, 0);
    /// ```
    pub fn holders(&self) -> &BTreeMap<String, u64> {
        &self.holders
    }

    /// The hold count of `owner` (0 when it holds nothing).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.count("c1:1"), 0);
    /// ```
    pub fn count(&self, owner: &str) -> u64 {
        self.holders.get(owner).copied().unwrap_or(0)
    }

    /// The sum of every holder's hold count.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.total(), 0);
    /// ```
    pub fn total(&self) -> u64 {
        self.holders.values().sum()
    }

    /// The fencing token of the exclusive holder (`#fence`), when it has one.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.fencing_token(), None);
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.number(FENCE)
    }

    /// The owner id of a read-write lock's writer (`#writer`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.writer(), None);
    /// ```
    pub fn writer(&self) -> Option<&str> {
        self.meta.get(WRITER).map(String::as_str)
    }

    /// A semaphore's number of permits (`#permits`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.permits(), None);
    /// ```
    pub fn permits(&self) -> Option<u64> {
        self.number(PERMITS)
    }

    /// The owner ids of the waiters that keep a place (`#wait:<owner>`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.waiters().count(), 0);
    /// ```
    pub fn waiters(&self) -> impl Iterator<Item = &str> + '_ {
        self.meta
            .keys()
            .filter_map(|field| field.strip_prefix(WAIT))
    }

    /// The replay record of `owner` (`#op:<owner>`): `"<floor> <done...>"`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.record("c1:1"), None);
    /// ```
    pub fn record(&self, owner: &str) -> Option<&str> {
        self.meta.get(&format!("{OP}{owner}")).map(String::as_str)
    }

    /// What the client of `owner` said of it, with when it took the lock
    /// (`#who:<owner>`): `"<at ms> <pid> <service> <host> <site>"`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.who("c1:1"), None);
    /// ```
    pub fn who(&self, owner: &str) -> Option<&str> {
        self.meta.get(&format!("{WHO}{owner}")).map(String::as_str)
    }

    /// Who holds the lock as `owner`, as its client wrote it (`#who:<owner>`), held
    /// until `server_now_ms` (the server's clock, ms since the epoch: `TIME`); `None`
    /// when its client wrote nothing (yet) or what is there is not of that form.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::StoredLock;
    ///
    /// let lock = StoredLock::from_fields([
    ///     ("#kind", "lock"), ("#layout", "1"), ("c1:1", "1"), ("#op:c1:1", "0 1"),
    ///     ("#who:c1:1", "1000 42 orders-api host-3 orders::place"),
    /// ]).expect("distlock's layout");
    /// let holder = lock.holder_info("c1:1", 3_500).expect("written");
    /// assert_eq!((holder.pid, holder.service.as_str()), (42, "orders-api"));
    /// assert_eq!(holder.held_for, std::time::Duration::from_millis(2_500));
    /// ```
    pub fn holder_info(&self, owner: &str, server_now_ms: u64) -> Option<HolderInfo> {
        HolderInfo::of_record(self.who(owner)?, server_now_ms)
    }

    /// The number of permits the semaphore's holder `owner` asked for, when it is
    /// not the semaphore's [`permits`](Self::permits) (`#permits:<owner>`).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::StoredLock;
    ///
    /// let lock = StoredLock::from_fields([
    ///     ("#kind", "semaphore"), ("#layout", "1"), ("#permits", "2"),
    ///     ("a:1", "1"), ("#op:a:1", "1 1"), ("#until:a:1", "9"),
    ///     ("b:1", "1"), ("#op:b:1", "1 1"), ("#until:b:1", "9"), ("#permits:b:1", "3"),
    /// ])?;
    /// assert_eq!(lock.asked_permits("b:1"), Some(3));
    /// assert_eq!(lock.asked_permits("a:1"), None);
    /// # Ok::<(), distlock::layout::LayoutError>(())
    /// ```
    pub fn asked_permits(&self, owner: &str) -> Option<u64> {
        self.number(&format!("{PERMITS_OF}{owner}"))
    }

    /// When the own lease of `owner` ends (`#until:<owner>`, ms of the server's
    /// clock): set for holders of read-write, fair and semaphore locks.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert_eq!(lock.lease_end("c1:1"), None);
    /// ```
    pub fn lease_end(&self, owner: &str) -> Option<u64> {
        self.number(&format!("{UNTIL}{owner}"))
    }

    /// Every field that is not a holder's count, by name (`#kind`, `#op:<owner>`, ...).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// # let lock = distlock::layout::StoredLock::default();
    /// assert!(lock.meta().get("#kind").is_none());
    /// ```
    pub fn meta(&self) -> &BTreeMap<String, String> {
        &self.meta
    }

    fn number(&self, field: &str) -> Option<u64> {
        self.meta.get(field).and_then(|value| value.parse().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_of_the_layout_reads_back() {
        let lock = StoredLock::from_fields([
            (KIND, "rw"),
            (LAYOUT, "1"),
            ("a:1", "2"),
            ("a:2", "1"),
            ("#writer", "a:1"),
            ("#fence", "7"),
            ("#until:a:1", "1000"),
            ("#wait:b:1", "1200"),
        ])
        .expect("a read-write lock");
        assert_eq!(lock.total(), 3);
        assert_eq!(lock.writer(), Some("a:1"));
        assert_eq!(lock.fencing_token(), Some(7));
        assert_eq!(lock.lease_end("a:1"), Some(1000));
        assert_eq!(lock.waiters().collect::<Vec<_>>(), ["b:1"]);
    }

    #[test]
    fn what_is_not_the_layout_is_refused() {
        assert!(StoredLock::from_fields([("a", "0")]).is_err());
        assert!(StoredLock::from_fields([("a", "1")]).is_err(), "no #kind");
        assert!(StoredLock::from_fields([(KIND, "lock"), (LAYOUT, "2")]).is_err());
    }
}

/// distlock's function library, as a client loads it into Redis (`FUNCTION LOAD`)
/// and calls it (`FCALL <function> ...`): for tools that call the scripts the way
/// the client does, such as a benchmark of the server's cost.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// let library = distlock::layout::function_library();
/// assert!(library.name.starts_with("distlock_"));
/// assert!(library.text.starts_with(&format!("#!lua name={}", library.name)));
/// assert_eq!(library.function("acquire"), format!("{}_acquire", library.name));
/// ```
pub fn function_library() -> FunctionLibrary {
    lua::build(lua::PRELUDE, &lua::SOURCES).library
}

/// distlock's function library: see [`function_library`].
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// let library = distlock::layout::function_library();
/// assert!(library.text.contains("redis.register_function"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FunctionLibrary {
    /// `distlock_<version>`: the version changes with the scripts' text.
    pub name: String,
    /// The library's source, for `FUNCTION LOAD`.
    pub text: String,
}

impl FunctionLibrary {
    /// The name of the function of `script` (`acquire`, `reenter`, `acquire_all`,
    /// `release`, `renew`, `force_release`, `inspect`, `withdraw`), for `FCALL`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// let library = distlock::layout::function_library();
    /// assert!(library.function("release").ends_with("_release"));
    /// ```
    pub fn function(&self, script: &str) -> String {
        format!("{}_{script}", self.name)
    }

    /// The script whose function is `function` ([`function`](Self::function) read
    /// back); `None` for a function of another library.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// let library = distlock::layout::function_library();
    /// assert_eq!(library.script_of(&library.function("renew")), Some("renew"));
    /// assert_eq!(library.script_of("distlock_0000000000000000_renew"), None);
    /// ```
    pub fn script_of<'a>(&self, function: &'a str) -> Option<&'a str> {
        function.strip_prefix(self.name.as_str())?.strip_prefix('_')
    }
}
