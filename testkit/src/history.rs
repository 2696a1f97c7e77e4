//! A history of critical sections and a checker that finds two owners in one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};

/// The time on `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process of
/// the machine, so sections recorded by different processes can be compared.
///
/// # Examples
///
/// ```
/// use distlock_testkit::monotonic_ns;
///
/// let before = monotonic_ns();
/// let after = monotonic_ns();
/// assert!(after >= before); // one clock for every process of the machine
/// ```
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec`; CLOCK_MONOTONIC always exists.
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts);
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// One critical section as its participant saw it.
///
/// The *belief interval* is `[acquired_ns, end_ns()]`: from the moment the acquire
/// returned to the moment the participant invoked the release (or stopped acting on
/// the lock), capped by the lease deadline it believed in, if it had one (for a fixed
/// lease: the acquire's send time plus the lease).
///
/// # Examples
///
/// ```
/// use distlock_testkit::{monotonic_ns, Section};
///
/// let acquired_ns = monotonic_ns();
/// // ... the critical section ...
/// let section = Section {
///     owner: "p1/t2".into(),
///     token: Some(7),
///     acquired_ns,
///     released_ns: monotonic_ns(),
///     deadline_ns: None,
/// };
/// assert!(section.end_ns() >= section.acquired_ns);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// Who held the lock: a label unique per holder (e.g. `p2/t3`). Nested re-entries
    /// of one holder carry the same label.
    pub owner: String,
    /// The fencing token the holder got, if any.
    pub token: Option<u64>,
    /// When the acquire returned ([`monotonic_ns`]).
    pub acquired_ns: u64,
    /// When the release was invoked, or the holder stopped acting on the lock.
    pub released_ns: u64,
    /// The lease deadline the holder believed in, if it had one.
    pub deadline_ns: Option<u64>,
}

impl Section {
    /// The end of the belief interval: the release, or the believed deadline if earlier.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::Section;
    ///
    /// let section = Section {
    ///     owner: "a".into(),
    ///     token: None,
    ///     acquired_ns: 100,
    ///     released_ns: 500,
    ///     deadline_ns: Some(300), // the lease it believed in ended first
    /// };
    /// assert_eq!(section.end_ns(), 300);
    /// ```
    pub fn end_ns(&self) -> u64 {
        match self.deadline_ns {
            Some(deadline) => self.released_ns.min(deadline),
            None => self.released_ns,
        }
    }

    /// The section as one line of text, for a child process to print on its standard
    /// output: `SECTION owner=.. token=.. acquired=.. released=.. deadline=..`
    /// (`-` for a missing token or deadline). Owners must not contain spaces.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::Section;
    ///
    /// let section = Section { owner: "child-1".into(), token: Some(3), acquired_ns: 10, released_ns: 20, deadline_ns: None };
    /// // A child process prints it; the parent reads it back with `Section::parse_line`.
    /// let line = section.to_line();
    /// assert!(line.starts_with("SECTION owner=child-1 token=3"));
    /// assert_eq!(Section::parse_line(&line), Some(section));
    /// ```
    pub fn to_line(&self) -> String {
        let opt = |value: Option<u64>| value.map_or("-".to_owned(), |v| v.to_string());
        format!(
            "SECTION owner={} token={} acquired={} released={} deadline={}",
            self.owner,
            opt(self.token),
            self.acquired_ns,
            self.released_ns,
            opt(self.deadline_ns)
        )
    }

    /// Parses a line that contains one made by [`Section::to_line`] (text before it is
    /// skipped); `None` for any other line, so that a child's other output can be
    /// skipped.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::Section;
    ///
    /// let output = "child-1 ready\nSECTION owner=child-1 token=- acquired=10 released=20 deadline=-";
    /// let sections: Vec<Section> = output.lines().filter_map(Section::parse_line).collect();
    /// assert_eq!(sections.len(), 1);
    /// assert_eq!(sections[0].owner, "child-1");
    /// ```
    pub fn parse_line(line: &str) -> Option<Section> {
        // Anywhere in the line: a test harness may print its own text before it.
        let start = line.find("SECTION ")?;
        let rest = &line[start + "SECTION ".len()..];
        let mut fields = BTreeMap::new();
        for word in rest.split_whitespace() {
            let (key, value) = word.split_once('=')?;
            fields.insert(key, value);
        }
        let num = |key: &str| fields.get(key)?.parse::<u64>().ok();
        let opt = |key: &str| match *fields.get(key)? {
            "-" => Some(None),
            value => value.parse::<u64>().ok().map(Some),
        };
        Some(Section {
            owner: (*fields.get("owner")?).to_owned(),
            token: opt("token")?,
            acquired_ns: num("acquired")?,
            released_ns: num("released")?,
            deadline_ns: opt("deadline")?,
        })
    }
}

