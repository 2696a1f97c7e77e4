//! `distlock force-unlock NAME --reason TEXT`: deletes a lock whoever holds it.
//!
//! It shows the lock's state and asks for confirmation (unless `--yes`), then calls
//! the library's `force_unlock`, which deletes the lock and wakes its waiters; the
//! holder learns at its next renewal that it lost it. Who ran it, on which host and
//! why goes to stderr, whatever the answer.

use std::io::{self, BufRead};

use serde::Serialize;

use crate::commands::{note, print, print_json, Context};
use crate::error::{CliError, Exit};
use crate::format::{printable, LockView};

/// What `force-unlock` was asked for.
#[derive(Debug)]
pub(crate) struct ForceArgs<'a> {
    /// The lock name.
    pub(crate) name: &'a [u8],
    /// Why, for the log.
    pub(crate) reason: &'a str,
    /// No confirmation.
    pub(crate) yes: bool,
}

/// The JSON line of `force-unlock --json`.
#[derive(Debug, Serialize)]
struct Outcome<'a> {
    /// The lock name.
    name: &'a str,
    /// Whether a lock was deleted.
    deleted: bool,
    /// Whether the operator declined (nothing was sent).
    declined: bool,
    /// The reason given.
    reason: &'a str,
    /// Who ran it: the OS user.
    user: &'a str,
    /// On which host.
    host: &'a str,
    /// The lock's state before.
    before: &'a LockView,
}

/// Deletes the lock `name` once confirmed; exit 0 when a lock was deleted, 1 when it
/// was free or the operator declined.
pub(crate) async fn run(ctx: &Context, args: ForceArgs<'_>) -> Result<Exit, CliError> {
    if args.reason.trim().is_empty() {
        return Err(CliError::usage(
            "--reason must say why the lock is broken, for the log: e.g. --reason \
             \"holder pod gone, INC-1234\"",
        ));
    }
    let client = ctx.target.lock_client().await?;
    let before = LockView::new(args.name, &client.inspect(args.name).await?);
    let name = printable(&before.name);
    let (user, host) = (operator(), hostname());
    let namespace = &ctx.target.namespace;
    let servers = ctx.target.describe();
    // A lock found free is not worth a question: there is nothing to delete.
    let free = !before.held && before.holders.is_empty();
    let ask = !args.yes && !free;
    let declined = ask && !confirm(&name, namespace, &servers, &before)?;
    let deleted = if declined || (free && !args.yes) {
        false
    } else {
        client.force_unlock(args.name).await?
    };
    let outcome = if declined {
        "declined: nothing was changed".to_owned()
    } else if deleted {
        format!("deleted (was {}); its waiters were woken", before.summary())
    } else {
        "nothing deleted: the lock was free".to_owned()
    };
    note(&format!(
        "distlock: force-unlock of `{name}` in namespace `{namespace}` on {servers} by \
         {user}@{host}, reason: {reason:?}: {outcome}\n",
        reason = args.reason,
    ));
    if ctx.json {
        print_json(&Outcome {
            name: &before.name,
            deleted,
            declined,
            reason: args.reason,
            user: &user,
            host: &host,
            before: &before,
        })?;
    } else if deleted {
        print(&format!("deleted `{name}`\n"))?;
    } else if !declined {
        print(&format!("`{name}` was free: nothing deleted\n"))?;
    }
    Ok(if deleted { Exit::Ok } else { Exit::Nothing })
}

/// Asks on stderr, reads the answer from stdin (the terminal, or whatever stdin
/// is): `y` or `yes` goes on; anything else, or no answer, does not.
fn confirm(
    name: &str,
    namespace: &str,
    servers: &str,
    before: &LockView,
) -> Result<bool, CliError> {
    note(&format!(
        "Force-unlock `{name}` in namespace `{namespace}` on {servers}?\n  now: {}\n  Its \
         holders lose it at their next renewal. Delete it? [y/N] ",
        before.summary()
    ));
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer).map_err(|err| {
        CliError::new(
            Exit::Failed,
            format!("could not read the confirmation from stdin ({err}); pass --yes to skip it"),
        )
    })?;
    let answer = answer.trim().to_ascii_lowercase();
    if answer.is_empty() {
        note("\n");
    }
    Ok(answer == "y" || answer == "yes")
}

/// The OS user who runs the command: `$USER`, else `$LOGNAME`.
fn operator() -> String {
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|value| !value.is_empty()))
        .unwrap_or_else(|| "unknown-user".to_owned())
}

/// The host's name: the kernel's, else `$HOSTNAME`.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}
