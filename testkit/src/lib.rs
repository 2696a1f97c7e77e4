//! Real `redis-server` processes for tests, on free loopback ports, stopped on drop.
//!
//! `distlock-testkit` starts throwaway Redis servers for the tests, examples and
//! benchmarks of [distlock](https://docs.rs/distlock), and for the tests of
//! applications that use it. The API is synchronous (std only), so it works the
//! same from `#[test]` and from `#[tokio::test]`; no async runtime is needed.
//!
//! - [`RedisServer`] runs one `redis-server` on `127.0.0.1` and a free port, empty
//!   and without persistence, in a fresh temporary directory. It can be
//!   [paused](RedisServer::pause) (`SIGSTOP`), [resumed](RedisServer::resume),
//!   [stopped](RedisServer::stop) (`SIGKILL`) and [restarted](RedisServer::restart)
//!   empty on the same port, and [`RedisServer::cmd`] sends a command for assertions.
//! - [`start_many`] starts several independent servers (e.g. for Redlock).
//! - [`RedisCluster`] runs a Redis Cluster of masters and replicas.
//! - [`SentinelGroup`] runs a master, its replicas and the Redis Sentinels that
//!   watch it, [fails it over](SentinelGroup::failover) on demand and
//!   [waits](SentinelGroup::wait_for_master_change) for a new master.
//! - [`ChildProcess`] runs any other program under the same rules, for
//!   process-fault tests.
//! - [`redis_server_binary`] finds the binary: `$REDIS_SERVER`, else `redis-server`
//!   on `PATH`. Redis 7.0 or newer is needed.
//! - [`FaultProxy`] sits between a client and a server on loopback and delays,
//!   drops ([blackholes](FaultProxy::blackhole)) or resets the traffic of each
//!   [`Direction`], or stops accepting connections, while the test runs.
//! - [`StepProxy`] cuts the traffic into RESP commands and holds the ones the test
//!   chose until it [delivers](StepProxy::deliver) each: in order, with its reply
//!   late or lost, or dropped ([`Delivery`]). A schedule of such choices replays.
//! - [`History`] collects the critical sections of every participant of a test
//!   (tasks and child processes, timed on the machine-wide [`monotonic_ns`] clock)
//!   and [checks](History::check) that no two owners believed they held a lock at
//!   the same time and that fencing tokens never went backwards.
//!
//! Tests may run in parallel, in one process and in several: every server asks the
//! kernel for a free port, and when another process takes it first, the server is
//! started again on another one. Before handing a server out, the testkit checks
//! (by process id) that the server answering on the port is the one it started.
//! Once a server is stopped, [`RedisServer::cmd`] refuses to send anything to its
//! port, which may belong to someone else by then.
//!
//! # Examples
//!
//! ```no_run
//! use distlock_testkit::RedisServer;
//!
//! # fn main() -> Result<(), distlock_testkit::TestkitError> {
//! let mut server = RedisServer::start()?;
//! let url = server.url(); // "redis://127.0.0.1:PORT/": give it to the client under test
//! # let _ = url;
//!
//! server.cmd(&["SET", "greeting", "hello"])?;
//! assert_eq!(server.cmd(&["GET", "greeting"])?, "hello");
//!
//! server.restart()?; // a crash: same port, no data
//! assert_eq!(server.cmd(&["GET", "greeting"])?, "(nil)");
//! # Ok(())
//! # }
//! // Dropping `server` kills the process.
//! ```
//!
//! # Processes die with the test
//!
//! A server is killed when its [`RedisServer`] is dropped. When the test process
//! itself dies (a panic that aborts, `SIGKILL` from a timeout, Ctrl-C), no `Drop`
//! runs, so on Linux every child asks the kernel for `SIGKILL` on its parent's
//! death (`prctl(PR_SET_PDEATHSIG, SIGKILL)` between `fork` and `exec`).
//!
//! The kernel sends that signal when the *thread* that forked the child exits, not
//! only when the whole process does. A server started from a short-lived thread —
//! a tokio blocking-pool thread that retires after 10 s idle, a scoped thread, the
//! thread of another test — would die with it. So the testkit forks every child
//! from one dedicated spawner thread, started on first use and alive until the
//! process exits; the calling thread only sends it the command and gets the child
//! back. The same holds for [`ChildProcess`].
//!
//! A killed test process leaves its servers' temporary directories behind
//! (`$TMPDIR/distlock-testkit-<pid>-*`); the first server started by a later test
//! process removes those whose process is gone.
//!
//! On other Unix systems (macOS) there is no parent-death signal: children are still
//! killed on drop, but outlive a test process that is killed. Windows is not
//! supported.

#[cfg(not(unix))]
compile_error!("distlock-testkit supports Unix only (it sends POSIX signals to redis-server)");

mod binary;
mod cluster;
mod error;
mod history;
mod process;
mod proxy;
mod resp;
mod sentinel;
mod server;
mod step;

pub use binary::{redis_server_binary, REDIS_SERVER_ENV};
pub use cluster::RedisCluster;
pub use error::TestkitError;
pub use history::{
    check_sections, monotonic_ns, History, Overlap, Report, Section, TokenRegression,
};
pub use process::ChildProcess;
pub use proxy::{Direction, FaultProxy};
pub use sentinel::SentinelGroup;
pub use server::{start_many, RedisServer, RedisServerBuilder};
pub use step::{Delivery, HeldRequest, StepProxy, Traffic};
