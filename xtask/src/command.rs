//! Child commands: running them with their output shown, and how a task fails (with
//! a message, or with the exit status of the command that failed).

use std::ffi::OsStr;
use std::fmt;
use std::path::Path;
use std::process::{Command, ExitStatus};

/// Why a task failed.
pub(crate) enum Failure {
    /// Print this and exit with status 1.
    Message(String),
    /// A child command failed: exit with its status, it has said why.
    Status(u8),
}

impl<E: fmt::Display> From<E> for Failure {
    fn from(err: E) -> Self {
        Failure::Message(err.to_string())
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// Runs `command` with inherited stdio, after printing it.
pub(crate) fn run(mut command: Command) -> Result<()> {
    println!("xtask: running `{}`", display(&command));
    let status = command
        .status()
        .map_err(|err| format!("could not run `{}`: {err}", display(&command)))?;
    check(status)
}

fn check(status: ExitStatus) -> Result<()> {
    if status.success() {
        return Ok(());
    }
    let code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    Err(Failure::Status(
        u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1),
    ))
}

pub(crate) fn display(command: &Command) -> String {
    let program = Path::new(command.get_program())
        .file_name()
        .unwrap_or_else(|| command.get_program());
    std::iter::once(program)
        .chain(command.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_child() {
        use std::os::unix::process::ExitStatusExt;
        let code = |raw| match check(ExitStatus::from_raw(raw)) {
            Ok(()) => 0,
            Err(Failure::Status(code)) => code,
            Err(Failure::Message(message)) => panic!("{message}"),
        };
        assert_eq!(code(0), 0);
        assert_eq!(code(101 << 8), 101);
        assert_eq!(code(libc::SIGKILL), 128 + 9);
    }
}
