//! [`RedisServer`]: a throwaway `redis-server` on a free loopback port.

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::binary::redis_server_binary;
use crate::error::TestkitError;
use crate::process::{kill_and_reap, send_signal, spawn_tied};
use crate::resp::{self, Reply};

/// How many ports [`RedisServer::start`] tries when each is taken before the server binds it.
const PORT_ATTEMPTS: u32 = 5;
/// Default time a server gets to answer `PING`.
const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time [`RedisServer::cmd`] waits for each step (connect, write, read).
const DEFAULT_CMD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long each readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(250);
/// How many lines of each output file go into an error message.
const LOG_TAIL_LINES: usize = 20;
/// What redis-server prints when its port is taken.
const PORT_TAKEN_MARKER: &str = "Address already in use";

/// Settings for a [`RedisServer`]; made by [`RedisServer::builder`].
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::RedisServer;
///
/// let server = RedisServer::builder()
///     .arg("--maxmemory")
///     .arg("1mb")
///     .arg("--maxmemory-policy")
///     .arg("noeviction")
///     .start()?;
/// assert_eq!(server.cmd(&["CONFIG", "GET", "maxmemory"])?, "maxmemory\n1048576");
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedisServerBuilder {
    binary: Option<PathBuf>,
    config_file: Option<PathBuf>,
    args: Vec<OsString>,
    startup_timeout: Duration,
    password: Option<Password>,
}

impl Default for RedisServerBuilder {
    fn default() -> Self {
        Self {
            binary: None,
            config_file: None,
            args: Vec::new(),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            password: None,
        }
    }
}

