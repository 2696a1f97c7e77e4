//! The `#[distributed_lock]` attribute macro of distlock.
//!
//! Use it through the facade crate `distlock`; the macro itself lands in its own change.
