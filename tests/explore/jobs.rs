//! `--jobs N`: the search of each world split over N processes of this same
//! program, each with its own `redis-server` and `--part K/N`, and their reports
//! joined into one per world. The explorer spends most of a schedule waiting for
//! quiet, so more processes than cores still run faster.

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use crate::world::Bound;
use crate::{chosen_worlds, value_of, Report};

/// Runs this program `jobs` times with the same arguments and `--part K/N`, and
/// prints one report per world from theirs.
pub(crate) fn run(args: &[String], jobs: &str) -> ExitCode {
    let Some(n) = jobs.parse::<u64>().ok().filter(|n| *n > 0) else {
        eprintln!("explore: --jobs takes a number of processes, such as 4");
        return ExitCode::FAILURE;
    };
    if ["--replay", "--sample", "--seeded", "--fault"]
        .iter()
        .any(|flag| args.iter().any(|a| a == flag))
    {
        eprintln!("explore: --jobs splits the exhaustive search only; run --replay, --sample, --seeded and --fault without it");
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            eprintln!("explore: cannot find this program to run its parts: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut rest: Vec<String> = Vec::new();
    let mut skip = false;
    for arg in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if arg == "--jobs" {
            skip = true;
        } else {
            rest.push(arg.clone());
        }
    }
    let started = Instant::now();
    let mut children = Vec::new();
    for k in 0..n {
        let child = Command::new(&exe)
            .args(&rest)
            .arg("--part")
            .arg(format!("{k}/{n}"))
            .stdout(Stdio::piped())
            .spawn();
        match child {
            Ok(child) => children.push(child),
            Err(err) => {
                eprintln!("explore: could not start part {k}/{n}: {err}");
                return ExitCode::FAILURE;
            }
        }
    }
    // Each part's output is read on its own thread, so that none blocks on a full pipe.
    let readers: Vec<_> = children
        .iter_mut()
        .filter_map(|child| child.stdout.take())
        .map(|out| {
            std::thread::spawn(move || {
                BufReader::new(out)
                    .lines()
                    .map_while(Result::ok)
                    .collect::<Vec<String>>()
            })
        })
        .collect();
    let mut lines = Vec::new();
    for reader in readers {
        lines.extend(reader.join().unwrap_or_default());
    }
    let mut parts_failed = 0;
    for mut child in children {
        // A part exits with failure when it found a violation: that shows below.
        if !child.wait().is_ok_and(|status| status.success()) {
            parts_failed += 1;
        }
    }
    let value = |name: &str| value_of(args, name);
    let mut worlds = chosen_worlds(
        Bound::of(args),
        value("--world").as_deref(),
        value("--faults").and_then(|b| b.parse().ok()),
    );
    worlds.sort_by_key(|w| w.name);
    let mut violations = 0;
    let mut total = (0, 0);
    for world in &worlds {
        let mut report = Report::new(world);
        let mut parts = 0;
        let mut replays = HashSet::new();
        for fields in reports_of(&lines, "RELIABILITY scenario=explore_", world.name) {
            parts += 1;
            let number = |key: &str| fields.get(key).and_then(|v| v.parse::<u64>().ok());
            report.schedules += number("schedules").unwrap_or(0) as usize;
            report.deepest = report.deepest.max(number("deepest").unwrap_or(0) as usize);
            report.diverged += number("diverged").unwrap_or(0) as usize;
            report.complete &= number("complete") == Some(1);
            report.secs = report.secs.max(number("ms").unwrap_or(0) as f64 / 1000.0);
        }
        if parts < n {
            report.complete = false;
        }
        for fields in reports_of(&lines, "explore states world=", world.name) {
            if let Some(hashes) = fields.get("hashes") {
                report.states.extend(
                    hashes
                        .split(',')
                        .filter_map(|h| u64::from_str_radix(h, 16).ok()),
                );
            }
        }
        let mut at = 0;
        while at + 1 < lines.len() {
            let (first, second) = (&lines[at], &lines[at + 1]);
            at += 1;
            let (Some(violation), Some(replay)) = (
                first.trim().strip_prefix("VIOLATION: "),
                second
                    .trim()
                    .strip_prefix("replay: cargo xtask explore --replay '")
                    .and_then(|r| r.strip_suffix('\'')),
            ) else {
                continue;
            };
            if replay.starts_with(&format!("{}/", world.name)) && replays.insert(replay.to_owned())
            {
                report
                    .violations
                    .push((replay.to_owned(), violation.to_owned()));
            }
        }
        report
            .violations
            .sort_by_key(|(replay, _)| replay.split('.').count());
        violations += report.violations.len();
        total.0 += report.schedules;
        total.1 += report.states.len();
        report.print(world.faults, false);
    }
    println!(
        "explore total worlds={} schedules={} states={} secs={:.1} jobs={n}",
        worlds.len(),
        total.0,
        total.1,
        started.elapsed().as_secs_f64(),
    );
    if violations > 0 || parts_failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The `key=value` fields of each line that starts with `prefix` followed by
/// `world` and a space.
fn reports_of<'a>(
    lines: &'a [String],
    prefix: &'a str,
    world: &'a str,
) -> impl Iterator<Item = BTreeMap<&'a str, &'a str>> + 'a {
    lines.iter().filter_map(move |line| {
        let rest = line.strip_prefix(prefix)?.strip_prefix(world)?;
        let rest = rest.strip_prefix(' ')?;
        Some(
            rest.split_whitespace()
                .filter_map(|word| word.split_once('='))
                .collect(),
        )
    })
}
