//! The command line: global options (where Redis is, the namespace, the output
//! format) and one subcommand.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::error::EXIT_CODES;

/// The default server when neither `--url` nor `REDIS_URL` names one.
pub(crate) const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Inspect, list, watch and force-unlock distlock locks on Redis, and check a server.
#[derive(Debug, Parser)]
#[command(name = "distlock", version, after_help = EXIT_CODES)]
pub(crate) struct Cli {
    /// Where Redis is, and the namespace of the locks.
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Machine output: one JSON object (one per line for `list` and `watch`).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The deployment to connect to, as the library's `LockClientBuilder` takes it.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    /// The Redis server: `redis://[user:password@]host:port[/db]`, or `rediss://`
    /// for TLS; else `$REDIS_URL`, else [`DEFAULT_URL`].
    #[arg(
        long,
        global = true,
        value_name = "URL",
        help = "The Redis server: redis://[user:password@]host:port[/db], or rediss:// for \
                TLS [env: REDIS_URL; default: redis://127.0.0.1:6379]"
    )]
    pub(crate) url: Option<String>,
    /// A Redis Cluster: some of its nodes' URLs, comma-separated. Replaces --url.
    #[arg(
        long,
        global = true,
        value_name = "URL,...",
        value_delimiter = ',',
        conflicts_with = "sentinel"
    )]
    pub(crate) cluster: Vec<String>,
    /// Redis Sentinel: some Sentinels' URLs, comma-separated, with --master.
    /// Replaces --url.
    #[arg(long, global = true, value_name = "URL,...", value_delimiter = ',')]
    pub(crate) sentinel: Vec<String>,
    /// The name the Sentinels know the master by (with --sentinel).
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) master: Option<String>,
    /// The ACL user of the data nodes behind Sentinel (with --sentinel).
    #[arg(long, global = true, value_name = "USER")]
    pub(crate) sentinel_node_user: Option<String>,
    /// The password of the data nodes behind Sentinel (with --sentinel); better
    /// given in the environment than on the command line.
    #[arg(
        long,
        global = true,
        value_name = "PASSWORD",
        env = "DISTLOCK_SENTINEL_NODE_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) sentinel_node_password: Option<String>,
    /// The data nodes behind Sentinel speak TLS (with --sentinel).
    #[arg(long, global = true)]
    pub(crate) sentinel_node_tls: bool,
    /// The database of the data nodes behind Sentinel (with --sentinel).
    #[arg(long, global = true, value_name = "DB")]
    pub(crate) sentinel_node_db: Option<u32>,
    /// The prefix of the locks' keys and channels.
    #[arg(long, global = true, value_name = "NS", default_value = "distlock")]
    pub(crate) namespace: String,
    /// The CA certificate (PEM file) that signed the servers' certificates, trusted
    /// instead of the platform's roots (for rediss:// URLs).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) tls_ca: Option<PathBuf>,
    /// The client certificate (PEM file) to show servers that ask for one (mutual
    /// TLS); with --tls-key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM file) of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show a lock: its kind, holders (mode, hold count, lease left, fencing
    /// token), waiters and last fencing token. Exits 1 when the lock is not held.
    Inspect {
        /// The lock name, as the application names it (not the Redis key).
        name: OsString,
    },
    /// List the locks of the namespace, one line each, found with SCAN (never
    /// KEYS). Exits 1 when no lock is listed.
    List {
        /// A glob over lock names, as Redis' SCAN MATCH reads it (`*`, `?`, `[a-z]`,
        /// `\x`).
        #[arg(default_value = "*")]
        pattern: OsString,
        /// Also list free locks that Redis still has a trace of: a fencing counter,
        /// or the record of a release of the last few seconds (kept only when its
        /// client needed one, and by a force-unlock).
        #[arg(long)]
        all: bool,
        /// The COUNT hint of each SCAN call: keys looked at per round trip.
        #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
    },
    /// Print each release of a lock as it comes, with a timestamp and the lock's
    /// state after it, until Ctrl-C.
    Watch {
        /// The lock name.
        name: OsString,
    },
    /// Delete a lock whoever holds it, and wake its waiters; its holder learns at
    /// its next renewal that it lost it. Exits 1 when the lock was free.
    ForceUnlock {
        /// The lock name.
        name: OsString,
        /// Why, for the log (printed to stderr with the OS user and host).
        #[arg(long, value_name = "TEXT")]
        reason: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Serve a live page of the namespace's locks (the locks held, a timeline of
    /// holds and waits, the wait-for graph) on loopback, until Ctrl-C.
    Web {
        /// Where the page listens.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:7878")]
        bind: SocketAddr,
        /// Allows force-unlock from the page to whoever gives this token; off
        /// without it.
        #[arg(
            long,
            value_name = "TOKEN",
            env = "DISTLOCK_ADMIN_TOKEN",
            hide_env_values = true
        )]
        admin_token: Option<String>,
        /// The longest time between two reads of the namespace, in milliseconds.
        #[arg(long, value_name = "MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..))]
        refresh_ms: u64,
        /// The most commands a second the page's one reader sends to Redis, on
        /// average, however many locks and browser tabs there are.
        #[arg(long, value_name = "N", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(100..))]
        max_commands: u32,
        /// The minutes of history the timeline shows.
        #[arg(long, value_name = "MIN", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=120))]
        timeline_minutes: u64,
    },
    /// Check the server: its version, a PING's round trip, `maxmemory-policy`,
    /// and whether the user can load distlock's scripts.
    Ping,
}
