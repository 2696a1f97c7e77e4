//! The kind table: every word and number a kind of hold is spelled with, on the
//! wire and beyond it, in one place. What a request takes is a [`Kind`]; each
//! kind's row gives the letter `acquire.lua` takes it by (`ARGV[7]`), the word
//! its lock's hash records (`#kind`), the number the scripts answer for that lock
//! kind (`KINDS` in `lua/lock.lua`), the label of its metrics and the word for its
//! lock kind in the `distlock` tool's JSON.
//!
//! | kind | script letter | `#kind` | reply code | metric label | JSON lock kind |
//! | --- | --- | --- | --- | --- | --- |
//! | [`Kind::Exclusive`] | `x` | `lock` | 0 | `exclusive` | `exclusive` |
//! | [`Kind::Read`] | `r` | `rw` | 1 | `read` | `read_write` |
//! | [`Kind::Write`] | `w` | `rw` | 1 | `write` | `read_write` |
//! | [`Kind::Permit`] | `p<permits>` | `semaphore` | 2 | `permit` | `semaphore` |
//! | [`Kind::Fair`] | `f` | `fair` | 3 | `fair` | `fair` |

use std::borrow::Cow;

/// What a lock request takes: the kinds of lock, and the hold within them.
///
/// # Examples
///
/// ```
/// # use distlock_core as distlock;
/// use distlock::layout::Kind;
///
/// let permit = Kind::Permit { permits: 4 };
/// assert_eq!(permit.script_arg(), "p4");
/// assert_eq!(permit.word(), "semaphore");
/// assert_eq!(Kind::parse_script_arg("p4"), Some(permit));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// The plain lock: one owner at a time.
    Exclusive,
    /// A read hold of a read-write lock: many readers at once, no writer.
    Read,
    /// The write hold of a read-write lock: one writer, no reader.
    Write,
    /// A permit of a semaphore of `permits` permits.
    Permit {
        /// The semaphore's number of permits, as this request asks for it.
        permits: u32,
    },
    /// A fair lock: one owner at a time, granted in the order of arrival.
    Fair,
}

/// One row of the kind table (see the module's docs).
struct Row {
    letter: &'static str,
    word: &'static str,
    code: i64,
    metric: &'static str,
    json: &'static str,
}

/// One row of the kind table: its letter, word, code, metric label and JSON word.
const fn row(
    letter: &'static str,
    word: &'static str,
    code: i64,
    metric: &'static str,
    json: &'static str,
) -> Row {
    Row {
        letter,
        word,
        code,
        metric,
        json,
    }
}

impl Kind {
    /// Every kind, a semaphore's with `permits` permits, in the table's order.
    fn all(permits: u32) -> impl Iterator<Item = Kind> {
        [
            Kind::Exclusive,
            Kind::Read,
            Kind::Write,
            Kind::Permit { permits },
            Kind::Fair,
        ]
        .into_iter()
    }

    /// The kind's row of the kind table.
    const fn row(self) -> Row {
        match self {
            Kind::Exclusive => row("x", "lock", 0, "exclusive", "exclusive"),
            Kind::Read => row("r", "rw", 1, "read", "read_write"),
            Kind::Write => row("w", "rw", 1, "write", "read_write"),
            Kind::Permit { .. } => row("p", "semaphore", 2, "permit", "semaphore"),
            Kind::Fair => row("f", "fair", 3, "fair", "fair"),
        }
    }

    /// The kind as `acquire.lua` takes it (`ARGV[7]`): `x`, `r`, `w`, `p<permits>`
    /// or `f`; only a permit's is made (the others are the kind table's letters).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::layout::Kind::Exclusive.script_arg(), "x");
    /// ```
    pub fn script_arg(self) -> Cow<'static, str> {
        match self {
            Kind::Permit { permits } => Cow::Owned(format!("{}{permits}", self.row().letter)),
            _ => Cow::Borrowed(self.row().letter),
        }
    }

    /// The kind that `arg` is the [`script_arg`](Self::script_arg) of.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::Kind;
    /// assert_eq!(Kind::parse_script_arg("w"), Some(Kind::Write));
    /// assert_eq!(Kind::parse_script_arg("p"), None);
    /// ```
    pub fn parse_script_arg(arg: &str) -> Option<Kind> {
        let permits = match arg.strip_prefix(Kind::Permit { permits: 0 }.row().letter) {
            Some(digits) => digits.parse().ok()?,
            None => 0,
        };
        Kind::all(permits).find(|kind| kind.script_arg() == arg)
    }

    /// The word the lock's hash records for this kind (`#kind`): `lock`, `rw`,
    /// `semaphore` or `fair`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::layout::Kind::Read.word(), "rw");
    /// ```
    pub fn word(self) -> &'static str {
        self.row().word
    }

    /// The number the scripts answer for this kind's lock kind (`KINDS` in
    /// `lua/lock.lua`): 0 plain, 1 read-write, 2 semaphore, 3 fair.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::layout::Kind::Fair.code(), 3);
    /// ```
    pub fn code(self) -> i64 {
        self.row().code
    }

    /// The kind whose lock kind the scripts number `code`, a semaphore's with
    /// `permits` permits (a read-write lock's is [`Kind::Read`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::Kind;
    /// assert_eq!(Kind::of_code(2, 4), Some(Kind::Permit { permits: 4 }));
    /// assert_eq!(Kind::of_code(9, 0), None);
    /// ```
    pub fn of_code(code: i64, permits: u32) -> Option<Kind> {
        Kind::all(permits).find(|kind| kind.code() == code)
    }

    /// The kind of lock whose hash records `word` (`#kind`), a semaphore's with
    /// `permits` permits; for a read-write lock, [`Kind::Read`] (the first of its
    /// rows). `None` for a word that is no kind's.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// use distlock::layout::Kind;
    /// assert_eq!(Kind::of_word("lock", 0), Some(Kind::Exclusive));
    /// assert_eq!(Kind::of_word("semaphore", 3), Some(Kind::Permit { permits: 3 }));
    /// assert_eq!(Kind::of_word("rw", 0), Some(Kind::Read));
    /// assert_eq!(Kind::of_word("queue", 0), None);
    /// ```
    pub fn of_word(word: &str, permits: u32) -> Option<Kind> {
        Kind::all(permits).find(|kind| kind.word() == word)
    }

    /// The label of this kind in metrics: `exclusive`, `read`, `write`, `permit`
    /// or `fair`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::layout::Kind::Permit { permits: 2 }.metric_label(), "permit");
    /// ```
    pub fn metric_label(self) -> &'static str {
        self.row().metric
    }

    /// The word for this kind's lock kind in the `distlock` tool's JSON:
    /// `exclusive`, `read_write`, `semaphore` or `fair`.
    ///
    /// # Examples
    ///
    /// ```
    /// # use distlock_core as distlock;
    /// assert_eq!(distlock::layout::Kind::Write.json_word(), "read_write");
    /// ```
    pub fn json_word(self) -> &'static str {
        self.row().json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_letter_and_its_code() {
        for kind in Kind::all(7) {
            assert_eq!(Kind::parse_script_arg(&kind.script_arg()), Some(kind));
            let back = Kind::of_code(kind.code(), 7).expect("a code of the table");
            assert_eq!(back.word(), kind.word(), "{kind:?}");
        }
        assert_eq!(Kind::parse_script_arg("p-1"), None);
        assert_eq!(Kind::parse_script_arg("xx"), None);
    }
}
