//! Real `redis-server` processes for tests, on free loopback ports, stopped on drop.
//!
//! - [`ChildProcess`] runs a program for process-fault tests, killed on drop.
//! - [`redis_server_binary`] finds the binary: `$REDIS_SERVER`, else `redis-server`
//!   on `PATH`. Redis 7.0 or newer is needed.
//!
//! # Processes die with the test
//!
//! On Linux every child asks the kernel for `SIGKILL` on its parent's death
//! (`prctl(PR_SET_PDEATHSIG, SIGKILL)`). The kernel sends it when the *thread* that
//! forked the child exits, so every child is forked by one dedicated spawner thread
//! that lives as long as the process.

#[cfg(not(unix))]
compile_error!("distlock-testkit supports Unix only (it sends POSIX signals to redis-server)");

mod binary;
mod error;
mod process;

pub use binary::{redis_server_binary, REDIS_SERVER_ENV};
pub use error::TestkitError;
pub use process::ChildProcess;
