//! The scripts at their edges: lock values that distlock did not write (a count, a
//! floor or a fencing token that is not an integer, a replay record that is not a
//! list of numbers), and a server out of memory.
//!
//! Its helpers live in this file, but for the servers, clients and connections,
//! the keys' dumps, and reading and writing a lock's hash (`support::stored`,
//! `support::write_hash`: the layout of `lua/lock.lua`).

mod support;

use std::collections::HashMap;
use std::time::Duration;

use distlock::layout::args::{Acquire, Args, Call, Inspect, Release, ReleaseRun, Renew};
use distlock::layout::args::{Successor, WriteBack};
use distlock::layout::{self, Kind};
use distlock::LockError;
use distlock_testkit::RedisServer;
use support::{channel_key, fence_key, freed_key, invoke, lock_key};

type Conn = redis::aio::MultiplexedConnection;

/// `DUMP` of every key on the server, by name, and whether it has an expiry: equal
/// dumps, nothing written.
async fn dump_all(conn: &mut Conn) -> HashMap<Vec<u8>, (Vec<u8>, bool)> {
    let mut dumps = HashMap::new();
    for (key, dump) in support::dumps(conn).await {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .expect("PTTL");
        dumps.insert(key, (dump, pttl >= 0));
    }
    dumps
}

/// The hold count of the one owner of lock `name`, as Redis stores it.
fn redis_count(server: &RedisServer, name: &str) -> u64 {
    let lock = support::stored(server, name);
    assert_eq!(lock.holders().len(), 1, "lock {name}: {lock:?}");
    lock.total()
}

/// Replaces the hold count of held lock `name` with `abc`, keeping its expiry.
fn spoil_count(server: &RedisServer, name: &str) {
    let lock = support::stored(server, name);
    let owner = lock.holders().keys().next().expect("lock is held");
    server
        .cmd(&["HSET", &lock_key(name), owner, "abc"])
        .expect("HSET");
}

/// One of the scripts of `lua/`, as the client sends it (`acquire.lua` under the
/// first line of a new lock; `reenter`: under the re-entry's, `allow-oom`), after
/// the files it needs.
fn script(name: &str) -> redis::Script {
    let (first_line, body) = match name {
        "acquire" => ("#!lua", include_str!("../lua/acquire.lua")),
        "reenter" => ("#!lua flags=allow-oom", include_str!("../lua/acquire.lua")),
        "release" => ("#!lua flags=allow-oom", include_str!("../lua/release.lua")),
        "renew" => ("#!lua flags=allow-oom", include_str!("../lua/renew.lua")),
        "inspect" => ("#!lua flags=no-writes", include_str!("../lua/inspect.lua")),
        other => panic!("no script {other}"),
    };
    // The layout, and how every script reads a lock.
    let prelude = include_str!("../lua/lock.lua");
    redis::Script::new(&format!("{first_line}\n{prelude}{body}"))
}

/// Runs `acquire.lua` for lock `name` (KEYS and ARGV as its header says).
async fn run_acquire(
    conn: &mut Conn,
    name: &str,
    owner: &str,
    attempt: u64,
    reentry: bool,
) -> redis::RedisResult<Vec<i64>> {
    run_acquire_fenced(conn, name, owner, attempt, reentry, false).await
}

/// Runs `acquire.lua` for plain lock `name`, one acquisition alone (no call chain's
/// writer, a `try`: plain locks keep no place, and nothing said of the holder),
/// asking for a fencing token when `fencing`.
async fn run_acquire_fenced(
    conn: &mut Conn,
    name: &str,
    owner: &str,
    attempt: u64,
    reentry: bool,
    fencing: bool,
) -> redis::RedisResult<Vec<i64>> {
    let lock = lock_key(name);
    let acquire = Acquire {
        fencing,
        reentry,
        ..Acquire::new(lock.as_bytes(), owner, 10_000, attempt, 0)
    };
    let script = script(if reentry { "reenter" } else { "acquire" });
    invoke(&script, &acquire.to_call())
        .invoke_async::<Vec<Vec<i64>>>(conn)
        .await
        .map(|replies| {
            let [reply] =
                <[Vec<i64>; 1]>::try_from(replies).expect("one answer for one acquisition");
            reply
        })
}

/// Runs `release.lua` for lock `name`, with no successor.
async fn run_release(
    conn: &mut Conn,
    name: &str,
    owner: &str,
    attempt: u64,
) -> redis::RedisResult<Vec<i64>> {
    run_release_call(conn, release_call(name, owner, attempt, None)).await
}

/// Runs `release.lua` for lock `name` with the successor `next` (operation 1 of
/// its owner, a lease of 5 s), given the next fencing token when `fencing`.
async fn run_release_to(
    conn: &mut Conn,
    name: &str,
    owner: &str,
    attempt: u64,
    (next, fencing): (&str, bool),
) -> redis::RedisResult<Vec<i64>> {
    let successor = Successor {
        owner: next,
        lease_ms: 5_000,
        seq: 1,
        floor: 0,
        fencing,
        who: "",
    };
    run_release_call(conn, release_call(name, owner, attempt, Some(successor))).await
}

/// One release of `owner` at lock `name` (lease 10 s, floor 0), its
/// operation `attempt`, alone in a run of `release.lua`.
fn release_call(name: &str, owner: &str, attempt: u64, successor: Option<Successor<'_>>) -> Call {
    let lock = lock_key(name);
    let mut call = ReleaseRun {
        publish: "PUBLISH",
        remember_ms: 2_000,
    }
    .to_call();
    Release {
        lock: lock.as_bytes(),
        owner,
        lease_ms: 10_000,
        seq: attempt,
        floor: 0,
        successor,
        record: true,
    }
    .push_to(&mut call);
    call
}

/// Runs `call` on `release.lua`: the answer of its one release.
///
/// # Cancel safety
///
/// A test helper: dropped, the call may or may not have run.
async fn run_release_call(conn: &mut Conn, call: Call) -> redis::RedisResult<Vec<i64>> {
    let replies: Vec<Vec<i64>> = invoke(&script("release"), &call).invoke_async(conn).await?;
    let [reply] = <[Vec<i64>; 1]>::try_from(replies).expect("one answer for one release");
    Ok(reply)
}

