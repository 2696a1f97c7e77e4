//! Group commit of new acquisitions: the acquisitions of one client that are ready
//! at the same moment go to Redis as one run of `acquire.lua`, and each is answered
//! as if it ran alone (lock-core/src/batch.rs).

mod support;

use distlock::{LockClient, LockError, LockGuard};

/// `try_lock`s every name from a task of its own, all at one moment; returns each
/// result, in the order of `names`.
async fn try_together(
    locks: &LockClient,
    names: &[String],
) -> Vec<Result<Option<LockGuard>, LockError>> {
    let requests = names
        .iter()
        .map(|name| {
            let (locks, name) = (locks.clone(), name.clone());
            async move { locks.try_lock(name).await }
        })
        .collect();
    support::all_at_once(requests).await
}

/// 64 new acquisitions at one moment share script runs, and each is taken once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisitions_ready_together_share_script_runs() {
    const LOCKS: usize = 64;
    let server = support::server();
    let locks = support::client(&server).await;
    let names: Vec<String> = (0..LOCKS).map(|i| format!("take:{i}")).collect();
    let before = support::script_calls(&server);
    let results = try_together(&locks, &names).await;
    let runs = support::script_calls(&server) - before;
    let mut guards = Vec::new();
    for (name, result) in names.iter().zip(results) {
        let guard = result.expect("try_lock").expect("a free lock is taken");
        assert_eq!(support::redis_count(&server, name), 1, "{name}");
        guards.push(guard);
    }
    println!("{LOCKS} acquisitions at one moment took {runs} script runs");
    assert!(
        runs <= (LOCKS / 4) as u64,
        "{LOCKS} acquisitions at one moment took {runs} script runs"
    );
    for guard in guards {
        guard.unlock().await.expect("unlock");
    }
}

/// With `group_commit(false)` every acquisition and every release is a script run
/// of its own: 64 acquisitions at one moment take 64 runs, their releases 64 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_group_commit_each_request_is_a_run_of_its_own() {
    const LOCKS: usize = 64;
    let server = support::server();
    let locks = support::builder(&server)
        .group_commit(false)
        .connect()
        .await
        .expect("connect");
    let names: Vec<String> = (0..LOCKS).map(|i| format!("alone:{i}")).collect();
    let before = support::script_calls(&server);
    let results = try_together(&locks, &names).await;
    assert_eq!(support::script_calls(&server) - before, LOCKS as u64);
    let guards: Vec<LockGuard> = results
        .into_iter()
        .map(|result| result.expect("try_lock").expect("a free lock is taken"))
        .collect();
    let before = support::script_calls(&server);
    let releases = guards.into_iter().map(|guard| guard.unlock()).collect();
    for released in support::all_at_once(releases).await {
        released.expect("unlock");
    }
    assert_eq!(support::script_calls(&server) - before, LOCKS as u64);
    assert_eq!(
        server.cmd(&["DBSIZE"]).expect("DBSIZE").trim(),
        "0",
        "every lock freed, and no final-release record left (one server, renewed holds: \
         the client asks for none)"
    );
}

/// A batch with free names, names held by another client and names held as
/// another kind: each is answered as if it ran alone, and only the free ones change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_answers_each_acquisition_as_if_it_ran_alone() {
    const LOCKS: usize = 30;
    let server = support::server();
    let [locks, other] = support::clients(&server).await;
    let names: Vec<String> = (0..LOCKS).map(|i| format!("mixed:{i}")).collect();
    let mut held = Vec::new();
    for (i, name) in names.iter().enumerate() {
        match i % 3 {
            1 => held.push(other.lock(name.as_str()).await.expect("held by another")),
            2 => held.push(other.read_lock(name.as_str()).await.expect("a read lock")),
            _ => {}
        }
    }
    let before: Vec<_> = names
        .iter()
        .map(|name| support::stored(&server, name))
        .collect();
    let results = try_together(&locks, &names).await;
    for (i, (name, result)) in names.iter().zip(results).enumerate() {
        match (i % 3, result) {
            (0, Ok(Some(guard))) => {
                assert_eq!(support::redis_count(&server, name), 1);
                guard.unlock().await.expect("unlock");
            }
            (1, Ok(None)) => assert_eq!(support::stored(&server, name), before[i]),
            (2, Err(LockError::KindConflict { .. })) => {
                assert_eq!(support::stored(&server, name), before[i]);
            }
            (kind, result) => panic!("{name} ({kind}): {result:?}"),
        }
    }
    for guard in held {
        guard.unlock().await.expect("unlock");
    }
}
