//! Fair locks (issue 14): granted in the order of arrival across processes and
//! clients, a live waiter keeps its place however long it waits, a dead one stops
//! holding the others back within the documented bound (4 s), a waiter that gives up
//! leaves the queue at once, and a release wakes the next waiter only. Real servers
//! and child processes through the testkit.

mod support;

use std::future::IntoFuture;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::{LockClient, LockError, LockKind};
use distlock_testkit::{ChildProcess, History, RedisServer};
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

/// How long a dead waiter holds the others back at most (`lua/lock.lua`:
/// WAITER_MS after its last look, plus WAITER_LOOK_MS for the next one to look).
const DEAD_WAITER_BOUND: Duration = Duration::from_millis(4_000);

/// How often a waiter looks at most (`lua/lock.lua`: WAITER_LOOK_MS).
const HEARTBEAT: Duration = Duration::from_secs(1);

/// The waiters that keep a place in the queue of `name`.
async fn queue_length(locks: &LockClient, name: &str) -> u64 {
    locks.inspect(name).await.expect("inspect").waiting
}

/// Waits until the queue of `name` has `length` waiters.
async fn queue_reaches(locks: &LockClient, name: &str, length: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while queue_length(locks, name).await != length {
        assert!(
            Instant::now() < deadline,
            "the queue of {name} never had {length} waiters"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The roles a child process plays: `fair_child` waits for `ASK <n>` lines on its
/// standard input and starts one waiter for each, which, once it has the lock,
/// appends `n` to the list `fair:grants` on the server (the order of grants, as
/// the server saw them), holds the lock 10 ms and releases it. `END` ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper process, started by the other tests of this file"]
async fn fair_child() {
    if !support::is_child() {
        return;
    }
    let env = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} is set"));
    let (url, name) = (env("DISTLOCK_URL"), env("DISTLOCK_NAME"));
    let locks = LockClient::builder()
        .url(&url)
        .connect()
        .await
        .expect("connect");
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    println!("READY");
    let mut waiters = Vec::new();
    while let Some(line) = lines.recv().await {
        let Some(n) = line.strip_prefix("ASK ") else {
            break;
        };
        let (locks, name, url, n) = (locks.clone(), name.clone(), url.clone(), n.to_owned());
        waiters.push(tokio::spawn(async move {
            let mut conn = support::conn(&url).await;
            let guard = locks
                .fair_lock(&name)
                .wait(Duration::from_secs(60))
                .await
                .expect("the fair lock");
            let _: i64 = redis::cmd("RPUSH")
                .arg("fair:grants")
                .arg(&n)
                .query_async(&mut conn)
                .await
                .expect("RPUSH");
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.unlock().await.expect("unlock");
        }));
    }
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    println!("DONE");
}

/// Starts a child that waits for `ASK` lines.
fn start_child(server: &RedisServer, name: &str) -> ChildProcess {
    let mut child = support::spawn_child_with_stdin(
        "fair_child",
        &[
            ("DISTLOCK_URL", server.url()),
            ("DISTLOCK_NAME", name.into()),
        ],
    );
    support::read_until(
        &mut child,
        "READY",
        &History::new(),
        Duration::from_secs(30),
    );
    child
}

/// Writes a command line to a child.
fn tell(child: &mut ChildProcess, line: &str) {
    let stdin = child.stdin().expect("piped stdin");
    writeln!(stdin, "{line}").expect("write to the child");
    stdin.flush().expect("flush");
}

/// The order of grants the children recorded on the server.
fn grants(server: &RedisServer) -> Vec<u64> {
    let text = server
        .cmd(&["LRANGE", "fair:grants", "0", "-1"])
        .expect("LRANGE");
    text.lines().filter_map(|line| line.parse().ok()).collect()
}

/// Nine waiters in three processes, three each, arrive one after the other in a
/// known order (each only once the one before holds its place in the queue, the
/// processes taking turns) while the lock is held: they are granted in exactly that
/// order. (A process that let only its first waiter ask Redis would serve its
/// second waiter after the first waiters of the others.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_three_processes_are_served_in_the_order_they_arrived() {
    let server = support::server();
    let locks = support::client(&server).await;
    let name = "fair:fifo";
    let mut children: Vec<ChildProcess> = (0..3).map(|_| start_child(&server, name)).collect();
    let holder = locks.fair_lock(name).await.expect("lock");
    for n in 1..=9u64 {
        tell(&mut children[(n as usize - 1) % 3], &format!("ASK {n}"));
        queue_reaches(&locks, name, n).await;
    }
    holder.unlock().await.expect("unlock");
    for child in &mut children {
        tell(child, "END");
    }
    for child in &mut children {
        support::read_until(child, "DONE", &History::new(), Duration::from_secs(60));
    }
    assert_eq!(
        grants(&server),
        (1..=9).collect::<Vec<_>>(),
        "served out of arrival order"
    );
    assert_eq!(queue_length(&locks, name).await, 0);
}

/// A queued waiter whose process is killed holds the next waiter back by at most
/// the documented bound, once the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_holds_the_next_one_back_at_most_the_bound() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let name = "fair:killed";
    let mut child = start_child(&server, name);
    let holder = locks.fair_lock(name).await.expect("lock");
    tell(&mut child, "ASK 1");
    queue_reaches(&locks, name, 1).await;
    let next = tokio::spawn({
        let other = other.clone();
        async move {
            let guard = other
                .fair_lock(name)
                .wait(Duration::from_secs(30))
                .await
                .expect("the next waiter");
            let got = Instant::now();
            guard.unlock().await.expect("unlock");
            got
        }
    });
    queue_reaches(&locks, name, 2).await;
    child.kill().expect("SIGKILL");
    let freed = Instant::now();
    holder.unlock().await.expect("unlock");
    let got = next.await.expect("next");
    let delay = got - freed;
    println!("the killed waiter held the next one back {delay:?}");
    assert!(
        delay <= DEAD_WAITER_BOUND + Duration::from_millis(300),
        "held back {delay:?}, over the bound of {DEAD_WAITER_BOUND:?}"
    );
    assert!(grants(&server).is_empty(), "the killed waiter got the lock");
}

