//! The report of the lock kinds (8: uncontended pairs, 9: hand-off, 10: readers):
//! their rows of the main table, their table and their details.

use std::fmt::Write as _;
use std::time::Duration;

use super::{fmt_us, load_label, median, percentile, rate, ratio, runs_list, Results, Row};
use crate::kind::Kind;
use crate::kinds::{KindResults, KindRun, KindSample, KindSettings};
use crate::reference::Load;
use crate::settings::Settings;
use crate::stats::{max, us};

/// The median of `values` and their range: "m (lo–hi)"; the value alone for one run.
fn with_range(values: &[f64], unit: impl Fn(f64) -> String) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match values.len() {
        0 => "—".to_owned(),
        1 => unit(values[0]),
        _ => format!("{} ({}–{})", unit(median(values)), unit(lo), unit(hi)),
    }
}

/// A duration in µs, for [`with_range`] over seconds.
fn secs_us(secs: f64) -> String {
    format!("{:.0} µs", secs * 1e6)
}

/// The sample of `run` at `load`: one task at `-c 1`, many tasks pipelined.
fn sample_at(run: &KindRun, load: Load) -> &KindSample {
    match load {
        Load::C1 => &run.one,
        Load::Pipelined => &run.many,
    }
}

/// Each run's `f(kind's run) / f(plain lock's run)`, runs paired by their index.
fn against_plain(
    kind: &KindResults,
    plain: Option<&KindResults>,
    f: impl Fn(&KindRun) -> f64,
) -> Vec<f64> {
    plain.map_or_else(Vec::new, |plain| {
        kind.runs
            .iter()
            .zip(&plain.runs)
            .map(|(k, p)| f(k) / f(p).max(1e-12))
            .collect()
    })
}

/// Each run's pair rate at `load` over the kind's scripts' reference at that load.
fn against_scripts(kind: &KindResults, load: Load) -> Vec<f64> {
    kind.runs
        .iter()
        .map(|r| sample_at(r, load).rate() / r.reference.at(load).pairs().max(1e-9))
        .collect()
}

/// How a kind's pairs/s compare with the plain lock's in the same runs, in words.
fn beside_plain(kind: Kind, per_run: &[f64]) -> String {
    if kind == Kind::Plain {
        return "the baseline of rows 8".to_owned();
    }
    if per_run.is_empty() {
        return "the plain lock not measured".to_owned();
    }
    let m = median(per_run);
    let times = with_range(per_run, |v| format!("{v:.2}"));
    if m < 0.95 {
        format!("**behind** the plain lock: {times} × its pairs/s in the same runs")
    } else if m <= 1.05 {
        format!("as fast as the plain lock: {times} × its pairs/s in the same runs")
    } else {
        format!("ahead of the plain lock: {times} × its pairs/s in the same runs")
    }
}

/// The label of the many-task scenario.
fn tasks_label(settings: &KindSettings, load: Load) -> String {
    match load {
        Load::C1 => "one task".to_owned(),
        Load::Pipelined => format!("{} tasks, each on its own names", settings.tasks),
    }
}

/// Phase 8: each kind, one task and many tasks, against its own scripts.
pub(super) fn uncontended_rows(settings: &Settings, results: &Results) -> Vec<Row> {
    let k = &results.kinds;
    let plain = k.of(Kind::Plain);
    let mut rows = Vec::new();
    for load in [Load::C1, Load::Pipelined] {
        let plain_ratio = plain.map(|p| median(&against_scripts(p, load)));
        for kind in &k.uncontended {
            if kind.runs.is_empty() {
                continue;
            }
            let rates: Vec<f64> = kind
                .runs
                .iter()
                .map(|r| sample_at(r, load).rate())
                .collect();
            let references: Vec<f64> = kind
                .runs
                .iter()
                .map(|r| r.reference.at(load).pairs())
                .collect();
            let vs_plain = against_plain(kind, plain, |r| sample_at(r, load).rate());
            let plain_note = match (kind.kind, plain_ratio) {
                (Kind::Plain, _) | (_, None) => String::new(),
                (_, Some(p)) => format!("; the plain lock's, to its own: {}", ratio(p)),
            };
            rows.push(Row {
                scenario: format!(
                    "8. {}, {}, acquire+release on fresh names (current-thread runtime): \
                     pairs/s against its own scripts ({}) run by redis-benchmark",
                    kind.kind,
                    tasks_label(&settings.kinds, load),
                    kind.kind.scripts()
                ),
                measured: format!(
                    "{}; {}",
                    with_range(&rates, rate),
                    beside_plain(kind.kind, &vs_plain)
                ),
                reference: format!(
                    "{} pairs ({}, same runs)",
                    with_range(&references, rate),
                    load_label(load)
                ),
                ratio: format!(
                    "{}{plain_note}",
                    with_range(&against_scripts(kind, load), ratio)
                ),
                target: "—".into(),
                met: None,
            });
        }
    }
    rows
}

