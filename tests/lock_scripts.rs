//! The scripts: run as one function library, and surviving the server forgetting them.

mod support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_while_held_still_releases_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    let guard = locks.lock("flush").await.expect("lock");
    guard
        .scope(async {
            let inner = locks.lock("flush").await.expect("re-entry");
            assert_eq!(support::redis_count(&server, "flush"), 2);
            server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
            inner.unlock().await.expect("release after SCRIPT FLUSH");
            assert_eq!(
                support::redis_count(&server, "flush"),
                1,
                "applied exactly once"
            );
        })
        .await;
    server.cmd(&["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
    guard.unlock().await.expect("release after SCRIPT FLUSH");
    assert_eq!(support::redis_count(&server, "flush"), 0);
    let again = locks
        .try_lock("flush")
        .await
        .expect("acquire after SCRIPT FLUSH");
    again.expect("free").unlock().await.expect("unlock");
}

/// A client runs its scripts as distlock's function library (`FCALL`, loaded
/// once), not by `EVALSHA`; after a `FUNCTION FLUSH` (as after a restart without
/// persistence) the next call loads the library again, holds in flight keep their
/// counts, and the library is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_run_as_the_function_library_and_survive_function_flush() {
    let server = support::server();
    let locks = support::client(&server).await;
    let libraries = || server.cmd(&["FUNCTION", "LIST"]).expect("FUNCTION LIST");
    assert!(libraries().contains("distlock_"), "loaded at connect");
    let guard = locks.lock("functions").await.expect("lock");
    guard
        .scope(async {
            let inner = locks.lock("functions").await.expect("re-entry");
            assert_eq!(support::redis_count(&server, "functions"), 2);
            server.cmd(&["FUNCTION", "FLUSH"]).expect("FUNCTION FLUSH");
            assert!(!libraries().contains("distlock_"), "flushed");
            inner.unlock().await.expect("release after FUNCTION FLUSH");
            assert_eq!(
                support::redis_count(&server, "functions"),
                1,
                "applied once"
            );
        })
        .await;
    assert!(libraries().contains("distlock_"), "loaded again");
    guard.unlock().await.expect("unlock");
    assert_eq!(support::redis_count(&server, "functions"), 0);
    let fcalls = support::command_calls(&server, "fcall");
    assert!(
        fcalls >= 4,
        "acquire, re-entry and two releases: {fcalls} FCALLs"
    );
    assert_eq!(support::command_calls(&server, "evalsha"), 0, "no EVALSHA");
}

/// In a function library the prelude is made once, so every call must read the
/// server's clock anew: two holders taken 200 ms apart record times 200 ms apart
/// (a clock kept from the first call would give both the same time), and a read
/// lock's own lease (`#until`, on that clock) is a whole lease ahead of now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_reads_the_clock_anew() {
    let server = support::server();
    let locks = support::client(&server).await;
    let first = locks.lock("clock:a").await.expect("lock");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let second = locks.lock("clock:b").await.expect("lock");
    // Named by their first renewals, each with the time its lock was taken.
    let at = |stored: distlock::layout::StoredLock| -> u64 {
        let owner = stored.holders().keys().next().expect("a holder").clone();
        let who = stored.who(&owner).expect("holder info");
        who.split(' ')
            .next()
            .and_then(|at| at.parse().ok())
            .expect("a time")
    };
    let (a, b) = (
        support::named(&server, "clock:a").await,
        support::named(&server, "clock:b").await,
    );
    let apart = at(b).saturating_sub(at(a));
    assert!((150..2000).contains(&apart), "taken {apart} ms apart");
    first.unlock().await.expect("unlock");
    second.unlock().await.expect("unlock");
}

/// A first request of each kind but the plain lock, on `<prefix>:<kind>` (the
/// semaphore's name must be `<prefix>:permit`), once `locks` has loaded the
/// library and opened its connections (one lock taken and given back first), so
/// that what a test counts next is the request's alone.
async fn kinds_of(
    locks: &distlock::LockClient,
    semaphore: &distlock::Semaphore,
    prefix: &str,
) -> Vec<(&'static str, String, distlock::LockRequest)> {
    locks
        .lock("warm")
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    let name = |kind: &str| format!("{prefix}:{kind}");
    vec![
        ("read", name("read"), locks.read_lock(name("read"))),
        ("write", name("write"), locks.write_lock(name("write"))),
        ("fair", name("fair"), locks.fair_lock(name("fair"))),
        ("permit", name("permit"), semaphore.acquire()),
    ]
}

/// A new acquisition of a free lock of any kind reads the server once: one
/// `EXISTS` of the lock and of its owner's final-release record. It reads neither
/// the hash (`HLEN`, `HGETALL`) nor the record (`GET`): those are for a lock that
/// is there, or for a replay (issue 36, the rare path paid only when it happens).
/// Each kind's first acquisition is counted on its own, with `INFO commandstats`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_acquisition_of_a_free_lock_reads_once() {
    let server = support::server();
    let locks = support::client(&server).await;
    // The library is loaded and every connection is up before counting.
    let reads = || {
        ["exists", "hlen", "hgetall", "get", "hmget"].map(|c| support::command_calls(&server, c))
    };
    let semaphore = locks.semaphore("first:permit", 3);
    let mut kinds = vec![("plain", "first:plain".to_owned(), locks.lock("first:plain"))];
    kinds.extend(kinds_of(&locks, &semaphore, "first").await);
    for (kind, _, attempt) in kinds {
        let before = reads();
        let guard = attempt.await.unwrap_or_else(|err| panic!("{kind}: {err}"));
        let after = reads();
        let delta: Vec<u64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        assert_eq!(
            delta,
            [1, 0, 0, 0, 0],
            "{kind}: calls of EXISTS, HLEN, HGETALL, GET, HMGET by one first acquisition"
        );
        guard.unlock().await.expect("unlock");
    }
}

/// The last holder of a read-write lock, a semaphore or a fair lock frees it with
/// one `DEL`: its own fields are not deleted first (`HDEL`) from a hash that goes
/// anyway. A holder that leaves others behind deletes its fields, and only those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_holder_of_a_kind_frees_it_with_one_delete() {
    let server = support::server();
    let locks = support::client(&server).await;
    let calls = || ["hdel", "del"].map(|c| support::command_calls(&server, c));
    let semaphore = locks.semaphore("last:permit", 3);
    for (kind, name, attempt) in kinds_of(&locks, &semaphore, "last").await {
        let guard = attempt.await.unwrap_or_else(|err| panic!("{kind}: {err}"));
        let before = calls();
        guard.unlock().await.expect("unlock");
        let after = calls();
        assert_eq!(
            [after[0] - before[0], after[1] - before[1]],
            [0, 1],
            "{kind}: HDEL and DEL calls of the last holder's release"
        );
        assert!(
            !support::exists(&server, &support::lock_key(&name)),
            "{kind}: freed"
        );
    }
    // Two readers: the first to leave deletes its own fields, the lock stays.
    let first = locks.read_lock("last:two").await.expect("first reader");
    let second = tokio::spawn({
        let locks = locks.clone();
        async move { locks.read_lock("last:two").await.expect("second reader") }
    })
    .await
    .expect("task");
    let before = calls();
    first.unlock().await.expect("unlock");
    let after = calls();
    assert_eq!(
        [after[0] - before[0], after[1] - before[1]],
        [1, 0],
        "a reader leaving another deletes its fields"
    );
    let stored = support::stored(&server, "last:two");
    assert_eq!(stored.holders().len(), 1, "the other reader holds on");
    assert_eq!(stored.total(), 1);
    second.unlock().await.expect("unlock");
}
