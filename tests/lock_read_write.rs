//! Read-write locks (issue 14): many readers or one writer, each reentrant by call
//! chain; a waiting writer keeps new readers out; a read hold asking for the write
//! lock is refused at once; a write hold may take a read hold (downgrade). Real
//! servers through the testkit; holds are read from Redis.

mod support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::layout::StoredLock;
use distlock::{HoldMode, LockClient, LockError, LockKind};
use distlock_testkit::{Direction, RedisServer};
use rand::Rng;
use redis::AsyncCommands;
use tokio::time::Instant;

/// The read-write lock `name` as Redis stores it.
fn hash(server: &RedisServer, name: &str) -> StoredLock {
    support::stored(server, name)
}

/// The hold counts in Redis of the live holders of `name`, by mode (`r 2`: a
/// reader held twice, `w 1`: the writer, named by `#writer`), sorted; places kept
/// by waiting writers are left out, and a final release leaves nothing in the hash.
fn holds(server: &RedisServer, name: &str) -> Vec<String> {
    let lock = hash(server, name);
    let mut holds: Vec<String> = lock
        .holders()
        .iter()
        .map(|(owner, count)| {
            let mode = if lock.writer() == Some(owner.as_str()) {
                "w"
            } else {
                "r"
            };
            format!("{mode} {count}")
        })
        .collect();
    holds.sort();
    holds
}

/// How many writers keep their place at `name`.
fn places_kept(server: &RedisServer, name: &str) -> usize {
    hash(server, name).waiters().count()
}

/// What is inside the critical sections now, across every task of the test.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    /// A writer beside anyone, or a reader beside a writer.
    violations: AtomicUsize,
}