/// Two sections of different owners whose belief intervals overlap.
///
/// # Examples
///
/// ```
/// use distlock_testkit::{check_sections, Section};
///
/// let a = Section { owner: "a".into(), token: None, acquired_ns: 0, released_ns: 10, deadline_ns: None };
/// let b = Section { owner: "b".into(), token: None, acquired_ns: 5, released_ns: 20, deadline_ns: None };
/// let report = check_sections(&[a.clone(), b.clone()]);
/// let overlap = &report.overlaps[0];
/// assert_eq!((&overlap.first, &overlap.second), (&a, &b));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The section that began first.
    pub first: Section,
    /// The section that began while `first` was still believed held.
    pub second: Section,
}

impl Overlap {
    /// How long both owners believed they held the lock, in nanoseconds.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::{check_sections, Section};
    ///
    /// let a = Section { owner: "a".into(), token: None, acquired_ns: 0, released_ns: 10, deadline_ns: None };
    /// let b = Section { owner: "b".into(), token: None, acquired_ns: 5, released_ns: 20, deadline_ns: None };
    /// let report = check_sections(&[a, b]);
    /// assert_eq!(report.overlaps[0].overlap_ns(), 5); // both believed they held it for 5 ns
    /// ```
    pub fn overlap_ns(&self) -> u64 {
        self.first
            .end_ns()
            .min(self.second.end_ns())
            .saturating_sub(self.second.acquired_ns)
    }
}

/// A fencing token lower than one handed to an earlier section.
///
/// # Examples
///
/// ```
/// use distlock_testkit::{check_sections, Section};
///
/// let first = Section { owner: "a".into(), token: Some(9), acquired_ns: 0, released_ns: 10, deadline_ns: None };
/// let later = Section { owner: "b".into(), token: Some(4), acquired_ns: 20, released_ns: 30, deadline_ns: None };
/// let report = check_sections(&[first, later]);
/// let regression = &report.token_regressions[0];
/// assert_eq!((regression.earlier.token, regression.later.token), (Some(9), Some(4)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRegression {
    /// The earlier section, with the higher token.
    pub earlier: Section,
    /// The later section, with the lower token.
    pub later: Section,
}

/// What [`History::check`] found.
///
/// # Examples
///
/// ```
/// use distlock_testkit::{check_sections, Section};
///
/// let a = Section { owner: "a".into(), token: Some(1), acquired_ns: 0, released_ns: 10, deadline_ns: None };
/// let b = Section { owner: "b".into(), token: Some(2), acquired_ns: 10, released_ns: 20, deadline_ns: None };
/// let report = check_sections(&[a, b]);
/// assert_eq!((report.sections, report.owners), (2, 2));
/// assert!(report.is_clean());
/// println!("{report}"); // a summary, and the problems found
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// How many sections were checked.
    pub sections: usize,
    /// How many distinct owners took part.
    pub owners: usize,
    /// Sections of different owners whose belief intervals overlap.
    pub overlaps: Vec<Overlap>,
    /// Fencing tokens that went backwards (in the order of acquisition).
    pub token_regressions: Vec<TokenRegression>,
    /// Sections whose release comes before their acquire (a bug in the recording).
    pub malformed: Vec<Section>,
    /// Sections whose acquire returned after the lease deadline the holder believed
    /// in: the lock was handed out when it could already belong to someone else.
    pub late_grants: Vec<Section>,
}

impl Report {
    /// Whether the history is linearizable as a mutex: no overlaps, no token going
    /// backwards, nothing malformed.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::{History, Section};
    ///
    /// let history = History::new();
    /// history.record(Section { owner: "a".into(), token: None, acquired_ns: 0, released_ns: 10, deadline_ns: None });
    /// history.record(Section { owner: "b".into(), token: None, acquired_ns: 5, released_ns: 20, deadline_ns: None });
    /// assert!(!history.check().is_clean()); // a and b overlapped
    /// ```
    pub fn is_clean(&self) -> bool {
        self.overlaps.is_empty()
            && self.token_regressions.is_empty()
            && self.malformed.is_empty()
            && self.late_grants.is_empty()
    }

