//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`): each hold's [`Series`](crate::series::Series) (made by `Operators::series`), counted where an outcome is
//! known. Without the feature every hold shares the series that counts nothing,
//! and the crate does not depend on `metrics` at all.
//!
//! Install any `metrics` recorder (such as `metrics-exporter-prometheus`) and these
//! appear:
//!
//! | name | type | labels | what it counts |
//! | --- | --- | --- | --- |
//! | `distlock_acquired_total` | counter | `lock`, `backend`, `kind` | new acquisitions (a hold begins) |
//! | `distlock_reentered_total` | counter | `lock`, `backend`, `kind` | re-entries of a hold the call chain has |
//! | `distlock_contended_total` | counter | `lock`, `backend`, `kind` | acquisitions that had to wait (once each, however they ended; not for `lock_all`) |
//! | `distlock_timed_out_total` | counter | `lock`, `backend`, `kind` | acquisitions whose wait ran out (`LockError::Timeout`, a `try_lock` miss too; not for `lock_all`) |
//! | `distlock_lost_total` | counter | `lock`, `backend`, `kind`, `reason` | holds lost while held; `reason` is `expired`, `not_held`, `max_hold_exceeded`, `shut_down` or `server_replaced` ([`LostReason::as_str`](crate::LostReason::as_str)) |
//! | `distlock_renewals_total` | counter | `lock`, `backend`, `kind` | watchdog renewals that succeeded |
//! | `distlock_renewal_failures_total` | counter | `lock`, `backend`, `kind` | renewals that failed or timed out (retried), or that fewer replicas acknowledged than `replicas(n, ..)` asks for |
//! | `distlock_force_unlocks_total` | counter | `lock`, `backend` | `force_unlock` calls that deleted a lock |
//! | `distlock_deadlocks_total` | counter | `lock`, `backend`, `kind` | requests that gave up to break a deadlock |
//! | `distlock_lock_order_inversions_total` | counter | `lock`, `holding` | acquisitions that inverted an order seen before (warned or refused) |
//! | `distlock_wait_seconds` | histogram | `lock`, `backend`, `kind` | how long each new acquisition took, from the request to the grant (not for the names of a `lock_all`) |
//! | `distlock_hold_seconds` | histogram | `lock`, `backend`, `kind` | how long each hold lasted, to its release or loss |
//! | `distlock_renewal_round_trip_seconds` | histogram | `backend` | one renewal batch's round trip |
//! | `distlock_held` | gauge | `lock`, `backend`, `kind` | locks this client holds now |
//! | `distlock_waiters` | gauge | `lock`, `backend`, `kind` | this client's requests waiting now (not for `lock_all`) |
//!
//! The `*_seconds` histograms render as summaries with the Prometheus exporter's
//! defaults, and as histograms once it is given buckets.
//!
//! `lock` is the lock's *template*, never its name: the request's
//! [`label`](crate::LockRequest::label) (or a set's,
//! [`LockAllRequest::label`](crate::LockAllRequest::label); `#[distributed_lock]`
//! gives its key template, `order:{order.id}`, or its `keys` templates), else the
//! name with every part that varies folded into `{#}` (digits, hex, UUIDs:
//! `order:42` → `order:{#}`), the class the lock-order checker uses. So the number
//! of series stays bounded by the number of templates, not of orders. Names with
//! other unbounded parts (e-mail addresses) are capped: a client uses at most
//! [`max_metric_labels`](crate::LockClientBuilder::max_metric_labels) values of
//! `lock` (256 by default), and counts every later one under `{other}`, with a
//! warning, once, that says how to raise the cap or label the requests. `backend` is `single`, `sentinel`, `cluster` or `redlock`; `kind`
//! is `exclusive`, `read`, `write`, `permit` or `fair`.

use std::time::Duration;

use crate::backend::Backend;
use crate::keys::LockKeys;
use crate::origin::Origin;
use crate::series::Tag;

#[cfg(feature = "metrics")]
pub(super) use on::*;

#[cfg(not(feature = "metrics"))]
pub(super) use off::*;

#[cfg(not(feature = "metrics"))]
mod off {
    use super::*;

    /// Without the feature, no label is kept.
    #[derive(Debug)]
    pub(in crate::ops) struct Labels;

    impl Labels {
        pub(in crate::ops) fn new(_: usize) -> Self {
            Self
        }
    }

    /// The series of the lock of `keys`: the one that counts nothing.
    pub(in crate::ops) fn series(_: &Backend, _: &Labels, _: &LockKeys, _: &Origin) -> Tag {
        crate::series::uncounted()
    }

