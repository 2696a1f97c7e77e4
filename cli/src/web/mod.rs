//! `distlock web`: a live page of a namespace's locks, for operators.
//!
//! | file | what |
//! | --- | --- |
//! | `model.rs` | a lock's row, read from its hash through `distlock::layout` |
//! | `graph.rs` | the wait-for graph of the deadlock records, cycles marked |
//! | `timeline.rs` | the bars of holds and waits of the last minutes, and marks |
//! | `read.rs` | one read of the namespace: SCAN, then pipelined reads |
//! | `live.rs` | the one paced reader and the release subscription |
//! | `unlock.rs` | force-unlock from the page, behind the admin token |
//! | `routes.rs` | the HTTP routes: the page, its state, its events |
//!
//! Each file uses only those above it.

pub(crate) mod graph;
pub(crate) mod live;
pub(crate) mod model;
pub(crate) mod read;
pub(crate) mod routes;
pub(crate) mod timeline;
pub(crate) mod unlock;
