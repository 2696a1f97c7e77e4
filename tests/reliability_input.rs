//! Reliability: bad and strange input — names, leases, foreign and corrupted keys.
//! Each gives a typed error in bounded time and no partial write, or works.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use distlock::{LockClient, LockError, MAX_LEASE, MAX_NAME_LEN};
use distlock_testkit::RedisServer;
use proptest::prelude::*;
use tokio::time::Instant;

/// CRC16-CCITT (XMODEM), as Redis Cluster computes it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster hash slot of `key`: the CRC16 of its hash tag (the bytes between the
/// first `{` and the next `}`, when not empty), else of the whole key, mod 16384.
fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let close = key[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &key[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

#[test]
fn the_slot_function_matches_redis_examples() {
    // From the Redis Cluster specification.
    assert_eq!(crc16(b"123456789"), 0x31C3);
    assert_eq!(slot(b"{user1000}.following"), slot(b"{user1000}.followers"));
    assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") % 16384);
    assert_eq!(slot(b"foo{{bar}}zap"), crc16(b"{bar") % 16384);
}

/// A fenced client of `server`.
async fn client(server: &RedisServer) -> LockClient {
    support::fenced(&server.url()).await
}

/// A plain connection to `server`.
async fn conn(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    support::conn(&server.url()).await
}

/// Runs `attempt`, which must fail with an error `expected` accepts within 2 s
/// and leave every key as it was.
async fn refused<T: std::fmt::Debug>(
    conn: &mut redis::aio::MultiplexedConnection,
    what: &str,
    attempt: impl std::future::IntoFuture<Output = Result<T, LockError>>,
    expected: impl Fn(&LockError) -> bool,
) {
    let before = support::dumps(conn).await;
    let start = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(2), attempt.into_future())
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 2 s"));
    let took = start.elapsed();
    let err = result.expect_err(what);
    assert!(expected(&err), "{what}: unexpected error {err:?}");
    assert!(took < Duration::from_secs(2), "{what}: took {took:?}");
    assert_eq!(support::dumps(conn).await, before, "{what}: keys changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_leases_are_refused_with_typed_errors_and_write_nothing() {
    let server = support::server();
    let locks = client(&server).await;
    let mut conn = conn(&server).await;
    let name = |err: &LockError| matches!(err, LockError::InvalidName { .. });
    let option = |err: &LockError| matches!(err, LockError::InvalidOption { .. });

    refused(&mut conn, "empty name", locks.lock(""), name).await;
    refused(
        &mut conn,
        "1 MiB name",
        locks.lock(vec![b'a'; 1 << 20]),
        name,
    )
    .await;
    refused(
        &mut conn,
        "name over the cap",
        locks.lock(vec![b'a'; MAX_NAME_LEN + 1]),
        name,
    )
    .await;
    for lease in [
        Duration::ZERO,
        Duration::from_micros(500),
        MAX_LEASE + Duration::from_millis(1),
        Duration::MAX,
    ] {
        refused(
            &mut conn,
            &format!("lease {lease:?}"),
            locks.lock("lease").lease(lease),
            option,
        )
        .await;
    }
    refused(
        &mut conn,
        "an overflowing wait",
        locks.lock("wait").wait(Duration::MAX),
        option,
    )
    .await;
    for lease in [Duration::ZERO, Duration::from_millis(29), Duration::MAX] {
        let err = LockClient::builder()
            .url(server.url())
            .default_lease(lease)
            .connect()
            .await
            .expect_err("a watchdog lease out of range");
        assert!(option(&err), "{err:?}");
    }
    support::summary(
        "input_bad_names_and_leases",
        // 3 names, 4 leases, 1 wait, 3 watchdog leases.
        &[("bad_inputs", 11)],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strange_names_lock_and_keep_their_keys_in_one_slot() {
    let server = support::server();
    let locks = client(&server).await;
    let mut conn = conn(&server).await;
    let names: Vec<Vec<u8>> = vec![
        b"\x00\x01binary\xff".to_vec(),
        vec![0xC3, 0x28, 0xA0, 0xA1], // invalid UTF-8
        "🔒📦 order".into(),
        "שלום עולם مرحبا".into(), // right-to-left text
        b"*?[a-z]\\".to_vec(),    // glob characters
        b"{".to_vec(),
        b"}".to_vec(),
        b"{}".to_vec(),
        b"}{".to_vec(),
        b"a{b}c".to_vec(),
        b"%7B".to_vec(),
        vec![b'n'; MAX_NAME_LEN],
    ];
    for name in &names {
        let guard = locks.lock(name).await.expect("lock a strange name");
        assert_eq!(guard.name(), String::from_utf8_lossy(name), "shown as text");
        assert_eq!(guard.held().name_bytes(), name.as_slice(), "kept as given");
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
            .arg("distlock:*")
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        assert_eq!(keys.len(), 2, "lock and fence for {name:?}");
        let slots: Vec<u16> = keys.iter().map(|key| slot(key)).collect();
        assert_eq!(slots[0], slots[1], "{name:?}: {keys:?}");
        guard.unlock().await.expect("unlock");
        let () = redis::cmd("FLUSHALL")
            .query_async(&mut conn)
            .await
            .expect("FLUSHALL");
    }
    support::summary("input_strange_names", &[("bad_inputs", names.len() as u64)]);
}

/// The lock key and fence key a name maps to, observed on the server.
async fn observed_keys(
    locks: &LockClient,
    conn: &mut redis::aio::MultiplexedConnection,
    name: &[u8],
) -> (Vec<u8>, Vec<u8>) {
    let guard = locks.lock(name).await.expect("lock");
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("distlock:*")
        .query_async(conn)
        .await
        .expect("KEYS");
    guard.unlock().await.expect("unlock");
    let () = redis::cmd("FLUSHALL")
        .query_async(conn)
        .await
        .expect("FLUSHALL");
    assert_eq!(keys.len(), 2, "{keys:?}");
    keys.sort_by_key(|key| distlock::layout::is_side_key(key));
    let fence = keys.pop().expect("fence");
    let lock = keys.pop().expect("lock");
    (lock, fence)
}

#[test]
fn the_key_encoding_is_injective_and_keeps_a_lock_in_one_slot() {
    let server = support::server();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (locks, conn) = runtime.block_on(async { (client(&server).await, conn(&server).await) });
    let seen: std::cell::RefCell<HashMap<Vec<u8>, Vec<u8>>> = Default::default();
    let cases = std::cell::Cell::new(0u64);
    let config = ProptestConfig {
        cases: 300,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let names = proptest::collection::vec(
        prop_oneof![
            Just(b'{'),
            Just(b'}'),
            Just(b'%'),
            Just(b'7'),
            Just(b'B'),
            Just(b'D'),
            Just(b':'),
            any::<u8>()
        ],
        1..24,
    );
    runner
        .run(&names, |name| {
            cases.set(cases.get() + 1);
            let mut conn = conn.clone();
            let (lock, fence) = runtime.block_on(observed_keys(&locks, &mut conn, &name));
            let channel = distlock::layout::channel_key(&lock);
            prop_assert_eq!(slot(&lock), slot(&fence));
            prop_assert_eq!(slot(&lock), slot(&channel));
            let tag_start = lock.iter().position(|&b| b == b'{');
            prop_assert!(tag_start.is_some(), "no tag in {:?}", lock);
            let previous = seen.borrow_mut().insert(lock.clone(), name.clone());
            if let Some(other) = previous {
                prop_assert_eq!(&other, &name, "two names share the key {:?}", lock);
            }
            Ok(())
        })
        .expect("the key encoding holds");
    support::summary(
        "input_key_encoding_proptest",
        &[
            ("bad_inputs", cases.get()),
            ("distinct_keys", seen.borrow().len() as u64),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_corrupted_keys_give_typed_errors_and_stay_untouched() {
    let server = support::server();
    let locks = client(&server).await;
    let mut conn = conn(&server).await;
    let conflict = |err: &LockError| matches!(err, LockError::KeyConflict { .. });
    let timeout = |err: &LockError| matches!(err, LockError::Timeout { .. });
    let wait = Duration::from_millis(300);

    server
        .cmd(&["SET", &support::lock_key("string"), "x"])
        .expect("SET");
    refused(
        &mut conn,
        "a string at the lock key",
        locks.lock("string").wait(wait),
        conflict,
    )
    .await;
    server
        .cmd(&["HSET", &support::fence_key("fence"), "a", "b"])
        .expect("HSET");
    refused(
        &mut conn,
        "a hash at the fence key",
        locks.lock("fence").wait(wait),
        conflict,
    )
    .await;
    server
        .cmd(&["SET", &support::fence_key("text"), "abc"])
        .expect("SET");
    refused(
        &mut conn,
        "a non-number fence",
        locks.lock("text").wait(wait),
        conflict,
    )
    .await;
    server
        .cmd(&["RPUSH", &support::lock_key("list"), "x"])
        .expect("RPUSH");
    refused(&mut conn, "inspect a list", locks.inspect("list"), conflict).await;
    refused(
        &mut conn,
        "force a list",
        locks.force_unlock("list"),
        conflict,
    )
    .await;

    // Corrupted locks (hashes of the layout, lua/lock.lua) without a TTL. A count
    // that is not an integer is not a lock distlock wrote: a conflict (it used to
    // look held, and the wait ran out for a lock nobody held); nor is a count below
    // 1. A well-formed lock of another owner looks held.
    let corrupted = |name: &str, count: &str| {
        let fields = support::plain_lock_fields("someone", count, "0");
        support::write_hash(&server, &support::lock_key(name), fields, None);
    };
    corrupted("abc", "abc");
    refused(
        &mut conn,
        "lock a corrupted value (abc)",
        locks.lock("abc").wait(wait),
        conflict,
    )
    .await;
    corrupted("minus", "-1");
    refused(
        &mut conn,
        "lock a corrupted value (minus)",
        locks.lock("minus").wait(wait),
        conflict,
    )
    .await;
    corrupted("foreign", "1");
    refused(
        &mut conn,
        "lock a value of another owner with no lease",
        locks.lock("foreign").wait(wait),
        timeout,
    )
    .await;
    support::summary("input_foreign_and_corrupted_keys", &[("bad_inputs", 8)]);
}

/// Observed: `inspect` of a lock whose count is not a number failed with
/// `LockError::Redis` carrying the Lua error ("attempt to perform arithmetic on a nil
/// value"), not a typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspecting_a_corrupted_lock_gives_a_typed_error() {
    let server = support::server();
    let locks = client(&server).await;
    let mut conn = conn(&server).await;
    let fields = support::plain_lock_fields("someone", "abc", "0");
    support::write_hash(&server, &support::lock_key("abc"), fields, None);
    refused(
        &mut conn,
        "inspect a corrupted lock",
        locks.inspect("abc"),
        |err| matches!(err, LockError::KeyConflict { .. }),
    )
    .await;
}
