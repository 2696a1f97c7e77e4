//! Lock names and the Redis keys they map to (spelled by `layout/keys.rs`), and what
//! a request of each [`Kind`] takes.

use std::fmt;
use std::sync::Arc;

use crate::error::LockError;
use crate::kinds::LockKind;
use crate::layout;
/// What a lock request takes: the kinds of lock, and the hold within them.
pub(crate) use crate::layout::kind::Kind;

/// The longest lock name accepted, in bytes.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo(locks: distlock::LockClient) -> Result<(), distlock::LockError> {
/// let long = "x".repeat(distlock::MAX_NAME_LEN + 1);
/// // Refused before anything is sent: name a long resource by its id or a hash.
/// assert!(locks.lock(long).await.is_err_and(|err| err.is_invalid_input()));
/// # Ok(())
/// # }
/// ```
pub const MAX_NAME_LEN: usize = 1024;

/// The longest namespace accepted, in bytes.
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() {
/// let namespace = "n".repeat(distlock::MAX_NAMESPACE_LEN + 1);
/// let refused = distlock::LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .namespace(namespace)
///     .connect()
///     .await;
/// assert!(refused.is_err_and(|err| err.is_invalid_input()));
/// # }
/// ```
pub const MAX_NAMESPACE_LEN: usize = 128;

/// The Redis names of one lock: all of them share one hash tag, so they share a
/// cluster slot. Only the lock's own key is kept; the others are made when a
/// request needs them (a held lock keeps its keys as long as it is held).
///
/// For the lock name `N` in namespace `ns`: the lock `ns:{N}` (a hash, see
/// `layout/`), the fencing counter `ns:{N}:fence`, the channel `ns:{N}:released`,
/// and `ns:{N}:freed:<owner>`, the record of an owner's final release for a short
/// while (so that a retry of that release knows it applied). Inside the tag, `%`,
/// `{` and `}` are written `%25`, `%7B` and `%7D`, so the tag always ends where it
/// should and is never empty, and two names never share keys.
///
/// A lock is also of a [`Kind`], which its hash records: a request of one kind at a
/// name held as another is refused, with nothing written.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    pub(crate) name: Arc<[u8]>,
    pub(crate) lock: Vec<u8>,
    pub(crate) kind: Kind,
}

/// What a lock request takes, beyond how the kind table (`layout/kind.rs`) spells
/// it on the wire.
impl Kind {
    /// Whether this is the plain lock, the one kind a release hands to a waiter.
    pub(crate) fn is_plain(self) -> bool {
        matches!(self, Self::Exclusive)
    }

    /// Whether several owners may hold the lock at once (readers, permits).
    pub(crate) fn admits_many(self) -> bool {
        matches!(self, Self::Read | Self::Permit { .. })
    }

    /// Whether a waiter keeps a place in Redis while it waits (a writer, a fair
    /// lock's waiter), which it must take back when it gives up.
    pub(crate) fn keeps_place(self) -> bool {
        matches!(self, Self::Write | Self::Fair)
    }

    /// The kind of lock this request takes a hold of, as `inspect` reports it.
    pub(crate) fn lock_kind(self) -> LockKind {
        match self {
            Self::Exclusive => LockKind::Exclusive,
            Self::Read | Self::Write => LockKind::ReadWrite,
            Self::Permit { permits } => LockKind::Semaphore { permits },
            Self::Fair => LockKind::Fair,
        }
    }

    /// Whether a hold of this kind and one of `other` are holds of the same lock
    /// kind (a re-entry, or a mismatch within the kind such as an upgrade), whatever
    /// their permits.
    pub(crate) fn same_lock(self, other: Kind) -> bool {
        std::mem::discriminant(&self.lock_kind()) == std::mem::discriminant(&other.lock_kind())
    }

    /// Whether a hold of this kind and one of `other`, by two owners, cannot be held
    /// at once: every pair but two readers, or two permits, of one lock. (Holds of
    /// two kinds of lock never coexist either: the scripts refuse a request of one
    /// kind at a name held as another.)
    pub(crate) fn excludes(self, other: Kind) -> bool {
        !(self.admits_many() && other.admits_many() && self.same_lock(other))
    }

    /// What the kind is called in messages.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::Exclusive => "lock",
            Self::Read => "read lock",
            Self::Write => "write lock",
            Self::Permit { .. } => "semaphore",
            Self::Fair => "fair lock",
        }
    }

    /// The kind in a sentence: "a lock", "a read lock", ...
    pub(crate) fn with_article(self) -> &'static str {
        match self {
            Self::Read => "a read lock",
            Self::Write => "a write lock",
            _ => self.lock_kind().describe(),
        }
    }
}