    /// Panics with a description of the first problems unless the report is clean.
    ///
    /// # Panics
    ///
    /// When [`is_clean`](Report::is_clean) is false.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::{History, Section};
    ///
    /// let history = History::new();
    /// history.record(Section { owner: "a".into(), token: Some(1), acquired_ns: 0, released_ns: 10, deadline_ns: None });
    /// history.record(Section { owner: "b".into(), token: Some(2), acquired_ns: 10, released_ns: 20, deadline_ns: None });
    /// history.check().assert_clean(); // panics, listing the problems, otherwise
    /// ```
    pub fn assert_clean(&self) {
        assert!(
            self.is_clean(),
            "the history is not a mutex history:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} sections by {} owners: {} overlaps, {} fencing token regressions, {} late \
             grants, {} malformed",
            self.sections,
            self.owners,
            self.overlaps.len(),
            self.token_regressions.len(),
            self.late_grants.len(),
            self.malformed.len()
        )?;
        for overlap in self.overlaps.iter().take(5) {
            writeln!(
                f,
                "  overlap of {} µs:\n    {}\n    {}",
                overlap.overlap_ns() / 1000,
                overlap.first.to_line(),
                overlap.second.to_line()
            )?;
        }
        for regression in self.token_regressions.iter().take(5) {
            writeln!(
                f,
                "  token went backwards:\n    {}\n    {}",
                regression.earlier.to_line(),
                regression.later.to_line()
            )?;
        }
        for section in self.late_grants.iter().take(5) {
            writeln!(
                f,
                "  granted after its believed deadline: {}",
                section.to_line()
            )?;
        }
        for section in self.malformed.iter().take(5) {
            writeln!(f, "  malformed: {}", section.to_line())?;
        }
        Ok(())
    }
}

/// The critical sections of one lock, recorded by every participant; thread-safe.
///
/// Each participant (a task, a thread, a child process) records one [`Section`] per
/// critical section; sections recorded in other processes come in through
/// [`History::extend_from_lines`]. [`History::check`] then looks for two owners that
/// believed they held the lock at the same time, and for fencing tokens that went
/// backwards.
///
/// # Examples
///
/// ```
/// use distlock_testkit::{History, Section};
///
/// let history = History::new();
/// history.record(Section { owner: "a".into(), token: Some(1), acquired_ns: 0, released_ns: 10, deadline_ns: None });
/// history.record(Section { owner: "b".into(), token: Some(2), acquired_ns: 10, released_ns: 20, deadline_ns: None });
/// assert!(history.check().is_clean());
/// history.record(Section { owner: "c".into(), token: Some(3), acquired_ns: 15, released_ns: 30, deadline_ns: None });
/// assert_eq!(history.check().overlaps.len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct History {
    sections: Mutex<Vec<Section>>,
}

impl History {
    /// An empty history.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::History;
    ///
    /// let history = History::new();
    /// assert!(history.is_empty());
    /// ```
    pub fn new() -> History {
        History::default()
    }

    /// Adds one section.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use distlock_testkit::{monotonic_ns, History, Section};
    ///
    /// let history = Arc::new(History::new());
    /// let worker = {
    ///     let history = Arc::clone(&history);
    ///     std::thread::spawn(move || {
    ///         let acquired_ns = monotonic_ns(); // after the lock was taken
    ///         let released_ns = monotonic_ns(); // before it is given back
    ///         history.record(Section { owner: "t1".into(), token: None, acquired_ns, released_ns, deadline_ns: None });
    ///     })
    /// };
    /// worker.join().expect("the worker");
    /// assert_eq!(history.len(), 1);
    /// ```
    pub fn record(&self, section: Section) {
        self.sections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(section);
    }

    /// Adds every line of `text` that [`Section::parse_line`] understands; returns
    /// how many.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::History;
    ///
    /// // What a child process printed on its standard output.
    /// let output = "starting\nSECTION owner=c1 token=- acquired=10 released=20 deadline=-\ndone\n";
    /// let history = History::new();
    /// assert_eq!(history.extend_from_lines(output), 1);
    /// ```
    pub fn extend_from_lines(&self, text: &str) -> usize {
        let mut added = 0;
        for section in text.lines().filter_map(Section::parse_line) {
            self.record(section);
            added += 1;
        }
        added
    }

