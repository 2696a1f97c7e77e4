//! `distlock`: the operators' command for [distlock](https://docs.rs/distlock) locks
//! on Redis.
//!
//! - `distlock inspect NAME`: a lock's kind, holders, waiters and fencing tokens.
//! - `distlock list [PATTERN]`: the locks of a namespace (found with `SCAN`).
//! - `distlock watch NAME`: each release of a lock as it happens, until Ctrl-C.
//! - `distlock force-unlock NAME --reason TEXT`: break a lock, after confirmation.
//! - `distlock ping`: the server's version, a round trip, its eviction policy, and
//!   whether the user can run distlock's scripts.
//! - `distlock web`: a live page of the namespace's locks, for operators.
//!
//! Global options name the deployment (`--url`, `--cluster`, `--sentinel` with
//! `--master`), the namespace (`--namespace`), the TLS roots (`--tls-ca`) and the
//! output (`--json`). Exit codes: 0 done, 1 not held / not found / nothing deleted,
//! 2 bad usage, 3 cannot reach the server, 4 any other error. See the crate's
//! README for examples.

mod args;
mod commands;
mod connect;
mod error;
mod format;
mod names;
mod web;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::commands::force_unlock::ForceArgs;
use crate::commands::list::ListArgs;
use crate::commands::web::WebArgs;
use crate::commands::{force_unlock, inspect, list, note, ping, watch, web as serve, Context};
use crate::connect::Target;
use crate::error::{CliError, Exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are "errors" printed to stdout, exit 0.
            let exit = if err.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            };
            let _ = err.print();
            return exit.into();
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(err) => Err(CliError::new(
            Exit::Failed,
            format!("could not start the async runtime: {err}"),
        )),
    };
    match result {
        Ok(exit) => exit.into(),
        Err(err) => {
            if !err.message.is_empty() {
                note(&format!("distlock: error: {}\n", err.message));
            }
            err.exit.into()
        }
    }
}

/// Runs the parsed command.
async fn run(cli: Cli) -> Result<Exit, CliError> {
    let redis_url = std::env::var("REDIS_URL")
        .ok()
        .filter(|url| !url.is_empty());
    let ctx = Context {
        target: Target::from_args(cli.target, redis_url)?,
        json: cli.json,
    };
    match cli.command {
        Command::Inspect { name } => inspect::run(&ctx, &bytes(name)?).await,
        Command::List {
            pattern,
            all,
            count,
        } => {
            let pattern = bytes(pattern)?;
            let args = ListArgs {
                pattern: &pattern,
                all,
                count,
            };
            list::run(&ctx, args).await
        }
        Command::Watch { name } => watch::run(&ctx, &bytes(name)?).await,
        Command::ForceUnlock { name, reason, yes } => {
            let name = bytes(name)?;
            let args = ForceArgs {
                name: &name,
                reason: &reason,
                yes,
            };
            force_unlock::run(&ctx, args).await
        }
        Command::Ping => ping::run(&ctx).await,
        Command::Web {
            bind,
            admin_token,
            refresh_ms,
            max_commands,
            timeline_minutes,
        } => {
            let args = WebArgs {
                bind,
                admin_token,
                refresh: std::time::Duration::from_millis(refresh_ms),
                max_commands,
                window: std::time::Duration::from_secs(timeline_minutes * 60),
            };
            serve::run(ctx, args).await
        }
    }
}

/// A lock name or pattern as bytes, as the application gives names to the library
/// (on Unix any bytes; elsewhere the argument must be valid Unicode).
fn bytes(arg: std::ffi::OsString) -> Result<Vec<u8>, CliError> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStringExt;
        Ok(arg.into_vec())
    }
    #[cfg(not(unix))]
    {
        arg.into_string().map(String::into_bytes).map_err(|arg| {
            CliError::usage(format!(
                "{} is not valid Unicode; give the lock name as text",
                arg.to_string_lossy()
            ))
        })
    }
}
