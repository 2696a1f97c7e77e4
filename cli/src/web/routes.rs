//! The HTTP side: the page (one HTML file, its script and its style, embedded),
//! the state of the page's view as JSON, a stream of server-sent events that says
//! when a new read is there, and the force-unlock of one lock.
//!
//! Every request reads the reader's last [`Snapshot`]: however many tabs are
//! open, Redis sees one reader.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::web::graph::Graph;
use crate::web::live::{now_ms, Shared, Snapshot};
use crate::web::model::LockRow;
use crate::web::timeline::{Mark, Span};
use crate::web::unlock::{force_unlock, Unlock};

/// The page.
const INDEX: &str = include_str!("page/index.html");
/// Its script.
const SCRIPT: &str = include_str!("page/app.js");
/// Its style.
const STYLE: &str = include_str!("page/app.css");

/// The most rows one page of the table has.
pub(crate) const MAX_PER_PAGE: usize = 500;

/// How many lock names the timeline shows at most.
const TIMELINE_NAMES: usize = 24;

/// What the handlers get.
#[derive(Clone, Debug)]
pub(crate) struct App {
    /// The reader's state.
    pub(crate) shared: Arc<Shared>,
    /// The admin token; `None`: force-unlock is off.
    pub(crate) token: Option<Arc<str>>,
    /// Ends the event streams when the server stops.
    pub(crate) stop: watch::Receiver<bool>,
}

/// The routes.
pub(crate) fn router(app: App) -> Router {
    Router::new()
        .route(
            "/",
            get(|| async { page(INDEX, "text/html; charset=utf-8") }),
        )
        .route(
            "/app.js",
            get(|| async { page(SCRIPT, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/app.css",
            get(|| async { page(STYLE, "text/css; charset=utf-8") }),
        )
        .route("/api/state", get(state))
        .route("/api/events", get(events))
        .route("/api/force-unlock", post(unlock))
        .with_state(app)
}

fn page(body: &'static str, kind: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// What the page asks for: a page of the table, filtered and sorted.
#[derive(Debug, Deserialize)]
pub(crate) struct ViewQuery {
    /// The 1-based page.
    page: Option<usize>,
    /// Rows per page.
    per: Option<usize>,
    /// A part of the lock names shown (case-insensitive).
    filter: Option<String>,
    /// `name`, `kind`, `holders`, `held_for`, `lease_left`, `waiting`.
    sort: Option<String>,
    /// `asc` or `desc`.
    dir: Option<String>,
}

/// The JSON of `/api/state`.
#[derive(Debug, Serialize)]
struct View<'a> {
    revision: u64,
    namespace: &'a str,
    servers: String,
    now_ms: u64,
    read_at_ms: Option<u64>,
    error: Option<&'a str>,
    live: bool,
    admin: bool,
    /// Locks held in the namespace.
    total: usize,
    /// Locks that match the filter.
    matching: usize,
    page: usize,
    pages: usize,
    per: usize,
    locks: Vec<&'a LockRow>,
    timeline: Timeline<'a>,
    graph: &'a Graph,
    cost: Cost,
}

#[derive(Debug, Serialize)]
struct Timeline<'a> {
    window_ms: u64,
    names: Vec<&'a str>,
    spans: Vec<&'a Span>,
    marks: Vec<&'a Mark>,
}

#[derive(Debug, Serialize)]
struct Cost {
    commands_last_read: u64,
    commands_total: u64,
    read_ms: u64,
    read_started_ms: u64,
    skipped: u64,
}

/// `GET /api/state`: the view the query asks for, of the last read.
///
/// # Cancel safety
///
/// Reads memory only: dropping it changes nothing.
async fn state(State(app): State<App>, Query(query): Query<ViewQuery>) -> Response {
    let snapshot = app.shared.snapshot.borrow().clone();
    Json(view(&app, &snapshot, &query)).into_response()
}

/// The view of `snapshot` that `query` asks for.
fn view<'a>(app: &'a App, snapshot: &'a Snapshot, query: &ViewQuery) -> View<'a> {
    let filter = query.filter.as_deref().unwrap_or("").to_lowercase();
    let matches = |name: &str| filter.is_empty() || name.to_lowercase().contains(&filter);
    let mut rows: Vec<&LockRow> = snapshot
        .locks
        .iter()
        .filter(|row| matches(&row.name))
        .collect();
    sort(&mut rows, query.sort.as_deref().unwrap_or("name"));
    if query.dir.as_deref() == Some("desc") {
        rows.reverse();
    }
    let per = query.per.unwrap_or(100).clamp(1, MAX_PER_PAGE);
    let pages = rows.len().div_ceil(per).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let matching = rows.len();
    let locks = rows.into_iter().skip((page - 1) * per).take(per).collect();
    View {
        revision: snapshot.revision,
        namespace: &app.shared.target.namespace,
        servers: app.shared.target.describe(),
        now_ms: now_ms(),
        read_at_ms: snapshot.read_at_ms,
        error: snapshot.error.as_deref(),
        live: snapshot.live,
        admin: app.token.is_some(),
        total: snapshot.locks.len(),
        matching,
        page,
        pages,
        per,
        locks,
        timeline: timeline(snapshot, &matches),
        graph: &snapshot.graph,
        cost: Cost {
            commands_last_read: snapshot.commands,
            commands_total: snapshot.commands_total,
            read_ms: snapshot.read_ms,
            read_started_ms: snapshot.read_started_ms,
            skipped: snapshot.skipped,
        },
    }
}

/// Sorts the rows by `key`, ascending; by name among equals.
fn sort(rows: &mut [&LockRow], key: &str) {
    match key {
        "kind" => rows.sort_by(|a, b| a.kind.cmp(&b.kind).then(a.name.cmp(&b.name))),
        "holders" => rows.sort_by(|a, b| a.hold_count.cmp(&b.hold_count).then(a.name.cmp(&b.name))),
        "held_for" => {
            rows.sort_by(|a, b| a.held_for_ms.cmp(&b.held_for_ms).then(a.name.cmp(&b.name)))
        }
        "lease_left" => {
            rows.sort_by(|a, b| {
                a.lease_left_ms
                    .cmp(&b.lease_left_ms)
                    .then(a.name.cmp(&b.name))
            });
        }
        "waiting" => rows.sort_by(|a, b| {
            let waits = |row: &LockRow| row.waiting.max(row.listening.unwrap_or(0));
            waits(a).cmp(&waits(b)).then(a.name.cmp(&b.name))
        }),
        _ => rows.sort_by(|a, b| a.name.cmp(&b.name)),
    }
}

/// The timeline of the names that match: the [`TIMELINE_NAMES`] most recently
/// active, by their bars and their marks (a lock taken and given back between two
/// reads has marks only).
fn timeline<'a>(snapshot: &'a Snapshot, matches: &dyn Fn(&str) -> bool) -> Timeline<'a> {
    let now = now_ms();
    let mut latest: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    let spans = snapshot
        .spans
        .iter()
        .map(|span| (span.name.as_str(), span.to_ms.unwrap_or(now)));
    let marks = snapshot
        .marks
        .iter()
        .map(|mark| (mark.name.as_str(), mark.at_ms));
    for (name, at) in spans.chain(marks).filter(|(name, _)| matches(name)) {
        let entry = latest.entry(name).or_default();
        *entry = (*entry).max(at);
    }
    let mut names: Vec<(&str, u64)> = latest.into_iter().collect();
    names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    names.truncate(TIMELINE_NAMES);
    let mut names: Vec<&str> = names.into_iter().map(|(name, _)| name).collect();
    names.sort_unstable();
    let shown = |name: &str| names.binary_search(&name).is_ok();
    Timeline {
        window_ms: snapshot.window_ms,
        spans: snapshot
            .spans
            .iter()
            .filter(|span| shown(&span.name))
            .collect(),
        marks: snapshot
            .marks
            .iter()
            .filter(|mark| shown(&mark.name))
            .collect(),
        names,
    }
}

