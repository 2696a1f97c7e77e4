//! The keys of a lock, spelled once: the lock's hash `<ns>:{name}` with the name
//! escaped inside the hash tag, the keys beside it (`:fence`, `:freed:<owner>`),
//! its release channel (`:released`), and a key read back into its name.

use crate::faults::{self, Fault};

/// The key of the lock `name` in `namespace`: `<namespace>:{<name>}`, with `%`,
/// `{` and `}` in the name written `%25`, `%7B` and `%7D`, so that the hash tag
/// always ends where the name does (every key of one lock shares one cluster slot).
/// The one place that spells a lock's key: the client, the CLI, the benchmarks and
/// the tests all call it.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// assert_eq!(layout::lock_key("distlock", b"order:42"), b"distlock:{order:42}");
/// assert_eq!(layout::lock_key("ns", b"a{b}%"), b"ns:{a%7Bb%7D%25}");
/// ```
pub fn lock_key(namespace: &str, name: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(namespace.len() + name.len() + 4);
    key.extend_from_slice(namespace.as_bytes());
    key.extend_from_slice(b":{");
    escape_name_into(&mut key, name);
    key.push(b'}');
    key
}

/// Appends `name` to `out` with `%`, `{` and `}` escaped as in [`lock_key`].
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// let mut out = b"prefix:".to_vec();
/// distlock::layout::escape_name_into(&mut out, b"{x}");
/// assert_eq!(out, b"prefix:%7Bx%7D");
/// ```
pub fn escape_name_into(out: &mut Vec<u8>, name: &[u8]) {
    for &byte in name {
        match byte {
            b'%' => out.extend_from_slice(b"%25"),
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            other => out.push(other),
        }
    }
}

/// The name that `escaped` (a name as [`lock_key`] writes it between the braces) is
/// the escaped form of; `None` when it is no escaped name of distlock's (a brace, a
/// `%` that is no escape).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// assert_eq!(layout::unescape_name(b"a%7Bb%7D%25").as_deref(), Some(&b"a{b}%"[..]));
/// assert_eq!(layout::unescape_name(b"50%"), None);
/// ```
pub fn unescape_name(escaped: &[u8]) -> Option<Vec<u8>> {
    let mut name = Vec::with_capacity(escaped.len());
    let mut bytes = escaped.iter().copied();
    while let Some(byte) = bytes.next() {
        name.push(match byte {
            b'{' | b'}' => return None,
            b'%' => match &[bytes.next()?, bytes.next()?] {
                b"25" => b'%',
                b"7B" => b'{',
                b"7D" => b'}',
                _ => return None,
            },
            other => other,
        });
    }
    Some(name)
}

/// The release channel of the lock `name` in `namespace`:
/// `<namespace>:{<name>}:released` ([`lock_key`] and [`CHANNEL_SUFFIX`]).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// assert_eq!(layout::channel("distlock", b"order:42"), b"distlock:{order:42}:released");
/// ```
pub fn channel(namespace: &str, name: &[u8]) -> Vec<u8> {
    channel_key(&lock_key(namespace, name))
}

/// The suffix of a lock's fencing counter key, `<ns>:{name}:fence`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::FENCE_SUFFIX, ":fence");
/// ```
pub const FENCE_SUFFIX: &str = ":fence";
/// The suffix of a lock's release channel, `<ns>:{name}:released`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::CHANNEL_SUFFIX, ":released");
/// ```
pub const CHANNEL_SUFFIX: &str = ":released";
/// The suffix, before the owner id, of a final release's record,
/// `<ns>:{name}:freed:<owner>`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::FREED_SUFFIX, ":freed:");
/// ```
pub const FREED_SUFFIX: &str = ":freed:";

/// Whether `key` is one of the keys distlock keeps beside a lock's hash (a fencing
/// counter or a final release's record), not a lock itself.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::is_side_key;
/// assert!(is_side_key(b"distlock:{order:42}:fence"));
/// assert!(is_side_key(b"distlock:{order:42}:freed:3f0c:1"));
/// assert!(!is_side_key(b"distlock:{order:42}"));
/// ```
pub fn is_side_key(key: &[u8]) -> bool {
    let Some(close) = key.iter().rposition(|byte| *byte == b'}') else {
        return false;
    };
    let rest = &key[close + 1..];
    rest == FENCE_SUFFIX.as_bytes() || rest.starts_with(FREED_SUFFIX.as_bytes())
}

