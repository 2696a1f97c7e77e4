//! `cargo xtask explore`: every schedule of a few small worlds, run on the real
//! client and the real scripts against a real `redis-server`, with each request
//! delivered in order, late, or lost, and every property checked after every step.
//!
//! How a schedule is made deterministic:
//! - Time: each schedule runs on a current-thread Tokio runtime whose clock is
//!   paused and never moves on its own (a blocking task inhibits auto-advance);
//!   virtual time passes only when the explorer advances it.
//! - Delivery: each client talks to the server through a `StepProxy`, which holds
//!   every script request (acquire, re-enter, release, renew, withdraw) until the
//!   explorer delivers it: in order, with its reply late (after the client's
//!   response timeout), with its reply lost and the connection reset, dropped with
//!   the connection reset, or held itself past the timeout and delivered later.
//! - Between two choices the explorer waits until the proxies and the runtime are
//!   quiet, so a schedule is the list of its choices, printed as a replay string.
//!   Nothing else decides: each schedule (and each replay) has keys of its own on
//!   the server (a namespace numbered for the whole process), and its labels name
//!   connections only by their order in the schedule.
//!
//! The world's own operations, besides time passing for renewal, an operator's
//! force-unlock and a lease that ends on the server:
//! - `shutdown()` of a client while its other chains' operations are in flight:
//!   once it returned, no guard of that client is live, no acquisition of it
//!   returns a guard, and one started after it fails with `ClientShutDown`; its
//!   holds are given back unless the report says it could not.
//! - A replaced server: the address answers with another, empty server (keys and
//!   function library gone); every connection is reset but the subscriber's, which
//!   stays with the old server, so that a request is the first to meet the new one.
//!   A guard whose hold vanished counts as a holder for its client until it is told:
//!   the client must grant the lock to no other chain before. In world `discover`
//!   the chain that holds keeps its guard, and another chain of its client is the
//!   first to meet the new server (its request in flight when the server is
//!   replaced, or sent after), so its grant races the check of the holds there;
//!   that server has the function library already (another client reached it
//!   first), so nothing reloads it between the discovery and the request.
//! - An outage longer than a final release's record lives: for 2.4 s nothing
//!   reaches the server (held requests stay held) while the client's clock and the
//!   server's key lifetimes move by it.
//! - A lease that ends on every clock (world `lapse`, past the slice): a whole
//!   lease passes with nothing reaching the server, renewals included, so every
//!   lease ends on the server's clock and on both clients' alike (where `expiry`
//!   ends one on the server alone).
//!
//! Reductions (each keeps every behaviour reachable):
//! - An actor's next operation on a client where nothing else is in progress is
//!   started at once, not at every later point: until its first request is
//!   delivered (a choice of its own) it touches nothing another step sees. Not
//!   while the server may be replaced next: a request sent before the replacement
//!   is cut off, one sent after it is the first to meet the new server.
//! - Virtual time passes only when nothing else can happen, except where a choice
//!   says so (a late reply, a held request, renewal): the network is taken to be
//!   faster than the client's timers unless a fault says otherwise.
//! - A schedule holds at most the world's number of faults.
//!
//! Usage (through `cargo xtask explore`, or `cargo test --features fault-injection
//! --test explore -- ARGS`):
//!   (no args)          the slice CI runs
//!   --full             the whole bound (see `world::Bound`)
//!   --beyond           past it: hours to days
//!   --world NAMES      only those worlds (comma-separated); `deadlock` is the
//!                      deadlock knot, a scenario run once on real time
//!   --faults N         at most N faults per schedule in every world
//!   --max-secs S       stop each world after S seconds (reported incomplete)
//!   --sample N         then N schedules of each world with a fault, at random,
//!                      and 10 of them replayed from their strings, which must take
//!                      the same steps to the same end (`--replays K`: K of them)
//!   --fault NAME       seed a fault and show the explorer finds it
//!   --seeded           every seeded fault in turn; fails unless each is found
//!                      (each search stops at its first hit, and says after how
//!                      many schedules): release-replay-forgotten,
//!                      reentry-replay-forgotten, shared-final-release-record,
//!                      release-message-ignored (world `chains`),
//!                      grant-after-shutdown (`shutdown`),
//!                      grant-before-replacement-check (`discover`),
//!                      not-held-believed-late (`outage`),
//!                      not-held-believed-after-replacement (`replace`),
//!                      unrecorded-not-held-taken-for-applied (`expiry`),
//!                      deadlock-wait-announced-at-threshold (the scenario
//!                      `deadlock`, see `deadlock.rs`)
//!   --replay STRING    one schedule, step by step
//!   --estimate N       the number of schedules of each world and the time they
//!                      take, estimated from N schedules drawn uniformly
//!   --jobs N           split each world's search over N processes (each runs its
//!                      own server): the schedules whose first branching choices
//!                      hash to K go to process K

