//! Allocations per lock+unlock pair of the client (issue 36): a counting global
//! allocator around the system's, and lock+unlock pairs on fresh names through one
//! `LockClient` against a throwaway `redis-server` (from `distlock-testkit`), with
//! 1 task and with 64 tasks, on a current-thread runtime. Every allocation of the
//! process while the pairs run is counted (the runtime's and redis-rs's too), less
//! those of a warm-up round that is not counted.
//!
//! ```text
//! cargo run --release -p distlock-bench --bin allocs [PAIRS_PER_TASK]
//! cargo run --release -p distlock-bench --features rslock --bin allocs   # and the peer's
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use distlock::LockClient;
use distlock_testkit::RedisServer;

/// The system's allocator, counting allocations (`alloc`, `alloc_zeroed`,
/// `realloc`) and the bytes they asked for.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

fn count(size: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every call goes to `System` with the caller's own arguments, which meet
// `GlobalAlloc`'s contract as the caller's do; counting touches no memory of theirs.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for the impl.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as for the impl.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for the impl.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: as for the impl.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `tasks` tasks, each `pairs` lock+unlock pairs on names of its own, `round` apart
/// from every other round's.
async fn pairs(
    client: &LockClient,
    round: &str,
    tasks: usize,
    pairs: usize,
) -> Result<(), BoxError> {
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let client = client.clone();
        let round = round.to_owned();
        set.spawn(async move {
            for pair in 0..pairs {
                let guard = client.lock(format!("allocs:{round}:{task}:{pair}")).await?;
                guard.unlock().await?;
            }
            Ok::<(), distlock::LockError>(())
        });
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    Ok(())
}

/// As [`pairs`], with the peer (`rslock`, at its defaults), for comparison.
#[cfg(feature = "rslock")]
async fn peer_pairs(url: &str, round: &str, tasks: usize, pairs: usize) -> Result<(), BoxError> {
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let manager = manager.clone();
        let round = round.to_owned();
        set.spawn(async move {
            for pair in 0..pairs {
                let name = format!("allocs:{round}:{task}:{pair}");
                let lock = manager
                    .lock(name.as_bytes(), std::time::Duration::from_secs(30))
                    .await
                    .map_err(|err| format!("rslock: {err}"))?;
                manager.unlock(&lock).await;
            }
            Ok::<(), BoxError>(())
        });
    }
    while let Some(done) = set.join_next().await {
        done??;
    }
    Ok(())
}

/// Allocations and bytes asked for so far.
fn counted() -> (u64, u64) {
    (
        ALLOCATIONS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    )
}

/// Prints what happened since `before`, per pair of `n`.
fn report(who: &str, tasks: usize, n: usize, before: (u64, u64)) {
    let (allocations, bytes) = counted();
    println!(
        "{who}: {tasks} task(s), {n} pairs: {:.1} allocations and {:.0} bytes per pair",
        (allocations - before.0) as f64 / n as f64,
        (bytes - before.1) as f64 / n as f64
    );
}

fn main() -> Result<(), BoxError> {
    let per_task: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 2_000,
    };
    let server = RedisServer::start()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = LockClient::builder().url(server.url()).connect().await?;
        for tasks in [1, 64] {
            let each = if tasks == 1 {
                per_task * 4
            } else {
                per_task / 16
            }
            .max(1);
            pairs(&client, &format!("warm{tasks}"), tasks, each).await?;
            let before = counted();
            pairs(&client, &format!("count{tasks}"), tasks, each).await?;
            report("distlock", tasks, tasks * each, before);
            #[cfg(feature = "rslock")]
            {
                let url = server.url();
                peer_pairs(&url, &format!("peer-warm{tasks}"), tasks, each).await?;
                let before = counted();
                peer_pairs(&url, &format!("peer-count{tasks}"), tasks, each).await?;
                report("rslock", tasks, tasks * each, before);
            }
        }
        Ok::<(), BoxError>(())
    })
}
