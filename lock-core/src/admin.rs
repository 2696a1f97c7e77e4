//! Helpers of the `distlock` CLI, not part of the lock API: they read what a
//! server says for the operator's tools. Hidden from the docs; they may change
//! with the CLI.

pub use crate::backend::masters_in_slots;
