//! Every example runs against a throwaway `redis-server` and must exit with status 0,
//! so that the examples cannot rot.
//!
//! `cargo test --all-targets` (and so `cargo xtask test`) builds the examples next to
//! this test: they are run from `target/<profile>/examples/`. When a binary is
//! missing or older than the sources it is built from (`cargo test --test examples`
//! alone does not build examples), the test runs `cargo run --quiet --example <name>`
//! instead.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use distlock_testkit::RedisServer;

/// How long an example may run before it counts as hung.
const TIME_LIMIT: Duration = Duration::from_secs(120);
/// The same when cargo has to build it first.
const TIME_LIMIT_WITH_BUILD: Duration = Duration::from_secs(600);

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

/// Every file in `examples/` with a test above: a new example needs one.
#[test]
fn every_example_is_run_by_a_test() {
    const TESTED: [&str; 4] = ["demo", "order_flow", "fencing", "guard_api"];
    let dir = workspace_root().join("examples");
    let entries = std::fs::read_dir(&dir).expect("read examples/");
    for entry in entries {
        let path = entry.expect("an entry of examples/").path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            let name = path.file_stem().and_then(|s| s.to_str()).expect("a name");
            assert!(
                TESTED.contains(&name),
                "examples/{name}.rs has no test in tests/examples.rs: add one"
            );
        }
    }
}

/// Runs the example `name` against a fresh server; panics unless it exits with
/// status 0. Returns what it printed on stdout.
fn run_example(name: &str) -> String {
    let server = RedisServer::start()
        .expect("start redis-server (see the testkit's error for how to install it)");
    let (mut command, limit) = match built_example(name) {
        Some(binary) => (Command::new(binary), TIME_LIMIT),
        None => {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut command = Command::new(cargo);
            command
                .current_dir(workspace_root())
                .args(["run", "--quiet", "--example", name]);
            (command, TIME_LIMIT_WITH_BUILD)
        }
    };
    command
        .env("REDIS_URL", server.url())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .unwrap_or_else(|err| panic!("could not start example {name}: {err}"));
    let stdout = collect(child.stdout.take().expect("piped stdout"));
    let stderr = collect(child.stderr.take().expect("piped stderr"));
    let status = wait(&mut child, limit);
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
            "example {name} did not finish within {limit:?} and was killed.\n--- stdout\n\
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

/// The example binary that cargo built beside this test, if it is at least as new as
/// every source it is built from.
fn built_example(name: &str) -> Option<PathBuf> {
    // This test runs from target/<profile>/deps/; examples live in target/<profile>/examples/.
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?;
    let binary = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let built = modified(&binary)?;
    let root = workspace_root();
    let sources = [
        root.join("examples").join(format!("{name}.rs")),
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
        root.join("src"),
        root.join("lua"),
        root.join("lock-core"),
        root.join("lock-macros").join("src"),
        root.join("lock-macros").join("Cargo.toml"),
    ];
    let newest = sources.iter().filter_map(|path| newest(path)).max()?;
    (built >= newest).then_some(binary)
}

fn modified(path: &Path) -> Option<SystemTime> {
    path.metadata().ok()?.modified().ok()
}

/// The newest modification time of `path` or, for a directory, of any file in it.
fn newest(path: &Path) -> Option<SystemTime> {
    let meta = path.metadata().ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| newest(&entry.path()))
        .max()
}
