//! distlock facade.
pub use distlock_core::*;
