//! [`StepProxy`]: a TCP proxy on loopback that holds chosen requests until the test
//! releases each one, and decides what becomes of its reply.
//!
//! Where [`FaultProxy`](crate::FaultProxy) shapes a stream of bytes (delays, drops
//! and resets by direction), a step proxy sees commands: it cuts the client's bytes
//! into RESP frames, forwards the ones the test does not care about at once, and
//! stops the others in front of the server. The test picks a stopped request and a
//! [`Delivery`] for it; nothing else on that connection overtakes it (TCP keeps
//! order). A schedule of such choices is a replayable list, which is what an
//! explorer of interleavings needs.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::TestkitError;
use crate::proxy::abort;

/// How long connecting to the upstream server may take.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest frame the proxy accepts (a guard against garbage).
const MAX_FRAME: usize = 64 * 1024 * 1024;

/// What becomes of a request the test releases, and of its reply.
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::{Delivery, RedisServer, StepProxy};
///
/// let server = RedisServer::start()?;
/// let proxy = StepProxy::start(server.addr(), |args| args[0].eq_ignore_ascii_case(b"SET"))?;
/// // ... a client sends SET through `proxy.url()` ...
/// if let Some(request) = proxy.held().first() {
///     // Applied by the server, but the client never hears of it.
///     proxy.deliver(request.id, Delivery::LostReply)?;
/// }
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// The request reaches the server and its reply the client, in order.
    InOrder,
    /// The request reaches the server; its reply is kept by the proxy until
    /// [`StepProxy::release_late`] (after the client gave up waiting, say).
    LateReply,
    /// The request reaches the server; its reply is dropped and the connection reset.
    LostReply,
    /// The request is dropped and the connection reset: the server never sees it.
    Dropped,
}

/// A request the proxy holds in front of the server, first in its connection's line.
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::{RedisServer, StepProxy};
///
/// let server = RedisServer::start()?;
/// let proxy = StepProxy::start(server.addr(), |_| true)?;
/// for request in proxy.held() {
///     println!("connection {} holds {:?}", request.conn, String::from_utf8_lossy(&request.args[0]));
/// }
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRequest {
    /// The request's number, unique in this proxy, in the order requests arrived.
    pub id: u64,
    /// The number of its connection, in the order connections were accepted.
    pub conn: u64,
    /// The command and its arguments.
    pub args: Vec<Vec<u8>>,
}

/// A request on its way: its bytes, and whether it waits for the test.
struct Frame {
    id: u64,
    bytes: Vec<u8>,
    args: Vec<Vec<u8>>,
    held: bool,
}

/// What to do with the reply of a request the server has.
enum Fate {
    Forward,
    Late(u64),
    Lost,
}

struct Conn {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    /// Requests not yet sent to the server, in order.
    queue: VecDeque<Frame>,
    /// Requests sent, whose replies have not come back, in order.
    awaiting: VecDeque<Fate>,
    /// Replies kept back: a late one, and every reply behind it (one connection
    /// keeps its order), each with the id of the late request or `None`.
    backlog: VecDeque<(Option<u64>, Vec<u8>)>,
    closed: bool,
    /// Whether the connection subscribed, or asked for RESP3 (`HELLO 3`).
    subscriber: bool,
    /// When the proxy last began a write to the client (or reset the connection
    /// under it).
    sent_to_client: Option<Instant>,
    /// Whether the reader of the client's requests waits in a read.
    reading_client: bool,
    /// Whether the reader of the server's replies and pushes waits in a read.
    reading_server: bool,
}

impl Conn {
    fn reset(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.sent_to_client = Some(Instant::now());
        self.queue.clear();
        self.awaiting.clear();
        self.backlog.clear();
        abort(&self.client);
        abort(&self.server);
    }

    /// Sends every request up to the first one that waits for the test.
    fn pump(&mut self) {
        while !self.closed && self.queue.front().is_some_and(|frame| !frame.held) {
            if let Some(frame) = self.queue.pop_front() {
                self.send(&frame.bytes, Fate::Forward);
            }
        }
    }

    /// Writes the kept-back replies to the client, up to the first late one.
    fn flush(&mut self) {
        while let Some((None, _)) = self.backlog.front() {
            if let Some((_, bytes)) = self.backlog.pop_front() {
                // Noted before the write: the client may take it in at once.
                self.sent_to_client = Some(Instant::now());
                if (&self.client).write_all(&bytes).is_err() {
                    self.reset();
                    return;
                }
            }
        }
    }