    #[inline(always)]
    pub(in crate::ops) fn renewal_round_trip(_: &Backend, _: Duration) {}
    #[inline(always)]
    pub(in crate::ops) fn force_unlocked(_: &Backend, _: &Labels, _: &[u8]) {}
    #[inline(always)]
    pub(in crate::ops) fn inversion(_: &str, _: &str) {}
}

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Arc;

    use metrics::{counter, gauge, histogram, Label};
    use tokio::time::Instant;

    use super::*;
    use crate::backend::Conn;
    use crate::series::Series;

    /// The labels of one lock's series, worked out once per hold (or wait), and
    /// when the hold began.
    #[derive(Debug, Clone)]
    struct LockSeries {
        labels: Arc<[Label]>,
        since: Instant,
    }

    /// The label value every class past the cap shares.
    const OTHER: &str = "{other}";

    /// The values of the `lock` label a client's series use: at most `max`; every
    /// later class is counted under [`OTHER`], and a warning says so once.
    #[derive(Debug)]
    pub(in crate::ops) struct Labels {
        max: usize,
        seen: std::sync::Mutex<std::collections::HashSet<Arc<str>>>,
        warned: std::sync::atomic::AtomicBool,
    }

    impl Labels {
        pub(in crate::ops) fn new(max: usize) -> Self {
            Self {
                max,
                seen: std::sync::Mutex::default(),
                warned: std::sync::atomic::AtomicBool::new(false),
            }
        }

        /// The `lock` label of a lock of class `class`.
        fn of(&self, class: Arc<str>) -> String {
            let mut seen = crate::sync::locked(&self.seen);
            // Room for one more, or known already: the class is its own label.
            if seen.len() < self.max || seen.contains(&class) {
                let label = class.to_string();
                seen.insert(class);
                return label;
            }
            drop(seen);
            if !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::warn!(
                    lock.class = %class,
                    "distlock: this client's metrics already use {} values of the `lock` label \
                     (`max_metric_labels`); `{class}` and every later one are counted under \
                     `{OTHER}`. Give such requests a label (`.label(\"job:{{id}}\")`, or the \
                     macro's key template), or raise `LockClientBuilder::max_metric_labels`",
                    self.max
                );
            }
            OTHER.to_owned()
        }
    }

    /// The series of the lock of `keys`, asked for at `origin`, on `backend_`.
    pub(in crate::ops) fn series(
        backend_: &Backend,
        locks: &Labels,
        keys: &LockKeys,
        origin: &Origin,
    ) -> Tag {
        let labels = [
            Label::new("lock", locks.of(origin.class(&keys.name))),
            Label::new("backend", backend(backend_)),
            Label::new("kind", keys.kind.metric_label()),
        ];
        Arc::new(LockSeries {
            labels: Arc::new(labels),
            since: Instant::now(),
        })
    }

    fn backend(backend: &Backend) -> &'static str {
        if backend.is_redlock() {
            return "redlock";
        }
        match backend.first() {
            Conn::Single(_) => "single",
            Conn::Sentinel(_) => "sentinel",
            Conn::Cluster(_) => "cluster",
        }
    }

    impl Series for LockSeries {
        fn acquired(&self, waited: Option<Duration>) {
            let labels = self.labels.to_vec();
            counter!("distlock_acquired_total", labels.clone()).increment(1);
            // A name of a set: its wait is the set's, not recorded.
            if let Some(waited) = waited {
                histogram!("distlock_wait_seconds", labels).record(waited.as_secs_f64());
            }
        }

        fn reentered(&self) {
            counter!("distlock_reentered_total", self.labels.to_vec()).increment(1);
        }

        fn contended(&self) {
            counter!("distlock_contended_total", self.labels.to_vec()).increment(1);
        }

        fn timed_out(&self) {
            counter!("distlock_timed_out_total", self.labels.to_vec()).increment(1);
        }

        fn deadlock(&self) {
            counter!("distlock_deadlocks_total", self.labels.to_vec()).increment(1);
        }

        fn lost(&self, reason: &'static str) {
            let mut labels = self.labels.to_vec();
            labels.push(Label::new("reason", reason));
            counter!("distlock_lost_total", labels).increment(1);
        }

        fn held(&self) {
            gauge!("distlock_held", self.labels.to_vec()).increment(1.0);
        }

        /// The hold lasted from its acquisition until now.
        fn released(&self) {
            let labels = self.labels.to_vec();
            gauge!("distlock_held", labels.clone()).decrement(1.0);
            histogram!("distlock_hold_seconds", labels).record(self.since.elapsed().as_secs_f64());
        }

        fn renewed(&self) {
            counter!("distlock_renewals_total", self.labels.to_vec()).increment(1);
        }

        fn renewal_failed(&self) {
            counter!("distlock_renewal_failures_total", self.labels.to_vec()).increment(1);
        }

        fn waiter(&self) -> Box<dyn Send> {
            gauge!("distlock_waiters", self.labels.to_vec()).increment(1.0);
            Box::new(Waiter(self.labels.clone()))
        }
    }

    pub(in crate::ops) fn renewal_round_trip(backend_: &Backend, took: Duration) {
        histogram!("distlock_renewal_round_trip_seconds", "backend" => backend(backend_))
            .record(took.as_secs_f64());
    }

    pub(in crate::ops) fn force_unlocked(backend_: &Backend, locks: &Labels, name: &[u8]) {
        let class = locks.of(crate::origin::fold(name).into());
        counter!(
            "distlock_force_unlocks_total",
            "lock" => class,
            "backend" => backend(backend_)
        )
        .increment(1);
    }

    pub(in crate::ops) fn inversion(holding: &str, taking: &str) {
        counter!(
            "distlock_lock_order_inversions_total",
            "lock" => taking.to_owned(),
            "holding" => holding.to_owned()
        )
        .increment(1);
    }

    /// A waiter counted in `distlock_waiters` (by `LockSeries::waiter`) while it
    /// lives: the labels of its series.
    #[derive(Debug)]
    struct Waiter(Arc<[Label]>);

    impl Drop for Waiter {
        fn drop(&mut self) {
            gauge!("distlock_waiters", self.0.to_vec()).decrement(1.0);
        }
    }
}
