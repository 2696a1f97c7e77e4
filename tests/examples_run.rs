//! Every example runs against a throwaway `redis-server` and must exit with status 0,
//! so that the examples cannot rot.
//!
//! `cargo test --all-targets` compiles the examples as test harnesses (with no
//! tests), not as the programs they are, so this test builds them itself, once per
//! run: `cargo build --workspace --examples` into the same target directory, which
//! costs next to nothing when they are up to date. It then runs each binary from
//! `target/<profile>/examples/`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use distlock_testkit::{RedisCluster, RedisServer, SentinelGroup};

/// Every example; each has a test of its own below.
const EXAMPLES: [&str; 8] = [
    "demo",
    "order_flow",
    "fencing",
    "guard_api",
    "deadlock",
    "metrics",
    "scheduled_job",
    "leader",
];

/// How long an example may run before it counts as hung.
const TIME_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn demo_runs() {
    run_example("demo");
}

#[test]
fn order_flow_runs_and_its_consistency_check_passes() {
    let output = run_example("order_flow");
    assert!(
        output.contains("consistency check passed"),
        "order_flow printed no passed check:\n{output}"
    );
    // Built with the `metrics` feature, it prints its metrics at the end: the
    // orders' acquisitions, under the macro's template.
    let acquired = output
        .lines()
        .find(|line| {
            line.trim_start().starts_with("distlock_acquired_total{")
                && line.contains("lock=\"order:{order.id}\"")
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse::<f64>().ok());
    assert!(
        acquired.is_some_and(|n| n >= 1.0),
        "order_flow printed no acquisitions of `order:{{order.id}}`:\n{output}"
    );
}

#[test]
fn fencing_refuses_the_stale_write() {
    let output = run_example("fencing");
    assert!(output.contains("REFUSED"), "{output}");
}

#[test]
fn guard_api_runs() {
    run_example("guard_api");
}

/// The refund that takes the locks the other way round: the checker warns of the
/// inversion, detection breaks the deadlock, the retried call completes and the
/// stock adds up.
#[test]
fn deadlock_is_warned_of_broken_and_its_check_passes() {
    let output = run_example("deadlock");
    assert!(output.contains("deadlock broken after"), "{output}");
    assert!(output.contains("consistency check passed"), "{output}");
}

/// Two instances whose timers fire 200 ms apart: the job runs twice per period
/// without a minimum hold time, once with it, and a redeploy right after the job
/// does not let the other instance run it again.
#[test]
fn scheduled_job_runs_once_per_period() {
    let output = run_example("scheduled_job");
    assert!(
        output.contains("the job ran twice in one period"),
        "{output}"
    );
    assert!(
        output.contains("once per period, and B's skips were no errors"),
        "{output}"
    );
    assert!(
        output.contains("left `job:nightly-report` held"),
        "{output}"
    );
}

/// A killed leader (another process) is replaced within one lease, and a leader
/// that loses the lock learns it and steps down.
#[test]
fn leader_is_replaced_within_one_lease() {
    let output = run_example("leader");
    assert!(output.contains("B took over"), "{output}");
    assert!(output.contains("B leads again"), "{output}");
    assert!(output.contains("leader election finished"), "{output}");
}

/// The Prometheus endpoint serves the counts of the run it made.
#[test]
fn metrics_serves_the_counts_of_its_workload() {
    let output = run_example("metrics");
    assert!(output.contains("distlock_acquired_total{"), "{output}");
    assert!(output.contains("metrics check passed"), "{output}");
}

/// The examples read `REDIS_CLUSTER_URLS` too: the order flow on a Redis Cluster,
/// where its locks and SKUs spread over three masters.
#[test]
fn order_flow_runs_on_a_redis_cluster() {
    let cluster = RedisCluster::start(3, 0)
        .expect("start a Redis Cluster (see the testkit's error for how to install redis-server)");
    let output = run_example_with(
        "order_flow",
        &[("REDIS_CLUSTER_URLS", cluster.urls().join(","))],
    );
    assert!(output.contains("the Redis Cluster at"), "{output}");
    assert!(output.contains("consistency check passed"), "{output}");
}

/// The examples read `REDIS_SENTINEL_URLS` and `REDIS_SENTINEL_MASTER` too: every
/// example, one after the other, on the master of one Sentinel group (1 replica, 3
/// Sentinels), as `cargo xtask sentinel` sets it up.
#[test]
fn examples_run_on_a_sentinel_group() {
    let group = SentinelGroup::start("examples", 1, 3)
        .expect("start a Sentinel group (see the testkit's error for how to install redis-server)");
    let env = [
        ("REDIS_SENTINEL_URLS", group.sentinel_urls().join(",")),
        ("REDIS_SENTINEL_MASTER", group.master_name().to_owned()),
    ];
    for name in EXAMPLES {
        let output = run_example_with(name, &env);
        assert!(
            output.contains("the master \"examples\" of the Sentinels at"),
            "{name}:\n{output}"
        );
        if name == "order_flow" {
            assert!(output.contains("consistency check passed"), "{output}");
        }
    }
}

/// Every file in `examples/` with a test above: a new example needs one.
#[test]
fn every_example_is_run_by_a_test() {
    let dir = workspace_root().join("examples");
    let entries = std::fs::read_dir(&dir).expect("read examples/");
    for entry in entries {
        let path = entry.expect("an entry of examples/").path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            let name = path.file_stem().and_then(|s| s.to_str()).expect("a name");
            assert!(
                EXAMPLES.contains(&name),
                "examples/{name}.rs has no test in tests/examples_run.rs: add one"
            );
        }
    }
}