    /// Whether the client or the server sent bytes that the proxy has not taken in
    /// yet: a reader is not waiting in a read, or its socket has bytes to read.
    fn unread(&self) -> bool {
        !self.reading_client
            || !self.reading_server
            || pending_bytes(&self.client) > 0
            || pending_bytes(&self.server) > 0
    }

    fn send(&mut self, bytes: &[u8], fate: Fate) {
        if (&self.server).write_all(bytes).is_err() {
            self.reset();
            return;
        }
        self.awaiting.push_back(fate);
    }
}

#[derive(Default)]
struct State {
    conns: Vec<Conn>,
    next_conn: u64,
    next_frame: u64,
    /// Counts every frame that passed or arrived, and every connection accepted.
    activity: u64,
    /// What passed without waiting, for [`StepProxy::take_passed`].
    passed: Vec<String>,
}

/// Where the traffic through a [`StepProxy`] stands ([`StepProxy::traffic`]). The
/// proxy's side of quiet is: no request in flight, nothing unread, and activity
/// unchanged; the client's side is that it has run since `sent_to_client` (what the
/// proxy wrote reached it) and is idle.
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::{RedisServer, StepProxy};
///
/// let server = RedisServer::start()?;
/// let proxy = StepProxy::start(server.addr(), |_| false)?;
/// let traffic = proxy.traffic();
/// println!("{} frames so far, {} requests in flight", traffic.activity, traffic.in_flight);
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Traffic {
    /// As [`StepProxy::activity`]: frames passed or arrived, connections accepted.
    pub activity: u64,
    /// As [`StepProxy::in_flight`]: requests at the server whose replies have not
    /// come back.
    pub in_flight: usize,
    /// Whether a client or the server sent bytes the proxy has not taken in yet.
    pub unread: bool,
    /// When the proxy last began a write to a client, or reset a connection under
    /// it: a client idle since a moment after this has taken in what it sent.
    pub sent_to_client: Option<Instant>,
}

/// Which requests wait for the test.
type Predicate = dyn Fn(&[Vec<u8>]) -> bool + Send + Sync;