impl Inside {
    fn enter_read(&self) {
        let readers = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(readers, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) > 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_read(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    fn enter_write(&self) {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst);
        if writers > 0 || self.readers.load(Ordering::SeqCst) > 0 {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave_write(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Two clients, each with 6 readers and 2 writers in a loop: readers are seen
/// together (their sections overlap), a writer never beside anyone, and a counter
/// that writers increment with a read and a write apart loses no update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_the_lock_and_a_writer_excludes_everyone() {
    const ROUNDS: u64 = 25;
    let server = support::server();
    let clients = support::clients::<2>(&server).await;
    let inside = Arc::new(Inside::default());
    let mut tasks = tokio::task::JoinSet::new();
    for locks in &clients {
        for task in 0..8 {
            let (locks, inside, url) = (locks.clone(), inside.clone(), server.url());
            tasks.spawn(async move {
                let mut conn = support::conn(&url).await;
                for _ in 0..ROUNDS {
                    if task < 6 {
                        let guard = locks.read_lock("rw:catalogue").await.expect("read");
                        inside.enter_read();
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        inside.leave_read();
                        guard.unlock().await.expect("read unlock");
                    } else {
                        let guard = locks.write_lock("rw:catalogue").await.expect("write");
                        inside.enter_write();
                        let n: u64 = conn.get("rw:counter").await.unwrap_or(0);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        let () = conn.set("rw:counter", n + 1).await.expect("SET");
                        inside.leave_write();
                        guard.unlock().await.expect("write unlock");
                    }
                }
            });
        }
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task");
    }
    let mut conn = support::conn(&server.url()).await;
    let counter: u64 = conn.get("rw:counter").await.expect("GET");
    let most = inside.most_readers.load(Ordering::SeqCst);
    println!("at most {most} readers at once");
    assert_eq!(
        inside.violations.load(Ordering::SeqCst),
        0,
        "a writer beside someone"
    );
    assert_eq!(counter, 2 * 2 * ROUNDS, "lost updates");
    assert!(most >= 2, "readers never overlapped ({most} at most)");
    assert!(holds(&server, "rw:catalogue").is_empty(), "a hold left");
}

/// Eight readers on two clients read in a loop, each hold overlapping the next,
/// so the lock is never free of readers; a writer of a third client that asks
/// still gets it soon: its kept place stops new readers, and the last reader out
/// tells it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_in_a_loop_do_not_starve_a_waiting_writer() {
    let server = support::server();
    let readers = support::clients::<2>(&server).await;
    let writer = support::client(&server).await;
    let stop = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for locks in &readers {
        for _ in 0..4 {
            let (locks, stop, reads) = (locks.clone(), stop.clone(), reads.clone());
            tasks.spawn(async move {
                while stop.load(Ordering::SeqCst) == 0 {
                    let guard = locks.read_lock("rw:hot").await.expect("read");
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    guard.unlock().await.expect("unlock");
                }
            });
        }
    }
    // The readers are in full swing: the lock has been held by readers all along.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        reads.load(Ordering::SeqCst) > 20,
        "the readers did not get going"
    );
    let start = Instant::now();
    let guard = writer
        .write_lock("rw:hot")
        .wait(Duration::from_secs(10))
        .await
        .expect("the writer got the lock");
    let waited = start.elapsed();
    assert!(
        holds(&server, "rw:hot") == ["w 1"],
        "the writer alone: {:?}",
        holds(&server, "rw:hot")
    );
    guard.unlock().await.expect("unlock");
    stop.store(1, Ordering::SeqCst);
    while let Some(joined) = tasks.join_next().await {
        joined.expect("reader");
    }
    println!("the writer waited {waited:?}");
    assert!(
        waited < Duration::from_millis(1_000),
        "the writer waited {waited:?} behind readers"
    );
}

/// A chain holding a read lock that asks for the write lock would wait for itself:
/// refused at once, with a message that says what to do, and nothing changes in
/// Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_hold_asking_for_the_write_lock_is_refused_at_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    let reading = locks.read_lock("rw:upgrade").await.expect("read");
    let before = hash(&server, "rw:upgrade");
    let start = Instant::now();
    let asked = reading
        .scope(async {
            locks
                .write_lock("rw:upgrade")
                .wait(Duration::from_secs(5))
                .await
        })
        .await;
    let err = asked.expect_err("an upgrade");
    assert!(
        matches!(&err, LockError::UpgradeNotAllowed { name, .. } if name == "rw:upgrade"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("take the write lock first"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_millis(200), "it waited");
    assert_eq!(hash(&server, "rw:upgrade"), before, "Redis changed");
    reading.unlock().await.expect("unlock");
}

/// A chain holding the write lock takes a read hold beside it at once (a
/// downgrade); once the write hold goes, other readers come in beside it, and
/// writers still wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_hold_takes_a_read_hold_and_keeps_reading_after_it_goes() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let writing = locks.write_lock("rw:down").await.expect("write");
    let start = Instant::now();
    let reading = writing
        .scope(async { locks.read_lock("rw:down").await })
        .await
        .expect("a read hold beside the write hold");
    assert!(
        start.elapsed() < Duration::from_millis(200),
        "the downgrade waited"
    );
    assert_eq!(holds(&server, "rw:down"), ["r 1", "w 1"]);
    assert!(
        other.try_read_lock("rw:down").await.expect("try").is_none(),
        "a reader came in beside a writer"
    );
    writing.unlock().await.expect("write unlock");
    let beside = other
        .try_read_lock("rw:down")
        .await
        .expect("try")
        .expect("a reader beside the downgraded one");
    assert!(
        other
            .try_write_lock("rw:down")
            .await
            .expect("try")
            .is_none(),
        "a writer beside readers"
    );
    let info = locks.inspect("rw:down").await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::ReadWrite));
    assert_eq!(
        info.holders.iter().map(|h| h.mode).collect::<Vec<_>>(),
        [HoldMode::Read, HoldMode::Read]
    );
    beside.unlock().await.expect("unlock");
    reading.unlock().await.expect("unlock");
    assert!(holds(&server, "rw:down").is_empty());
}

/// Re-entries of either hold count in Redis, and count back down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn re_entries_of_read_and_write_holds_count_in_redis() {
    let server = support::server();
    let locks = support::client(&server).await;
    for (kind, letter) in [("read", "r"), ("write", "w")] {
        let request = |locks: &LockClient| match kind {
            "read" => locks.read_lock("rw:again"),
            _ => locks.write_lock("rw:again"),
        };
        let outer = request(&locks).await.expect("outer");
        let inner = outer
            .scope(async { request(&locks).await })
            .await
            .expect("re-entry");
        assert_eq!(inner.hold_count(), 2);
        assert_eq!(holds(&server, "rw:again"), [format!("{letter} 2")]);
        inner.unlock().await.expect("inner");
        assert_eq!(holds(&server, "rw:again"), [format!("{letter} 1")]);
        outer.unlock().await.expect("outer");
        assert!(holds(&server, "rw:again").is_empty());
    }
}

