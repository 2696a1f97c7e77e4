//! Group commit's batches (issue 36): `distlock-bench batches [SECONDS]` runs
//! lock+unlock pairs of fresh names with 4, 16, 64 and 256 tasks, SECONDS each (5
//! by default), on a multi-thread runtime against a server of its own, and prints
//! per row the pairs per second, the mean number of requests per script call (the
//! pairs' acquisitions and releases over the server's `FCALL` calls, from `INFO
//! commandstats`: a batch's size), the mean time the server spent in one call, and
//! how many calls ran longer than 250 µs (the server's slow log, its threshold set
//! to that): the server serves nobody else while a batch runs.

use std::time::Duration;

use distlock_testkit::RedisServer;

use crate::contender::connect_distlock;
use crate::error::BoxError;
use crate::runtime::{block_on, Flavor};
use crate::scenarios::pairs;

/// The longest a batch may hold the server, µs.
const LONGEST_US: u64 = 250;

/// The task counts of the table.
const TASKS: [usize; 4] = [4, 16, 64, 256];

/// One row: what the server saw of one task count.
#[derive(Debug)]
struct Row {
    tasks: usize,
    pairs_per_second: f64,
    requests_per_call: f64,
    usec_per_call: f64,
    over: u64,
    calls: u64,
}

/// `FCALL`'s calls and the µs they took in all, from `INFO commandstats`.
fn fcall_stats(server: &RedisServer) -> Result<(u64, u64), BoxError> {
    let info = server.cmd(&["INFO", "commandstats"])?;
    let line = info
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_fcall:"))
        .unwrap_or("calls=0,usec=0");
    let field = |name: &str| -> Result<u64, BoxError> {
        let text = line
            .split(',')
            .find_map(|part| part.strip_prefix(name))
            .ok_or_else(|| format!("no {name} in {line:?}"))?;
        Ok(text.parse()?)
    };
    Ok((field("calls=")?, field("usec=")?))
}

/// Runs the table that `args` (`batches [SECONDS]`) asks for.
pub(crate) fn batches(args: &[String]) -> Result<(), BoxError> {
    let seconds = match args.get(1) {
        Some(text) => text
            .parse()
            .map_err(|err| format!("batches [SECONDS]: {text:?}: {err}"))?,
        None => 5,
    };
    let server = RedisServer::start()?;
    let threshold = LONGEST_US.to_string();
    server.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", &threshold])?;
    server.cmd(&["CONFIG", "SET", "slowlog-max-len", "100000"])?;
    let mut rows = Vec::new();
    for tasks in TASKS {
        let row = block_on(Flavor::MultiThread, async {
            let client = connect_distlock(&server.url()).await?;
            // Warm: the library loaded, the connections up.
            pairs(&client, "warm", 1, 10, Duration::from_secs(5)).await?;
            server.cmd(&["CONFIG", "RESETSTAT"])?;
            server.cmd(&["SLOWLOG", "RESET"])?;
            let start = std::time::Instant::now();
            let limit = Duration::from_secs(seconds);
            let done = pairs(&client, &format!("b{tasks}"), tasks, usize::MAX, limit).await?;
            let elapsed = start.elapsed().as_secs_f64();
            let (calls, usec) = fcall_stats(&server)?;
            let over: u64 = server.cmd(&["SLOWLOG", "LEN"])?.trim().parse()?;
            Ok(Row {
                tasks,
                pairs_per_second: done as f64 / elapsed,
                requests_per_call: 2.0 * done as f64 / calls.max(1) as f64,
                usec_per_call: usec as f64 / calls.max(1) as f64,
                over,
                calls,
            })
        })?;
        eprintln!("distlock-bench: batches: {row:?}");
        rows.push(row);
    }
    println!(
        "| tasks | pairs/s | requests per script call (mean batch) | µs per call (mean) | calls over {LONGEST_US} µs |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        println!(
            "| {} | {:.0} | {:.2} | {:.1} | {} of {} |",
            row.tasks,
            row.pairs_per_second,
            row.requests_per_call,
            row.usec_per_call,
            row.over,
            row.calls
        );
    }
    Ok(())
}
