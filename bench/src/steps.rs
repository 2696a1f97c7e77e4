//! The per-step cost table (issue 36): what each Redis command that distlock's
//! scripts call on a lock's common path costs the server.
//!
//! Each step (a first acquisition, a re-entry, a non-final and a final release, a
//! renewal; the first acquisition and final release of each kind) is run by
//! `redis-benchmark` (`FCALL`, `-P 16 -c 8`) with distlock's function library as it
//! is and with variants of it that each leave one step out, and the server's CPU per
//! request (`INFO cpu`) of each is taken around its run. A step's cost is the
//! difference between the library with every step and the variant without it, in
//! the same block; the blocks alternate every variant of every step with the
//! references (the bare hash scripts, rslock's commands, the library as shipped).
//!
//! How a step is left out, without editing the scripts by hand: in a variant, every
//! `redis.call` and `redis.pcall` of the library goes through one small wrapper
//! (`wrapper`); the baseline runs the same wrapper with nothing left out, so that
//! the wrapper's own cost (a Lua call per command) is in both. A variant either
//! answers every call of one command (on keys that name, say, `:freed:`) after the
//! first with the first call's reply, without running it, or leaves some fields out
//! of every `HSET`. A left-out read answers what it read the first time: every key
//! of a run is in the same state (fresh, or a copy of one held lock), so the script
//! takes the same path as with the real read. What a left-out write would have
//! changed is not there for the commands after it (a `PEXPIRE` after a left-out
//! `HSET` finds no key), so each figure is the cost of that step in place, and the
//! steps of one script need not add up exactly to the whole.
//!
//! Before and after a change to the scripts: `--before FILE` (a function library as
//! `--library FILE` wrote it, at the commit before the change) adds a row per step,
//! the whole step run by that library in the same blocks, and what the change saved.
//! `--only WORDS` runs the steps whose name holds one of the comma-separated words.

use std::fmt::Write as _;

use distlock::layout::args::{Acquire, Args, Renew};
use distlock_testkit::RedisServer;

use crate::error::BoxError;
use crate::kind::Kind;
use crate::reference::{redis_benchmark, redis_benchmark_binary, Load};
use crate::server::{self, KeyShape, Op, Protocol, Workload, DISTLOCK_OWNER, DISTLOCK_WHO, RAND};
use crate::stats::median;

/// Settings of the per-step table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StepSettings {
    /// Blocks: each runs every variant of every step, and the references, once.
    pub(crate) blocks: usize,
    /// Requests of each `redis-benchmark` run.
    pub(crate) requests: u64,
    /// Lease of every acquisition and renewal, ms.
    pub(crate) lease_ms: u64,
}

impl StepSettings {
    /// The table for BENCHMARKS.md: about 10 minutes on 2 cores.
    pub(crate) fn full() -> Self {
        StepSettings {
            blocks: 3,
            requests: 20_000,
            lease_ms: 30_000,
        }
    }

    /// A check of the harness: its figures are not benchmarks.
    pub(crate) fn quick() -> Self {
        StepSettings {
            blocks: 1,
            requests: 2_000,
            lease_ms: 30_000,
        }
    }
}

/// Which steps a table runs, and the library before a change, when one is to be
/// compared.
#[derive(Debug, Clone, Default)]
pub(crate) struct Choice {
    /// Words: a step runs when its name (as the table shows it) holds one; every
    /// step when empty.
    pub(crate) only: Vec<String>,
    pub(crate) before: Option<Before>,
}

impl Choice {
    /// The steps chosen, in the table's order.
    fn steps(&self) -> Vec<(Kind, Path)> {
        steps()
            .into_iter()
            .filter(|&(kind, path)| {
                let name = format!("{} {}", kind.word(), path.label());
                self.only.is_empty() || self.only.iter().any(|word| name.contains(word.as_str()))
            })
            .collect()
    }
}