/// `GET /api/events`: a stream of `state` events, one per read, each with the
/// read's revision; it ends when the server stops.
///
/// # Cancel safety
///
/// Reads memory only: dropping it (or its stream) changes nothing.
async fn events(State(app): State<App>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut reads = app.shared.snapshot.subscribe();
    reads.mark_changed();
    let stream =
        futures_util::stream::unfold((reads, app.stop), |(mut reads, mut stop)| async move {
            if *stop.borrow() {
                return None;
            }
            tokio::select! {
                changed = reads.changed() => changed.ok()?,
                _ = stop.changed() => return None,
            }
            let revision = reads.borrow_and_update().revision;
            let event = Event::default().event("state").data(revision.to_string());
            Some((Ok(event), (reads, stop)))
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// `POST /api/force-unlock`: `{"id": <name in hex>, "reason": "..."}`, with the
/// admin token in the `x-distlock-admin-token` header.
///
/// # Cancel safety
///
/// As [`force_unlock`]: once checked, the deletion may still be applied after the
/// future is dropped.
async fn unlock(
    State(app): State<App>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Json(ask): Json<Unlock>,
) -> Response {
    let given = headers
        .get("x-distlock-admin-token")
        .and_then(|value| value.to_str().ok());
    let (status, answer) = force_unlock(&app.shared, app.token.as_deref(), given, &ask, peer).await;
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(answer)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::timeline::Bar;

    #[test]
    fn a_lock_with_marks_only_has_its_lane() {
        let snapshot = Snapshot {
            spans: vec![Span {
                name: "held".to_owned(),
                lane: "o1".to_owned(),
                label: None,
                bar: Bar::Hold,
                from_ms: 1,
                to_ms: None,
            }],
            marks: vec![Mark {
                name: "brief".to_owned(),
                what: "release",
                at_ms: 2,
            }],
            ..Snapshot::default()
        };
        let all = timeline(&snapshot, &|_| true);
        assert_eq!(all.names, ["brief", "held"]);
        assert_eq!(all.marks.len(), 1);
        let filtered = timeline(&snapshot, &|name| name.starts_with('b'));
        assert_eq!(filtered.names, ["brief"]);
        assert!(filtered.spans.is_empty());
    }
}
