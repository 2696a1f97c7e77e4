//! What the command tests share: running the built `distlock` binary, reading its
//! output, and lock clients on a throwaway server.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use distlock::LockClient;
use serde_json::Value;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_distlock");

/// A `distlock` command with `args`, its environment cleared of anything that
/// could point it at another server.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("REDIS_URL")
        .env_remove("DISTLOCK_SENTINEL_NODE_PASSWORD")
        .env_remove("DISTLOCK_ADMIN_TOKEN")
        .env("USER", "ops-tester");
    command
}

/// Runs `distlock --url URL ARGS...` to the end, with `stdin` as its input, off the
/// async runtime (the test's lock clients keep running meanwhile).
pub async fn run_with_input(url: &str, args: &[&str], stdin: &str) -> Output {
    let mut all = vec!["--url".to_owned(), url.to_owned()];
    all.extend(args.iter().map(|arg| (*arg).to_owned()));
    let stdin = stdin.to_owned();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        let mut child = command(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the distlock binary starts");
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.as_bytes()).expect("stdin is written");
        }
        child.wait_with_output().expect("distlock runs to the end")
    })
    .await
    .expect("the blocking task ends")
}

/// Runs `distlock --url URL ARGS...` with no input.
pub async fn run(url: &str, args: &[&str]) -> Output {
    run_with_input(url, args, "").await
}

/// Runs `distlock ARGS...` (no `--url`) with no input.
pub async fn run_bare(args: &[&str]) -> Output {
    let all: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        command(&args)
            .stdin(Stdio::null())
            .output()
            .expect("distlock runs to the end")
    })
    .await
    .expect("the blocking task ends")
}

/// The exit code (`None` when killed by a signal).
pub fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

/// Stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Stdout parsed as one JSON object.
pub fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is one JSON object ({err}):\n{}\nstderr:\n{}",
            stdout(output),
            stderr(output)
        )
    })
}

/// Stdout parsed as one JSON object per line.
pub fn json_lines(output: &Output) -> Vec<Value> {
    stdout(output)
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|err| panic!("a line of JSON ({err}): {line}"))
        })
        .collect()
}

/// A lock client on `url`. Its response timeout of 5 s makes the record of a final
/// release (`:freed:<owner>`) last 20 s (four response timeouts), longer than any
/// test.
pub async fn client(url: &str) -> LockClient {
    LockClient::builder()
        .url(url)
        .response_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("the test's lock client connects")
}

/// Waits until every holder of each of `names` is named (a hold is named by its
/// first renewal, 1 s after its grant); panics when one is not within 3 s.
pub async fn named(locks: &LockClient, names: &[&str]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    for name in names {
        loop {
            let info = locks.inspect(*name).await.expect("inspect");
            if info.holders.iter().all(|holder| holder.info.is_some()) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "`{name}` not named within 3 s: {info:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A running `distlock` whose stdout lines are read as they come.
pub struct Running {
    /// The process.
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    /// Starts `distlock ARGS...` with stdout piped, stderr inherited.
    pub fn start(args: &[&str]) -> Running {
        Self::start_with_env(args, &[])
    }

    /// As [`Running::start`], with the variables `env` set.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut child = command(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the distlock binary starts");
        let stdout: ChildStdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// The next stdout line, waited for up to `timeout` (off the async runtime).
    pub async fn next_line(&mut self, timeout: Duration) -> String {
        let received = tokio::task::block_in_place(|| self.lines.recv_timeout(timeout));
        received.unwrap_or_else(|err| panic!("no line from distlock within {timeout:?}: {err}"))
    }

    /// Sends SIGINT (as Ctrl-C does) and waits for the exit code.
    pub async fn interrupt(mut self) -> Option<i32> {
        let pid = self.child.id().to_string();
        tokio::task::block_in_place(move || {
            let sent = Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .expect("kill runs");
            assert!(sent.success(), "SIGINT was sent");
            self.child.wait().expect("distlock exits").code()
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