/// A step of a lock's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// A new acquisition of a free lock (no key).
    First,
    /// A re-entry of a lock held once: its second hold.
    Reenter,
    /// A release of one of two holds.
    NonFinal,
    /// The release of the last hold: the lock is freed.
    Final,
    /// The watchdog's renewal of a held lock.
    Renew,
}

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::First => "first acquisition",
            Path::Reenter => "re-entry",
            Path::NonFinal => "non-final release",
            Path::Final => "final release",
            Path::Renew => "renewal",
        }
    }

    /// The function of the library that runs it.
    fn script(self) -> &'static str {
        match self {
            Path::First => "acquire",
            Path::Reenter => "reenter",
            Path::NonFinal | Path::Final => "release",
            Path::Renew => "renew",
        }
    }
}

/// What a variant leaves out: text of the function library replaced, each pair
/// (what, by what) at every place it occurs (at least one: else the scripts
/// changed, and the table says so instead of measuring the library as it is).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Nothing: the library as shipped.
    Nothing,
    Text(&'static [(&'static str, &'static str)]),
    /// Everything: the library of [`Before`], with the arguments it takes.
    Before,
}

/// The function library before a change, for a row of its own per step.
#[derive(Debug, Clone)]
pub(crate) struct Before {
    /// Its text, as `FUNCTION LOAD` takes it.
    pub(crate) text: String,
    /// What the table calls it (the file it was read from).
    pub(crate) label: String,
    /// Whether its client sent what it says of a holder with a first acquisition
    /// (a library older than the holder record's move to the first renewal).
    pub(crate) who_at_acquisition: bool,
}

