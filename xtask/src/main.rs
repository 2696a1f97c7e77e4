//! Project tasks for distlock, run as `cargo xtask <COMMAND>` (see `HELP`).
//!
//! `test`, `demo`, `cluster` and `sentinel` need `redis-server` 7.0 or newer; when it is
//! missing and the task runs as root, it is installed with `apt-get`. Servers are
//! started by `distlock-testkit` on free loopback ports, never on 6379.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

mod command;
mod compose;
mod doc_examples;
mod install;
mod reliability;
mod servers;

use distlock_testkit::{RedisServer, REDIS_SERVER_ENV};

use crate::command::{display, run, Failure, Result};
use crate::install::{ensure_chromium, ensure_redis, parse_version};
use crate::servers::{cluster, sentinel};

const HELP: &str = "\
cargo xtask: project tasks for distlock

USAGE:
    cargo xtask <COMMAND> [ARGS...]

COMMANDS:
    test [ARGS...]    Run every test of the workspace against throwaway redis-servers:
                      `cargo nextest run --workspace --all-targets [ARGS...]` (with
                      cargo-nextest; else `cargo test`), then `cargo test --workspace
                      --doc` (examples and benches get built too). ARGS go to the
                      first command, e.g. `cargo xtask test lock_`, or
                      `cargo xtask test --no-capture` (`-- --nocapture` without
                      nextest). Then the seeded-fault and metrics tests
                      (`--features fault-injection,metrics --test reliability_faults
                      --test ops_metrics`), the explorer's slice and `--seeded`.
                      The browser tests of `distlock web` (cli/tests/web.rs) need
                      Chromium: $CHROMIUM, else `chromium` on PATH, installed with
                      apt-get when missing and xtask runs as root.
    explore [ARGS...] Run the explorer of interleavings (tests/explore): every schedule
                      of a few small worlds (2-3 owners, up to 3 operations each) on
                      the real client and scripts, each script request delivered in
                      order, late, lost or dropped, every property checked after every
                      step. No ARGS: the slice CI runs. `--full`: the whole bound
                      (under an hour with `--jobs 5`); `--beyond`: past it (days).
                      `--jobs N`: N processes. `--world A,B`: those worlds. `--faults N`:
                      that many per schedule. `--estimate N`: each world's size from N
                      uniform draws. `--sample N`: N random schedules with a fault,
                      10 of them replayed exactly (`--replays K`). Worlds include a
                      shutdown in flight, a replaced server and a long outage.
                      `--seeded`: each seeded fault in turn, which it must find and
                      replay. `--replay WORLD/STEP.STEP...`: one schedule with a
                      step-by-step log (`EXPLORE_FAULT=NAME` seeds a fault).
                      `cargo xtask test` runs the slice (`--jobs 3`) and `--seeded`.
    reliability       Run the reliability suite (tests/reliability_*.rs,
                      lock_max_hold.rs and lock_deadlock.rs, with the
                      seeded faults) and write RELIABILITY.md: each test's result, each
                      scenario's figures, and the totals (sections checked, overlaps,
                      stale fenced writes, faults caught, bad inputs, leaks, wall time).
    demo [EXAMPLE...] Run examples against throwaway redis-servers (REDIS_URL points
                      at a fresh server for each). Default: `order_flow`, the order and
                      inventory service; also `demo`, `guard_api`, `fencing`, `deadlock`,
                      `scheduled_job` (a job run once per period across instances),
                      `leader` (leader election), or `all`. While each runs, `distlock
                      web` serves a live page of its locks and the address is printed;
                      from a terminal, the page stays up after the example until Enter.
    bench [ARGS...]   Run the benchmarks of issues 6 and 13 (package `distlock-bench`,
                      built in release with the rslock peer): start a throwaway
                      redis-server and a local Redis Cluster, measure the physical
                      limit with redis-benchmark (distlock's scripts and rslock's
                      commands), run every scenario at least 3 times, distlock and
                      rslock in turn, print a Markdown table of medians as ratios to
                      the references, and write it into BENCHMARKS.md. ARGS go to the
                      harness: `--quick` (a fast check of the harness, not a
                      benchmark; it writes nothing), `--runs N`, `--skip-cluster`. Takes about 10
                      minutes (`--quick`: under one); the criterion micro-benchmarks
                      run with `cargo bench -p distlock-bench`. `--steps` runs only
                      the per-step cost table of the scripts (issue 36; about 10
                      minutes) and writes it into its own section of BENCHMARKS.md.
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
    doc-examples      Check that every public item of distlock-core, distlock,
                      distlock-macros and distlock-testkit has an example (a ``` block
                      of Rust) in its docs: fns, methods of inherent impls, structs,
                      enums, traits, consts and type aliases that are `pub`, not
                      `#[doc(hidden)]` and not `#[cfg(test)]`. Lists each one without.
                      CI runs it before the tests.
    package           `cargo package --workspace`: package every publishable crate and
                      build each from its package alone, then check that the scripts
                      packaged in distlock-core are the bytes of `lua/`.
    help, --help      Print this help.

REDIS:
    `test`, `demo`, `cluster` and `sentinel` need redis-server 7.0 or newer: $REDIS_SERVER if
    set, else `redis-server` on PATH. When none is found and xtask runs as root, it
    runs `apt-get update` and `apt-get install -y redis-server`; otherwise it prints
    how to install one. The path is passed on to cargo as REDIS_SERVER. Test servers
    listen on free 127.0.0.1 ports, never on 6379.
";

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
        Some("explore") => explore(&rest),
        Some("bench") => bench(&rest),
        Some("package") => package(),
        Some("doc-examples") => doc_examples::check(workspace_root()),
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

/// `cargo xtask package`: every publishable crate packaged and built from its
/// package (`cargo package --workspace`, which verifies), then the scripts that
/// distlock-core packaged (through its `lua/` links) compared with `lua/`.
fn package() -> Result<()> {
    forget_earlier_packages()?;
    let cargo = env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        // The benchmark harness and xtask are not published (`publish = false`).
        .args([
            "package",
            "--workspace",
            "--exclude",
            "distlock-bench",
            "--exclude",
            "xtask",
        ]);
    run(command)?;
    let version = env!("CARGO_PKG_VERSION");
    let packaged = workspace_root()
        .join("target/package")
        .join(format!("distlock-core-{version}"))
        .join("lua");
    let sources = workspace_root().join("lua");
    let read = |path: &Path| {
        fs::read(path).map_err(|err| Failure::Message(format!("{}: {err}", path.display())))
    };
    let entries = fs::read_dir(&sources)
        .map_err(|err| Failure::Message(format!("{}: {err}", sources.display())))?;
    let mut checked = 0;
    for entry in entries {
        let entry = entry.map_err(|err| Failure::Message(err.to_string()))?;
        let name = entry.file_name();
        let source = read(&entry.path())?;
        let copy = read(&packaged.join(&name))?;
        if copy != source {
            return Err(Failure::Message(format!(
                "distlock-core packaged lua/{} with other bytes than lua/{0}: its link in \
                 lock-core/lua/ must point at the repository's file",
                name.to_string_lossy()
            )));
        }
        checked += 1;
    }
    println!("xtask: the {checked} scripts packaged in distlock-core are the bytes of lua/");
    Ok(())
}

/// The crates `cargo xtask package` packages.
const PUBLISHED: [&str; 5] = [
    "distlock",
    "distlock-core",
    "distlock-macros",
    "distlock-testkit",
    "distlock-cli",
];

/// Removes what earlier runs of `cargo package` left of this version of the
/// workspace's crates where cargo keeps the crates of its temporary registry
/// (`$CARGO_HOME/registry/src/-<hash>/`, a hash of the registry's path): the
/// verification of one crate builds its workspace dependencies from there, and
/// cargo reuses an earlier extraction of the same version, stale once the code
/// changed (seen: the facade verified against last week's distlock-core). Nothing
/// of crates.io's is touched.
fn forget_earlier_packages() -> Result<()> {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    let Some(home) = home else {
        return Ok(());
    };
    let version = env!("CARGO_PKG_VERSION");
    for area in ["src", "cache"] {
        let Ok(registries) = fs::read_dir(home.join("registry").join(area)) else {
            continue;
        };
        for registry in registries.flatten() {
            // Temporary registries are named `-<hash>`; crates.io's are not.
            if !registry.file_name().to_string_lossy().starts_with('-') {
                continue;
            }
            for name in PUBLISHED {
                for kept in [
                    format!("{name}-{version}"),
                    format!("{name}-{version}.crate"),
                ] {
                    let path = registry.path().join(kept);
                    let removed = if path.is_dir() {
                        fs::remove_dir_all(&path)
                    } else if path.is_file() {
                        fs::remove_file(&path)
                    } else {
                        continue;
                    };
                    removed
                        .map_err(|err| Failure::Message(format!("{}: {err}", path.display())))?;
                }
            }
        }
    }
    Ok(())
}

/// `cargo xtask test`: all targets (with `extra` args), then the doctests, then the
/// targets of features that are process-global (the seeded faults, the metrics
/// recorder), then the explorer's slice and its seeded faults.
///
/// With cargo-nextest installed (`cargo nextest`), the tests of every binary run
/// two at a time across binaries (`.config/nextest.toml`): they mostly wait on
/// servers of their own, and a binary's slowest test no longer holds up the next
/// binary. Without it, `cargo test`.
fn test(extra: &[OsString]) -> Result<()> {
    let redis = ensure_redis()?;
    if browser_tests_run(extra) {
        ensure_chromium()?;
    }
    let nextest = has_nextest();
    run(tests(
        &redis,
        nextest,
        &["--workspace", "--all-targets"],
        extra,
    ))?;
    let mut doc = cargo(&redis);
    doc.args(["test", "--workspace", "--doc"]);
    run(doc)?;
    // Seeded faults and the metrics recorder are process-global, and compiled in
    // only with their features: their tests have binaries of their own, built once
    // with the explorer's features.
    run(tests(
        &redis,
        nextest,
        &[
            "--features",
            WITH_FAULTS,
            "--test",
            reliability::FAULTS_SUITE,
            "--test",
            "ops_metrics",
        ],
        &[],
    ))?;
    // The explorer: the slice of every world (split over three processes: it
    // mostly waits for quiet), then each seeded fault found.
    explore(&slice_args())?;
    explore(&[OsString::from("--seeded")])
}

/// Whether `cargo xtask test EXTRA` runs the browser tests of `distlock web`
/// (`cli/tests/web.rs`): unless EXTRA narrows the run to some targets or packages
/// without naming them.
fn browser_tests_run(extra: &[OsString]) -> bool {
    let words: Vec<&str> = extra.iter().filter_map(|arg| arg.to_str()).collect();
    let narrows = words.iter().any(|word| {
        [
            "--test",
            "--lib",
            "--bins",
            "--bin",
            "--examples",
            "-p",
            "--package",
            "--exclude",
        ]
        .contains(word)
    });
    !narrows
        || words
            .iter()
            .any(|word| *word == "web" || *word == "distlock-cli")
}

/// The features of the explorer's build, which the seeded-fault and metrics tests
/// share (one build for the three).
const WITH_FAULTS: &str = "fault-injection,metrics";

/// Whether cargo-nextest is installed.
fn has_nextest() -> bool {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo")))
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// `cargo nextest run ARGS EXTRA` with `nextest`, else `cargo test ARGS EXTRA`.
fn tests(redis: &Path, nextest: bool, args: &[&str], extra: &[OsString]) -> Command {
    let mut command = cargo(redis);
    if nextest {
        command.args(["nextest", "run"]);
    } else {
        command.arg("test");
    }
    command.args(args).args(extra);
    command
}

/// `cargo xtask explore [ARGS...]`: the explorer of interleavings, with its seeded
/// faults compiled in (they stay off unless asked for).
fn explore(args: &[OsString]) -> Result<()> {
    let redis = ensure_redis()?;
    run(explore_command(&redis, args))
}

/// The explorer's arguments for the slice that CI runs.
fn slice_args() -> Vec<OsString> {
    vec![OsString::from("--jobs"), OsString::from("3")]
}

/// `cargo test --features fault-injection --test explore -- ARGS`.
fn explore_command(redis: &Path, args: &[OsString]) -> Command {
    let mut explore = cargo(redis);
    explore
        .args(["test", "--features", WITH_FAULTS, "--test", "explore", "--"])
        .args(args);
    explore
}

/// `cargo xtask reliability`: the reliability suite, then `RELIABILITY.md`.
fn reliability_suite() -> Result<()> {
    // Read first: a file that lost its hand-written part fails before the run.
    let path = workspace_root().join("RELIABILITY.md");
    let before = std::fs::read_to_string(&path)
        .map_err(|err| format!("could not read {}: {err}", path.display()))?;
    let intro = reliability::hand_written(&before)?;
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
        WITH_FAULTS,
        "--test",
        reliability::FAULTS_SUITE,
        "--",
        "--nocapture",
        "--test-threads=2",
    ]);
    println!("xtask: running `{}`", display(&faults));
    ok &= reliability::run_collecting(faults, reliability::FAULTS_SUITE, &mut collected)?;
    for args in [slice_args(), vec![OsString::from("--seeded")]] {
        let explore = explore_command(&redis, &args);
        println!("xtask: running `{}`", display(&explore));
        ok &= reliability::run_collecting(explore, "explore", &mut collected)?;
    }

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
    let text = reliability::report(intro, &collected, &run_info);
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
/// it starts and stops its own servers and writes BENCHMARKS.md (not with `--quick`,
/// whose figures check the harness and are no benchmark).
fn bench(extra: &[OsString]) -> Result<()> {
    let redis = ensure_redis()?;
    let mut harness = cargo(&redis);
    harness
        .args(["run", "--release", "--quiet", "-p", "distlock-bench"])
        .args(["--features", "rslock", "--"]);
    if !extra.iter().any(|arg| arg == "--quick") {
        harness
            .arg("--write")
            .arg(workspace_root().join("BENCHMARKS.md"));
    }
    harness.args(extra);
    run(harness)
}

/// The examples `cargo xtask demo all` runs, in this order.
const EXAMPLES: [&str; 7] = [
    "order_flow",
    "demo",
    "guard_api",
    "fencing",
    "deadlock",
    "scheduled_job",
    "leader",
];

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
    let page = start_page(redis, &server.url(), namespace_of(name));
    let mut example = cargo(redis);
    example
        // With the metrics: the order example prints them at the end.
        .args(["run", "--quiet", "-p", "distlock", "--features", "metrics"])
        .args(["--example", name])
        .env("REDIS_URL", server.url());
    let outcome = run(example);
    if let Some((mut page, address)) = page {
        // The order flow is over in a fraction of a second: from a terminal, the
        // page stays up so that its timeline of the run can be looked at.
        if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            println!(
                "xtask: the page of the run stays up at {address}: press Enter to stop it \
                 and the redis-server"
            );
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        }
        let _ = page.kill();
        let _ = page.wait();
    }
    server.stop()?;
    println!("xtask: stopped the redis-server\n");
    outcome
}

