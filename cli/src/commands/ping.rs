//! `distlock ping`: is the server there, which is it, and can distlock run on it?
//!
//! The checks are the library's ([`LockClient::ping`](distlock::LockClient::ping),
//! and [`NodeHealth::check`] when the client cannot connect because the user may
//! not load the scripts); this file turns their report into the command's output:
//! one `Serialize` struct, one entry per node (the server, the master behind
//! Sentinel, each master of a cluster).

use distlock::redis::aio::ConnectionLike;
use distlock::redis::{self, Cmd, Pipeline, RedisFuture, Value};
use distlock::NodeHealth;
use serde::Serialize;
use std::time::Duration;

use crate::commands::{print, print_json, Context};
use crate::connect::{Node, Raw};
use crate::error::{CliError, Exit};

/// What `ping` found.
#[derive(Debug, Serialize)]
struct Report {
    /// The deployment, as `host:port` (never a password).
    servers: String,
    /// The namespace of the locks.
    namespace: String,
    /// The service the connections are named after (`distlock:<service>`), when
    /// the client connected.
    service: Option<String>,
    /// Whether the user can load and run distlock's scripts.
    scripts: Scripts,
    /// Whether no node has a warning.
    healthy: bool,
    /// Every node's warnings, each after its node's address.
    warnings: Vec<String>,
    /// One entry per node checked.
    nodes: Vec<NodeReport>,
    /// The human lines of the nodes (not in the JSON output).
    #[serde(skip)]
    fields: Vec<(String, String)>,
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
    /// The node (`host:port`).
    address: String,
    /// `redis` or `valkey`, from `INFO server`.
    server: Option<String>,
    /// Its version, from `INFO server`.
    version: Option<String>,
    /// Why `INFO` gave nothing, when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    info_error: Option<String>,
    /// The round trip of one `PING`, in microseconds.
    round_trip_us: u64,
    /// `maxmemory-policy`, from `CONFIG GET`.
    maxmemory_policy: Option<String>,
    /// Why `CONFIG GET` gave nothing (refused by an ACL, or renamed away).
    #[serde(skip_serializing_if = "Option::is_none")]
    maxmemory_policy_error: Option<String>,
    /// `master` or `slave`.
    role: Option<String>,
    /// The replicas connected to it.
    replicas: Option<u32>,
    /// Whether it appends to an AOF.
    aof: Option<bool>,
    /// Whether it saves RDB snapshots on a schedule.
    rdb_saves: Option<bool>,
    /// How many of distlock's scripts are cached (`SCRIPT EXISTS`).
    scripts_cached: Option<usize>,
    /// How many scripts distlock has.
    scripts_total: usize,
    /// Whether distlock's function library is loaded (the scripts run by `FCALL`).
    library_loaded: Option<bool>,
    /// The Redis user (`ACL WHOAMI`).
    user: Option<String>,
    /// The ACL rules distlock needs that the user lacks.
    missing_permissions: Vec<String>,
    /// Why the permissions could not all be checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    permissions_unchecked: Option<String>,
    /// What is wrong with this node.
    warnings: Vec<String>,
}

impl From<NodeHealth> for NodeReport {
    fn from(node: NodeHealth) -> Self {
        Self {
            address: node.address,
            server: node.server,
            version: node.version,
            info_error: node.info_error,
            round_trip_us: u64::try_from(node.round_trip.as_micros()).unwrap_or(u64::MAX),
            maxmemory_policy: node.maxmemory_policy,
            maxmemory_policy_error: node.config_error,
            role: node.role,
            replicas: node.replicas,
            aof: node.aof,
            rdb_saves: node.rdb_saves,
            scripts_cached: node.scripts_cached,
            scripts_total: node.scripts_total,
            library_loaded: node.library_loaded,
            user: node.user,
            missing_permissions: node.missing_permissions,
            permissions_unchecked: node.permissions_unchecked,
            warnings: node.warnings,
        }
    }
}

