//! Fencing tokens: why a lock alone cannot protect a store from a paused holder.
//!
//! Holder A takes a lock with a fixed lease of 600 ms and gets fencing token `t`.
//! Then it stalls for longer than its lease (a GC pause, a stopped VM, a slow
//! disk: here a sleep). The lease ends, holder B takes the lock with a larger token
//! and writes. A wakes up, still believing it holds the lock, and writes too.
//!
//! The lock cannot stop that write: A is not talking to Redis's lock at all. The
//! store can. It remembers the highest token it has seen (a small Lua script over
//! a Redis hash) and refuses a write with a lower one. So B's write stands and A's
//! stale write is rejected.
//!
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example fencing`
//! (or `cargo xtask demo fencing`; `REDIS_CLUSTER_URLS` for a Redis Cluster, `REDIS_SENTINEL_URLS` for Sentinel). Its
//! keys start with `distlock-example:`; it exits with a non-zero status if the stale
//! write gets through.

use std::time::Duration;

use distlock::LockError;

mod common;
use common::{Data, Target};

const LOCK: &str = "fencing:report";
const LEASE: Duration = Duration::from_millis(600);
const PAUSE: Duration = Duration::from_millis(1500);

/// A write that is applied only if its token is at least the highest one the store
/// has seen. KEYS[1]: the store (a hash with `token` and `value`). ARGV[1]: the
/// token, ARGV[2]: the value. Returns `{1, token}` when applied, `{0, highest}` when
/// refused. Check and write run in one script, so nothing can slip in between.
const FENCED_WRITE: &str = r"
local highest = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local token = tonumber(ARGV[1])
if token < highest then
    return {0, highest}
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return {1, token}
";

/// The protected resource: a value in Redis that only fenced writes change.
#[derive(Clone)]
struct FencedStore {
    redis: Data,
    key: &'static str,
    script: redis::Script,
}

impl FencedStore {
    /// Writes `value` with `token`; `Ok(false)` when the store refused it.
    async fn write(&self, token: u64, value: &str) -> redis::RedisResult<bool> {
        let mut redis = self.redis.clone();
        let (applied, highest): (i64, u64) = self
            .script
            .key(self.key)
            .arg(token)
            .arg(value)
            .invoke_async(&mut redis)
            .await?;
        if applied == 1 {
            println!("   store: accepted {value:?} with token {token}");
        } else {
            println!(
                "   store: REFUSED {value:?}: token {token} is older than {highest}, the newest it has seen"
            );
        }
        Ok(applied == 1)
    }

    async fn read(&self) -> redis::RedisResult<Option<String>> {
        let mut redis = self.redis.clone();
        redis::cmd("HGET")
            .arg(self.key)
            .arg("value")
            .query_async(&mut redis)
            .await
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = Target::from_env();
    println!("fencing tokens against {target}\n");

    // Fencing on for every lock of this client.
    let locks = target
        .lock_client()
        .namespace("distlock-example")
        .fencing(true)
        .connect()
        .await?;
    let redis = target.data().await?;
    let store = FencedStore {
        redis,
        key: "distlock-example:fencing:store",
        script: redis::Script::new(FENCED_WRITE),
    };
    redis::cmd("DEL")
        .arg(store.key)
        .exec_async(&mut store.redis.clone())
        .await?;

    // A takes the lock with a fixed lease: no watchdog keeps it alive.
    let a = locks.lock(LOCK).lease(LEASE).await?;
    let a_token = a.fencing_token().ok_or("fencing is on: A has a token")?;
    println!("A: took `{LOCK}` for {LEASE:?} with token {a_token}");
    store.write(a_token, "draft by A").await?;

    // B wants the lock too, on another task: another holder.
    let b = tokio::spawn({
        let (locks, store) = (locks.clone(), store.clone());
        async move {
            let guard = locks.lock(LOCK).wait(Duration::from_secs(5)).await?;
            let token = guard
                .fencing_token()
                .ok_or("fencing is on: B has a token")?;
            println!("B: took `{LOCK}` once A's lease ended, with token {token}");
            let written = store.write(token, "final by B").await?;
            guard.unlock().await?;
            println!("B: released `{LOCK}`");
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(written)
        }
    });

    // A stalls for longer than its lease.
    println!("A: stalls for {PAUSE:?} (longer than its lease)...");
    tokio::time::sleep(PAUSE).await;
    let b_written = b.await?.map_err(|error| error.to_string())?;

    // A wakes up and writes with its old token, as a holder that does not check would.
    println!("A: wakes up and writes with its old token {a_token}");
    let a_written = store.write(a_token, "stale write by A").await?;

    // The guard knew: the lease ended while A slept.
    println!("A: is_lost() = {}", a.is_lost());
    match a.unlock().await {
        Err(LockError::Lost { .. }) => println!("A: unlock() says the lock was lost"),
        other => println!("A: unlock() returned {other:?}"),
    }

    let value = store.read().await?;
    println!("\nthe store holds {value:?}");
    if b_written && !a_written && value.as_deref() == Some("final by B") {
        println!("the stale write was refused: fencing works");
        Ok(())
    } else {
        Err("the stale write got through, or B's write was refused".into())
    }
}
