//! The metrics of feature `metrics`, scraped from a Prometheus endpoint after a run
//! whose every outcome is known: the counts must be exactly what happened.
//!
//! The recorder is process-global: this binary has one test, and runs only with the
//! feature (`cargo test --features metrics --test ops_metrics`; `cargo xtask test`
//! runs it).

mod support;

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LostReason};
use metrics_exporter_prometheus::PrometheusBuilder;
use tokio::sync::Barrier;

const TASKS: u64 = 4;
const EACH: u64 = 5;
const LEASE: Duration = Duration::from_millis(300);

/// One sample of the scrape: its labels and value.
type Sample = (BTreeMap<String, String>, f64);

/// `GET /metrics` over a plain TCP connection: the samples, by series name.
fn scrape(addr: SocketAddr) -> BTreeMap<String, Vec<Sample>> {
    let mut stream = TcpStream::connect(addr).expect("connect to the endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    // HTTP/1.0: the body ends with the connection, never chunked.
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("send the request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("headers, then a body");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    let mut samples: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
    {
        let (name, rest) = line.split_at(line.find(['{', ' ']).expect("a name"));
        let mut labels = BTreeMap::new();
        let mut rest = rest;
        if let Some(inner) = rest.strip_prefix('{') {
            // key="value" pairs; a value may hold braces and commas (`job:{#}`).
            let mut chars = inner.char_indices();
            let mut key = String::new();
            let end = loop {
                let (at, c) = chars.next().expect("a closed label set");
                match c {
                    '}' => break at,
                    ',' => {}
                    '=' => {
                        assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                        let mut value = String::new();
                        for (_, c) in chars.by_ref() {
                            if c == '"' {
                                break;
                            }
                            value.push(c);
                        }
                        labels.insert(std::mem::take(&mut key), value);
                    }
                    c => key.push(c),
                }
            };
            rest = &inner[end + 1..];
        }
        let value: f64 = rest.trim().parse().unwrap_or_else(|_| panic!("{line}"));
        samples
            .entry(name.to_owned())
            .or_default()
            .push((labels, value));
    }
    samples
}

/// The value of series `name` whose labels include every one of `want`; panics
/// unless exactly one sample matches.
fn value(samples: &BTreeMap<String, Vec<Sample>>, name: &str, want: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = samples
        .get(name)
        .into_iter()
        .flatten()
        .filter(|(labels, _)| {
            want.iter()
                .all(|(key, value)| labels.get(*key).map(String::as_str) == Some(*value))
        })
        .map(|(_, value)| *value)
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{name} {want:?}: {:?}",
        samples.get(name)
    );
    matching[0]
}

/// Holds `first`, waits at `barrier` for the other chain, then asks for `second`
/// inside the hold: with the other chain doing the same the other way round, one
/// of the two is a deadlock's victim. Whether this one was.
async fn hold_then_ask(
    locks: LockClient,
    first: &'static str,
    second: &'static str,
    barrier: Arc<Barrier>,
) -> bool {
    let outer = locks.lock(first).await.expect("the first lock");
    barrier.wait().await;
    let inner = outer
        .scope(
            locks
                .lock(second)
                .wait(Duration::from_secs(10))
                .into_future(),
        )
        .await;
    let victim = match inner {
        Ok(inner) => {
            inner.unlock().await.expect("unlock");
            false
        }
        Err(err) => {
            assert!(matches!(err, LockError::Deadlock { .. }), "{err}");
            true
        }
    };
    outer.unlock().await.expect("unlock");
    victim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_after_a_known_run_counts_exactly_what_happened() {
    let addr: SocketAddr = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .expect("a free port")
        .local_addr()
        .expect("its address");
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .expect("install the exporter");

    let server = support::server();
    let locks = support::builder(&server)
        .default_lease(LEASE)
        .deadlock_check_after(Some(Duration::from_millis(200)))
        .connect()
        .await
        .expect("connect");
    let operator = support::client(&server).await;

    // TASKS tasks take `job:7` EACH times and re-enter it once each time.
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                let guard = locks.lock("job:7").wait(Duration::from_secs(10)).await?;
                let inner = guard.scope(async { locks.lock("job:7").await }).await?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                inner.unlock().await?;
                guard.unlock().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("every acquisition");
    }

    // One wait that runs out.
    let held = locks.lock("export:nightly").await.expect("lock");
    let err = locks
        .lock("export:nightly")
        .wait(Duration::from_millis(50))
        .await
        .expect_err("held");
    assert!(err.is_timeout(), "{err}");
    held.unlock().await.expect("unlock");

    // One lock lost: held past its max_hold (renewed until then), under a label.
    let bounded = locks
        .lock("import:2026-12-01")
        .label("import:{day}")
        .max_hold(LEASE)
        .await
        .expect("lock");
    tokio::time::timeout(LEASE * 3, bounded.lost())
        .await
        .expect("lost after max_hold");
    assert_eq!(bounded.lost_reason(), Some(LostReason::MaxHoldExceeded));
    assert!(bounded.unlock().await.expect_err("lost").is_lost());

    // One force-unlock, of another client's lock.
    let stale = locks.lock("stale:3").await.expect("lock");
    assert!(operator.force_unlock("stale:3").await.expect("force"));
    tokio::time::timeout(LEASE, stale.lost())
        .await
        .expect("the next renewal finds it gone");
    assert!(stale.unlock().await.expect_err("lost").is_lost());

    // Renewals that fail and are retried: the server stalls (SIGSTOP) across a
    // renewal of a 3 s lease, longer than the response timeout; the hold survives.
    let patient = support::builder(&server)
        .default_lease(Duration::from_secs(3))
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let warm = patient.lock("cache:warm").await.expect("lock");
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.pause().expect("SIGSTOP the server");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    server.resume().expect("SIGCONT the server");
    warm.unlock()
        .await
        .expect("renewed after the stall, still held");

    // One lock-order inversion (warned: the checker's default).
    let order = locks.lock("order:1").await.expect("lock");
    let customer = order
        .scope(async { locks.lock("customer:1").await })
        .await
        .expect("order, then customer");
    customer.unlock().await.expect("unlock");
    order.unlock().await.expect("unlock");
    let customer = locks.lock("customer:1").await.expect("lock");
    let order = customer
        .scope(async { locks.lock("order:1").await })
        .await
        .expect("customer, then order: warned only");
    order.unlock().await.expect("unlock");
    customer.unlock().await.expect("unlock");

    // One deadlock: two chains take `ledger:a` and `ledger:b` in opposite orders
    // (an inversion too); one of them gives up.
    let barrier = Arc::new(Barrier::new(2));
    let (one, other) = tokio::join!(
        hold_then_ask(locks.clone(), "ledger:a", "ledger:b", barrier.clone()),
        hold_then_ask(locks.clone(), "ledger:b", "ledger:a", barrier),
    );
    assert!(one != other, "exactly one victim");

    // Issue 26: a set of names, by `lock_all` with a label and by the macro's
    // `keys = [..]`, is counted under its template, not under one series per SKU.
    let skus = ["apple", "bread", "cheese"].map(|sku| format!("inventory:{sku}"));
    let set = locks
        .lock_all(skus.clone())
        .label("inventory:{sku}")
        .await
        .expect("the set");
    set.unlock().await.expect("unlock the set");
    restock(&locks, &["apple", "bread", "cheese"])
        .await
        .expect("the annotated set");

    let samples = scrape(addr);
    let job = [
        ("lock", "job:{#}"),
        ("backend", "single"),
        ("kind", "exclusive"),
    ];
    let n = (TASKS * EACH) as f64;
    assert_eq!(value(&samples, "distlock_acquired_total", &job), n);
    assert_eq!(value(&samples, "distlock_reentered_total", &job), n);
    assert!(value(&samples, "distlock_contended_total", &job) >= 1.0);
    assert_eq!(value(&samples, "distlock_wait_seconds_count", &job), n);
    assert_eq!(value(&samples, "distlock_hold_seconds_count", &job), n);

    let export = [("lock", "export:nightly")];
    assert_eq!(value(&samples, "distlock_timed_out_total", &export), 1.0);
    assert_eq!(
        samples["distlock_timed_out_total"].len(),
        1,
        "no other timeout: {:?}",
        samples["distlock_timed_out_total"]
    );
    assert_eq!(value(&samples, "distlock_acquired_total", &export), 1.0);

    let import = [("lock", "import:{day}")];
    let lost = &samples["distlock_lost_total"];
    assert_eq!(lost.len(), 2, "two losses: {lost:?}");
    assert_eq!(
        value(
            &samples,
            "distlock_lost_total",
            &[("lock", "import:{day}"), ("reason", "max_hold_exceeded")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "distlock_lost_total",
            &[("lock", "stale:{#}"), ("reason", "not_held")]
        ),
        1.0
    );
    assert!(value(&samples, "distlock_renewals_total", &import) >= 1.0);
    assert_eq!(value(&samples, "distlock_hold_seconds_count", &import), 1.0);
    assert!(
        value(
            &samples,
            "distlock_renewal_round_trip_seconds_count",
            &[("backend", "single")]
        ) >= 1.0
    );
    assert_eq!(
        value(
            &samples,
            "distlock_force_unlocks_total",
            &[("lock", "stale:{#}"), ("backend", "single")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "distlock_lock_order_inversions_total",
            &[("lock", "order:{#}"), ("holding", "customer:{#}")]
        ),
        1.0
    );
    let deadlocks = &samples["distlock_deadlocks_total"];
    assert_eq!(deadlocks.len(), 1, "{deadlocks:?}");
    assert_eq!(deadlocks[0].1, 1.0, "{deadlocks:?}");
    let inversions = &samples["distlock_lock_order_inversions_total"];
    assert_eq!(
        inversions.len(),
        2,
        "order/customer, ledger:a/b: {inversions:?}"
    );

    // Nothing is held or waited for any more, in any series; no raw name is a label.
    for (labels, held) in &samples["distlock_held"] {
        assert_eq!(*held, 0.0, "held {labels:?}");
    }
    for (labels, waiting) in &samples["distlock_waiters"] {
        assert_eq!(*waiting, 0.0, "waiting {labels:?}");
    }
    for (name, series) in &samples {
        for (labels, _) in series {
            let lock = labels.get("lock").map(String::as_str).unwrap_or_default();
            assert!(
                !lock.chars().any(|c| c.is_ascii_digit()),
                "{name}: a raw name as a label: {lock}"
            );
            assert!(
                !skus.iter().any(|sku| sku == lock),
                "{name}: a name of a set as a label: {lock}"
            );
        }
    }
    let acquired = &samples["distlock_acquired_total"];
    for template in ["inventory:{sku}", "inventory:{sku in skus}"] {
        assert_eq!(
            value(&samples, "distlock_acquired_total", &[("lock", template)]),
            3.0,
            "the three names of the set under `{template}`: {acquired:?}"
        );
    }
    assert!(
        value(
            &samples,
            "distlock_renewal_failures_total",
            &[("lock", "cache:warm"), ("backend", "single")]
        ) >= 1.0
    );
    the_dashboard_and_rules_query_what_the_client_emits(&samples);
    bounded_labels(&server, addr).await;
}

/// Issue 38 (2): every series that the shipped Grafana dashboard
/// (`ops/grafana/distlock.json`) and alert rules (`ops/prometheus/distlock-alerts.yml`)
/// query is one the client emitted in the run above, and every label they select,
/// match or group by is one that series carries.
fn the_dashboard_and_rules_query_what_the_client_emits(samples: &BTreeMap<String, Vec<Sample>>) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &str| {
        std::fs::read_to_string(root.join(path)).unwrap_or_else(|err| panic!("{path}: {err}"))
    };
    let dashboard = read("ops/grafana/distlock.json");
    let rules = read("ops/prometheus/distlock-alerts.yml");
    let mut queries = json_strings_of(&dashboard, "expr");
    queries.extend(json_strings_of(&dashboard, "definition"));
    let panels = queries.len();
    queries.extend(
        rules
            .lines()
            .filter_map(|line| line.trim().strip_prefix("expr:"))
            .map(|expr| expr.trim().to_owned()),
    );
    assert!(panels >= 15, "the dashboard's queries were read: {panels}");
    assert!(queries.len() >= panels + 5, "the rules were read");
    let mut checked = 0;
    for query in &queries {
        for (name, labels) in queried_series(query) {
            let series = samples.get(&name).unwrap_or_else(|| {
                panic!("`{query}` queries {name}, which the client never emitted")
            });
            for label in labels {
                assert!(
                    series.iter().any(|(found, _)| found.contains_key(&label)),
                    "`{query}` uses label `{label}` of {name}, which it does not carry: {series:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} series were checked");
}

/// The JSON string values of every `"key": "..."` in `json`, unescaped.
fn json_strings_of(json: &str, key: &str) -> Vec<String> {
    let opening = format!("\"{key}\": \"");
    json.match_indices(&opening)
        .map(|(at, _)| {
            let mut value = String::new();
            let mut chars = json[at + opening.len()..].chars();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => value.push(chars.next().unwrap_or('\\')),
                    c => value.push(c),
                }
            }
            value
        })
        .collect()
}

/// The distlock series a PromQL `query` names, each with the labels the query
/// needs of it: those of its own `{...}` matchers, and those of every
/// `by (...)` whose aggregated expression contains it.
fn queried_series(query: &str) -> Vec<(String, Vec<String>)> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut rest = query;
    let mut offset = 0;
    while let Some(at) = rest.find("distlock_") {
        let start = offset + at;
        let len = query[start..]
            .find(|c| !is_name(c))
            .unwrap_or(query.len() - start);
        let name = query[start..start + len].to_owned();
        let mut labels = Vec::new();
        if let Some(matchers) = query[start + len..].strip_prefix('{') {
            let matchers = &matchers[..matchers.find('}').unwrap_or(matchers.len())];
            // `label=~"value"` pairs; the values are quoted, and never split here.
            let mut quoted = false;
            let mut label = String::new();
            for c in matchers.chars() {
                match c {
                    '"' => quoted = !quoted,
                    _ if quoted => {}
                    c if is_name(c) => label.push(c),
                    _ if !label.is_empty() => labels.push(std::mem::take(&mut label)),
                    _ => {}
                }
            }
        }
        for (by_at, _) in query.match_indices("by (") {
            let grouped = &query[by_at + 4..];
            let Some(close) = grouped.find(')') else {
                continue;
            };
            let inner_start = by_at + 4 + close + 1;
            let Some(open) = query[inner_start..].find('(') else {
                continue;
            };
            let open = inner_start + open;
            let mut depth = 0;
            let mut end = query.len();
            for (i, c) in query[open..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + i;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if (open..end).contains(&start) {
                labels.extend(
                    grouped[..close]
                        .split(',')
                        .map(|label| label.trim().to_owned()),
                );
            }
        }
        found.push((name, labels));
        offset = start + len;
        rest = &query[offset..];
    }
    found
}

/// Issue 37 (2): names without a label make a bounded number of series: 10,000
/// UUID names fold into one class, and names that do not fold (e-mail addresses)
/// stop at the client's cap, past which they share `{other}`, warned of once.
async fn bounded_labels(server: &distlock_testkit::RedisServer, addr: SocketAddr) {
    const CAP: usize = 20;
    let warnings = support::capture_warnings();
    let locks = support::builder(server)
        .max_metric_labels(CAP)
        .connect()
        .await
        .expect("connect");
    let take = |names: Vec<String>| {
        let locks = locks.clone();
        async move {
            for name in names {
                locks
                    .try_lock(name)
                    .await
                    .expect("no error")
                    .expect("free")
                    .unlock()
                    .await
                    .expect("unlock");
            }
        }
    };
    let uuids: Vec<String> = (0..10_000)
        .map(|_| format!("job:{}", uuid::Uuid::new_v4()))
        .collect();
    let mut tasks = Vec::new();
    for chunk in uuids.chunks(10_000 / 16) {
        tasks.push(tokio::spawn(take(chunk.to_vec())));
    }
    for task in tasks {
        task.await.expect("task");
    }
    // Letters past `f`, so that no word is hex and nothing folds.
    let letters = |mut n: usize| -> String {
        (0..4)
            .map(|_| {
                let letter = char::from(b'g' + (n % 20) as u8);
                n /= 20;
                letter
            })
            .collect()
    };
    let mails: Vec<String> = (0..CAP * 3)
        .map(|n| format!("mail:{}@example.org", letters(n)))
        .collect();
    take(mails).await;

    let samples = scrape(addr);
    let acquired = &samples["distlock_acquired_total"];
    let jobs = value(&samples, "distlock_acquired_total", &[("lock", "job:{#}")]);
    assert!(
        jobs >= 10_000.0,
        "10,000 UUID names under `job:{{#}}`: {jobs}"
    );
    let mail_labels: std::collections::BTreeSet<&str> = acquired
        .iter()
        .filter_map(|(labels, _)| labels.get("lock").map(String::as_str))
        .filter(|lock| lock.starts_with("mail:"))
        .collect();
    // `job:{#}` took one place of the cap.
    assert_eq!(mail_labels.len(), CAP - 1, "{mail_labels:?}");
    let other = value(&samples, "distlock_acquired_total", &[("lock", "{other}")]);
    assert_eq!(
        other,
        (CAP * 3 - (CAP - 1)) as f64,
        "the names past the cap"
    );
    let text = warnings.text();
    assert_eq!(
        text.matches("are counted under `{other}`").count(),
        1,
        "one warning: {text}"
    );
    assert!(
        text.contains("LockClientBuilder::max_metric_labels"),
        "{text}"
    );
}

/// Takes the inventory of every SKU at once, as a shop's restock would.
#[distlock::distributed_lock(keys = ["inventory:{sku in skus}"], client = locks)]
async fn restock(locks: &LockClient, skus: &[&str]) -> Result<(), LockError> {
    Ok(())
}
