//! The lock-order checker: an early warning of deadlocks, before one happens.
//!
//! Two call chains that take two locks in opposite orders (one holds `order:{id}`
//! and asks for `inventory:{sku}`, the other holds `inventory:{sku}` and asks for
//! `order:{id}`) can deadlock. The checker records, for every new acquisition made
//! while the chain holds other locks of the same client, the edges "this class of
//! lock was taken while holding that one", and warns (once per pair) the first time
//! an acquisition makes an edge whose reverse was recorded: both classes, both call
//! sites. In strict mode the acquisition fails with
//! [`LockError::LockOrderInversion`] instead, before anything is sent.
//!
//! A lock's *class* is what its name stands for, not the name itself: the label the
//! request was given (the macro gives its key template, `order:{order.id}`), or else
//! the name with every run of digits folded into `{#}` (`order:42` and `order:7`
//! are both `order:{#}`). Re-entries, locks of one class, and the names of one
//! `lock_all` (taken in one canonical order) make no edge.
//!
//! The edges are kept in the client, in memory, at most [`MAX_EDGES`] of them; a
//! client that shares them (`LockClientBuilder::share_lock_order`) also records each
//! edge new to it in its namespace's graph in Redis (`order_shared.rs`), where the
//! edges of other processes and services are found too.

use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::LockError;

/// The most edges a client keeps (and a namespace's shared graph); past that, new
/// pairs are not checked.
pub(crate) const MAX_EDGES: usize = 10_000;

/// What the lock-order checker does (see
/// [`LockClientBuilder::lock_order`](crate::LockClientBuilder::lock_order)).
///
/// # Examples
///
/// ```no_run
/// # use distlock_core as distlock;
/// # async fn demo() -> Result<(), distlock::LockError> {
/// use distlock::{LockClient, LockOrderCheck};
///
/// // In tests: fail on the first inversion instead of warning.
/// let locks = LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .lock_order(LockOrderCheck::Strict)
///     .connect()
///     .await?;
/// # let _ = locks;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockOrderCheck {
    /// No checking, nothing recorded.
    Off,
    /// Warn (`tracing::warn!`, once per pair of classes) and go on. The default.
    #[default]
    Warn,
    /// Refuse the acquisition that inverts an order seen before, with
    /// [`LockError::LockOrderInversion`].
    Strict,
}

/// Where a lock request was made, and the class it was given.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    /// The caller of the method that made the request (`#[track_caller]`).
    pub(crate) site: &'static Location<'static>,
    /// The class given to the request (`LockRequest::label`, the macro's template).
    pub(crate) label: Option<Arc<str>>,
    /// A name of a `lock_all`, whose order was checked with the whole set: taken in
    /// the set's canonical order, it makes no edge with the names before it.
    pub(crate) in_set: bool,
    /// The function that asked (`LockRequest::function`, the macro's function):
    /// shown as the holder's site instead of the caller's location.
    pub(crate) function: Option<&'static str>,
}

impl Origin {
    /// The caller of the function that calls this (through `#[track_caller]`s).
    #[track_caller]
    pub(crate) fn here() -> Self {
        Self {
            site: Location::caller(),
            label: None,
            in_set: false,
            function: None,
        }
    }

    /// Where the lock was asked for, as a holder shows it: the function, or the
    /// caller's `file:line`.
    pub(crate) fn site_text(&self) -> std::borrow::Cow<'static, str> {
        match self.function {
            Some(function) => function.into(),
            None => format!("{}:{}", self.site.file(), self.site.line()).into(),
        }
    }

    /// The class of a lock named `name` asked for from here.
    pub(crate) fn class(&self, name: &[u8]) -> Arc<str> {
        match &self.label {
            Some(label) => label.clone(),
            None => fold(name).into(),
        }
    }
}

/// `name` with every run of ASCII digits folded into `{#}` (bytes that are not
/// UTF-8 shown as U+FFFD).
fn fold(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(name);
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push_str("{#}");
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// One edge: a lock of class `.1` taken while holding one of class `.0`.
type Edge = (Arc<str>, Arc<str>);

/// Where an edge was first seen: where the held lock was taken, and where the
/// other was taken while holding it.
#[derive(Debug, Clone, Copy)]
struct Sites {
    holding: &'static Location<'static>,
    taking: &'static Location<'static>,
}

/// An edge this client had not seen before: for the shared graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewEdge {
    /// The class held.
    pub(crate) holding: Arc<str>,
    /// The class taken while holding it.
    pub(crate) taking: Arc<str>,
    /// "<site> then <site>": where each was taken.
    pub(crate) sites: String,
}