/// A read-write lock is a kind of its own: at a plain lock's name, and a plain lock
/// or a semaphore at a read-write lock's name, the request is a kind conflict
/// (also a key conflict) naming both kinds, and Redis is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_of_another_kind_is_a_conflict_and_nothing_is_written() {
    let server = support::server();
    let locks = support::client(&server).await;
    let plain = locks.lock("kind:plain").await.expect("lock");
    let before = hash(&server, "kind:plain");
    for (result, wanted) in [
        (locks.read_lock("kind:plain").await, "a read lock"),
        (locks.write_lock("kind:plain").await, "a write lock"),
        (
            locks.semaphore("kind:plain", 2).acquire().await,
            "a semaphore",
        ),
    ] {
        let err = result.expect_err("a conflict");
        assert!(err.is_key_conflict(), "{err:?}");
        assert!(
            matches!(
                &err,
                LockError::KindConflict { name, held_as: "a lock", asked, .. }
                    if name == "kind:plain" && *asked == wanted
            ),
            "{err:?}"
        );
    }
    assert_eq!(hash(&server, "kind:plain"), before, "Redis changed");
    plain.unlock().await.expect("unlock");

    let reading = locks.read_lock("kind:rw").await.expect("read");
    let before = hash(&server, "kind:rw");
    for (result, wanted) in [
        (locks.lock("kind:rw").await, "a lock"),
        (locks.semaphore("kind:rw", 2).acquire().await, "a semaphore"),
    ] {
        let err = result.expect_err("a conflict");
        assert!(err.is_key_conflict(), "{err:?}");
        assert!(
            matches!(
                &err,
                LockError::KindConflict { name, held_as: "a read-write lock", asked, .. }
                    if name == "kind:rw" && *asked == wanted
            ),
            "{err:?}"
        );
    }
    let all = locks.lock_all(["kind:rw", "kind:other"]).await;
    assert!(
        matches!(
            &all,
            Err(LockError::KindConflict { name, held_as: "a read-write lock", .. })
                if name == "kind:rw"
        ),
        "{all:?}"
    );
    assert_eq!(hash(&server, "kind:rw"), before, "Redis changed");
    assert!(!support::exists(&server, &support::lock_key("kind:other")));
    reading.unlock().await.expect("unlock");
}

