//! The harness's one error type: any error, boxed, that can cross tasks and threads.

/// Any error of the harness.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
