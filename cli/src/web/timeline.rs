//! The timeline: the holds and waits of the last minutes, per lock name, as bars,
//! and marks for what the release channel announced (a release, a hand-off to a
//! fair lock's next waiter, a waiter giving up, a force-unlock).
//!
//! Each read of the locks tells which (name, lane) pairs are there now, a lane
//! being a holder's or waiter's owner id: a pair seen for the first time opens a
//! bar (from when its client says it took the lock, else from now), a pair no
//! longer seen closes its bar at the read's time. Bars and marks older than the
//! window are dropped, so the memory is bounded by what happened in the window.
//! Times are milliseconds of this process's wall clock.

use std::collections::{HashMap, VecDeque};

use serde::Serialize;

/// A hold or a wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Bar {
    /// A holder held the lock.
    Hold,
    /// A waiter waited for it.
    Wait,
}

/// One bar of the timeline.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Span {
    /// The lock name.
    pub(crate) name: String,
    /// Whose: a holder's or waiter's owner id, or `subscribers` for the clients
    /// waiting on a lock whose waiters keep no place in Redis.
    pub(crate) lane: String,
    /// The service of the holder, when its client wrote it.
    pub(crate) label: Option<String>,
    /// A hold or a wait.
    pub(crate) bar: Bar,
    /// When it began.
    pub(crate) from_ms: u64,
    /// When it ended; `None` while it lasts.
    pub(crate) to_ms: Option<u64>,
}

/// Something the release channel announced.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Mark {
    /// The lock name.
    pub(crate) name: String,
    /// `release`, `handoff`, `withdraw`, `force_unlock`.
    pub(crate) what: &'static str,
    /// When it was seen.
    pub(crate) at_ms: u64,
}

/// What a read saw of one bar: the lock, the lane, the kind of bar, its service
/// and, when known, when it began.
#[derive(Debug)]
pub(crate) struct Seen {
    /// The lock name.
    pub(crate) name: String,
    /// The lane.
    pub(crate) lane: String,
    /// Its service, when known.
    pub(crate) label: Option<String>,
    /// A hold or a wait.
    pub(crate) bar: Bar,
    /// When it began, when known.
    pub(crate) since_ms: Option<u64>,
}

/// The bars and marks of the last `window_ms`.
#[derive(Debug)]
pub(crate) struct Timeline {
    window_ms: u64,
    spans: Vec<Span>,
    open: HashMap<(String, String, Bar), usize>,
    marks: VecDeque<Mark>,
}

impl Timeline {
    /// An empty timeline that keeps `window_ms` of history.
    pub(crate) fn new(window_ms: u64) -> Self {
        Self {
            window_ms,
            spans: Vec::new(),
            open: HashMap::new(),
            marks: VecDeque::new(),
        }
    }

    /// The history kept, in milliseconds.
    pub(crate) fn window_ms(&self) -> u64 {
        self.window_ms
    }

    /// Takes in what a read at `now_ms` saw: opens the bars seen for the first
    /// time, updates the labels of those still open (a holder's service may come
    /// later), closes those no longer seen, and drops what left the window.
    pub(crate) fn observe(&mut self, now_ms: u64, seen: Vec<Seen>) {
        let mut still = vec![false; self.spans.len()];
        for item in seen {
            let key = (item.name, item.lane, item.bar);
            if let Some(&at) = self.open.get(&key) {
                if let Some(flag) = still.get_mut(at) {
                    *flag = true;
                }
                if let Some(span) = self.spans.get_mut(at) {
                    if item.label.is_some() {
                        span.label = item.label;
                    }
                    if let Some(since) = item.since_ms {
                        span.from_ms = span.from_ms.min(since);
                    }
                }
                continue;
            }
            let (name, lane, bar) = key.clone();
            self.open.insert(key, self.spans.len());
            self.spans.push(Span {
                name,
                lane,
                label: item.label,
                bar,
                from_ms: item.since_ms.unwrap_or(now_ms).min(now_ms),
                to_ms: None,
            });
            still.push(true);
        }
        for (span, still) in self.spans.iter_mut().zip(still) {
            if span.to_ms.is_none() && !still {
                span.to_ms = Some(now_ms);
            }
        }
        self.prune(now_ms);
    }

    /// Adds a mark announced at `at_ms`.
    pub(crate) fn mark(&mut self, mark: Mark) {
        self.marks.push_back(mark);
    }

    /// Drops what ended before the window, and indexes the open bars again.
    fn prune(&mut self, now_ms: u64) {
        let start = now_ms.saturating_sub(self.window_ms);
        self.spans
            .retain(|span| span.to_ms.is_none_or(|to| to >= start));
        while self.marks.front().is_some_and(|mark| mark.at_ms < start) {
            self.marks.pop_front();
        }
        self.open = self
            .spans
            .iter()
            .enumerate()
            .filter(|(_, span)| span.to_ms.is_none())
            .map(|(at, span)| ((span.name.clone(), span.lane.clone(), span.bar), at))
            .collect();
    }

    /// Every bar kept.
    pub(crate) fn spans(&self) -> &[Span] {
        &self.spans
    }

    /// Every mark kept.
    pub(crate) fn marks(&self) -> impl Iterator<Item = &Mark> + '_ {
        self.marks.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, lane: &str, bar: Bar, since: Option<u64>) -> Seen {
        Seen {
            name: name.to_owned(),
            lane: lane.to_owned(),
            label: None,
            bar,
            since_ms: since,
        }
    }

    #[test]
    fn bars_open_close_and_leave_the_window() {
        let mut timeline = Timeline::new(1_000);
        timeline.observe(100, vec![seen("a", "o1", Bar::Hold, Some(50))]);
        timeline.observe(
            200,
            vec![
                seen("a", "o1", Bar::Hold, Some(50)),
                seen("a", "o2", Bar::Wait, None),
            ],
        );
        timeline.observe(300, vec![seen("a", "o2", Bar::Hold, None)]);
        let bars: Vec<_> = timeline
            .spans()
            .iter()
            .map(|s| (s.lane.as_str(), s.bar, s.from_ms, s.to_ms))
            .collect();
        assert_eq!(
            bars,
            [
                ("o1", Bar::Hold, 50, Some(300)),
                ("o2", Bar::Wait, 200, Some(300)),
                ("o2", Bar::Hold, 300, None),
            ]
        );
        timeline.observe(1_350, vec![seen("a", "o2", Bar::Hold, None)]);
        assert_eq!(timeline.spans().len(), 1, "the closed bars left the window");
        assert_eq!(timeline.spans()[0].from_ms, 300, "the open one stays");
    }
}