/// The fencing counter of the lock whose key is `lock` ([`lock_key`]):
/// `<lock>:fence`.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// let lock = layout::lock_key("ns", b"a");
/// assert_eq!(layout::fence_key(&lock), b"ns:{a}:fence");
/// ```
pub fn fence_key(lock: &[u8]) -> Vec<u8> {
    fence_parts(lock).concat()
}

/// [`fence_key`] in parts, to be written end to end.
pub(crate) fn fence_parts(lock: &[u8]) -> [&[u8]; 2] {
    [lock, FENCE_SUFFIX.as_bytes()]
}

/// The release channel of the lock whose key is `lock` ([`lock_key`]):
/// `<lock>:released`, as [`channel`] spells it from the name.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// let lock = layout::lock_key("ns", b"a");
/// assert_eq!(layout::channel_key(&lock), layout::channel("ns", b"a"));
/// ```
pub fn channel_key(lock: &[u8]) -> Vec<u8> {
    channel_parts(lock).concat()
}

/// [`channel_key`] in parts, to be written end to end.
pub(crate) fn channel_parts(lock: &[u8]) -> [&[u8]; 2] {
    [lock, CHANNEL_SUFFIX.as_bytes()]
}

/// Where the record of a final release of `owner` is kept for a short while, for
/// the lock whose key is `lock` ([`lock_key`]): `<lock>:freed:<owner>`, the same
/// for every kind.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// let lock = layout::lock_key("ns", b"a");
/// assert_eq!(layout::freed_key(&lock, "c:1"), b"ns:{a}:freed:c:1");
/// ```
pub fn freed_key(lock: &[u8], owner: &str) -> Vec<u8> {
    freed_parts(lock, owner).concat()
}

/// [`freed_key`] in parts, to be written end to end.
pub(crate) fn freed_parts<'a>(lock: &'a [u8], owner: &'a str) -> [&'a [u8]; 3] {
    // The seeded fault of the test build: every owner's record at one key.
    let owner = if faults::active(Fault::SharedFinalReleaseRecord) {
        ""
    } else {
        owner
    };
    [lock, FREED_SUFFIX.as_bytes(), owner.as_bytes()]
}

/// The lock name of `key` when it is the key of a lock of `namespace`
/// ([`lock_key`]'s inverse); `None` for a lock's side keys (see
/// [`name_of_side_key`]), its channel, and keys distlock does not write (another
/// prefix, a `%` that is no escape of distlock's).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// let key = layout::lock_key("ns", b"order:{42}");
/// assert_eq!(layout::name_of_key("ns", &key).as_deref(), Some(&b"order:{42}"[..]));
/// assert_eq!(layout::name_of_key("ns", &layout::fence_key(&key)), None);
/// ```
pub fn name_of_key(namespace: &str, key: &[u8]) -> Option<Vec<u8>> {
    split_key(namespace, key)
        .filter(|(_, tail)| tail.is_empty())
        .and_then(|(escaped, _)| unescape_name(escaped))
}

/// The lock name of `key` when it is a side key of a lock of `namespace`
/// ([`is_side_key`]: its fencing counter, or the record of a final release);
/// `None` for a lock's main key, its channel, and keys distlock does not write.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// let key = layout::lock_key("ns", b"100%");
/// let freed = layout::freed_key(&key, "c:1");
/// assert_eq!(layout::name_of_side_key("ns", &freed).as_deref(), Some(&b"100%"[..]));
/// assert_eq!(layout::name_of_side_key("ns", &key), None);
/// ```
pub fn name_of_side_key(namespace: &str, key: &[u8]) -> Option<Vec<u8>> {
    // `is_side_key` read the tail after the last brace: it must be this one.
    split_key(namespace, key)
        .filter(|(_, tail)| is_side_key(key) && !tail.contains(&b'}'))
        .and_then(|(escaped, _)| unescape_name(escaped))
}

/// The suffix of a call chain's wait-for record, `<namespace>:{<owner>}:waits`,
/// which distributed deadlock detection writes while the chain waits holding other
/// locks (see [`wait_record_key`]).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert!(distlock::layout::wait_record_key("ns", "c:1").ends_with(distlock::layout::WAITS_SUFFIX));
/// ```
pub const WAITS_SUFFIX: &str = ":waits";

/// The key of the wait-for record of the owner id `owner` in `namespace`:
/// `<namespace>:{<owner>}:waits` (an owner id needs no escape: hex digits and `:`).
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// assert_eq!(distlock::layout::wait_record_key("ns", "c0ffee:3"), "ns:{c0ffee:3}:waits");
/// ```
pub fn wait_record_key(namespace: &str, owner: &str) -> String {
    format!("{namespace}:{{{owner}}}{WAITS_SUFFIX}")
}

