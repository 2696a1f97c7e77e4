//! One module per subcommand, and what they share: the target, the output format,
//! and writing to stdout without panicking on a closed pipe.

use std::io::{self, Write};

use serde::Serialize;

use crate::connect::Target;
use crate::error::{CliError, Exit};

pub(crate) mod force_unlock;
pub(crate) mod inspect;
pub(crate) mod list;
pub(crate) mod ping;
pub(crate) mod watch;
pub(crate) mod web;

/// What every command gets: where to connect, and how to print.
#[derive(Debug)]
pub(crate) struct Context {
    /// The deployment and namespace.
    pub(crate) target: Target,
    /// `--json`: machine output.
    pub(crate) json: bool,
}

/// Writes `text` to stdout and flushes it (so that `watch` lines leave at once).
///
/// A closed pipe (`distlock list | head -1`) ends the command quietly with exit 0:
/// the reader has what it wanted.
pub(crate) fn print(text: &str) -> Result<(), CliError> {
    let mut stdout = io::stdout().lock();
    let written = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == io::ErrorKind::BrokenPipe => {
            Err(CliError::new(Exit::Ok, String::new()))
        }
        Err(err) => Err(CliError::new(
            Exit::Failed,
            format!("could not write to stdout: {err}"),
        )),
    }
}

/// Writes `value` as one line of JSON.
pub(crate) fn print_json(value: &impl Serialize) -> Result<(), CliError> {
    let mut line = serde_json::to_string(value).map_err(|err| {
        CliError::new(
            Exit::Failed,
            format!("could not encode the output as JSON: {err}"),
        )
    })?;
    line.push('\n');
    print(&line)
}

/// Writes a line to stderr (warnings, prompts, the force-unlock log), ignoring a
/// closed stderr.
pub(crate) fn note(text: &str) {
    let mut stderr = io::stderr().lock();
    let _ = stderr
        .write_all(text.as_bytes())
        .and_then(|()| stderr.flush());
}
