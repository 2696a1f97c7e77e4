//! Warnings logged through `tracing`, captured for a test to read.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs (once per test binary) a global subscriber that writes warnings into a
/// buffer. Global, not scoped to this test's thread: a callsite first hit by another
/// test thread could otherwise cache "no interest" and skip the scoped subscriber.
pub fn capture_warnings() -> Captured {
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::WARN)
                .with_ansi(false)
                .with_writer({
                    let captured = captured.clone();
                    move || captured.clone()
                })
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
            captured
        })
        .clone()
}

impl Captured {
    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }
}
