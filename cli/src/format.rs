//! Output: the JSON shapes of `--json`, human tables, durations and timestamps.
//!
//! Every JSON object is built from a `Serialize` struct here, so a field added
//! later (a richer `ping`, a new lock kind) is one more field, and the objects keep
//! the shape they have. Durations are milliseconds in JSON (`*_ms`), and like
//! `2.1s` for people. Owner ids never appear: the library never returns them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use distlock::{HoldMode, Holder, LockInfo, LockKind};
use serde::Serialize;

/// A lock's state, as `inspect`, `list` and `watch` print it in JSON.
#[derive(Debug, Serialize)]
pub(crate) struct LockView {
    /// The lock name (invalid UTF-8 replaced).
    pub(crate) name: String,
    /// Whether some owner holds it.
    pub(crate) held: bool,
    /// `exclusive`, `read_write`, `semaphore`, `fair` (the kind table's JSON
    /// word, `LockKind::json_word`); `null` when no lock is there.
    pub(crate) kind: Option<&'static str>,
    /// The kind itself, for the human layout.
    #[serde(skip)]
    lock_kind: Option<LockKind>,
    /// A semaphore's permit count.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<u32>,
    /// The hold count (with several holders, their sum).
    pub(crate) hold_count: u64,
    /// The lease left, in milliseconds (with several holders, the longest).
    pub(crate) lease_remaining_ms: Option<u64>,
    /// The holder's fencing token (a read-write lock's: the writer's).
    pub(crate) fencing_token: Option<u64>,
    /// The last fencing token ever issued for the name.
    pub(crate) last_fencing_token: Option<u64>,
    /// Every holder.
    pub(crate) holders: Vec<HolderView>,
    /// Waiters that keep a place in Redis (waiting writers, a fair lock's queue).
    pub(crate) waiting: u64,
    /// Connections subscribed to the lock's release channel: one per client with
    /// tasks waiting for the lock (however many), one per `distlock watch`; `null`
    /// when the server refused `PUBSUB`.
    pub(crate) listening: Option<u64>,
}

/// One holder, in JSON.
#[derive(Debug, Serialize)]
pub(crate) struct HolderView {
    /// `exclusive`, `write`, `read`, `permit`.
    pub(crate) mode: &'static str,
    /// Its hold count.
    pub(crate) hold_count: u64,
    /// Its lease left, in milliseconds.
    pub(crate) lease_remaining_ms: Option<u64>,
    /// Its fencing token.
    pub(crate) fencing_token: Option<u64>,
    /// Who it is, as its client wrote it; `null` when it wrote nothing.
    pub(crate) holder: Option<WhoView>,
}

/// Who holds a lock, in JSON: what its client wrote with the first acquisition.
#[derive(Debug, Serialize)]
pub(crate) struct WhoView {
    /// The service (`LockClientBuilder::service`, by default the executable's name).
    pub(crate) service: String,
    /// The holder's host.
    pub(crate) host: String,
    /// The holder's process id.
    pub(crate) pid: u32,
    /// Where it took the lock: a function, or a source location.
    pub(crate) site: String,
    /// When, on the server's clock, in RFC 3339 (UTC).
    pub(crate) acquired_at: String,
    /// For how long, in milliseconds.
    pub(crate) held_for_ms: u64,
    /// All of it as people read it: `orders-api on host-3, pid 4121, in
    /// orders::place_order, for 2.1s`.
    pub(crate) text: String,
}

impl LockView {
    /// The view of `info`, the state of the lock `name`.
    pub(crate) fn new(name: &[u8], info: &LockInfo) -> Self {
        Self {
            name: String::from_utf8_lossy(name).into_owned(),
            held: info.held,
            kind: info.kind.map(LockKind::json_word),
            lock_kind: info.kind,
            permits: match info.kind {
                Some(LockKind::Semaphore { permits }) => Some(permits),
                _ => None,
            },
            hold_count: info.hold_count,
            lease_remaining_ms: info.lease_remaining.map(millis),
            fencing_token: info.fencing_token,
            last_fencing_token: info.last_fencing_token,
            holders: info.holders.iter().map(HolderView::new).collect(),
            waiting: info.waiting,
            listening: info.listening,
        }
    }

    /// Whether nothing is there: no holder, no waiter.
    pub(crate) fn is_free(&self) -> bool {
        !self.held && self.holders.is_empty() && self.waiting == 0
    }

    /// The kind as people read it: `read-write`, `semaphore(4)`, `-` for none.
    pub(crate) fn kind_label(&self) -> String {
        match (self.lock_kind, self.kind) {
            (Some(LockKind::Semaphore { permits }), Some(kind)) => format!("{kind}({permits})"),
            (_, Some(kind)) => kind.replace('_', "-"),
            (_, None) => "-".to_owned(),
        }
    }