struct Shared {
    /// Where new connections go ([`StepProxy::switch_upstream`] changes it).
    upstream: Mutex<SocketAddr>,
    hold: Box<Predicate>,
    state: Mutex<State>,
    shutdown: AtomicBool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn upstream(&self) -> SocketAddr {
        *self.upstream.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A TCP proxy on `127.0.0.1` that stops chosen requests in front of the server
/// until the test releases each with a [`Delivery`].
///
/// Every request a client sends is cut into RESP frames. Those for which the
/// `hold` predicate given to [`start`](StepProxy::start) says `true` wait; the
/// others are forwarded at once, unless a held request is ahead of them on the same
/// connection (nothing overtakes on one connection, as in TCP). Replies are matched
/// to requests by order and forwarded, kept back, or dropped as the request's
/// delivery said; pushed messages (RESP3 `>` frames) always pass.
///
/// [`activity`](StepProxy::activity) and [`in_flight`](StepProxy::in_flight) tell a
/// test when traffic has settled. The proxy is std-only, listens on loopback only,
/// and closes every connection on drop.
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::{Delivery, RedisServer, StepProxy};
///
/// let server = RedisServer::start()?;
/// // Hold every script call; let the rest through.
/// let proxy = StepProxy::start(server.addr(), |args| {
///     args[0].eq_ignore_ascii_case(b"FCALL") || args[0].eq_ignore_ascii_case(b"EVALSHA")
/// })?;
/// // ... a client connected to `proxy.url()` calls a script ...
/// for request in proxy.held() {
///     proxy.deliver(request.id, Delivery::InOrder)?;
/// }
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub struct StepProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl StepProxy {
    /// Starts a proxy on a free `127.0.0.1` port in front of `upstream`, holding
    /// the requests for which `hold` (given the command and its arguments) is true.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] when no port can be bound or no thread started, and
    /// when `upstream` is not a loopback address.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |args| args[0].eq_ignore_ascii_case(b"INCR"))?;
    /// assert!(proxy.url().starts_with("redis://127.0.0.1:"));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start(
        upstream: SocketAddr,
        hold: impl Fn(&[Vec<u8>]) -> bool + Send + Sync + 'static,
    ) -> Result<StepProxy, TestkitError> {
        if !upstream.ip().is_loopback() {
            return Err(TestkitError::io(
                format!("the step proxy only forwards to loopback, not to {upstream}"),
                io::Error::from(ErrorKind::InvalidInput),
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|source| TestkitError::io("could not bind the step proxy", source))?;
        let addr = listener
            .local_addr()
            .map_err(|source| TestkitError::io("could not read the proxy's address", source))?;
        let shared = Arc::new(Shared {
            upstream: Mutex::new(upstream),
            hold: Box::new(hold),
            state: Mutex::new(State::default()),
            shutdown: AtomicBool::new(false),
        });
        let acceptor = thread::Builder::new()
            .name("distlock-testkit-step".into())
            .spawn({
                let shared = shared.clone();
                move || {
                    for client in listener.incoming() {
                        if shared.shutdown.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(client) = client {
                            // An upstream that refuses: the client sees its
                            // connection closed, as it would without the proxy.
                            let _ = serve(client, &shared);
                        }
                    }
                }
            })
            .map_err(|source| TestkitError::io("could not start the proxy thread", source))?;
        Ok(StepProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to: `127.0.0.1:PORT`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// assert!(proxy.addr().ip().is_loopback());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL for a Redis client: `redis://127.0.0.1:PORT/`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// assert_eq!(proxy.url(), format!("redis://{}/", proxy.addr()));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr)
    }

    /// The held requests that can be delivered now: the first in line on each
    /// open connection, by connection.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| true)?;
    /// assert!(proxy.held().is_empty()); // nobody connected yet
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn held(&self) -> Vec<HeldRequest> {
        let state = self.shared.state();
        state
            .conns
            .iter()
            .filter(|conn| !conn.closed)
            .filter_map(|conn| {
                let frame = conn.queue.front().filter(|frame| frame.held)?;
                Some(HeldRequest {
                    id: frame.id,
                    conn: conn.id,
                    args: frame.args.clone(),
                })
            })
            .collect()
    }

    /// Releases the held request `id` as `delivery` says, then forwards what waited
    /// behind it up to the next held request.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] when `id` is not the first held request of an open
    /// connection (see [`held`](StepProxy::held)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{Delivery, RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| true)?;
    /// for request in proxy.held() {
    ///     // The server never sees it; the client's connection is reset.
    ///     proxy.deliver(request.id, Delivery::Dropped)?;
    /// }
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn deliver(&self, id: u64, delivery: Delivery) -> Result<(), TestkitError> {
        let mut state = self.shared.state();
        state.activity += 1;
        let Some(conn) = state
            .conns
            .iter_mut()
            .find(|conn| !conn.closed && conn.queue.front().is_some_and(|f| f.id == id))
        else {
            return Err(TestkitError::io(
                format!("request {id} is not first in line on an open connection"),
                io::Error::from(ErrorKind::NotFound),
            ));
        };
        let Some(frame) = conn.queue.pop_front() else {
            return Ok(());
        };
        match delivery {
            Delivery::InOrder => conn.send(&frame.bytes, Fate::Forward),
            Delivery::LateReply => conn.send(&frame.bytes, Fate::Late(id)),
            Delivery::LostReply => conn.send(&frame.bytes, Fate::Lost),
            Delivery::Dropped => conn.reset(),
        }
        conn.pump();
        Ok(())
    }

    /// Hands the client a reply kept back by [`Delivery::LateReply`]; returns
    /// whether it was sent (false when its connection closed meanwhile, or it has
    /// not come back from the server yet).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{Delivery, RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| true)?;
    /// if let Some(request) = proxy.held().first() {
    ///     proxy.deliver(request.id, Delivery::LateReply)?;
    ///     // ... let the client time out ...
    ///     proxy.release_late(request.id);
    /// }
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn release_late(&self, id: u64) -> bool {
        let mut state = self.shared.state();
        state.activity += 1;
        let Some(conn) = state
            .conns
            .iter_mut()
            .find(|conn| !conn.closed && conn.backlog.iter().any(|(late, _)| *late == Some(id)))
        else {
            return false;
        };
        for (late, _) in &mut conn.backlog {
            if *late == Some(id) {
                *late = None;
            }
        }
        conn.flush();
        !conn.closed
    }

    /// A counter that moves whenever a frame passes, arrives or is released, or a
    /// connection is accepted or closed: unchanged over a while means quiet.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// let before = proxy.activity();
    /// std::thread::sleep(std::time::Duration::from_millis(5));
    /// let quiet = proxy.activity() == before && proxy.in_flight() == 0;
    /// # let _ = quiet;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn activity(&self) -> u64 {
        self.shared.state().activity
    }

    /// The requests that went through without waiting since the last call (the
    /// command and its first argument, with the connection's number), oldest first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// for line in proxy.take_passed() {
    ///     println!("{line}");
    /// }
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn take_passed(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.state().passed)
    }

    /// How many requests the server has, on open connections, whose replies have
    /// not come back to the proxy yet.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// assert_eq!(proxy.in_flight(), 0);
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn in_flight(&self) -> usize {
        let state = self.shared.state();
        state
            .conns
            .iter()
            .filter(|conn| !conn.closed)
            .map(|conn| conn.awaiting.len())
            .sum()
    }

    /// Where the traffic through the proxy stands, for a test that waits until it is
    /// quiet: see [`Traffic`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// let traffic = proxy.traffic();
    /// let quiet = traffic.in_flight == 0 && !traffic.unread;
    /// # let _ = quiet;
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn traffic(&self) -> Traffic {
        let state = self.shared.state();
        let open = || state.conns.iter().filter(|conn| !conn.closed);
        Traffic {
            activity: state.activity,
            in_flight: open().map(|conn| conn.awaiting.len()).sum(),
            unread: open().any(Conn::unread),
            sent_to_client: state
                .conns
                .iter()
                .filter_map(|conn| conn.sent_to_client)
                .max(),
        }
    }

    /// Puts another server behind the proxy's address, as a restart or a failover
    /// behind one address does: the connections accepted from now on go to
    /// `upstream`. Every open connection is reset (as
    /// [`reset_all`](StepProxy::reset_all): a restart), except, with
    /// `keep_subscribers`, those that subscribed or asked for RESP3 (`HELLO 3`, whose
    /// pushes carry pub/sub): they stay with the old server until they close, as
    /// behind a load balancer that keeps established connections, so that a
    /// client's commands, not its subscriber, are the first to meet the new server.
    /// Done when it returns: no connection it reset, and none accepted after,
    /// reaches the old server.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] when `upstream` is not a loopback address (nothing
    /// changes then).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let (first, second) = (RedisServer::start()?, RedisServer::start()?);
    /// let proxy = StepProxy::start(first.addr(), |_| false)?;
    /// // ... a client connected to `proxy.url()` works on `first` ...
    /// proxy.switch_upstream(second.addr(), false)?;
    /// // ... its next connection reaches `second`, an empty server ...
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn switch_upstream(
        &self,
        upstream: SocketAddr,
        keep_subscribers: bool,
    ) -> Result<(), TestkitError> {
        if !upstream.ip().is_loopback() {
            return Err(TestkitError::io(
                format!("the step proxy only forwards to loopback, not to {upstream}"),
                io::Error::from(ErrorKind::InvalidInput),
            ));
        }
        // The address first: a connection accepted while the old ones are reset
        // goes to the new server.
        *self
            .shared
            .upstream
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = upstream;
        let mut state = self.shared.state();
        state.activity += 1;
        for conn in &mut state.conns {
            if !(keep_subscribers && conn.subscriber) {
                conn.reset();
            }
        }
        state.conns.retain(|conn| !conn.closed);
        Ok(())
    }

    /// Resets every open connection (a TCP RST to both sides) and forgets held
    /// requests and late replies.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{RedisServer, StepProxy};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = StepProxy::start(server.addr(), |_| false)?;
    /// proxy.reset_all();
    /// assert!(proxy.held().is_empty());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn reset_all(&self) {
        let mut state = self.shared.state();
        state.activity += 1;
        for conn in &mut state.conns {
            conn.reset();
        }
        state.conns.clear();
    }
}

impl fmt::Debug for StepProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream())
            .finish_non_exhaustive()
    }
}