/// Phase 9: the hand-off of each kind to a waiter in another process.
pub(super) fn handoff_rows(settings: &Settings, results: &Results) -> Vec<Row> {
    let k = &results.kinds;
    if k.handoffs.is_empty() {
        return Vec::new();
    }
    let p50s = |kind: Kind| -> Vec<f64> {
        k.handoffs_of(kind)
            .iter()
            .map(|l| percentile(l, 50.0).as_secs_f64())
            .collect()
    };
    let plain = p50s(Kind::Plain);
    let idle: Vec<f64> = k
        .handoffs
        .iter()
        .map(|r| r.round_trips.after_idle.as_secs_f64())
        .collect();
    let mut rows = Vec::new();
    for &kind in &settings.kinds.handoff_kinds {
        let all: Vec<Duration> = k.handoffs_of(kind).concat();
        if all.is_empty() {
            continue;
        }
        let lowest = all.iter().copied().min().unwrap_or_default();
        let measured = format!(
            "p50 {} (range {}–{}, p99 {}, {} hand-offs)",
            fmt_us(percentile(&all, 50.0)),
            fmt_us(lowest),
            fmt_us(max(&all)),
            fmt_us(percentile(&all, 99.0)),
            all.len()
        );
        let mine = p50s(kind);
        let (what, reference, per_run) = if kind == Kind::Plain {
            (
                "the plain lock, as scenario 5 (row 5) measures it, in the same runs as the \
                 kinds"
                    .to_owned(),
                format!(
                    "{} (plain redis-rs EVALSHA after 1 ms idle, p50, each run's own)",
                    with_range(&idle, secs_us)
                ),
                mine.iter()
                    .zip(&idle)
                    .map(|(m, i)| m / i.max(1e-9))
                    .collect(),
            )
        } else {
            let waiter = match kind {
                Kind::Write => "a writer waiting behind a writer",
                _ => "the next waiter in the queue",
            };
            let per_run: Vec<f64> = mine
                .iter()
                .zip(&plain)
                .map(|(m, p)| m / p.max(1e-9))
                .collect();
            let verdict = match median(&per_run) {
                r if r > 1.10 => "**behind** the plain lock's hand-off",
                r if r < 0.90 => "faster than the plain lock's hand-off",
                _ => "on a par with the plain lock's hand-off",
            };
            (
                format!("the {kind}, {waiter}; {verdict}"),
                format!(
                    "{} (the plain lock's p50, same child, rounds interleaved with these)",
                    with_range(&plain, secs_us)
                ),
                per_run,
            )
        };
        rows.push(Row {
            scenario: format!(
                "9. Hand-off to a waiter in another process, `unlock()` called → the waiter \
                 holds it: {what}"
            ),
            measured,
            reference,
            ratio: format!("{} (p50s, per run)", with_range(&per_run, ratio)),
            target: "—".into(),
            met: None,
        });
    }
    rows
}

/// Phase 10: readers of one name against the plain lock of one name.
pub(super) fn readers_rows(settings: &Settings, results: &Results) -> Vec<Row> {
    let k = &results.kinds;
    let s = &settings.kinds;
    let mut rows = Vec::new();
    for &tasks in &s.reader_counts {
        let runs = k.readers_at(tasks);
        if runs.is_empty() {
            continue;
        }
        let read: Vec<f64> = runs.iter().map(|r| r.read.rate()).collect();
        let exclusive: Vec<f64> = runs.iter().map(|r| r.exclusive.rate()).collect();
        let per_run: Vec<f64> = runs
            .iter()
            .map(|r| r.read.rate() / r.exclusive.rate().max(1e-9))
            .collect();
        let verdict = if median(&per_run) < 1.0 {
            "; **behind** the exclusive lock"
        } else {
            ""
        };
        rows.push(Row {
            scenario: format!(
                "10. {tasks} readers of one name ({} clients, tasks split evenly), `read_lock` + \
                 `unlock` in a loop for {:?}: read pairs/s against the same tasks on the plain \
                 lock of one name (exclusive)",
                s.reader_clients, s.reader_duration
            ),
            measured: format!("{}{verdict}", with_range(&read, rate)),
            reference: format!(
                "{} (plain lock, same tasks and clients, same runs)",
                with_range(&exclusive, rate)
            ),
            ratio: with_range(&per_run, ratio),
            target: "—".into(),
            met: None,
        });
    }
    rows
}

