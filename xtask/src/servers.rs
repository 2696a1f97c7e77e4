//! `cargo xtask cluster` and `sentinel`: local servers kept up until Ctrl-C, SIGTERM,
//! SIGHUP or the end of stdin, then stopped.

use std::env;
use std::ffi::OsString;
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use distlock_testkit::{RedisCluster, SentinelGroup, REDIS_SERVER_ENV};

use crate::command::{Failure, Result};
use crate::install::ensure_redis;

/// What `cargo xtask cluster` and `sentinel` do before starting their servers:
/// refuse arguments, find (or install) `redis-server` and point the test kit at it,
/// and catch the signals that stop them.
fn prepare_local_servers(command: &str, args: &[OsString]) -> Result<()> {
    if let Some(arg) = args.first() {
        return Err(Failure::Message(format!(
            "`cargo xtask {command}` takes no arguments (got {:?})",
            arg.to_string_lossy()
        )));
    }
    let redis = ensure_redis()?;
    // The test kit finds the binary through REDIS_SERVER; no other thread runs yet.
    env::set_var(REDIS_SERVER_ENV, &redis);
    catch_stop_signals()
}

/// `cargo xtask cluster`: a local Redis Cluster until Ctrl-C, SIGTERM or stdin's end.
pub(crate) fn cluster(args: &[OsString]) -> Result<()> {
    prepare_local_servers("cluster", args)?;
    println!("xtask: starting a Redis Cluster of 3 masters and 3 replicas on 127.0.0.1");
    let cluster = RedisCluster::start(3, 1)?;
    let urls = cluster.urls();
    println!("xtask: the cluster is up:");
    for (index, (url, node)) in urls.iter().zip(cluster.nodes()).enumerate() {
        let role = if index < cluster.masters() {
            "master"
        } else {
            "replica"
        };
        println!("    {url}  {role}, pid {}", node.pid());
    }
    let quoted: Vec<String> = urls.iter().map(|url| format!("{url:?}")).collect();
    println!(
        "\nPoint a client at it with any of the URLs (the others are found through them):\n    \
         LockClient::builder().cluster([{}])\n\
         and run examples that read REDIS_CLUSTER_URLS with:\n    \
         REDIS_CLUSTER_URLS={} cargo run --example <NAME>\n\n\
         Press Ctrl-C (or Ctrl-D, or send SIGTERM) to stop the cluster. If this process \
         is killed, the nodes die with it.",
        quoted.join(", "),
        urls.join(",")
    );
    serve_until_stopped("the cluster", cluster);
    Ok(())
}

/// Keeps `servers` running until Ctrl-C, SIGTERM or stdin's end, then stops them.
fn serve_until_stopped<T>(what: &str, servers: T) {
    let reason = wait_for_stop();
    println!("xtask: {reason}; stopping {what}");
    drop(servers);
    println!("xtask: every process is stopped");
}

/// The name `cargo xtask sentinel`'s Sentinels know the master by; also the default
/// of the examples' `REDIS_SENTINEL_MASTER`.
const SENTINEL_MASTER: &str = "mymaster";

/// `cargo xtask sentinel`: a local Sentinel group (a master, a replica, 3 Sentinels)
/// until Ctrl-C, SIGTERM or stdin's end.
pub(crate) fn sentinel(args: &[OsString]) -> Result<()> {
    prepare_local_servers("sentinel", args)?;
    println!(
        "xtask: starting a Redis Sentinel group on 127.0.0.1: a master {SENTINEL_MASTER:?}, \
         1 replica and 3 Sentinels"
    );
    let group = SentinelGroup::start(SENTINEL_MASTER, 1, 3)?;
    let urls = group.sentinel_urls();
    let master = group.current_master_index();
    println!("xtask: the group is up:");
    for (url, node) in urls.iter().zip(group.sentinels()) {
        println!("    {url}  sentinel, pid {}", node.pid());
    }
    for (index, node) in group.data_nodes().iter().enumerate() {
        let role = if Some(index) == master {
            "master"
        } else {
            "replica"
        };
        println!("    {}  {role}, pid {}", node.url(), node.pid());
    }
    let name = group.master_name();
    let quoted: Vec<String> = urls.iter().map(|url| format!("{url:?}")).collect();
    println!(
        "\nPoint a client at the master through the Sentinels:\n    \
         LockClient::builder().sentinel([{}], {name:?})\n\
         and run examples that read REDIS_SENTINEL_URLS with:\n    \
         REDIS_SENTINEL_URLS={} REDIS_SENTINEL_MASTER={name} cargo run --example <NAME>\n\n\
         Press Ctrl-C (or Ctrl-D, or send SIGTERM) to stop the group. If this process \
         is killed, its processes die with it.",
        quoted.join(", "),
        urls.join(",")
    );
    serve_until_stopped("the Sentinel group", group);
    Ok(())
}

/// The last of SIGINT, SIGTERM or SIGHUP that arrived since [`catch_stop_signals`]; 0
/// for none.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn note_stop_signal(signal: libc::c_int) {
    // A lock-free atomic store is async-signal-safe.
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Makes SIGINT, SIGTERM and SIGHUP set [`STOP_SIGNAL`] instead of ending the
/// process, so that the cluster is torn down cleanly. Children start with the
/// default actions again (`exec` resets caught signals).
fn catch_stop_signals() -> Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        let handler = note_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SAFETY: the handler only stores into an atomic, which is async-signal-safe.
        if unsafe { libc::signal(signal, handler) } == libc::SIG_ERR {
            return Err(Failure::Message(format!(
                "could not catch signal {signal}: {}",
                io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// Waits until a signal caught by [`catch_stop_signals`] arrives or stdin ends; says
/// which.
fn wait_for_stop() -> String {
    let (tx, rx) = mpsc::channel();
    // Not joined: the process exits soon after this returns.
    thread::spawn(move || {
        let reason = match io::copy(&mut io::stdin().lock(), &mut io::sink()) {
            Ok(_) => "stdin closed".to_owned(),
            Err(err) => format!("could not read stdin ({err})"),
        };
        let _ = tx.send(reason);
    });
    loop {
        match STOP_SIGNAL.load(Ordering::SeqCst) {
            0 => {}
            libc::SIGINT => return "got SIGINT (Ctrl-C)".to_owned(),
            libc::SIGTERM => return "got SIGTERM".to_owned(),
            libc::SIGHUP => return "got SIGHUP".to_owned(),
            other => return format!("got signal {other}"),
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(reason) => return reason,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return "the stdin thread stopped".to_owned()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_takes_no_arguments() {
        match cluster(&[OsString::from("extra")]) {
            Err(Failure::Message(message)) => assert!(message.contains("no arguments")),
            _ => panic!("`cluster extra` must be refused before anything starts"),
        }
    }

    #[test]
    fn sentinel_takes_no_arguments() {
        match sentinel(&[OsString::from("extra")]) {
            Err(Failure::Message(message)) => assert!(message.contains("no arguments")),
            _ => panic!("`sentinel extra` must be refused before anything starts"),
        }
    }
}