/// A server's `requirepass`; `Debug` does not show it.
#[derive(Clone)]
struct Password(String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

impl RedisServerBuilder {
    /// Default settings: the binary from [`redis_server_binary`], no extra
    /// arguments, a 10 s startup timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServerBuilder;
    ///
    /// // The same as `RedisServer::builder()`.
    /// let server = RedisServerBuilder::new().arg("--maxmemory-policy").arg("noeviction").start()?;
    /// # let _ = server;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one command-line argument, passed after the testkit's own.
    ///
    /// Later arguments win in `redis-server`, so this can change any setting. Do not
    /// change `--port`, `--bind` or `--daemonize`, and do not set `--requirepass`
    /// (use [`RedisServerBuilder::password`]): the testkit needs them to find and
    /// check the server.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder().arg("--maxmemory").arg("1mb").start()?;
    /// assert_eq!(server.cmd(&["CONFIG", "GET", "maxmemory"])?, "maxmemory\n1048576");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several command-line arguments; see [`RedisServerBuilder::arg`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder()
    ///     .args(["--maxmemory", "1mb", "--maxmemory-policy", "allkeys-lru"])
    ///     .start()?;
    /// # let _ = server;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn args<I>(mut self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Runs this binary instead of the one [`redis_server_binary`] finds.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// // A Valkey build, to run the same tests against it.
    /// let server = RedisServer::builder().binary("/opt/valkey/bin/valkey-server").start()?;
    /// # let _ = server;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// Runs the server with this configuration file, the first command-line argument.
    ///
    /// The testkit's own arguments and those of [`RedisServerBuilder::arg`] come
    /// after it, so they override its settings. The file is used as it is, on every
    /// start and [restart](RedisServer::restart), and is not removed on drop.
    /// `redis-server` may rewrite it (Sentinel does, with `--sentinel`): it must then
    /// be writable, and its path should be absolute.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder()
    ///     .config_file("/etc/myapp/redis-test.conf")
    ///     .start()?;
    /// # let _ = server;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// Makes the server require this password (`--requirepass`, the `default`
    /// user's). The testkit then authenticates every command it sends (the
    /// readiness check, [`RedisServer::cmd`]), and [`RedisServer::url`] carries the
    /// password. An empty password means none, as in Redis. Default: none.
    ///
    /// Replicas of such a server also need `--masterauth` with the same password
    /// (give it with [`RedisServerBuilder::arg`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder().password("s3cret").start()?;
    /// assert!(server.url().starts_with("redis://:s3cret@127.0.0.1:"));
    /// assert_eq!(server.cmd(&["PING"])?, "PONG"); // `cmd` authenticates
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn password(mut self, password: impl Into<String>) -> Self {
        let password = password.into();
        self.password = (!password.is_empty()).then_some(Password(password));
        self
    }

    /// How long the server gets to answer `PING` after it is spawned (default 10 s).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::RedisServer;
    ///
    /// // A loaded CI machine: give the server more time to answer PING.
    /// let server = RedisServer::builder().startup_timeout(Duration::from_secs(30)).start()?;
    /// # let _ = server;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Starts a server with these settings on a free loopback port and waits until
    /// it answers `PING`.
    ///
    /// # Errors
    ///
    /// - [`TestkitError::MissingBinary`] if no binary was set and none is found.
    /// - [`TestkitError::Spawn`] if the binary cannot be run.
    /// - [`TestkitError::Exited`] if the server exits during startup (e.g. a bad
    ///   argument), with the tail of its output.
    /// - [`TestkitError::NotReady`] if it does not answer in time.
    /// - [`TestkitError::NoFreePort`] if other processes took every port tried.
    /// - [`TestkitError::Io`] if no temporary directory or port could be had.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let builder = RedisServer::builder().arg("--maxmemory-policy").arg("noeviction");
    /// // One builder, several servers: e.g. the masters of a Redlock test.
    /// let servers = [builder.start()?, builder.start()?, builder.start()?];
    /// assert_ne!(servers[0].port(), servers[1].port());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start(&self) -> Result<RedisServer, TestkitError> {
        let binary = match &self.binary {
            Some(path) => path.clone(),
            None => redis_server_binary()?,
        };
        let mut last_tail = String::new();
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port()?;
            match launch(
                &binary,
                self.config_file.as_deref(),
                &self.args,
                self.password.as_ref(),
                port,
                self.startup_timeout,
                &[],
            ) {
                Ok(running) => {
                    return Ok(RedisServer {
                        binary,
                        config_file: self.config_file.clone(),
                        args: self.args.clone(),
                        password: self.password.clone(),
                        startup_timeout: self.startup_timeout,
                        port,
                        pid: running.pid,
                        child: Some(running.child),
                        dir: Some(running.dir),
                    })
                }
                Err(Failure::PortTaken(tail)) => last_tail = tail,
                Err(Failure::Other(err)) => return Err(err),
            }
        }
        Err(TestkitError::NoFreePort {
            attempts: PORT_ATTEMPTS,
            log_tail: last_tail,
        })
    }
}

/// A `redis-server` process on `127.0.0.1` and a free port, for tests.
///
/// The server starts empty, saves nothing (`--save "" --appendonly no`), works in a
/// fresh temporary directory, and is killed (`SIGKILL`, then reaped) when this value
/// is dropped. On Linux it is also killed when the test process dies, however it
/// dies (see the [crate docs](crate#processes-die-with-the-test)).
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::RedisServer;
///
/// let server = RedisServer::start()?;
/// // Hand `server.url()` to the client under test, then assert with `cmd`:
/// server.cmd(&["SET", "k", "v"])?;
/// assert_eq!(server.cmd(&["GET", "k"])?, "v");
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub struct RedisServer {
    binary: PathBuf,
    config_file: Option<PathBuf>,
    args: Vec<OsString>,
    password: Option<Password>,
    startup_timeout: Duration,
    port: u16,
    pid: u32,
    /// `None` once stopped and reaped: the pid may belong to someone else then, and
    /// the port too, so no signal and no command is sent.
    child: Option<Child>,
    /// The working directory; its `Drop` removes it.
    dir: Option<TempDir>,
}

