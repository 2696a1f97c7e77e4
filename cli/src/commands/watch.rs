//! `distlock watch NAME`: the lock's releases as they come, until Ctrl-C.
//!
//! It subscribes to the lock's channel `<namespace>:{<name>}:released` (`SUBSCRIBE`,
//! or `SSUBSCRIBE` on a Redis Cluster, where the library publishes with
//! `SPUBLISH`), prints a first `watching` event with the lock's state once the
//! subscription is confirmed, then one event per message, each with the state
//! `inspect` finds right after it.
//!
//! A message carries the releasing owner's id, which is never printed: only what
//! kind of message it is.

use distlock::layout::ReleaseMessage;
use distlock::redis::{PushInfo, PushKind, Value};
use serde::Serialize;
use tokio::sync::mpsc;

use crate::commands::{print, print_json, Context};
use crate::connect::Raw;
use crate::error::{CliError, Exit};
use crate::format::{printable, timestamp_now, LockView};
use crate::names::channel;

/// One line of `watch --json`.
#[derive(Debug, Serialize)]
struct Event<'a> {
    /// When it was seen, RFC 3339 in UTC.
    time: String,
    /// `watching` (the first line), `release`, `force_unlock`, `withdraw` (a waiter
    /// gave up its place in the queue), or `message` (a message of another form).
    event: &'a str,
    /// Whether the message names the next waiter of a fair lock's queue, woken by it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    next_waiter: bool,
    /// The lock name.
    name: &'a str,
    /// The lock's state right after the message.
    state: &'a LockView,
}

/// Watches the lock `name` until Ctrl-C (exit 0), or until the connection is lost
/// (exit 3).
pub(crate) async fn run(ctx: &Context, name: &[u8]) -> Result<Exit, CliError> {
    let client = ctx.target.lock_client().await?;
    let (push, mut pushes) = mpsc::unbounded_channel();
    let mut raw = ctx.target.raw(Some(push)).await?;
    let channel = channel(&ctx.target.namespace, name);
    let servers = ctx.target.describe();
    let subscribed = match &mut raw {
        Raw::Single(conn) => conn.subscribe(&channel).await,
        Raw::Cluster(conn) => conn.ssubscribe(&channel).await,
    };
    subscribed.map_err(|err| CliError::redis(&format!("subscribing on {servers}"), &err))?;
    let is_cluster = matches!(raw, Raw::Cluster(_));
    let shown = String::from_utf8_lossy(name).into_owned();

    let state = LockView::new(name, &client.inspect(name).await?);
    emit(ctx, &shown, "watching", false, &state)?;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let pushed = tokio::select! {
            stop = &mut ctrl_c => {
                return match stop {
                    Ok(()) => Ok(Exit::Ok),
                    Err(err) => Err(CliError::new(
                        Exit::Failed,
                        format!("could not listen for Ctrl-C: {err}"),
                    )),
                };
            }
            pushed = pushes.recv() => pushed,
        };
        let Some(PushInfo { kind, data }) = pushed else {
            return Err(lost(&servers));
        };
        match kind {
            PushKind::Message | PushKind::SMessage => {
                let (event, next_waiter) = classify(data.get(1));
                let state = LockView::new(name, &client.inspect(name).await?);
                emit(ctx, &shown, event, next_waiter, &state)?;
            }
            // A cluster connection reconnects and subscribes again by itself.
            PushKind::Disconnection if !is_cluster => return Err(lost(&servers)),
            _ => {}
        }
    }
}

/// The error of a subscription whose connection was lost.
fn lost(servers: &str) -> CliError {
    CliError::new(
        Exit::Unreachable,
        format!(
            "the connection to {servers} was lost; releases from now on are not seen: \
             check the server and run `distlock watch` again"
        ),
    )
}

/// What a message on the release channel says, without its owner ids: the library
/// publishes `released` on a force-unlock, `<owner>:<n>` on a release (then a space
/// and the next waiter's id for a fair lock with a queue), and `<owner>:-` when a
/// waiter gives up its place.
fn classify(payload: Option<&Value>) -> (&'static str, bool) {
    let bytes: &[u8] = match payload {
        Some(Value::BulkString(bytes)) => bytes,
        Some(Value::SimpleString(text)) => text.as_bytes(),
        _ => return ("message", false),
    };
    match ReleaseMessage::parse(bytes) {
        ReleaseMessage::Release { next } => ("release", next.is_some()),
        ReleaseMessage::Withdraw { .. } => ("withdraw", false),
        ReleaseMessage::ForceUnlock => ("force_unlock", false),
        _ => ("message", false),
    }
}

/// Prints one event: a JSON line, or `time  event  state`.
fn emit(
    ctx: &Context,
    name: &str,
    event: &str,
    next_waiter: bool,
    state: &LockView,
) -> Result<(), CliError> {
    let time = timestamp_now();
    if ctx.json {
        return print_json(&Event {
            time,
            event,
            next_waiter,
            name,
            state,
        });
    }
    let event = event.replace('_', "-");
    let next = if next_waiter {
        " (next in queue woken)"
    } else {
        ""
    };
    print(&format!(
        "{time}  {event:<12}  {}: {}{next}\n",
        printable(name),
        state.summary()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> (&'static str, bool) {
        classify(Some(&Value::BulkString(text.as_bytes().to_vec())))
    }

    #[test]
    fn messages_are_told_apart_without_their_ids() {
        assert_eq!(of("released"), ("force_unlock", false));
        assert_eq!(of("c0ffee:owner-1:7"), ("release", false));
        assert_eq!(of("c0ffee:7 beef:2"), ("release", true));
        assert_eq!(of("c0ffee:-"), ("withdraw", false));
        assert_eq!(of("hello"), ("message", false));
        assert_eq!(of(":7"), ("message", false));
        assert_eq!(classify(None), ("message", false));
    }
}
