//! A short tour of distlock: lock, re-entry, contention, wake-up by message, loss.
//!
//! Run it with `cargo xtask demo` (which starts a throwaway `redis-server`), or
//! against your own server: `REDIS_URL=redis://127.0.0.1:6379 cargo run --example demo`
//! (`REDIS_CLUSTER_URLS` for a Redis Cluster, `REDIS_SENTINEL_URLS` for Sentinel).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::LockError;

mod common;
use common::Target;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = Target::from_env();
    println!("distlock demo against {target}\n");
    let locks = target.lock_client().connect().await?;

    // 1. Take a lock and give it back.
    let guard = locks.lock("demo:report").await?;
    println!(
        "1. took `{}` (hold count {})",
        guard.name(),
        guard.hold_count()
    );
    guard.unlock().await?;
    println!("   released it\n");

    // 2. Re-entry: code inside the lock's scope takes the same name again.
    locks
        .with_lock("demo:order:42", |held| {
            let locks = locks.clone();
            async move {
                println!("2. took `{}`, depth {}", held.name(), held.hold_count());
                let inner = locks.lock("demo:order:42").await?;
                println!("   re-entered it, depth {}", inner.hold_count());
                let info = locks.inspect("demo:order:42").await?;
                println!(
                    "   Redis says: held = {}, hold count = {}",
                    info.held, info.hold_count
                );
                inner.unlock().await?;
                Ok::<_, LockError>(())
            }
        })
        .await?;
    println!(
        "   free again: {}\n",
        !locks.inspect("demo:order:42").await?.held
    );

    // 3. Contention: eight tasks increment a counter under one lock.
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (locks, inside, overlaps, done) = (
            locks.clone(),
            inside.clone(),
            overlaps.clone(),
            done.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let guard = locks.lock("demo:counter").await?;
                if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
                guard.unlock().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    println!(
        "3. 8 tasks x 25 critical sections: {} done in {:?}, {} overlaps\n",
        done.load(Ordering::SeqCst),
        started.elapsed(),
        overlaps.load(Ordering::SeqCst)
    );
    if overlaps.load(Ordering::SeqCst) != 0 {
        return Err("critical sections overlapped".into());
    }

    // 4. Wake-up by message: the waiter sleeps until the release, not for the lease.
    let holder = locks.lock("demo:handoff").await?;
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let guard = locks
                .lock("demo:handoff")
                .wait(Duration::from_secs(10))
                .await?;
            let at = Instant::now();
            guard.unlock().await?;
            Ok::<_, LockError>(at)
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    holder.unlock().await?;
    let acquired = waiter.await??;
    println!(
        "4. the waiter got the lock {:?} after the release (the lease was 30 s)\n",
        acquired.saturating_duration_since(released)
    );

    // 5. Loss: an operator force-unlocks a held lock; the holder is told.
    let watched = target
        .lock_client()
        .default_lease(Duration::from_millis(900))
        .connect()
        .await?;
    let guard = watched.lock("demo:lost").await?;
    locks.force_unlock("demo:lost").await?;
    tokio::time::timeout(Duration::from_secs(2), guard.lost()).await?;
    println!(
        "5. after a force-unlock the guard reports: lost = {}",
        guard.is_lost()
    );
    match guard.unlock().await {
        Err(err) if err.is_lost() => println!("   unlock() says: {err}"),
        other => return Err(format!("expected a lost lock, got {other:?}").into()),
    }
    println!("\ndemo finished");
    Ok(())
}
