//! One schedule: the explorer's side. It waits for the clients to settle, lists what
//! can happen next (an actor starts its next operation, a held request is delivered
//! in one of five ways), takes one choice, and checks every property after every
//! step.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use distlock::layout::args::{self, Acquire, Call};
use distlock::layout::{self, FunctionLibrary, StoredLock};
use distlock_testkit::{Delivery, HeldRequest, StepProxy};

use crate::harness::{Harness, Outcome, LEASE, RESPONSE_TIMEOUT, WAIT};
use crate::world::{Op, World};

/// How long traffic must be quiet, in real time, before the world counts as settled.
const QUIET: Duration = Duration::from_millis(1);
/// How much quiet virtual time ends a schedule (longer than every retry and replay).
const SETTLE: Duration = Duration::from_millis(1500);
/// A running operation that sees nothing happen for this long is stuck.
const STUCK: Duration = Duration::from_secs(WAIT.as_secs() + 15);
/// How long an outage ([`Op::Outage`]) lasts: longer than a final release's record
/// lives (four response timeouts), and than a new acquisition waits for the check of
/// a replaced server's holds (2 s), but shorter than a lease's renewal.
pub(crate) const OUTAGE: Duration = Duration::from_millis(2400);
/// A schedule longer than this never ends.
const MAX_STEPS: usize = 200;
/// A schedule that runs longer than this in real time is stuck in the harness.
const MAX_REAL: Duration = Duration::from_secs(60);
/// The steps of virtual time that pass while nothing else can happen.
const IDLE_STEPS_MS: [u64; 12] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000];

/// The scripts whose requests the proxies hold: every one that changes a lock.
pub(crate) fn held_script(args: &[Vec<u8>]) -> bool {
    args.len() > 1
        && args[0].eq_ignore_ascii_case(b"FCALL")
        && script_of(&args[1]).is_some_and(|s| {
            matches!(
                s,
                "acquire" | "reenter" | "acquire_all" | "release" | "renew" | "withdraw"
            )
        })
}

/// `acquire` from `distlock_<16 hex>_acquire`, the function of this build's library.
fn script_of(function: &[u8]) -> Option<&str> {
    static LIBRARY: OnceLock<FunctionLibrary> = OnceLock::new();
    let library = LIBRARY.get_or_init(layout::function_library);
    library.script_of(std::str::from_utf8(function).ok()?)
}

fn script_letter(script: &str) -> char {
    match script {
        "acquire" => 'a',
        "reenter" => 'e',
        "acquire_all" => 'm',
        "release" => 'r',
        "renew" => 'n',
        "withdraw" => 'w',
        _ => '?',
    }
}

/// What the server holds of one lock: owner → hold count, and owner → actor label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) holders: BTreeMap<String, u64>,
    pub(crate) labels: BTreeMap<String, String>,
}

/// One script request the server ran, with what it changed.
#[derive(Debug, Clone)]
struct Effect {
    script: String,
    /// (owner, operation number, lock key) of each request in the run.
    entries: Vec<(String, u64, String)>,
    before: HashMap<String, Snapshot>,
    after: HashMap<String, Snapshot>,
}

impl Effect {
    fn decreased(&self, owner: &str, key: &str) -> bool {
        let count = |s: &HashMap<String, Snapshot>| {
            s.get(key)
                .and_then(|s| s.holders.get(owner).copied())
                .unwrap_or(0)
        };
        count(&self.before) > count(&self.after)
    }
}

/// An operation that gives a hold back, and the operation numbers of its releases.
#[derive(Debug, Clone)]
struct Release {
    actor: usize,
    index: usize,
    seqs: Vec<(String, u64)>,
}

/// One choice: its label, and the labels it was chosen among.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) options: Vec<String>,
    pub(crate) chosen: usize,
}

/// How one schedule ended.
#[derive(Debug, Default)]
pub(crate) struct Run {
    pub(crate) decisions: Vec<Decision>,
    pub(crate) violation: Option<String>,
    /// The prefix asked for a choice that was not there (timing moved under us).
    pub(crate) diverged: bool,
    pub(crate) states: Vec<u64>,
    pub(crate) log: Vec<String>,
}

impl Run {
    pub(crate) fn labels(&self) -> Vec<String> {
        self.decisions
            .iter()
            .map(|d| d.options[d.chosen].clone())
            .collect()
    }
}

/// The servers and proxies the schedules of a world share.
pub(crate) struct Env {
    pub(crate) server_url: String,
    pub(crate) proxies: Vec<StepProxy>,
    /// An admin connection to each server: the world's, then the spare one a
    /// replacement switches the proxies to (started at the first replacement).
    admins: Vec<redis::Connection>,
    addrs: Vec<std::net::SocketAddr>,
    spare: Option<distlock_testkit::RedisServer>,
    /// The server behind the proxies now (an index into `admins`).
    current: usize,
}