/// A waiter that waits ten times its look period keeps its place: a waiter that
/// came after it, and the holder's next acquisition, do not pass it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_waits_ten_looks_keeps_its_place() {
    let server = support::server();
    let locks = support::client(&server).await;
    let (first, second) = (
        support::client(&server).await,
        support::client(&server).await,
    );
    let name = "fair:patient";
    let holder = locks.fair_lock(name).await.expect("lock");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn_waiter = |locks: LockClient, label: &'static str| {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = locks
                .fair_lock(name)
                .wait(Duration::from_secs(60))
                .await
                .expect("a waiter");
            order.lock().expect("order").push(label);
            guard.unlock().await.expect("unlock");
        })
    };
    let a = spawn_waiter(first, "first");
    queue_reaches(&locks, name, 1).await;
    let b = spawn_waiter(second, "second");
    queue_reaches(&locks, name, 2).await;
    tokio::time::sleep(HEARTBEAT * 10 + Duration::from_millis(500)).await;
    assert_eq!(
        queue_length(&locks, name).await,
        2,
        "a waiter lost its place"
    );
    holder.unlock().await.expect("unlock");
    a.await.expect("first");
    b.await.expect("second");
    assert_eq!(*order.lock().expect("order"), ["first", "second"]);
}

/// A waiter whose wait runs out, and one whose request is dropped, leave the queue
/// at once: the queue shrinks right away, and the next waiter gets the freed lock
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    let (quitter, dropper, patient) = (
        support::client(&server).await,
        support::client(&server).await,
        support::client(&server).await,
    );
    let name = "fair:quit";
    let holder = locks.fair_lock(name).await.expect("lock");
    let quits = tokio::spawn(async move {
        quitter
            .fair_lock(name)
            .wait(Duration::from_millis(300))
            .await
    });
    queue_reaches(&locks, name, 1).await;
    let dropped = tokio::spawn(async move {
        let request = dropper
            .fair_lock(name)
            .wait(Duration::from_secs(30))
            .into_future();
        tokio::time::timeout(Duration::from_millis(300), request).await
    });
    queue_reaches(&locks, name, 2).await;
    let next = tokio::spawn(async move {
        let guard = patient
            .fair_lock(name)
            .wait(Duration::from_secs(30))
            .await
            .expect("the patient waiter");
        let got = Instant::now();
        guard.unlock().await.expect("unlock");
        got
    });
    queue_reaches(&locks, name, 3).await;
    let quit = quits.await.expect("quitter");
    assert!(matches!(quit, Err(LockError::Timeout { .. })), "{quit:?}");
    assert!(
        dropped.await.expect("dropper").is_err(),
        "the dropped request finished"
    );
    let start = Instant::now();
    queue_reaches(&locks, name, 1).await;
    assert!(
        start.elapsed() < Duration::from_millis(300),
        "the places were kept"
    );
    let freed = Instant::now();
    holder.unlock().await.expect("unlock");
    let got = next.await.expect("patient");
    assert!(
        got - freed < Duration::from_millis(300),
        "the next waiter waited {:?} for a free lock",
        got - freed
    );
}

