//! Warnings logged through `tracing`, captured for a test to read.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};

use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::format::{DefaultFields, FmtSpan, Format};
use tracing_subscriber::fmt::{MakeWriter, SubscriberBuilder};

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

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// Installs (once per test binary) a global subscriber that writes warnings into a
/// buffer. Global, not scoped to this test's thread: a callsite first hit by another
/// test thread could otherwise cache "no interest" and skip the scoped subscriber.
pub fn capture_warnings() -> Captured {
    capture(tracing::Level::WARN, false)
}

/// As [`capture_warnings`], for everything at `level` and above, and with
/// `span_closes` a line as each span closes, with its fields. One test binary
/// captures at one level: the first call installs the subscriber.
pub fn capture(level: tracing::Level, span_closes: bool) -> Captured {
    static CAPTURED: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let spans = if span_closes {
                FmtSpan::CLOSE
            } else {
                FmtSpan::NONE
            };
            let subscriber = captured.fmt(spans).with_max_level(level).finish();
            tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
            captured
        })
        .clone()
}

/// A subscriber that writes everything at `level` and above into a buffer, for
/// this thread only until the guard drops: with a runtime of one thread, every
/// event of the test, and none of another test's.
pub fn capture_here(level: tracing::Level) -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let subscriber = captured.fmt(FmtSpan::NONE).with_max_level(level).finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

impl Captured {
    /// A `tracing_subscriber::fmt()` that writes into this buffer without colours,
    /// `spans` saying which span events it prints; the caller adds its filter.
    pub fn fmt(
        &self,
        spans: FmtSpan,
    ) -> SubscriberBuilder<DefaultFields, Format, LevelFilter, Captured> {
        tracing_subscriber::fmt()
            .with_span_events(spans)
            .with_ansi(false)
            .with_writer(self.clone())
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned()
    }

    /// The lines captured so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines_with(&[])
    }

    /// The lines captured so far that contain every one of `parts`.
    pub fn lines_with(&self, parts: &[&str]) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| parts.iter().all(|part| line.contains(part)))
            .map(str::to_owned)
            .collect()
    }
}
