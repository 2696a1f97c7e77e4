//! The stored lock is the model users ask for: every kind of lock is one Redis hash
//! whose fields are its holders' owner ids and whose values are their hold counts
//! (`lua/lock.lua`, `distlock::layout`). Read here with `HGETALL` as an operator
//! would, after every step; and a name is one kind at a time, free for any kind
//! once released.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use distlock::layout::{self, StoredLock};
use distlock::{LockClient, LockError, LockGuard};
use distlock_testkit::RedisServer;

/// The kinds of lock a name can be taken as.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Plain,
    Fair,
    Read,
    Write,
    Permit,
}

const KINDS: [Kind; 5] = [
    Kind::Plain,
    Kind::Fair,
    Kind::Read,
    Kind::Write,
    Kind::Permit,
];

impl Kind {
    /// Takes `name` as this kind, waiting up to 2 s.
    fn take<'a>(
        self,
        locks: &'a LockClient,
        name: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<LockGuard, LockError>> + Send + 'a>> {
        let wait = Duration::from_secs(2);
        match self {
            Kind::Plain => Box::pin(locks.lock(name).wait(wait).into_future()),
            Kind::Fair => Box::pin(locks.fair_lock(name).wait(wait).into_future()),
            Kind::Read => Box::pin(locks.read_lock(name).wait(wait).into_future()),
            Kind::Write => Box::pin(locks.write_lock(name).wait(wait).into_future()),
            Kind::Permit => Box::pin(locks.semaphore(name, 3).acquire().wait(wait).into_future()),
        }
    }

    /// The `#kind` field this kind writes.
    fn stored(self) -> &'static str {
        match self {
            Kind::Plain => "lock",
            Kind::Fair => "fair",
            Kind::Read | Kind::Write => "rw",
            Kind::Permit => "semaphore",
        }
    }
}

use std::future::IntoFuture;

/// The one holder of `lock` and its count (panics when there is not exactly one).
fn only_holder(lock: &StoredLock) -> (String, u64) {
    assert_eq!(lock.holders().len(), 1, "one holder: {lock:?}");
    let (owner, count) = lock.holders().iter().next().expect("a holder");
    (owner.clone(), *count)
}

/// Re-enters `name` three deep as `kind`, checking the hash after every step on the
/// way in and out: `<owner> → 1, 2, 3`, then 2, 1, and no field (nor key) at the end.
async fn three_deep(server: &RedisServer, locks: &LockClient, kind: Kind, name: &str) {
    let first = kind.take(locks, name).await.expect("first");
    let stored = support::stored(server, name);
    let (owner, count) = only_holder(&stored);
    assert_eq!(count, 1, "{kind:?}: {stored:?}");
    assert_eq!(stored.kind(), Some(kind.stored()), "{kind:?}");
    assert_eq!(
        stored.meta().get(layout::LAYOUT).map(String::as_str),
        Some(layout::LAYOUT_VERSION)
    );
    let second = first.scope(kind.take(locks, name)).await.expect("second");
    assert_eq!(support::stored(server, name).count(&owner), 2, "{kind:?}");
    let third = second.scope(kind.take(locks, name)).await.expect("third");
    assert_eq!(third.hold_count(), 3);
    let stored = support::stored(server, name);
    assert_eq!(only_holder(&stored), (owner.clone(), 3), "{kind:?}");
    assert!(
        stored.record(&owner).is_some(),
        "{kind:?}: the replay record"
    );
    third.unlock().await.expect("third");
    assert_eq!(
        only_holder(&support::stored(server, name)),
        (owner.clone(), 2)
    );
    second.unlock().await.expect("second");
    assert_eq!(
        only_holder(&support::stored(server, name)),
        (owner.clone(), 1)
    );
    first.unlock().await.expect("first");
    let stored = support::stored(server, name);
    assert!(stored.holders().is_empty(), "{kind:?}: {stored:?}");
    assert!(
        !support::exists(server, &support::lock_key(name)),
        "{kind:?}: a lock nobody holds has no key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_counts_re_entries_in_its_holder_s_field() {
    let server = support::server();
    let locks = support::client(&server).await;
    for kind in KINDS {
        three_deep(&server, &locks, kind, &format!("layout:{kind:?}")).await;
    }
}

/// Two readers are two fields, and so are two permits; a writer is named by
/// `#writer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_holders_are_a_field_each() {
    let server = support::server();
    let locks = support::client(&server).await;
    for kind in [Kind::Read, Kind::Permit] {
        let name = format!("layout:two:{kind:?}");
        let a = kind.take(&locks, &name).await.expect("a");
        let b = kind.take(&locks, &name).await.expect("b");
        let stored = support::stored(&server, &name);
        assert_eq!(
            stored.holders().values().collect::<Vec<_>>(),
            [&1, &1],
            "{stored:?}"
        );
        for owner in stored.holders().keys() {
            assert!(stored.lease_end(owner).is_some(), "{kind:?}: its own lease");
        }
        a.unlock().await.expect("a");
        assert_eq!(support::stored(&server, &name).holders().len(), 1);
        b.unlock().await.expect("b");
        assert!(!support::exists(&server, &support::lock_key(&name)));
    }
    let writer = locks.write_lock("layout:writer").await.expect("writer");
    let stored = support::stored(&server, "layout:writer");
    let (owner, _) = only_holder(&stored);
    assert_eq!(stored.writer(), Some(owner.as_str()));
    writer.unlock().await.expect("unlock");
}

