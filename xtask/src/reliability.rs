//! `cargo xtask reliability`: runs the reliability suite (`tests/reliability_*.rs`)
//! and writes `RELIABILITY.md` from what the tests print.
//!
//! Each scenario prints one machine-readable line,
//! `RELIABILITY scenario=NAME key=value ...`, and libtest prints one
//! `test NAME ... ok|FAILED|ignored, REASON` line per test. This module collects both
//! from the output of `cargo test ... -- --nocapture --test-threads=2`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// The test binaries of the suite that run without seeded faults: the
/// `reliability_*` files, and the files of the faults of issue 24 that live with
/// their feature (`max_hold` outlived by re-entries, deadlocks through dead or
/// overlapping waiters).
pub(crate) const SUITES: [&str; 10] = [
    "lock_max_hold",
    "lock_deadlock",
    "reliability_exactly_once",
    "reliability_processes",
    "reliability_proxy",
    "reliability_server",
    "reliability_pubsub",
    "reliability_input",
    "reliability_security",
    "reliability_tls",
];

/// The test binary of the seeded faults (`--features fault-injection`).
pub(crate) const FAULTS_SUITE: &str = "reliability_faults";

/// The outcome of one test, as libtest reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Passed,
    Failed,
    /// Ignored, with the reason given in `#[ignore = ".."]`.
    Ignored(String),
}

impl Outcome {
    /// Whether the test waits for a change in the core (`#[ignore = "needs core: .."]`).
    pub(crate) fn needs_core(&self) -> bool {
        matches!(self, Outcome::Ignored(reason) if reason.starts_with("needs core"))
    }
}

/// Everything read from the output of the suite.
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// Test name -> outcome (the binary's name prefixed: `binary::test`).
    pub(crate) tests: BTreeMap<String, Outcome>,
    /// Scenario name -> its figures, in print order.
    pub(crate) scenarios: BTreeMap<String, Vec<(String, u64)>>,
    /// Seconds the test binaries ran, from their `finished in` lines (no build time).
    pub(crate) test_seconds: f64,
}

impl Collected {
    /// Reads one line of `cargo test` output from `binary`.
    pub(crate) fn line(&mut self, binary: &str, line: &str) {
        if let Some(start) = line.find("RELIABILITY scenario=") {
            let mut words = line[start + "RELIABILITY ".len()..].split_whitespace();
            let Some(name) = words.next().and_then(|w| w.strip_prefix("scenario=")) else {
                return;
            };
            let figures = words
                .filter_map(|word| word.split_once('='))
                .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
                .collect();
            self.scenarios.insert(name.to_owned(), figures);
            return;
        }
        if line.starts_with("test result:") {
            if let Some(seconds) = line
                .rsplit("finished in ")
                .next()
                .and_then(|rest| rest.trim().strip_suffix('s'))
                .and_then(|number| number.parse::<f64>().ok())
            {
                self.test_seconds += seconds;
            }
            return;
        }
        let Some(rest) = line.strip_prefix("test ") else {
            return;
        };
        let Some((name, result)) = rest.split_once(" ... ") else {
            return;
        };
        let outcome = if result.starts_with("ok") {
            Outcome::Passed
        } else if result.starts_with("FAILED") {
            Outcome::Failed
        } else if let Some(reason) = result.strip_prefix("ignored") {
            Outcome::Ignored(reason.trim_start_matches(", ").trim().to_owned())
        } else {
            return;
        };
        self.tests
            .insert(format!("{binary}::{}", name.trim()), outcome);
    }

    /// The sum of figure `key` over every scenario.
    pub(crate) fn total(&self, key: &str) -> u64 {
        self.scenarios
            .values()
            .flat_map(|figures| figures.iter())
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v)
            .sum()
    }

    fn count(&self, wanted: impl Fn(&Outcome) -> bool) -> usize {
        self.tests.values().filter(|o| wanted(o)).count()
    }

    /// Whether every test that ran passed.
    pub(crate) fn all_passed(&self) -> bool {
        self.count(|o| *o == Outcome::Failed) == 0 && !self.tests.is_empty()
    }
}

/// Runs `command`, echoing its standard output and feeding each line to `collected`.
/// Returns whether it succeeded.
pub(crate) fn run_collecting(
    mut command: Command,
    binary: &str,
    collected: &mut Collected,
) -> Result<bool, String> {
    command.stdout(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|err| format!("could not run cargo: {err}"))?;
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            println!("{line}");
            collected.line(binary, &line);
        }
    }
    let status = child
        .wait()
        .map_err(|err| format!("could not wait for cargo: {err}"))?;
    Ok(status.success())
}

/// `redis-server` processes running from a testkit directory (leaked servers).
pub(crate) fn testkit_servers() -> usize {
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|entry| fs::read(entry.path().join("cmdline")).ok())
        .filter(|cmdline| {
            let text = String::from_utf8_lossy(cmdline);
            text.contains("redis-server") && text.contains("distlock-testkit-")
        })
        .count()
}

/// What the report says about the run besides the collected output.
#[derive(Debug)]
pub(crate) struct RunInfo {
    pub(crate) started: Instant,
    pub(crate) redis_version: String,
    pub(crate) leaked_servers: usize,
}

/// The heading above which `RELIABILITY.md` is written by hand: a run keeps
/// everything before it as it is in the file and writes the rest.
pub(crate) const TOTALS: &str = "## Totals of the last run";

/// The hand-written part of `RELIABILITY.md` (`text`, the file as it is): what
/// comes before [`TOTALS`].
pub(crate) fn hand_written(text: &str) -> Result<&str, String> {
    text.find(&format!("\n{TOTALS}\n"))
        .map(|at| &text[..at])
        .ok_or_else(|| {
            format!(
                "RELIABILITY.md has no line `{TOTALS}`, above which its description is \
                 written by hand and below which a run writes its figures; restore it \
                 from git"
            )
        })
}