/// One variant of a step: what the table calls it, and what it leaves out.
type Variant = (&'static str, Cut);

/// Every call of a Redis command whose text starts so (in lock.lua and the scripts)
/// through [`STEP_CUT`]: run once, then answered with its first reply.
macro_rules! cut_call {
    ($call:literal, $command:literal) => {
        Cut::Text(&[(
            concat!("redis.", $call, "('", $command, "'"),
            concat!("step_cut(redis.", $call, ", '", $command, "'"),
        )])
    };
}

/// The variants of `path` of `kind`, after the baseline.
fn variants(kind: Kind, path: Path) -> Vec<Variant> {
    // Not a part left out but one added: the record the client asks for only
    // when it needs one (a successor, a cluster, Redlock, a lease near its end).
    let freed_set = Cut::Text(&[("local keep = ARGV[a + 5] == '1'", "local keep = true")]);
    let op = Cut::Text(&[("  put(fields, OP .. owner, record_text)\n", "")]);
    let kind_fields = Cut::Text(&[(
        "return { FIELD.kind, kind, FIELD.layout, LAYOUT }",
        "return {}",
    )]);
    let until = Cut::Text(&[("  put(fields, UNTIL .. r.owner, until_ms)\n", "")]);
    let op_write = Cut::Text(&[(
        "    write(lock, fields)\n    redis.call('PEXPIRE', lock, lease, 'GT')",
        "    step_cut(redis.call, 'HSET', lock, unpack(fields))\n    redis.call('PEXPIRE', lock, lease, 'GT')",
    )]);
    let mut cuts: Vec<Variant> = match (kind, path) {
        (Kind::Plain, Path::First) => vec![
            (
                "`EXISTS` (a lock, or a final-release record?)",
                cut_call!("call", "EXISTS"),
            ),
            ("`HSET` (every field)", cut_call!("call", "HSET")),
            ("field `#op:<owner>`", op),
            ("fields `#kind`, `#layout`", kind_fields),
            ("`PEXPIRE` (the lease)", cut_call!("call", "PEXPIRE")),
        ],
        (_, Path::First) => vec![
            (
                "`EXISTS` (a lock, or a final-release record?)",
                cut_call!("call", "EXISTS"),
            ),
            ("`TIME` (leases)", cut_call!("call", "TIME")),
            ("`HSET` (every field)", cut_call!("call", "HSET")),
            ("field `#op:<owner>`", op),
            ("field `#until:<owner>`", until),
            ("fields `#kind`, `#layout`", kind_fields),
            ("`PEXPIRE` (the key's lease)", cut_call!("call", "PEXPIRE")),
        ],
        (_, Path::Reenter | Path::NonFinal) => vec![
            ("`HMGET` (the owner's fields)", cut_call!("pcall", "HMGET")),
            ("`HINCRBY` (the count)", cut_call!("call", "HINCRBY")),
            ("`HSET #op:<owner>` (replay record)", op_write),
            ("`PEXPIRE … GT` (the lease)", cut_call!("call", "PEXPIRE")),
        ],
        (Kind::Plain, Path::Final) => vec![
            ("`HMGET` (the owner's fields)", cut_call!("pcall", "HMGET")),
            ("`PUBLISH` (wake waiters)", PUBLISH),
            ("`DEL` (free the lock)", cut_call!("call", "DEL")),
            (FREED_ADDED, freed_set),
        ],
        (_, Path::Final) => vec![
            ("`HMGET` (the owner's fields)", cut_call!("pcall", "HMGET")),
            ("`TIME` (leases)", cut_call!("call", "TIME")),
            (
                "`HGETALL` (the whole lock, again)",
                cut_call!("pcall", "HGETALL"),
            ),
            ("`PUBLISH` (wake waiters)", PUBLISH),
            ("`DEL` (free the lock)", cut_call!("call", "DEL")),
            (FREED_ADDED, freed_set),
        ],
        (_, Path::Renew) => vec![
            ("`HMGET` (the owner's fields)", cut_call!("pcall", "HMGET")),
            ("`PEXPIRE … GT` (the lease)", cut_call!("call", "PEXPIRE")),
        ],
    };
    cuts.push((
        "every command (the Lua and `FCALL` left)",
        Cut::Text(&[
            ("redis.call(", "step_cut(redis.call, "),
            ("redis.pcall(", "step_cut(redis.pcall, "),
        ]),
    ));
    cuts
}

/// The row of a final release's record, which the client no longer asks for on the
/// common path: its variant adds it (a negative saving is what it would cost).
const FREED_ADDED: &str =
    "*added:* `SET :freed:<owner> PX` (the final-release record, when the client asks for it)";

/// release.lua's `PUBLISH` (the command is its `ARGV[1]`).
const PUBLISH: Cut = Cut::Text(&[("redis.call(publish,", "step_cut(redis.call, publish,")]);

/// The steps of the table, in its order.
fn steps() -> Vec<(Kind, Path)> {
    let mut steps: Vec<(Kind, Path)> = [
        Path::First,
        Path::Reenter,
        Path::NonFinal,
        Path::Final,
        Path::Renew,
    ]
    .into_iter()
    .map(|path| (Kind::Plain, path))
    .collect();
    for kind in [Kind::Read, Kind::Write, Kind::Permit(4), Kind::Fair] {
        steps.push((kind, Path::First));
        steps.push((kind, Path::Final));
    }
    steps
}

/// The Lua that every variant's library starts with: `step_cut`, which runs a
/// command the first time and answers every later call of that command with the
/// first reply, without running it (every key of a run is in the same state, so
/// the reply is what the command would have answered).
const STEP_CUT: &str = "local step_memo = {}
local function step_cut(call, command, ...)
  local memo = step_memo[command]
  if memo == nil then
    memo = call(command, ...)
    step_memo[command] = memo
  end
  return memo
end
";

/// Whether the client sends what it says of a holder with a first acquisition
/// (`ARGV[10]` of acquire.lua; else ""): not for a lease the watchdog renews, whose
/// first renewal names the holder (`lua/lock.lua`, `#who:`).
const WHO_AT_ACQUISITION: bool = false;

/// The library that `cut` is made of, untouched (its setup runs it): its text, its
/// name, and whether its client sends what it says of a holder with a first
/// acquisition.
fn shipped(cut: Cut, before: Option<&Before>) -> Result<(String, String, bool), BoxError> {
    if cut != Cut::Before {
        let library = distlock::layout::function_library();
        return Ok((library.text, library.name, WHO_AT_ACQUISITION));
    }
    let before = before.ok_or("no library to run before the change")?;
    let name = before
        .text
        .lines()
        .next()
        .and_then(|first| first.strip_prefix("#!lua name="))
        .ok_or_else(|| format!("{}: not a function library", before.label))?;
    Ok((
        before.text.clone(),
        name.to_owned(),
        before.who_at_acquisition,
    ))
}

/// distlock's function library with `cut` left out (for [`Cut::Before`], the
/// library of `before`), named `name`.
fn variant_library(name: &str, cut: Cut, before: Option<&Before>) -> Result<String, BoxError> {
    let (text, library_name, _) = shipped(cut, before)?;
    if cut == Cut::Before {
        return Ok(text.replace(&library_name, name));
    }
    let (first, mut body) = text
        .split_once('\n')
        .map(|(first, body)| (first.to_owned(), body.to_owned()))
        .ok_or("the function library has one line")?;
    if let Cut::Text(replacements) = cut {
        for (what, by) in replacements {
            if !body.contains(what) {
                return Err(format!("the scripts changed: no {what:?} in them").into());
            }
            body = body.replace(what, by);
        }
    }
    let text = format!("{first}\n{STEP_CUT}{body}");
    Ok(text.replace(&library_name, name))
}

/// The arguments after the function's name and key count of `path` of `kind` on
/// the lock `lock`: what the client sends (no fencing, no successor, what the
/// client says of the holder, with a first acquisition only when `who_first`),
/// operation `seq` with the floor `seq - 1`.
fn line(
    kind: Kind,
    path: Path,
    lock: &str,
    seq: u64,
    lease_ms: u64,
    who_first: bool,
) -> Vec<String> {
    let op = Op {
        lock,
        lease_ms,
        seq,
        floor: seq - 1,
    };
    let call = match path {
        Path::First | Path::Reenter => Acquire {
            reentry: path == Path::Reenter,
            who: if who_first && path == Path::First {
                DISTLOCK_WHO
            } else {
                ""
            },
            ..server::acquire_args(kind, &op)
        }
        .to_call(),
        Path::NonFinal | Path::Final => {
            let mut call = server::RELEASE_RUN.to_call();
            server::release_args(&op).push_to(&mut call);
            call
        }
        Path::Renew => Renew {
            lock: lock.as_bytes(),
            owner: DISTLOCK_OWNER,
            lease_ms,
            write_back: None,
            name: None,
        }
        .to_call(),
    };
    server::call_line(&call)
}

/// The operation number of `path`'s request, and the requests (path, number) that
/// put the lock it runs on in place, on a lock with no key, in order.
fn setup(path: Path) -> (u64, Vec<(Path, u64)>) {
    match path {
        Path::First => (1, vec![]),
        Path::Reenter | Path::Final | Path::Renew => (2, vec![(Path::First, 1)]),
        Path::NonFinal => (3, vec![(Path::First, 1), (Path::Reenter, 2)]),
    }
}

/// Runs `command` (with `function` first) through redis-rs, and checks that its
/// answer (of the one request it carries) starts with 1.
fn run_once(server: &RedisServer, function: &str, args: &[String]) -> Result<(), BoxError> {
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    let reply: redis::Value = redis::cmd("FCALL")
        .arg(function)
        .arg(args)
        .query(&mut conn)?;
    let first = match &reply {
        redis::Value::Array(answers) => match answers.first() {
            Some(redis::Value::Array(answer)) => answer.first().cloned(),
            other => other.cloned(),
        },
        _ => None,
    };
    match first {
        Some(redis::Value::Int(1)) => Ok(()),
        _ => Err(format!("setup: {function} answered {reply:?}").into()),
    }
}

/// Fills the keys `pattern` (with [`RAND`] in place of the number) 0 to `keys` - 1
/// with copies of `source` (its value and its expiry), 10 000 a script call.
fn copy_into(server: &RedisServer, source: &str, pattern: &str, keys: u64) -> Result<(), BoxError> {
    const COPY: &str = "for i = tonumber(ARGV[2]), tonumber(ARGV[3]) do \
        redis.call('COPY', KEYS[1], string.format(ARGV[1], i)) end return 0";
    let format = pattern.replace(RAND, "%012d");
    let mut from = 0;
    while from < keys {
        let to = (from + 10_000).min(keys);
        let last = (to - 1).to_string();
        server.cmd(&["EVAL", COPY, "1", source, &format, &from.to_string(), &last])?;
        from = to;
    }
    Ok(())
}

/// The lease of the lock that the copies are made of, ms: none expires in a run.
const SOURCE_LEASE_MS: u64 = 600_000;

/// One `redis-benchmark` run of `path` of `kind` with the library `cut` (named
/// `name`) on fresh keys of `tag`: the server's CPU per request, µs.
fn run_variant(
    server: &RedisServer,
    settings: StepSettings,
    (kind, path): (Kind, Path),
    (name, cut, before): (&str, Cut, Option<&Before>),
    tag: &str,
) -> Result<f64, BoxError> {
    let shape = KeyShape::Single;
    let pattern = shape.key(&format!("s{tag}"), RAND);
    let (seq, steps_before) = setup(path);
    let (text, library_name, who_first) = shipped(cut, before)?;
    let mut keyspace = 1_000_000_000;
    if !steps_before.is_empty() {
        server.cmd(&["FUNCTION", "FLUSH", "SYNC"])?;
        server.cmd(&["FUNCTION", "LOAD", &text])?;
        let source = shape.key(&format!("s{tag}"), "source");
        for (step, n) in steps_before {
            let args = line(kind, step, &source, n, SOURCE_LEASE_MS, who_first);
            run_once(server, &format!("{library_name}_{}", step.script()), &args)?;
        }
        keyspace = settings.requests * 4;
        copy_into(server, &source, &pattern, keyspace)?;
    }
    // The variant alone in the server's Lua, as a client's library is.
    server.cmd(&["FUNCTION", "FLUSH", "SYNC"])?;
    server.cmd(&["FUNCTION", "LOAD", &variant_library(name, cut, before)?])?;
    let mut command = vec!["FCALL".to_owned(), format!("{name}_{}", path.script())];
    command.extend(line(
        kind,
        path,
        &pattern,
        seq,
        settings.lease_ms,
        who_first,
    ));
    let binary = redis_benchmark_binary()?;
    let start = main_thread_cpu(server)?;
    redis_benchmark(
        &binary,
        server.port(),
        Load::Pipelined,
        settings.requests,
        keyspace,
        &command,
    )?;
    let cpu_us = (main_thread_cpu(server)? - start) * 1e6;
    server::flush(server)?;
    Ok(cpu_us / settings.requests.max(1) as f64)
}

/// The CPU time the server's main thread has spent, in seconds (`INFO cpu`,
/// `used_cpu_user_main_thread` + `used_cpu_sys_main_thread`): the thread that runs
/// the scripts, without the threads that free memory in the background.
fn main_thread_cpu(server: &RedisServer) -> Result<f64, BoxError> {
    let info = server.cmd(&["INFO", "cpu"])?;
    let field = |name: &str| -> Result<f64, BoxError> {
        let prefix = format!("{name}:");
        info.lines()
            .find_map(|line| line.strip_prefix(&prefix))
            .and_then(|value| value.trim().parse().ok())
            .ok_or_else(|| format!("no {name} in INFO cpu").into())
    };
    Ok(field("used_cpu_user_main_thread")? + field("used_cpu_sys_main_thread")?)
}

/// The references of one block: server CPU per request, µs, of each protocol's
/// acquire and release.
#[derive(Debug, Clone, Default)]
struct References {
    /// (label, acquire µs, release µs) per protocol.
    rows: Vec<(&'static str, f64, f64)>,
}

fn run_references(
    server: &RedisServer,
    settings: StepSettings,
    block: usize,
) -> Result<References, BoxError> {
    let reference = crate::reference::ReferenceSettings {
        c1_requests: settings.requests,
        ceiling_requests: settings.requests,
        lease_ms: settings.lease_ms,
    };
    // distlock's library alone in the server's Lua, as for the variants.
    server.cmd(&["FUNCTION", "FLUSH", "SYNC"])?;
    let mut rows = Vec::new();
    for protocol in [Protocol::Distlock, Protocol::BareHash, Protocol::Minimal] {
        let tag = format!("steps{block}{}", protocol as u8);
        let rates = crate::reference::measure(
            server,
            &KeyShape::Single,
            Workload::Plain(protocol),
            Load::Pipelined,
            reference,
            &tag,
        )?;
        let label = match protocol {
            Protocol::Distlock => "distlock's library as shipped",
            other => other.label(),
        };
        rows.push((label, rates.server_acquire_us, rates.server_release_us));
    }
    rows.push((
        "`FCALL` of a function that answers at once (distlock's keys and arguments)",
        run_empty(server, settings, Path::First, block)?,
        run_empty(server, settings, Path::Final, block)?,
    ));
    Ok(References { rows })
}

/// A function library whose functions answer at once, as acquire.lua answers a
/// first acquisition and release.lua a final release: what `FCALL` itself costs,
/// with distlock's keys and arguments.
const EMPTY_LIBRARY: &str = "#!lua name=distlock_steps_empty
redis.register_function{function_name = 'distlock_steps_empty_acquire',
  callback = function(keys, args) return {{1, 1, 0}} end}
redis.register_function{function_name = 'distlock_steps_empty_release',
  callback = function(keys, args) return {{1, 0}} end, flags = {'allow-oom'}}
";

/// The server's CPU per request, µs, of [`EMPTY_LIBRARY`]'s function for `path`
/// (a first acquisition or a final release) with the arguments the client sends.
fn run_empty(
    server: &RedisServer,
    settings: StepSettings,
    path: Path,
    block: usize,
) -> Result<f64, BoxError> {
    server.cmd(&["FUNCTION", "FLUSH", "SYNC"])?;
    server.cmd(&["FUNCTION", "LOAD", EMPTY_LIBRARY])?;
    let pattern = KeyShape::Single.key(&format!("e{block}"), RAND);
    let mut command = vec![
        "FCALL".to_owned(),
        format!("distlock_steps_empty_{}", path.script()),
    ];
    command.extend(line(
        Kind::Plain,
        path,
        &pattern,
        1,
        settings.lease_ms,
        WHO_AT_ACQUISITION,
    ));
    let start = main_thread_cpu(server)?;
    redis_benchmark(
        &redis_benchmark_binary()?,
        server.port(),
        Load::Pipelined,
        settings.requests,
        1_000_000_000,
        &command,
    )?;
    let cpu_us = (main_thread_cpu(server)? - start) * 1e6;
    Ok(cpu_us / settings.requests.max(1) as f64)
}

/// Every figure of the table: per step, per variant (0: every step), the server's
/// CPU per request of each block, µs; and the references of each block.
#[derive(Debug, Default)]
pub(crate) struct StepTable {
    /// Per step, per variant (0: every step; then each of [`variants`]; last: the
    /// library before the change, when there is one).
    runs: Vec<Vec<Vec<f64>>>,
    /// The steps run, in order.
    steps: Vec<(Kind, Path)>,
    /// What the library before the change is called, when one ran.
    before: Option<String>,
    references: Vec<References>,
    settings: Option<StepSettings>,
    load_before: String,
    load_after: String,
}

/// Runs every block: in each, every variant of every step, the baseline first and
/// last (their mean is the block's baseline), and the references (first in even
/// blocks, last in odd ones).
pub(crate) fn run(
    server: &RedisServer,
    settings: StepSettings,
    choice: &Choice,
    note: &dyn Fn(&str),
) -> Result<StepTable, BoxError> {
    let steps = choice.steps();
    let before = choice.before.as_ref();
    let mut table = StepTable {
        runs: steps
            .iter()
            .map(|&(kind, path)| vec![Vec::new(); variants(kind, path).len() + 2])
            .collect(),
        steps: steps.clone(),
        before: before.map(|before| before.label.clone()),
        settings: Some(settings),
        load_before: crate::report::load_average(),
        ..StepTable::default()
    };
    for block in 0..settings.blocks {
        note(&format!(
            "per-step costs: block {} of {}",
            block + 1,
            settings.blocks
        ));
        if block % 2 == 0 {
            table
                .references
                .push(run_references(server, settings, block)?);
        }
        for (s, &step) in steps.iter().enumerate() {
            let mut all: Vec<Variant> = vec![("", Cut::Nothing)];
            all.extend(variants(step.0, step.1));
            if before.is_some() {
                all.push(("", Cut::Before));
            }
            all.push(("", Cut::Nothing));
            let mut base = Vec::new();
            for (v, &(_, cut)) in all.iter().enumerate() {
                let name = format!("distlock_steps_{v}");
                let tag = format!("{block}:{s}:{v}");
                let us = run_variant(server, settings, step, (&name, cut, before), &tag)?;
                match cut {
                    Cut::Nothing => base.push(us),
                    Cut::Before => table.runs[s][variants(step.0, step.1).len() + 1].push(us),
                    Cut::Text(_) => table.runs[s][v].push(us),
                }
            }
            table.runs[s][0].push(base.iter().sum::<f64>() / base.len().max(1) as f64);
        }
        if block % 2 == 1 {
            table
                .references
                .push(run_references(server, settings, block)?);
        }
    }
    table.load_after = crate::report::load_average();
    Ok(table)
}

/// The median and range of `values`, as "m [lo–hi]".
fn spread(values: &[f64]) -> String {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if values.len() < 2 {
        return format!("{:.2}", median(values));
    }
    format!("{:.2} [{lo:.2}–{hi:.2}]", median(values))
}

/// The table's Markdown: a section of its own in BENCHMARKS.md.
pub(crate) fn markdown(table: &StepTable) -> String {
    let mut out = String::new();
    let settings = table.settings.unwrap_or_else(StepSettings::full);
    let _ = writeln!(
        out,
        "{STEPS_START}\n\n### Per-step server cost\n\n\
         Generated by `cargo xtask bench --steps` (bench/src/steps.rs): the server \
         main thread's CPU (`INFO cpu`) per request, µs (the references: the \
         server's, as in the rows below), `redis-benchmark -P 16 -c 8` with \
         `FCALL`, {} requests per run, {} blocks, medians [ranges] over the blocks; \
         load average {} before, {} after. \"Saved\" is the whole step less the \
         variant without that part, in the same block (see the module's comment for \
         how a part is left out).\n",
        settings.requests, settings.blocks, table.load_before, table.load_after
    );
    out.push_str("| step | left out | µs per request | saved µs | share |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: |\n");
    for (s, &(kind, path)) in table.steps.iter().enumerate() {
        let runs = &table.runs[s];
        let base = &runs[0];
        let step = format!("{} {}", kind.word(), path.label());
        let _ = writeln!(
            out,
            "| **{step}** | nothing (the whole step) | {} | | |",
            spread(base)
        );
        for (v, (label, _)) in variants(kind, path).iter().enumerate() {
            let cut = &runs[v + 1];
            let saved: Vec<f64> = base.iter().zip(cut).map(|(b, c)| b - c).collect();
            let share = median(&saved) / median(base).max(f64::MIN_POSITIVE) * 100.0;
            let _ = writeln!(
                out,
                "| | {label} | {} | {} | {share:.0} % |",
                spread(cut),
                spread(&saved)
            );
        }
        if let (Some(label), Some(old)) = (&table.before, runs.last()) {
            let saved: Vec<f64> = old.iter().zip(base).map(|(o, b)| o - b).collect();
            let share = median(&saved) / median(old).max(f64::MIN_POSITIVE) * 100.0;
            let _ = writeln!(
                out,
                "| | *before the change* ({label}): the whole step; saved = before − now | {} | {} | {share:.0} % |",
                spread(old),
                spread(&saved)
            );
        }
    }
    out.push_str("\nReferences in the same blocks (µs per request):\n\n");
    out.push_str("| protocol | acquire | release | pair |\n| --- | ---: | ---: | ---: |\n");
    let first = table
        .references
        .first()
        .map(|r| r.rows.clone())
        .unwrap_or_default();
    for (i, (label, _, _)) in first.iter().enumerate() {
        let column = |f: &dyn Fn(&(&str, f64, f64)) -> f64| -> Vec<f64> {
            table
                .references
                .iter()
                .filter_map(|r| r.rows.get(i))
                .map(f)
                .collect()
        };
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} |",
            spread(&column(&|r| r.1)),
            spread(&column(&|r| r.2)),
            spread(&column(&|r| r.1 + r.2))
        );
    }
    out.push_str(&format!("\n{STEPS_END}\n"));
    out
}

