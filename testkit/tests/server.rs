//! `RedisServer` against real redis-server processes.

use std::net::TcpListener;
use std::path::Path;
use std::thread;
use std::time::Duration;

use distlock_testkit::{start_many, RedisServer, TestkitError};

/// Whether `pid` no longer names a live process (gone, or a zombie nobody reaped).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses: "123 (redis-server) Z ...".
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

#[test]
fn start_answers_ping_and_commands() {
    let server = RedisServer::start().expect("start redis-server");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/", server.port())
    );
    assert_eq!(
        server.addr().to_string(),
        format!("127.0.0.1:{}", server.port())
    );
    assert!(server.addr().ip().is_loopback());
    assert!(server.pid() > 0);

    assert_eq!(server.cmd(&["PING"]).expect("PING"), "PONG");
    assert_eq!(server.cmd(&["SET", "k", "v"]).expect("SET"), "OK");
    assert_eq!(server.cmd(&["GET", "k"]).expect("GET"), "v");
    assert_eq!(server.cmd(&["GET", "missing"]).expect("GET"), "(nil)");
    assert_eq!(server.cmd(&["INCR", "n"]).expect("INCR"), "1");
    assert_eq!(server.cmd(&["RPUSH", "l", "a", "b c"]).expect("RPUSH"), "2");
    assert_eq!(
        server.cmd(&["LRANGE", "l", "0", "-1"]).expect("LRANGE"),
        "a\nb c"
    );
    assert_eq!(
        server.cmd(&["LRANGE", "none", "0", "-1"]).expect("LRANGE"),
        ""
    );
    // Persistence is off, as the testkit promises.
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "save"]).expect("CONFIG"),
        "save\n"
    );
    assert_eq!(
        server
            .cmd(&["CONFIG", "GET", "appendonly"])
            .expect("CONFIG"),
        "appendonly\nno"
    );
}

#[test]
fn cmd_returns_error_replies_as_errors() {
    let server = RedisServer::start().expect("start redis-server");
    match server.cmd(&["NOSUCHCOMMAND", "x"]) {
        Err(TestkitError::Reply(message)) => {
            assert!(message.starts_with("ERR unknown command"), "{message}")
        }
        other => panic!("expected an error reply, got {other:?}"),
    }
    server.cmd(&["SET", "k", "v"]).expect("SET");
    let err = server
        .cmd(&["LPUSH", "k", "x"])
        .expect_err("LPUSH on a string");
    assert!(err.is_reply(), "{err:?}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    // The connection was fresh for each command: the server is still fine.
    assert_eq!(server.cmd(&["GET", "k"]).expect("GET"), "v");
}

#[test]
fn builder_passes_extra_arguments() {
    let server = RedisServer::builder()
        .arg("--maxmemory")
        .arg("1mb")
        .args(["--maxmemory-policy", "noeviction"])
        .start()
        .expect("start redis-server");
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "maxmemory"]).expect("CONFIG"),
        "maxmemory\n1048576"
    );
    assert_eq!(
        server
            .cmd(&["CONFIG", "GET", "maxmemory-policy"])
            .expect("CONFIG"),
        "maxmemory-policy\nnoeviction"
    );
}

#[test]
fn bad_argument_reports_the_server_output() {
    let err = RedisServer::builder()
        .arg("--no-such-directive")
        .arg("1")
        .start()
        .expect_err("redis-server rejects an unknown directive");
    match &err {
        TestkitError::Exited { log_tail, .. } => {
            assert!(log_tail.contains("no-such-directive"), "{log_tail}")
        }
        other => panic!("expected Exited, got {other:?}"),
    }
}

#[test]
fn missing_binary_is_a_spawn_error() {
    let err = RedisServer::builder()
        .binary("/nonexistent/redis-server")
        .start()
        .expect_err("no such binary");
    assert!(matches!(err, TestkitError::Spawn { .. }), "{err:?}");
}

#[test]
fn pause_makes_commands_time_out_and_resume_restores_them() {
    let server = RedisServer::start().expect("start redis-server");
    server.pause().expect("SIGSTOP");
    let err = server
        .cmd_timeout(&["PING"], Duration::from_millis(300))
        .expect_err("a paused server does not answer");
    assert!(err.is_timeout(), "{err:?}");
    server.resume().expect("SIGCONT");
    assert_eq!(server.cmd(&["PING"]).expect("PING after resume"), "PONG");
}

#[test]
fn restart_empties_the_data_and_keeps_the_port() {
    let mut server = RedisServer::start().expect("start redis-server");
    let port = server.port();
    let old_pid = server.pid();
    server.cmd(&["SET", "k", "v"]).expect("SET");

    server.restart().expect("restart");
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), old_pid);
    assert!(process_gone(old_pid), "the old process is still alive");
    assert_eq!(server.cmd(&["GET", "k"]).expect("GET"), "(nil)");
    assert_eq!(server.cmd(&["DBSIZE"]).expect("DBSIZE"), "0");
}

