//! `distlock ping`: is the server there, which is it, and can distlock run on it?
//!
//! The report is one `Serialize` struct, a section per check, and one entry per
//! node (the server, the master behind Sentinel, or each master of a cluster), so
//! that checks added later (a richer `LockClient::ping`, replication, latency
//! percentiles) are fields added beside these.

use std::time::Instant;

use distlock::redis::{self, Value};
use serde::Serialize;

use crate::commands::{print, print_json, Context};
use crate::connect::{text, Node, Raw};
use crate::error::{CliError, Exit};
use crate::format::human_millis;

/// What `ping` found.
#[derive(Debug, Serialize)]
struct Report {
    /// The deployment, as `host:port` (never a password).
    servers: String,
    /// The namespace of the locks.
    namespace: String,
    /// Whether the user can load and run distlock's scripts.
    scripts: Scripts,
    /// One entry per node checked.
    nodes: Vec<NodeReport>,
}

/// The scripts check: the library's client connects only once every script is
/// loaded.
#[derive(Debug, Serialize)]
struct Scripts {
    /// Whether they loaded.
    loaded: bool,
    /// Why not, when they did not.
    error: Option<String>,
}

/// What one node said.
#[derive(Debug, Serialize)]
struct NodeReport {
    /// The node (`host:port`), or the deployment for one server or Sentinel.
    address: String,
    /// `redis` or `valkey`, from `INFO server`.
    server: Option<String>,
    /// Its version, from `INFO server`.
    version: Option<String>,
    /// Why `INFO server` gave nothing, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    info_error: Option<String>,
    /// The round trip of one `PING`, in microseconds.
    round_trip_us: u64,
    /// `maxmemory-policy`, from `CONFIG GET`.
    maxmemory_policy: Option<String>,
    /// Why `CONFIG GET` gave nothing (refused by an ACL, or renamed away).
    #[serde(skip_serializing_if = "Option::is_none")]
    maxmemory_policy_error: Option<String>,
}