/// Checks the deployment; exit 0 when the scripts loaded, 3 when it cannot be
/// reached, 4 when the scripts were refused.
pub(crate) async fn run(ctx: &Context) -> Result<Exit, CliError> {
    let servers = ctx.target.describe();
    let (service, scripts, nodes, fields, warnings) = match ctx.target.lock_client().await {
        Ok(client) => {
            let health = client.ping().await?;
            let mut fields = vec![
                ("namespace".to_owned(), health.namespace.clone()),
                ("service".to_owned(), health.service.clone()),
            ];
            fields.extend(fields_of_nodes(&health.nodes));
            let warnings = health.warnings();
            let scripts = Scripts {
                loaded: true,
                error: None,
            };
            (
                Some(health.service),
                scripts,
                health.nodes,
                fields,
                warnings,
            )
        }
        Err(err) if err.exit == Exit::Unreachable || err.exit == Exit::Usage => return Err(err),
        Err(err) => {
            let nodes = check_without_client(ctx, &servers).await?;
            let mut fields = vec![("namespace".to_owned(), ctx.target.namespace.clone())];
            fields.extend(fields_of_nodes(&nodes));
            let warnings = nodes
                .iter()
                .flat_map(|node| {
                    node.warnings
                        .iter()
                        .map(move |warning| format!("{}: {warning}", node.address))
                })
                .collect();
            let scripts = Scripts {
                loaded: false,
                error: Some(err.message),
            };
            (None, scripts, nodes, fields, warnings)
        }
    };
    let report = Report {
        servers,
        namespace: ctx.target.namespace.clone(),
        service,
        scripts,
        healthy: warnings.is_empty(),
        warnings,
        nodes: nodes.into_iter().map(NodeReport::from).collect(),
        fields,
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

/// The library's checks of every node over the command's own connection, for a
/// user the client cannot connect as.
async fn check_without_client(ctx: &Context, servers: &str) -> Result<Vec<NodeHealth>, CliError> {
    let mut raw = ctx.target.raw(None).await?;
    let masters = raw.masters().await.map_err(|err| {
        CliError::redis(&format!("asking {servers} for the cluster's masters"), &err)
    })?;
    let sharded = masters.is_some();
    let nodes: Vec<Option<Node>> = match masters {
        Some(masters) => masters.into_iter().map(Some).collect(),
        None => vec![None],
    };
    let mut checked = Vec::new();
    for node in nodes {
        let address = node
            .as_ref()
            .map_or_else(|| servers.to_owned(), ToString::to_string);
        let mut on_node = OnNode {
            raw: &mut raw,
            node,
        };
        let health =
            NodeHealth::check(&mut on_node, address, &ctx.target.namespace, sharded).await?;
        checked.push(health);
    }
    Ok(checked)
}

/// The command's connection, sending every command to one node.
struct OnNode<'a> {
    raw: &'a mut Raw,
    node: Option<Node>,
}

impl ConnectionLike for OnNode<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.raw.query_on(self.node.as_ref(), cmd.clone()))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _pipeline: &'a Pipeline,
        _offset: usize,
        _count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async {
            Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "the ping checks send no pipelines",
            )))
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// The `(field, value)` lines of `nodes`: indented under a `node` line each when
/// there are several; then the warnings, or `health  ok`.
fn fields_of_nodes(nodes: &[NodeHealth]) -> Vec<(String, String)> {
    let mut lines = Vec::new();
    for node in nodes {
        let indent = if nodes.len() > 1 {
            lines.push(("node".into(), node.address.clone()));
            "  "
        } else {
            ""
        };
        node_lines(node, indent, &mut lines);
    }
    let warnings: Vec<String> = nodes
        .iter()
        .flat_map(|node| {
            node.warnings
                .iter()
                .map(move |warning| format!("{}: {warning}", node.address))
        })
        .collect();
    if warnings.is_empty() {
        lines.push(("health".into(), "ok".into()));
    }
    for warning in warnings {
        lines.push(("warning".into(), warning));
    }
    lines
}

