//! Spawning children that die with the test process, and [`ChildProcess`].

use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::TestkitError;

/// A request to the spawner thread: the command to spawn and where to send the result.
struct SpawnRequest {
    command: Command,
    reply: mpsc::SyncSender<io::Result<Child>>,
}

/// The sender side of the spawner thread, started on first use.
static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);

/// Spawns `command` so that the child gets `SIGKILL` when the test process dies.
///
/// On Linux the child asks for `PR_SET_PDEATHSIG(SIGKILL)` before `exec`. The kernel
/// sends that signal when the *thread* that forked the child exits, not only when the
/// process does. A server started from a short-lived thread (a tokio blocking thread,
/// a scoped thread, a test thread) would then die with that thread. So every child
/// is forked by one dedicated spawner thread that lives as long as the process.
pub(crate) fn spawn_tied(mut command: Command) -> io::Result<Child> {
    tie_to_parent(&mut command);
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let mut request = SpawnRequest {
        command,
        reply: reply_tx,
    };
    // Two rounds: if the spawner thread is gone (it never exits on purpose, but a
    // panic in `spawn` would end it), start a new one and try again.
    for _ in 0..2 {
        let sender = spawner()?;
        match sender.send(request) {
            Ok(()) => {
                return reply_rx.recv().unwrap_or_else(|_| {
                    Err(io::Error::other("the testkit spawner thread stopped"))
                })
            }
            Err(mpsc::SendError(returned)) => {
                request = returned;
                *SPAWNER.lock().unwrap_or_else(PoisonError::into_inner) = None;
            }
        }
    }
    Err(io::Error::other(
        "the testkit spawner thread keeps stopping",
    ))
}

/// Returns a sender to the spawner thread, starting it if needed.
fn spawner() -> io::Result<mpsc::Sender<SpawnRequest>> {
    let mut slot = SPAWNER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(sender) = slot.as_ref() {
        return Ok(sender.clone());
    }
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    thread::Builder::new()
        .name("distlock-testkit-spawner".into())
        .spawn(move || {
            // Lives until the process exits: `SPAWNER` keeps a sender forever.
            for SpawnRequest { mut command, reply } in rx {
                // The requester may have given up; nothing to do then (the child,
                // if any, is dropped and dies with the process).
                let _ = reply.send(command.spawn());
            }
        })?;
    *slot = Some(tx.clone());
    Ok(tx)
}

#[cfg(target_os = "linux")]
fn tie_to_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec, so it may only
    // call async-signal-safe functions: `prctl` and `getppid` are system calls, and
    // `io::Error::from_raw_os_error` / `last_os_error` do not allocate.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl took effect: then nobody
            // would ever kill this child, so do not exec at all.
            if libc::getppid() as u32 != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn tie_to_parent(_command: &mut Command) {
    // No parent-death signal outside Linux: children are still killed on drop, but
    // not when the test process itself is killed.
}