    /// The human `inspect` output: aligned `field  value` lines, then the holders.
    pub(crate) fn human(&self, namespace: &str) -> String {
        let lease = self
            .lease_remaining_ms
            .map_or_else(|| "-".to_owned(), human_millis);
        let fields = [
            ("lock", printable(&self.name)),
            ("namespace", namespace.to_owned()),
            ("kind", self.kind_label()),
            ("held", if self.held { "yes" } else { "no" }.to_owned()),
            ("hold count", self.hold_count.to_string()),
            ("lease left", lease),
            ("holders", self.holders.len().to_string()),
            ("waiting", self.waiting_text()),
            ("listening", self.listening_text()),
            ("held by", self.held_by()),
            ("fencing token", optional(self.fencing_token)),
            ("last fencing token", optional(self.last_fencing_token)),
        ];
        let mut out = String::new();
        for (field, value) in fields {
            out.push_str(&format!("{field:<18}  {value}\n"));
        }
        if !self.holders.is_empty() {
            let rows: Vec<Vec<String>> = self
                .holders
                .iter()
                .map(|holder| {
                    vec![
                        holder.mode.to_owned(),
                        holder.hold_count.to_string(),
                        holder
                            .lease_remaining_ms
                            .map_or_else(|| "-".to_owned(), human_millis),
                        optional(holder.fencing_token),
                        holder
                            .holder
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |who| printable(&who.text)),
                    ]
                })
                .collect();
            out.push('\n');
            out.push_str(&table(
                &["MODE", "HOLDS", "LEASE LEFT", "TOKEN", "HELD BY"],
                &[
                    Align::Left,
                    Align::Right,
                    Align::Right,
                    Align::Right,
                    Align::Left,
                ],
                &rows,
            ));
        }
        out
    }

    /// The `waiting` line of `inspect`: the waiters that keep a place in Redis, and
    /// what they are; a plain lock's and a semaphore's waiters keep none.
    fn waiting_text(&self) -> String {
        let n = self.waiting;
        match self.lock_kind {
            Some(LockKind::ReadWrite) => format!(
                "{n} writer{} keeping a place (new readers wait behind {})",
                plural(n),
                if n == 1 { "it" } else { "them" }
            ),
            Some(LockKind::Fair) => format!("{n} in the fair lock's queue"),
            _ if n == 0 => {
                "- (this kind's waiters keep no place in Redis: see listening)".to_owned()
            }
            _ => n.to_string(),
        }
    }

    /// The `listening` line of `inspect`: how many connections wait for a release
    /// message, and what that counts.
    fn listening_text(&self) -> String {
        match self.listening {
            Some(n) => format!(
                "{n} client{} subscribed to its release (one per client with tasks waiting \
                 for it, however many; one per `distlock watch`)",
                plural(n)
            ),
            None => "unknown (the server refused PUBSUB NUMSUB to this user)".to_owned(),
        }
    }

    /// Who holds the lock, as people read it (the first holder: the writer or
    /// exclusive holder); `-` when free, and a word when its holder is not named.
    pub(crate) fn held_by(&self) -> String {
        match self.holders.first() {
            None => "-".to_owned(),
            Some(holder) => holder.holder.as_ref().map_or_else(
                || "not named yet (a holder is named once it has held the lock for 1 s)".to_owned(),
                |who| printable(&who.text),
            ),
        }
    }

    /// The first holder in short: `orders-api@host-3:4121`.
    fn holder_short(&self) -> String {
        self.holders
            .first()
            .and_then(|holder| holder.holder.as_ref())
            .map_or_else(
                || "-".to_owned(),
                |who| printable(&format!("{}@{}:{}", who.service, who.host, who.pid)),
            )
    }

    /// One row of the human `list` table (see [`LIST_HEADER`]).
    pub(crate) fn list_row(&self) -> Vec<String> {
        vec![
            printable(&self.name),
            self.kind_label(),
            self.holder_short(),
            self.holders.len().to_string(),
            self.hold_count.to_string(),
            self.lease_remaining_ms
                .map_or_else(|| "-".to_owned(), human_millis),
            self.waiting.to_string(),
            optional(self.listening),
        ]
    }

    /// The short summary `watch` prints after an event.
    pub(crate) fn summary(&self) -> String {
        if self.is_free() {
            return "free".to_owned();
        }
        let lease = self
            .lease_remaining_ms
            .map_or_else(|| "-".to_owned(), human_millis);
        let by = match self.holder_short().as_str() {
            "-" => String::new(),
            short => format!(" by {short}"),
        };
        format!(
            "{} {}{by}, {} holder{}, hold count {}, lease left {lease}, {} waiting, {} listening",
            if self.held { "held" } else { "free" },
            self.kind_label(),
            self.holders.len(),
            if self.holders.len() == 1 { "" } else { "s" },
            self.hold_count,
            self.waiting,
            optional(self.listening),
        )
    }
}

