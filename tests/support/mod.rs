//! Support code shared by every integration test binary, one concern per file:
//!
//! - `servers`: a throwaway server for one test, a fault proxy in front of one, a
//!   free port, a server over its memory limit;
//! - `clients`: lock clients and plain redis-rs connections on a server;
//! - `acl`: the ACL a lock user needs, a user made with an ACL;
//! - `inspect`: what Redis stores and counts (hold counts, calls, connections);
//! - `wait`: waiting for a condition in bounded time;
//! - `logs`: warnings logged through `tracing`, captured;
//! - `workload`, `sections`, `children`, `summary`, `network`: the reliability
//!   suite's critical sections, participants, child processes, summary lines and
//!   network faults; `sets`, callers of `lock_all` in opposite orders;
//! - `tls`: certificates made at test time for the TLS tests, a server that
//!   listens with TLS.
//!
//! Everything is re-exported here: tests name it `support::server()`,
//! `support::Workload` and so on. Each test binary says `mod support;` and uses
//! only part of it, hence the `dead_code` allowance below and the
//! `unused_imports` one on the re-exports.
#![allow(dead_code, unreachable_pub)]

mod acl;
mod children;
mod clients;
mod inspect;
mod logs;
mod network;
mod sections;
mod servers;
mod sets;
mod summary;
mod tls;
mod wait;
mod workload;

#[allow(unused_imports)]
pub use acl::*;
#[allow(unused_imports)]
pub use children::*;
#[allow(unused_imports)]
pub use clients::*;
#[allow(unused_imports)]
pub use inspect::*;
#[allow(unused_imports)]
pub use logs::*;
#[allow(unused_imports)]
pub use network::*;
#[allow(unused_imports)]
pub use sections::*;
#[allow(unused_imports)]
pub use servers::*;
#[allow(unused_imports)]
pub use sets::*;
#[allow(unused_imports)]
pub use summary::*;
#[allow(unused_imports)]
pub use tls::*;
#[allow(unused_imports)]
pub use wait::*;
#[allow(unused_imports)]
pub use workload::*;
