//! The client's Tokio runtimes: the multi-thread one that `#[tokio::main]` builds
//! (one worker per core), and a current-thread one. Each measurement that compares
//! clients gets a fresh runtime, with its client connected inside it.

use std::fmt;
use std::future::Future;

use crate::error::BoxError;

/// Which Tokio runtime a client runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// `Builder::new_multi_thread()` with the default worker count, as `#[tokio::main]`
    /// gives.
    MultiThread,
    /// `Builder::new_current_thread()`: every task on the thread that blocks on it.
    CurrentThread,
}

impl fmt::Display for Flavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Flavor::MultiThread => "multi-thread",
            Flavor::CurrentThread => "current-thread",
        })
    }
}

/// A new runtime of `flavor`, with I/O and timers.
pub(crate) fn build(flavor: Flavor) -> Result<tokio::runtime::Runtime, BoxError> {
    let mut builder = match flavor {
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
    };
    // Built with `--cfg tokio_unstable`: every task poll counted by where the task
    // was spawned (`distlock-bench one-task` prints them per pair).
    #[cfg(tokio_unstable)]
    builder.on_before_task_poll(|meta| {
        let at = meta.spawned_at();
        *polls()
            .entry(format!("{}:{}", at.file(), at.line()))
            .or_insert(0) += 1;
    });
    builder
        .enable_all()
        .build()
        .map_err(|err| format!("could not build a {flavor} Tokio runtime: {err}").into())
}

/// Runs `future` to completion on a fresh runtime of `flavor` (the calling thread
/// blocks on it, as `#[tokio::main]` blocks on `main`), then shuts the runtime down.
/// Must not be called from inside a runtime.
pub(crate) fn block_on<T>(
    flavor: Flavor,
    future: impl Future<Output = Result<T, BoxError>>,
) -> Result<T, BoxError> {
    let runtime = build(flavor)?;
    let output = runtime.block_on(future);
    runtime.shutdown_background();
    output
}

/// The task polls counted so far, by where each task was spawned (`file:line`).
#[cfg(tokio_unstable)]
pub(crate) fn polls() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<String, u64>> {
    static POLLS: std::sync::Mutex<std::collections::BTreeMap<String, u64>> =
        std::sync::Mutex::new(std::collections::BTreeMap::new());
    POLLS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