/// Runs `inspect.lua` for lock `name`: its reply's numbers.
///
/// # Cancel safety
///
/// A test helper: `inspect.lua` writes nothing.
async fn run_inspect(conn: &mut Conn, name: &str) -> redis::RedisResult<Vec<i64>> {
    let lock = lock_key(name);
    let inspect = Inspect {
        lock: lock.as_bytes(),
        numsub: "NUMSUB",
    };
    invoke(&script("inspect"), &inspect.to_call())
        .invoke_async(conn)
        .await
}

/// A connection subscribed to the release channel of lock `name`: a listener, as a
/// client with waiters for the lock has one.
async fn listener(server: &RedisServer, name: &str) -> redis::aio::PubSub {
    let client = redis::Client::open(server.url()).expect("a URL");
    let mut pubsub = client
        .get_async_pubsub()
        .await
        .expect("a pub/sub connection");
    pubsub
        .subscribe(channel_key(name))
        .await
        .expect("SUBSCRIBE");
    pubsub
}

/// The last hold of a release with a successor goes to the successor when one
/// client listens on the channel (the releasing one, whose waiter the successor
/// is): a new lease, the successor's replay record, the releaser's record kept for
/// its retry, which answers the same. With no listener or with two, the lock is
/// freed and published as without a successor; a release that is not the last
/// hands nothing over; a successor that cannot be parsed is none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_hands_the_lock_to_its_successor_only_when_one_client_listens() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    let name = "edge:successor";
    let lock = lock_key(name);
    // The lock held once by `owner`, with `record`, and fencing token `fence`.
    let held_by = |owner: &str, record: &str, fence: Option<u64>| {
        let stored = support::stored(&server, name);
        assert_eq!(stored.kind(), Some(Kind::Exclusive.word()), "{stored:?}");
        assert_eq!(stored.holders().len(), 1, "one holder: {stored:?}");
        assert_eq!(stored.count(owner), 1, "{owner} holds it once: {stored:?}");
        assert_eq!(stored.record(owner), Some(record), "{stored:?}");
        assert_eq!(stored.fencing_token(), fence, "{stored:?}");
    };
    // Freed by the final release of `owner`: no lock, and the record of that
    // release for its retry.
    let freed_by = |owner: &str| {
        assert!(!support::exists(&server, &lock), "the lock is still there");
        assert!(
            support::exists(&server, &freed_key(name, owner)),
            "no record of {owner}'s final release"
        );
    };

    write_lock(&server, name, "a", "2", "0 1");
    let first = listener(&server, name).await;
    assert_eq!(
        run_release_to(&mut conn, name, "a", 2, ("b", false)).await,
        Ok(vec![1, 1]),
        "not the last hold"
    );
    assert_eq!(
        run_release_to(&mut conn, name, "a", 3, ("b", false)).await,
        Ok(vec![2, 0]),
        "handed over"
    );
    held_by("b", "0 1", None);
    let pttl: i64 = server
        .cmd(&["PTTL", &lock])
        .expect("PTTL")
        .parse()
        .expect("a number");
    assert!(
        (4_000..=5_000).contains(&pttl),
        "the successor's lease: {pttl}"
    );
    assert_eq!(
        server.cmd(&["GET", &freed_key(name, "a")]).expect("GET"),
        "0 1 2 3",
        "the releaser's record, for its retry"
    );
    assert_eq!(
        run_release_to(&mut conn, name, "a", 3, ("b", false)).await,
        Ok(vec![2, 0]),
        "the retry finds the successor holding the lock"
    );
    held_by("b", "0 1", None);

    // With fencing: the next token (the counter ahead of the server's clock in
    // microseconds: one more than the counter).
    server
        .cmd(&["SET", &fence_key(name), "8000000000000041"])
        .expect("SET");
    assert_eq!(
        run_release_to(&mut conn, name, "b", 2, ("c", true)).await,
        Ok(vec![2, 8_000_000_000_000_042])
    );
    held_by("c", "0 1", Some(8_000_000_000_000_042));

    // Two listeners: another client waits too; freed and published.
    let second = listener(&server, name).await;
    assert_eq!(
        run_release_to(&mut conn, name, "c", 2, ("d", false)).await,
        Ok(vec![1, 0])
    );
    freed_by("c");
    drop((first, second));

    // Nobody listens (the waiter's client is not subscribed): as without one.
    write_lock(&server, name, "e", "1", "0 1");
    let channel = channel_key(name);
    for _ in 0..100 {
        let numsub = server.cmd(&["PUBSUB", "NUMSUB", &channel]).expect("NUMSUB");
        if numsub.lines().nth(1) == Some("0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        run_release_to(&mut conn, name, "e", 2, ("f", false)).await,
        Ok(vec![1, 0])
    );
    freed_by("e");

    // A successor that cannot be parsed is none.
    let _listening = listener(&server, name).await;
    write_lock(&server, name, "g", "1", "0 1");
    // Forged on purpose: a lease that is no number, where layout writes one.
    let mut forged = release_call(name, "g", 2, None);
    let successor = forged.args.len() - 2;
    forged.args[successor] = b"h lots 1 0 0".to_vec();
    assert_eq!(run_release_call(&mut conn, forged).await, Ok(vec![1, 0]));
    freed_by("g");
}

/// The write-back of a plain lock held `count` times, its operation `seq` over
/// `floor`.
fn back(count: u64, seq: u64, floor: u64) -> Option<WriteBack> {
    Some(WriteBack { count, seq, floor })
}

/// Runs `renew.lua` for lock `name` with a lease of 60 s: its one answer.
async fn run_renew(conn: &mut Conn, name: &str, owner: &str) -> redis::RedisResult<i64> {
    run_renew_or_write_back(conn, name, owner, None).await
}

