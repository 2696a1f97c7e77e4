//! Exit codes, and the errors that end a command with one of them.

use std::fmt;
use std::process::ExitCode;

use distlock::redis::RedisError;
use distlock::LockError;

/// How a command ended, as its exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// 0: done.
    Ok = 0,
    /// 1: the lock is not held, nothing matched, nothing was deleted, or the
    /// operator said no.
    Nothing = 1,
    /// 2: bad usage: an unknown option, a bad URL, name or namespace.
    Usage = 2,
    /// 3: the server could not be reached (or refused the connection).
    Unreachable = 3,
    /// 4: any other error: a permission refused, a foreign key, a server error.
    Failed = 4,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}

/// What `--help` says about exit codes (the README says the same).
pub(crate) const EXIT_CODES: &str = "\
Exit codes:
  0  done (inspect: the lock is held; list: a lock was listed; force-unlock: a lock was deleted)
  1  not held / not found / nothing deleted (or the confirmation was declined)
  2  bad usage: unknown option, bad URL, lock name or namespace
  3  cannot reach the server (connection refused or timed out, TLS or password refused)
  4  any other error (a permission refused, a key of another type, a server error)";

/// An error that ends the command: its message for stderr, and its exit code.
#[derive(Debug)]
pub(crate) struct CliError {
    /// The exit status.
    pub(crate) exit: Exit,
    /// What happened and what to do, one or more lines.
    pub(crate) message: String,
}

impl CliError {
    /// An error with `exit` and `message`.
    pub(crate) fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
        }
    }

    /// A usage error (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    /// A Redis error of the command's own connection, while doing `what` (such as
    /// `scanning 127.0.0.1:6379`): exit 3 when the server could not be reached.
    pub(crate) fn redis(what: &str, err: &RedisError) -> Self {
        let exit = if unreachable(err) {
            Exit::Unreachable
        } else {
            Exit::Failed
        };
        let hint = if exit == Exit::Unreachable {
            "check that the server runs at that address, the URL, the network and TLS \
             (`rediss://`, `--tls-ca`)"
        } else if err.code() == Some("NOPERM") {
            "the Redis user lacks a permission: see the ACL section of distlock's README"
        } else {
            "check the server's health and the URL's credentials"
        };
        Self::new(exit, format!("{what}: Redis error: {err}; {hint}"))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<LockError> for CliError {
    fn from(err: LockError) -> Self {
        let exit = match &err {
            LockError::Connect { .. } => Exit::Unreachable,
            LockError::Redis(redis) if unreachable(redis) => Exit::Unreachable,
            _ if err.is_invalid_input() => Exit::Usage,
            _ => Exit::Failed,
        };
        Self::new(exit, err.to_string())
    }
}

/// Whether `err` says that the server could not be reached: refused, timed out,
/// dropped, or any other I/O error.
fn unreachable(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_connection_dropped()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_get_the_documented_codes() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        assert_eq!(CliError::redis("scanning", &io).exit, Exit::Unreachable);
        assert_eq!(CliError::from(LockError::Redis(io)).exit, Exit::Unreachable);
        let refused = tokio::runtime::Builder::new_current_thread()
            .build()
            .map(|runtime| {
                runtime.block_on(distlock::LockClient::builder().url("not a url").connect())
            });
        match refused {
            Ok(Err(err)) => assert_eq!(CliError::from(err).exit, Exit::Usage),
            other => panic!("a bad URL must be refused before dialing: {other:?}"),
        }
        let server_error = RedisError::from((distlock::redis::ErrorKind::Client, "boom"));
        assert_eq!(
            CliError::from(LockError::Redis(server_error)).exit,
            Exit::Failed
        );
    }

    #[test]
    fn help_names_every_code() {
        for code in ["0 ", "1 ", "2 ", "3 ", "4 "] {
            assert!(EXIT_CODES.contains(&format!("  {code}")), "{code}");
        }
    }
}