    /// A copy of every section recorded so far.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::{History, Section};
    ///
    /// let history = History::new();
    /// history.record(Section { owner: "a".into(), token: Some(1), acquired_ns: 0, released_ns: 10, deadline_ns: None });
    /// let tokens: Vec<Option<u64>> = history.sections().iter().map(|s| s.token).collect();
    /// assert_eq!(tokens, [Some(1)]);
    /// ```
    pub fn sections(&self) -> Vec<Section> {
        self.sections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many sections were recorded.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::{History, Section};
    ///
    /// let history = History::new();
    /// history.record(Section { owner: "a".into(), token: None, acquired_ns: 0, released_ns: 10, deadline_ns: None });
    /// assert_eq!(history.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.sections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no section was recorded.
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::History;
    ///
    /// let history = History::new();
    /// // A history with nothing in it proves nothing: check that the test did run.
    /// assert!(history.is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the history; see [`check_sections`].
    ///
    /// # Examples
    ///
    /// ```
    /// use distlock_testkit::{History, Section};
    ///
    /// let history = History::new();
    /// history.record(Section { owner: "a".into(), token: Some(1), acquired_ns: 0, released_ns: 10, deadline_ns: None });
    /// history.record(Section { owner: "b".into(), token: Some(2), acquired_ns: 10, released_ns: 20, deadline_ns: None });
    /// let report = history.check();
    /// assert!(report.is_clean(), "{report}");
    /// ```
    pub fn check(&self) -> Report {
        check_sections(&self.sections())
    }
}

/// Checks `sections` of one lock.
///
/// - **Overlaps**: two sections of different owners whose belief intervals
///   (`[acquired_ns, end_ns()]`) share more than an instant. Sections of one owner
///   may nest or overlap (re-entry). Touching ends (`a.end == b.acquired`) are fine.
/// - **Token regressions**: in the order of acquisition, a section whose fencing
///   token is lower than the highest token of an earlier section of another owner.
///   Sections without a token are skipped.
/// - **Late grants**: sections whose acquire returned at or after the lease deadline
///   the holder believed in (a lock handed out that may already be someone else's).
/// - **Malformed** sections end before they begin.
///
/// # Examples
///
/// ```
/// use distlock_testkit::{check_sections, Section};
///
/// let sections = [
///     Section { owner: "a".into(), token: Some(1), acquired_ns: 0, released_ns: 10, deadline_ns: None },
///     // Re-entry: the same owner may overlap itself.
///     Section { owner: "a".into(), token: Some(1), acquired_ns: 2, released_ns: 8, deadline_ns: None },
///     Section { owner: "b".into(), token: Some(2), acquired_ns: 10, released_ns: 20, deadline_ns: None },
/// ];
/// assert!(check_sections(&sections).is_clean());
/// ```
pub fn check_sections(sections: &[Section]) -> Report {
    let mut sorted: Vec<&Section> = sections.iter().collect();
    sorted.sort_by_key(|s| (s.acquired_ns, s.end_ns()));
    let mut report = Report {
        sections: sections.len(),
        owners: sections
            .iter()
            .map(|s| s.owner.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        ..Report::default()
    };
    for section in &sorted {
        if section.released_ns < section.acquired_ns {
            report.malformed.push((*section).clone());
        }
        if section
            .deadline_ns
            .is_some_and(|deadline| deadline <= section.acquired_ns)
        {
            report.late_grants.push((*section).clone());
        }
    }
    // Overlaps: sweep in acquisition order. `open` holds, per owner, the section of
    // that owner that ends last among those seen so far.
    let mut open: BTreeMap<&str, &Section> = BTreeMap::new();
    for section in &sorted {
        open.retain(|_, other| other.end_ns() > section.acquired_ns);
        for (owner, other) in &open {
            if *owner != section.owner && section.end_ns() > section.acquired_ns {
                report.overlaps.push(Overlap {
                    first: (*other).clone(),
                    second: (*section).clone(),
                });
            }
        }
        let entry = open.entry(section.owner.as_str()).or_insert(section);
        if section.end_ns() > entry.end_ns() {
            *entry = section;
        }
    }
    // Tokens: never lower than the highest token of another owner acquired before.
    let mut highest: Option<&Section> = None;
    for section in &sorted {
        let Some(token) = section.token else { continue };
        if let Some(top) = highest {
            if top.owner != section.owner && token < top.token.unwrap_or(0) {
                report.token_regressions.push(TokenRegression {
                    earlier: top.clone(),
                    later: (*section).clone(),
                });
            }
        }
        if highest.is_none_or(|top| token >= top.token.unwrap_or(0)) {
            highest = Some(section);
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(owner: &str, token: u64, from: u64, to: u64) -> Section {
        Section {
            owner: owner.into(),
            token: Some(token),
            acquired_ns: from,
            released_ns: to,
            deadline_ns: None,
        }
    }

    #[test]
    fn sequential_and_nested_sections_are_clean() {
        let report = check_sections(&[
            section("a", 1, 0, 100),
            section("a", 1, 10, 50), // re-entry
            section("b", 2, 100, 200),
            section("c", 3, 250, 300),
        ]);
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.sections, 4);
        assert_eq!(report.owners, 3);
    }

    #[test]
    fn overlapping_owners_are_reported() {
        let report = check_sections(&[section("a", 1, 0, 100), section("b", 2, 99, 200)]);
        assert_eq!(report.overlaps.len(), 1, "{report}");
        assert_eq!(report.overlaps[0].overlap_ns(), 1);
    }

    #[test]
    fn a_long_section_overlapping_a_later_one_is_reported() {
        let report = check_sections(&[
            section("a", 1, 0, 1000),
            section("b", 2, 10, 20),
            section("c", 3, 500, 600),
        ]);
        assert_eq!(report.overlaps.len(), 2, "{report}");
    }

    #[test]
    fn the_believed_deadline_caps_a_section() {
        let mut late = section("a", 1, 0, 1000);
        late.deadline_ns = Some(100);
        let report = check_sections(&[late.clone(), section("b", 2, 100, 200)]);
        assert!(report.is_clean(), "{report}");
        late.deadline_ns = Some(101);
        let report = check_sections(&[late, section("b", 2, 100, 200)]);
        assert_eq!(report.overlaps.len(), 1);
    }

    #[test]
    fn a_grant_after_its_deadline_is_reported() {
        let mut late = section("a", 1, 100, 200);
        late.deadline_ns = Some(100);
        let report = check_sections(&[late]);
        assert_eq!(report.late_grants.len(), 1, "{report}");
        assert!(!report.is_clean());
    }

    #[test]
    fn tokens_going_backwards_are_reported() {
        let report = check_sections(&[section("a", 5, 0, 10), section("b", 4, 20, 30)]);
        assert_eq!(report.token_regressions.len(), 1, "{report}");
        assert!(!report.is_clean());
    }

    /// Whether two sections of different owners share more than an instant.
    fn truly_overlap(a: &Section, b: &Section) -> bool {
        a.owner != b.owner
            && a.end_ns() > a.acquired_ns
            && b.end_ns() > b.acquired_ns
            && a.acquired_ns < b.end_ns()
            && b.acquired_ns < a.end_ns()
    }

    #[test]
    fn the_sweep_agrees_with_checking_every_pair() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        for _ in 0..2000 {
            let count = 1 + next(8) as usize;
            let sections: Vec<Section> = (0..count)
                .map(|_| {
                    let from = next(100);
                    let mut s = section(&format!("o{}", next(3)), 0, from, from + next(30));
                    s.token = None;
                    if next(4) == 0 {
                        s.deadline_ns = Some(from + next(30));
                    }
                    s
                })
                .collect();
            let report = check_sections(&sections);
            let any = sections
                .iter()
                .enumerate()
                .any(|(i, a)| sections[i + 1..].iter().any(|b| truly_overlap(a, b)));
            assert_eq!(!report.overlaps.is_empty(), any, "{sections:#?}\n{report}");
            for overlap in &report.overlaps {
                assert!(truly_overlap(&overlap.first, &overlap.second), "{report}");
            }
        }
    }

    #[test]
    fn lines_round_trip() {
        let mut s = section("p1/t2", 7, 11, 22);
        assert_eq!(Section::parse_line(&s.to_line()), Some(s.clone()));
        s.token = None;
        s.deadline_ns = Some(20);
        assert_eq!(Section::parse_line(&s.to_line()), Some(s.clone()));
        assert_eq!(Section::parse_line("running 1 test"), None);
        let prefixed = format!("test child ... {}", s.to_line());
        assert_eq!(Section::parse_line(&prefixed), Some(s.clone()));
        let history = History::new();
        let text = format!("noise\n{}\nmore noise\n", s.to_line());
        assert_eq!(history.extend_from_lines(&text), 1);
        assert_eq!(history.len(), 1);
    }

    #[test]
    fn the_monotonic_clock_moves_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        assert!(a > 0);
    }
}