/// Runs `renew.lua` for lock `name` with a lease of 60 s, and `write_back` (none:
/// renew only): its one answer.
async fn run_renew_or_write_back(
    conn: &mut Conn,
    name: &str,
    owner: &str,
    write_back: Option<WriteBack>,
) -> redis::RedisResult<i64> {
    let lock = lock_key(name);
    let renew = Renew {
        lock: lock.as_bytes(),
        owner,
        lease_ms: 60_000,
        write_back,
        name: None,
    };
    let answers: Vec<i64> = invoke(&script("renew"), &renew.to_call())
        .invoke_async(conn)
        .await?;
    Ok(answers.first().copied().unwrap_or(-99))
}

/// Writes plain lock `name` held `count` times by `owner` with replay record
/// `record` (`"<floor> <done...>"`, lua/lock.lua), with a 10 s expiry.
fn write_lock(server: &RedisServer, name: &str, owner: &str, count: &str, record: &str) {
    let fields = support::plain_lock_fields(owner, count, record);
    support::write_hash(server, &lock_key(name), fields, Some(10_000));
}

/// The time `key` has left, in ms (`PTTL`).
fn pttl_ms(server: &RedisServer, key: &str) -> i64 {
    server
        .cmd(&["PTTL", key])
        .expect("PTTL")
        .parse()
        .expect("a number")
}

/// Numbers that are not integers as distlock writes one.
const NOT_INTEGERS: [&str; 6] = ["abc", "1.5", " 1", "007", "", "1e3"];

