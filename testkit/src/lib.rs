//! Real `redis-server` processes for tests, on free loopback ports, stopped on drop.
//!
//! [`redis_server_binary`] finds the binary: `$REDIS_SERVER`, else `redis-server`
//! on `PATH`. Redis 7.0 or newer is needed.

#[cfg(not(unix))]
compile_error!("distlock-testkit supports Unix only (it sends POSIX signals to redis-server)");

mod binary;
mod error;

pub use binary::{redis_server_binary, REDIS_SERVER_ENV};
pub use error::TestkitError;
