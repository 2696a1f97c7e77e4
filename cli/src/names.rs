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
//! name a pattern is written for. A key is read back into its name by
//! `distlock::layout` (`name_of_key`, `name_of_side_key`), as it is written there.

use distlock::layout;
use distlock::redis;

pub(crate) use layout::{channel, name_of_key, name_of_side_key, owner_of_wait_record};

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

/// The SCAN `MATCH` pattern for the lock keys of `namespace` whose names may match
/// `pattern`: the namespace, then the part of `pattern` before its first special
/// character (escaped as in a key), then `*`. Every key it returns is still checked
/// with [`glob_match`] on its decoded name.
pub(crate) fn scan_pattern(namespace: &str, pattern: &[u8]) -> Vec<u8> {
    let literal: Vec<u8> = pattern
        .iter()
        .copied()
        .take_while(|&byte| !is_glob_special(byte))
        .collect();
    // The key of a lock named `literal`, without its closing `}`: the escaped
    // literal holds no glob character, the namespace may.
    let mut key = layout::lock_key(namespace, &literal);
    key.pop();
    let mut out = Vec::with_capacity(key.len() + 4);
    for byte in key {
        if is_glob_special(byte) {
            out.push(b'\\');
        }
        out.push(byte);
    }
    out.push(b'*');
    out
}

/// `SCAN <cursor> MATCH <pattern> COUNT <count>`: one step of a walk over the keys
/// that [`scan_pattern`] matches.
pub(crate) fn scan_command(cursor: u64, pattern: &[u8], count: u32) -> redis::Cmd {
    let mut scan = redis::cmd("SCAN");
    scan.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count);
    scan
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