/// Checks the deployment; exit 0 when the scripts loaded, 3 when it cannot be
/// reached, 4 when the scripts were refused.
pub(crate) async fn run(ctx: &Context) -> Result<Exit, CliError> {
    let servers = ctx.target.describe();
    let scripts = match ctx.target.lock_client().await {
        Ok(_client) => Scripts {
            loaded: true,
            error: None,
        },
        Err(err) if err.exit == Exit::Unreachable || err.exit == Exit::Usage => return Err(err),
        Err(err) => Scripts {
            loaded: false,
            error: Some(err.message),
        },
    };
    let mut raw = ctx.target.raw(None).await?;
    let masters = raw.masters().await.map_err(|err| {
        CliError::redis(&format!("asking {servers} for the cluster's masters"), &err)
    })?;
    let nodes: Vec<Option<Node>> = match masters {
        Some(masters) => masters.into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut reports = Vec::new();
    for node in &nodes {
        let address = node
            .as_ref()
            .map_or_else(|| servers.clone(), ToString::to_string);
        reports.push(check_node(&mut raw, node.as_ref(), address).await?);
    }
    let report = Report {
        servers,
        namespace: ctx.target.namespace.clone(),
        scripts,
        nodes: reports,
    };
    if ctx.json {
        print_json(&report)?;
    } else {
        print(&human(&report))?;
    }
    Ok(if report.scripts.loaded {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// The checks of one node.
async fn check_node(
    raw: &mut Raw,
    node: Option<&Node>,
    address: String,
) -> Result<NodeReport, CliError> {
    let started = Instant::now();
    let pong = raw.query_on(node, redis::cmd("PING")).await;
    let round_trip = started.elapsed();
    pong.map_err(|err| CliError::redis(&format!("PING to {address}"), &err))?;

    let (mut server, mut version, mut info_error) = (None, None, None);
    match raw
        .query_on(node, redis::cmd("INFO").arg("server").clone())
        .await
    {
        Ok(info) => {
            let info = text(&info).unwrap_or_default();
            let field = |name: &str| {
                info.lines()
                    .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                    .map(|value| value.trim().to_owned())
            };
            let name = field("server_name").unwrap_or_else(|| "redis".to_owned());
            version = field(&format!("{name}_version")).or_else(|| field("redis_version"));
            server = Some(name);
        }
        Err(err) => info_error = Some(err.to_string()),
    }

    let (mut maxmemory_policy, mut maxmemory_policy_error) = (None, None);
    let config = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .clone();
    match raw.query_on(node, config).await {
        Ok(reply) => match policy_of(&reply) {
            Some(policy) => maxmemory_policy = Some(policy),
            None => maxmemory_policy_error = Some("no value in the reply".to_owned()),
        },
        Err(err) => maxmemory_policy_error = Some(err.to_string()),
    }
    Ok(NodeReport {
        address,
        server,
        version,
        info_error,
        round_trip_us: u64::try_from(round_trip.as_micros()).unwrap_or(u64::MAX),
        maxmemory_policy,
        maxmemory_policy_error,
    })
}

/// The value of a `CONFIG GET maxmemory-policy` reply: a map in RESP3, a flat
/// `[name, value]` array in RESP2.
fn policy_of(reply: &Value) -> Option<String> {
    match reply {
        Value::Map(pairs) => pairs.first().and_then(|(_, value)| text(value)),
        Value::Array(items) => items.get(1).and_then(text),
        _ => None,
    }
}

/// A round trip for people: `312µs`, `4.2ms`, then as other durations.
fn human_micros(us: u64) -> String {
    match us {
        0..=999 => format!("{us}µs"),
        1_000..=999_999 => format!("{}.{}ms", us / 1_000, us % 1_000 / 100),
        _ => human_millis(us / 1_000),
    }
}

/// The human report: aligned `field  value` lines, a block per node.
fn human(report: &Report) -> String {
    let mut lines: Vec<(String, String)> = vec![
        ("servers".into(), report.servers.clone()),
        ("namespace".into(), report.namespace.clone()),
    ];
    for node in &report.nodes {
        let indent = if report.nodes.len() > 1 {
            lines.push(("node".into(), node.address.clone()));
            "  "
        } else {
            ""
        };
        let version = match (&node.server, &node.version, &node.info_error) {
            (Some(server), Some(version), _) => format!("{server} {version}"),
            (_, _, Some(err)) => format!("unknown (INFO refused: {err})"),
            _ => "unknown".to_owned(),
        };
        lines.push((format!("{indent}version"), version));
        lines.push((
            format!("{indent}round trip"),
            format!("{} (PING)", human_micros(node.round_trip_us)),
        ));
        let policy = match (&node.maxmemory_policy, &node.maxmemory_policy_error) {
            (Some(policy), _) if policy == "noeviction" => policy.clone(),
            (Some(policy), _) => format!(
                "{policy} (evicts keys under memory pressure, which can delete a held lock: \
                 use noeviction)"
            ),
            (None, Some(err)) => format!("unknown (CONFIG GET refused: {err})"),
            (None, None) => "unknown".to_owned(),
        };
        lines.push((format!("{indent}maxmemory-policy"), policy));
    }
    let scripts = match &report.scripts.error {
        None => "loaded: this user can run distlock's scripts".to_owned(),
        Some(err) => format!("refused: {err}"),
    };
    lines.push(("scripts".into(), scripts));
    let width = lines
        .iter()
        .map(|(field, _)| field.chars().count())
        .max()
        .unwrap_or(0);
    lines
        .iter()
        .map(|(field, value)| format!("{field:<width$}  {value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_read_like_people_write_them() {
        assert_eq!(human_micros(312), "312µs");
        assert_eq!(human_micros(4_250), "4.2ms");
        assert_eq!(human_micros(2_100_000), "2.1s");
    }

    #[test]
    fn the_policy_is_read_from_either_protocol() {
        let name = Value::BulkString(b"maxmemory-policy".to_vec());
        let value = Value::BulkString(b"noeviction".to_vec());
        let resp2 = Value::Array(vec![name.clone(), value.clone()]);
        let resp3 = Value::Map(vec![(name, value)]);
        assert_eq!(policy_of(&resp2).as_deref(), Some("noeviction"));
        assert_eq!(policy_of(&resp3).as_deref(), Some("noeviction"));
        assert_eq!(policy_of(&Value::Array(vec![])), None);
    }
}
