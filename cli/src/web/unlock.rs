//! Force-unlock from the page: refused unless `distlock web` was started with an
//! admin token and the request carries it, and always with a reason, which goes
//! to stderr with the lock, the namespace, the servers and the browser's address,
//! as `distlock force-unlock` logs it.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::commands::note;
use crate::format::printable;
use crate::web::live::Shared;
use crate::web::model::unhex;

/// What the page asks.
#[derive(Debug, Deserialize)]
pub(crate) struct Unlock {
    /// The lock name, in hex (the table's `id`).
    pub(crate) id: String,
    /// Why.
    pub(crate) reason: String,
}

/// What the page is told.
#[derive(Debug, Serialize)]
pub(crate) struct Answer {
    /// Whether a lock was deleted.
    pub(crate) deleted: bool,
    /// What happened, or why it was refused, for people.
    pub(crate) message: String,
}

/// Runs a force-unlock asked for by the page; returns the HTTP status and the
/// answer: 403 without the token (or with the wrong one), 400 without a reason,
/// 502 when Redis fails, else 200.
///
/// # Cancel safety
///
/// Once the token and the reason are checked, the deletion may still be applied
/// after the future is dropped.
pub(crate) async fn force_unlock(
    shared: &Shared,
    token: Option<&str>,
    given: Option<&str>,
    ask: &Unlock,
    peer: SocketAddr,
) -> (u16, Answer) {
    let refuse = |status: u16, message: &str| {
        (
            status,
            Answer {
                deleted: false,
                message: message.to_owned(),
            },
        )
    };
    let Some(token) = token else {
        return refuse(
            403,
            "force-unlock is off: start `distlock web` with --admin-token (or \
             DISTLOCK_ADMIN_TOKEN) to allow it",
        );
    };
    if !given.is_some_and(|given| same(given.as_bytes(), token.as_bytes())) {
        return refuse(403, "refused: the admin token is missing or wrong");
    }
    if ask.reason.trim().is_empty() {
        return refuse(
            400,
            "a reason is needed, for the log: e.g. \"holder pod gone, INC-1234\"",
        );
    }
    let Some(name) = unhex(&ask.id) else {
        return refuse(400, "the lock is named in hex, as the table gives it");
    };
    let shown = printable(&String::from_utf8_lossy(&name));
    let namespace = &shared.target.namespace;
    let servers = shared.target.describe();
    let result = match shared.target.lock_client().await {
        Ok(client) => client
            .force_unlock(&name)
            .await
            .map_err(|err| err.to_string()),
        Err(err) => Err(err.message),
    };
    let (status, answer) = match result {
        Ok(true) => (200, Answer { deleted: true, message: format!("deleted `{shown}`; its waiters were woken, its holder is told at its next renewal") }),
        Ok(false) => (200, Answer { deleted: false, message: format!("`{shown}` was free: nothing deleted") }),
        Err(err) => (502, Answer { deleted: false, message: format!("force-unlock of `{shown}` failed: {err}") }),
    };
    note(&format!(
        "distlock: force-unlock of `{shown}` in namespace `{namespace}` on {servers} from the \
         page (browser at {peer}), reason: {reason:?}: {outcome}\n",
        reason = ask.reason,
        outcome = answer.message,
    ));
    shared.wake();
    (status, answer)
}

/// Whether `a` and `b` are the same, in a time that does not depend on where
/// they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"secret", b"secret"));
        assert!(!same(b"secret", b"secreT"));
        assert!(!same(b"secret", b"secret2"));
        assert!(!same(b"", b"x"));
    }
}
