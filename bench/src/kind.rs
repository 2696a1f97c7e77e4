//! A lock kind as the benchmark asks for it, and the request for one lock of a
//! kind: what the scenarios, the child waiter and the server's reference lines share.

use std::fmt;

use distlock::{LockClient, LockRequest};

/// A lock kind, as the benchmark asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `lock(name)`, the baseline.
    Plain,
    /// `read_lock(name)`.
    Read,
    /// `write_lock(name)`.
    Write,
    /// `semaphore(name, permits).acquire()`.
    Permit(u32),
    /// `fair_lock(name)`.
    Fair,
    /// `lock_all` of this many names.
    All(usize),
}

impl Kind {
    /// A short code, for keys and names: the letter acquire.lua takes the kind by
    /// (`ARGV[7]`, `distlock::layout`'s kind table), `a<names>` for `lock_all`.
    pub(crate) fn code(self) -> String {
        match self {
            Kind::All(names) => format!("a{names}"),
            kind => kind.layout_kind().script_arg().into_owned(),
        }
    }

    /// What acquire.lua is asked for: a set's names are plain locks.
    pub(crate) fn layout_kind(self) -> distlock::layout::Kind {
        use distlock::layout::Kind as Wire;
        match self {
            Kind::Plain | Kind::All(_) => Wire::Exclusive,
            Kind::Read => Wire::Read,
            Kind::Write => Wire::Write,
            Kind::Permit(permits) => Wire::Permit { permits },
            Kind::Fair => Wire::Fair,
        }
    }

    /// The word for the kind in the lines sent to the child waiter.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Plain => "lock",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permit(_) => "permit",
            Kind::Fair => "fair",
            Kind::All(_) => "all",
        }
    }

    /// The kind a child waiter reads (one name, a fixed permit count: see
    /// [`Kind::word`]).
    pub(crate) fn from_word(word: &str) -> Option<Kind> {
        Some(match word {
            "lock" => Kind::Plain,
            "read" => Kind::Read,
            "write" => Kind::Write,
            "fair" => Kind::Fair,
            _ => return None,
        })
    }

    /// The names a set of this kind takes for `name`: `name:0`, `name:1`, ... for
    /// `lock_all`, else `name` alone.
    pub(crate) fn names(self, name: &str) -> Vec<String> {
        match self {
            Kind::All(names) => (0..names).map(|i| format!("{name}:{i}")).collect(),
            _ => vec![name.to_owned()],
        }
    }

    /// Whether a waiter of this kind keeps a place in the lock's hash (a writer, a
    /// fair lock's waiter: `#wait:<owner>`, lua/lock.lua).
    pub(crate) fn keeps_place(self) -> bool {
        matches!(self, Kind::Write | Kind::Fair)
    }

    /// The scripts of the kind, as the report names them (for acquire.lua, with the
    /// kind it is asked for, its `ARGV[7]`).
    pub(crate) fn scripts(self) -> String {
        match self {
            Kind::All(_) => "acquire_all.lua + release.lua".into(),
            _ => format!("acquire.lua (`{}`) + release.lua", self.code()),
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Plain => f.write_str("plain lock (`lock`)"),
            Kind::Read => f.write_str("read lock (`read_lock`)"),
            Kind::Write => f.write_str("write lock (`write_lock`)"),
            Kind::Permit(permits) => write!(f, "permit (`semaphore(name, {permits}).acquire()`)"),
            Kind::Fair => f.write_str("fair lock (`fair_lock`)"),
            Kind::All(names) => write!(f, "`lock_all` of {names} names"),
        }
    }
}

/// The request for one lock of `kind` (none for `lock_all`, which is a set).
pub(crate) fn request(client: &LockClient, kind: Kind, name: &str) -> Option<LockRequest> {
    Some(match kind {
        Kind::Plain => client.lock(name),
        Kind::Read => client.read_lock(name),
        Kind::Write => client.write_lock(name),
        Kind::Permit(permits) => client.semaphore(name, permits).acquire(),
        Kind::Fair => client.fair_lock(name),
        Kind::All(_) => return None,
    })
}
