//! Child processes of the reliability suite: the test binary started again to run
//! one ignored test, and the lines it prints.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use distlock_testkit::{ChildProcess, History, Section};

/// Starts this test binary again as a child that runs the ignored test `role`, with
/// `env` set. The child prints its sections as lines.
pub fn spawn_child(role: &str, env: &[(&str, String)]) -> ChildProcess {
    ChildProcess::spawn(child_command(role, env)).expect("spawn child")
}

/// As [`spawn_child`], with the child's standard input piped, for commands the
/// parent writes to it ([`ChildProcess::stdin`]).
pub fn spawn_child_with_stdin(role: &str, env: &[(&str, String)]) -> ChildProcess {
    let mut command = child_command(role, env);
    command.stdin(std::process::Stdio::piped());
    ChildProcess::spawn(command).expect("spawn child")
}

/// The command that starts this test binary again to run the ignored test `role`.
fn child_command(role: &str, env: &[(&str, String)]) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command.args([
        "--exact",
        role,
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    command.env("DISTLOCK_RELIABILITY_CHILD", "1");
    command
}

/// Whether this process is a child started by [`spawn_child`].
pub fn is_child() -> bool {
    std::env::var_os("DISTLOCK_RELIABILITY_CHILD").is_some()
}

/// Reads the child's lines until one starts with `marker` (returned), recording
/// every section line in `history`. Panics after `limit` without it.
pub fn read_until(
    child: &mut ChildProcess,
    marker: &str,
    history: &History,
    limit: Duration,
) -> String {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Some(line) = child.read_line_timeout(left) else {
            panic!(
                "child {} did not print {marker:?} within {limit:?}",
                child.pid()
            );
        };
        if let Some(section) = Section::parse_line(&line) {
            history.record(section);
        } else if let Some(start) = line.find(marker) {
            // The test harness may have printed `test NAME ... ` before it.
            return line[start..].to_owned();
        }
    }
}

/// `key=value` fields of a line such as `DONE sections=3 lost=0`.
pub fn fields(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
