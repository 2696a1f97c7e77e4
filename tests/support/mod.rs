//! Support code shared by every integration test binary: throwaway servers and
//! clients on them, what Redis stores and counts, the machinery of the reliability
//! suite and certificates for the TLS tests.
//!
//! Each test binary says `mod support;` and uses only part of it, hence the
//! `dead_code` allowance below and the `unused_imports` one on the re-exports.
#![allow(dead_code, unreachable_pub)]

mod common;
mod reliability;
mod tls;

#[allow(unused_imports)]
pub use common::*;
#[allow(unused_imports)]
pub use reliability::*;
#[allow(unused_imports)]
pub use tls::*;
