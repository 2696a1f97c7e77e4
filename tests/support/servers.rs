//! Throwaway servers for one test, and a fault proxy in front of one.

use distlock_testkit::{FaultProxy, RedisServer};

/// Starts a throwaway `redis-server` for one test.
pub fn server() -> RedisServer {
    RedisServer::start()
        .expect("start redis-server (see the testkit's error for how to install it)")
}

/// A fault proxy in front of `server`.
pub fn proxy(server: &RedisServer) -> FaultProxy {
    FaultProxy::start(server.addr()).expect("proxy")
}