/// Runs the example `name` against a fresh server; panics unless it exits with
/// status 0. Returns what it printed on stdout.
fn run_example(name: &str) -> String {
    let server = RedisServer::start()
        .expect("start redis-server (see the testkit's error for how to install it)");
    run_example_with(name, &[("REDIS_URL", server.url())])
}

/// Runs the example `name` with `env`; panics unless it exits with status 0. Returns
/// what it printed on stdout.
fn run_example_with(name: &str, env: &[(&str, String)]) -> String {
    let mut command = Command::new(example_binary(name));
    command
        .env_remove("REDIS_URL")
        .env_remove("REDIS_CLUSTER_URLS")
        .env_remove("REDIS_SENTINEL_URLS")
        .env_remove("REDIS_SENTINEL_MASTER")
        .envs(env.iter().map(|(key, value)| (key, value)))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|err| panic!("could not start example {name}: {err}"));
    let stdout = collect(child.stdout.take().expect("piped stdout"));
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let status = wait(&mut child, TIME_LIMIT);
    let (stdout, stderr) = (
        stdout.join().expect("stdout reader"),
        stderr.join().expect("stderr reader"),
    );
    match status {
        Some(status) if status.success() => stdout,
        Some(status) => {
            panic!("example {name} failed ({status}).\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
        }
        None => panic!(
            "example {name} did not finish within {TIME_LIMIT:?} and was killed.\n--- stdout\n\
             {stdout}\n--- stderr\n{stderr}"
        ),
    }
}

/// Waits for `child` up to `limit`; kills it and returns `None` when it takes longer.
fn wait(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the example") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a pipe to the end on a thread of its own, so that a full pipe never blocks
/// the example.
fn collect(mut pipe: impl Read + Send + 'static) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The binary of the example `name`, built (once per test run) for the profile and
/// into the target directory of this test.
fn example_binary(name: &str) -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let examples = BUILT
        .get_or_init(build_examples)
        .as_ref()
        .unwrap_or_else(|err| panic!("{err}"));
    let binary = examples.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        binary.is_file(),
        "`cargo build --examples` left no {}",
        binary.display()
    );
    binary
}

/// Runs `cargo build --workspace --examples --features distlock/metrics` for this test's profile and target
/// directory; returns the directory that holds the example binaries.
fn build_examples() -> Result<PathBuf, String> {
    // This test runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().map_err(|err| format!("current_exe: {err}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| format!("{} is not in <target>/<profile>/deps", exe.display()))?;
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("{} has no parent", profile_dir.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(workspace_root())
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--examples",
            // examples/metrics.rs needs the feature.
            "--features",
            "distlock/metrics",
            "--target-dir",
        ])
        .arg(target_dir);
    if profile_dir
        .file_name()
        .is_some_and(|name| name == "release")
    {
        build.arg("--release");
    }
    let status = build
        .status()
        .map_err(|err| format!("could not run `cargo build --examples`: {err}"))?;
    if !status.success() {
        return Err(format!(
            "`cargo build --workspace --examples` failed ({status})"
        ));
    }
    Ok(profile_dir.join("examples"))
}