/// The number of the next schedule's namespace, for the whole process: every
/// schedule (of every world, and every replay) starts on keys no other one touched.
static NEXT_NAMESPACE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl Env {
    pub(crate) fn new(
        server: &distlock_testkit::RedisServer,
        clients: usize,
    ) -> Result<Env, String> {
        let proxies = (0..clients)
            .map(|_| StepProxy::start(server.addr(), held_script).map_err(|e| e.to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        let server_url = format!("redis://{}/", server.addr());
        let admin = connect(&server_url)?;
        Ok(Env {
            server_url,
            proxies,
            admins: vec![admin],
            addrs: vec![server.addr()],
            spare: None,
            current: 0,
        })
    }

    fn activity(&self) -> u64 {
        self.proxies.iter().map(StepProxy::activity).sum()
    }

    /// The admin connection to the server behind the proxies now.
    fn admin(&mut self) -> &mut redis::Connection {
        &mut self.admins[self.current]
    }

    /// Puts the other server, emptied (no keys, no function library: a restart
    /// without persistence), behind every proxy. Every connection is reset but the
    /// subscriber's, which stays with the old server (as behind a load balancer
    /// that keeps established connections), so that the replacement is found by
    /// the requests themselves, not first by the subscriber's reconnection.
    /// `loaded`: the other server gets the old one's function library (as one that
    /// another client reached first), so that nothing reloads it between a
    /// request's discovery of the new server and the request itself.
    fn replace(&mut self, loaded: bool) -> Result<(), String> {
        if self.spare.is_none() {
            let spare = distlock_testkit::RedisServer::start().map_err(|e| e.to_string())?;
            self.admins
                .push(connect(&format!("redis://{}/", spare.addr()))?);
            self.addrs.push(spare.addr());
            self.spare = Some(spare);
        }
        let next = 1 - self.current;
        for command in [&["FLUSHALL"][..], &["FUNCTION", "FLUSH"]] {
            let _: () = redis::cmd(command[0])
                .arg(&command[1..])
                .query(&mut self.admins[next])
                .map_err(|e| e.to_string())?;
        }
        if loaded {
            let library: Vec<u8> = redis::cmd("FUNCTION")
                .arg("DUMP")
                .query(self.admin())
                .map_err(|e| e.to_string())?;
            let _: () = redis::cmd("FUNCTION")
                .arg("RESTORE")
                .arg(library)
                .query(&mut self.admins[next])
                .map_err(|e| e.to_string())?;
        }
        self.switch(next, true)
    }

    /// Every schedule starts on the world's own server.
    fn restore(&mut self) -> Result<(), String> {
        if self.current == 0 {
            return Ok(());
        }
        self.switch(0, false)
    }

    fn switch(&mut self, to: usize, keep_subscribers: bool) -> Result<(), String> {
        for proxy in &self.proxies {
            proxy
                .switch_upstream(self.addrs[to], keep_subscribers)
                .map_err(|e| e.to_string())?;
        }
        self.current = to;
        Ok(())
    }

    /// Server time passes by `by` for the keys of `namespace`: those whose
    /// lifetime ends within it are gone (the client's clock is moved by the same).
    /// Lifetimes kept inside a hash on the server's clock (readers, permits) do not
    /// move: keep `by` below every lease.
    fn expire_within(&mut self, namespace: &str, by: Duration) -> Result<u64, String> {
        const SCRIPT: &str = "local n = 0 \
            for _, key in ipairs(redis.call('KEYS', ARGV[1])) do \
              local ttl = redis.call('PTTL', key) \
              if ttl > 0 and ttl <= tonumber(ARGV[2]) then redis.call('DEL', key); n = n + 1 end \
            end \
            return n";
        redis::cmd("EVAL")
            .arg(SCRIPT)
            .arg(0)
            .arg(format!("{namespace}:*"))
            .arg(by.as_millis() as u64)
            .query(self.admin())
            .map_err(|e| e.to_string())
    }
}

fn connect(url: &str) -> Result<redis::Connection, String> {
    redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .map_err(|e| e.to_string())
}

struct Schedule<'a> {
    random: Option<u64>,
    /// Whether random choices are uniform among the options (to estimate the size
    /// of the tree), not weighted towards deliveries in order.
    uniform: bool,
    began: Instant,
    world: &'a World,
    env: &'a mut Env,
    harness: Harness,
    namespace: String,
    verbose: bool,
    run: Run,
    faults: usize,
    /// A world operation that troubles the network (a replaced server, an outage)
    /// ran: the bound on a waiter's hand-off no longer applies.
    troubled: bool,
    /// Per (client, proxy connection number), the connection's number in this
    /// schedule ([`Schedule::name_conns`]).
    conn_names: HashMap<(usize, u64), usize>,
    /// Held requests told to wait past the client's timeout.
    waited: HashSet<u64>,
    effects: Vec<Effect>,
    releases: Vec<Release>,
    /// Per group actor, the release operations still waiting for their request.
    pending: HashMap<usize, Vec<usize>>,
    seen: HashSet<(String, u64)>,
    labels: HashMap<String, String>,
    /// Per name, the greatest fencing token handed out so far.
    tokens: HashMap<String, u64>,
    checked_tokens: HashSet<(usize, usize, u64)>,
    /// A release that freed a name while one actor waited for it.
    watch: Option<Watch>,
}

/// The wait of the one actor that waits for a name a release just freed: it must be
/// granted within one round trip when nobody else asks and nothing fails.
#[derive(Debug)]
struct Watch {
    waiter: usize,
    client: usize,
    /// The waiter's acquire requests delivered since the release.
    attempts: u32,
    /// Someone else asked, or a fault struck: the bound does not apply.
    disturbed: bool,
    /// Virtual time that had to pass since the release.
    waited: Duration,
}

/// Runs one schedule of `world`, following `prefix`, then the first choice at each
/// later step.
pub(crate) fn run(world: &World, env: &mut Env, prefix: &[String], verbose: bool) -> Run {
    run_with(world, env, prefix, verbose, None)
}

/// As [`run`]; past the prefix, with `random` the choices are drawn from it
/// (xorshift state) instead of the first, weighted towards deliveries in order.
pub(crate) fn run_with(
    world: &World,
    env: &mut Env,
    prefix: &[String],
    verbose: bool,
    random: Option<u64>,
) -> Run {
    run_choosing(world, env, prefix, verbose, random, false)
}

/// One schedule whose every choice is drawn uniformly among the options, from the
/// xorshift state `seed`: the product of the numbers of options along it is an
/// unbiased estimate of how many schedules the world has (Knuth's estimator).
pub(crate) fn run_uniform(world: &World, env: &mut Env, seed: u64) -> Run {
    run_choosing(world, env, &[], false, Some(seed), true)
}

fn run_choosing(
    world: &World,
    env: &mut Env,
    prefix: &[String],
    verbose: bool,
    random: Option<u64>,
    uniform: bool,
) -> Run {
    let began = Instant::now();
    let namespace = format!(
        "ex{}",
        NEXT_NAMESPACE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    for proxy in &env.proxies {
        proxy.reset_all();
    }
    if let Err(err) = env.restore() {
        return Run {
            violation: Some(format!("setup failed: {err}")),
            ..Run::default()
        };
    }
    let urls: Vec<String> = env.proxies.iter().map(StepProxy::url).collect();
    let harness = match Harness::start(world, &urls, &env.server_url, &namespace) {
        Ok(h) => h,
        Err(err) => {
            return Run {
                violation: Some(format!("setup failed: {err}")),
                ..Run::default()
            }
        }
    };
    let mut s = Schedule {
        random,
        uniform,
        began,
        world,
        env,
        harness,
        namespace,
        verbose,
        run: Run::default(),
        faults: 0,
        troubled: false,
        conn_names: HashMap::new(),
        waited: HashSet::new(),
        effects: Vec::new(),
        releases: Vec::new(),
        pending: HashMap::new(),
        seen: HashSet::new(),
        labels: HashMap::new(),
        tokens: HashMap::new(),
        checked_tokens: HashSet::new(),
        watch: None,
    };
    if let Err(violation) = s.drive(prefix) {
        s.run.violation = Some(violation);
    }
    s.run
}

impl Schedule<'_> {
    fn log(&mut self, line: String) {
        if self.verbose {
            println!("  [{:>6} ms] {line}", self.began.elapsed().as_millis());
        }
        self.run.log.push(line);
    }

    fn drive(&mut self, prefix: &[String]) -> Result<(), String> {
        let mut idle_step = 0;
        let mut idle = Duration::ZERO;
        let mut cleaned = false;
        loop {
            if self.run.decisions.len() > MAX_STEPS {
                return Err(format!(
                    "no end after {MAX_STEPS} steps: the operations keep going"
                ));
            }
            if self.began.elapsed() > MAX_REAL {
                return Err(format!("no end after {MAX_REAL:?} of real time"));
            }
            let moved = self.quiesce();
            for (c, proxy) in self.env.proxies.iter().enumerate() {
                for line in proxy.take_passed() {
                    if self.verbose {
                        println!(
                            "  [{:>6} ms]   client {c} sent {line}",
                            self.began.elapsed().as_millis()
                        );
                    }
                }
            }
            if moved {
                idle_step = 0;
                idle = Duration::ZERO;
            }
            // One read of the locks serves both.
            let keys = self.world_keys();
            let snaps = self.snapshots(&keys);
            self.attribute(&snaps);
            self.check(&snaps)?;
            self.check_watch()?;
            self.name_conns();
            let mut options = self.enabled();
            if options.is_empty() {
                let all_done = self.all_done();
                // Every program ended, or waits for a lock a program that ended
                // still holds: the end of their scopes drops the guards left.
                let ended = self.only_waiting();
                if ended && idle >= SETTLE {
                    if self.any_guards() {
                        // The first time, before anything is dropped: the counts.
                        if !cleaned {
                            self.check_settled()?;
                        }
                        self.log("every program ended: the guards left are dropped".into());
                        self.harness.drop_all();
                        cleaned = true;
                        idle = Duration::ZERO;
                        continue;
                    }
                    if all_done {
                        return self.check_end();
                    }
                }
                if !all_done && idle >= STUCK {
                    return Err(format!(
                        "stuck: an operation saw nothing happen for {idle:?} of virtual time"
                    ));
                }
                // Before time passes, make sure nothing is on its way (a loaded
                // machine can be slow to send what a step set off).
                if self.quiet_long() {
                    continue;
                }
                // With every program ended, only retries and replays are left:
                // time may pass in bigger steps (their timers still fire in order).
                let step = if ended {
                    Duration::from_millis(IDLE_STEPS_MS[idle_step].max(250))
                } else {
                    Duration::from_millis(IDLE_STEPS_MS[idle_step])
                };
                idle_step = (idle_step + 1).min(IDLE_STEPS_MS.len() - 1);
                idle += step;
                if let Some(watch) = &mut self.watch {
                    watch.waited += step;
                }
                self.harness.advance(step);
                continue;
            }
            self.reduce(&mut options);
            let depth = self.run.decisions.len();
            // A step the prefix names may be late under load: look again a while.
            if let Some(label) = prefix.get(depth) {
                for _ in 0..5 {
                    if options.contains(label) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    self.quiesce();
                    self.name_conns();
                    options = self.enabled();
                    self.reduce(&mut options);
                }
            }
            let chosen = match prefix.get(depth) {
                Some(label) => match options.iter().position(|o| o == label) {
                    Some(at) => at,
                    None => {
                        self.run.diverged = true;
                        self.log(format!("diverged: `{label}` not among {options:?}"));
                        return Ok(());
                    }
                },
                None => match self.random.as_mut() {
                    Some(state) if self.uniform => uniform(state, options.len()),
                    Some(state) => pick(state, &options),
                    None => 0,
                },
            };
            let label = options[chosen].clone();
            self.run.decisions.push(Decision { options, chosen });
            self.apply(&label)?;
            idle_step = 0;
            idle = Duration::ZERO;
        }
    }

    /// Waits until the proxies and the runtime are quiet; returns whether an
    /// operation started or ended, or a held request came or went, meanwhile (a
    /// heartbeat does not count).
    fn quiesce(&mut self) -> bool {
        let before = (self.events(), self.held_ids());
        self.settle_traffic();
        (self.events(), self.held_ids()) != before
    }

    /// Waits longer for quiet; returns whether anything moved meanwhile.
    fn quiet_long(&mut self) -> bool {
        let before = (self.events(), self.held_ids(), self.env.activity());
        for _ in 0..2 {
            std::thread::sleep(QUIET * 2);
            self.harness.probe();
        }
        self.settle_traffic();
        let now = (self.events(), self.held_ids(), self.env.activity());
        // A heartbeat alone moves only the traffic counter: not a step.
        now.0 != before.0 || now.1 != before.1
    }

    fn held_ids(&self) -> Vec<u64> {
        self.held().iter().map(|(_, r)| r.id).collect()
    }

    /// Waits until the proxies and the runtime are quiet: twice in a row, nothing
    /// moved, no request is at the server or unread by a proxy, and the runtime
    /// went idle after a proxy last wrote to it (so a loaded machine that is slow to
    /// run the client is waited for, not taken for quiet).
    fn settle_traffic(&mut self) -> bool {
        let start = (self.env.activity(), self.events());
        let mut last = start;
        let mut quiet = 0;
        let give_up = Instant::now() + Duration::from_secs(10);
        while quiet < 2 && Instant::now() < give_up {
            std::thread::sleep(QUIET);
            let now = (self.env.activity(), self.events());
            if now == last && self.idle() {
                quiet += 1;
            } else {
                quiet = 0;
                last = now;
            }
        }
        last != start
    }

    /// Whether nothing is on its way: no request at the server or unread by a
    /// proxy, and the runtime idle since after the proxies last wrote to it.
    fn idle(&self) -> bool {
        let idle = *self.harness.shared.idle();
        idle.parked
            && self.env.proxies.iter().all(|proxy| {
                let traffic = proxy.traffic();
                traffic.in_flight == 0
                    && !traffic.unread
                    && traffic.sent_to_client.is_none_or(|sent| sent < idle.since)
            })
    }

    fn events(&self) -> u64 {
        self.harness
            .shared
            .events
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    fn any_guards(&self) -> bool {
        (0..self.world.actors.len()).any(|a| !self.harness.shared.actor(a).guards.is_empty())
    }

    /// Whether every actor ended its program or waits in an acquisition.
    fn only_waiting(&self) -> bool {
        (0..self.world.actors.len()).all(|a| {
            let state = self.harness.shared.actor(a);
            let program = &self.world.actors[a].program;
            match program.get(state.next) {
                None => true,
                Some(op) => state.running && op.acquires(),
            }
        })
    }

    fn all_done(&self) -> bool {
        (0..self.world.actors.len()).all(|a| {
            let state = self.harness.shared.actor(a);
            !state.running && state.next >= self.world.actors[a].program.len()
        })
    }

    fn held(&self) -> Vec<(usize, HeldRequest)> {
        self.env
            .proxies
            .iter()
            .enumerate()
            .flat_map(|(c, p)| p.held().into_iter().map(move |h| (c, h)))
            .collect()
    }

    /// Numbers each connection with a held request, per client, in the order this
    /// schedule first saw one: a label names a connection by that number, never by
    /// the proxy's own count, which depends on every schedule run before.
    fn name_conns(&mut self) {
        for (c, request) in self.held() {
            let next = self.conn_names.keys().filter(|(c2, _)| *c2 == c).count();
            self.conn_names.entry((c, request.conn)).or_insert(next);
        }
    }

    /// The name of connection `conn` of client `client` in labels.
    fn conn_name(&self, client: usize, conn: u64) -> String {
        match self.conn_names.get(&(client, conn)) {
            Some(n) => format!("c{n}"),
            None => format!("?{conn}"),
        }
    }

    /// The choices of this step, each as a label.
    fn enabled(&self) -> Vec<String> {
        let mut options = Vec::new();
        for (a, actor) in self.world.actors.iter().enumerate() {
            let state = self.harness.shared.actor(a);
            if state.running || state.next >= actor.program.len() {
                continue;
            }
            let next = actor.program[state.next];
            drop(state);
            // A hand-over needs the other chain's guard (or that chain's end).
            if let (Op::Handover, Some(of)) = (next, actor.shares) {
                let other = self.harness.shared.actor(of);
                let finished = !other.running && other.next >= self.world.actors[of].program.len();
                if other.guards.is_empty() && !finished {
                    continue;
                }
            }
            options.push(actor.label.to_owned());
        }
        let budget = self.faults < self.world.faults;
        let held = self.held();
        for (c, request) in &held {
            let script = request
                .args
                .get(1)
                .and_then(|f| script_of(f))
                .unwrap_or("?");
            let base = format!("{c}{}", script_letter(script));
            let same = held
                .iter()
                .filter(|(c2, r)| c2 == c && r.args.get(1) == request.args.get(1))
                .count();
            let base = if same > 1 {
                format!("{base}{}", self.conn_name(*c, request.conn))
            } else {
                base
            };
            options.push(format!("{base}i"));
            if budget && !self.waited.contains(&request.id) {
                for code in ['l', 'x', 'd', 'w'] {
                    options.push(format!("{base}{code}"));
                }
            }
        }
        options
    }

    /// Partial-order reduction: an actor's next operation on a client where nothing
    /// else is in progress commutes with every other enabled step (they touch other
    /// clients, or the server, which it does not touch until its request is
    /// delivered, which is a step of its own). Starting it first loses no behaviour.
    ///
    /// A replaced server is the exception: a start before it sends a request the
    /// replacement cuts off, a start after it is the first to meet the new server.
    /// While a replacement is enabled, nothing is reduced.
    fn reduce(&self, options: &mut Vec<String>) {
        if self.replacement_enabled(options) {
            return;
        }
        let held = self.held();
        for (a, actor) in self.world.actors.iter().enumerate() {
            let Some(client) = actor.client else { continue };
            if !options.contains(&actor.label.to_owned()) {
                continue;
            }
            let others_busy = self.world.actors.iter().enumerate().any(|(b, other)| {
                b != a && other.client == Some(client) && {
                    let state = self.harness.shared.actor(b);
                    state.running || options.contains(&other.label.to_owned())
                }
            });
            let frames = held.iter().any(|(c, _)| *c == client);
            if !others_busy && !frames {
                *options = vec![actor.label.to_owned()];
                return;
            }
        }
    }

    /// Whether a world actor's next operation among `options` replaces the server.
    fn replacement_enabled(&self, options: &[String]) -> bool {
        self.world.actors.iter().enumerate().any(|(w, actor)| {
            actor.client.is_none()
                && options.iter().any(|o| o == actor.label)
                && actor
                    .program
                    .get(self.harness.shared.actor(w).next)
                    .is_some_and(|op| op.replaces_server())
        })
    }

    fn apply(&mut self, label: &str) -> Result<(), String> {
        if let Some(a) = self.world.actors.iter().position(|x| x.label == label) {
            return self.start(a);
        }
        let code = label.chars().last().unwrap_or('i');
        let base = &label[..label.len() - 1];
        let held = self.held();
        let Some((client, request)) = held.into_iter().find(|(c, r)| {
            let script = r.args.get(1).and_then(|f| script_of(f)).unwrap_or("?");
            let short = format!("{c}{}", script_letter(script));
            short == base || format!("{short}{}", self.conn_name(*c, r.conn)) == base
        }) else {
            return Err(format!("internal: no held request for `{label}`"));
        };
        if code != 'i' {
            self.faults += 1;
            if let Some(watch) = &mut self.watch {
                watch.disturbed = true;
            }
        }
        let delivery = match code {
            'l' => Some(Delivery::LateReply),
            'x' => Some(Delivery::LostReply),
            'd' => Some(Delivery::Dropped),
            'w' => None,
            _ => Some(Delivery::InOrder),
        };
        let Some(delivery) = delivery else {
            self.log(format!("{label}: request held past the client's timeout"));
            self.waited.insert(request.id);
            self.harness
                .advance(RESPONSE_TIMEOUT + Duration::from_millis(1));
            return Ok(());
        };
        let keys = self.world_keys();
        let before = self.snapshots(&keys);
        let proxy = &self.env.proxies[client];
        proxy
            .deliver(request.id, delivery)
            .map_err(|e| format!("internal: {e}"))?;
        let give_up = Instant::now() + Duration::from_secs(5);
        while self.env.proxies[client].in_flight() > 0 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_micros(200));
        }
        let after = self.snapshots(&keys);
        let (script, entries) = parse_request(&request.args);
        self.watch_step(client, &script, &before, &after);
        if delivery != Delivery::Dropped {
            self.effects.push(Effect {
                script: script.clone(),
                entries: entries.clone(),
                before,
                after: after.clone(),
            });
        }
        let shown: Vec<String> = after
            .iter()
            .map(|(k, s)| format!("{k}={:?}", self.named(&s.holders)))
            .collect();
        self.log(format!(
            "{label}: {script} {:?} -> {}",
            entries
                .iter()
                .map(|(o, q, _)| format!("{}#{q}", self.owner_label(o)))
                .collect::<Vec<_>>(),
            shown.join(" ")
        ));
        if delivery == Delivery::LateReply {
            self.quiesce();
            self.harness
                .advance(RESPONSE_TIMEOUT + Duration::from_millis(1));
            self.quiesce();
            self.env.proxies[client].release_late(request.id);
        }
        Ok(())
    }

    fn start(&mut self, a: usize) -> Result<(), String> {
        let actor = &self.world.actors[a];
        let index = self.harness.shared.actor(a).next;
        let op = actor.program[index];
        self.log(format!("{}: starts {op:?}", actor.label));
        if op.is_world() {
            match op {
                Op::Renew => self.harness.advance(LEASE / 3 + Duration::from_millis(10)),
                Op::Force => {
                    self.revoke();
                    let forced = self.harness.force("x")?;
                    self.log(format!("W: force_unlock(x) -> {forced}"));
                }
                Op::Replace | Op::ReplaceLoaded => {
                    let loaded = op == Op::ReplaceLoaded;
                    self.vanish();
                    self.env.replace(loaded)?;
                    self.log(format!(
                        "W: the address now answers with an empty server{}",
                        if loaded {
                            " (its function library loaded)"
                        } else {
                            ""
                        }
                    ));
                }
                Op::Outage => {
                    let gone = self.env.expire_within(&self.namespace, OUTAGE)?;
                    self.harness.advance(OUTAGE);
                    self.log(format!(
                        "W: an outage of {OUTAGE:?}: nothing reached the server, {gone} key(s) expired"
                    ));
                }
                Op::Lapse => {
                    self.revoke();
                    let by = LEASE + Duration::from_millis(10);
                    let gone = self.env.expire_within(&self.namespace, by)?;
                    self.harness.advance(by);
                    self.log(format!(
                        "W: a lease's time ({by:?}) passed with nothing reaching the server, \
                         {gone} key(s) expired"
                    ));
                }
                _ => {
                    self.revoke();
                    let key = self.key("x");
                    let _: () = redis::cmd("PEXPIRE")
                        .arg(&key)
                        .arg(1)
                        .query(self.env.admin())
                        .map_err(|e| e.to_string())?;
                    std::thread::sleep(Duration::from_millis(3));
                }
            }
            if let Some(watch) = &mut self.watch {
                watch.disturbed = true;
            }
            self.troubled |= matches!(op, Op::Replace | Op::ReplaceLoaded | Op::Outage | Op::Lapse);
            let mut state = self.harness.shared.actor(a);
            state.done.push((index, Outcome::Ok));
            state.next += 1;
            return Ok(());
        }
        if let Some(watch) = &mut self.watch {
            if watch.waiter != a && (op.acquires() || op.is_world()) {
                watch.disturbed = true;
            }
        }
        if op.releases() {
            let group = self.world.group(a);
            self.releases.push(Release {
                actor: a,
                index,
                seqs: Vec::new(),
            });
            let at = self.releases.len() - 1;
            self.pending.entry(group).or_default().push(at);
        }
        if op == Op::Shutdown {
            // The shutdown gives back the holds of every owner of its client: its
            // requests are not those of their unlocks.
            for group in self.groups_of(actor.client) {
                self.releases.push(Release {
                    actor: a,
                    index,
                    seqs: Vec::new(),
                });
                let at = self.releases.len() - 1;
                self.pending.entry(group).or_default().push(at);
            }
        }
        self.harness.start_op(a, op);
        Ok(())
    }

    /// The owners (group actors) of the actors on `client`.
    fn groups_of(&self, client: Option<usize>) -> Vec<usize> {
        let mut groups: Vec<usize> = (0..self.world.actors.len())
            .filter(|&a| self.world.actors[a].client == client && client.is_some())
            .map(|a| self.world.group(a))
            .collect();
        groups.sort_unstable();
        groups.dedup();
        groups
    }

    /// Marks every guard as one whose hold vanished with the server.
    fn vanish(&self) {
        for a in 0..self.world.actors.len() {
            for held in &mut self.harness.shared.actor(a).guards {
                held.vanished = true;
            }
        }
    }

    /// Marks every guard on `x` as ended by the world.
    fn revoke(&self) {
        for a in 0..self.world.actors.len() {
            for held in &mut self.harness.shared.actor(a).guards {
                held.revoked = true;
            }
        }
    }

    /// Gives each release request it sees for the first time to the oldest release
    /// operation of its owner that has none yet.
    fn attribute(&mut self, snaps: &HashMap<String, Snapshot>) {
        for snap in snaps.values() {
            self.labels
                .extend(snap.labels.iter().map(|(o, l)| (o.clone(), l.clone())));
        }
        let mut found = Vec::new();
        for args in self.held().into_iter().map(|(_, r)| r.args) {
            let (script, entries) = parse_request(&args);
            if script == "release" {
                found.extend(entries.into_iter().map(|(o, q, _)| (o, q)));
            }
        }
        for effect in &self.effects {
            if effect.script == "release" {
                found.extend(effect.entries.iter().map(|(o, q, _)| (o.clone(), *q)));
            }
        }
        for (owner, seq) in found {
            if !self.seen.insert((owner.clone(), seq)) {
                continue;
            }
            let Some(label) = self.labels.get(&owner) else {
                continue;
            };
            let Some(group) = self.world.actors.iter().position(|a| a.label == label) else {
                continue;
            };
            if let Some(queue) = self.pending.get_mut(&group) {
                if !queue.is_empty() {
                    let at = queue.remove(0);
                    self.releases[at].seqs.push((owner, seq));
                }
            }
        }
        // A release operation that ended without sending anything gets nothing.
        for queue in self.pending.values_mut() {
            queue.retain(|&at| {
                let r = &self.releases[at];
                let state = self.harness.shared.actor(r.actor);
                state.running || state.next <= r.index
            });
        }
    }

    fn world_keys(&self) -> Vec<String> {
        self.world.names().iter().map(|n| self.key(n)).collect()
    }

    fn key(&self, name: &str) -> String {
        String::from_utf8_lossy(&layout::lock_key(&self.namespace, name.as_bytes())).into_owned()
    }

    fn snapshots(&mut self, keys: &[String]) -> HashMap<String, Snapshot> {
        keys.iter()
            .map(|k| (k.clone(), snapshot(self.env.admin(), k)))
            .collect()
    }

    fn owner_label(&self, owner: &str) -> String {
        self.labels
            .get(owner)
            .cloned()
            .unwrap_or_else(|| owner.to_owned())
    }

    fn named(&self, holders: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
        holders
            .iter()
            .map(|(o, c)| (self.owner_label(o), *c))
            .collect()
    }

    /// Follows the one waiter of a freed name: counts its acquire requests, and
    /// starts a watch when a release frees a name that exactly one actor waits for.
    fn watch_step(
        &mut self,
        client: usize,
        script: &str,
        before: &HashMap<String, Snapshot>,
        after: &HashMap<String, Snapshot>,
    ) {
        let acquire = matches!(script, "acquire" | "acquire_all");
        if let Some(watch) = &mut self.watch {
            if acquire && client == watch.client {
                watch.attempts += 1;
            } else if acquire {
                watch.disturbed = true;
            }
        }
        let freed = script == "release"
            && before.iter().any(|(key, snap)| {
                !snap.holders.is_empty() && after.get(key).is_some_and(|now| now.holders.is_empty())
            });
        // After a replaced server (the subscriber may be left on the old one) or an
        // outage, a waiter may rightly need time to look again.
        if !freed || self.faults > 0 || self.troubled {
            return;
        }
        let waiting: Vec<usize> = (0..self.world.actors.len())
            .filter(|&a| {
                let state = self.harness.shared.actor(a);
                state.running
                    && self.world.actors[a]
                        .program
                        .get(state.next)
                        .is_some_and(|op| op.acquires())
            })
            .collect();
        if let [waiter] = waiting[..] {
            if let Some(client) = self.world.actors[waiter].client {
                self.watch = Some(Watch {
                    waiter,
                    client,
                    attempts: 0,
                    disturbed: false,
                    waited: Duration::ZERO,
                });
            }
        }
    }

    /// Once the watched waiter's wait ended: granted within one round trip.
    fn check_watch(&mut self) -> Result<(), String> {
        let Some(watch) = &self.watch else {
            return Ok(());
        };
        let state = self.harness.shared.actor(watch.waiter);
        if state.running {
            return Ok(());
        }
        let granted = matches!(state.done.last(), Some((_, Outcome::Ok)));
        drop(state);
        let watch = self.watch.take();
        if let Some(watch) = watch {
            if granted && !watch.disturbed && !watch.waited.is_zero() {
                return Err(format!(
                    "{} waited for a release that freed the lock, and took it only after {:?} of virtual time, with nobody else asking",
                    self.world.actors[watch.waiter].label, watch.waited
                ));
            }
            if granted && !watch.disturbed && watch.attempts > 1 {
                return Err(format!(
                    "{} waited for a release that freed the lock, and needed {} round trips to take it, with nobody else asking",
                    self.world.actors[watch.waiter].label, watch.attempts
                ));
            }
        }
        Ok(())
    }

    /// The properties that hold after every step.
    fn check(&mut self, snaps: &HashMap<String, Snapshot>) -> Result<(), String> {
        let mut state_hash = std::collections::hash_map::DefaultHasher::new();
        for name in self.world.names() {
            let key = self.key(name);
            let snap = snaps.get(&key).cloned().unwrap_or_default();
            let named = self.named(&snap.holders);
            named.hash(&mut state_hash);
            let mut exclusive = BTreeMap::new();
            let mut readers = BTreeMap::new();
            // (client, owner, actor) of each guard that believes it holds `name`:
            // those whose hold vanished with a replaced server, and the others.
            let mut vanished = Vec::new();
            let mut believers = Vec::new();
            for (a, actor) in self.world.actors.iter().enumerate() {
                let group = self.world.group(a);
                let state = self.harness.shared.actor(a);
                (state.next, state.running, state.guards.len()).hash(&mut state_hash);
                for (g, held) in state.guards.iter().enumerate() {
                    let lost = held.guard.is_lost();
                    (lost, held.revoked, held.vanished).hash(&mut state_hash);
                    if !held.guard.names().iter().any(|n| n == name) || lost || held.revoked {
                        continue;
                    }
                    let group_label = self.world.actors[group].label;
                    if held.vanished {
                        vanished.push((actor.client, group_label, actor.label));
                        continue;
                    }
                    believers.push((actor.client, group_label, actor.label));
                    if !named.contains_key(group_label) {
                        return Err(format!(
                            "{} believes it holds `{name}`, but the server has no hold of its owner ({named:?})",
                            actor.label
                        ));
                    }
                    if held.op == Op::Read {
                        readers.insert(group_label, actor.label);
                    } else {
                        exclusive.insert(group_label, actor.label);
                    }
                    if let Some(token) = held.guard.token() {
                        if held.op.acquires() && self.checked_tokens.insert((a, g, token)) {
                            let last = self.tokens.get(name).copied().unwrap_or(0);
                            if token <= last {
                                return Err(format!(
                                    "{} was given fencing token {token} for `{name}` after {last} was handed out",
                                    actor.label
                                ));
                            }
                            self.tokens.insert(name.to_owned(), token);
                        }
                    }
                }
            }
            if exclusive.len() > 1
                || (!exclusive.is_empty() && readers.keys().any(|r| !exclusive.contains_key(r)))
            {
                return Err(format!(
                    "two owners believe they hold `{name}`: exclusive {:?}, readers {:?}",
                    exclusive.values().collect::<Vec<_>>(),
                    readers.values().collect::<Vec<_>>()
                ));
            }
            // A hold that vanished with a replaced server still counts for its
            // client until the guard is told: the client grants nothing new there
            // before. (Another client cannot know of it: for it the server's loss
            // is a lease ended early, which fencing tokens are for.)
            for (client, owner, label) in &vanished {
                if let Some((_, _, other)) =
                    believers.iter().find(|(c, o, _)| c == client && o != owner)
                {
                    return Err(format!(
                        "{other} was granted `{name}` while {label} of the same client, whose hold vanished with the replaced server, was not yet told"
                    ));
                }
            }
        }
        self.check_shutdowns()?;
        self.held()
            .iter()
            .map(|(c, r)| (c, r.args.get(1).cloned()))
            .collect::<Vec<_>>()
            .hash(&mut state_hash);
        self.run.states.push(state_hash.finish());
        Ok(())
    }

    /// Once an actor's `shutdown()` returned: no guard of its client is live, no
    /// acquisition or re-entry of its client returned a guard after that, and each
    /// one started after that failed with `ClientShutDown`.
    fn check_shutdowns(&self) -> Result<(), String> {
        for (s, shutter) in self.world.actors.iter().enumerate() {
            let Some(index) = shutter.program.iter().position(|op| *op == Op::Shutdown) else {
                continue;
            };
            let Some(returned) = self.ended_at(s, index) else {
                continue;
            };
            for (a, actor) in self.world.actors.iter().enumerate() {
                if actor.client != shutter.client {
                    continue;
                }
                let state = self.harness.shared.actor(a);
                if let Some(held) = state.guards.iter().find(|h| !h.guard.is_lost()) {
                    return Err(format!(
                        "{}'s shutdown() returned, and {} still holds a live guard of {:?}",
                        shutter.label,
                        actor.label,
                        held.guard.names()
                    ));
                }
                for &(i, started, ended) in &state.spans {
                    let op = actor.program[i];
                    if !op.grants() {
                        continue;
                    }
                    let outcome = state.done.iter().find(|(j, _)| *j == i).map(|(_, o)| o);
                    if ended > returned && outcome == Some(&Outcome::Ok) {
                        return Err(format!(
                            "{}'s {op:?} returned a guard after {}'s shutdown() had returned",
                            actor.label, shutter.label
                        ));
                    }
                    if started > returned
                        && !matches!(outcome, Some(Outcome::ShutDown | Outcome::Skipped))
                    {
                        return Err(format!(
                            "{}'s {op:?}, started after {}'s shutdown() returned, ended {outcome:?}, not ClientShutDown",
                            actor.label, shutter.label
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// When operation `index` of `actor` ended, on the events count.
    fn ended_at(&self, actor: usize, index: usize) -> Option<u64> {
        let state = self.harness.shared.actor(actor);
        state
            .spans
            .iter()
            .find(|(i, _, _)| *i == index)
            .map(|&(_, _, ended)| ended)
    }

    /// The owners (group labels) whose holds may be left for their lease to end: an
    /// unlock of theirs ended in an error, or their client's shutdown said it could
    /// not give everything back.
    fn unknown_owners(&self) -> HashSet<String> {
        let mut unknown = self.failed_unlocks();
        for (s, shutter) in self.world.actors.iter().enumerate() {
            let incomplete = self.harness.shared.actor(s).done.iter().any(|(i, o)| {
                shutter.program.get(*i) == Some(&Op::Shutdown) && matches!(o, Outcome::Failed(_))
            });
            if incomplete {
                for group in self.groups_of(shutter.client) {
                    unknown.insert(self.world.actors[group].label.to_owned());
                }
            }
        }
        unknown
    }

    /// Once every program ended and nothing moved for a while: the server's hold
    /// count of each owner equals its live guards. A guard whose lease the world
    /// ended, or whose hold vanished with a replaced server, is not counted: its
    /// client may rightly not know yet (it learns at the next renewal, or when a
    /// request of it meets the new server).
    fn check_settled(&mut self) -> Result<(), String> {
        for name in self.world.names() {
            let key = self.key(name);
            let snap = snapshot(self.env.admin(), &key);
            let named = self.named(&snap.holders);
            let mut expected: BTreeMap<String, u64> = BTreeMap::new();
            for a in 0..self.world.actors.len() {
                let group = self.world.actors[self.world.group(a)].label.to_owned();
                let state = self.harness.shared.actor(a);
                let live = state
                    .guards
                    .iter()
                    .filter(|h| {
                        !h.guard.is_lost()
                            && !h.revoked
                            && !h.vanished
                            && h.guard.names().iter().any(|n| n == name)
                    })
                    .count() as u64;
                if live > 0 {
                    *expected.entry(group).or_default() += live;
                }
            }
            let mut actual = named.clone();
            // A hold the world revoked may still be seen by its owner as held.
            actual.retain(|_, c| *c > 0);
            let unknown = self.unknown_owners();
            actual.retain(|owner, _| !unknown.contains(owner));
            expected.retain(|owner, _| !unknown.contains(owner));
            if actual != expected {
                return Err(format!(
                    "settled, `{name}` holds {actual:?} but the live guards are {expected:?}"
                ));
            }
        }
        self.check_releases()
    }

    /// `unlock()` said `Ok` exactly when its release was applied, `Lost` exactly
    /// when not.
    fn check_releases(&mut self) -> Result<(), String> {
        for release in &self.releases {
            let actor = &self.world.actors[release.actor];
            if actor.program[release.index] != Op::Unlock {
                continue;
            }
            let state = self.harness.shared.actor(release.actor);
            let Some((_, outcome)) = state.done.iter().find(|(i, _)| *i == release.index) else {
                continue;
            };
            let applied = self.effects.iter().any(|e| {
                e.entries.iter().any(|(o, q, key)| {
                    release.seqs.contains(&(o.clone(), *q)) && e.decreased(o, key)
                })
            });
            match (outcome, applied) {
                (Outcome::Ok, false) if release.seqs.is_empty() => {}
                (Outcome::Ok, false) => {
                    return Err(format!(
                        "{}'s unlock returned Ok, but its release was never applied",
                        actor.label
                    ))
                }
                (Outcome::Lost, true) => {
                    return Err(format!(
                        "{}'s unlock returned Lost, but its release was applied",
                        actor.label
                    ))
                }
                // An error is the client saying it does not know (a request
                // delayed past every retry, then applied): allowed, and the
                // lease ends what it left (see `check_end`).
                _ => {}
            }
        }
        Ok(())
    }

    /// The labels of the owners (group actors) with an unlock that ended in an error.
    fn failed_unlocks(&self) -> HashSet<String> {
        (0..self.world.actors.len())
            .filter(|&a| {
                let program = &self.world.actors[a].program;
                self.harness
                    .shared
                    .actor(a)
                    .done
                    .iter()
                    .any(|(i, outcome)| {
                        program.get(*i) == Some(&Op::Unlock)
                            && matches!(outcome, Outcome::Failed(_))
                    })
            })
            .map(|a| self.world.actors[self.world.group(a)].label.to_owned())
            .collect()
    }

    /// After every guard was dropped and nothing moved: nothing is held, and only
    /// the keys with a documented lifetime are left.
    fn check_end(&mut self) -> Result<(), String> {
        self.check_releases()?;
        let pattern = format!("{}:*", self.namespace);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query(self.env.admin())
            .map_err(|e| e.to_string())?;
        for key in keys {
            let side = layout::name_of_side_key(&self.namespace, key.as_bytes())
                .map(|name| layout::lock_key(&self.namespace, &name));
            if side
                .as_ref()
                .is_some_and(|lock| layout::fence_key(lock) == key.as_bytes())
            {
                continue; // fencing counters last for ever, by design
            }
            if side.is_some() {
                let ttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query(self.env.admin())
                    .map_err(|e| e.to_string())?;
                if (0..=60_000).contains(&ttl) {
                    continue; // a final release's record, for its retry
                }
            }
            let snap = snapshot(self.env.admin(), &key);
            let named = self.named(&snap.holders);
            // A hold whose unlock ended in an error (outcome unknown) is ended by
            // its lease, as documented.
            let unknown = self.unknown_owners();
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query(self.env.admin())
                .map_err(|e| e.to_string())?;
            let lease_ms = i64::try_from(LEASE.as_millis()).unwrap_or(i64::MAX);
            if !named.is_empty()
                && named.keys().all(|label| unknown.contains(label))
                && (1..=lease_ms).contains(&ttl)
            {
                continue;
            }
            return Err(format!(
                "after every program ended, `{key}` is left: {named:?}"
            ));
        }
        Ok(())
    }
}

/// One of `count` options, uniformly.
fn uniform(state: &mut u64, count: usize) -> usize {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state % count as u64) as usize
}

/// A random choice: an event uniformly (an actor's start, or a held request), then
/// for a request in order three times in four, else one of its faults.
fn pick(state: &mut u64, options: &[String]) -> usize {
    let mut next = || {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state
    };
    // A delivery's label starts with its client's digit and ends with its code.
    let delivery = |label: &str| label.chars().next().is_some_and(|c| c.is_ascii_digit());
    let events: Vec<usize> = (0..options.len())
        .filter(|&i| !delivery(&options[i]) || options[i].ends_with('i'))
        .collect();
    let event = events[(next() % events.len() as u64) as usize];
    let label = &options[event];
    if !delivery(label) {
        return event;
    }
    let base = &label[..label.len() - 1];
    let faults: Vec<usize> = (event + 1..options.len())
        .filter(|&i| options[i].starts_with(base) && options[i].len() == label.len())
        .collect();
    if faults.is_empty() || next() % 4 != 0 {
        event
    } else {
        faults[(next() % faults.len() as u64) as usize]
    }
}

/// The lock hash at `key`, read straight from the server.
pub(crate) fn snapshot(admin: &mut redis::Connection, key: &str) -> Snapshot {
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(key)
        .query(admin)
        .unwrap_or_default();
    let Ok(lock) = StoredLock::from_fields(fields) else {
        return Snapshot::default();
    };
    let labels = lock
        .holders()
        .keys()
        .filter_map(|owner| {
            let site = lock.who(owner)?.rsplit(' ').next()?.to_owned();
            Some((owner.clone(), site))
        })
        .collect();
    Snapshot {
        holders: lock.holders().clone(),
        labels,
    }
}

/// The script of a held `FCALL` and each request in it: (owner, number, lock key),
/// read back by `distlock::layout` as the client wrote it.
fn parse_request(args: &[Vec<u8>]) -> (String, Vec<(String, u64, String)>) {
    let script = args
        .get(1)
        .and_then(|f| script_of(f))
        .unwrap_or("?")
        .to_owned();
    let call = args.get(2..).and_then(Call::from_args).unwrap_or_default();
    let entry = |owner: &str, seq: u64, lock: &[u8]| {
        let lock = String::from_utf8_lossy(lock).into_owned();
        (owner.to_owned(), seq, lock)
    };
    let entries = match script.as_str() {
        "acquire" | "reenter" => Acquire::decode_all(&call)
            .unwrap_or_default()
            .iter()
            .map(|a| entry(a.owner, a.seq, a.lock))
            .collect(),
        "release" => args::Release::decode_all(&call)
            .map(|(_, releases)| releases)
            .unwrap_or_default()
            .iter()
            .map(|r| entry(r.owner, r.seq, r.lock))
            .collect(),
        _ => Vec::new(),
    };
    (script, entries)
}