impl RedisServer {
    /// Starts a server with default settings; see [`RedisServerBuilder::start`].
    ///
    /// # Errors
    ///
    /// As [`RedisServerBuilder::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// assert_eq!(server.cmd(&["PING"])?, "PONG");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start() -> Result<RedisServer, TestkitError> {
        RedisServerBuilder::new().start()
    }

    /// Settings for a server with extra arguments or another binary.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::builder().arg("--maxmemory-policy").arg("noeviction").start()?;
    /// # let _ = server;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::new()
    }

    /// The TCP port the server listens on (kept across [`RedisServer::restart`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start()?;
    /// let port = server.port();
    /// server.restart()?;
    /// assert_eq!(server.port(), port);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL for a client: `redis://127.0.0.1:PORT/`, or
    /// `redis://:PASSWORD@127.0.0.1:PORT/` for a server started with
    /// [`RedisServerBuilder::password`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// // e.g. `LockClient::builder().url(server.url())`
    /// assert_eq!(server.url(), format!("redis://127.0.0.1:{}/", server.port()));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn url(&self) -> String {
        match &self.password {
            None => format!("redis://127.0.0.1:{}/", self.port),
            Some(Password(password)) => {
                format!("redis://:{password}@127.0.0.1:{}/", self.port)
            }
        }
    }

    /// The socket address: `127.0.0.1:PORT`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?; // a proxy in front of it
    /// # let _ = proxy;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id of the current (or, once stopped, the last) server process.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start()?;
    /// let first = server.pid();
    /// server.restart()?;
    /// assert_ne!(server.pid(), first); // a new process on the same port
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Freezes the server with `SIGSTOP`: connections still open, but nothing is
    /// answered until [`RedisServer::resume`]. Simulates a hung or partitioned server.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] after [`RedisServer::stop`];
    /// [`TestkitError::Signal`] if the signal could not be sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// server.pause()?; // the server hangs: requests time out, nothing fails
    /// assert!(server.cmd_timeout(&["PING"], Duration::from_millis(100)).is_err());
    /// server.resume()?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn pause(&self) -> Result<(), TestkitError> {
        self.running()?;
        send_signal(self.pid, libc::SIGSTOP, "SIGSTOP")
    }

    /// Lets a server frozen by [`RedisServer::pause`] run again (`SIGCONT`).
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] after [`RedisServer::stop`];
    /// [`TestkitError::Signal`] if the signal could not be sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// server.pause()?;
    /// server.resume()?;
    /// assert_eq!(server.cmd(&["PING"])?, "PONG");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn resume(&self) -> Result<(), TestkitError> {
        self.running()?;
        send_signal(self.pid, libc::SIGCONT, "SIGCONT")
    }

    /// Kills the server (`SIGKILL`) and reaps it: a crash, not a clean shutdown.
    /// Does nothing if it is already stopped.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] if the process could not be killed or reaped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start()?;
    /// server.stop()?; // a crash: clients see connections refused
    /// assert!(!server.is_running());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn stop(&mut self) -> Result<(), TestkitError> {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child).map_err(|source| {
                TestkitError::io(
                    format!("could not kill redis-server (pid {})", self.pid),
                    source,
                )
            })?;
        }
        Ok(())
    }

    /// Stops the server, then starts a new, empty one on the same port with the
    /// same settings, and waits until it answers `PING`.
    ///
    /// Clients see a server that crashed and came back without its data.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::stop`] and [`RedisServerBuilder::start`];
    /// [`TestkitError::NoFreePort`] if another process took the port meanwhile.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start()?;
    /// server.cmd(&["SET", "k", "v"])?;
    /// server.restart()?; // a crash and a restart without persistence
    /// assert_eq!(server.cmd(&["GET", "k"])?, "(nil)");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.restart_keeping(&[])
    }

    /// As [`RedisServer::restart`], but the new server starts with copies of
    /// `files` from the old one's directory (those that exist): with
    /// `["nodes.conf"]`, a cluster node comes back as the same node, serving the
    /// same slots, without its data — a master that crashed and was started again
    /// before the cluster failed it over.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::restart`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisCluster;
    ///
    /// let mut cluster = RedisCluster::start(3, 0)?;
    /// cluster.node_mut(0).restart_keeping(&["nodes.conf"])?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn restart_keeping(&mut self, files: &[&str]) -> Result<(), TestkitError> {
        self.stop()?;
        let seed: Vec<(String, Vec<u8>)> = match &self.dir {
            Some(dir) => files
                .iter()
                .filter_map(|name| {
                    let contents = std::fs::read(dir.path().join(name)).ok()?;
                    Some(((*name).to_owned(), contents))
                })
                .collect(),
            None => Vec::new(),
        };
        self.dir = None;
        let mut last_tail = String::new();
        for attempt in 0..PORT_ATTEMPTS {
            if attempt > 0 {
                thread::sleep(Duration::from_millis(100));
            }
            match launch(
                &self.binary,
                self.config_file.as_deref(),
                &self.args,
                self.password.as_ref(),
                self.port,
                self.startup_timeout,
                &seed,
            ) {
                Ok(running) => {
                    self.pid = running.pid;
                    self.child = Some(running.child);
                    self.dir = Some(running.dir);
                    return Ok(());
                }
                Err(Failure::PortTaken(tail)) => last_tail = tail,
                Err(Failure::Other(err)) => return Err(err),
            }
        }
        Err(TestkitError::NoFreePort {
            attempts: PORT_ATTEMPTS,
            log_tail: last_tail,
        })
    }

    /// Whether the server process is alive (a paused server counts as alive).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let mut server = RedisServer::start()?;
    /// server.pause()?;
    /// assert!(server.is_running()); // paused still counts
    /// server.stop()?;
    /// assert!(!server.is_running());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(Ok(Some(_))) => {
                self.child = None;
                false
            }
            // `try_wait` failing means the child cannot be checked; it was not
            // reaped, so it is still ours.
            Some(Err(_)) => true,
            None => false,
        }
    }

    /// Sends one command over a fresh TCP connection (RESP2) and returns the reply
    /// as text. On a server with a [password](RedisServerBuilder::password), `AUTH`
    /// goes first on the same connection.
    ///
    /// Simple and bulk strings come back as they are, integers in decimal, nil as
    /// `(nil)`, array elements joined by `\n` (nested errors as `(error) MESSAGE`).
    /// Meant for assertions in tests that have no async client at hand. Each step
    /// (connect, send, read) may take up to 5 s; see [`RedisServer::cmd_timeout`].
    ///
    /// # Errors
    ///
    /// - [`TestkitError::Reply`] when the server answers with an error.
    /// - [`TestkitError::Io`] when it cannot be reached or does not answer in time
    ///   ([`TestkitError::is_timeout`] tells).
    /// - [`TestkitError::NotRunning`] after [`RedisServer::stop`].
    /// - [`TestkitError::Protocol`] for a reply that is not RESP2.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// server.cmd(&["SET", "k", "v", "PX", "30000"])?;
    /// assert_eq!(server.cmd(&["GET", "k"])?, "v");
    /// assert_eq!(server.cmd(&["EXISTS", "other"])?, "0");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn cmd(&self, args: &[&str]) -> Result<String, TestkitError> {
        self.cmd_timeout(args, DEFAULT_CMD_TIMEOUT)
    }

    /// As [`RedisServer::cmd`], with `timeout` for each step instead of 5 s.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::cmd`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::RedisServer;
    ///
    /// let server = RedisServer::start()?;
    /// let info = server.cmd_timeout(&["INFO", "replication"], Duration::from_secs(1))?;
    /// assert!(info.contains("role:master"));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn cmd_timeout(&self, args: &[&str], timeout: Duration) -> Result<String, TestkitError> {
        self.running()?;
        match request_as(self.addr(), self.password.as_ref(), args, timeout)? {
            Reply::Error(message) => Err(TestkitError::Reply(message)),
            reply => Ok(reply.render()),
        }
    }

    /// Sends one command, as [`RedisServer::cmd_timeout`], and returns the parsed
    /// reply (error replies included) instead of text.
    pub(crate) fn request(&self, args: &[&str], timeout: Duration) -> Result<Reply, TestkitError> {
        self.running()?;
        request_as(self.addr(), self.password.as_ref(), args, timeout)
    }

    fn running(&self) -> Result<(), TestkitError> {
        match self.child {
            Some(_) => Ok(()),
            None => Err(TestkitError::NotRunning {
                what: format!("redis-server on 127.0.0.1:{}", self.port),
            }),
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("addr", &self.addr())
            .field("pid", &self.pid)
            .field("stopped", &self.child.is_none())
            .field("binary", &self.binary)
            .field("config_file", &self.config_file)
            .field("args", &self.args)
            .field("password", &self.password)
            .field("dir", &self.dir.as_ref().map(TempDir::path))
            .finish_non_exhaustive()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Starts `n` servers with default settings, in parallel, each on its own port.
///
/// # Errors
///
/// The first error of [`RedisServer::start`]; the servers that did start are
/// stopped then.
///
/// # Examples
///
/// ```no_run
/// let servers = distlock_testkit::start_many(3)?;
/// let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub fn start_many(n: usize) -> Result<Vec<RedisServer>, TestkitError> {
    let builder = RedisServerBuilder::new();
    let results: Vec<Result<RedisServer, TestkitError>> = thread::scope(|scope| {
        let handles: Vec<_> = (0..n).map(|_| scope.spawn(|| builder.start())).collect();
        handles
            .into_iter()
            .map(|handle| {
                handle.join().unwrap_or_else(|_| {
                    Err(TestkitError::io(
                        "a thread starting redis-server panicked",
                        io::Error::other("panic"),
                    ))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// A server process that answered `PING` and is the one we spawned.
struct Running {
    child: Child,
    pid: u32,
    dir: TempDir,
}

/// Why a launch failed.
enum Failure {
    /// Another process holds the port: try another one. Holds the output tail.
    PortTaken(String),
    Other(TestkitError),
}

impl From<TestkitError> for Failure {
    fn from(err: TestkitError) -> Self {
        Failure::Other(err)
    }
}

/// Asks the kernel for a free loopback port. Another process may take it before
/// the server binds it: the callers retry then.
fn free_port() -> Result<u16, TestkitError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| TestkitError::io("could not get a free port on 127.0.0.1", source))
}

/// Spawns redis-server on `port` and waits until it answers.
///
/// The readiness check (`PING`, then `process_id` in `INFO server`) works for a
/// Sentinel (`--sentinel`) as well as for a data node.
fn launch(
    binary: &Path,
    config_file: Option<&Path>,
    extra_args: &[OsString],
    password: Option<&Password>,
    port: u16,
    timeout: Duration,
    seed: &[(String, Vec<u8>)],
) -> Result<Running, Failure> {
    let dir = TempDir::new()?;
    for (name, contents) in seed {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).map_err(|source| {
            TestkitError::io(format!("could not write {}", path.display()), source)
        })?;
    }
    let out_path = dir.path().join("stdout.log");
    let err_path = dir.path().join("stderr.log");
    let create = |path: &Path| {
        File::create(path).map_err(|source| {
            TestkitError::io(format!("could not create {}", path.display()), source)
        })
    };
    let stdout = create(&out_path)?;
    let stderr = create(&err_path)?;

    let mut command = Command::new(binary);
    // redis-server takes a configuration file only as its first argument.
    command.args(config_file);
    command
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--daemonize", "no"])
        .args(["--protected-mode", "yes"])
        .arg("--dir")
        .arg(dir.path())
        .args(extra_args);
    if let Some(Password(password)) = password {
        command.arg("--requirepass").arg(password);
    }
    command
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    let mut child = spawn_tied(command).map_err(|source| TestkitError::Spawn {
        program: binary.to_path_buf(),
        source,
    })?;
    let pid = child.id();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let tail = || log_tail(&[&out_path, &err_path]);

    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let log_tail = tail();
                if log_tail.contains(PORT_TAKEN_MARKER) {
                    return Err(Failure::PortTaken(log_tail));
                }
                return Err(Failure::Other(TestkitError::Exited {
                    port,
                    status: status.to_string(),
                    log_tail,
                }));
            }
            Ok(None) => {}
            Err(source) => {
                let _ = kill_and_reap(&mut child);
                return Err(Failure::Other(TestkitError::io(
                    "could not check on redis-server",
                    source,
                )));
            }
        }
        if answers_as(addr, password, pid) {
            return Ok(Running { child, pid, dir });
        }
        if started.elapsed() >= timeout {
            let _ = kill_and_reap(&mut child);
            return Err(Failure::Other(TestkitError::NotReady {
                port,
                waited: timeout,
                log_tail: tail(),
            }));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the server at `addr` answers `PING` with `PONG` and is process `pid`.
///
/// The pid check matters when another process grabbed the port first: then our
/// server is about to exit, and the one answering is not ours to use.
fn answers_as(addr: SocketAddr, password: Option<&Password>, pid: u32) -> bool {
    if !matches!(request_as(addr, password, &["PING"], PROBE_TIMEOUT), Ok(Reply::Simple(ref s)) if s == "PONG")
    {
        return false;
    }
    match request_as(addr, password, &["INFO", "server"], PROBE_TIMEOUT) {
        Ok(Reply::Bulk(info)) => String::from_utf8_lossy(&info)
            .lines()
            .filter_map(|line| line.strip_prefix("process_id:"))
            .any(|found| found.trim() == pid.to_string()),
        _ => false,
    }
}

/// [`resp::request`] as the server's password (if it has one) allows.
fn request_as(
    addr: SocketAddr,
    password: Option<&Password>,
    args: &[&str],
    timeout: Duration,
) -> Result<Reply, TestkitError> {
    let password = password.map(|Password(password)| password.as_str());
    resp::request(addr, password, args, timeout)
}

/// The last lines of each output file, for error messages.
fn log_tail(paths: &[&Path]) -> String {
    let mut out = String::new();
    for path in paths {
        let Ok(text) = fs::read_to_string(path) else {
            continue;
        };
        let lines: Vec<&str> = text.lines().collect();
        let start = lines.len().saturating_sub(LOG_TAIL_LINES);
        for line in &lines[start..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    out
}

/// A fresh directory under the system temporary directory, removed on drop.
#[derive(Debug)]
pub(crate) struct TempDir {
    path: PathBuf,
}

/// Prefix of the directories, followed by `<pid>-<counter>-<nanos>`.
const DIR_PREFIX: &str = "distlock-testkit-";

impl TempDir {
    pub(crate) fn new() -> Result<TempDir, TestkitError> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        static SWEEP: Once = Once::new();
        let base = std::env::temp_dir();
        SWEEP.call_once(|| sweep_stale_dirs(&base));
        let mut last_error = None;
        for _ in 0..16 {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let path = base.join(format!(
                "{DIR_PREFIX}{}-{}-{nanos}",
                std::process::id(),
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ));
            match fs::create_dir(&path) {
                Ok(()) => return Ok(TempDir { path }),
                Err(err) => last_error = Some(err),
            }
        }
        Err(TestkitError::io(
            format!(
                "could not create a directory under {} (set TMPDIR to a writable directory)",
                base.display()
            ),
            last_error.unwrap_or_else(|| io::Error::other("no attempt made")),
        ))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Removes the directories left behind by test processes that were killed (no
/// `Drop` ran). A directory is stale when the process named in it is gone.
fn sweep_stale_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|name| name.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
            .filter(|&pid| pid > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only checks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            // Another process may be sweeping the same directory: ignore errors.
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
