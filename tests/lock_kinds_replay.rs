//! Every lock kind under lost replies and cancellation (issue 14: each new script
//! uses the exact replay protocol). Tasks of two clients behind a proxy whose
//! replies are now and then late (past the response timeout, so that releases are
//! retried and lost acquires replayed) take read and write holds, permits or fair
//! locks; inside their sections they re-enter twice at once (`join!`, two
//! operations of one owner overlapping) and give the re-entries back before the
//! work, drop lock futures at random points, and unlock or drop guards at random.
//! After every section: the kind's rule held (no writer beside anyone, no more
//! holders than permits, one fair holder), an exclusive hold whose re-entries were
//! both unlocked is held once, and the counter that exclusive sections increment
//! (read, yield, write) lost no update.
//! At the end: no hold and no kept place is left in Redis.

mod support;

use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockRequest};
use distlock_testkit::{monotonic_ns, History, RedisServer, Section};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// What one test runs.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Read holds and (one in three) write holds.
    ReadWrite,
    /// Permits of a semaphore of two.
    Semaphore,
    Fair,
}

const NAME: &str = "kinds:replay";
const PERMITS: u32 = 2;

/// A request of `kind`: for a read-write lock, a write hold when `write`.
fn request(locks: &LockClient, kind: Kind, write: bool) -> LockRequest {
    match kind {
        Kind::ReadWrite if write => locks.write_lock(NAME),
        Kind::ReadWrite => locks.read_lock(NAME),
        Kind::Semaphore => locks.semaphore(NAME, PERMITS).acquire(),
        Kind::Fair => locks.fair_lock(NAME),
    }
}

/// The holders and kept places in the hash of `NAME` (records of final releases,
/// which expire, are kept apart from it, at `:freed:<owner>`).
fn left_in_redis(server: &RedisServer) -> Vec<String> {
    let lock = support::stored(server, NAME);
    let holders = lock
        .holders()
        .iter()
        .map(|(owner, count)| format!("{owner} = {count}"));
    let places = lock.waiters().map(|owner| format!("{owner} waits"));
    holders.chain(places).collect()
}

/// Who is inside now, and what broke the kind's rule.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    exclusive: AtomicUsize,
    broken: AtomicUsize,
}