/// Each name of a set is such a hash, re-entered with the set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_name_of_a_set_is_a_hash_of_its_own() {
    let server = support::server();
    let locks = support::client(&server).await;
    let names = ["layout:set:a", "layout:set:b"];
    let counts = |server: &RedisServer| {
        names.map(|name| {
            let stored = support::stored(server, name);
            assert!(stored.holders().len() <= 1, "{stored:?}");
            stored.total()
        })
    };
    let outer = locks.lock_all(names).await.expect("outer");
    assert_eq!(counts(&server), [1, 1]);
    for name in names {
        assert_eq!(support::stored(&server, name).kind(), Some("lock"));
    }
    let inner = outer
        .scope(locks.lock_all(names).into_future())
        .await
        .expect("inner");
    assert_eq!(counts(&server), [2, 2]);
    inner.unlock().await.expect("inner");
    assert_eq!(counts(&server), [1, 1]);
    outer.unlock().await.expect("outer");
    assert_eq!(counts(&server), [0, 0]);
}

/// A held plain lock of a client with default settings stays a listpack, the
/// compact encoding, and small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_plain_lock_is_a_small_listpack() {
    let server = support::server();
    let locks = support::client(&server).await;
    let guard = locks.lock("layout:small").await.expect("lock");
    let key = support::lock_key("layout:small");
    let small = |when: &str| {
        assert_eq!(
            server.cmd(&["OBJECT", "ENCODING", &key]).expect("OBJECT"),
            "listpack",
            "{when}"
        );
        let bytes: u64 = server
            .cmd(&["MEMORY", "USAGE", &key])
            .expect("MEMORY")
            .parse()
            .expect("a number");
        println!("a held plain lock takes {bytes} bytes {when}");
        assert!(bytes <= 300, "{bytes} bytes for one held lock {when}");
        bytes
    };
    let unnamed = small("before its holder is named");
    // Named by its first renewal: still a listpack, the record within 64 bytes.
    let stored = support::named(&server, "layout:small").await;
    let (owner, _) = only_holder(&stored);
    let who = stored.who(&owner).expect("holder info");
    assert!(who.len() <= 64, "{who}");
    assert!(small("once named") > unnamed);
    guard.unlock().await.expect("unlock");
}

/// Released as one kind, a name can be taken at once as any other; held as one
/// kind, it is refused as another with an error naming the kind that holds it, and
/// nothing changes in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_is_one_kind_at_a_time_and_free_for_any_once_released() {
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let name = "layout:kinds";
    for held in KINDS {
        let guard = held.take(&locks, name).await.expect("held");
        let before = server
            .cmd(&["HGETALL", &support::lock_key(name)])
            .expect("HGETALL");
        for asked in KINDS {
            if asked.stored() == held.stored() {
                continue;
            }
            let err = asked
                .take(&other, name)
                .await
                .expect_err("another kind is refused");
            assert!(
                matches!(err, LockError::KindConflict { .. }) && err.is_key_conflict(),
                "{held:?} then {asked:?}: {err:?}"
            );
            let text = err.to_string();
            let named = match held {
                Kind::Plain => "held as a lock,",
                Kind::Fair => "held as a fair lock,",
                Kind::Read | Kind::Write => "held as a read-write lock,",
                Kind::Permit => "held as a semaphore,",
            };
            assert!(text.contains(named), "{held:?} then {asked:?}: {text}");
        }
        let after = server
            .cmd(&["HGETALL", &support::lock_key(name)])
            .expect("HGETALL");
        assert_eq!(before, after, "a refused kind wrote something");
        guard.unlock().await.expect("unlock");
        // At once, as the next kind.
        let next = KINDS[(KINDS
            .iter()
            .position(|k| k.stored() == held.stored())
            .unwrap_or(0)
            + 1)
            % KINDS.len()];
        let taken = next
            .take(&other, name)
            .await
            .expect("the next kind at once");
        taken.unlock().await.expect("unlock");
    }
}