/// Sends `signal` to `pid`.
pub(crate) fn send_signal(
    pid: u32,
    signal: libc::c_int,
    name: &'static str,
) -> Result<(), TestkitError> {
    let raw = libc::pid_t::try_from(pid).map_err(|_| TestkitError::Signal {
        signal: name,
        pid,
        source: io::Error::from(io::ErrorKind::InvalidInput),
    })?;
    // SAFETY: `kill` has no memory-safety preconditions. The callers only pass the
    // pid of a child they have not reaped yet, so the pid cannot have been reused.
    if unsafe { libc::kill(raw, signal) } == -1 {
        return Err(TestkitError::Signal {
            signal: name,
            pid,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Kills `child` with `SIGKILL` and reaps it.
pub(crate) fn kill_and_reap(child: &mut Child) -> io::Result<ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    match child.kill() {
        Ok(()) => {}
        // Exited between `try_wait` and `kill`: reaping below still works.
        Err(err) if err.kind() == io::ErrorKind::InvalidInput => {}
        Err(err) => return Err(err),
    }
    child.wait()
}

/// Polls `child` until it exits or `timeout` passes.
pub(crate) fn wait_child_timeout(
    child: &mut Child,
    timeout: Duration,
) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// An arbitrary child process for process-fault tests, killed on drop.
///
/// Spawned like the Redis servers of this crate: on Linux it gets `SIGKILL` when the
/// test process dies, even if the thread that called [`ChildProcess::spawn`] exits
/// first (see the [crate docs](crate#processes-die-with-the-test)). Its standard
/// output is captured line by line for [`ChildProcess::read_line_timeout`]; standard
/// error and standard input are left as the [`Command`] sets them (inherited by
/// default).
///
/// # Examples
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use distlock_testkit::ChildProcess;
///
/// let mut cmd = Command::new("sh");
/// cmd.args(["-c", "echo ready; sleep 60"]);
/// let mut child = ChildProcess::spawn(cmd)?;
/// assert_eq!(child.read_line_timeout(Duration::from_secs(5)).as_deref(), Some("ready"));
/// child.stop()?; // SIGSTOP
/// child.cont()?; // SIGCONT
/// child.kill()?; // SIGKILL, and reaped
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub struct ChildProcess {
    program: PathBuf,
    pid: u32,
    /// `None` once the child has been reaped: its pid may belong to someone else then.
    child: Option<Child>,
    status: Option<ExitStatus>,
    lines: mpsc::Receiver<String>,
}

impl ChildProcess {
    /// Spawns `command` with its standard output piped to the testkit.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Spawn`] when the operating system cannot start the program.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use std::time::Duration;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut command = Command::new("sh");
    /// command.args(["-c", "echo ready; sleep 60"]);
    /// let mut child = ChildProcess::spawn(command)?;
    /// assert_eq!(child.read_line_timeout(Duration::from_secs(5)).as_deref(), Some("ready"));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn spawn(mut command: Command) -> Result<ChildProcess, TestkitError> {
        let program = PathBuf::from(command.get_program());
        command.stdout(Stdio::piped());
        let mut child = spawn_tied(command).map_err(|source| TestkitError::Spawn {
            program: program.clone(),
            source,
        })?;
        let (tx, lines) = mpsc::channel();
        if let Some(stdout) = child.stdout.take() {
            let reader = thread::Builder::new()
                .name("distlock-testkit-stdout".into())
                .spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
            if let Err(source) = reader {
                // Without a reader the child could block on a full pipe: give up.
                let _ = kill_and_reap(&mut child);
                return Err(TestkitError::io(
                    "could not start a stdout reader thread",
                    source,
                ));
            }
        }
        Ok(ChildProcess {
            program,
            pid: child.id(),
            child: Some(child),
            status: None,
            lines,
        })
    }

    /// The process id.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut command = Command::new("sleep");
    /// command.arg("60");
    /// let child = ChildProcess::spawn(command)?;
    /// println!("the child is process {}", child.pid());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `SIGKILL` and reaps the process. Does nothing if it already ended.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] if the process could not be killed or reaped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut command = Command::new("sleep");
    /// command.arg("60");
    /// let mut child = ChildProcess::spawn(command)?;
    /// child.kill()?; // a crash in the middle of the work
    /// assert!(!child.is_running());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn kill(&mut self) -> Result<(), TestkitError> {
        if let Some(mut child) = self.child.take() {
            let status = kill_and_reap(&mut child).map_err(|source| {
                TestkitError::io(format!("could not kill {}", self.what()), source)
            })?;
            self.status = Some(status);
        }
        Ok(())
    }

    /// Sends `SIGSTOP`: the process freezes until [`ChildProcess::cont`].
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] once the process has been reaped;
    /// [`TestkitError::Signal`] if the signal could not be sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut command = Command::new("sleep");
    /// command.arg("60");
    /// let child = ChildProcess::spawn(command)?;
    /// child.stop()?; // a long GC pause, while it may hold a lock
    /// child.cont()?;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn stop(&self) -> Result<(), TestkitError> {
        self.signal(libc::SIGSTOP, "SIGSTOP")
    }

    /// Sends `SIGCONT`: a process frozen by [`ChildProcess::stop`] runs again.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] once the process has been reaped;
    /// [`TestkitError::Signal`] if the signal could not be sent.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut command = Command::new("sleep");
    /// command.arg("60");
    /// let mut child = ChildProcess::spawn(command)?;
    /// child.stop()?;
    /// child.cont()?; // it runs again, and finds out whether its lock was lost
    /// assert!(child.is_running());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn cont(&self) -> Result<(), TestkitError> {
        self.signal(libc::SIGCONT, "SIGCONT")
    }

    fn signal(&self, signal: libc::c_int, name: &'static str) -> Result<(), TestkitError> {
        if self.child.is_none() {
            return Err(TestkitError::NotRunning { what: self.what() });
        }
        send_signal(self.pid, signal, name)
    }

    /// Waits up to `timeout` for the process to exit.
    ///
    /// Returns `Ok(Some(status))` once it has exited (also on later calls), and
    /// `Ok(None)` if it is still running after `timeout`.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] if waiting for the process failed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use std::time::Duration;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut child = ChildProcess::spawn(Command::new("true"))?;
    /// let status = child.wait_timeout(Duration::from_secs(5))?.expect("it exited");
    /// assert!(status.success());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<ExitStatus>, TestkitError> {
        if let Some(child) = self.child.as_mut() {
            let waited = wait_child_timeout(child, timeout).map_err(|source| {
                TestkitError::io(format!("could not wait for {}", self.what()), source)
            })?;
            if let Some(status) = waited {
                self.status = Some(status);
                self.child = None;
            }
        }
        Ok(self.status)
    }

    /// Whether the process is still running (not yet exited). A stopped
    /// (`SIGSTOP`) process counts as running.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use distlock_testkit::ChildProcess;
    ///
    /// let mut command = Command::new("sleep");
    /// command.arg("60");
    /// let mut child = ChildProcess::spawn(command)?;
    /// assert!(child.is_running());
    /// child.kill()?;
    /// assert!(!child.is_running());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn is_running(&mut self) -> bool {
        matches!(self.wait_timeout(Duration::ZERO), Ok(None))
    }

    /// The next line of the process's standard output, without its line ending.
    ///
    /// Returns `None` if no full line arrives within `timeout`, or if standard
    /// output was closed and every line has been read.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::process::Command;
    /// use std::time::Duration;
    /// use distlock_testkit::{ChildProcess, History};
    ///
    /// let mut command = Command::new("target/debug/examples/worker"); // prints SECTION lines
    /// command.arg("--iterations=10");
    /// let mut child = ChildProcess::spawn(command)?;
    /// let history = History::new();
    /// while let Some(line) = child.read_line_timeout(Duration::from_secs(10)) {
    ///     history.extend_from_lines(&line);
    /// }
    /// history.check().assert_clean();
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn read_line_timeout(&mut self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// The standard input of the process, if the [`Command`] set it to
    /// [`Stdio::piped()`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::io::Write;
    /// use std::process::{Command, Stdio};
    /// use std::time::Duration;
    /// use distlock_testkit::ChildProcess;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let mut command = Command::new("cat");
    /// command.stdin(Stdio::piped());
    /// let mut child = ChildProcess::spawn(command)?;
    /// let stdin = child.stdin().expect("piped");
    /// writeln!(stdin, "go")?; // e.g. tell a child to release its lock
    /// assert_eq!(child.read_line_timeout(Duration::from_secs(5)).as_deref(), Some("go"));
    /// # Ok(()) }
    /// ```
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.child.as_mut().and_then(|child| child.stdin.as_mut())
    }

    fn what(&self) -> String {
        format!("process {} ({})", self.pid, self.program.display())
    }
}

impl fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildProcess")
            .field("program", &self.program)
            .field("pid", &self.pid)
            .field("reaped", &self.child.is_none())
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
