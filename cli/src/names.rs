//! Lock names and the Redis keys they live at, as `distlock-core` writes them: the
//! lock `N` of namespace `ns` is the key `ns:{N}`, where `%`, `{` and `}` in `N` are
//! written `%25`, `%7B` and `%7D`. The lock's side keys (its fencing counter
//! `:fence`, the records of final releases `:freed:<owner>`) and its channel
//! (`:released`) follow the closing brace; their suffixes are those of
//! `distlock::layout`.
//!
//! `list` scans for `ns:{*`, keeps the keys that end at the closing brace (and, for
//! free locks, the side keys), decodes their names and matches them against the
//! operator's pattern here (Redis' glob rules), since an escaped name is not the
//! name a pattern is written for.

use distlock::layout;

pub(crate) use layout::channel;

/// The lock name of `key` when it is the main key of a lock of `namespace`; `None`
/// for a lock's side keys (`...}:fence`, `...}:freed:<owner>`: see
/// [`name_of_side_key`]) and for keys distlock does not write (another prefix, a
/// `%` that is no escape of distlock's).
pub(crate) fn name_of_key(namespace: &str, key: &[u8]) -> Option<Vec<u8>> {
    let (escaped, tail) = split_key(namespace, key)?;
    if !tail.is_empty() {
        return None;
    }
    layout::unescape_name(escaped)
}

/// The lock name of `key` when it is a side key of a lock of `namespace`
/// ([`layout::is_side_key`]: its fencing counter, or the record of a final
/// release); `None` for a lock's main key, its channel, and keys distlock does not
/// write.
pub(crate) fn name_of_side_key(namespace: &str, key: &[u8]) -> Option<Vec<u8>> {
    if !layout::is_side_key(key) {
        return None;
    }
    let (escaped, tail) = split_key(namespace, key)?;
    // `is_side_key` read the tail after the last brace: it must be this one.
    if tail.contains(&b'}') {
        return None;
    }
    layout::unescape_name(escaped)
}

/// The suffix of a wait-for record's key, `<namespace>:{<owner>}:waits`, as the
/// deadlock detector of distlock-core writes it (`ops/deadlock.rs`; the layout
/// module does not name it yet). `distlock web` reads these records to draw the
/// wait-for graph.
pub(crate) const WAITS_SUFFIX: &[u8] = b":waits";

/// The owner id of `key` when it is a wait-for record of `namespace`
/// (`<namespace>:{<owner>}:waits`, the owner id written as it is); `None` for
/// every other key.
pub(crate) fn owner_of_wait_record(namespace: &str, key: &[u8]) -> Option<String> {
    let (owner, tail) = split_key(namespace, key)?;
    if tail != WAITS_SUFFIX {
        return None;
    }
    String::from_utf8(owner.to_vec()).ok()
}

/// The `PSUBSCRIBE` pattern of every lock's release channel in `namespace`
/// (`<namespace>:{*}:released`, the namespace's glob characters escaped).
pub(crate) fn channel_pattern(namespace: &str) -> Vec<u8> {
    let mut pattern = scan_pattern(namespace, b"*");
    pattern.push(b'}');
    pattern.extend_from_slice(layout::CHANNEL_SUFFIX.as_bytes());
    pattern
}

/// The lock name of a release `channel` of `namespace`; `None` for another
/// channel.
pub(crate) fn name_of_channel(namespace: &str, channel: &[u8]) -> Option<Vec<u8>> {
    let key = channel.strip_suffix(layout::CHANNEL_SUFFIX.as_bytes())?;
    name_of_key(namespace, key)
}

/// The escaped name in `key` (between `<namespace>:{` and the first `}`, not
/// empty) and what follows the brace.
fn split_key<'a>(namespace: &str, key: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
    let rest = key
        .strip_prefix(namespace.as_bytes())?
        .strip_prefix(b":{")?;
    // An escaped name holds no brace: the first one closes the tag.
    let close = rest.iter().position(|&byte| byte == b'}')?;
    if close == 0 {
        return None;
    }
    Some((&rest[..close], &rest[close + 1..]))
}

/// The SCAN `MATCH` pattern for the lock keys of `namespace` whose names may match
/// `pattern`: the namespace, then the part of `pattern` before its first special
/// character (escaped as in a key), then `*`. Every key it returns is still checked
/// with [`glob_match`] on its decoded name.
pub(crate) fn scan_pattern(namespace: &str, pattern: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(namespace.len() + pattern.len() + 4);
    for &byte in namespace.as_bytes() {
        if is_glob_special(byte) {
            out.push(b'\\');
        }
        out.push(byte);
    }
    out.extend_from_slice(b":{");
    let literal: Vec<u8> = pattern
        .iter()
        .copied()
        .take_while(|&byte| !is_glob_special(byte))
        .collect();
    let mut escaped = Vec::with_capacity(literal.len());
    layout::escape_name_into(&mut escaped, &literal);
    // The escaped literal holds no `{` or `}`; `%` and digits are not special.
    out.extend_from_slice(&escaped);
    out.push(b'*');
    out
}

/// The characters that Redis glob patterns give a meaning to.
fn is_glob_special(byte: u8) -> bool {
    matches!(byte, b'*' | b'?' | b'[' | b']' | b'\\')
}

