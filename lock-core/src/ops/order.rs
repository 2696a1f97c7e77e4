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
//! the name with every part that varies (digits, hex, UUIDs) folded into `{#}`
//! (`order:42` and `order:7` are both `order:{#}`). Re-entries, locks of one class, and the names of one
//! `lock_all` (taken in one canonical order) make no edge.
//!
//! The edges are kept in the client, in memory, at most [`MAX_EDGES`] of them; a
//! client that shares them (`LockClientBuilder::share_lock_order`) also records each
//! edge new to it in its namespace's graph in Redis (`order_shared.rs`), where the
//! edges of other processes and services are found too.

use std::collections::{HashMap, HashSet};
use std::panic::Location;
use std::sync::{Arc, Mutex};

use crate::error::LockError;
use crate::sync::locked;

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

/// One edge: a lock of class `.1` taken while holding one of class `.0`.
type Edge = (Arc<str>, Arc<str>);

/// Where an edge was first seen: where the held lock was taken, and where the
/// other was taken while holding it.
type Sites = (&'static Location<'static>, &'static Location<'static>);

/// An edge this client had not seen before: for the shared graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NewEdge {
    /// The class held.
    pub(crate) holding: Arc<str>,
    /// The class taken while holding it.
    pub(crate) taking: Arc<str>,
    /// `"<site> then <site>"`: where each was taken.
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
    /// two in the other order, and where. The error to return in strict mode
    /// (warned of otherwise, see [`LockOrder::inverted`]).
    pub(crate) fn shared_inversion(&self, edge: &NewEdge, before: String) -> LockError {
        self.inverted(
            &mut locked(&self.seen),
            &edge.holding,
            &edge.taking,
            edge.sites.clone(),
            before,
        )
    }

    /// Class `taking` asked for while holding `held`, the other way round to an
    /// order seen before (`before`; `here` says where each was taken): counted,
    /// and warned of once per pair unless strict. Returns the inversion, the error
    /// of strict mode.
    fn inverted(
        &self,
        seen: &mut Seen,
        held: &Arc<str>,
        taking: &Arc<str>,
        here: String,
        before: String,
    ) -> LockError {
        let inversion = LockError::LockOrderInversion {
            holding: held.to_string(),
            taking: taking.to_string(),
            here,
            before,
        };
        super::metrics::inversion(held, taking);
        if !self.is_strict() && seen.warned.insert((held.clone(), taking.clone())) {
            tracing::warn!(
                lock.holding = %held,
                lock.taking = %taking,
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
        let mut seen = locked(&self.seen);
        for (held, held_site) in holding {
            if held == *taking {
                continue;
            }
            let reverse = (taking.clone(), held.clone());
            if let Some((first_held, first_taken)) = seen.edges.get(&reverse).copied() {
                let here = format!("{held_site} then {site}");
                let before = format!("{first_held} then {first_taken}");
                let inversion = self.inverted(&mut seen, &held, taking, here, before);
                if self.is_strict() {
                    return Err(inversion);
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
                seen.edges.insert(edge, (held_site, site));
            }
        }
        Ok(new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(locked(&order.seen).warned.len(), 1);

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
