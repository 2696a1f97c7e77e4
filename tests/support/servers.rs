//! Throwaway servers for one test, a fault proxy in front of one, a free port, a
//! server over its memory limit.

use std::net::{Ipv4Addr, TcpListener};

use distlock_testkit::{FaultProxy, RedisServer};

/// Starts a throwaway `redis-server` for one test.
pub fn server() -> RedisServer {
    RedisServer::start()
        .expect("start redis-server (see the testkit's error for how to install it)")
}

/// A throwaway server started with `--maxmemory-policy policy`.
pub fn with_maxmemory_policy(policy: &str) -> RedisServer {
    RedisServer::builder()
        .args(["--maxmemory-policy", policy])
        .start()
        .expect("start redis-server")
}

/// A fault proxy in front of `server`.
pub fn proxy(server: &RedisServer) -> FaultProxy {
    FaultProxy::start(server.addr()).expect("proxy")
}

/// A loopback port that was free a moment ago (for a server's second listener,
/// which the testkit does not pick; or for one nothing listens on).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port()
}

/// Writes 48 × 64 KiB (3 MiB) of keys without a TTL, then lowers `maxmemory` to
/// 1 MiB: from then on the server is over its limit (out of memory under
/// `noeviction`, evicting on the next write otherwise).
pub fn fill_past_maxmemory(server: &RedisServer) {
    let value = "x".repeat(64 * 1024);
    for n in 0..48 {
        server
            .cmd(&["SET", &format!("filler:{n}"), &value])
            .expect("SET filler");
    }
    server
        .cmd(&["CONFIG", "SET", "maxmemory", "1mb"])
        .expect("CONFIG SET maxmemory");
}
