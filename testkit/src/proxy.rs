//! [`FaultProxy`]: a TCP proxy on loopback that delays, drops, resets and refuses
//! traffic between a client and a server, under the test's control.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::TestkitError;

/// How often blocked threads look at the proxy's settings.
const TICK: Duration = Duration::from_millis(5);
/// How long connecting to the upstream server may take.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// One direction of the traffic through a [`FaultProxy`].
///
/// # Examples
///
/// ```no_run
/// use distlock_testkit::{Direction, FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.addr())?;
/// // Requests arrive, replies are lost: the client cannot tell whether they applied.
/// proxy.blackhole(Direction::ToClient, true);
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the client to the server (requests).
    ToServer,
    /// From the server to the client (replies and pushed messages).
    ToClient,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::ToServer => 0,
            Direction::ToClient => 1,
        }
    }
}

/// The faults of one direction.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    delay: Duration,
    jitter: Duration,
    blackhole: bool,
}

#[derive(Debug, Default)]
struct Settings {
    faults: [Faults; 2],
    paused: bool,
}

/// One proxied connection, as the controller sees it.
#[derive(Debug)]
struct Conn {
    id: u64,
    client: TcpStream,
    server: TcpStream,
    /// Set when bytes were dropped: the byte stream has a gap, so the connection is
    /// reset when the blackhole lifts (TCP cannot lose bytes and go on).
    gapped: AtomicBool,
    closed: AtomicBool,
}

impl Conn {
    fn reset(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        abort(&self.client);
        abort(&self.server);
    }
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    bytes: [AtomicU64; 2],
    dropped: [AtomicU64; 2],
    resets: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    upstream: SocketAddr,
    settings: Mutex<Settings>,
    resumed: Condvar,
    conns: Mutex<Vec<Arc<Conn>>>,
    next_id: AtomicU64,
    shutdown: AtomicBool,
    counters: Counters,
    /// State of the jitter generator (xorshift), seeded from the clock.
    rng: Mutex<u64>,
}

impl Shared {
    fn settings(&self) -> MutexGuard<'_, Settings> {
        self.settings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn conns(&self) -> MutexGuard<'_, Vec<Arc<Conn>>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn faults(&self, direction: Direction) -> Faults {
        self.settings().faults[direction.index()]
    }

    /// A delay for one chunk: the base delay plus a uniform jitter in `0..=jitter`.
    fn chunk_delay(&self, faults: Faults) -> Duration {
        if faults.jitter.is_zero() {
            return faults.delay;
        }
        let mut state = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let mut x = *state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *state = x;
        let span = faults.jitter.as_nanos().max(1) as u64;
        faults.delay + Duration::from_nanos(x % (span + 1))
    }
}

