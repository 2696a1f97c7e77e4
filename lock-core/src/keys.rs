//! Lock names and the Redis keys they map to.

use std::fmt;
use std::sync::Arc;

use crate::error::LockError;

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// The longest namespace accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 128;

/// The Redis names of one lock: all of them share one hash tag, so they share a
/// cluster slot. Only the lock's own key is kept; the others are made when a
/// request needs them (a held lock keeps its keys as long as it is held).
///
/// For the lock name `N` in namespace `ns`: the lock `ns:{N}`, the fencing counter
/// `ns:{N}:fence`, the channel `ns:{N}:released`, and `ns:{N}:freed`, where the record
/// of the last final release moves, for the rest of its short life, when another
/// owner takes the lock's tombstone (so that a retry of that release knows it
/// applied; see `lua/lock.lua`). Inside the tag, `%`, `{` and `}` are written `%25`,
/// `%7B` and `%7D`, so the tag always ends where it should and is never empty, and
/// two names never share keys.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct LockKeys {
    pub(crate) name: Arc<[u8]>,
    pub(crate) lock: Vec<u8>,
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
        let mut lock = Vec::with_capacity(namespace.len() + name.len() + 4);
        lock.extend_from_slice(namespace.as_bytes());
        lock.extend_from_slice(b":{");
        for &byte in name {
            match byte {
                b'%' => lock.extend_from_slice(b"%25"),
                b'{' => lock.extend_from_slice(b"%7B"),
                b'}' => lock.extend_from_slice(b"%7D"),
                other => lock.push(other),
            }
        }
        lock.push(b'}');
        Ok(Self {
            name: Arc::from(name),
            lock,
        })
    }

    /// The release channel: made when a request needs it.
    pub(crate) fn channel(&self) -> Vec<u8> {
        suffixed(&self.lock, b":released")
    }

    /// The fencing counter: made when a request needs it, not kept with a held lock.
    pub(crate) fn fence(&self) -> Vec<u8> {
        suffixed(&self.lock, b":fence")
    }

    /// The record of the last final release: made when a request needs it.
    pub(crate) fn freed(&self) -> Vec<u8> {
        suffixed(&self.lock, b":freed")
    }

    /// The name as text for messages and traces (invalid UTF-8 is replaced).
    pub(crate) fn display(&self) -> String {
        self.display_cow().into_owned()
    }

    /// As [`display`](Self::display), borrowed when the name is UTF-8.
    pub(crate) fn display_cow(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.name)
    }
}

impl fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LockKeys")
            .field(&String::from_utf8_lossy(&self.lock))
            .finish()
    }
}

/// `key` followed by `suffix`, in one allocation.
fn suffixed(key: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + suffix.len());
    out.extend_from_slice(key);
    out.extend_from_slice(suffix);
    out
}

/// Checks a namespace: non-empty, at most [`MAX_NAMESPACE_LEN`] bytes, no braces.
pub(crate) fn validate_namespace(namespace: &str) -> Result<(), LockError> {
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
        assert_eq!(keys.fence(), b"ns:{order:%7B42%7D}:fence");
        assert_eq!(keys.channel(), b"ns:{order:%7B42%7D}:released");
        assert_eq!(keys.freed(), b"ns:{order:%7B42%7D}:freed");
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
