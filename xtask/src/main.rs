//! Project tasks for distlock, run as `cargo xtask <COMMAND>` (see `HELP`).
//!
//! `test`, `demo`, `cluster` and `sentinel` need `redis-server` 7.0 or newer; when it is
//! missing and the task runs as root, it is installed with `apt-get`. Servers are
//! started by `distlock-testkit` on free loopback ports, never on 6379.

use std::env;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

mod reliability;

use distlock_testkit::{
    redis_server_binary, RedisCluster, RedisServer, SentinelGroup, REDIS_SERVER_ENV,
};

const HELP: &str = "\
cargo xtask: project tasks for distlock

USAGE:
    cargo xtask <COMMAND> [ARGS...]

COMMANDS:
    test [ARGS...]    Run every test of the workspace against throwaway redis-servers:
                      `cargo test --workspace --all-targets [ARGS...]`, then
                      `cargo test --workspace --doc` (examples and benches get built too).
                      ARGS go to the first command, e.g. `cargo xtask test lock_`
                      or `cargo xtask test -- --nocapture`. Then the seeded-fault
                      tests: `cargo test --features fault-injection --test reliability_faults`.
    reliability       Run the reliability suite (tests/reliability_*.rs, with the
                      seeded faults) and write RELIABILITY.md: each test's result, each
                      scenario's figures, and the totals (sections checked, overlaps,
                      stale fenced writes, faults caught, bad inputs, leaks, wall time).
    demo [EXAMPLE...] Run examples against throwaway redis-servers (REDIS_URL points
                      at a fresh server for each). Default: `order_flow`, the order and
                      inventory service; also `demo`, `guard_api`, `fencing`, or `all`.
    bench [ARGS...]   Run the benchmarks of issue 6 (package `distlock-bench`, built
                      in release with the rslock peer): start a throwaway redis-server
                      and a local Redis Cluster, measure the physical limit with
                      redis-benchmark, run every scenario 3 times, print a Markdown
                      table of medians as ratios to it, and write it into
                      BENCHMARKS.md. ARGS go to the harness: `--quick` (a fast check
                      of the harness, not a benchmark), `--runs N`, `--skip-cluster`.
                      Takes about 5 minutes; the criterion micro-benchmarks run with
                      `cargo bench -p distlock-bench`.
    cluster           Start a local Redis Cluster (3 masters, 3 replicas) on free
                      127.0.0.1 ports, print its node URLs and how to point the client
                      or the examples at it, and keep it up until Ctrl-C, SIGTERM or
                      the end of stdin (Ctrl-D); then stop every node. With stdin
                      closed (`< /dev/null`) it stops at once: keep stdin open, e.g.
                      `sleep infinity | cargo xtask cluster`.
    sentinel          Start a local Redis Sentinel group on free 127.0.0.1 ports: a
                      master named `mymaster`, 1 replica and 3 Sentinels. Print the
                      Sentinel URLs, the master and how to point the client or the
                      examples at it, and keep it up until Ctrl-C, SIGTERM or the end
                      of stdin (Ctrl-D), as `cluster` does; then stop every process.
    help, --help      Print this help.

REDIS:
    `test`, `demo`, `cluster` and `sentinel` need redis-server 7.0 or newer: $REDIS_SERVER if
    set, else `redis-server` on PATH. When none is found and xtask runs as root, it
    runs `apt-get update` and `apt-get install -y redis-server`; otherwise it prints
    how to install one. The path is passed on to cargo as REDIS_SERVER. Test servers
    listen on free 127.0.0.1 ports, never on 6379.
";

/// The oldest Redis the project supports (`#!lua flags=...` in scripts).
const MIN_REDIS: (u32, u32) = (7, 0);

/// Why a task failed.
enum Failure {
    /// Print this and exit with status 1.
    Message(String),
    /// A child command failed: exit with its status, it has said why.
    Status(u8),
}