#[test]
fn restart_a_paused_server() {
    let mut server = RedisServer::start().expect("start redis-server");
    server.pause().expect("SIGSTOP");
    server.restart().expect("restart");
    assert_eq!(server.cmd(&["PING"]).expect("PING"), "PONG");
}

#[test]
fn stop_is_idempotent_and_a_stopped_server_is_left_alone() {
    let mut server = RedisServer::start().expect("start redis-server");
    let pid = server.pid();
    assert!(server.is_running());
    server.stop().expect("stop");
    server.stop().expect("stop again");
    assert!(!server.is_running());
    assert!(process_gone(pid));
    assert!(server.cmd(&["PING"]).expect_err("stopped").is_not_running());
    assert!(server.pause().expect_err("stopped").is_not_running());
    assert!(server.resume().expect_err("stopped").is_not_running());

    server.restart().expect("restart after stop");
    assert!(server.is_running());
    assert_eq!(server.cmd(&["PING"]).expect("PING"), "PONG");
}

#[test]
fn restart_fails_while_another_process_holds_the_port() {
    let mut server = RedisServer::start().expect("start redis-server");
    let port = server.port();
    server.stop().expect("stop");
    let squatter = TcpListener::bind(("127.0.0.1", port)).expect("bind the freed port");
    let err = server.restart().expect_err("the port is taken");
    assert!(matches!(err, TestkitError::NoFreePort { .. }), "{err:?}");
    assert!(!server.is_running());

    drop(squatter);
    server.restart().expect("restart once the port is free");
    assert_eq!(server.port(), port);
    assert_eq!(server.cmd(&["PING"]).expect("PING"), "PONG");
}

#[test]
fn drop_kills_the_process_and_removes_its_directory() {
    let server = RedisServer::start().expect("start redis-server");
    let pid = server.pid();
    let debug = format!("{server:?}");
    let dir = debug
        .split("dir: Some(\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("Debug shows the directory")
        .to_owned();
    assert!(Path::new(&dir).is_dir(), "{dir}");
    assert!(!process_gone(pid));

    drop(server);
    assert!(process_gone(pid), "redis-server {pid} survived the drop");
    assert!(!Path::new(&dir).exists(), "{dir} was not removed");
}

#[test]
fn start_many_gives_distinct_ports() {
    let servers = start_many(4).expect("start 4 servers");
    assert_eq!(servers.len(), 4);
    let mut ports: Vec<u16> = servers.iter().map(RedisServer::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4, "{ports:?}");
    for server in &servers {
        assert_eq!(server.cmd(&["PING"]).expect("PING"), "PONG");
    }
    // Each is its own server.
    servers[0].cmd(&["SET", "k", "0"]).expect("SET");
    assert_eq!(servers[1].cmd(&["GET", "k"]).expect("GET"), "(nil)");
    assert!(start_many(0).expect("zero servers").is_empty());
}

#[test]
fn a_server_outlives_the_thread_that_started_it() {
    // PR_SET_PDEATHSIG fires when the forking thread exits: the testkit forks from
    // its own long-lived thread, so this server must survive its short-lived starter.
    let server = thread::spawn(|| RedisServer::start().expect("start redis-server"))
        .join()
        .expect("starter thread");
    thread::sleep(Duration::from_millis(200));
    assert!(!process_gone(server.pid()));
    assert_eq!(server.cmd(&["PING"]).expect("PING"), "PONG");
}

#[test]
fn a_config_file_comes_first_and_arguments_override_it() {
    let dir = std::env::temp_dir().join(format!("distlock-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create a directory");
    let config = dir.join("redis.conf");
    std::fs::write(&config, "maxmemory-policy allkeys-lru\nhz 20\nsave 60 1\n")
        .expect("write the config file");
    let mut server = RedisServer::builder()
        .config_file(&config)
        .args(["--hz", "30"])
        .start()
        .expect("start redis-server with a config file");
    let setting = |name: &str| server.cmd(&["CONFIG", "GET", name]).expect("CONFIG GET");
    assert_eq!(setting("maxmemory-policy"), "maxmemory-policy\nallkeys-lru");
    // The builder's arguments and the testkit's own come after the file.
    assert_eq!(setting("hz"), "hz\n30");
    assert_eq!(setting("save"), "save\n");
    // A restart reads the file again.
    server.restart().expect("restart");
    assert_eq!(
        server
            .cmd(&["CONFIG", "GET", "maxmemory-policy"])
            .expect("CONFIG GET"),
        "maxmemory-policy\nallkeys-lru"
    );
    drop(server);
    assert!(config.exists(), "the file is the caller's");
    std::fs::remove_dir_all(&dir).expect("clean up");
}