/// A client's lock-order checker.
#[derive(Debug)]
pub(crate) struct LockOrder {
    check: LockOrderCheck,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    edges: HashMap<Edge, Sites>,
    /// The pairs warned of, each once (in the order first seen).
    warned: HashSet<Edge>,
}

impl LockOrder {
    pub(crate) fn new(check: LockOrderCheck) -> Self {
        Self {
            check,
            seen: Mutex::new(Seen::default()),
        }
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anything is checked: callers skip gathering what the chain holds
    /// when it is not.
    pub(crate) fn is_on(&self) -> bool {
        self.check != LockOrderCheck::Off
    }

    /// Whether an inversion is refused rather than warned of.
    pub(crate) fn is_strict(&self) -> bool {
        self.check == LockOrderCheck::Strict
    }

    /// An inversion of `edge` found in the shared graph: `before` is who took the
    /// two in the other order, and where. Warned of once per pair (as local ones
    /// are); the error to return in strict mode.
    pub(crate) fn shared_inversion(&self, edge: &NewEdge, before: String) -> LockError {
        let inversion = LockError::LockOrderInversion {
            holding: edge.holding.to_string(),
            taking: edge.taking.to_string(),
            here: edge.sites.clone(),
            before,
        };
        crate::metrics::inversion(&edge.holding, &edge.taking);
        let pair = (edge.holding.clone(), edge.taking.clone());
        if !self.is_strict() && self.seen().warned.insert(pair) {
            tracing::warn!(
                lock.holding = %edge.holding,
                lock.taking = %edge.taking,
                "distlock: {inversion}"
            );
        }
        inversion
    }

    /// A new acquisition of class `taking`, asked for at `site`, while the chain
    /// holds locks of the classes `holding` (each with the site where it was
    /// taken): records the edges, and warns of (or, strict, refuses) one whose
    /// reverse was seen before. Returns the edges recorded for the first time.
    pub(crate) fn check(
        &self,
        holding: impl IntoIterator<Item = (Arc<str>, &'static Location<'static>)>,
        taking: &Arc<str>,
        site: &'static Location<'static>,
    ) -> Result<Vec<NewEdge>, LockError> {
        let mut new = Vec::new();
        if !self.is_on() {
            return Ok(new);
        }
        let mut seen = self.seen();
        for (held, held_site) in holding {
            if held == *taking {
                continue;
            }
            let reverse = (taking.clone(), held.clone());
            if let Some(earlier) = seen.edges.get(&reverse).copied() {
                let pair = (held.clone(), taking.clone());
                let inversion = LockError::LockOrderInversion {
                    holding: held.to_string(),
                    taking: taking.to_string(),
                    here: format!("{held_site} then {site}"),
                    before: format!("{} then {}", earlier.holding, earlier.taking),
                };
                crate::metrics::inversion(&held, taking);
                if self.check == LockOrderCheck::Strict {
                    return Err(inversion);
                }
                if seen.warned.insert(pair) {
                    tracing::warn!(
                        lock.holding = %held,
                        lock.taking = %taking,
                        "distlock: {inversion}"
                    );
                }
                continue;
            }
            let edge = (held, taking.clone());
            if seen.edges.len() < MAX_EDGES && !seen.edges.contains_key(&edge) {
                new.push(NewEdge {
                    holding: edge.0.clone(),
                    taking: edge.1.clone(),
                    sites: format!("{held_site} then {site}"),
                });
                seen.edges.insert(
                    edge,
                    Sites {
                        holding: held_site,
                        taking: site,
                    },
                );
            }
        }
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_fold_into_one_class() {
        assert_eq!(fold(b"order:42"), "order:{#}");
        assert_eq!(fold(b"order:7:line:12"), "order:{#}:line:{#}");
        assert_eq!(fold(b"inventory:bread"), "inventory:bread");
    }

    #[test]
    fn an_inversion_is_warned_once_and_refused_when_strict() {
        let site = Location::caller();
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let order = LockOrder::new(LockOrderCheck::Warn);
        order
            .check([(a.clone(), site)], &b, site)
            .expect("a then b");
        order
            .check([(a.clone(), site)], &b, site)
            .expect("a then b again");
        order
            .check([(b.clone(), site)], &a, site)
            .expect("warned only");
        assert_eq!(order.seen().warned.len(), 1);

        let strict = LockOrder::new(LockOrderCheck::Strict);
        strict
            .check([(a.clone(), site)], &b, site)
            .expect("a then b");
        let err = strict
            .check([(b.clone(), site)], &a, site)
            .expect_err("b then a");
        assert!(
            matches!(err, LockError::LockOrderInversion { .. }),
            "{err:?}"
        );
        strict
            .check([(a.clone(), site)], &a, site)
            .expect("one class is no edge");
    }
}