impl LockKeys {
    pub(crate) fn new(namespace: &str, name: &[u8]) -> Result<Self, LockError> {
        if name.is_empty() {
            return Err(LockError::InvalidName {
                reason: "the name is empty; give each resource a non-empty name such as `order:42`"
                    .into(),
                function: None,
            });
        }
        if name.len() > MAX_NAME_LEN {
            return Err(LockError::InvalidName {
                reason: format!(
                    "the name is {} bytes long, over the limit of {MAX_NAME_LEN}; use a shorter \
                     name, such as an id or a hash of the resource",
                    name.len()
                ),
                function: None,
            });
        }
        Ok(Self {
            name: Arc::from(name),
            lock: layout::lock_key(namespace, name),
            kind: Kind::Exclusive,
        })
    }

    /// The release channel: made when a request needs it.
    pub(crate) fn channel(&self) -> Vec<u8> {
        layout::channel_key(&self.lock)
    }

    /// The name as text for messages and traces (invalid UTF-8 is replaced).
    pub(crate) fn display(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

impl fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockKeys")
            .field(&String::from_utf8_lossy(&self.lock))
            .finish()
    }
}

/// Checks a namespace as [`LockClientBuilder::namespace`](crate::LockClientBuilder::namespace)
/// does before connecting: non-empty, at most [`MAX_NAMESPACE_LEN`] bytes, and no
/// `{` or `}` (they mark the hash tag distlock puts around a lock's name). For tools
/// that read a namespace's keys without a client, as `distlock web` does.
///
/// # Errors
///
/// [`LockError::InvalidOption`] naming `namespace`, saying what is wrong.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert!(distlock::validate_namespace("orders").is_ok());
/// assert!(distlock::validate_namespace("a{b}").is_err());
/// assert!(distlock::validate_namespace("").is_err());
/// ```
pub fn validate_namespace(namespace: &str) -> Result<(), LockError> {
    if namespace.is_empty() || namespace.len() > MAX_NAMESPACE_LEN {
        return Err(LockError::invalid_option(
            "namespace",
            format!("it must be 1 to {MAX_NAMESPACE_LEN} bytes long, like the default `distlock`"),
        ));
    }
    if namespace.contains(['{', '}']) {
        return Err(LockError::invalid_option(
            "namespace",
            "it must not contain `{` or `}`: those mark the Redis Cluster hash tag, which \
             distlock places around the lock name",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_one_non_empty_tag() {
        let keys = LockKeys::new("ns", b"order:{42}").expect("valid name");
        assert_eq!(keys.lock, b"ns:{order:%7B42%7D}");
        assert_eq!(layout::fence_key(&keys.lock), b"ns:{order:%7B42%7D}:fence");
        assert_eq!(keys.channel(), b"ns:{order:%7B42%7D}:released");
        assert_eq!(
            layout::freed_key(&keys.lock, "c:1"),
            b"ns:{order:%7B42%7D}:freed:c:1"
        );
    }

    /// Two owners may hold one lock at once only as two readers or two permits:
    /// a grant beside any other hold of this client is proof the server forgot it.
    #[test]
    fn only_readers_and_permits_hold_a_lock_together() {
        let permits = Kind::Permit { permits: 3 };
        let all = [
            Kind::Exclusive,
            Kind::Read,
            Kind::Write,
            permits,
            Kind::Fair,
        ];
        for held in all {
            for granted in all {
                let together = matches!(
                    (held, granted),
                    (Kind::Read, Kind::Read) | (Kind::Permit { .. }, Kind::Permit { .. })
                );
                assert_eq!(
                    held.excludes(granted),
                    !together,
                    "{held:?} and {granted:?}"
                );
            }
        }
    }

    #[test]
    fn escaping_keeps_names_apart() {
        let a = LockKeys::new("ns", b"%7B").expect("valid name");
        let b = LockKeys::new("ns", b"{").expect("valid name");
        assert_ne!(a.lock, b.lock);
    }

    #[test]
    fn empty_and_long_names_are_refused() {
        assert!(LockKeys::new("ns", b"").is_err());
        assert!(LockKeys::new("ns", &[b'a'; MAX_NAME_LEN]).is_ok());
        assert!(LockKeys::new("ns", &[b'a'; MAX_NAME_LEN + 1]).is_err());
    }

    #[test]
    fn namespaces_with_braces_are_refused() {
        assert!(validate_namespace("a{b").is_err());
        assert!(validate_namespace("").is_err());
        assert!(validate_namespace("distlock").is_ok());
    }
}
