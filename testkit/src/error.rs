//! The error type of the testkit.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// What can go wrong while starting, driving or stopping a test server or process.
///
/// Every message says what happened and what to do about it.
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::{RedisServer, TestkitError};
///
/// match RedisServer::start() {
///     Ok(server) => println!("a server at {}", server.url()),
///     // The message says how to install redis-server.
///     Err(err @ TestkitError::MissingBinary { .. }) => eprintln!("{err}"),
///     Err(err) => panic!("{err}"),
/// }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// The nodes of a [`RedisCluster`](crate::RedisCluster) did not form a healthy cluster.
    #[error(
        "the Redis Cluster did not come together: {detail}; the machine may be overloaded, \
         or redis-server may lack cluster support"
    )]
    Cluster {
        /// What was waited for.
        detail: String,
    },

    /// A [`SentinelGroup`](crate::SentinelGroup) could not be set up, or did not
    /// reach the state waited for in time.
    #[error("Redis Sentinel group: {detail}")]
    Sentinel {
        /// What went wrong or was waited for, and what to do about it.
        detail: String,
    },

    /// No `redis-server` binary was found (or `$REDIS_SERVER` points to nothing usable).
    #[error(
        "{detail}\n\
         distlock's tests need redis-server 7.0 or newer. Install it with one of:\n  \
         - `sudo apt-get install redis-server` (Debian/Ubuntu)\n  \
         - `brew install redis` (macOS)\n  \
         - `cargo xtask test`, which installs it with apt-get when run as root\n\
         or point the REDIS_SERVER environment variable at a redis-server binary.\n\
         To only run the examples, a server in docker is enough: \
         `docker run --rm -p 6379:6379 redis:7`."
    )]
    MissingBinary {
        /// Where the binary was looked for, and why nothing there was usable.
        detail: String,
    },

    /// The server or process could not be spawned.
    #[error(
        "could not spawn `{}`: {source}; check that the file exists and is executable, \
         or set REDIS_SERVER to a working redis-server binary",
        program.display()
    )]
    Spawn {
        /// The program that was spawned.
        program: PathBuf,
        /// The error reported by the operating system.
        #[source]
        source: io::Error,
    },

    /// `redis-server` exited while it was starting.
    #[error(
        "redis-server on 127.0.0.1:{port} exited during startup ({status}); \
         check the extra arguments given to the builder. Output:\n{log_tail}"
    )]
    Exited {
        /// The port the server was started on.
        port: u16,
        /// How the process ended.
        status: String,
        /// The last lines of the server's output.
        log_tail: String,
    },

    /// `redis-server` did not answer `PING` in time.
    #[error(
        "redis-server on 127.0.0.1:{port} did not answer PING within {waited:?}; \
         the machine may be overloaded (raise the timeout with \
         `RedisServerBuilder::startup_timeout`). Output:\n{log_tail}"
    )]
    NotReady {
        /// The port the server was started on.
        port: u16,
        /// How long the testkit waited.
        waited: Duration,
        /// The last lines of the server's output.
        log_tail: String,
    },

    /// Every port tried was taken by another process by the time the server bound it.
    #[error(
        "could not start redis-server: the loopback port was taken by another process \
         {attempts} times in a row; free some ports or run fewer tests at once. \
         Last output:\n{log_tail}"
    )]
    NoFreePort {
        /// How many ports were tried.
        attempts: u32,
        /// The last lines of the output of the last attempt.
        log_tail: String,
    },

    /// The server or process is not running (it was stopped, killed, or it exited).
    #[error(
        "{what} is not running; start it again (e.g. `RedisServer::restart`) before \
         sending it signals"
    )]
    NotRunning {
        /// What was not running, e.g. `redis-server on 127.0.0.1:6400`.
        what: String,
    },

    /// Sending a signal to a process failed.
    #[error("could not send {signal} to process {pid}: {source}")]
    Signal {
        /// The signal's name, e.g. `SIGSTOP`.
        signal: &'static str,
        /// The process id.
        pid: u32,
        /// The error reported by the operating system.
        #[source]
        source: io::Error,
    },

    /// The server answered a command with an error reply (`-ERR ...`).
    #[error("redis replied with an error: {0}")]
    Reply(String),

    /// The server's reply could not be parsed as RESP2.
    #[error("malformed reply from redis-server: {0}")]
    Protocol(String),

    /// An I/O operation failed (connecting, a timed-out read, a temporary directory...).
    #[error("{context}: {source}")]
    Io {
        /// What the testkit was doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl TestkitError {
    /// Whether this is an I/O timeout, e.g. a command sent to a paused server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// server.pause()?; // SIGSTOP: nothing answers
    /// let err = server.cmd_timeout(&["PING"], Duration::from_millis(100)).expect_err("paused");
    /// assert!(err.is_timeout());
    /// server.resume()?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn is_timeout(&self) -> bool {
        match self {
            Self::Io { source, .. } => matches!(
                source.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }

    /// Whether the server answered with an error reply ([`TestkitError::Reply`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// let err = server.cmd(&["NOSUCHCOMMAND"]).expect_err("an error reply");
    /// assert!(err.is_reply());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn is_reply(&self) -> bool {
        matches!(self, Self::Reply(_))
    }

    /// Whether no usable `redis-server` binary was found ([`TestkitError::MissingBinary`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// match RedisServer::start() {
    ///     Ok(_server) => { /* the test */ }
    ///     // No redis-server on this machine: skip, saying how to install one.
    ///     Err(err) if err.is_missing_binary() => eprintln!("skipped: {err}"),
    ///     Err(err) => panic!("{err}"),
    /// }
    /// ```
    pub fn is_missing_binary(&self) -> bool {
        matches!(self, Self::MissingBinary { .. })
    }

    /// Whether the target was not running ([`TestkitError::NotRunning`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start()?;
    /// server.stop()?;
    /// assert!(server.pause().expect_err("stopped").is_not_running());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn is_not_running(&self) -> bool {
        matches!(self, Self::NotRunning { .. })
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