/// Locks held by owner `o` with `count` holds (floor 7), each with one number
/// spoiled by `value`: the count, the floor of its replay record, the fencing
/// token, the replay record's done list; and a read-write lock of `o` whose own
/// lease end (`#until:o`) is spoiled.
fn spoiled(value: &str, count: &str) -> [(&'static str, Vec<(String, String)>); 5] {
    let with = |owner_count: &str, record: &str, extra: &[(&str, &str)]| {
        let mut fields = support::plain_lock_fields("o", owner_count, record);
        for (field, value) in extra {
            if *field == layout::KIND {
                fields[0].1 = (*value).to_owned();
            } else {
                fields.push(((*field).to_owned(), (*value).to_owned()));
            }
        }
        fields
    };
    let until = format!("{}o", layout::UNTIL);
    [
        ("count", with(value, "7", &[])),
        ("floor", with(count, value, &[])),
        ("fence", with(count, "7", &[(layout::FENCE, value)])),
        ("done", with(count, &format!("7 8 {value}x"), &[])),
        (
            "until",
            with(
                count,
                "7",
                &[(layout::KIND, Kind::Read.word()), (&until, value)],
            ),
        ),
    ]
}

/// Writes `fields` at lock `name`, with a 10 s expiry.
fn write_fields(server: &RedisServer, name: &str, fields: &[(String, String)]) {
    support::write_hash(
        server,
        &lock_key(name),
        fields.iter().cloned(),
        Some(10_000),
    );
}

fn is_conflict(err: &LockError) -> bool {
    matches!(err, LockError::KeyConflict { .. })
}

// A lock whose count, floor, fencing token or replay record is not what distlock writes: a conflict to
// every script, and never written to.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_on_a_non_integer_count_is_a_key_conflict_and_writes_nothing() {
    let server = support::server();
    let locks = support::fenced_with_lease(&server.url(), Duration::from_secs(30)).await;
    let mut conn = support::conn(&server.url()).await;
    let guard = locks.lock("count").await.expect("lock");
    spoil_count(&server, "count");
    let before = dump_all(&mut conn).await;
    let reentry = guard.scope(async { locks.lock("count").await }).await;
    let err = reentry.expect_err("a re-entry on a count that is not an integer");
    assert!(is_conflict(&err), "{err:?}");
    assert_eq!(dump_all(&mut conn).await, before, "the re-entry wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_answers_a_conflict_for_every_non_integer_field_and_writes_nothing() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    for value in NOT_INTEGERS {
        for (field, lock) in spoiled(value, "1") {
            write_fields(&server, "edge", &lock);
            let before = dump_all(&mut conn).await;
            // A replay (attempt 7 applied), a re-entry, an ordinary acquire by its
            // owner and one by another owner.
            for (owner, attempt, reentry) in [
                ("o", 7, true),
                ("o", 8, true),
                ("o", 8, false),
                ("p", 8, false),
            ] {
                let reply = run_acquire(&mut conn, "edge", owner, attempt, reentry).await;
                assert_eq!(
                    reply.as_deref().ok(),
                    Some(&[-2][..]),
                    "{field} = {value:?}, owner {owner}, attempt {attempt}, re-entry {reentry}: {reply:?}"
                );
            }
            assert_eq!(dump_all(&mut conn).await, before, "{field} = {value:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_owner_of_a_lock_with_a_non_integer_count_gets_a_key_conflict() {
    let server = support::server();
    let locks = support::fenced_with_lease(&server.url(), Duration::from_secs(30)).await;
    let mut conn = support::conn(&server.url()).await;
    // Without a TTL, as a foreign writer would leave it.
    let fields = support::plain_lock_fields("someone", "abc", "0");
    support::write_hash(&server, &lock_key("foreign"), fields, None);
    let before = dump_all(&mut conn).await;
    let result = locks.lock("foreign").wait(Duration::from_millis(300)).await;
    let err = result.expect_err("a lock distlock did not write");
    assert!(is_conflict(&err), "{err:?}");
    assert_eq!(dump_all(&mut conn).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_answers_a_conflict_for_every_non_integer_field_and_writes_nothing() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    for value in NOT_INTEGERS {
        // A count of 2 would be decremented, a count of 1 would free the lock: each
        // field spoiled in turn, with both counts.
        for count in ["1", "2"] {
            for (field, lock) in spoiled(value, count) {
                write_fields(&server, "edge", &lock);
                let before = dump_all(&mut conn).await;
                for attempt in [7, 8] {
                    let reply = run_release(&mut conn, "edge", "o", attempt).await;
                    assert_eq!(
                        reply.as_deref().ok(),
                        Some(&[-2][..]),
                        "{field} = {value:?}, count {count}, attempt {attempt}: {reply:?}"
                    );
                }
                assert_eq!(dump_all(&mut conn).await, before, "{field} = {value:?}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlocking_a_non_integer_count_is_a_key_conflict_and_writes_nothing() {
    let server = support::server();
    let locks = support::fenced_with_lease(&server.url(), Duration::from_secs(30)).await;
    let mut conn = support::conn(&server.url()).await;
    let guard = locks.lock("count").await.expect("lock");
    spoil_count(&server, "count");
    let before = dump_all(&mut conn).await;
    let err = guard.unlock().await.expect_err("unlock");
    assert!(is_conflict(&err), "{err:?}");
    assert_eq!(dump_all(&mut conn).await, before, "the release wrote");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_does_not_renew_a_non_integer_field() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    for value in NOT_INTEGERS {
        for (field, lock) in spoiled(value, "1") {
            write_fields(&server, "edge", &lock);
            let reply = run_renew(&mut conn, "edge", "o").await;
            assert_eq!(reply.ok(), Some(0), "{field} = {value:?}");
            let pttl: i64 = server
                .cmd(&["PTTL", &lock_key("edge")])
                .expect("PTTL")
                .parse()
                .expect("a number");
            assert!(
                (0..=10_000).contains(&pttl),
                "{field} = {value:?}: renewed to {pttl} ms"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_reports_a_non_integer_count_as_lost_and_stops_renewing() {
    let lease = Duration::from_millis(300);
    let server = support::server();
    let locks = support::fenced_with_lease(&server.url(), lease).await;
    let guard = locks.lock("count").await.expect("lock");
    spoil_count(&server, "count");
    let lost = tokio::time::timeout(lease * 2, guard.lost()).await;
    assert!(lost.is_ok(), "still believed held after two leases");
    // Not renewed: the lock ends with the lease it had.
    tokio::time::sleep(lease).await;
    let exists = server.cmd(&["EXISTS", &lock_key("count")]).expect("EXISTS");
    assert_eq!(exists, "0", "the watchdog kept renewing it");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reads_a_non_integer_field_as_a_conflict() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    for value in NOT_INTEGERS {
        for (field, lock) in spoiled(value, "1") {
            write_fields(&server, "edge", &lock);
            let reply: redis::RedisResult<Vec<i64>> = run_inspect(&mut conn, "edge").await;
            assert_eq!(
                reply.as_deref().ok(),
                Some(&[-2][..]),
                "{field} = {value:?}: {reply:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_counter_that_is_not_a_counter_is_a_conflict_and_stays_untouched() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    let fence = fence_key("edge");
    for value in NOT_INTEGERS.into_iter().chain(["-3"]) {
        server.cmd(&["SET", &fence, value]).expect("SET");
        let before = dump_all(&mut conn).await;
        let reply = run_acquire_fenced(&mut conn, "edge", "o", 1, false, true).await;
        assert_eq!(
            reply.as_deref().ok(),
            Some(&[-2][..]),
            "acquire, fence {value:?}: {reply:?}"
        );
        let reply: redis::RedisResult<Vec<i64>> = run_inspect(&mut conn, "edge").await;
        assert_eq!(
            reply.as_deref().ok(),
            Some(&[-2][..]),
            "inspect, fence {value:?}: {reply:?}"
        );
        assert_eq!(dump_all(&mut conn).await, before, "fence {value:?}");
    }
}

// Under `maxmemory` with `noeviction`: a re-entry goes through (it creates no key),
// a new lock is refused with the OOM error, as before.

/// A server under `noeviction` that is over its `maxmemory`: 3 MiB of keys without
/// a TTL, then `maxmemory` lowered to 1 MiB.
fn out_of_memory(server: &RedisServer) {
    support::fill_past_maxmemory(server);
    let refused = server
        .cmd(&["SET", "probe", "1"])
        .expect_err("the server is out of memory");
    assert!(refused.to_string().contains("OOM"), "{refused}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_oom_a_held_lock_reenters() {
    let server = support::with_maxmemory_policy("noeviction");
    let locks = support::fenced_with_lease(&server.url(), Duration::from_secs(30)).await;
    let guard = locks.lock("held").await.expect("lock before OOM");
    out_of_memory(&server);
    guard
        .scope(async {
            let inner = locks
                .lock("held")
                .await
                .expect("a re-entry under OOM creates no key");
            assert_eq!(inner.hold_count(), 2);
            assert_eq!(redis_count(&server, "held"), 2);
            inner.unlock().await.expect("release the re-entry");
        })
        .await;
    assert_eq!(redis_count(&server, "held"), 1);
    guard.unlock().await.expect("release under OOM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_oom_a_new_lock_is_refused_with_the_oom_error_and_creates_nothing() {
    let server = support::with_maxmemory_policy("noeviction");
    let locks = support::fenced_with_lease(&server.url(), Duration::from_secs(30)).await;
    let mut conn = support::conn(&server.url()).await;
    let guard = locks.lock("held").await.expect("lock before OOM");
    out_of_memory(&server);
    let before = dump_all(&mut conn).await;
    let oom = |what: &str, result: Result<(), LockError>| {
        // The error every write gets from a full server under `noeviction`.
        match result.expect_err(what) {
            LockError::Redis(err) => {
                assert_eq!(err.code(), Some("OOM"), "{what}: {err}");
                assert!(
                    err.to_string()
                        .contains("command not allowed when used memory > 'maxmemory'"),
                    "{what}: {err}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
    };
    let fresh = locks.lock("new").wait(Duration::ZERO).await.map(drop);
    oom("a new lock", fresh);
    let tried = locks.try_lock("new").await.map(drop);
    oom("a try_lock", tried);
    // A new name acquired while another lock is held is a new lock, not a re-entry.
    let nested = guard
        .scope(async { locks.lock("other").wait(Duration::ZERO).await })
        .await
        .map(drop);
    oom("a nested new lock", nested);
    assert_eq!(dump_all(&mut conn).await, before, "a write under OOM");
    for key in [lock_key("new"), fence_key("new"), lock_key("other")] {
        assert_eq!(server.cmd(&["EXISTS", &key]).expect("EXISTS"), "0", "{key}");
    }
    guard.unlock().await.expect("release under OOM");
}

/// A new acquisition runs under `#!lua` and is refused as a whole on a full server
/// (busy or free: it would add data if it found the lock free); a re-entry runs
/// under `allow-oom` and goes through, writing only the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_oom_the_acquire_script_writes_only_on_a_reentry() {
    let server = support::with_maxmemory_policy("noeviction");
    let mut conn = support::conn(&server.url()).await;
    write_lock(&server, "held", "o", "1", "7");
    out_of_memory(&server);
    let before = dump_all(&mut conn).await;
    // Another owner's new acquisition: refused; a replay: its answer again; neither
    // writes.
    let busy = run_acquire(&mut conn, "held", "p", 8, false).await;
    let err = busy.expect_err("a new acquisition under OOM");
    assert_eq!(err.code(), Some("OOM"), "{err}");
    let replay = run_acquire(&mut conn, "held", "o", 7, true).await;
    assert_eq!(replay.as_deref().ok(), Some(&[1, 1, 0][..]), "{replay:?}");
    // A free name: refused, with the server's own error.
    let fresh = run_acquire(&mut conn, "fresh", "o", 9, false).await;
    let err = fresh.expect_err("a new lock under OOM");
    assert_eq!(err.code(), Some("OOM"), "{err}");
    assert_eq!(dump_all(&mut conn).await, before, "a write under OOM");
    // The owner re-enters.
    let again = run_acquire(&mut conn, "held", "o", 10, true).await;
    assert_eq!(again.as_deref().ok(), Some(&[1, 2, 0][..]), "{again:?}");
    let more = run_acquire(&mut conn, "held", "o", 11, true).await;
    assert_eq!(more.as_deref().ok(), Some(&[1, 3, 0][..]), "{more:?}");
}

/// The remaining lease of lock `name` in ms (-1: no expiry, -2: no key).
fn pttl(server: &RedisServer, name: &str) -> i64 {
    server
        .cmd(&["PTTL", &lock_key(name)])
        .expect("PTTL")
        .parse()
        .expect("a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_acquire_answers_that_create_nothing_leave_every_expiry_alone() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    // A lock with a lease, and one without (as a foreign writer would leave it).
    write_lock(&server, "leased", "o", "1", "7");
    let fields = support::plain_lock_fields("o", "1", "7");
    support::write_hash(&server, &lock_key("forever"), fields, None);
    server.cmd(&["SET", &lock_key("string"), "x"]).expect("SET");
    let before = dump_all(&mut conn).await;
    for (what, name, owner, attempt, reentry, expected) in [
        ("busy", "leased", "p", 8, false, vec![0]),
        ("busy, no expiry", "forever", "p", 8, false, vec![0, -1]),
        ("a replay", "leased", "o", 7, true, vec![1, 1, 0]),
        ("a re-entry of a free lock", "free", "o", 8, true, vec![-1]),
        ("another type", "string", "o", 8, false, vec![-2]),
    ] {
        let reply = run_acquire(&mut conn, name, owner, attempt, reentry).await;
        let reply = reply.unwrap_or_else(|err| panic!("{what}: {err}"));
        assert_eq!(&reply[..expected.len()], &expected[..], "{what}: {reply:?}");
    }
    assert_eq!(dump_all(&mut conn).await, before, "an answer wrote");
    assert!(
        (1..=10_000).contains(&pttl(&server, "leased")),
        "{}",
        pttl(&server, "leased")
    );
    assert_eq!(pttl(&server, "forever"), -1);
    assert_eq!(pttl(&server, "string"), -1);
    assert_eq!(pttl(&server, "free"), -2);
}

// The server refusals that a write brings stay as they were: a replica (a demoted
// master) refuses every answer of acquire.lua, read-only ones too, so that the
// client notices the failover.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_refuses_every_acquire_with_readonly() {
    let master = support::server();
    let port = master.port().to_string();
    let replica = RedisServer::builder()
        .args(["--replicaof", "127.0.0.1", port.as_str()])
        .start()
        .expect("start the replica");
    write_lock(&master, "held", "o", "1", "7");
    let mut synced = false;
    for _ in 0..500 {
        if replica.cmd(&["EXISTS", &lock_key("held")]).ok().as_deref() == Some("1") {
            synced = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(synced, "the replica did not get the lock");
    let mut conn = support::conn(&replica.url()).await;
    for (what, name, owner, attempt, reentry) in [
        ("busy", "held", "p", 8, false),
        ("a replay", "held", "o", 7, true),
        ("a re-entry", "held", "o", 8, true),
        ("a re-entry of a free lock", "free", "o", 8, true),
        ("a new lock", "free", "o", 8, false),
    ] {
        let reply = run_acquire(&mut conn, name, owner, attempt, reentry).await;
        let err = reply.expect_err(what);
        assert_eq!(err.code(), Some("READONLY"), "{what}: {err}");
    }
}

// The first acquisition: the client no longer writes a new lock itself (no plain
// `SET NX`): every acquisition runs acquire.lua, which keeps the replay record of
// the owner's operations, so that a repeat of the first acquisition takes nothing,
// and the record of the final release, at `:freed:<owner>`, outlives the lock for
// the release's retry, whoever takes the lock next.

/// A new plain acquisition of lock key `lock` by owner "o": operation `seq`, its
/// floor `floor`, lease 10 s.
fn new_acquisition(lock: &str, seq: u64, floor: u64) -> Acquire<'_> {
    Acquire::new(lock.as_bytes(), "o", 10_000, seq, floor)
}

/// Runs one `acquire.lua` call carrying `acquisitions` (group commit's run): the
/// answers, in order.
async fn run_acquire_run(
    conn: &mut Conn,
    acquisitions: &[Acquire<'_>],
) -> redis::RedisResult<Vec<Vec<i64>>> {
    let mut call = Call::default();
    for acquisition in acquisitions {
        acquisition.push_to(&mut call);
    }
    invoke(&script("acquire"), &call).invoke_async(conn).await
}

// A new plain acquisition of a free lock takes the short way (one `EXISTS`, no
// tables made); every other case takes the whole one. Both answer alike, alone and
// mixed in one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_acquisition_answers_alike_on_the_short_way_and_the_whole_one() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    let (held, free, settled, known) = (
        lock_key("held"),
        lock_key("free"),
        lock_key("settled"),
        lock_key("known"),
    );
    let taken = run_acquire(&mut conn, "held", "p", 1, false).await;
    assert_eq!(taken.as_deref().ok(), Some(&[1, 1, 0][..]), "{taken:?}");
    // "known": free, but o's final release of it is on record (operations 1 to 2).
    server
        .cmd(&["SET", &freed_key("known", "o"), "0 1 2", "PX", "10000"])
        .expect("SET");
    let answers = run_acquire_run(
        &mut conn,
        &[
            new_acquisition(&held, 3, 0),
            new_acquisition(&free, 4, 0),
            // Settled before it arrived (at or below the floor): nothing to take.
            new_acquisition(&settled, 5, 5),
            // A stray copy of o's first acquisition of "known", released since.
            new_acquisition(&known, 1, 0),
            // A new operation of o on "known": taken.
            new_acquisition(&known, 6, 2),
        ],
    )
    .await
    .expect("one run");
    assert_eq!(answers.len(), 5, "{answers:?}");
    assert_eq!(answers[0].first(), Some(&0), "held by p: {answers:?}");
    assert_eq!(answers[1], [1, 1, 0], "free: {answers:?}");
    assert_eq!(answers[2], [1, 1, 0], "settled: {answers:?}");
    assert_eq!(answers[3], [1, 1, 0], "the stray copy: {answers:?}");
    assert_eq!(answers[4], [1, 1, 0], "the new operation: {answers:?}");
    assert_eq!(support::stored(&server, "held").count("p"), 1);
    assert_eq!(support::stored(&server, "held").count("o"), 0);
    assert_eq!(support::stored(&server, "free").record("o"), Some("0 4"));
    assert!(
        !support::exists(&server, &settled),
        "a settled operation took the lock"
    );
    assert_eq!(support::stored(&server, "known").count("o"), 1);
    assert_eq!(support::stored(&server, "known").record("o"), Some("2 6"));
}

// A release of a plain lock its owner holds, with no successor, takes the short
// way (the owner's fields read once, no tables made); every other case takes the
// whole one, from the same read. Both answer alike, alone and mixed in one run, and
// the short way's final release is published as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_answers_alike_on_the_short_way_and_the_whole_one() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    for (name, seq) in [("twice", 1), ("once", 1), ("other", 1)] {
        let owner = if name == "other" { "p" } else { "o" };
        let taken = run_acquire(&mut conn, name, owner, seq, false).await;
        assert_eq!(
            taken.as_deref().ok(),
            Some(&[1, 1, 0][..]),
            "{name}: {taken:?}"
        );
    }
    let again = run_acquire(&mut conn, "twice", "o", 2, true).await;
    assert_eq!(again.as_deref().ok(), Some(&[1, 2, 0][..]), "{again:?}");
    let read_lock = lock_key("read");
    let read = Acquire {
        kind: Kind::Read,
        ..Acquire::new(read_lock.as_bytes(), "o", 10_000, 1, 0)
    };
    let taken = run_acquire_run(&mut conn, &[read]).await;
    assert_eq!(taken, Ok(vec![vec![1, 1, 0]]), "the read hold");
    server
        .cmd(&["SET", &lock_key("string"), "not a lock"])
        .expect("SET");
    // A listener that reads what is published on "once"'s channel.
    let client = redis::Client::open(server.url()).expect("a URL");
    let mut plain = client.get_connection().expect("a connection");
    let mut listener = plain.as_pubsub();
    listener.subscribe(channel_key("once")).expect("SUBSCRIBE");
    listener
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("a read timeout");

    let locks: Vec<(String, u64)> = [
        ("twice", 3),
        ("once", 2),
        // The retry of the release just before: answered from its record.
        ("once", 2),
        ("read", 2),
        ("other", 2),
        ("string", 2),
    ]
    .into_iter()
    .map(|(name, seq)| (lock_key(name), seq))
    .collect();
    let mut call = ReleaseRun {
        publish: "PUBLISH",
        remember_ms: 2_000,
    }
    .to_call();
    for (lock, seq) in &locks {
        Release {
            lock: lock.as_bytes(),
            owner: "o",
            lease_ms: 10_000,
            seq: *seq,
            floor: 0,
            successor: None,
            record: true,
        }
        .push_to(&mut call);
    }
    let answers: Vec<Vec<i64>> = invoke(&script("release"), &call)
        .invoke_async(&mut conn)
        .await
        .expect("one run");
    assert_eq!(
        answers,
        vec![
            vec![1, 1],
            vec![1, 0],
            vec![1, 0],
            vec![1, 0],
            vec![-1],
            vec![-2]
        ],
        "twice, once, its retry, the read hold, another's lock, a string"
    );
    let twice = support::stored(&server, "twice");
    assert_eq!(twice.count("o"), 1, "{twice:?}");
    assert_eq!(twice.record("o"), Some("0 1 2 3"), "{twice:?}");
    assert!(!support::exists(&server, &lock_key("once")), "not freed");
    assert_eq!(
        server.cmd(&["GET", &freed_key("once", "o")]).expect("GET"),
        "0 1 2"
    );
    assert!(
        !support::exists(&server, &read_lock),
        "the read hold is still there"
    );
    assert_eq!(support::stored(&server, "other").count("p"), 1);
    let message = listener.get_message().expect("the release was published");
    assert_eq!(message.get_payload::<String>().ok().as_deref(), Some("o:2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_replay_a_first_acquisition_and_its_final_release() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    // Owner o's operation 3 (floor 0), as the client sends it.
    let first = run_acquire(&mut conn, "plain", "o", 3, false).await;
    assert_eq!(first.as_deref().ok(), Some(&[1, 1, 0][..]), "{first:?}");
    let stored = support::stored(&server, "plain");
    assert_eq!(stored.count("o"), 1, "a free lock is taken: {stored:?}");
    assert_eq!(stored.record("o"), Some("0 3"), "{stored:?}");
    // A replay of operation 3 through the script is an answer, not a second hold.
    let replay = run_acquire(&mut conn, "plain", "o", 3, false).await;
    assert_eq!(replay.as_deref().ok(), Some(&[1, 1, 0][..]), "{replay:?}");
    assert_eq!(redis_count(&server, "plain"), 1, "a repeat takes nothing");
    // Another owner finds it held; the owner re-enters with operation 4.
    let busy = run_acquire(&mut conn, "plain", "p", 1, false).await;
    assert_eq!(busy.as_deref().ok().map(|r| r[0]), Some(0), "{busy:?}");
    let again = run_acquire(&mut conn, "plain", "o", 4, true).await;
    assert_eq!(again.as_deref().ok(), Some(&[1, 2, 0][..]), "{again:?}");
    // Both holds go back: the last one frees the lock; its retry knows it applied.
    for (attempt, remaining) in [(5, 1), (6, 0), (6, 0)] {
        let reply = run_release(&mut conn, "plain", "o", attempt).await;
        assert_eq!(
            reply.as_deref().ok(),
            Some(&[1, remaining][..]),
            "{attempt}: {reply:?}"
        );
    }
    // Free: no lock, and the record of that release at `:freed:o`. A stray copy of
    // the first acquisition takes nothing; another owner takes the lock, and the
    // retry of the release still knows it applied.
    assert!(!support::exists(&server, &lock_key("plain")), "not freed");
    let freed = freed_key("plain", "o");
    assert_eq!(server.cmd(&["GET", &freed]).expect("GET"), "0 3 4 5 6");
    let stray = run_acquire(&mut conn, "plain", "o", 3, false).await;
    assert_eq!(stray.as_deref().ok(), Some(&[1, 1, 0][..]), "{stray:?}");
    assert!(
        !support::exists(&server, &lock_key("plain")),
        "a stray copy of the first acquisition took the lock"
    );
    let taken = run_acquire(&mut conn, "plain", "p", 1, false).await;
    assert_eq!(taken.as_deref().ok(), Some(&[1, 1, 0][..]), "{taken:?}");
    assert_eq!(server.cmd(&["GET", &freed]).expect("GET"), "0 3 4 5 6");
    let ttl = pttl_ms(&server, &freed);
    assert!(
        (1..=2_000).contains(&ttl),
        "the record keeps its time: {ttl} ms"
    );
    let retry = run_release(&mut conn, "plain", "o", 6).await;
    assert_eq!(retry.as_deref().ok(), Some(&[1, 0][..]), "{retry:?}");
    // A stray release never applied: its owner's record says so.
    let stray = run_release(&mut conn, "plain", "o", 7).await;
    assert_eq!(stray.as_deref().ok(), Some(&[-8][..]), "{stray:?}");
    assert_eq!(redis_count(&server, "plain"), 1, "p holds it, untouched");
    assert_eq!(
        support::redis_holder(&server, "plain").as_deref(),
        Some("p")
    );
}

/// Runs `acquire.lua` for lock `name` as `want` says (a plain lock, a read hold,
/// the write hold, ...), one acquisition alone, without fencing.
async fn run_acquire_as(
    conn: &mut Conn,
    name: &str,
    owner: &str,
    attempt: u64,
    reentry: bool,
    want: Kind,
) -> redis::RedisResult<Vec<i64>> {
    let lock = lock_key(name);
    let acquire = Acquire {
        reentry,
        kind: want,
        ..Acquire::new(lock.as_bytes(), owner, 10_000, attempt, 0)
    };
    let script = script(if reentry { "reenter" } else { "acquire" });
    let replies: Vec<Vec<i64>> = invoke(&script, &acquire.to_call())
        .invoke_async(conn)
        .await?;
    let [reply] = <[Vec<i64>; 1]>::try_from(replies).expect("one answer for one acquisition");
    Ok(reply)
}

/// Issue 34, finding 3: a new acquisition (not a re-entry) whose owner id holds
/// the lock already (handed to it by a release whose answer could not be read)
/// added to that hold, so that its client built a guard of count 2 on a hold it
/// had asked for once, and one hold stayed after the guard's unlock. Now it is
/// answered {-7, count} and writes nothing, for a plain lock and a shared kind;
/// a replay of an acquisition that was applied still answers the count as it
/// stands, and a re-entry still adds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_acquisition_never_adds_to_a_hold_of_its_own_owner_id() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    // `b` was handed the plain lock by its operation 1.
    write_lock(&server, "handed", "b", "1", "0 1");
    let before = dump_all(&mut conn).await;
    let anew = run_acquire(&mut conn, "handed", "b", 2, false).await;
    assert_eq!(
        anew,
        Ok(vec![-7, 1]),
        "a new acquisition of an owner that holds"
    );
    assert_eq!(dump_all(&mut conn).await, before, "it wrote");
    let replay = run_acquire(&mut conn, "handed", "b", 1, false).await;
    assert_eq!(replay, Ok(vec![1, 1, 0]), "the replay of the hand-off");
    assert_eq!(dump_all(&mut conn).await, before, "the replay wrote");
    let reentry = run_acquire(&mut conn, "handed", "b", 3, true).await;
    assert_eq!(reentry, Ok(vec![1, 2, 0]), "a re-entry adds");
    assert_eq!(redis_count(&server, "handed"), 2);

    // A read hold taken by `r`'s operation 1: a new one of `r` adds nothing.
    let read = run_acquire_as(&mut conn, "shared", "r", 1, false, Kind::Read).await;
    assert_eq!(read, Ok(vec![1, 1, 0]), "the read hold");
    let before = dump_all(&mut conn).await;
    for (want, attempt) in [(Kind::Read, 2), (Kind::Write, 3)] {
        let anew = run_acquire_as(&mut conn, "shared", "r", attempt, false, want).await;
        assert_eq!(
            anew,
            Ok(vec![-7, 1]),
            "{want:?}: a new acquisition of a holder"
        );
    }
    assert_eq!(dump_all(&mut conn).await, before, "it wrote");
    let replay = run_acquire_as(&mut conn, "shared", "r", 1, false, Kind::Read).await;
    assert_eq!(replay, Ok(vec![1, 1, 0]), "the replay of the read hold");
    assert_eq!(support::stored(&server, "shared").count("r"), 1);
}

/// A Redlock renewal writes a plain lock back only where it is free (no key): never
/// over another owner's hold, nor over what distlock did not write; without a
/// write-back a free lock is told apart (-1) from one the key still holds (0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_writes_a_lock_back_only_where_it_is_free() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    let key = lock_key("back");

    assert_eq!(run_renew(&mut conn, "back", "o").await, Ok(-1), "free");
    assert!(!support::held(&server, &key), "nothing written");

    assert_eq!(
        run_renew_or_write_back(&mut conn, "back", "o", back(2, 9, 7)).await,
        Ok(2),
        "written back"
    );
    let lock = support::stored(&server, "back");
    assert_eq!(lock.kind(), Some(Kind::Exclusive.word()));
    assert_eq!(
        lock.count("o"),
        2,
        "held as many times as the owner holds it"
    );
    assert_eq!(
        lock.record("o"),
        Some("7 9"),
        "the write-back's replay record"
    );
    let pttl: i64 = server
        .cmd(&["PTTL", &key])
        .expect("PTTL")
        .parse()
        .expect("a number");
    assert!((50_000..=60_000).contains(&pttl), "the lease: {pttl} ms");
    assert_eq!(
        run_renew_or_write_back(&mut conn, "back", "o", back(1, 10, 7)).await,
        Ok(1),
        "held: renewed, not written again"
    );
    assert_eq!(support::stored(&server, "back").count("o"), 2);

    write_lock(&server, "taken", "other", "1", "0 1");
    let before = dump_all(&mut conn).await;
    assert_eq!(
        run_renew_or_write_back(&mut conn, "taken", "o", back(1, 9, 7)).await,
        Ok(0),
        "another owner holds it"
    );
    assert_eq!(dump_all(&mut conn).await, before, "left untouched");

    server
        .cmd(&["SET", &lock_key("foreign"), "x"])
        .expect("SET");
    let before = dump_all(&mut conn).await;
    assert_eq!(
        run_renew_or_write_back(&mut conn, "foreign", "o", back(1, 9, 7)).await,
        Ok(0),
        "what distlock did not write"
    );
    assert_eq!(dump_all(&mut conn).await, before, "left untouched");

    // A write-back of a settled operation (at or below the floor) writes nothing.
    assert_eq!(
        run_renew_or_write_back(&mut conn, "settled", "o", back(1, 7, 7)).await,
        Ok(-1)
    );
    assert!(!support::held(&server, &lock_key("settled")));
}

/// A final release that does not ask for its record (the client's common path,
/// `lua/release.lua`, "Records") frees the lock as one that does, and leaves no
/// `:freed:` key; its retry finds no record and answers {-1} (the client reads it
/// as applied, see `reliability_exactly_once`). One that asks leaves it, and its
/// retry answers that it applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_leaves_its_record_only_when_asked() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    for (name, record) in [("unrecorded", false), ("recorded", true)] {
        write_lock(&server, name, "o", "1", "0 1");
        let mut call = release_call(name, "o", 2, None);
        *call.args.last_mut().expect("the record flag") = if record { b"1" } else { b"0" }.to_vec();
        assert_eq!(
            Release::decode_all(&call).map(|(_, all)| all[0].record),
            Some(record),
            "{name}: the flag is the release's last argument"
        );
        assert_eq!(
            run_release_call(&mut conn, call.clone()).await,
            Ok(vec![1, 0]),
            "{name}"
        );
        assert!(
            !support::exists(&server, &lock_key(name)),
            "{name}: not freed"
        );
        assert_eq!(
            support::exists(&server, &freed_key(name, "o")),
            record,
            "{name}: a record only when asked"
        );
        let retry = run_release_call(&mut conn, call).await;
        let applied: &[i64] = if record { &[1, 0] } else { &[-1] };
        assert_eq!(retry.as_deref().ok(), Some(applied), "{name}: the retry");
    }
}

/// A force-unlock leaves each holder a record of what it had applied, for as long
/// as its lease would have lasted: a release of that holder in doubt then answers
/// {-8} (not applied, on record), never the {-1} a release without a record reads
/// as applied; a release that it had applied answers so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_leaves_each_holder_a_record_of_what_it_applied() {
    let server = support::server();
    let mut conn = support::conn(&server.url()).await;
    let locks = support::client(&server).await;
    let name = "edge:forced";
    write_lock(&server, name, "o", "2", "3 4");
    assert!(locks.force_unlock(name).await.expect("force_unlock"));
    let record = freed_key(name, "o");
    assert_eq!(server.cmd(&["GET", &record]).expect("GET"), "3 4");
    let ttl = pttl_ms(&server, &record);
    assert!(
        (9_000..=10_000).contains(&ttl),
        "the record lasts as long as the lease would have: {ttl} ms"
    );
    let mut unrecorded = release_call(name, "o", 5, None);
    *unrecorded.args.last_mut().expect("the record flag") = b"0".to_vec();
    assert_eq!(run_release_call(&mut conn, unrecorded).await, Ok(vec![-8]));
    assert_eq!(
        run_release(&mut conn, name, "o", 4).await,
        Ok(vec![1, 0]),
        "applied before"
    );
    assert!(
        !support::exists(&server, &lock_key(name)),
        "nothing taken again"
    );
}
