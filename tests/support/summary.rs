//! The machine-readable summary lines `cargo xtask reliability` reads.

use distlock_testkit::Report;

/// Prints the machine-readable summary line of a scenario, read by
/// `cargo xtask reliability`: `RELIABILITY scenario=NAME key=value ...`.
pub fn summary(scenario: &str, figures: &[(&str, u64)]) {
    let mut line = format!("RELIABILITY scenario={scenario}");
    for (key, value) in figures {
        line.push_str(&format!(" {key}={value}"));
    }
    println!("{line}");
}

/// Prints the summary of a checked history (sections, overlaps, ...) plus `extra`.
pub fn summary_of(scenario: &str, report: &Report, extra: &[(&str, u64)]) {
    let mut figures = vec![
        ("sections", report.sections as u64),
        ("overlaps", report.overlaps.len() as u64),
        ("token_regressions", report.token_regressions.len() as u64),
        ("late_grants", report.late_grants.len() as u64),
    ];
    figures.extend_from_slice(extra);
    summary(scenario, &figures);
}