async fn adversarial(kind: Kind) {
    let server = support::server();
    let proxy = Arc::new(support::proxy(&server));
    let clients = [
        support::client_with_timeout(&proxy.url(), Duration::from_millis(250)).await,
        support::client_with_timeout(&proxy.url(), Duration::from_millis(250)).await,
    ];
    let workload = support::Workload::connect(&server.url(), NAME).await;
    let inside = Arc::new(Inside::default());
    // The exclusive sections (writers, fair holders), for the history checker.
    let history = Arc::new(History::new());
    let exclusive_sections = Arc::new(AtomicU64::new(0));
    let sections = Arc::new(AtomicU64::new(0));
    let seed: u64 = rand::rng().random();
    println!("{kind:?}: seed {seed}");
    let stop = Instant::now() + Duration::from_secs(6);
    let link = support::late_replies(proxy.clone(), seed, stop);
    let mut tasks = Vec::new();
    for task in 0..4u64 {
        let locks = clients[task as usize % 2].clone();
        let (workload, inside) = (workload.clone(), inside.clone());
        let (sections, exclusive_sections) = (sections.clone(), exclusive_sections.clone());
        let history = history.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed ^ (task + 1));
            while Instant::now() < stop {
                let write = rng.random_ratio(1, 3);
                let patience = Duration::from_millis(rng.random_range(1..=1500));
                let asked = request(&locks, kind, write).wait(Duration::from_secs(5));
                let guard = match tokio::time::timeout(patience, asked.into_future()).await {
                    Ok(Ok(guard)) => guard,
                    // Dropped at a random point, or a wait that gave up: no hold.
                    Ok(Err(_)) | Err(_) => continue,
                };
                if guard.is_lost() {
                    continue;
                }
                // Two re-entries at once, in the guard's scope: two operations of
                // one owner in flight together.
                let (a, b) = guard
                    .scope(async {
                        tokio::join!(
                            request(&locks, kind, write).into_future(),
                            request(&locks, kind, write).into_future()
                        )
                    })
                    .await;
                // The re-entries go first (unlocked or dropped at random), then
                // the work, under the outer hold: a re-entry's release applied twice
                // would have freed the lock for someone else by then.
                let mut unlocked = 0;
                let mut dropped = false;
                for inner in [a, b].into_iter().flatten() {
                    if rng.random_bool(0.5) {
                        unlocked += u32::from(inner.unlock().await.is_ok());
                    } else {
                        drop(inner);
                        dropped = true;
                    }
                }
                let exclusive = match kind {
                    Kind::ReadWrite => write,
                    Kind::Semaphore => false,
                    Kind::Fair => true,
                };
                if exclusive {
                    let acquired_ns = monotonic_ns();
                    let others = inside.exclusive.fetch_add(1, Ordering::SeqCst);
                    if others > 0 || inside.readers.load(Ordering::SeqCst) > 0 {
                        inside.broken.fetch_add(1, Ordering::SeqCst);
                    }
                    workload.unfenced_increment().await;
                    exclusive_sections.fetch_add(1, Ordering::SeqCst);
                    inside.exclusive.fetch_sub(1, Ordering::SeqCst);
                    history.record(Section {
                        owner: format!("t{task}"),
                        token: None,
                        acquired_ns,
                        released_ns: monotonic_ns(),
                        deadline_ns: None,
                    });
                } else {
                    let readers = inside.readers.fetch_add(1, Ordering::SeqCst) + 1;
                    let too_many = match kind {
                        Kind::Semaphore => readers > PERMITS as usize,
                        _ => inside.exclusive.load(Ordering::SeqCst) > 0,
                    };
                    if too_many {
                        inside.broken.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(rng.random_range(0..=3))).await;
                    inside.readers.fetch_sub(1, Ordering::SeqCst);
                }
                sections.fetch_add(1, Ordering::SeqCst);
                if exclusive && unlocked == 2 && !dropped && !guard.is_lost() {
                    // Both re-entries were given back, each once: the outer hold
                    // alone is left (a reply lost on the way is no answer).
                    if let Ok(info) = locks.inspect(NAME).await {
                        if info.hold_count != 1 {
                            inside.broken.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                if rng.random_bool(0.5) {
                    let _ = guard.unlock().await;
                } else {
                    drop(guard);
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    link.await.expect("link");
    let (sections, exclusive_sections) = (
        sections.load(Ordering::SeqCst),
        exclusive_sections.load(Ordering::SeqCst),
    );
    let counter = workload.counter().await;
    println!("{kind:?}: seed {seed}: {sections} sections, {exclusive_sections} exclusive");
    assert!(
        sections > 20,
        "too few sections to say anything: {sections}"
    );
    assert_eq!(
        inside.broken.load(Ordering::SeqCst),
        0,
        "{kind:?}, seed {seed}: the kind's rule was broken"
    );
    assert_eq!(
        counter, exclusive_sections,
        "{kind:?}, seed {seed}: updates were lost"
    );
    let report = history.check();
    println!("{kind:?}: {report}");
    assert!(report.is_clean(), "{kind:?}, seed {seed}: {report}");
    let clean =
        support::eventually(Duration::from_secs(5), || left_in_redis(&server).is_empty()).await;
    assert!(
        clean,
        "{kind:?}, seed {seed}: left behind: {:?}",
        left_in_redis(&server)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_under_late_replies_and_cancellation() {
    adversarial(Kind::ReadWrite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_under_late_replies_and_cancellation() {
    adversarial(Kind::Semaphore).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_locks_under_late_replies_and_cancellation() {
    adversarial(Kind::Fair).await;
}
