//! Reliability: security — unguessable owners, foreign owners change nothing,
//! passwords and ACL users, the minimal ACL of a lock user, missing permissions.

mod support;

use std::collections::HashSet;
use std::future::IntoFuture;
use std::time::Duration;

use distlock::layout::args::{Args, Release, ReleaseRun, Renew};
use distlock::{LockClient, LockError, LockGuard};
use distlock_testkit::RedisServer;
use support::{set_user, LOCK_USER_ACL};

/// A script as the client sends it: its first line, the layout and how every
/// script reads a lock (`lock.lua`), its text.
fn script(body: &str) -> redis::Script {
    let lock = include_str!("../lua/lock.lua");
    redis::Script::new(&format!("#!lua flags=allow-oom\n{lock}{body}"))
}

fn release_script() -> redis::Script {
    script(include_str!("../lua/release.lua"))
}

fn renew_script() -> redis::Script {
    script(include_str!("../lua/renew.lua"))
}

async fn dump(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<Vec<u8>> {
    redis::cmd("DUMP")
        .arg(key)
        .query_async(conn)
        .await
        .expect("DUMP")
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// The UUID a client id stands for: its 128 bits in 22 characters of
/// `[0-9A-Za-z-_]`, six bits each, the lowest first (the client's own encoding,
/// which keeps holder field names short); `None` when `id` is not one.
fn client_uuid(id: &str) -> Option<uuid::Uuid> {
    const DIGITS: &[u8; 64] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";
    if id.len() != 22 {
        return None;
    }
    let mut bits: u128 = 0;
    for (i, byte) in id.bytes().enumerate() {
        let digit = DIGITS.iter().position(|d| *d == byte)? as u128;
        // The last character carries the two highest bits only.
        if i == 21 && digit > 3 {
            return None;
        }
        bits |= digit << (6 * i);
    }
    Some(uuid::Uuid::from_u128(bits))
}

#[test]
fn a_million_owner_uuids_are_v4_and_unique() {
    let mut seen = HashSet::with_capacity(1_000_000);
    for _ in 0..1_000_000 {
        let id = uuid::Uuid::new_v4();
        assert_eq!(id.get_version_num(), 4);
        assert!(seen.insert(id.as_u128()), "a duplicate owner id");
    }
    support::summary(
        "security_uuid_draws",
        &[("draws", 1_000_000), ("duplicates", 0)],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_ids_seen_in_redis_are_unguessable_and_distinct() {
    let server = support::server();
    let mut redis = support::conn(&server.url()).await;
    let mut owners = HashSet::new();
    let mut client_ids = HashSet::new();
    for c in 0..20 {
        let locks = LockClient::builder()
            .url(server.url())
            .connect()
            .await
            .expect("connect");
        for n in 0..50 {
            let guard = locks.lock(format!("owner:{c}:{n}")).await.expect("lock");
            let key = support::lock_key(&format!("owner:{c}:{n}"));
            let stored = support::stored_over(&mut redis, &key).await;
            // The one holder's field is its owner id (lua/lock.lua).
            assert_eq!(stored.holders().len(), 1, "{stored:?}");
            let owner = stored.holders().keys().next().expect("an owner").clone();
            let (client, counter) = owner.split_once(':').expect("<client id>:<counter>");
            let uuid = client_uuid(client).unwrap_or_else(|| panic!("a client id: {owner}"));
            assert_eq!(uuid.get_version_num(), 4, "{owner}");
            assert!(counter.parse::<u64>().is_ok(), "{owner}");
            client_ids.insert(uuid);
            assert!(owners.insert(owner.clone()), "owner {owner} seen twice");
            guard.unlock().await.expect("unlock");
        }
    }
    support::summary(
        "security_owner_ids",
        &[
            ("owners", owners.len() as u64),
            ("clients", client_ids.len() as u64),
        ],
    );
    assert_eq!(client_ids.len(), 20, "one UUID per client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_owner_can_neither_release_nor_renew() {
    let server = support::server();
    let locks = support::fenced(&server.url()).await;
    let mut redis = support::conn(&server.url()).await;
    let lock = support::lock_key("guarded");
    let key = lock.as_str();
    let guard = locks.lock("guarded").await.expect("lock");
    let before = dump(&mut redis, key).await;
    let ttl_before = pttl(&mut redis, key).await;
    let foreign = format!("{}:0", uuid::Uuid::new_v4().simple());

    let mut release = ReleaseRun {
        publish: "PUBLISH",
        remember_ms: 2_000,
    }
    .to_call();
    Release {
        lock: key.as_bytes(),
        owner: &foreign,
        lease_ms: 1,
        seq: 424_242,
        floor: 0,
        successor: None,
        record: true,
    }
    .push_to(&mut release);
    let released: Vec<Vec<i64>> = support::invoke(&release_script(), &release)
        .invoke_async(&mut redis)
        .await
        .expect("release.lua");
    let renew = Renew {
        lock: key.as_bytes(),
        owner: &foreign,
        lease_ms: 86_400_000,
        write_back: None,
        name: None,
    };
    let renewed: Vec<i64> = support::invoke(&renew_script(), &renew.to_call())
        .invoke_async(&mut redis)
        .await
        .expect("renew.lua");
    let after = dump(&mut redis, key).await;
    let ttl_after = pttl(&mut redis, key).await;
    support::summary(
        "security_foreign_owner",
        &[
            ("release_refused", u64::from(released == [vec![-1]])),
            ("renew_refused", u64::from(renewed == [0])),
        ],
    );
    assert_eq!(released, vec![vec![-1]], "a foreign release was applied");
    assert_eq!(renewed, [0], "a foreign renewal was applied");
    assert_eq!(before, after, "the lock changed");
    assert!(
        ttl_after <= ttl_before,
        "the lease was extended: {ttl_before} -> {ttl_after}"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.expect("unlock");
}

/// Sets `requirepass` on a running server. The testkit's own commands are
/// unauthenticated, so after this only authenticated clients talk to it.
fn require_password(server: &RedisServer, password: &str) {
    server
        .cmd(&["CONFIG", "SET", "requirepass", password])
        .expect("CONFIG SET requirepass");
}

/// Takes, waits for (across two clients) and releases a fenced lock with `url`.
async fn exercise(url: &str) -> Result<(), LockError> {
    let a = LockClient::builder()
        .url(url)
        .fencing(true)
        .connect()
        .await?;
    let b = LockClient::builder()
        .url(url)
        .fencing(true)
        .connect()
        .await?;
    let guard = a.lock("acl").await?;
    let waiter = tokio::spawn(async move {
        let guard = b.lock("acl").wait(Duration::from_secs(5)).await?;
        let token = guard.fencing_token();
        guard.unlock().await?;
        Ok::<_, LockError>(token)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let first = guard.fencing_token();
    let inner = guard.scope(a.lock("acl").into_future()).await?;
    assert_eq!(inner.hold_count(), 2, "a re-entry");
    inner.unlock().await?;
    guard.unlock().await?;
    let second = waiter.await.expect("waiter")?;
    assert!(second > first, "{second:?} after {first:?}");
    let info = a.inspect("acl").await?;
    assert!(!info.held);
    let guard = a.lock("acl").await?;
    assert!(a.force_unlock("acl").await?);
    assert!(guard.unlock().await.is_err_and(|err| err.is_lost()));
    // Read-write locks and semaphores: a writer that waits (and takes its place
    // back), readers, a permit, inspect and force-unlock.
    let reading = a.read_lock("acl:rw").await?;
    let writer = a
        .write_lock("acl:rw")
        .wait(Duration::from_millis(100))
        .await;
    assert!(writer.is_err_and(|err| err.is_timeout()));
    let info = a.inspect("acl:rw").await?;
    assert_eq!(info.holders.len(), 1);
    reading.unlock().await?;
    let writing = a.write_lock("acl:rw").await?;
    writing.unlock().await?;
    let permit = a.semaphore("acl:sem", 2).acquire().await?;
    assert!(a.force_unlock("acl:sem").await?);
    assert!(permit.unlock().await.is_err_and(|err| err.is_lost()));
    Ok(())
}

/// A server with `requirepass` refuses a client without the password and one with a
/// wrong password at once (not retried until the connect timeout), saying to check
/// the password; with it, every operation works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_protected_server_needs_the_password() {
    let server = support::server();
    require_password(&server, "s3cret-pass");
    let port = server.port();
    let started = std::time::Instant::now();
    let denied = LockClient::builder()
        .url(format!("redis://127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("no password");
    let denied_after = started.elapsed();
    let started = std::time::Instant::now();
    let wrong = LockClient::builder()
        .url(format!("redis://:wrong@127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("a wrong password");
    let wrong_after = started.elapsed();
    exercise(&format!("redis://:s3cret-pass@127.0.0.1:{port}/"))
        .await
        .expect("locks with the password");
    support::summary(
        "security_requirepass",
        &[("refused_without", 1), ("refused_wrong", 1)],
    );
    assert!(denied.is_redis(), "{denied:?}");
    assert!(wrong.is_redis(), "{wrong:?}");
    // Issue 26: a missing password was retried until the connect timeout (2 s), with
    // a message about reachability; now both fail at once, naming the password.
    for (err, after) in [(&denied, denied_after), (&wrong, wrong_after)] {
        assert!(after < Duration::from_millis(500), "{err} after {after:?}");
        assert!(err.to_string().contains("password"), "{err}");
    }
    assert!(
        !format!("{wrong} {wrong:?}").contains("wrong@"),
        "the password leaked into the error: {wrong:?}"
    );
}

/// [`LOCK_USER_ACL`] less the rules `left_out` picks.
fn acl_without(left_out: impl Fn(&str) -> bool) -> Vec<&'static str> {
    LOCK_USER_ACL
        .iter()
        .copied()
        .filter(|rule| !left_out(rule))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_is_enough_for_every_operation() {
    let server = support::server();
    let url = set_user(&server, "locker", LOCK_USER_ACL);
    let result = exercise(&url).await;
    let log = server.cmd(&["ACL", "LOG"]).unwrap_or_default();
    support::summary(
        "security_minimal_acl",
        &[("acl_rules", LOCK_USER_ACL.len() as u64)],
    );
    result.unwrap_or_else(|err| panic!("{err}\nACL LOG:\n{log}"));
    assert!(log.is_empty(), "ACL denials:\n{log}");
}

/// A user who may not use Redis functions (no `fcall`, no `function|load`) still
/// gets every operation: its client runs the scripts by `EVALSHA` instead, and
/// says so once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_function_permission_runs_the_scripts_by_evalsha() {
    let server = support::server();
    let rules = acl_without(|rule| matches!(rule, "+fcall" | "+function|load"));
    let url = set_user(&server, "nofunctions", &rules);
    exercise(&url).await.expect("every operation");
    assert_eq!(support::command_calls(&server, "fcall"), 0);
    assert!(support::command_calls(&server, "evalsha") > 10);
    let libraries = server.cmd(&["FUNCTION", "LIST"]).expect("FUNCTION LIST");
    assert!(!libraries.contains("distlock_"), "{libraries}");
}

/// A user without channel permission takes a lock and tries to release it; returns
/// the error and the DUMP of the lock before and after.
async fn release_without_channel_permission() -> (LockError, Option<Vec<u8>>, Option<Vec<u8>>) {
    let server = support::server();
    let rules = acl_without(|rule| rule == "&distlock:*");
    let url = set_user(&server, "nochannel", &rules);
    let locks = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connect");
    let mut redis = support::conn(&server.url()).await;
    let guard = locks.lock("nopub").await.expect("lock");
    let before = dump(&mut redis, &support::lock_key("nopub")).await;
    let err = guard
        .unlock()
        .await
        .expect_err("a release that cannot publish");
    let after = dump(&mut redis, &support::lock_key("nopub")).await;
    (err, before, after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_channel_permission_fails_and_changes_nothing() {
    let (err, before, after) = release_without_channel_permission().await;
    support::summary(
        "security_no_channel_permission",
        &[
            ("permission_denied", u64::from(err.is_permission_denied())),
            ("half_applied", u64::from(before != after)),
        ],
    );
    assert!(err.is_permission_denied() || err.is_redis(), "{err:?}");
    assert!(before.is_some());
    assert_eq!(before, after, "a half-applied release");
}

/// Observed on Redis 7.0: the script's refused PUBLISH comes back as
/// `LockError::Redis(ResponseError: The user executing the script can't publish to
/// the channel ...)`, with no NOPERM code, so it is not mapped to PermissionDenied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_without_channel_permission_is_permission_denied() {
    let (err, _, _) = release_without_channel_permission().await;
    assert!(err.is_permission_denied(), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_script_permission_gets_permission_denied() {
    let server = support::server();
    let rules = acl_without(|rule| {
        matches!(
            rule,
            "+evalsha" | "+script|load" | "+fcall" | "+function|load"
        )
    });
    let url = set_user(&server, "noscript", &rules);
    let err = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect_err("no script permission");
    support::summary(
        "security_no_script_permission",
        &[("permission_denied", u64::from(err.is_permission_denied()))],
    );
    assert!(err.is_permission_denied(), "{err:?}");
    assert_eq!(server.cmd(&["DBSIZE"]).expect("DBSIZE"), "0");
}

/// A user who may not run a command that the scripts call on a lock (here
/// `exists`, a new acquisition's first look) is told it lacks a permission, not that
/// the lock's key holds something foreign; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_refused_inside_a_script_is_permission_denied_not_a_conflict() {
    let server = support::server();
    let rules = acl_without(|rule| rule == "+exists");
    let url = set_user(&server, "noexists", &rules);
    let locks = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connect");
    let err = locks
        .try_lock("noexists")
        .await
        .expect_err("exists refused");
    assert!(err.is_permission_denied(), "{err:?}");
    assert!(!err.is_key_conflict(), "{err:?}");
    assert_eq!(server.cmd(&["DBSIZE"]).expect("DBSIZE"), "0");
}

/// Issue 24 (5a): a batched run of `release.lua` in which one release is refused
/// midway (its `PUBLISH`, on a channel the user may not use) after earlier releases
/// of the run were applied. Each release is answered for what it did: the applied
/// ones `Ok`, the refused one `PermissionDenied`, its lock still held and unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_refused_midway_through_a_batch_leaves_the_others_answered() {
    const LOCKS: usize = 24;
    let server = support::server();
    // Every channel but those of the `bad:` locks.
    let mut rules = acl_without(|rule| rule == "&distlock:*");
    rules.push("&distlock:{ok:*");
    let url = set_user(&server, "halfchannels", &rules);
    let locks = LockClient::builder()
        .url(url)
        .connect()
        .await
        .expect("connect");
    let names: Vec<String> = (0..LOCKS)
        .map(|i| {
            if i % 6 == 3 {
                format!("bad:{i}")
            } else {
                format!("ok:{i}")
            }
        })
        .collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locks.lock(name.as_str()).await.expect("lock"));
    }
    let before = support::script_calls(&server);
    let results = support::all_at_once(guards.into_iter().map(LockGuard::unlock).collect()).await;
    let runs = support::script_calls(&server) - before;
    assert!(
        runs < LOCKS as u64,
        "{LOCKS} releases at one moment took {runs} script runs: not batched"
    );
    for (name, result) in names.iter().zip(&results) {
        if name.starts_with("ok:") {
            assert!(result.is_ok(), "{name}: applied, yet {result:?}");
            assert_eq!(support::redis_count(&server, name), 0, "{name}");
        } else {
            assert!(
                matches!(result, Err(err) if err.is_permission_denied()),
                "{name}: {result:?}"
            );
            assert_eq!(
                support::redis_count(&server, name),
                1,
                "{name} is still held"
            );
        }
    }
}