impl<E: fmt::Display> From<E> for Failure {
    fn from(err: E) -> Self {
        Failure::Message(err.to_string())
    }
}

type Result<T> = std::result::Result<T, Failure>;

fn main() -> ExitCode {
    let mut args = env::args_os().skip(1);
    let Some(command) = args.next() else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let rest: Vec<OsString> = args.collect();
    let result = match command.to_str() {
        Some("test") => test(&rest),
        Some("demo") => demo(&rest),
        Some("cluster") => cluster(&rest),
        Some("sentinel") => sentinel(&rest),
        Some("reliability") => reliability_suite(),
        Some("bench") => bench(&rest),
        Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            Ok(())
        }
        _ => {
            eprintln!(
                "cargo xtask: unknown command {:?}\n",
                command.to_string_lossy()
            );
            eprint!("{HELP}");
            Err(Failure::Status(2))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Status(code)) => ExitCode::from(code),
        Err(Failure::Message(message)) => {
            eprintln!("xtask: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo xtask test`: all targets (with `extra` args), then the doctests.
fn test(extra: &[OsString]) -> Result<()> {
    let redis = ensure_redis()?;
    let mut all_targets = cargo(&redis);
    all_targets
        .args(["test", "--workspace", "--all-targets"])
        .args(extra);
    run(all_targets)?;
    let mut doc = cargo(&redis);
    doc.args(["test", "--workspace", "--doc"]);
    run(doc)?;
    // Seeded faults are process-global and compiled in only with the feature: their
    // tests have a binary of their own.
    let mut faults = cargo(&redis);
    faults.args([
        "test",
        "--features",
        "fault-injection",
        "--test",
        reliability::FAULTS_SUITE,
    ]);
    run(faults)
}

/// `cargo xtask reliability`: the reliability suite, then `RELIABILITY.md`.
fn reliability_suite() -> Result<()> {
    let redis = ensure_redis()?;
    let started = std::time::Instant::now();
    let mut collected = reliability::Collected::default();
    let mut ok = true;
    for suite in reliability::SUITES {
        let mut command = cargo(&redis);
        command.args([
            "test",
            "--test",
            suite,
            "--",
            "--nocapture",
            "--test-threads=2",
        ]);
        println!("xtask: running `{}`", display(&command));
        ok &= reliability::run_collecting(command, suite, &mut collected)?;
    }
    let mut faults = cargo(&redis);
    faults.args([
        "test",
        "--features",
        "fault-injection",
        "--test",
        reliability::FAULTS_SUITE,
        "--",
        "--nocapture",
        "--test-threads=2",
    ]);
    println!("xtask: running `{}`", display(&faults));
    ok &= reliability::run_collecting(faults, reliability::FAULTS_SUITE, &mut collected)?;

    let version = Command::new(&redis)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .ok()
        .and_then(|text| parse_version(&text))
        .map_or_else(
            || "redis-server".to_owned(),
            |(major, minor, patch)| format!("Redis {major}.{minor}.{patch}"),
        );
    let run_info = reliability::RunInfo {
        started,
        redis_version: version,
        leaked_servers: reliability::testkit_servers(),
    };
    let text = reliability::report(&collected, &run_info);
    let path = workspace_root().join("RELIABILITY.md");
    reliability::write(&path, &text)?;
    println!("xtask: wrote {}", path.display());
    if ok && collected.all_passed() && run_info.leaked_servers == 0 {
        Ok(())
    } else {
        Err(Failure::Message(
            "the reliability suite failed; see RELIABILITY.md and the output above".into(),
        ))
    }
}

/// `cargo xtask bench [ARGS...]`: the load generator in release, with the rslock peer;
/// it starts and stops its own servers and writes BENCHMARKS.md.
fn bench(extra: &[OsString]) -> Result<()> {
    let redis = ensure_redis()?;
    let mut harness = cargo(&redis);
    harness
        .args(["run", "--release", "--quiet", "-p", "distlock-bench"])
        .args(["--features", "rslock", "--", "--write"])
        .arg(workspace_root().join("BENCHMARKS.md"))
        .args(extra);
    run(harness)
}

/// The examples `cargo xtask demo all` runs, in this order.
const EXAMPLES: [&str; 4] = ["order_flow", "demo", "guard_api", "fencing"];

/// `cargo xtask demo [EXAMPLE...]`: each example against a throwaway server of its own.
fn demo(names: &[OsString]) -> Result<()> {
    let mut examples = Vec::new();
    for name in names {
        match name.to_str() {
            Some("all") => examples.extend(EXAMPLES),
            Some(name) if EXAMPLES.contains(&name) => examples.push(name),
            _ => {
                return Err(Failure::Message(format!(
                    "no example {:?}; choose from {} or `all`",
                    name.to_string_lossy(),
                    EXAMPLES.join(", ")
                )))
            }
        }
    }
    if examples.is_empty() {
        examples.push(EXAMPLES[0]);
    }
    let redis = ensure_redis()?;
    for example in examples {
        run_example(&redis, example)?;
    }
    Ok(())
}

/// Runs `examples/<name>.rs` against a throwaway server.
fn run_example(redis: &Path, name: &str) -> Result<()> {
    let mut server = RedisServer::builder().binary(redis).start()?;
    println!(
        "xtask: started a throwaway redis-server at {} (pid {})",
        server.url(),
        server.pid()
    );
    let mut example = cargo(redis);
    example
        .args(["run", "--quiet", "-p", "distlock", "--example", name])
        .env("REDIS_URL", server.url());
    let outcome = run(example);
    server.stop()?;
    println!("xtask: stopped the redis-server\n");
    outcome
}

/// A `cargo` command in the workspace root with `REDIS_SERVER` set.
fn cargo(redis: &Path) -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        .env(REDIS_SERVER_ENV, redis);
    command
}

fn workspace_root() -> &'static Path {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir)
}

/// Runs `command` with inherited stdio, after printing it.
fn run(mut command: Command) -> Result<()> {
    println!("xtask: running `{}`", display(&command));
    let status = command
        .status()
        .map_err(|err| format!("could not run `{}`: {err}", display(&command)))?;
    check(status)
}

fn check(status: ExitStatus) -> Result<()> {
    if status.success() {
        return Ok(());
    }
    let code = status.code().unwrap_or_else(|| {
        use std::os::unix::process::ExitStatusExt;
        128 + status.signal().unwrap_or(0)
    });
    Err(Failure::Status(
        u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1),
    ))
}

