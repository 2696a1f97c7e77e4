//! `distlock list [PATTERN]`: the locks of the namespace, found with SCAN.
//!
//! The keys come from `SCAN ... MATCH <namespace>:{<literal prefix>* COUNT n` (never
//! `KEYS`, which blocks the server), on the one server or on every master of a
//! Redis Cluster in turn. A lock's main key (`<namespace>:{<name>}`) names a held
//! lock; a free lock has no main key, so with `--all` its side keys
//! (`distlock::layout::is_side_key`: the fencing counter `:fence`, the short-lived
//! record of a final release `:freed:<owner>`) name it too. Each name is decoded,
//! matched against the pattern, and inspected through the library.

use std::collections::BTreeSet;

use distlock::redis;
use distlock::LockError;

use crate::commands::{note, print, print_json, Context};
use crate::connect::Node;
use crate::error::{CliError, Exit};
use crate::format::{printable, table, LockView, LIST_ALIGN, LIST_HEADER};
use crate::names::{glob_match, name_of_key, name_of_side_key, scan_command, scan_pattern};

/// What `list` was asked for.
#[derive(Debug)]
pub(crate) struct ListArgs<'a> {
    /// The glob over lock names.
    pub(crate) pattern: &'a [u8],
    /// Also list free locks.
    pub(crate) all: bool,
    /// The COUNT of each SCAN.
    pub(crate) count: u32,
}

/// Lists the locks whose names match; exit 1 when none is listed.
pub(crate) async fn run(ctx: &Context, args: ListArgs<'_>) -> Result<Exit, CliError> {
    let namespace = ctx.target.namespace.as_str();
    let client = ctx.target.lock_client().await?;
    let mut raw = ctx.target.raw(None).await?;
    let servers = ctx.target.describe();
    let masters = raw.masters().await.map_err(|err| {
        CliError::redis(&format!("asking {servers} for the cluster's masters"), &err)
    })?;
    let nodes: Vec<Option<Node>> = match masters {
        Some(masters) => masters.into_iter().map(Some).collect(),
        None => vec![None],
    };
    let matching = scan_pattern(namespace, args.pattern);
    let mut names = BTreeSet::new();
    for node in &nodes {
        let place = node
            .as_ref()
            .map_or_else(|| servers.clone(), |node| format!("the master {node}"));
        let mut cursor: u64 = 0;
        loop {
            let scan = scan_command(cursor, &matching, args.count);
            let reply = raw
                .query_on(node.as_ref(), scan)
                .await
                .map_err(|err| CliError::redis(&format!("scanning {place}"), &err))?;
            let (next, keys): (u64, Vec<Vec<u8>>) =
                redis::from_redis_value(reply).map_err(|err| {
                    CliError::new(
                        Exit::Failed,
                        format!("scanning {place}: the SCAN reply does not parse ({err})"),
                    )
                })?;
            for key in keys {
                // A held lock has its main key; a free one, at most its side keys.
                let name = name_of_key(namespace, &key).or_else(|| {
                    args.all
                        .then(|| name_of_side_key(namespace, &key))
                        .flatten()
                });
                if let Some(name) = name {
                    if glob_match(args.pattern, &name) {
                        names.insert(name);
                    }
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    let mut rows = Vec::new();
    let mut listed = 0usize;
    for name in &names {
        let info = match client.inspect(name).await {
            Ok(info) => info,
            // A key at a lock's name that distlock did not write, or a name the
            // library refuses (one over its length limit): not a lock; say so and
            // go on.
            Err(
                err @ (LockError::KeyConflict { .. }
                | LockError::KindConflict { .. }
                | LockError::InvalidName { .. }),
            ) => {
                note(&format!(
                    "distlock: skipped `{}`: {err}\n",
                    printable(&String::from_utf8_lossy(name))
                ));
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        let view = LockView::new(name, &info);
        if view.is_free() && !args.all {
            continue;
        }
        listed += 1;
        if ctx.json {
            print_json(&view)?;
        } else {
            rows.push(view.list_row());
        }
    }
    if listed == 0 {
        note(&format!(
            "distlock: no {}lock matches `{}` in namespace `{namespace}`{}\n",
            if args.all { "" } else { "held " },
            printable(&String::from_utf8_lossy(args.pattern)),
            if args.all {
                ""
            } else {
                " (--all lists free ones too)"
            },
        ));
        return Ok(Exit::Nothing);
    }
    if !ctx.json {
        print(&table(&LIST_HEADER, &LIST_ALIGN, &rows))?;
    }
    Ok(Exit::Ok)
}
