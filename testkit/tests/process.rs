//! `ChildProcess`, and children dying with the test process.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use distlock_testkit::{ChildProcess, RedisServer};

const HELPER_ENV: &str = "DISTLOCK_TESTKIT_HELPER";
const SECOND: Duration = Duration::from_secs(1);

/// The state letter of `pid` from `/proc`, or `None` once it is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

fn gone(pid: u32) -> bool {
    matches!(state(pid), None | Some('Z'))
}

fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]);
    cmd
}

#[test]
fn reads_lines_and_writes_stdin() {
    let mut cmd = sh("echo ready; read x; echo \"got $x\"; exec sleep 60");
    cmd.stdin(Stdio::piped());
    let mut child = ChildProcess::spawn(cmd).expect("spawn sh");
    assert_eq!(
        child.read_line_timeout(5 * SECOND).as_deref(),
        Some("ready")
    );
    assert_eq!(child.read_line_timeout(Duration::from_millis(100)), None);
    child
        .stdin()
        .expect("piped stdin")
        .write_all(b"hi\n")
        .expect("write stdin");
    assert_eq!(
        child.read_line_timeout(5 * SECOND).as_deref(),
        Some("got hi")
    );
}

#[test]
fn stop_cont_and_kill() {
    let mut child = ChildProcess::spawn(sh("echo ready; exec sleep 60")).expect("spawn sh");
    let pid = child.pid();
    assert_eq!(
        child.read_line_timeout(5 * SECOND).as_deref(),
        Some("ready")
    );

    child.stop().expect("SIGSTOP");
    wait_until("stopped", 5 * SECOND, || state(pid) == Some('T'));
    assert!(child.is_running(), "a stopped process still runs");
    child.cont().expect("SIGCONT");
    wait_until("continued", 5 * SECOND, || state(pid) != Some('T'));

    assert_eq!(
        child.wait_timeout(Duration::from_millis(50)).expect("wait"),
        None
    );
    child.kill().expect("SIGKILL");
    child.kill().expect("kill is idempotent");
    assert!(!child.is_running());
    assert!(gone(pid));
    let status = child.wait_timeout(SECOND).expect("wait").expect("exited");
    assert!(!status.success());
    assert!(child.stop().expect_err("reaped").is_not_running());
}

#[test]
fn wait_timeout_returns_the_exit_status() {
    let mut child = ChildProcess::spawn(sh("echo bye; exit 3")).expect("spawn sh");
    let status = child
        .wait_timeout(5 * SECOND)
        .expect("wait")
        .expect("exited");
    assert_eq!(status.code(), Some(3));
    assert_eq!(child.read_line_timeout(SECOND).as_deref(), Some("bye"));
    assert_eq!(child.read_line_timeout(SECOND), None, "stdout is closed");
}

#[test]
fn drop_kills_the_child() {
    let child = ChildProcess::spawn(sh("exec sleep 60")).expect("spawn sh");
    let pid = child.pid();
    drop(child);
    assert!(gone(pid));
}

#[test]
fn spawn_error_names_the_program() {
    let err =
        ChildProcess::spawn(Command::new("/nonexistent/program")).expect_err("no such program");
    assert!(err.to_string().contains("/nonexistent/program"), "{err}");
}

/// Not a test on its own: `children_die_with_the_test_process` runs this test
/// binary again with `DISTLOCK_TESTKIT_HELPER` set to run this function.
#[test]
fn helper_start_a_server_and_hang() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    // Started from a short-lived thread on purpose: it must not matter.
    let server = std::thread::spawn(|| RedisServer::start().expect("start redis-server"))
        .join()
        .expect("starter thread");
    let sleeper = ChildProcess::spawn(sh("exec sleep 60")).expect("spawn sh");
    println!("PIDS {} {}", server.pid(), sleeper.pid());
    std::thread::sleep(Duration::from_secs(60));
}

/// Reaps `pid`, a child or an orphan handed to this process as subreaper, and
/// returns the signal that killed it.
#[cfg(target_os = "linux")]
fn reap_killing_signal(pid: u32, timeout: Duration) -> Option<i32> {
    let raw = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    let deadline = Instant::now() + timeout;
    loop {
        let mut status = 0;
        // SAFETY: `waitpid` only writes the status through the valid pointer.
        match unsafe { libc::waitpid(raw, &mut status, libc::WNOHANG) } {
            0 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            0 => {
                // Do not leak it: it is our (adopted, unreaped) child, so the pid is safe.
                // SAFETY: plain system calls.
                unsafe {
                    libc::kill(raw, libc::SIGKILL);
                    libc::waitpid(raw, &mut status, 0);
                }
                panic!("{pid} was still running after its parent was killed");
            }
            r if r == raw => {
                return libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
            }
            _ => panic!("waitpid({pid}): {}", std::io::Error::last_os_error()),
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn children_die_with_the_test_process() {
    // Become a subreaper: the helper's children, orphaned when it is killed, are
    // handed to this process, which can then check how they ended (and reap them,
    // so no zombie is left behind when PID 1 does not reap).
    // SAFETY: plain system call, no pointers.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());

    let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
    cmd.args(["helper_start_a_server_and_hang", "--exact", "--nocapture"])
        .env(HELPER_ENV, "1");
    let mut helper = ChildProcess::spawn(cmd).expect("spawn the helper");
    let deadline = Instant::now() + 15 * SECOND;
    let pids: Vec<u32> = loop {
        assert!(Instant::now() < deadline, "the helper printed no pids");
        if let Some(line) = helper.read_line_timeout(SECOND) {
            if let Some(rest) = line.strip_prefix("PIDS ") {
                break rest
                    .split(' ')
                    .map(|pid| pid.parse().expect("a pid"))
                    .collect();
            }
        }
    };
    for &pid in &pids {
        assert!(!gone(pid), "{pid} died too early");
    }
    // SIGKILL: no destructor runs in the helper, only the kernel can clean up.
    let helper_pid = helper.pid();
    helper.kill().expect("SIGKILL the helper");
    for &pid in &pids {
        assert_eq!(
            reap_killing_signal(pid, 5 * SECOND),
            Some(libc::SIGKILL),
            "{pid} did not die of SIGKILL"
        );
    }
    // The server's directory stays behind (the next start in any process would
    // sweep it, as its owner is gone): remove it now.
    let prefix = format!("distlock-testkit-{helper_pid}-");
    for entry in std::fs::read_dir(std::env::temp_dir())
        .expect("read the temp dir")
        .flatten()
    {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            std::fs::remove_dir_all(entry.path()).expect("remove the helper's directory");
        }
    }
}