fn display(command: &Command) -> String {
    let program = Path::new(command.get_program())
        .file_name()
        .unwrap_or_else(|| command.get_program());
    std::iter::once(program)
        .chain(command.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

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
fn cluster(args: &[OsString]) -> Result<()> {
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
fn sentinel(args: &[OsString]) -> Result<()> {
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

/// Finds `redis-server` (installing it with apt-get when missing and root) and
/// checks it is recent enough.
fn ensure_redis() -> Result<PathBuf> {
    let path = match redis_server_binary() {
        Ok(path) => path,
        // REDIS_SERVER is set but wrong: installing would not help.
        Err(err) if env::var_os(REDIS_SERVER_ENV).is_some_and(|v| !v.is_empty()) => {
            return Err(err.into())
        }
        Err(err) if !is_root() => {
            return Err(Failure::Message(format!(
                "{err}\n(xtask installs redis-server itself only when it runs as root.)"
            )))
        }
        Err(err) => {
            install_with_apt(&err.to_string())?;
            redis_server_binary()
                .or_else(|err| {
                    let usual = PathBuf::from("/usr/bin/redis-server");
                    if usual.is_file() {
                        Ok(usual)
                    } else {
                        Err(err)
                    }
                })
                .map_err(|err| format!("apt-get installed redis-server, but: {err}"))?
        }
    };
    check_version(&path)?;
    println!("xtask: using {}", path.display());
    Ok(path)
}

fn is_root() -> bool {
    // SAFETY: `geteuid` cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

fn install_with_apt(why: &str) -> Result<()> {
    let has_apt = env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| dir.join("apt-get").is_file()));
    if !has_apt {
        return Err(Failure::Message(format!(
            "{why}\n(xtask runs as root but found no apt-get to install redis-server with; \
             install it with your system's package manager.)"
        )));
    }
    println!(
        "xtask: redis-server not found; installing it as root with apt-get \
         (a packaged service may start on port 6379; the tests never use it)"
    );
    for args in [&["update"][..], &["install", "-y", "redis-server"][..]] {
        let mut apt = Command::new("apt-get");
        apt.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(apt).map_err(|failure| match failure {
            Failure::Status(code) => Failure::Message(format!(
                "`apt-get {}` failed (exit status {code}); install redis-server 7.0+ \
                 yourself and set REDIS_SERVER if it is not on PATH",
                args.join(" ")
            )),
            other => other,
        })?;
    }
    Ok(())
}

/// Checks that `redis-server --version` reports 7.0 or newer.
fn check_version(path: &Path) -> Result<()> {
    let output = Command::new(path)
        .arg("--version")
        .output()
        .map_err(|err| format!("could not run `{} --version`: {err}", path.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let Some(version) = parse_version(&text) else {
        return Err(Failure::Message(format!(
            "could not read a version from `{} --version` (it printed {:?}); \
             set REDIS_SERVER to a redis-server 7.0+ binary",
            path.display(),
            text.trim()
        )));
    };
    if (version.0, version.1) < MIN_REDIS {
        return Err(Failure::Message(format!(
            "{} is Redis {}.{}.{}, but distlock needs {}.{} or newer (its scripts use \
             `#!lua flags=`). Debian 12 and Ubuntu 24.04 package 7.0; on older systems \
             install from the Redis apt repository (https://packages.redis.io), \
             `brew install redis`, or build it, then set REDIS_SERVER to the new binary.",
            path.display(),
            version.0,
            version.1,
            version.2,
            MIN_REDIS.0,
            MIN_REDIS.1
        )));
    }
    Ok(())
}

/// Parses `Redis server v=7.0.15 sha=...` (also Valkey's `v=` form).
fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))?;
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_and_valkey_versions() {
        assert_eq!(
            parse_version("Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"),
            Some((7, 0, 15))
        );
        assert_eq!(
            parse_version("Valkey server v=8.1.1 sha=00000000:0 malloc=jemalloc-5.3.0"),
            Some((8, 1, 1))
        );
        assert_eq!(
            parse_version("Redis server v=6.0.16 sha=0"),
            Some((6, 0, 16))
        );
        assert_eq!(parse_version("redis-server: command not found"), None);
        assert_eq!(parse_version("v=x.y"), None);
    }

    #[test]
    fn exit_codes_follow_the_child() {
        use std::os::unix::process::ExitStatusExt;
        let code = |raw| match check(ExitStatus::from_raw(raw)) {
            Ok(()) => 0,
            Err(Failure::Status(code)) => code,
            Err(Failure::Message(message)) => panic!("{message}"),
        };
        assert_eq!(code(0), 0);
        assert_eq!(code(101 << 8), 101);
        assert_eq!(code(libc::SIGKILL), 128 + 9);
    }

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

    #[test]
    fn help_lists_every_command() {
        let commands = [
            "test",
            "demo",
            "bench",
            "cluster",
            "sentinel",
            "reliability",
            "--help",
        ];
        for command in commands {
            assert!(HELP.contains(command), "{command}");
        }
        for example in EXAMPLES {
            assert!(HELP.contains(example), "{example}");
        }
    }
}
