//! `#[distributed_lock]` without `client = ..` uses the global client. The global
//! client is process-wide, so this file is its own test binary, and only its first
//! test touches the global client; the other one passes its client.
#![cfg(feature = "macros")]

mod support;

use distlock::{current_lock, distributed_lock, LockClient, LockError, MAX_NAME_LEN};

#[distributed_lock(key = "global:{id}")]
async fn with_global(id: u32, ran: &mut bool) -> Result<String, LockError> {
    *ran = true;
    Ok(current_lock().expect("in the lock scope").name().to_owned())
}

#[distributed_lock(key = "{name}")]
async fn named_global(name: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(key = "{name}", client = locks)]
async fn named_with(locks: &LockClient, name: &str) -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock(keys = ["cart:{cart}", "{sku}"], client = locks)]
async fn several_with(locks: &LockClient, cart: u32, sku: &str) -> Result<(), LockError> {
    Ok(())
}

/// Whether `err` is an `InvalidName` naming `function`, in its field and message.
fn invalid_name_of(err: &LockError, function: &str) -> bool {
    matches!(err, LockError::InvalidName { function: Some(named), .. } if *named == function)
        && err
            .to_string()
            .starts_with(&format!("`{function}`: invalid lock name: "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_client_missing_then_installed() {
    let mut ran = false;
    let err = with_global(1, &mut ran)
        .await
        .expect_err("no global client yet");
    assert!(err.is_no_global_client(), "{err}");
    assert!(!ran, "the body does not run without a lock");
    // The message names the function, whose attribute asked for the global client.
    assert!(
        matches!(
            err,
            LockError::NoGlobalClient {
                function: Some("macro_global::with_global"),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(
            "`macro_global::with_global`: no global lock client is installed: call \
             `LockClient::builder().url(..).connect().await?.install_global()`"
        ),
        "{err}"
    );
    // `global()` itself names no function.
    let err = distlock::global().expect_err("no global client yet");
    assert!(
        matches!(err, LockError::NoGlobalClient { function: None, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .starts_with("no global lock client is installed"),
        "{err}"
    );

    let server = support::server();
    let installed = support::client(&server)
        .await
        .install_global()
        .expect("the first client is installed");
    // Installing it again, or a clone, changes nothing.
    installed
        .clone()
        .install_global()
        .expect("the installed client again");
    // Another client is refused, with what to do, and comes back usable; the first
    // stays installed.
    let other = support::builder(&server)
        .namespace("other")
        .connect()
        .await
        .expect("connect");
    let refused = other.install_global().expect_err("a second client");
    assert!(
        refused
            .to_string()
            .starts_with("a global lock client is installed already, and stays"),
        "{refused}"
    );
    assert!(refused.to_string().contains("`client = ..`"), "{refused}");
    let other = refused.into_client();
    assert_eq!(other.namespace(), "other");
    let guard = other
        .lock("global:other")
        .await
        .expect("the refused client works");
    guard.unlock().await.expect("unlock");
    assert_eq!(
        distlock::global().expect("installed").namespace(),
        installed.namespace()
    );

    assert_eq!(with_global(1, &mut ran).await.expect("locked"), "global:1");
    assert!(ran);
    assert_eq!(support::redis_count(&server, "global:1"), 0);

    // A name the key template made that cannot be used names the function too.
    let err = named_global("").await.expect_err("an empty name");
    assert!(invalid_name_of(&err, "macro_global::named_global"), "{err}");
    assert!(err.is_invalid_input(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_name_from_a_template_names_the_function() {
    let server = support::server();
    let locks = support::client(&server).await;

    let err = named_with(&locks, "").await.expect_err("an empty name");
    assert!(invalid_name_of(&err, "macro_global::named_with"), "{err}");
    assert!(err.to_string().contains("the name is empty"), "{err}");

    let long = "x".repeat(MAX_NAME_LEN + 1);
    let err = named_with(&locks, &long).await.expect_err("a long name");
    assert!(invalid_name_of(&err, "macro_global::named_with"), "{err}");
    assert!(err.to_string().contains("over the limit"), "{err}");

    // With `keys = [..]`: one name of the set is empty.
    let err = several_with(&locks, 7, "")
        .await
        .expect_err("an empty name");
    assert!(invalid_name_of(&err, "macro_global::several_with"), "{err}");
    assert_eq!(support::redis_count(&server, "cart:7"), 0, "nothing taken");

    // The same names given to the client directly name no function.
    let err = locks.lock("").await.expect_err("an empty name");
    assert!(
        matches!(err, LockError::InvalidName { function: None, .. }),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("invalid lock name: "), "{err}");
}