/// Write holds get fencing tokens, in order; asking for one on a read hold is
/// refused before anything is sent, and a client that fences by default gives read
/// holds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_go_to_write_holds_only() {
    let server = support::server();
    let locks = support::client(&server).await;
    let mut last = 0;
    for _ in 1..=2 {
        let writing = locks
            .write_lock("rw:fenced")
            .fencing(true)
            .await
            .expect("write");
        let token = writing.fencing_token().expect("a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        writing.unlock().await.expect("unlock");
    }
    let calls = support::script_calls(&server);
    let refused = locks.read_lock("rw:fenced").fencing(true).await;
    assert!(
        matches!(
            &refused,
            Err(LockError::InvalidOption {
                option: "fencing",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(support::script_calls(&server), calls, "something was sent");
    let fenced = support::fenced_client(&server).await;
    let reading = fenced.read_lock("rw:fenced").await.expect("read");
    assert_eq!(reading.fencing_token(), None);
    reading.unlock().await.expect("unlock");
    let writing = fenced.write_lock("rw:fenced").await.expect("write");
    let token = writing.fencing_token().expect("a token");
    assert!(token > last, "token {token} after {last}");
    writing.unlock().await.expect("unlock");
}

/// A reader cut off from Redis (what a killed process looks like to Redis: no
/// renewal, no release) holds the lock until its lease ends, not longer: then a
/// writer gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_goes_away_frees_the_lock_when_its_lease_ends() {
    const LEASE: Duration = Duration::from_millis(1_500);
    let server = support::server();
    let proxy = support::proxy(&server);
    let gone = LockClient::builder()
        .url(proxy.url())
        .default_lease(LEASE)
        .connect()
        .await
        .expect("connect");
    let writer = support::client(&server).await;
    let reading = gone.read_lock("rw:gone").await.expect("read");
    let taken = Instant::now();
    proxy.blackhole(Direction::ToServer, true);
    proxy.blackhole(Direction::ToClient, true);
    let writing = writer
        .write_lock("rw:gone")
        .wait(Duration::from_secs(10))
        .await
        .expect("the writer got the lock");
    let after = taken.elapsed();
    println!("the writer got the lock {after:?} after the reader took it");
    assert!(
        after >= LEASE - Duration::from_millis(100),
        "the reader's lease ended early: {after:?}"
    );
    assert!(
        after < LEASE + Duration::from_millis(1_200),
        "the writer waited past the lease: {after:?}"
    );
    writing.unlock().await.expect("unlock");
    std::mem::forget(reading);
}

/// A writer that gives up its wait takes its place back at once: readers come in
/// right after, not when the place would have died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_takes_its_place_back() {
    let server = support::server();
    let [locks, writer] = support::clients(&server).await;
    let reading = locks.read_lock("rw:gave-up").await.expect("read");
    let waited = writer
        .write_lock("rw:gave-up")
        .wait(Duration::from_millis(200))
        .await;
    assert!(
        matches!(waited, Err(LockError::Timeout { .. })),
        "{waited:?}"
    );
    assert!(
        support::eventually(Duration::from_millis(300), || places_kept(
            &server,
            "rw:gave-up"
        ) == 0)
        .await,
        "the writer's place is still kept"
    );
    let start = Instant::now();
    let second = writer
        .read_lock("rw:gave-up")
        .await
        .expect("a reader after the writer left");
    assert!(
        start.elapsed() < Duration::from_millis(100),
        "the reader waited"
    );
    second.unlock().await.expect("unlock");
    // `try_write_lock` never keeps a place.
    assert!(writer
        .try_write_lock("rw:gave-up")
        .await
        .expect("try")
        .is_none());
    assert_eq!(places_kept(&server, "rw:gave-up"), 0);
    reading.unlock().await.expect("unlock");
}

/// Four tasks take read and write holds of one name at random, drop their
/// requests at random points (a timeout around each) and drop or unlock their
/// guards at random: no writer is ever beside anyone, and once they stop, no hold
/// and no kept place is left (places are taken back at once, not when they die).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_requests_and_guards_at_random_leaves_nothing_behind() {
    let server = support::server();
    let clients = support::clients::<2>(&server).await;
    let inside = Arc::new(Inside::default());
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..4 {
        let (locks, inside) = (clients[task % 2].clone(), inside.clone());
        tasks.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(task as u64);
            for _ in 0..60 {
                let write = rng.random_bool(0.3);
                let request = if write {
                    locks.write_lock("rw:chaos")
                } else {
                    locks.read_lock("rw:chaos")
                };
                let cut = Duration::from_micros(rng.random_range(0..4_000));
                let Ok(Ok(guard)) = tokio::time::timeout(cut, request.into_future()).await else {
                    continue;
                };
                if write {
                    inside.enter_write();
                } else {
                    inside.enter_read();
                }
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..1_000))).await;
                if write {
                    inside.leave_write();
                } else {
                    inside.leave_read();
                }
                if rng.random_bool(0.5) {
                    drop(guard);
                } else {
                    let _ = guard.unlock().await;
                }
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.expect("task");
    }
    assert_eq!(
        inside.violations.load(Ordering::SeqCst),
        0,
        "a writer beside someone"
    );
    let clean = support::eventually(Duration::from_millis(1_500), || {
        holds(&server, "rw:chaos").is_empty() && places_kept(&server, "rw:chaos") == 0
    })
    .await;
    assert!(clean, "left behind: {:?}", hash(&server, "rw:chaos"));
}

use rand::SeedableRng;
use std::future::IntoFuture;

/// Every read hold is a new owner; a reader that leaves must not leave its record
/// in the lock's hash, which every script reads whole: after 200 read pairs in a
/// row the hash holds no more than when one reader held it (observed: one field per
/// pair, for the record's 2 s, so each pair read a longer hash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_that_leave_leave_nothing_in_the_lock_s_hash() {
    let server = support::server();
    let locks = support::client(&server).await;
    let holder = locks.read_lock("rw:many").await.expect("read");
    let one = server
        .cmd(&["HLEN", &support::lock_key("rw:many")])
        .expect("HLEN");
    for _ in 0..200 {
        let guard = locks.read_lock("rw:many").await.expect("read");
        guard.unlock().await.expect("unlock");
    }
    let after = server
        .cmd(&["HLEN", &support::lock_key("rw:many")])
        .expect("HLEN");
    assert_eq!(after, one, "fields left by readers that left");
    holder.unlock().await.expect("unlock");
}
