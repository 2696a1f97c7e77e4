//! The client side of one schedule: a current-thread Tokio runtime on a paused
//! clock that never moves on its own, the clients, and one task per running
//! operation. The explorer (another thread) drives it with [`Cmd`]s.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use distlock::{LockClient, LockError, LockGuard, LockOrderCheck, MultiLockGuard};

use crate::world::{Op, World};

/// How long the client waits for a reply before it retries or replays.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_millis(200);
/// The lease: long, so that real time never ends it on the server.
pub(crate) const LEASE: Duration = Duration::from_secs(30);
/// How long an acquisition waits.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// One guard an actor holds.
pub(crate) enum Guard {
    One(LockGuard),
    All(MultiLockGuard),
}

impl Guard {
    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Guard::One(g) => g.is_lost(),
            Guard::All(g) => g.is_lost(),
        }
    }

    pub(crate) fn token(&self) -> Option<u64> {
        match self {
            Guard::One(g) => g.fencing_token(),
            Guard::All(_) => None,
        }
    }

    pub(crate) fn names(&self) -> Vec<String> {
        match self {
            Guard::One(g) => vec![g.name().to_owned()],
            Guard::All(g) => g.names().map(str::to_owned).collect(),
        }
    }

    fn context(&self) -> distlock::LockContext {
        match self {
            Guard::One(g) => g.context(),
            Guard::All(g) => g.context(),
        }
    }
}

/// A guard and what the explorer knows of it.
pub(crate) struct Held {
    pub(crate) guard: Guard,
    pub(crate) op: Op,
    /// Its lease was ended by the world (force-unlock, expiry) after it was granted:
    /// the holder cannot know before its next renewal.
    pub(crate) revoked: bool,
    /// Its hold vanished with a replaced server: until the guard is told (lost), it
    /// still believes it holds, and its client must grant the lock to nobody else.
    pub(crate) vanished: bool,
}

/// What an operation ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Lost,
    Skipped,
    /// Refused with `ClientShutDown`.
    ShutDown,
    Failed(String),
}

/// One actor's state, shared between the runtime and the explorer.
#[derive(Default)]
pub(crate) struct ActorState {
    pub(crate) guards: Vec<Held>,
    /// The index of the next operation of its program.
    pub(crate) next: usize,
    pub(crate) running: bool,
    /// Each finished operation: its index, and how it ended.
    pub(crate) done: Vec<(usize, Outcome)>,
    /// When the running operation started, on the [`Shared::events`] count.
    pub(crate) started_at: u64,
    /// Each operation run on the runtime: its index, and when it started and ended
    /// on the [`Shared::events`] count (which orders them across actors).
    pub(crate) spans: Vec<(usize, u64, u64)>,
}

/// Everything of a schedule the runtime and the explorer share.
pub(crate) struct Shared {
    pub(crate) actors: Vec<Mutex<ActorState>>,
    /// Moves whenever an operation starts or ends.
    pub(crate) events: AtomicU64,
    /// Whether the runtime's thread is idle (parked), and since when.
    pub(crate) runtime: Mutex<Idle>,
}

/// Whether the runtime's thread is idle (parked), and since when: a park looks at
/// the sockets first, so an idle runtime has taken in everything written to them
/// before it parked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Idle {
    pub(crate) parked: bool,
    pub(crate) since: std::time::Instant,
}