/// The columns of the human `list` table.
pub(crate) const LIST_HEADER: [&str; 8] = [
    "NAME",
    "KIND",
    "HOLDER",
    "HOLDERS",
    "HOLDS",
    "LEASE LEFT",
    "WAITING",
    "LISTENING",
];

/// How the columns of the `list` table are aligned.
pub(crate) const LIST_ALIGN: [Align; 8] = [
    Align::Left,
    Align::Left,
    Align::Left,
    Align::Right,
    Align::Right,
    Align::Right,
    Align::Right,
    Align::Right,
];

impl HolderView {
    fn new(holder: &Holder) -> Self {
        Self {
            mode: mode_name(holder.mode),
            hold_count: holder.hold_count,
            lease_remaining_ms: holder.lease_remaining.map(millis),
            fencing_token: holder.fencing_token,
            holder: holder.info.as_ref().map(|info| WhoView {
                service: info.service.clone(),
                host: info.host.clone(),
                pid: info.pid,
                site: info.site.clone(),
                acquired_at: timestamp(
                    info.acquired_at
                        .duration_since(UNIX_EPOCH)
                        .unwrap_or(Duration::ZERO),
                ),
                held_for_ms: millis(info.held_for),
                text: info.to_string(),
            }),
        }
    }
}

/// The JSON name of a hold mode.
fn mode_name(mode: HoldMode) -> &'static str {
    match mode {
        HoldMode::Exclusive => "exclusive",
        HoldMode::Write => "write",
        HoldMode::Read => "read",
        HoldMode::Permit => "permit",
        _ => "other",
    }
}

/// `text` with its control characters escaped (`\u{1b}`), so that a lock name
/// printed for people cannot drive their terminal. JSON output escapes them itself.
pub(crate) fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `"s"` unless `n` is 1.
fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// `value`, or `-`.
fn optional(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |value| value.to_string())
}

/// Whole milliseconds of `duration`.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A duration for people: `850ms`, `2.1s`, `4m05s`, `3h07m`.
pub(crate) fn human_millis(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}.{}s", ms / 1_000, ms % 1_000 / 100),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, ms % 60_000 / 1_000),
        _ => format!("{}h{:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// How a table column is aligned.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Align {
    /// Text: padded on the right.
    Left,
    /// Numbers: padded on the left.
    Right,
}

/// `rows` under `header`, each column as wide as its widest cell, two spaces
/// apart, without trailing spaces.
pub(crate) fn table(header: &[&str], align: &[Align], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|title| title.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
            if i > 0 {
                out.push_str("  ");
            }
            match align.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => {
                    out.push_str(cell);
                    out.push_str(&pad);
                }
                Align::Right => {
                    out.push_str(&pad);
                    out.push_str(cell);
                }
            }
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// The time now, in UTC, as RFC 3339 with milliseconds: `2026-05-01T12:00:03.120Z`.
pub(crate) fn timestamp_now() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    timestamp(since)
}

/// `since` the Unix epoch, as RFC 3339 in UTC with milliseconds.
fn timestamp(since: Duration) -> String {
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let (year, month, day) = civil_from_days(days);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3_600,
        of_day % 3_600 / 60,
        of_day % 60,
        since.subsec_millis()
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01: (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Count in 400-year eras from 0000-03-01, so that the leap day ends a year.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_people_write_them() {
        assert_eq!(human_millis(0), "0ms");
        assert_eq!(human_millis(850), "850ms");
        assert_eq!(human_millis(2_149), "2.1s");
        assert_eq!(human_millis(29_990), "29.9s");
        assert_eq!(human_millis(245_000), "4m05s");
        assert_eq!(human_millis(11_220_000), "3h07m");
    }

    #[test]
    fn timestamps_are_utc_rfc3339() {
        assert_eq!(timestamp(Duration::ZERO), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 (a leap day of a century year) 12:34:56.789.
        let leap = Duration::from_millis(951_827_696_789);
        assert_eq!(timestamp(leap), "2000-02-29T12:34:56.789Z");
        // 2024-12-31T23:59:59.
        assert_eq!(
            timestamp(Duration::from_secs(1_735_689_599)),
            "2024-12-31T23:59:59.000Z"
        );
        assert_eq!(
            timestamp(Duration::from_secs(1_709_251_200)),
            "2024-03-01T00:00:00.000Z"
        );
    }

    #[test]
    fn control_characters_are_shown_escaped() {
        assert_eq!(printable("order:42"), "order:42");
        assert_eq!(printable("a\u{1b}[2Jb\n"), "a\\u{1b}[2Jb\\n");
    }

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned()],
            vec!["long name".to_owned(), "100".to_owned()],
        ];
        let shown = table(&["NAME", "N"], &[Align::Left, Align::Right], &rows);
        assert_eq!(shown, "NAME         N\na            1\nlong name  100\n");
    }
}