/// A TCP proxy on `127.0.0.1` in front of one server, with faults the test turns on
/// and off while traffic flows.
///
/// Point the client under test at [`FaultProxy::url`] (or [`FaultProxy::addr`]) instead
/// of the server. Each accepted connection gets its own connection to the upstream
/// server, and bytes are copied both ways. Faults apply per [`Direction`], at once, to
/// every connection, open or future:
///
/// - [`delay`](FaultProxy::delay): each chunk is held for a delay plus a random
///   jitter, in order (TCP never reorders), so requests or replies arrive late.
/// - [`blackhole`](FaultProxy::blackhole): bytes are read and dropped; the sockets
///   stay open, so the peer sees silence, not an error. A TCP stream cannot lose
///   bytes and carry on, so when the blackhole is lifted, every connection that lost
///   bytes is reset (as a real network partition long enough to break it would).
/// - [`reset_all`](FaultProxy::reset_all): every open connection is aborted with a
///   TCP RST on both sides.
/// - [`pause_accepting`](FaultProxy::pause_accepting): new connections are held
///   (accepted by the kernel but not served, and not connected upstream) until
///   [`resume_accepting`](FaultProxy::resume_accepting).
/// - [`heal`](FaultProxy::heal): every fault off.
///
/// The proxy is std-only (threads: one accepting, two per direction of each
/// connection), listens on loopback only, and stops on drop, closing every
/// connection.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use distlock_testkit::{Direction, FaultProxy, RedisServer};
///
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.addr())?;
/// let url = proxy.url(); // give this to the client under test
/// # let _ = url;
/// proxy.delay(Direction::ToClient, Duration::from_millis(200), Duration::from_millis(20));
/// proxy.blackhole(Direction::ToServer, true);
/// proxy.heal(); // back to plain forwarding
/// proxy.reset_all();
/// # Ok::<(), distlock_testkit::TestkitError>(())
/// ```
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free `127.0.0.1` port that forwards to `upstream`.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] when no port can be bound or no thread started, and
    /// when `upstream` is not a loopback address (the proxy never sends traffic off
    /// the machine).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.upstream(), server.addr());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn start(upstream: SocketAddr) -> Result<FaultProxy, TestkitError> {
        if !upstream.ip().is_loopback() {
            return Err(TestkitError::io(
                format!("the fault proxy only forwards to loopback, not to {upstream}"),
                io::Error::from(ErrorKind::InvalidInput),
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|source| TestkitError::io("could not bind the fault proxy", source))?;
        let addr = listener
            .local_addr()
            .map_err(|source| TestkitError::io("could not read the proxy's address", source))?;
        listener
            .set_nonblocking(true)
            .map_err(|source| TestkitError::io("could not configure the proxy", source))?;
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0x9E37_79B9, |d| d.as_nanos() as u64)
            | 1;
        let shared = Arc::new(Shared {
            upstream,
            settings: Mutex::new(Settings::default()),
            resumed: Condvar::new(),
            conns: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            shutdown: AtomicBool::new(false),
            counters: Counters::default(),
            rng: Mutex::new(seed),
        });
        let acceptor = thread::Builder::new()
            .name("distlock-testkit-proxy".into())
            .spawn({
                let shared = shared.clone();
                move || accept_loop(&listener, &shared)
            })
            .map_err(|source| TestkitError::io("could not start the proxy thread", source))?;
        Ok(FaultProxy {
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
    /// use std::net::TcpStream;
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let _client = TcpStream::connect(proxy.addr()).expect("connect through the proxy");
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
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// // e.g. `LockClient::builder().url(proxy.url())`
    /// assert!(proxy.url().starts_with("redis://127.0.0.1:"));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.addr.port())
    }

    /// The server the proxy forwards to.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// assert_eq!(proxy.upstream(), server.addr());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn upstream(&self) -> SocketAddr {
        self.shared.upstream
    }

    /// Holds every chunk going in `direction` for `delay` plus a uniformly random
    /// `0..=jitter`, keeping their order. Zero and zero turn the delay off. Chunks
    /// already in flight keep the delay they were given.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::{Direction, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// // Replies come 300 ms (plus up to 50 ms) late: past a 200 ms response timeout.
    /// proxy.delay(Direction::ToClient, Duration::from_millis(300), Duration::from_millis(50));
    /// proxy.delay(Direction::ToClient, Duration::ZERO, Duration::ZERO); // off again
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn delay(&self, direction: Direction, delay: Duration, jitter: Duration) {
        let mut settings = self.shared.settings();
        let faults = &mut settings.faults[direction.index()];
        faults.delay = delay;
        faults.jitter = jitter;
    }

    /// Drops (`true`) or forwards again (`false`) every byte going in `direction`.
    /// Lifting a blackhole resets the connections that lost bytes under it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{Direction, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// proxy.blackhole(Direction::ToServer, true); // a partition: requests vanish
    /// proxy.blackhole(Direction::ToServer, false); // healed; broken connections are reset
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn blackhole(&self, direction: Direction, on: bool) {
        let lifted = {
            let mut settings = self.shared.settings();
            let faults = &mut settings.faults[direction.index()];
            let was = faults.blackhole;
            faults.blackhole = on;
            was && !on
        };
        if lifted {
            self.reset_gapped();
        }
    }

    /// Aborts every open connection with a TCP RST on both sides. Returns how many
    /// were reset. New connections are served as usual.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// // ... the client under test connects through the proxy ...
    /// let reset = proxy.reset_all(); // every connection dies at once
    /// println!("{reset} connections reset");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn reset_all(&self) -> usize {
        let conns: Vec<Arc<Conn>> = self.shared.conns().drain(..).collect();
        let mut count = 0;
        for conn in conns {
            if !conn.closed.load(Ordering::SeqCst) {
                count += 1;
            }
            conn.reset();
        }
        self.shared
            .counters
            .resets
            .fetch_add(count as u64, Ordering::Relaxed);
        count
    }

    /// Stops serving new connections: they wait, unconnected upstream, until
    /// [`resume_accepting`](FaultProxy::resume_accepting). Open connections go on.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// proxy.pause_accepting(); // a reconnect hangs...
    /// proxy.resume_accepting(); // ...until now
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn pause_accepting(&self) {
        self.shared.settings().paused = true;
    }

    /// Serves new connections again, the waiting ones first.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// proxy.pause_accepting();
    /// proxy.resume_accepting(); // the connections that waited are served first
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn resume_accepting(&self) {
        self.shared.settings().paused = false;
        self.shared.resumed.notify_all();
    }

    /// Turns every fault off: no delay, no blackhole (connections that lost bytes are
    /// reset), accepting.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use distlock_testkit::{Direction, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// proxy.delay(Direction::ToServer, Duration::from_millis(100), Duration::ZERO);
    /// proxy.blackhole(Direction::ToClient, true);
    /// proxy.heal(); // plain forwarding again
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn heal(&self) {
        {
            let mut settings = self.shared.settings();
            settings.faults = [Faults::default(); 2];
            settings.paused = false;
        }
        self.shared.resumed.notify_all();
        self.reset_gapped();
    }

    /// How many connections are open now.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::net::TcpStream;
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// let _client = TcpStream::connect(proxy.addr()).expect("connect");
    /// // Soon 1: the proxy counts a connection once it has connected upstream.
    /// println!("{} open", proxy.open_connections());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn open_connections(&self) -> usize {
        let mut conns = self.shared.conns();
        conns.retain(|conn| !conn.closed.load(Ordering::SeqCst));
        conns.len()
    }

    /// How many connections were accepted and served so far.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// // ... the client under test runs ...
    /// assert!(proxy.accepted() <= 2, "the client reconnected too often");
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn accepted(&self) -> u64 {
        self.shared.counters.accepted.load(Ordering::Relaxed)
    }

    /// How many bytes went through in `direction` (delivered to the other side).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{Direction, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// // ... the client under test runs ...
    /// println!(
    ///     "{} bytes of requests, {} of replies",
    ///     proxy.bytes_forwarded(Direction::ToServer),
    ///     proxy.bytes_forwarded(Direction::ToClient)
    /// );
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn bytes_forwarded(&self, direction: Direction) -> u64 {
        self.shared.counters.bytes[direction.index()].load(Ordering::Relaxed)
    }

    /// How many bytes the blackhole dropped in `direction`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{Direction, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// proxy.blackhole(Direction::ToClient, true);
    /// // ... the client under test sends a request ...
    /// // A reply was lost only if the blackhole dropped some bytes.
    /// println!("{} bytes dropped", proxy.bytes_dropped(Direction::ToClient));
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn bytes_dropped(&self, direction: Direction) -> u64 {
        self.shared.counters.dropped[direction.index()].load(Ordering::Relaxed)
    }

    /// How many connections were reset by the proxy (by [`reset_all`](Self::reset_all)
    /// or because a blackhole lifted).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use distlock_testkit::{Direction, FaultProxy, RedisServer};
    ///
    /// let server = RedisServer::start()?;
    /// let proxy = FaultProxy::start(server.addr())?;
    /// proxy.blackhole(Direction::ToServer, true);
    /// // ... traffic is dropped ...
    /// proxy.blackhole(Direction::ToServer, false);
    /// println!("{} connections reset", proxy.resets());
    /// # Ok::<(), distlock_testkit::TestkitError>(())
    /// ```
    pub fn resets(&self) -> u64 {
        self.shared.counters.resets.load(Ordering::Relaxed)
    }

    fn reset_gapped(&self) {
        let gapped: Vec<Arc<Conn>> = {
            let mut conns = self.shared.conns();
            let (gapped, kept) = conns
                .drain(..)
                .partition(|conn| conn.gapped.load(Ordering::SeqCst));
            *conns = kept;
            gapped
        };
        for conn in gapped {
            if !conn.closed.load(Ordering::SeqCst) {
                self.shared.counters.resets.fetch_add(1, Ordering::Relaxed);
            }
            conn.reset();
        }
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("settings", &*self.shared.settings())
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        self.shared.resumed.notify_all();
        for conn in self.shared.conns().drain(..) {
            conn.reset();
        }
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Sets `SO_LINGER` to zero and shuts the socket down, so that the peer gets a RST.
pub(crate) fn abort(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is open (owned by `stream`), and `linger` is a valid
    // `struct linger` whose size is passed along.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    let _ = stream.shutdown(Shutdown::Both);
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    while !shared.shutdown.load(Ordering::SeqCst) {
        // Paused: leave new connections in the kernel's queue.
        {
            let mut settings = shared.settings();
            while settings.paused && !shared.shutdown.load(Ordering::SeqCst) {
                settings = shared
                    .resumed
                    .wait_timeout(settings, TICK * 10)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
        }
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(err) = serve(client, shared) {
                    // The upstream refused (e.g. the server is stopped): the client's
                    // connection was dropped, which is what it would see without us.
                    let _ = err;
                }
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => thread::sleep(TICK),
            Err(_) => thread::sleep(TICK),
        }
    }
}

fn serve(client: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT)?;
    for stream in [&client, &server] {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(TICK * 4))?;
    }
    let conn = Arc::new(Conn {
        id: shared.next_id.fetch_add(1, Ordering::Relaxed),
        client: client.try_clone()?,
        server: server.try_clone()?,
        gapped: AtomicBool::new(false),
        closed: AtomicBool::new(false),
    });
    shared.conns().push(conn.clone());
    shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
    for (direction, from, to) in [
        (
            Direction::ToServer,
            client.try_clone()?,
            server.try_clone()?,
        ),
        (Direction::ToClient, server, client),
    ] {
        let queue = Arc::new(Queue::default());
        let reader = {
            let (shared, conn, queue) = (shared.clone(), conn.clone(), queue.clone());
            move || read_side(from, direction, &shared, &conn, &queue)
        };
        let writer = {
            let (shared, conn, queue) = (shared.clone(), conn.clone(), queue.clone());
            move || write_side(to, direction, &shared, &conn, &queue)
        };
        let name = format!("distlock-testkit-proxy-{}-{direction:?}", conn.id);
        thread::Builder::new().name(name.clone()).spawn(reader)?;
        thread::Builder::new().name(name).spawn(writer)?;
    }
    Ok(())
}