mod deadlock;
mod harness;
mod jobs;
mod schedule;
mod world;

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Instant;

use distlock::__private::faults::{self, Fault};
use distlock_testkit::RedisServer;

use schedule::{Env, Run};
use world::{Bound, World};

/// How a seeded fault is searched for in its world, up to the first schedule that
/// finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Search {
    /// Schedules drawn at random (a fixed seed), a fault on a quarter of the
    /// deliveries; a few of them replayed from their strings, which must take the
    /// same steps.
    Sample,
    /// The world's own depth-first search (one fault per schedule): it varies the
    /// last choices first, such as where a world's operation falls after a
    /// delivery's fault, which random draws place as often before anything
    /// happened.
    DepthFirst,
    /// Not a world: the scenario of that name, run once (`deadlock.rs`).
    Scenario,
}

/// The seeded faults that bring back interleaving bugs found before: each one's
/// name, fault, world and search.
const SEEDED: [(&str, Fault, &str, Search); 10] = [
    (
        "release-replay-forgotten",
        Fault::ReleaseReplayForgotten,
        "chains",
        Search::Sample,
    ),
    (
        "reentry-replay-forgotten",
        Fault::ReentryReplayForgotten,
        "chains",
        Search::Sample,
    ),
    (
        "shared-final-release-record",
        Fault::SharedFinalReleaseRecord,
        "chains",
        Search::Sample,
    ),
    (
        "release-message-ignored",
        Fault::ReleaseMessageIgnored,
        "chains",
        Search::Sample,
    ),
    (
        "grant-after-shutdown",
        Fault::GrantAfterShutdown,
        "shutdown",
        Search::Sample,
    ),
    (
        "grant-before-replacement-check",
        Fault::GrantBeforeReplacementCheck,
        "discover",
        Search::Sample,
    ),
    (
        "not-held-believed-late",
        Fault::NotHeldBelievedLate,
        "outage",
        Search::DepthFirst,
    ),
    (
        "not-held-believed-after-replacement",
        Fault::NotHeldBelievedAfterReplacement,
        "replace",
        Search::DepthFirst,
    ),
    (
        "unrecorded-not-held-taken-for-applied",
        Fault::UnrecordedNotHeldTakenForApplied,
        "expiry",
        Search::Sample,
    ),
    (
        "deadlock-wait-announced-at-threshold",
        Fault::DeadlockWaitAnnouncedAtThreshold,
        deadlock::NAME,
        Search::Scenario,
    ),
];

/// How many schedules a seeded fault's search draws at most: it stops at the
/// first that finds the fault.
const SEEDED_SCHEDULES: usize = 600;

/// How many of the schedules `--sample` drew are replayed from their strings, each
/// of which must take the same steps to the same end (`--replays K` to change).
const SAMPLE_REPLAYS: usize = 10;
/// How many more schedules `--sample` draws after its first violation (for a
/// shorter one).
const SAMPLE_AFTER_HIT: usize = 100;
/// As [`SAMPLE_REPLAYS`], for each seeded fault's sample.
const SEEDED_REPLAYS: usize = 3;

struct Report {
    world: String,
    bound: String,
    schedules: usize,
    states: HashSet<u64>,
    diverged: usize,
    deepest: usize,
    violations: Vec<(String, String)>,
    secs: f64,
    /// Every schedule of the bound was run (not stopped by `--max-secs`).
    complete: bool,
    /// Whether the replay of the shortest violation found it again (sampling only).
    reproduced: Option<bool>,
    /// How many sampled schedules were replayed from their strings, and how many of
    /// those replays did not take the same steps to the same end (sampling only).
    replays: usize,
    replay_diverged: usize,
}

impl Report {
    fn new(world: &World) -> Report {
        Report::named(world.name, world.bound())
    }