impl Drop for StepProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.reset_all();
        // Wake the acceptor, which sees the shutdown flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn serve(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    let upstream = shared.upstream();
    let server = TcpStream::connect_timeout(&upstream, UPSTREAM_CONNECT_TIMEOUT)?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
    }
    let id = {
        let mut state = shared.state();
        if shared.upstream() != upstream {
            // Switched while connecting: this connection reached the old server.
            abort(&client);
            abort(&server);
            return Ok(());
        }
        let id = state.next_conn;
        state.next_conn += 1;
        state.activity += 1;
        state.conns.push(Conn {
            id,
            client: client.try_clone()?,
            server: server.try_clone()?,
            queue: VecDeque::new(),
            awaiting: VecDeque::new(),
            backlog: VecDeque::new(),
            closed: false,
            subscriber: false,
            sent_to_client: None,
            reading_client: false,
            reading_server: false,
        });
        id
    };
    let requests = {
        let shared = shared.clone();
        move || read_frames(client, id, &shared, Side::Client)
    };
    let replies = {
        let shared = shared.clone();
        move || read_frames(server, id, &shared, Side::Server)
    };
    thread::Builder::new()
        .name("distlock-testkit-step-requests".into())
        .spawn(requests)?;
    thread::Builder::new()
        .name("distlock-testkit-step-replies".into())
        .spawn(replies)?;
    Ok(())
}

