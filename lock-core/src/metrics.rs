//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature
//! `metrics`): small functions called where an outcome is known. Without the
//! feature they are empty and inline to nothing, and the crate does not depend on
//! `metrics` at all.
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
//! | `distlock_renewal_failures_total` | counter | `lock`, `backend`, `kind` | renewals that failed or timed out (retried) |
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
//! gives its key template, `order:{order.id}`, or its `keys` templates), else the name with every run of digits folded
//! into `{#}` (`order:42` → `order:{#}`), the class the lock-order checker uses.
//! So the number of series stays bounded by the number of templates, not of
//! orders; label requests whose names carry other unbounded parts (uuids, e-mail
//! addresses). `backend` is `single`, `sentinel`, `cluster` or `redlock`; `kind`
//! is `exclusive`, `read`, `write`, `permit` or `fair`.

use crate::backend::Backend;
use crate::keys::LockKeys;
use crate::origin::Origin;

#[cfg(feature = "metrics")]
pub(crate) use on::*;

#[cfg(not(feature = "metrics"))]
pub(crate) use off::*;

#[cfg(not(feature = "metrics"))]
mod off {
    use std::time::Duration;

    use super::*;

    /// The labels of one lock's series: nothing without the feature.
    #[derive(Debug, Clone)]
    pub(crate) struct Tag;

    impl Tag {
        #[inline(always)]
        pub(crate) fn new(_: &Backend, _: &LockKeys, _: &Origin) -> Self {
            Self
        }

        /// A tag for a hold made by a unit test, without a client.
        #[cfg(test)]
        pub(crate) fn unlabelled() -> Self {
            Self
        }
    }

    #[inline(always)]
    pub(crate) fn acquired(_: &Tag, _: Duration) {}
    #[inline(always)]
    pub(crate) fn acquired_in_set(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn reentered(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn contended(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn timed_out(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn deadlock(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn lost(_: &Tag, _: &'static str) {}
    #[inline(always)]
    pub(crate) fn held(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn released(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn renewed(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn renewal_failed(_: &Tag) {}
    #[inline(always)]
    pub(crate) fn renewal_round_trip(_: &Backend, _: Duration) {}
    #[inline(always)]
    pub(crate) fn force_unlocked(_: &Backend, _: &[u8]) {}
    #[inline(always)]
    pub(crate) fn inversion(_: &str, _: &str) {}

    /// Counts a waiter while it lives: nothing without the feature.
    #[derive(Debug)]
    pub(crate) struct Waiter;

    impl Waiter {
        #[inline(always)]
        pub(crate) fn new(_: &Tag) -> Self {
            Self
        }
    }
}

#[cfg(feature = "metrics")]
mod on {
    use std::sync::Arc;
    use std::time::Duration;

    use metrics::{counter, gauge, histogram, Label};
    use tokio::time::Instant;

    use super::*;
    use crate::backend::Conn;
    use crate::keys::Kind;

    /// The labels of one lock's series, worked out once per hold (or wait), and
    /// when the hold began.
    #[derive(Debug, Clone)]
    pub(crate) struct Tag {
        labels: Arc<[Label]>,
        since: Instant,
    }

    impl Tag {
        pub(crate) fn new(backend_: &Backend, keys: &LockKeys, origin: &Origin) -> Self {
            let labels = [
                Label::new("lock", origin.class(&keys.name).to_string()),
                Label::new("backend", backend(backend_)),
                Label::new("kind", kind(keys.kind)),
            ];
            Self {
                labels: Arc::new(labels),
                since: Instant::now(),
            }
        }

        /// A tag for a hold made by a unit test, without a client.
        #[cfg(test)]
        pub(crate) fn unlabelled() -> Self {
            Self {
                labels: Arc::new([]),
                since: Instant::now(),
            }
        }

        fn labels(&self) -> Vec<Label> {
            self.labels.to_vec()
        }
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

    fn kind(kind: Kind) -> &'static str {
        match kind {
            Kind::Exclusive => "exclusive",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permit { .. } => "permit",
            Kind::Fair => "fair",
        }
    }

    /// A new hold began, `waited` after the request.
    pub(crate) fn acquired(tag: &Tag, waited: Duration) {
        let labels = tag.labels();
        counter!("distlock_acquired_total", labels.clone()).increment(1);
        histogram!("distlock_wait_seconds", labels).record(waited.as_secs_f64());
    }

    /// A new hold of a set (`lock_all`) began: its wait is the set's, not recorded.
    pub(crate) fn acquired_in_set(tag: &Tag) {
        counter!("distlock_acquired_total", tag.labels()).increment(1);
    }

    pub(crate) fn reentered(tag: &Tag) {
        counter!("distlock_reentered_total", tag.labels()).increment(1);
    }

    /// An acquisition had to wait (called once per acquisition).
    pub(crate) fn contended(tag: &Tag) {
        counter!("distlock_contended_total", tag.labels()).increment(1);
    }

    pub(crate) fn timed_out(tag: &Tag) {
        counter!("distlock_timed_out_total", tag.labels()).increment(1);
    }

    pub(crate) fn deadlock(tag: &Tag) {
        counter!("distlock_deadlocks_total", tag.labels()).increment(1);
    }

    pub(crate) fn lost(tag: &Tag, reason: &'static str) {
        let mut labels = tag.labels();
        labels.push(Label::new("reason", reason));
        counter!("distlock_lost_total", labels).increment(1);
    }

    /// The watchdog started watching the hold: one more lock held.
    pub(crate) fn held(tag: &Tag) {
        gauge!("distlock_held", tag.labels()).increment(1.0);
    }

    /// The watchdog stopped watching the hold (released or lost): it lasted from
    /// its acquisition until now.
    pub(crate) fn released(tag: &Tag) {
        let labels = tag.labels();
        gauge!("distlock_held", labels.clone()).decrement(1.0);
        histogram!("distlock_hold_seconds", labels).record(tag.since.elapsed().as_secs_f64());
    }

    pub(crate) fn renewed(tag: &Tag) {
        counter!("distlock_renewals_total", tag.labels()).increment(1);
    }

    pub(crate) fn renewal_failed(tag: &Tag) {
        counter!("distlock_renewal_failures_total", tag.labels()).increment(1);
    }

    pub(crate) fn renewal_round_trip(backend_: &Backend, took: Duration) {
        histogram!("distlock_renewal_round_trip_seconds", "backend" => backend(backend_))
            .record(took.as_secs_f64());
    }

    pub(crate) fn force_unlocked(backend_: &Backend, name: &[u8]) {
        let class = crate::origin::fold(name);
        counter!(
            "distlock_force_unlocks_total",
            "lock" => class,
            "backend" => backend(backend_)
        )
        .increment(1);
    }

    pub(crate) fn inversion(holding: &str, taking: &str) {
        counter!(
            "distlock_lock_order_inversions_total",
            "lock" => taking.to_owned(),
            "holding" => holding.to_owned()
        )
        .increment(1);
    }

    /// Counts a waiter in `distlock_waiters` while it lives.
    #[derive(Debug)]
    pub(crate) struct Waiter {
        labels: Arc<[Label]>,
    }

    impl Waiter {
        pub(crate) fn new(tag: &Tag) -> Self {
            gauge!("distlock_waiters", tag.labels()).increment(1.0);
            Self {
                labels: tag.labels.clone(),
            }
        }
    }

    impl Drop for Waiter {
        fn drop(&mut self) {
            gauge!("distlock_waiters", self.labels.to_vec()).decrement(1.0);
        }
    }
}