    /// An empty report of the world or scenario `world`, whose bound is `bound`.
    fn named(world: &str, bound: String) -> Report {
        Report {
            world: world.to_owned(),
            bound,
            schedules: 0,
            states: HashSet::new(),
            diverged: 0,
            deepest: 0,
            violations: Vec::new(),
            secs: 0.0,
            complete: true,
            reproduced: None,
            replays: 0,
            replay_diverged: 0,
        }
    }
}

impl Report {
    /// Prints the report of one world: a line for people, a `RELIABILITY` line for
    /// `cargo xtask reliability`, each violation with its replay, and with
    /// `states`, the hashes of the distinct states (for a `--jobs` parent to join).
    fn print(&self, faults: usize, states: bool) {
        println!(
            "explore world={} schedules={} states={} deepest={} diverged={} violations={} secs={:.1} complete={} bound=\"{}\"",
            self.world,
            self.schedules,
            self.states.len(),
            self.deepest,
            self.diverged,
            self.violations.len(),
            self.secs,
            self.complete,
            self.bound
        );
        println!(
            "RELIABILITY scenario=explore_{} schedules={} states={} deepest={} faults={faults} violations={} diverged={} complete={} ms={}",
            self.world,
            self.schedules,
            self.states.len(),
            self.deepest,
            self.violations.len(),
            self.diverged,
            u8::from(self.complete),
            (self.secs * 1000.0) as u64
        );
        if states {
            let hashes: Vec<String> = self.states.iter().map(|h| format!("{h:x}")).collect();
            println!(
                "explore states world={} hashes={}",
                self.world,
                hashes.join(",")
            );
        }
        for (replay, violation) in &self.violations {
            println!("  VIOLATION: {violation}\n  replay: cargo xtask explore --replay '{replay}'");
        }
    }
}

/// The worlds to explore: the slice's or the whole bound's, `only` one of them,
/// each with `budget` faults when given.
fn chosen_worlds(bound: Bound, only: Option<&str>, budget: Option<usize>) -> Vec<World> {
    world::worlds(bound)
        .into_iter()
        .filter(|w| only.is_none_or(|o| o.split(',').any(|name| name == w.name)))
        .map(|mut w| {
            if let Some(budget) = budget {
                w.faults = budget;
            }
            w
        })
        .collect()
}

