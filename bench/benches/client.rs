//! Criterion micro-benchmarks of distlock's client-side costs, through the public API.
//!
//! `cargo bench -p distlock-bench --bench client` (add `-- --quick` for a short pass).
//! The client needs a server to connect to, so a throwaway `redis-server` is started
//! with `distlock-testkit`; only `lock_unlock` talks to it in the measured loop.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use distlock::{current_lock, LockClient, LockContext};
use distlock_testkit::RedisServer;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime")
}

fn client_costs(c: &mut Criterion) {
    let server = RedisServer::start().expect("start redis-server (see distlock-testkit)");
    let rt = runtime();
    let client = rt
        .block_on(LockClient::builder().url(server.url()).connect())
        .expect("connect");

    // Key encoding and the request builder: `lock(name)` checks the name and encodes
    // the three Redis names of the lock; nothing is sent until it is awaited.
    let mut group = c.benchmark_group("lock_builder");
    group.bench_function("plain", |b| {
        b.iter(|| drop(black_box(client.lock(black_box("order:42")))))
    });
    group.bench_function("escaped", |b| {
        b.iter(|| drop(black_box(client.lock(black_box("tenant:{a}%:order:42")))))
    });
    group.bench_function("max_len", |b| {
        let name = vec![b'x'; distlock::MAX_NAME_LEN];
        b.iter(|| drop(black_box(client.lock(black_box(name.as_slice())))))
    });
    group.finish();

    // Context lookup, outside any scope and three locks deep.
    let mut group = c.benchmark_group("context");
    group.bench_function("current/outside", |b| b.iter(LockContext::current));
    group.bench_function("current_lock/outside", |b| b.iter(current_lock));
    rt.block_on(async {
        let a = client.lock("bench:a").await.expect("lock a");
        a.scope(async {
            let b2 = client.lock("bench:b").await.expect("lock b");
            b2.scope(async {
                let c3 = client.lock("bench:c").await.expect("lock c");
                c3.scope(async {
                    group.bench_function("current/three_deep", |b| b.iter(LockContext::current));
                    group.bench_function("current_lock/three_deep", |b| b.iter(current_lock));
                })
                .await;
                // The guard's cheap views, for code handed the lock.
                group.bench_function("guard_held", |b| b.iter(|| black_box(c3.held())));
                group.bench_function("guard_context", |b| b.iter(|| black_box(c3.context())));
                c3.unlock().await.expect("unlock c");
            })
            .await;
            b2.unlock().await.expect("unlock b");
        })
        .await;
        a.unlock().await.expect("unlock a");
    });
    group.finish();

    // Guard creation can only be had through an acquire: a full lock+unlock pair on
    // fresh names, one round trip each, to set the costs above against.
    let mut group = c.benchmark_group("round_trip");
    let next = AtomicU64::new(0);
    group.bench_function("lock_unlock", |b| {
        b.to_async(&rt).iter(|| async {
            let n = next.fetch_add(1, Ordering::Relaxed);
            let guard = client.lock(format!("bench:rt:{n}")).await.expect("lock");
            guard.unlock().await.expect("unlock");
        })
    });
    group.finish();
}

// `criterion_group!` makes an undocumented `pub fn`.
#[allow(missing_docs)]
mod group {
    use super::*;

    criterion_group! {
        name = benches;
        config = Criterion::default()
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(30);
        targets = client_costs
    }
}
criterion_main!(group::benches);