/// The table of phase 8: every kind, both task counts, with requests and CPU.
pub(super) fn kinds_table(out: &mut String, settings: &Settings, results: &Results) {
    let k = &results.kinds;
    if k.uncontended.iter().all(|kind| kind.runs.is_empty()) {
        return;
    }
    let _ = writeln!(
        out,
        "\n#### Lock kinds: uncontended pairs against their own scripts, same server, same runs\n\n\
         Medians of {} runs (ranges in rows 8); each kind's reference is redis-benchmark running \
         that kind's scripts (`-c 1` for one task, `-P 16 -c 8` for {} tasks), measured right \
         before it; \"× plain\" is the kind's pairs/s over the plain lock's in the same run. \
         Script runs are `EVALSHA` calls (a run of acquire.lua or release.lua carries one \
         or several acquisitions or releases of one client, several under load; a run of \
         acquire_all.lua one set). CPU in µs per acquire+release pair: the server's \
         (`INFO cpu`) in the scenario, and in the reference run (redis-benchmark running the \
         kind's scripts alone, one release per request), with the client's.\n\n\
         | Kind | Scripts | Tasks | pairs/s | reference pairs/s | ratio | × plain | script runs per pair | server CPU (`INFO cpu`) | its scripts' server CPU (redis-benchmark) | client CPU |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        settings.kinds.runs, settings.kinds.tasks
    );
    let plain = k.of(Kind::Plain);
    for load in [Load::C1, Load::Pipelined] {
        for kind in k.uncontended.iter().filter(|kind| !kind.runs.is_empty()) {
            let samples: Vec<&KindSample> = kind.runs.iter().map(|r| sample_at(r, load)).collect();
            let column = |f: fn(&KindSample) -> f64| {
                median(&samples.iter().map(|s| f(s)).collect::<Vec<_>>())
            };
            let tasks = if load == Load::C1 {
                1
            } else {
                settings.kinds.tasks
            };
            let vs_plain = against_plain(kind, plain, |r| sample_at(r, load).rate());
            let _ = writeln!(
                out,
                "| {} | {} | {tasks} | {} | {} ({}) | {} | {} | {:.2} | {:.1} | {:.1} | {:.1} |",
                kind.kind,
                kind.kind.scripts(),
                rate(column(KindSample::rate)),
                rate(median(
                    &kind
                        .runs
                        .iter()
                        .map(|r| r.reference.at(load).pairs())
                        .collect::<Vec<_>>()
                )),
                load_label(load),
                ratio(median(&against_scripts(kind, load))),
                if vs_plain.is_empty() {
                    "—".to_owned()
                } else {
                    ratio(median(&vs_plain))
                },
                column(KindSample::script_runs_per_pair),
                column(KindSample::server_cpu_us),
                median(
                    &kind
                        .runs
                        .iter()
                        .map(|r| r.reference.at(load).server_cpu_per_pair())
                        .collect::<Vec<_>>()
                ),
                column(KindSample::client_cpu_us),
            );
        }
    }
}

/// The lock kinds run by run.
pub(super) fn kinds_details(out: &mut String, results: &Results) {
    let k = &results.kinds;
    for kind in k.uncontended.iter().filter(|kind| !kind.runs.is_empty()) {
        let references: Vec<String> = kind
            .runs
            .iter()
            .map(|r| {
                let (c, p) = (&r.reference.c1, &r.reference.pipelined);
                format!(
                    "[{:.0}, {:.0}, {:.0}, {:.0}; {:.0} % / {:.0} %; {:.1} + {:.1} µs]",
                    c.acquire,
                    c.release,
                    p.acquire,
                    p.release,
                    c.release_hits * 100.0,
                    p.release_hits * 100.0,
                    p.server_acquire_us,
                    p.server_release_us
                )
            })
            .collect();
        let rates = |load: Load| {
            runs_list(
                &kind
                    .runs
                    .iter()
                    .map(|r| sample_at(r, load).rate())
                    .collect::<Vec<_>>(),
                rate,
            )
        };
        let _ = writeln!(
            out,
            "- Phase 8, {}, per run: its scripts' reference [acquire `-c 1`, release `-c 1`, \
             acquire pipelined, release pipelined] requests/s, with the share of releases that \
             released a held lock (`-c 1` / pipelined) and the server's CPU per acquire + per \
             release request (pipelined): {}; one task {}; many tasks {}.",
            kind.kind,
            references.join(", "),
            rates(Load::C1),
            rates(Load::Pipelined)
        );
    }
    if !k.handoffs.is_empty() {
        let runs: Vec<String> = k
            .handoffs
            .iter()
            .map(|run| {
                let kinds: Vec<String> = run
                    .latencies
                    .iter()
                    .map(|(kind, l)| {
                        format!(
                            "{} {:.0} / {:.0} µs",
                            kind.word(),
                            us(percentile(l, 50.0)),
                            us(percentile(l, 99.0))
                        )
                    })
                    .collect();
                format!(
                    "{} (EVALSHA {} / {})",
                    kinds.join(", "),
                    fmt_us(run.round_trips.back_to_back),
                    fmt_us(run.round_trips.after_idle)
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "- Phase 9 per run (p50 / p99 of each kind's hand-offs; plain redis-rs EVALSHA p50 \
             back to back / after 1 ms idle, right before): {}.",
            runs.join("; ")
        );
    }
    if !k.readers.is_empty() {
        let runs: Vec<String> = k
            .readers
            .iter()
            .map(|r| {
                format!(
                    "{} tasks: read {} pairs in {:.2} s (the hash had {} fields at the end), \
                     plain {} in {:.2} s",
                    r.tasks,
                    r.read.pairs,
                    r.read.secs,
                    r.read.fields,
                    r.exclusive.pairs,
                    r.exclusive.secs
                )
            })
            .collect();
        let _ = writeln!(out, "- Phase 10 per run: {}.", runs.join("; "));
    }
}