/// The argument after `name` in `args`, if `name` is there.
fn value_of(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| value_of(&args, name);
    if let Some(jobs) = value("--jobs") {
        return jobs::run(&args, &jobs);
    }
    let part = match value("--part").map(|p| Part::parse(&p)) {
        None => Part::WHOLE,
        Some(Some(part)) => part,
        Some(None) => {
            eprintln!("explore: --part is K/N with K < N");
            return ExitCode::FAILURE;
        }
    };
    let server = match RedisServer::start() {
        Ok(server) => server,
        Err(err) => {
            eprintln!("explore: could not start redis-server: {err}");
            return ExitCode::FAILURE;
        }
    };
    inject_from_env();
    if let Some(replay) = value("--replay") {
        return replay_one(&server, &replay);
    }
    let only = value("--world");
    let budget: Option<usize> = value("--faults").and_then(|n| n.parse().ok());
    let max_secs: Option<f64> = value("--max-secs").and_then(|n| n.parse().ok());
    let mut worlds = chosen_worlds(Bound::of(&args), only.as_deref(), budget);
    if flag("--seeded") || value("--fault").is_some() {
        return seeded(&server, value("--fault").as_deref());
    }
    if only
        .as_deref()
        .is_some_and(|o| o.split(',').any(|name| name == deadlock::NAME))
    {
        let report = scenario(&server);
        report.print(0, false);
        if !report.violations.is_empty() {
            return ExitCode::FAILURE;
        }
        if worlds.is_empty() {
            return ExitCode::SUCCESS;
        }
    }
    worlds.sort_by_key(|w| w.name);
    if let Some(count) = value("--estimate").and_then(|n| n.parse().ok()) {
        for world in &worlds {
            estimate(&server, world, count);
        }
        return ExitCode::SUCCESS;
    }
    let started = Instant::now();
    let mut failed = false;
    let mut total = (0, 0);
    for world in &worlds {
        let report = explore(&server, world, part, max_secs, false);
        total.0 += report.schedules;
        total.1 += report.states.len();
        failed |= !report.violations.is_empty();
        report.print(world.faults, part != Part::WHOLE);
    }
    // `--sample N`: then N schedules with (at least) one fault from each world,
    // drawn at random with a fixed seed.
    let sampled: usize = value("--sample").and_then(|n| n.parse().ok()).unwrap_or(0);
    let replays: usize = value("--replays")
        .and_then(|n| n.parse().ok())
        .unwrap_or(SAMPLE_REPLAYS);
    if sampled > 0 {
        for world in &worlds {
            let mut faulty = world.clone();
            faulty.faults = faulty.faults.max(1);
            let report = sample(&server, &faulty, sampled, SAMPLE_AFTER_HIT, replays);
            total.0 += report.schedules;
            failed |= report.replay_diverged > 0;
            println!(
                "explore sampled world={} schedules={} violations={} shortest_replay_reproduces={} replayed={} replay_diverged={} secs={:.1} bound=\"{}\"",
                report.world,
                report.schedules,
                report.violations.len(),
                match report.reproduced {
                    Some(true) => "yes",
                    Some(false) => "NO",
                    None => "-",
                },
                report.replays,
                report.replay_diverged,
                report.secs,
                report.bound
            );
            println!(
                "RELIABILITY scenario=explore_sampled_{} schedules={} faults=1 violations={} ms={}",
                report.world,
                report.schedules,
                report.violations.len(),
                (report.secs * 1000.0) as u64
            );
            for (replay, violation) in &report.violations {
                failed = true;
                println!(
                    "  VIOLATION: {violation}\n  replay: cargo xtask explore --replay '{replay}'"
                );
            }
        }
    }
    println!(
        "explore total worlds={} schedules={} states={} secs={:.1} bound={}",
        worlds.len(),
        total.0,
        total.1,
        started.elapsed().as_secs_f64(),
        match Bound::of(&args) {
            Bound::Slice => "slice",
            Bound::Full => "full",
            Bound::Beyond => "beyond",
        }
    );
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--seeded` (every seeded fault in turn) or `--fault NAME` (that one): each is
/// searched for in its world (schedules drawn at random, up to the first that finds
/// it) or scenario, and must be found, its violation replaying the same.
fn seeded(server: &RedisServer, wanted: Option<&str>) -> ExitCode {
    let mut missed = 0;
    for (name, fault, world_name, search) in SEEDED {
        if wanted.is_some_and(|w| w != name) {
            continue;
        }
        let world = world::worlds(Bound::Full)
            .into_iter()
            .find(|w| w.name == world_name);
        faults::clear();
        faults::inject(fault);
        let report = match (search, &world) {
            (Search::Scenario, _) => scenario(server),
            (Search::Sample, Some(world)) => {
                sample(server, world, SEEDED_SCHEDULES, 0, SEEDED_REPLAYS)
            }
            (Search::DepthFirst, Some(world)) => {
                let mut report = explore(server, world, Part::WHOLE, None, true);
                if let Some((replay, _)) = report.violations.first() {
                    report.reproduced = Some(reproduces(server, world, replay));
                }
                report
            }
            (_, None) => continue,
        };
        faults::clear();
        if !seeded_report(name, &report) {
            missed += 1;
        }
    }
    if missed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Prints what the search for the seeded fault `name` gave; whether it was found
/// (and its violation replays the same, where it has a replay string).
fn seeded_report(name: &str, report: &Report) -> bool {
    let mut found = true;
    if report.replay_diverged > 0 {
        found = false;
        println!(
            "explore seeded fault={name}: {} of {} sampled schedules did not replay the same",
            report.replay_diverged, report.replays
        );
    }
    // A scenario (no replay string) takes no steps the explorer chose.
    let steps = report
        .violations
        .first()
        .filter(|_| report.reproduced.is_some())
        .map_or(0, |(replay, _)| replay.split('.').count());
    println!(
        "RELIABILITY scenario=explore_seeded_{} seeded_faults=1 caught={} schedules={} shortest_steps={steps} replay_reproduces={} ms={}",
        name.replace('-', "_"),
        u8::from(!report.violations.is_empty()),
        report.schedules,
        // A scenario has no replay: no figure.
        report.reproduced.map_or("-", |r| if r { "1" } else { "0" }),
        (report.secs * 1000.0) as u64
    );
    let Some((replay, violation)) = report.violations.first() else {
        println!(
            "explore seeded fault={name} found=NO schedules={} secs={:.1}",
            report.schedules, report.secs
        );
        return false;
    };
    // A world's violation replays from its string; a scenario's is the scenario
    // run again under the fault.
    let (reproduces, replay) = match report.reproduced {
        Some(true) => (
            "yes",
            format!("EXPLORE_FAULT={name} cargo xtask explore --replay '{replay}'"),
        ),
        Some(false) => (
            "NO",
            format!("EXPLORE_FAULT={name} cargo xtask explore --replay '{replay}'"),
        ),
        None => (
            "-",
            format!(
                "EXPLORE_FAULT={name} cargo xtask explore --world {}",
                report.world
            ),
        ),
    };
    println!(
        "explore seeded fault={name} found=yes world={} schedules_to_hit={} secs={:.1} shortest_steps={steps} replay_reproduces={reproduces} violation=\"{violation}\"\n  replay: {replay}",
        report.world, report.schedules, report.secs,
    );
    found && report.reproduced != Some(false)
}

/// The deadlock knot (`deadlock.rs`) run once, as the report of one schedule.
fn scenario(server: &RedisServer) -> Report {
    let mut report = Report::named(deadlock::NAME, deadlock::WHAT.to_owned());
    let started = Instant::now();
    report.schedules = 1;
    match deadlock::run(server) {
        Ok(ending) => {
            println!(
                "explore scenario={} victims={:?} secs={:.1}",
                deadlock::NAME,
                ending.victims,
                ending.secs
            );
            if let Some(violation) = ending.violation() {
                report
                    .violations
                    .push((format!("{}/", deadlock::NAME), violation));
            }
        }
        Err(err) => report.violations.push((
            format!("{}/", deadlock::NAME),
            format!("setup failed: {err}"),
        )),
    }
    report.secs = started.elapsed().as_secs_f64();
    report
}

/// Turns on the seeded fault named by `EXPLORE_FAULT`, if any: to replay what
/// `--seeded` found, or to run a world's whole search under it.
fn inject_from_env() {
    if let Ok(fault) = std::env::var("EXPLORE_FAULT") {
        if let Some((_, f, _, _)) = SEEDED.iter().find(|(n, _, _, _)| *n == fault) {
            faults::inject(*f);
        }
    }
}

/// Every schedule of `world` that `part` owns, depth first; with `first_hit`, up to
/// the first that finds a violation.
fn explore(
    server: &RedisServer,
    world: &World,
    part: Part,
    max_secs: Option<f64>,
    first_hit: bool,
) -> Report {
    let started = Instant::now();
    let mut report = Report::new(world);
    let mut env = match Env::new(server, world.clients) {
        Ok(env) => env,
        Err(err) => {
            report.violations.push((String::new(), err));
            return report;
        }
    };
    let mut prefix: Vec<String> = Vec::new();
    let mut ran = 0;
    loop {
        let run = schedule::run(world, &mut env, &prefix, false);
        ran += 1;
        // A schedule belongs to one part; the others may run it too, to find the
        // choices under it, but do not count it.
        let owned = part.owns(&run.decisions, true);
        if owned {
            report.schedules += 1;
            report.deepest = report.deepest.max(run.decisions.len());
            report.states.extend(run.states.iter().copied());
            report.diverged += usize::from(run.diverged);
            if let Some(violation) = &run.violation {
                let replay = format!("{}/{}", world.name, run.labels().join("."));
                // Said at once too: a long run stopped before its end still tells.
                eprintln!(
                    "explore{}: VIOLATION {violation}; replay: {replay}",
                    part.suffix()
                );
                report.violations.push((replay, violation.clone()));
            }
        }
        if ran % 25 == 0 || std::env::var_os("EXPLORE_TRACE").is_some() {
            eprintln!(
                "explore{}: {} schedules of {} in {:.0} s, {} states; last: {}",
                part.suffix(),
                report.schedules,
                world.name,
                started.elapsed().as_secs_f64(),
                report.states.len(),
                run.labels().join(".")
            );
        }
        let hit = first_hit && !report.violations.is_empty();
        if hit || max_secs.is_some_and(|max| started.elapsed().as_secs_f64() > max) {
            report.complete = false;
            break;
        }
        match next_prefix(&run, part) {
            Some(next) => prefix = next,
            None => break,
        }
    }
    // The shortest first.
    report
        .violations
        .sort_by_key(|(replay, _)| replay.split('.').count());
    report.secs = started.elapsed().as_secs_f64();
    report
}

/// Whether running the schedule of `replay` (`WORLD/STEP.STEP...`) alone finds a
/// violation again, in one of three tries (a try whose timing moved, so that a
/// step of the string is not there, is tried again).
fn reproduces(server: &RedisServer, world: &World, replay: &str) -> bool {
    let steps: Vec<String> = replay
        .split_once('/')
        .map_or("", |(_, steps)| steps)
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let Ok(mut env) = Env::new(server, world.clients) else {
        return false;
    };
    let run = schedule::run(world, &mut env, &steps, false);
    run.violation.is_some() && !run.diverged && run.labels() == steps
}

/// How many first choices decide which part a schedule belongs to.
const SPLIT_DEPTH: usize = 6;

/// The part `k` of `n` of each world's schedules that this process runs: the
/// schedules whose first [`SPLIT_DEPTH`] choices hash to `k` modulo `n` (a shorter
/// schedule by all of its choices). Only the labels chosen count, not how many
/// options there were, which can differ from run to run on a loaded machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Part {
    k: u64,
    n: u64,
}

impl Part {
    const WHOLE: Part = Part { k: 0, n: 1 };

    /// `K/N`.
    fn parse(text: &str) -> Option<Part> {
        let (k, n) = text.split_once('/')?;
        let (k, n) = (k.parse().ok()?, n.parse().ok()?);
        (k < n).then_some(Part { k, n })
    }

    /// Whether this part owns the schedules under `decisions`. With `whole`, the
    /// decisions are a whole schedule (decided however short it is); else a
    /// prefix, decided only once it is [`SPLIT_DEPTH`] long (before that, every
    /// part explores under it).
    fn owns(&self, decisions: &[schedule::Decision], whole: bool) -> bool {
        if self.n == 1 || (!whole && decisions.len() < SPLIT_DEPTH) {
            return true;
        }
        let chosen: Vec<&str> = decisions
            .iter()
            .take(SPLIT_DEPTH)
            .map(|d| d.options[d.chosen].as_str())
            .collect();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&chosen, &mut hasher);
        std::hash::Hasher::finish(&hasher) % self.n == self.k
    }

    fn suffix(&self) -> String {
        if self.n == 1 {
            String::new()
        } else {
            format!(" {}/{}", self.k, self.n)
        }
    }
}

/// Estimates how many schedules `world` has, and how long one takes, from `count`
/// schedules whose choices are drawn uniformly (Knuth's estimator: the mean of the
/// product of the numbers of options along each); prints both, with the spread.
fn estimate(server: &RedisServer, world: &World, count: usize) {
    let mut env = match Env::new(server, world.clients) {
        Ok(env) => env,
        Err(err) => {
            eprintln!("explore: {err}");
            return;
        }
    };
    let started = Instant::now();
    let mut products = Vec::with_capacity(count);
    for i in 0..count {
        let seed = 0xD1B5_4A32_D192_ED03_u64.wrapping_mul(i as u64 + 1) | 1;
        let run = schedule::run_uniform(world, &mut env, seed);
        let product = run
            .decisions
            .iter()
            .fold(1.0_f64, |p, d| p * d.options.len() as f64);
        products.push(product);
    }
    let secs = started.elapsed().as_secs_f64() / count.max(1) as f64;
    let mean = products.iter().sum::<f64>() / count.max(1) as f64;
    let spread = (products.iter().map(|p| (p - mean).powi(2)).sum::<f64>()
        / count.max(2).saturating_sub(1) as f64)
        .sqrt()
        / (count.max(1) as f64).sqrt();
    println!(
        "explore estimate world={} schedules~{mean:.0} (standard error {spread:.0}, from {count}) secs_per_schedule={secs:.3} hours_for_one_process~{:.1} bound=\"{}\"",
        world.name,
        mean * secs / 3600.0,
        world.bound()
    );
}

/// `count` schedules of `world` with choices drawn at random (a fixed seed, so the
/// run repeats), stopping `after_hit` schedules after the first violation (a seeded
/// fault's search stops at it: 0); the shortest violation first.
fn sample(
    server: &RedisServer,
    world: &World,
    count: usize,
    after_hit: usize,
    replays: usize,
) -> Report {
    let started = Instant::now();
    let mut report = Report::new(world);
    let mut env = match Env::new(server, world.clients) {
        Ok(env) => env,
        Err(err) => {
            report.violations.push((String::new(), err));
            return report;
        }
    };
    let mut first = None;
    let mut drawn = Vec::new();
    for i in 0..count {
        let seed = 0x9E37_79B9_7F4A_7C15_u64.wrapping_mul(i as u64 + 1) | 1;
        let run = schedule::run_with(world, &mut env, &[], false, Some(seed));
        report.schedules += 1;
        report.deepest = report.deepest.max(run.decisions.len());
        let labels = run.labels();
        if let Some(violation) = &run.violation {
            let replay = format!("{}/{}", world.name, labels.join("."));
            report.violations.push((replay, violation.clone()));
            first.get_or_insert(i);
        }
        drawn.push((labels, run.violation.is_some()));
        if first.is_some_and(|at| i >= at + after_hit) {
            break;
        }
    }
    report
        .violations
        .sort_by_key(|(replay, _)| replay.split('.').count());
    if let Some((replay, _)) = report.violations.first() {
        report.reproduced = Some(reproduces(server, world, replay));
    }
    report.replays = replays;
    report.replay_diverged = replay_check(server, world, &drawn, replays);
    report.secs = started.elapsed().as_secs_f64();
    report
}

/// Replays `k` of the `drawn` schedules (evenly spaced; each its labels, and whether
/// it ended in a violation) as a developer would, from its replay string on fresh
/// proxies, and returns how many did not take exactly the same steps to the same
/// end. Each divergence is printed with both label lists.
fn replay_check(
    server: &RedisServer,
    world: &World,
    drawn: &[(Vec<String>, bool)],
    k: usize,
) -> usize {
    let k = k.min(drawn.len());
    let mut diverged = 0;
    for j in 0..k {
        let (labels, violated) = &drawn[j * drawn.len() / k];
        let again = match Env::new(server, world.clients) {
            Ok(mut env) => schedule::run(world, &mut env, labels, false),
            Err(err) => {
                eprintln!("explore: {err}");
                diverged += 1;
                continue;
            }
        };
        if again.labels() != *labels || again.violation.is_some() != *violated {
            diverged += 1;
            println!(
                "explore replay DIVERGED world={} violation_then={violated} violation_now={:?}\n  sampled: {}\n  replay:  {}\n  last: {:?}",
                world.name,
                again.violation,
                labels.join("."),
                again.labels().join("."),
                again.log.last()
            );
        }
    }
    diverged
}

/// The next schedule depth first that `part` may own: the deepest choice with an
/// option left, passing over the options whose schedules belong to other parts.
fn next_prefix(run: &Run, part: Part) -> Option<Vec<String>> {
    let mut decisions = run.decisions.clone();
    loop {
        let last = decisions.last_mut()?;
        if last.chosen + 1 >= last.options.len() {
            decisions.pop();
            continue;
        }
        last.chosen += 1;
        if part.owns(&decisions, false) {
            return Some(
                decisions
                    .iter()
                    .map(|d| d.options[d.chosen].clone())
                    .collect(),
            );
        }
    }
}

fn replay_one(server: &RedisServer, replay: &str) -> ExitCode {
    let Some((world_name, steps)) = replay.split_once('/') else {
        eprintln!("explore: a replay string is WORLD/STEP.STEP..., not `{replay}`");
        return ExitCode::FAILURE;
    };
    let Some(world) = world::worlds(Bound::Beyond)
        .into_iter()
        .find(|w| w.name == world_name)
    else {
        eprintln!("explore: no world `{world_name}`");
        return ExitCode::FAILURE;
    };
    let prefix: Vec<String> = steps
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let mut env = match Env::new(server, world.clients) {
        Ok(env) => env,
        Err(err) => {
            eprintln!("explore: {err}");
            return ExitCode::FAILURE;
        }
    };
    println!("replaying {replay} in world {}: {}", world.name, world.what);
    let run = schedule::run(&world, &mut env, &prefix, true);
    match run.violation {
        Some(violation) => {
            println!("VIOLATION: {violation}");
            ExitCode::FAILURE
        }
        None if run.diverged => {
            println!("the schedule diverged from the replay string");
            ExitCode::FAILURE
        }
        None => {
            println!("no violation ({} steps)", run.decisions.len());
            ExitCode::SUCCESS
        }
    }
}
