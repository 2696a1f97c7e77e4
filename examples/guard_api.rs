//! The lock API without the macro: `lock`, `try_lock`, waiting with a timeout,
//! `scope` and `with_lock`, `lost()`, `inspect` and `force_unlock`.
//!
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example guard_api`
//! (or `cargo xtask demo guard_api`; `REDIS_CLUSTER_URLS` for a Redis Cluster, `REDIS_SENTINEL_URLS` for Sentinel). Its
//! keys start with `distlock-example:`; it exits with a non-zero status if a step
//! does not behave as described.

use std::time::Duration;

use distlock::LockError;

mod common;
use common::Target;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// Fails the example with `message` unless `condition` holds.
fn expect(condition: bool, message: &str) -> Result<(), Error> {
    if condition {
        Ok(())
    } else {
        Err(format!("unexpected: {message}").into())
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let target = Target::from_env();
    println!("the guard API against {target}\n");
    let locks = target
        .lock_client()
        .namespace("distlock-example")
        .default_wait(Duration::from_secs(5))
        .connect()
        .await?;

    // 1. lock and unlock. `unlock` waits for Redis and reports a lost lock.
    let guard = locks.lock("report:daily").await?;
    println!(
        "1. lock: took `{}`, hold count {}, fencing token {:?}",
        guard.name(),
        guard.hold_count(),
        guard.fencing_token()
    );
    guard.unlock().await?;
    println!("   unlock: released\n");

    // 2. try_lock does not wait: `None` when another owner holds the lock. Outside
    //    any lock scope, every acquire is a new owner, even in the same task.
    let holder = locks.lock("report:daily").await?;
    let second = locks.try_lock("report:daily").await?;
    println!(
        "2. try_lock while another owner holds it: {}",
        if second.is_some() { "took it" } else { "None" }
    );
    expect(second.is_none(), "try_lock took a held lock")?;

    // 3. Waiting with a timeout: `.wait(d)` on the request; zero fails at once.
    // `is_busy()` holds on every backend (a `Timeout`, or on Redlock a
    // `QuorumNotReached` where a majority named another owner).
    let waited = locks
        .lock("report:daily")
        .wait(Duration::from_millis(300))
        .await;
    match &waited {
        Err(error) if error.is_busy() => println!("3. lock().wait(300ms): {error}\n"),
        other => return Err(format!("expected a timeout, got {other:?}").into()),
    }
    holder.unlock().await?;

    // 4. scope: code run inside `guard.scope(..)` re-enters the lock, at any depth.
    let guard = locks.lock("order:42").await?;
    let depth = guard
        .scope(async {
            let inner = locks.lock("order:42").await?; // no wait: same owner
            let depth = inner.hold_count();
            inner.unlock().await?;
            Ok::<_, LockError>(depth)
        })
        .await?;
    println!("4. scope: re-entered `order:42` at depth {depth}");
    expect(depth == 2, "the re-entry was not at depth 2")?;
    guard.unlock().await?;

    // 5. with_lock: lock, run the body in the lock's scope, unlock; returns the body's value.
    let total = locks
        .with_lock("order:42", |held| async move {
            println!(
                "5. with_lock: the body holds `{}` (depth {})",
                held.name(),
                held.hold_count()
            );
            Ok::<_, LockError>(40 + 2)
        })
        .await?;
    println!("   with_lock returned {total}\n");

    // 6. lost(): a future that completes when the lease is gone. With a fixed lease
    //    of 300 ms and 2 s of work, the work is stopped when the lease ends.
    let guard = locks
        .lock("export:nightly")
        .lease(Duration::from_millis(300))
        .await?;
    let work = tokio::time::sleep(Duration::from_secs(2));
    tokio::select! {
        () = work => return Err("the work outlived its lease unnoticed".into()),
        () = guard.lost() => println!("6. lost(): the 300 ms lease ended, work stopped"),
    }
    println!("   is_lost() = {}", guard.is_lost());
    match guard.unlock().await {
        Err(error) if error.is_lost() => println!("   unlock(): lost, as expected\n"),
        other => return Err(format!("expected a lost lock, got {other:?}").into()),
    }

    // 7. inspect: what Redis says about a lock, without changing it.
    let fenced = locks.lock("ledger:7").fencing(true).await?;
    let info = locks.inspect("ledger:7").await?;
    println!(
        "7. inspect: held {}, hold count {}, lease left {:?}, token {:?} (last issued {:?})",
        info.held,
        info.hold_count,
        info.lease_remaining
            .map(|left| Duration::from_secs(left.as_secs())),
        info.fencing_token,
        info.last_fencing_token
    );
    expect(info.held && info.hold_count == 1, "inspect saw no holder")?;

    // 8. force_unlock: an operator breaks a lock that someone holds. The holder is
    //    told: its guard reports the loss, at the latest at the next renewal.
    let deleted = locks.force_unlock("ledger:7").await?;
    println!("8. force_unlock: deleted = {deleted}");
    match fenced.unlock().await {
        Err(error) if error.is_lost() => println!("   the holder's unlock(): {error}"),
        other => return Err(format!("expected a lost lock, got {other:?}").into()),
    }
    expect(!locks.inspect("ledger:7").await?.held, "still held")?;

    println!("\nguard API tour finished");
    Ok(())
}