/// `RELIABILITY.md`: `intro`, the hand-written description of the suite (see
/// [`hand_written`]), then this run's figures.
pub(crate) fn report(intro: &str, collected: &Collected, run: &RunInfo) -> String {
    let mut out = String::new();
    let passed = collected.count(|o| *o == Outcome::Passed);
    let failed = collected.count(|o| *o == Outcome::Failed);
    let ignored = collected.count(Outcome::needs_core);
    let _ = writeln!(out, "{}", intro.trim_end());
    let _ = writeln!(out);
    let _ = writeln!(out, "{TOTALS}");
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Written by `cargo xtask reliability` against {}, on a machine with {} cores.",
        run.redis_version,
        std::thread::available_parallelism().map_or(0, usize::from)
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "| figure | value |");
    let _ = writeln!(out, "| --- | --- |");
    let rows: [(&str, String); 12] = [
        (
            "tests passed / failed / ignored (need core work)",
            format!("{passed} / {failed} / {ignored}"),
        ),
        (
            "scenarios reporting figures",
            collected.scenarios.len().to_string(),
        ),
        (
            "critical sections checked",
            collected.total("sections").to_string(),
        ),
        (
            "overlapping belief intervals",
            collected.total("overlaps").to_string(),
        ),
        (
            "fencing token regressions",
            collected.total("token_regressions").to_string(),
        ),
        (
            "stale fenced writes accepted",
            collected.total("stale_writes_accepted").to_string(),
        ),
        (
            "seeded faults caught",
            format!(
                "{} of {}",
                collected.total("caught"),
                collected.total("seeded_faults")
            ),
        ),
        (
            "bad inputs tried",
            collected.total("bad_inputs").to_string(),
        ),
        (
            "leaked keys / channels",
            format!(
                "{} / {}",
                collected.total("leaked_keys"),
                collected.total("leaked_channels")
            ),
        ),
        (
            "leaked redis-server processes",
            run.leaked_servers.to_string(),
        ),
        (
            "wall time of the test binaries",
            format!("{:.1} s", collected.test_seconds),
        ),
        (
            "wall time with the build",
            format!("{:.1} s", run.started.elapsed().as_secs_f64()),
        ),
    ];
    for (figure, value) in rows {
        let _ = writeln!(out, "| {figure} | {value} |");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "## Tests");
    let _ = writeln!(out);
    let _ = writeln!(out, "| test | result |");
    let _ = writeln!(out, "| --- | --- |");
    for (name, outcome) in &collected.tests {
        if matches!(outcome, Outcome::Ignored(_)) && !outcome.needs_core() {
            continue; // helper processes, not tests
        }
        let result = match outcome {
            Outcome::Passed => "passed".to_owned(),
            Outcome::Failed => "**FAILED**".to_owned(),
            Outcome::Ignored(reason) => format!("ignored: {}", reason.replace('|', "\\|")),
        };
        let _ = writeln!(out, "| `{name}` | {result} |");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "## Scenario figures");
    let _ = writeln!(out);
    let _ = writeln!(out, "| scenario | figures |");
    let _ = writeln!(out, "| --- | --- |");
    for (name, figures) in &collected.scenarios {
        let figures: Vec<String> = figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "| `{name}` | {} |", figures.join(" "));
    }
    out
}

/// Writes the report to `path`.
pub(crate) fn write(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|err| format!("could not write {}: {err}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collects_summaries_and_outcomes() {
        let mut collected = Collected::default();
        collected.line(
            "b",
            "test x ... RELIABILITY scenario=one sections=10 overlaps=0 leaked_keys=1",
        );
        collected.line(
            "b",
            "RELIABILITY scenario=two sections=5 caught=1 seeded_faults=1",
        );
        collected.line("b", "test first ... ok");
        collected.line("b", "test second ... FAILED");
        collected.line("b", "test third ... ignored, needs core: a thing");
        collected.line("b", "test helper ... ignored, a helper process");
        collected.line(
            "b",
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 2.50s",
        );
        assert_eq!(collected.total("sections"), 15);
        assert_eq!(collected.total("leaked_keys"), 1);
        assert_eq!(collected.tests.len(), 4);
        assert_eq!(
            collected.tests["b::third"],
            Outcome::Ignored("needs core: a thing".into())
        );
        assert!(!collected.all_passed());
        let run = RunInfo {
            started: Instant::now(),
            redis_version: "Redis 7.0".into(),
            leaked_servers: 0,
        };
        let file = "# Reliability\n\nBy hand.\n\n## Totals of the last run\n\nold figures\n";
        let intro = hand_written(file).expect("the heading is there");
        let text = report(intro, &collected, &run);
        assert!(
            text.starts_with("# Reliability\n\nBy hand.\n\n## Totals"),
            "{text}"
        );
        assert!(!text.contains("old figures"), "{text}");
        assert!(
            text.contains("| critical sections checked | 15 |"),
            "{text}"
        );
        assert!(text.contains("| seeded faults caught | 1 of 1 |"), "{text}");
        assert!(text.contains("| 1 / 1 / 1 |"), "{text}");
        assert!(!text.contains("b::helper"), "{text}");
        assert!(
            text.contains("| wall time of the test binaries | 2.5 s |"),
            "{text}"
        );
    }

    #[test]
    fn a_file_without_its_totals_heading_is_refused() {
        let err = hand_written("# Reliability\n\nno figures here\n")
            .expect_err("no heading, no hand-written part");
        assert!(err.contains("## Totals of the last run"), "{err}");
    }
}