/// The namespace example `name` takes its locks in: `distlock-example`, but the
/// short tour (`demo`) keeps the library's default, `distlock`.
fn namespace_of(name: &str) -> &'static str {
    if name == "demo" {
        "distlock"
    } else {
        "distlock-example"
    }
}

/// Starts `distlock web` on the demo's server for the example's `namespace` and
/// prints the page's address; the process and the address, or `None` (with a
/// note) when it does not start: the demo runs without it.
fn start_page(redis: &Path, url: &str, namespace: &str) -> Option<(std::process::Child, String)> {
    use std::io::BufRead;
    let mut web = cargo(redis);
    web.args(["run", "--quiet", "-p", "distlock-cli", "--", "--url", url])
        .args(["--namespace", namespace])
        .args(["web", "--bind", "127.0.0.1:0", "--refresh-ms", "500"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped());
    let mut child = match web.spawn() {
        Ok(child) => child,
        Err(err) => {
            println!(
                "xtask: could not start `distlock web` ({err}); the demo runs without its page"
            );
            return None;
        }
    };
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|out| std::io::BufReader::new(out).read_line(&mut line));
    match line
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
    {
        Some(address) if matches!(read, Some(Ok(_))) => {
            println!("xtask: the live page of the demo's locks: {address} (distlock web)");
            Some((child, address.to_owned()))
        }
        _ => {
            println!("xtask: `distlock web` did not start; the demo runs without its page");
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The page `cargo xtask demo` prints shows the namespace the example locks in.
    #[test]
    fn the_demo_page_shows_the_example_namespace() {
        for name in EXAMPLES {
            let path = workspace_root().join(format!("examples/{name}.rs"));
            let source = fs::read_to_string(&path).expect("the example's source");
            let expected = if source.contains(".namespace(\"distlock-example\")") {
                "distlock-example"
            } else {
                assert!(
                    !source.contains(".namespace("),
                    "{name} names another namespace"
                );
                "distlock"
            };
            assert_eq!(namespace_of(name), expected, "{name}");
        }
    }

    #[test]
    fn the_browser_is_installed_only_for_runs_with_the_browser_tests() {
        let args = |words: &[&str]| words.iter().map(OsString::from).collect::<Vec<_>>();
        assert!(browser_tests_run(&args(&[])));
        assert!(browser_tests_run(&args(&["--", "--nocapture"])));
        assert!(browser_tests_run(&args(&["-p", "distlock-cli"])));
        assert!(browser_tests_run(&args(&["--test", "web"])));
        assert!(!browser_tests_run(&args(&["--test", "lock_basic"])));
        assert!(!browser_tests_run(&args(&["-p", "distlock-core", "--lib"])));
    }

    /// Issue 26: README's `cargo add distlock@0.1` and `cargo install distlock-cli`
    /// failed, the crates not being published. Every install command of the READMEs
    /// names the repository of the workspace's `Cargo.toml`, or a path of this
    /// checkout that holds the package, until the crates are on crates.io.
    #[test]
    fn the_readmes_install_from_the_repository_or_a_checkout() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
        let repository = manifest
            .lines()
            .find_map(|line| line.strip_prefix("repository = "))
            .map(|url| url.trim_matches('"'))
            .expect("the workspace's repository");
        for readme in ["README.md", "cli/README.md"] {
            let text = std::fs::read_to_string(root.join(readme)).expect("a README");
            let commands: Vec<&str> = text
                .lines()
                .filter(|line| {
                    line.contains("cargo add distlock") || line.contains("cargo install")
                })
                .collect();
            assert!(!commands.is_empty(), "{readme}: no install command");
            for line in commands {
                let from_git = line.contains(&format!("--git {repository}"));
                let from_path = line.contains("--path");
                assert!(
                    from_git || from_path,
                    "{readme}: `{line}` installs from neither"
                );
            }
        }
        assert!(
            root.join("cli/Cargo.toml").is_file(),
            "`--path cli` holds the CLI"
        );
    }

    /// Issue 37 (7): a dependency line (`distlock = ...`, `distlock-testkit = ...`) in
    /// a README or a crate's docs names the repository or a path, as the install
    /// commands do, never a version that crates.io does not have.
    #[test]
    fn every_dependency_line_depends_on_the_repository_or_a_path() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let files = [
            "README.md",
            "cli/README.md",
            "lock-core/README.md",
            "lock-macros/README.md",
            "testkit/README.md",
            "src/lib.rs",
            "lock-core/src/lib.rs",
            "lock-macros/src/lib.rs",
            "testkit/src/lib.rs",
        ];
        let mut seen = 0;
        for file in files {
            let text = std::fs::read_to_string(root.join(file)).expect("a file");
            for line in text.lines() {
                let code = line.trim_start_matches(['/', '!', ' ', '`', '(']);
                let dependency = [
                    "distlock ",
                    "distlock-core ",
                    "distlock-macros ",
                    "distlock-testkit ",
                ]
                .iter()
                .any(|name| code.starts_with(&format!("{name}= ")));
                if !dependency {
                    continue;
                }
                seen += 1;
                assert!(
                    line.contains("git = ") || line.contains("path = "),
                    "{file}: `{line}` depends on a version that is not published"
                );
            }
        }
        assert!(
            seen > 0,
            "no dependency line found: the check reads nothing"
        );
    }

    /// Issue 37 (7): every setter of `LockClientBuilder` has its row in README's
    /// configuration table.
    #[test]
    fn every_builder_setter_is_in_the_configuration_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let builder =
            std::fs::read_to_string(root.join("lock-core/src/builder.rs")).expect("builder.rs");
        let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
        let table = readme
            .split("## Configuration")
            .nth(1)
            .and_then(|rest| rest.split("\n\n").nth(1))
            .expect("README's configuration table");
        let setters: Vec<&str> = builder
            .lines()
            .filter_map(|line| line.strip_prefix("    pub fn "))
            .filter_map(|rest| rest.split(['(', '<']).next())
            .filter(|name| !["builder", "new", "connect"].contains(name))
            .collect();
        assert!(setters.len() > 20, "{setters:?}");
        for setter in setters {
            assert!(
                table.contains(&format!("| `{setter}(")),
                "`LockClientBuilder::{setter}` is not in README's configuration table"
            );
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
            "package",
            "doc-examples",
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