/// Whether `text` matches the glob `pattern`, by the rules of Redis' `KEYS` and
/// `SCAN MATCH`: `*` any run of bytes, `?` one byte, `[abc]`, `[^abc]` and `[a-z]`
/// one byte of (or not of) a set, `\x` the byte `x` itself.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative, with one backtracking point: the last `*` seen.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class_match(pattern, p, text[t]) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if pattern[p + 1] == text[t] {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                literal => {
                    if literal == text[t] {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((star_p, star_t)) => {
                p = star_p + 1;
                t = star_t + 1;
                star = Some((star_p, star_t + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&byte| byte == b'*')
}

/// Whether `byte` is in the class that opens at `pattern[open]` (`[`), and where
/// the pattern goes on after it; `None` for a class that is never closed, which
/// this matcher takes as matching nothing.
fn class_match(pattern: &[u8], open: usize, byte: u8) -> Option<(bool, usize)> {
    let mut i = open + 1;
    let negate = pattern.get(i) == Some(&b'^');
    if negate {
        i += 1;
    }
    let mut matched = false;
    loop {
        let current = *pattern.get(i)?;
        match current {
            b']' => break,
            b'\\' => {
                let escaped = *pattern.get(i + 1)?;
                matched |= escaped == byte;
                i += 2;
            }
            _ if pattern.get(i + 1) == Some(&b'-')
                && pattern.get(i + 2).is_some_and(|&c| c != b']') =>
            {
                let end = pattern[i + 2];
                let (low, high) = if current <= end {
                    (current, end)
                } else {
                    (end, current)
                };
                matched |= (low..=high).contains(&byte);
                i += 3;
            }
            _ => {
                matched |= current == byte;
                i += 1;
            }
        }
    }
    Some((matched != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::layout::lock_key;

    #[test]
    fn keys_are_escaped_as_the_library_writes_them() {
        assert_eq!(lock_key("ns", b"order:{42}"), b"ns:{order:%7B42%7D}");
        assert_eq!(lock_key("ns", b"100%"), b"ns:{100%25}");
        assert_eq!(channel("ns", b"a"), b"ns:{a}:released");
    }

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
        let side = |suffix: &str| format!("ns:{{a}}{suffix}").into_bytes();
        let fence = side(layout::FENCE_SUFFIX);
        let freed = side(&format!("{}c1:1", layout::FREED_SUFFIX));
        let channel = side(layout::CHANNEL_SUFFIX);
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
        let fence = [
            &lock_key("ns", b"order:{42}")[..],
            layout::FENCE_SUFFIX.as_bytes(),
        ]
        .concat();
        let freed = [
            &lock_key("ns", b"100%")[..],
            layout::FREED_SUFFIX.as_bytes(),
            b"3f0c:1",
        ]
        .concat();
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

    #[test]
    fn the_scan_pattern_pushes_the_literal_prefix_down() {
        assert_eq!(scan_pattern("distlock", b"*"), b"distlock:{*");
        assert_eq!(scan_pattern("distlock", b"order:*"), b"distlock:{order:*");
        assert_eq!(scan_pattern("ns", b"a{b?c"), b"ns:{a%7Bb*");
        assert_eq!(scan_pattern("n*s", b"x"), b"n\\*s:{x*");
    }

    #[test]
    fn globs_follow_redis_rules() {
        let yes = |pattern: &str, text: &str| glob_match(pattern.as_bytes(), text.as_bytes());
        assert!(yes("*", ""));
        assert!(yes("*", "anything"));
        assert!(yes("order:*", "order:42"));
        assert!(!yes("order:*", "orders"));
        assert!(yes("o?der:4*2", "order:4xx2"));
        assert!(yes("*:42", "a:b:42"));
        assert!(!yes("*:42", "a:b:43"));
        assert!(yes("[ab]x", "bx"));
        assert!(!yes("[ab]x", "cx"));
        assert!(yes("[^ab]x", "cx"));
        assert!(yes("[a-c]", "b"));
        assert!(yes("[c-a]", "b"));
        assert!(!yes("[a-c]", "d"));
        assert!(yes("a\\*b", "a*b"));
        assert!(!yes("a\\*b", "axb"));
        assert!(yes("{*}", "{x}"));
        assert!(!yes("[ab", "a"));
        assert!(yes("a*b*c", "aXbYbZc"));
        assert!(!yes("a*b*c", "aXbYbZ"));
    }

    #[test]
    fn wait_records_and_channels_are_told_from_locks() {
        assert_eq!(
            owner_of_wait_record("ns", b"ns:{c0ffee:3}:waits").as_deref(),
            Some("c0ffee:3")
        );
        assert_eq!(owner_of_wait_record("ns", b"ns:{c0ffee:3}"), None);
        assert_eq!(owner_of_wait_record("ns", b"ns:{a}:fence"), None);
        assert_eq!(channel_pattern("n*s"), b"n\\*s:{*}:released".to_vec());
        let channel = channel("ns", b"order%{1}");
        assert_eq!(name_of_channel("ns", &channel), Some(b"order%{1}".to_vec()));
        assert_eq!(name_of_channel("ns", b"ns:{a}"), None);
    }
}