/// A final release whose first reply is late is retried after 1, 2 and 5 other
/// owners took (and all but the last gave back) the lock in between: the retry
/// finds its owner holding nothing, and no record (the client asked for none: one
/// server, a live hold, no successor), which says the first try applied it; and
/// `unlock()` says `Ok`, as the release applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_retried_after_other_owners_took_the_lock_is_ok() {
    for others in [1, 2, 5] {
        let name = format!("layout:retried:{others}");
        let server = support::server();
        let proxy = support::proxy(&server);
        let holder = support::client_with_timeout(&proxy.url(), Duration::from_millis(300)).await;
        let other = support::client(&server).await;
        let guard = holder.lock(name.as_str()).await.expect("lock");
        let before = support::script_calls(&server);
        support::replies_late(&proxy, Duration::from_millis(450));
        let unlock = tokio::spawn(guard.unlock());
        let freed = support::eventually(Duration::from_millis(250), || {
            support::redis_count(&server, &name) == 0
        })
        .await;
        assert!(freed, "the first try of the release applied");
        let mut last = None;
        for i in 0..others {
            let taken = other
                .try_lock(name.as_str())
                .await
                .expect("try")
                .expect("free");
            if i + 1 < others {
                taken.unlock().await.expect("unlock");
            } else {
                last = Some(taken);
            }
        }
        support::replies_late(&proxy, Duration::ZERO);
        let result = unlock.await.expect("join");
        let calls = support::script_calls(&server) - before;
        // The release, its retry, and each other owner's acquire and release but
        // the last one's release.
        assert_eq!(
            calls,
            2 + 2 * others - 1,
            "{others} others: the release was retried"
        );
        assert_eq!(
            support::redis_count(&server, &name),
            1,
            "the last other holds it"
        );
        assert!(
            result.is_ok(),
            "{others} others: the release applied, yet {result:?}"
        );
        if let Some(last) = last {
            last.unlock().await.expect("unlock");
        }
    }
}

/// A final release leaves its record (`:freed:<owner>`) only when its client could
/// not otherwise tell an applied final release from a lost one
/// (`lua/release.lua`, "Records"): none for a renewed hold on one server; one for a
/// fixed lease that ends before the record would, and one for a release that hands
/// the lock to a waiter of its client (whose outcome a lost reply leaves to replays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_final_release_leaves_a_record_only_when_its_client_needs_one() {
    let server = support::server();
    let locks = support::client(&server).await;
    let records = |server: &RedisServer| -> Vec<String> {
        let keys = server.cmd(&["KEYS", "*:freed:*"]).expect("KEYS");
        keys.lines()
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect()
    };

    let guard = locks.lock("layout:record:renewed").await.expect("lock");
    guard.unlock().await.expect("unlock");
    assert!(records(&server).is_empty(), "{:?}", records(&server));

    let name = "layout:record:short";
    let guard = locks
        .lock(name)
        .lease(Duration::from_millis(500))
        .await
        .expect("lock");
    let owner = support::redis_holder(&server, name).expect("held");
    guard.unlock().await.expect("unlock");
    assert_eq!(records(&server), [support::freed_key(name, &owner)]);

    let name = "layout:record:handed";
    let guard = locks.lock(name).await.expect("lock");
    let owner = support::redis_holder(&server, name).expect("held");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock(name).wait(Duration::from_secs(5)).await }
    });
    let waiting = support::eventually(Duration::from_secs(2), || {
        support::channel_subscribers(&server, name) > 0
    })
    .await;
    assert!(waiting, "the waiter never subscribed");
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.unlock().await.expect("unlock");
    let handed = waiter.await.expect("join").expect("the waiter has it");
    assert!(
        records(&server).contains(&support::freed_key(name, &owner)),
        "{:?}",
        records(&server)
    );
    handed.unlock().await.expect("unlock");
}