/// The markers in BENCHMARKS.md between which the table goes.
pub(crate) const STEPS_START: &str =
    "<!-- steps:start (generated by `cargo xtask bench --steps`; edits here are overwritten) -->";
pub(crate) const STEPS_END: &str = "<!-- steps:end -->";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant of every step is made from the scripts as they are (each text
    /// it replaces is there), and the server loads it.
    #[test]
    fn every_variant_matches_the_scripts_and_loads() -> Result<(), BoxError> {
        let server = RedisServer::start()?;
        let mut loaded = 0;
        for (kind, path) in steps() {
            for (v, (label, cut)) in variants(kind, path).into_iter().enumerate() {
                server.cmd(&["FUNCTION", "FLUSH", "SYNC"])?;
                let text = variant_library(&format!("distlock_steps_{v}"), cut, None)?;
                let name = server.cmd(&["FUNCTION", "LOAD", &text]);
                assert!(name.is_ok(), "{kind:?} {path:?} without {label}: {name:?}");
                loaded += 1;
            }
        }
        assert!(loaded > 50, "{loaded} variants");
        Ok(())
    }

    /// A step's run answers as the client expects: a first acquisition of a plain
    /// lock through a variant takes the lock, and the copies of a held lock are
    /// held by the reference's owner.
    #[test]
    fn a_variant_takes_and_copies_hold() -> Result<(), BoxError> {
        let server = RedisServer::start()?;
        let text = variant_library(
            "distlock_steps_t",
            variants(Kind::Plain, Path::First)[0].1,
            None,
        )?;
        server.cmd(&["FUNCTION", "LOAD", &text])?;
        let lock = KeyShape::Single.key("t", "source");
        run_once(
            &server,
            "distlock_steps_t_acquire",
            &line(Kind::Plain, Path::First, &lock, 1, 600_000, true),
        )?;
        let pattern = KeyShape::Single.key("t", RAND);
        copy_into(&server, &lock, &pattern, 3)?;
        let copy = pattern.replace(RAND, "000000000002");
        assert_eq!(server.cmd(&["HGET", &copy, DISTLOCK_OWNER])?, "1");
        let pttl: i64 = server.cmd(&["PTTL", &copy])?.parse()?;
        assert!(pttl > 500_000, "the copy keeps the lease: {pttl}");
        Ok(())
    }
}