impl Shared {
    pub(crate) fn idle(&self) -> MutexGuard<'_, Idle> {
        self.runtime.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn actor(&self, index: usize) -> MutexGuard<'_, ActorState> {
        self.actors[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

pub(crate) enum Cmd {
    Start(usize, Op, mpsc::Sender<()>),
    Advance(Duration, mpsc::Sender<()>),
    Probe(mpsc::Sender<()>),
    Force(String, mpsc::Sender<Result<bool, String>>),
    /// Drops every guard still held, in the runtime.
    DropAll(mpsc::Sender<()>),
    Stop,
}

/// The runtime thread of one schedule.
pub(crate) struct Harness {
    pub(crate) shared: Arc<Shared>,
    cmds: tokio::sync::mpsc::UnboundedSender<Cmd>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Harness {
    /// Starts the runtime and connects one client per proxy URL, and an operator's
    /// client straight to the server.
    pub(crate) fn start(
        world: &World,
        urls: &[String],
        server_url: &str,
        namespace: &str,
    ) -> Result<Harness, String> {
        let shared = Arc::new(Shared {
            actors: world.actors.iter().map(|_| Mutex::default()).collect(),
            events: AtomicU64::new(0),
            runtime: Mutex::new(Idle {
                parked: false,
                since: std::time::Instant::now(),
            }),
        });
        let (cmds, rx) = tokio::sync::mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = mpsc::channel();
        let world = world.clone();
        let urls = urls.to_vec();
        let server_url = server_url.to_owned();
        let namespace = namespace.to_owned();
        let thread = thread::Builder::new()
            .name("explore-runtime".into())
            .spawn({
                let shared = shared.clone();
                move || run(world, urls, server_url, namespace, shared, rx, ready_tx)
            })
            .map_err(|e| e.to_string())?;
        match ready_rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Ok(())) => Ok(Harness {
                shared,
                cmds,
                thread: Some(thread),
            }),
            Ok(Err(err)) => Err(err),
            Err(_) => Err("the clients did not connect within 30 s".into()),
        }
    }

    fn call(&self, cmd: impl FnOnce(mpsc::Sender<()>) -> Cmd) {
        let (tx, rx) = mpsc::channel();
        if self.cmds.send(cmd(tx)).is_ok() {
            let _ = rx.recv_timeout(Duration::from_secs(30));
        }
    }

    pub(crate) fn start_op(&self, actor: usize, op: Op) {
        self.call(|tx| Cmd::Start(actor, op, tx));
    }

    pub(crate) fn advance(&self, by: Duration) {
        self.call(|tx| Cmd::Advance(by, tx));
    }

    pub(crate) fn probe(&self) {
        self.call(Cmd::Probe);
    }

    pub(crate) fn drop_all(&self) {
        self.call(Cmd::DropAll);
    }

    pub(crate) fn force(&self, name: &str) -> Result<bool, String> {
        let (tx, rx) = mpsc::channel();
        let _ = self.cmds.send(Cmd::Force(name.to_owned(), tx));
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| "force_unlock did not answer".to_owned())?
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.cmds.send(Cmd::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(
    world: World,
    urls: Vec<String>,
    server_url: String,
    namespace: String,
    shared: Arc<Shared>,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Cmd>,
    ready: mpsc::Sender<Result<(), String>>,
) {
    let park = shared.clone();
    let unpark = shared.clone();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .on_thread_park(move || {
            *park.idle() = Idle {
                parked: true,
                since: std::time::Instant::now(),
            }
        })
        .on_thread_unpark(move || unpark.idle().parked = false)
        .build()
    {
        Ok(rt) => rt,
        Err(err) => {
            let _ = ready.send(Err(err.to_string()));
            return;
        }
    };
    // While a blocking task runs, a paused clock does not move on its own: time
    // passes only when the explorer says so (Cmd::Advance), never while a real
    // reply is on its way.
    let (freeze, frozen) = mpsc::channel::<()>();
    rt.spawn_blocking(move || {
        let _ = frozen.recv();
    });
    rt.block_on(async move {
        let operator = world.actors.iter().any(|a| a.program.contains(&Op::Force));
        let targets: Vec<&String> = urls.iter().chain(operator.then_some(&server_url)).collect();
        let connecting = targets.iter().map(|url| {
            LockClient::builder()
                .url(url.as_str())
                .namespace(namespace.as_str())
                .service("explore")
                .response_timeout(RESPONSE_TIMEOUT)
                .default_lease(LEASE)
                .default_wait(WAIT)
                .fencing(true)
                // The checks tell owners apart by the site each names (its label).
                .name_holders_at_once(true)
                .lock_order(LockOrderCheck::Off)
                .deadlock_check_after(None)
                .connect()
        });
        let mut clients = Vec::new();
        for (url, connected) in targets.iter().zip(futures_join(connecting).await) {
            match connected {
                Ok(client) => clients.push(client),
                Err(err) => {
                    let _ = ready.send(Err(format!("connect to {url}: {err}")));
                    return;
                }
            }
        }
        let _ = ready.send(Ok(()));
        let clients = Arc::new(clients);
        let operator = clients.len() - 1;
        while let Some(cmd) = rx.recv().await {
            match cmd {
                Cmd::Start(actor, op, done) => {
                    let at = shared.events.fetch_add(1, Ordering::SeqCst) + 1;
                    let mut state = shared.actor(actor);
                    state.running = true;
                    state.started_at = at;
                    drop(state);
                    let task = run_op(world.clone(), clients.clone(), shared.clone(), actor, op);
                    tokio::spawn(task);
                    let _ = done.send(());
                }
                Cmd::Advance(by, done) => {
                    tokio::time::advance(by).await;
                    let _ = done.send(());
                }
                Cmd::Probe(done) => {
                    tokio::task::yield_now().await;
                    let _ = done.send(());
                }
                Cmd::Force(name, done) => {
                    let forced = clients[operator].force_unlock(name.as_str()).await;
                    let _ = done.send(forced.map_err(|e| e.to_string()));
                }
                Cmd::DropAll(done) => {
                    for state in &shared.actors {
                        let guards: Vec<Held> = state
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .guards
                            .drain(..)
                            .collect();
                        drop(guards);
                    }
                    let _ = done.send(());
                }
                Cmd::Stop => break,
            }
        }
        // No graceful shutdown: time is frozen, and the proxies may hold what it
        // would wait for. The clients and their tasks go with the runtime.
        drop(clients);
    });
    drop(freeze);
    rt.shutdown_timeout(Duration::from_millis(100));
}

/// Awaits every future, concurrently, in order.
async fn futures_join<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let handles: Vec<_> = futures.map(|f| Box::pin(f)).collect();
    let mut out = Vec::with_capacity(handles.len());
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    let mut results: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut all = true;
        for (slot, result) in pending.iter_mut().zip(results.iter_mut()) {
            if let Some(fut) = slot {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *result = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => all = false,
                }
            }
        }
        if all {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    out.extend(results.into_iter().flatten());
    out
}

/// Runs one operation of `actor` and records how it ended.
async fn run_op(
    world: World,
    clients: Arc<Vec<LockClient>>,
    shared: Arc<Shared>,
    actor: usize,
    op: Op,
) {
    let spec = &world.actors[actor];
    let Some(client) = spec.client.map(|c| clients[c].clone()) else {
        finish(&shared, actor, Outcome::Skipped);
        return;
    };
    let label = spec.label;
    let newest_context = |of: usize| {
        shared
            .actor(of)
            .guards
            .last()
            .map(|held| held.guard.context())
    };
    let result: Result<Option<Guard>, LockError> = match op {
        Op::Lock => client
            .lock("x")
            .function(label)
            .await
            .map(|g| Some(Guard::One(g))),
        Op::Read => client
            .read_lock("x")
            .function(label)
            .await
            .map(|g| Some(Guard::One(g))),
        Op::Write => client
            .write_lock("x")
            .function(label)
            .await
            .map(|g| Some(Guard::One(g))),
        Op::Sem => client
            .semaphore("x", 1)
            .acquire()
            .function(label)
            .await
            .map(|g| Some(Guard::One(g))),
        Op::All => client
            .lock_all(["x", "y"])
            .function(label)
            .await
            .map(|g| Some(Guard::All(g))),
        Op::Reenter | Op::Handover => {
            let of = if op == Op::Handover {
                spec.shares.unwrap_or(actor)
            } else {
                actor
            };
            match newest_context(of) {
                Some(context) => context
                    .scope(client.lock("x").function(label).into_future())
                    .await
                    .map(|g| Some(Guard::One(g))),
                None => {
                    finish(&shared, actor, Outcome::Skipped);
                    return;
                }
            }
        }
        Op::Unlock => {
            let newest = shared.actor(actor).guards.pop();
            match newest {
                Some(Held {
                    guard: Guard::One(g),
                    ..
                }) => g.unlock().await.map(|()| None),
                Some(Held {
                    guard: Guard::All(g),
                    ..
                }) => g.unlock().await.map(|()| None),
                None => {
                    finish(&shared, actor, Outcome::Skipped);
                    return;
                }
            }
        }
        Op::Drop => {
            let newest = shared.actor(actor).guards.pop();
            let outcome = if newest.is_some() {
                Outcome::Ok
            } else {
                Outcome::Skipped
            };
            drop(newest);
            finish(&shared, actor, outcome);
            return;
        }
        Op::Shutdown => {
            let report = client.shutdown().await;
            let outcome = if report.is_complete() {
                Outcome::Ok
            } else {
                Outcome::Failed(format!("shutdown incomplete: {report:?}"))
            };
            finish(&shared, actor, outcome);
            return;
        }
        Op::Renew
        | Op::Force
        | Op::Expire
        | Op::Replace
        | Op::ReplaceLoaded
        | Op::Outage
        | Op::Lapse => Ok(None),
    };
    let outcome = match result {
        Ok(Some(guard)) => {
            shared.actor(actor).guards.push(Held {
                guard,
                op,
                revoked: false,
                vanished: false,
            });
            Outcome::Ok
        }
        Ok(None) => Outcome::Ok,
        Err(LockError::Lost { .. }) => Outcome::Lost,
        Err(err) if err.is_client_shut_down() => Outcome::ShutDown,
        Err(err) => Outcome::Failed(err.to_string()),
    };
    finish(&shared, actor, outcome);
}

fn finish(shared: &Shared, actor: usize, outcome: Outcome) {
    let mut state = shared.actor(actor);
    let at = shared.events.fetch_add(1, Ordering::SeqCst) + 1;
    let index = state.next;
    let started = state.started_at;
    state.done.push((index, outcome));
    state.spans.push((index, started, at));
    state.next += 1;
    state.running = false;
}

use std::future::IntoFuture;