/// Chunks read from one side, each with the time it may be delivered.
#[derive(Debug, Default)]
struct Queue {
    chunks: Mutex<QueueState>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct QueueState {
    chunks: VecDeque<(Instant, Vec<u8>)>,
    /// The reader is done (end of stream or error): deliver what is left, then close.
    eof: bool,
}

fn read_side(
    mut from: TcpStream,
    direction: Direction,
    shared: &Shared,
    conn: &Conn,
    queue: &Queue,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_due = Instant::now();
    loop {
        if conn.closed.load(Ordering::SeqCst) || shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                continue
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let faults = shared.faults(direction);
        if faults.blackhole {
            conn.gapped.store(true, Ordering::SeqCst);
            shared.counters.dropped[direction.index()].fetch_add(n as u64, Ordering::Relaxed);
            continue;
        }
        let due = (Instant::now() + shared.chunk_delay(faults)).max(last_due);
        last_due = due;
        let mut state = queue.chunks.lock().unwrap_or_else(PoisonError::into_inner);
        state.chunks.push_back((due, buf[..n].to_vec()));
        queue.ready.notify_all();
    }
    let mut state = queue.chunks.lock().unwrap_or_else(PoisonError::into_inner);
    state.eof = true;
    queue.ready.notify_all();
}

fn write_side(
    mut to: TcpStream,
    direction: Direction,
    shared: &Shared,
    conn: &Conn,
    queue: &Queue,
) {
    loop {
        let next = {
            let mut state = queue.chunks.lock().unwrap_or_else(PoisonError::into_inner);
            loop {
                if conn.closed.load(Ordering::SeqCst) || shared.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                let now = Instant::now();
                match state.chunks.front() {
                    Some((due, _)) if *due <= now => break state.chunks.pop_front(),
                    Some((due, _)) => {
                        let wait = (*due - now).min(TICK * 4);
                        state = queue
                            .ready
                            .wait_timeout(state, wait)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                    None if state.eof => break None,
                    None => {
                        state = queue
                            .ready
                            .wait_timeout(state, TICK * 4)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0;
                    }
                }
            }
        };
        let Some((_, chunk)) = next else {
            // The other side closed: pass the end of stream on.
            let _ = to.shutdown(Shutdown::Write);
            return;
        };
        // A blackhole turned on while the chunk waited drops it too.
        if shared.faults(direction).blackhole {
            conn.gapped.store(true, Ordering::SeqCst);
            shared.counters.dropped[direction.index()]
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            continue;
        }
        if to.write_all(&chunk).is_err() {
            conn.reset();
            return;
        }
        shared.counters.bytes[direction.index()].fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// An echo server on loopback, for testing the proxy without Redis.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let addr = listener.local_addr().expect("addr");
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    fn connect(proxy: &FaultProxy) -> (TcpStream, io::BufReader<TcpStream>) {
        let stream = TcpStream::connect(proxy.addr()).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let reader = io::BufReader::new(stream.try_clone().expect("clone"));
        (stream, reader)
    }

    fn round_trip(stream: &mut TcpStream, reader: &mut io::BufReader<TcpStream>) -> Duration {
        let start = Instant::now();
        stream.write_all(b"ping\n").expect("write");
        let mut line = String::new();
        reader.read_line(&mut line).expect("read");
        assert_eq!(line, "ping\n");
        start.elapsed()
    }

    #[test]
    fn forwards_delays_blackholes_and_resets() {
        let proxy = FaultProxy::start(echo_server()).expect("proxy");
        let (mut stream, mut reader) = connect(&proxy);
        assert!(round_trip(&mut stream, &mut reader) < Duration::from_millis(500));

        proxy.delay(
            Direction::ToClient,
            Duration::from_millis(200),
            Duration::ZERO,
        );
        let took = round_trip(&mut stream, &mut reader);
        assert!(took >= Duration::from_millis(200), "{took:?}");
        proxy.heal();

        proxy.blackhole(Direction::ToServer, true);
        stream.write_all(b"lost\n").expect("write");
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        let mut line = String::new();
        assert!(reader.read_line(&mut line).is_err(), "got {line:?}");
        assert_eq!(proxy.bytes_dropped(Direction::ToServer), 5);
        // Lifting the blackhole resets the connection that lost bytes.
        proxy.blackhole(Direction::ToServer, false);
        assert_eq!(proxy.resets(), 1);
        let mut rest = Vec::new();
        assert!(
            matches!(reader.read_to_end(&mut rest), Ok(0) | Err(_)),
            "the gapped connection ended"
        );

        let (mut stream, mut reader) = connect(&proxy);
        round_trip(&mut stream, &mut reader);
        assert_eq!(proxy.reset_all(), 1);
        let mut rest = Vec::new();
        let ended = reader.read_to_end(&mut rest);
        assert!(matches!(ended, Ok(0) | Err(_)), "{ended:?}");
    }

    #[test]
    fn paused_accepting_holds_new_connections() {
        let proxy = FaultProxy::start(echo_server()).expect("proxy");
        proxy.pause_accepting();
        let (mut stream, mut reader) = connect(&proxy);
        stream.write_all(b"ping\n").expect("write");
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut line = String::new();
        assert!(reader.read_line(&mut line).is_err(), "served while paused");
        assert_eq!(proxy.accepted(), 0);
        proxy.resume_accepting();
        reader
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        reader.read_line(&mut line).expect("served after resume");
        assert_eq!(line, "ping\n");
        assert_eq!(proxy.accepted(), 1);
    }

    #[test]
    fn refuses_non_loopback_upstreams() {
        let addr = SocketAddr::from(([192, 0, 2, 1], 6380));
        assert!(FaultProxy::start(addr).is_err());
    }
}
