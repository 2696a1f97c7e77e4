//! `#[distributed_lock]` without `client = ..` uses the global client. The global
//! client is process-wide, so this file is its own test binary with one test.
#![cfg(feature = "macros")]

mod support;

use distlock::{current_lock, distributed_lock, LockError};

#[distributed_lock(key = "global:{id}")]
async fn with_global(id: u32, ran: &mut bool) -> Result<String, LockError> {
    *ran = true;
    Ok(current_lock().expect("in the lock scope").name().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_client_missing_then_installed() {
    let mut ran = false;
    let err = with_global(1, &mut ran)
        .await
        .expect_err("no global client yet");
    assert!(err.is_no_global_client(), "{err}");
    assert!(!ran, "the body does not run without a lock");

    let server = support::server();
    support::client(&server).await.install_global();
    assert_eq!(with_global(1, &mut ran).await.expect("locked"), "global:1");
    assert!(ran);
    assert_eq!(support::redis_count(&server, "global:1"), 0);
}