/// Which end of a connection a reader reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The client's requests.
    Client,
    /// The server's replies.
    Server,
}

/// Reads `stream` until it closes, cutting it into frames and handing each to
/// `on_request` or `on_reply`.
fn read_frames(mut stream: TcpStream, conn: u64, shared: &Shared, side: Side) {
    let on = match side {
        Side::Client => on_request,
        Side::Server => on_reply,
    };
    let reading = |on: bool| {
        if let Some(conn) = shared.state().conns.iter_mut().find(|c| c.id == conn) {
            match side {
                Side::Client => conn.reading_client = on,
                Side::Server => conn.reading_server = on,
            }
        }
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        reading(true);
        let read = stream.read(&mut chunk);
        reading(false);
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut state = shared.state();
        loop {
            match frame_len(&buf, 0) {
                Ok(Some(len)) => {
                    let frame: Vec<u8> = buf.drain(..len).collect();
                    state.activity += 1;
                    on(&mut state, shared, conn, frame);
                }
                Ok(None) if buf.len() <= MAX_FRAME => break,
                _ => {
                    // Garbage: end the connection, as a server would.
                    close(&mut state, conn);
                    return;
                }
            }
        }
    }
    close(&mut shared.state(), conn);
}

fn close(state: &mut State, conn: u64) {
    state.activity += 1;
    if let Some(conn) = state.conns.iter_mut().find(|c| c.id == conn) {
        conn.reset();
    }
}

fn on_request(state: &mut State, shared: &Shared, conn_id: u64, bytes: Vec<u8>) {
    let id = state.next_frame;
    state.next_frame += 1;
    let args = parse_args(&bytes).unwrap_or_default();
    let held = !args.is_empty() && (shared.hold)(&args);
    if !held && state.passed.len() < 10_000 {
        let words: Vec<String> = args
            .iter()
            .take(2)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        state
            .passed
            .push(format!("conn {conn_id}: {}", words.join(" ")));
    }
    let Some(conn) = state
        .conns
        .iter_mut()
        .find(|c| c.id == conn_id && !c.closed)
    else {
        return;
    };
    conn.subscriber |= subscribes(&args);
    conn.queue.push_back(Frame {
        id,
        bytes,
        args,
        held,
    });
    conn.pump();
}

fn on_reply(state: &mut State, _shared: &Shared, conn_id: u64, bytes: Vec<u8>) {
    let Some(conn) = state
        .conns
        .iter_mut()
        .find(|c| c.id == conn_id && !c.closed)
    else {
        return;
    };
    // Pushed messages answer no request, except RESP3's confirmations of
    // (un)subscribing, which stand for the command's reply.
    let fate = if bytes.first() == Some(&b'>') && !confirms_subscription(&bytes) {
        Fate::Forward
    } else {
        conn.awaiting.pop_front().unwrap_or(Fate::Forward)
    };
    match fate {
        Fate::Forward => conn.backlog.push_back((None, bytes)),
        Fate::Late(id) => conn.backlog.push_back((Some(id), bytes)),
        Fate::Lost => {
            conn.reset();
            return;
        }
    }
    conn.flush();
}

/// Whether a request subscribes (`SUBSCRIBE`, `PSUBSCRIBE`, `SSUBSCRIBE`) or asks
/// for RESP3 (`HELLO 3`), whose pushes carry pub/sub messages.
fn subscribes(args: &[Vec<u8>]) -> bool {
    let Some(command) = args.first() else {
        return false;
    };
    let command = String::from_utf8_lossy(command).to_ascii_uppercase();
    command.ends_with("SUBSCRIBE") && !command.contains("UNSUB")
        || (command == "HELLO" && args.get(1).is_some_and(|v| v.as_slice() == b"3"))
}

