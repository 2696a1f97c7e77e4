//! `redis_server_binary` and the `REDIS_SERVER` variable.
//!
//! Alone in its own test binary (one process) because it changes the environment.

use distlock_testkit::{redis_server_binary, RedisServer, REDIS_SERVER_ENV};

#[test]
fn redis_server_env_then_path() {
    let found = redis_server_binary().expect("redis-server is installed for the tests");

    std::env::set_var(REDIS_SERVER_ENV, &found);
    assert_eq!(redis_server_binary().expect("explicit path"), found);

    // A bare name is searched on PATH.
    std::env::set_var(REDIS_SERVER_ENV, "sh");
    assert!(redis_server_binary().expect("sh on PATH").ends_with("sh"));

    std::env::set_var(REDIS_SERVER_ENV, "/nonexistent/redis-server");
    let err = redis_server_binary().expect_err("bad REDIS_SERVER");
    assert!(err.is_missing_binary());
    let message = err.to_string();
    for hint in [
        "REDIS_SERVER=/nonexistent/redis-server",
        "apt-get install redis-server",
        "brew install redis",
        "cargo xtask test",
        "docker run",
    ] {
        assert!(message.contains(hint), "{hint:?} missing from:\n{message}");
    }
    let err = RedisServer::start().expect_err("start without a binary");
    assert!(err.is_missing_binary(), "{err:?}");

    std::env::remove_var(REDIS_SERVER_ENV);
    let path = std::env::var_os("PATH");
    std::env::set_var("PATH", "/nonexistent");
    let err = redis_server_binary().expect_err("nothing on PATH");
    assert!(err.to_string().contains("not found"), "{err}");
    if let Some(path) = path {
        std::env::set_var("PATH", path);
    }
    assert_eq!(redis_server_binary().expect("found again"), found);
}
