//! What an application's `tracing_subscriber::fmt()` shows of distlock at
//! `RUST_LOG=info`, against a real redis-server: nothing of an acquisition without
//! span events (distlock's acquisitions are spans, and `fmt` prints a span only
//! around an event), each acquisition and locked body with the README's line.

mod support;

use distlock::LockError;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::EnvFilter;

/// The subscriber of an application that logs with `fmt` at `filter` (what
/// `EnvFilter::from_default_env()` makes of `RUST_LOG=<filter>`), `spans` saying
/// which span events it prints; scoped to this test's thread.
fn subscriber(
    filter: &str,
    spans: FmtSpan,
) -> (support::Captured, tracing::subscriber::DefaultGuard) {
    let captured = support::Captured::default();
    let subscriber = captured
        .fmt(spans)
        .with_env_filter(EnvFilter::new(filter))
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    (captured, guard)
}

/// Takes and gives back `name`, then runs a body under it with `with_lock`.
async fn lock_twice(locks: &distlock::LockClient, name: &str) {
    let guard = locks.lock(name).await.expect("lock");
    guard.unlock().await.expect("unlock");
    locks
        .with_lock(name, |_| async { Ok::<_, LockError>(()) })
        .await
        .expect("with_lock");
}

/// Why the README's line is needed: a plain `fmt()` at `RUST_LOG=info` prints no
/// line for an acquisition.
#[tokio::test]
async fn a_plain_fmt_subscriber_at_info_shows_no_acquisition() {
    let server = support::server();
    let (captured, _guard) = subscriber("info", FmtSpan::NONE);
    let locks = support::client(&server).await;
    lock_twice(&locks, "tracing:plain").await;
    let text = captured.text();
    assert!(!text.contains("distlock.acquire"), "{text}");
}

/// Issue 26: the README's line (span events at close) shows each acquisition, with
/// its outcome, and each locked body, at `RUST_LOG=info`, and the README says so.
#[tokio::test]
async fn the_readme_line_shows_each_acquisition_at_info() {
    let readme = include_str!("../README.md");
    for part in [
        ".with_env_filter(EnvFilter::from_default_env())",
        ".with_span_events(FmtSpan::CLOSE)",
        "RUST_LOG=info",
    ] {
        assert!(
            readme.contains(part),
            "the README's tracing setup lacks {part}"
        );
    }
    let server = support::server();
    let (captured, _guard) = subscriber("info", FmtSpan::CLOSE);
    let locks = support::client(&server).await;
    lock_twice(&locks, "tracing:readme").await;
    let text = captured.text();
    let acquired = captured.lines_with(&[
        " INFO distlock.acquire{lock.name=tracing:readme",
        "lock.outcome=\"acquired\"",
        ": close",
    ]);
    assert_eq!(acquired.len(), 2, "{text}");
    let locked = captured.lines_with(&[
        " INFO distlock.locked{lock.name=tracing:readme",
        "lock.held_ms=",
        ": close",
    ]);
    assert_eq!(locked.len(), 1, "{text}");
    // Issue 37 (7): the targets the README's example lines show are the real ones.
    for (span, real) in [
        ("distlock.acquire{", &acquired[0]),
        ("distlock.locked{", &locked[0]),
    ] {
        let shown = readme
            .lines()
            .find(|line| line.starts_with("... INFO ") && line.contains(span))
            .unwrap_or_else(|| panic!("the README shows no `{span}` line"));
        assert_eq!(
            target_of(shown),
            target_of(real),
            "the README's `{span}` line names another target than distlock logs:\n{shown}\n{real}"
        );
    }
}

/// The target of a line that `fmt` printed at a span's close: what stands between
/// the span's fields and `: close`.
fn target_of(line: &str) -> &str {
    line.split("}: ")
        .nth(1)
        .and_then(|rest| rest.split(": close").next())
        .unwrap_or_else(|| panic!("no target in `{line}`"))
}

/// `RUST_LOG=distlock=info` is enough for both crates: a directive's target is a
/// prefix, and distlock-core's targets are `distlock_core::..`.
#[tokio::test]
async fn the_distlock_target_covers_the_core_crate() {
    let server = support::server();
    let (captured, _guard) = subscriber("warn,distlock=info", FmtSpan::CLOSE);
    let locks = support::client(&server).await;
    lock_twice(&locks, "tracing:target").await;
    let text = captured.text();
    assert_eq!(
        captured
            .lines_with(&["distlock.acquire{lock.name=tracing:target", ": close"])
            .len(),
        2,
        "{text}"
    );
}