/// The owner id of `key` when it is a wait-for record of `namespace`
/// ([`wait_record_key`]'s inverse); `None` for every other key.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// let key = layout::wait_record_key("ns", "c0ffee:3");
/// assert_eq!(layout::owner_of_wait_record("ns", key.as_bytes()).as_deref(), Some("c0ffee:3"));
/// assert_eq!(layout::owner_of_wait_record("ns", b"ns:{a}:fence"), None);
/// ```
pub fn owner_of_wait_record(namespace: &str, key: &[u8]) -> Option<String> {
    split_key(namespace, key)
        .filter(|(_, tail)| *tail == WAITS_SUFFIX.as_bytes())
        .and_then(|(owner, _)| String::from_utf8(owner.to_vec()).ok())
}

/// The escaped name in `key` (between `<namespace>:{` and the first `}`, not
/// empty) and what follows the brace.
fn split_key<'a>(namespace: &str, key: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
    let rest = key
        .strip_prefix(namespace.as_bytes())?
        .strip_prefix(b":{")?;
    // An escaped name holds no brace: the first one closes the tag.
    let close = rest.iter().position(|&byte| byte == b'}')?;
    (close > 0).then(|| (&rest[..close], &rest[close + 1..]))
}

/// The lock name inside a lock's key `<ns>:{<name>}`, with its escapes undone, as
/// text for messages; the key itself when it is not of that form.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout;
///
/// assert_eq!(layout::display_key(&layout::lock_key("ns", b"order:{42}%")), "order:{42}%");
/// assert_eq!(layout::display_key(b"plain"), "plain");
/// ```
pub fn display_key(key: &[u8]) -> String {
    let open = key.iter().position(|byte| *byte == b'{');
    let close = key.iter().rposition(|byte| *byte == b'}');
    let name = match open.zip(close) {
        Some((open, close)) if open < close => {
            let escaped = &key[open + 1..close];
            unescape_name(escaped).unwrap_or_else(|| escaped.to_vec())
        }
        _ => key.to_vec(),
    };
    String::from_utf8_lossy(&name).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Other keys in these tests are forged on purpose: keys distlock never writes.
    #[test]
    fn main_keys_give_their_names_and_other_keys_none() {
        assert_eq!(
            name_of_key("ns", b"ns:{order:%7B42%7D}").as_deref(),
            Some(&b"order:{42}"[..])
        );
        assert_eq!(
            name_of_key("ns", b"ns:{100%25}").as_deref(),
            Some(&b"100%"[..])
        );
        let lock = lock_key("ns", b"a");
        let (fence, freed, channel) = (
            fence_key(&lock),
            freed_key(&lock, "c1:1"),
            channel_key(&lock),
        );
        for other in [
            &fence[..],
            &freed,
            &channel,
            b"other:{a}",
            b"ns:{}",
            b"ns:{a%41}",
            b"ns:{a%2}",
            b"ns:a",
            b"nsx:{a}",
        ] {
            assert_eq!(name_of_key("ns", other), None, "{other:?}");
        }
    }

    #[test]
    fn side_keys_give_their_lock_names_and_other_keys_none() {
        let fence = fence_key(&lock_key("ns", b"order:{42}"));
        let freed = freed_key(&lock_key("ns", b"100%"), "3f0c:1");
        assert_eq!(
            name_of_side_key("ns", &fence).as_deref(),
            Some(&b"order:{42}"[..])
        );
        assert_eq!(
            name_of_side_key("ns", &freed).as_deref(),
            Some(&b"100%"[..])
        );
        let channel = channel("ns", b"a");
        for other in [
            &b"ns:{a}"[..],
            &channel,
            b"ns:{a}:fenced",
            b"ns:{a}:freed",
            b"other:{a}:fence",
            b"ns:{}:fence",
            b"ns:{a%41}:fence",
            b"ns:{a}}:fence",
        ] {
            assert_eq!(name_of_side_key("ns", other), None, "{other:?}");
        }
    }

    #[test]
    fn every_name_comes_back_from_its_key() {
        for name in [
            &b"a"[..],
            b"%",
            b"{",
            b"}",
            b"%7B",
            b"{}%{}",
            b"x:y:z",
            b"\xff\x00",
        ] {
            let key = lock_key("distlock", name);
            assert_eq!(
                name_of_key("distlock", &key).as_deref(),
                Some(name),
                "{name:?}"
            );
        }
    }
}