/// Whether a pushed frame confirms a `SUBSCRIBE`-like command (RESP3 answers those
/// with a push, one per channel).
fn confirms_subscription(frame: &[u8]) -> bool {
    let mut array = frame.to_vec();
    array[0] = b'*';
    parse_args(&array).is_some_and(|args| {
        args.first().is_some_and(|kind| {
            let kind = String::from_utf8_lossy(kind).to_ascii_lowercase();
            kind.ends_with("subscribe")
        })
    })
}

/// The length of the RESP2/RESP3 frame at `buf[at..]`: `Ok(None)` while incomplete.
fn frame_len(buf: &[u8], at: usize) -> Result<Option<usize>, ()> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(line_end) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &buf[at + 1..at + line_end];
    let after_line = at + line_end + 2;
    let count = || -> Result<i64, ()> {
        std::str::from_utf8(line)
            .map_err(|_| ())?
            .parse::<i64>()
            .map_err(|_| ())
    };
    let end = match kind {
        b'+' | b'-' | b':' | b',' | b'#' | b'(' | b'_' => after_line,
        b'$' | b'!' | b'=' => {
            let n = count()?;
            if n < 0 {
                after_line
            } else {
                let end = after_line + usize::try_from(n).map_err(|_| ())? + 2;
                if buf.len() < end {
                    return Ok(None);
                }
                end
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = count()?;
            let items = if matches!(kind, b'%' | b'|') {
                n * 2
            } else {
                n
            };
            let mut end = after_line;
            for _ in 0..items.max(0) {
                match frame_len(buf, end)? {
                    Some(len) => end += len,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute comes before the frame it describes.
                match frame_len(buf, end)? {
                    Some(len) => end += len,
                    None => return Ok(None),
                }
            }
            end
        }
        // An inline command: one line.
        _ => after_line,
    };
    Ok(Some(end - at))
}

/// The bulk strings of a request (an array of bulk strings), or `None`.
fn parse_args(frame: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut at = 0;
    let read_line = |at: &mut usize| -> Option<(u8, i64)> {
        let end = frame[*at..].windows(2).position(|w| w == b"\r\n")? + *at;
        let kind = *frame.get(*at)?;
        let n = std::str::from_utf8(&frame[*at + 1..end])
            .ok()?
            .parse()
            .ok()?;
        *at = end + 2;
        Some((kind, n))
    };
    let (kind, n) = read_line(&mut at)?;
    if kind != b'*' {
        return None;
    }
    let mut args = Vec::new();
    for _ in 0..n {
        let (kind, len) = read_line(&mut at)?;
        if kind == b':' {
            args.push(len.to_string().into_bytes());
            continue;
        }
        let len = usize::try_from(len).ok()?;
        if kind != b'$' || frame.len() < at + len {
            return None;
        }
        args.push(frame[at..at + len].to_vec());
        at += len + 2;
    }
    Some(args)
}

/// How many bytes wait to be read on `stream` (0 when the kernel will not say).
fn pending_bytes(stream: &TcpStream) -> usize {
    let mut n: libc::c_int = 0;
    // SAFETY: the fd is open (owned by `stream`), and FIONREAD writes one `c_int`
    // through the pointer, which points at `n`.
    let ok = unsafe {
        libc::ioctl(
            stream.as_raw_fd(),
            libc::FIONREAD,
            &mut n as *mut libc::c_int,
        )
    };
    if ok == 0 {
        usize::try_from(n).unwrap_or(0)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_where_they_end() {
        let two = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n+OK\r\n";
        assert_eq!(frame_len(two, 0), Ok(Some(20)));
        assert_eq!(frame_len(two, 20), Ok(Some(5)));
        assert_eq!(frame_len(&two[..19], 0), Ok(None), "incomplete");
        assert_eq!(frame_len(b"$-1\r\n", 0), Ok(Some(5)));
        assert_eq!(frame_len(b"%1\r\n+a\r\n:1\r\n", 0), Ok(Some(12)));
        assert_eq!(frame_len(b">2\r\n+a\r\n_\r\n", 0), Ok(Some(11)));
        assert_eq!(frame_len(b"*1\r\n$x\r\n", 0), Err(()));
        assert!(confirms_subscription(
            b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"
        ));
        assert!(!confirms_subscription(
            b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n"
        ));
        assert_eq!(
            parse_args(&two[..20]),
            Some(vec![b"GET".to_vec(), b"k".to_vec()])
        );
    }
}