/// The `field  value` lines of one node, each field after `indent`.
fn node_lines(node: &NodeHealth, indent: &str, lines: &mut Vec<(String, String)>) {
    let mut line = |field: &str, value: String| lines.push((format!("{indent}{field}"), value));
    let version = match (&node.server, &node.version, &node.info_error) {
        (Some(server), Some(version), _) => format!("{server} {version}"),
        (_, _, Some(err)) => format!("unknown (INFO refused: {err})"),
        _ => "unknown".to_owned(),
    };
    line("version", version);
    line(
        "round trip",
        format!("{} (PING)", human_round_trip(node.round_trip)),
    );
    let policy = match (&node.maxmemory_policy, &node.config_error) {
        (Some(policy), _) if policy == "noeviction" => policy.clone(),
        (Some(policy), _) => format!("{policy} (can evict held locks: use noeviction)"),
        (None, Some(err)) => format!("unknown (CONFIG GET refused: {err})"),
        (None, None) => "unknown".to_owned(),
    };
    line("maxmemory-policy", policy);
    let yes_no = |on: Option<bool>| match on {
        Some(true) => "on",
        Some(false) => "off",
        None => "unknown",
    };
    line(
        "persistence",
        format!(
            "AOF {}, RDB saves {}",
            yes_no(node.aof),
            yes_no(node.rdb_saves)
        ),
    );
    let role = match (&node.role, node.replicas) {
        (Some(role), Some(replicas)) => format!("{role}, {replicas} replica(s) connected"),
        (Some(role), None) => role.clone(),
        _ => "unknown".to_owned(),
    };
    line("role", role);
    line("scripts run by", scripts_run_by(node));
    let permissions = match (
        &node.permissions_unchecked,
        node.missing_permissions.is_empty(),
    ) {
        (_, false) => format!("missing: {}", node.missing_permissions.join(", ")),
        (Some(why), true) => format!("not checked ({why}); EVALSHA allowed"),
        (None, true) => format!(
            "every one distlock needs (user `{}`)",
            node.user.as_deref().unwrap_or("default")
        ),
    };
    line("permissions", permissions);
}

/// How the node runs distlock's scripts: by its function library when that is
/// loaded (the script cache is then not used, and not mentioned), else by
/// `EVALSHA` from the script cache.
fn scripts_run_by(node: &NodeHealth) -> String {
    let cache = match node.scripts_cached {
        Some(cached) if cached == node.scripts_total => {
            format!("all {cached} cached (SCRIPT EXISTS)")
        }
        Some(cached) => format!(
            "{cached} of {} cached: the next call that needs one loads it",
            node.scripts_total
        ),
        None => "unknown".to_owned(),
    };
    match node.library_loaded {
        Some(true) => "FCALL: distlock's function library is loaded".to_owned(),
        Some(false) => format!(
            "FCALL once the library is loaded again (the next call loads it); \
             EVALSHA meanwhile: {cache}"
        ),
        None => format!("EVALSHA (FUNCTION LIST gave no answer): script cache {cache}"),
    }
}

/// A round trip for people: `312µs`, `4.2ms`, `1.3s`.
fn human_round_trip(round_trip: Duration) -> String {
    let us = round_trip.as_micros();
    match us {
        0..=999 => format!("{us}µs"),
        1_000..=999_999 => format!("{}.{}ms", us / 1_000, us % 1_000 / 100),
        _ => format!("{}.{}s", us / 1_000_000, us % 1_000_000 / 100_000),
    }
}

/// The human report: aligned `field  value` lines, a block per node.
fn human(report: &Report) -> String {
    let mut lines: Vec<(String, String)> = vec![("servers".into(), report.servers.clone())];
    lines.extend(report.fields.iter().cloned());
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
        assert_eq!(human_round_trip(Duration::from_micros(312)), "312µs");
        assert_eq!(human_round_trip(Duration::from_micros(4_250)), "4.2ms");
        assert_eq!(human_round_trip(Duration::from_micros(2_100_000)), "2.1s");
    }

    #[test]
    fn the_human_report_aligns_its_fields() {
        let report = Report {
            servers: "127.0.0.1:6379".into(),
            namespace: "distlock".into(),
            service: Some("orders-api".into()),
            scripts: Scripts {
                loaded: true,
                error: None,
            },
            healthy: true,
            warnings: Vec::new(),
            nodes: Vec::new(),
            fields: vec![("maxmemory-policy".into(), "noeviction".into())],
        };
        assert_eq!(
            human(&report),
            "servers           127.0.0.1:6379\nmaxmemory-policy  noeviction\nscripts           \
             loaded: this user can run distlock's scripts\n"
        );
    }
}