/// A release wakes the next waiter only: with eight waiters on four clients, the
/// release and the next waiter's attempt are (about) all the scripts that run
/// between the release and the next grant, not one attempt per waiter (nine), nor
/// one per client (five).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_next_waiter_only() {
    let server = support::server();
    let locks = support::client(&server).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(support::client(&server).await);
    }
    let name = "fair:one";
    let holder = locks.fair_lock(name).await.expect("lock");
    let granted = Arc::new(AtomicUsize::new(0));
    let (go_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut waiters = Vec::new();
    for n in 0..8 {
        let waiter = clients[n % 4].clone();
        let granted = granted.clone();
        let mut go = go_tx.subscribe();
        waiters.push(tokio::spawn(async move {
            let guard = waiter
                .fair_lock(name)
                .wait(Duration::from_secs(60))
                .await
                .expect("a waiter");
            granted.fetch_add(1, Ordering::SeqCst);
            // Hold it until told, so that only one hand-over is counted.
            let _ = go.recv().await;
            guard.unlock().await.expect("unlock");
        }));
        queue_reaches(&locks, name, n as u64 + 1).await;
    }
    let before = support::script_calls(&server);
    holder.unlock().await.expect("unlock");
    while granted.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let scripts = support::script_calls(&server) - before;
    println!("{scripts} scripts ran between the release and the next grant");
    // The release and the next waiter's attempt; a waiter's look that falls in the
    // window (each looks once a second) may add one. Waking every waiter would run
    // nine, waking one per client five.
    assert!(
        scripts <= 3,
        "{scripts} scripts for one hand-over among eight waiters"
    );
    let _ = go_tx.send(());
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _ = go_tx.send(());
    }
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
}

/// `try_fair_lock` does not pass waiters: a free lock with a queue is busy to it.
/// Fencing tokens grow; a plain lock at the name is a kind conflict (also a key
/// conflict).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_does_not_pass_the_queue_and_kinds_do_not_mix() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let name = "fair:try";
    let first = locks.fair_lock(name).fencing(true).await.expect("lock");
    let first_token = first.fencing_token().expect("a token");
    assert!(other.try_fair_lock(name).await.expect("try").is_none());
    assert_eq!(queue_length(&locks, name).await, 0, "a try kept a place");
    let conflict = other.lock(name).await;
    assert!(
        matches!(
            &conflict,
            Err(err @ LockError::KindConflict { name: held, held_as: "a fair lock", asked: "a lock", .. })
                if held == name && err.is_key_conflict()
        ),
        "{conflict:?}"
    );
    let info = other.inspect(name).await.expect("inspect");
    assert_eq!(info.kind, Some(LockKind::Fair));
    first.unlock().await.expect("unlock");
    let second = other.fair_lock(name).fencing(true).await.expect("lock");
    assert!(second.fencing_token() > Some(first_token), "tokens grow");
    second.unlock().await.expect("unlock");
}

/// Requests dropped at random points and guards dropped or unlocked at random, by
/// four tasks on two clients: never two holders, and afterwards no holder and no
/// place is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_random_points_leaves_no_holder_and_no_place() {
    let server = support::server();
    let clients = support::clients::<2>(&server).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let name = "fair:chaos";
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..4 {
        let (locks, inside, overlaps) =
            (clients[task % 2].clone(), inside.clone(), overlaps.clone());
        tasks.spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(task as u64);
            for _ in 0..50 {
                let cut = Duration::from_micros(rng.random_range(0..4_000));
                let request = locks.fair_lock(name).into_future();
                let Ok(Ok(guard)) = tokio::time::timeout(cut, request).await else {
                    continue;
                };
                if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..800))).await;
                inside.fetch_sub(1, Ordering::SeqCst);
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
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
    let locks = &clients[0];
    let deadline = Instant::now() + Duration::from_millis(1_500);
    loop {
        let info = locks.inspect(name).await.expect("inspect");
        if !info.held && info.waiting == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {info:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
