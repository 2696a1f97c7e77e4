//! Who holds a lock: the state of a lock as `inspect.lua` reads it (for
//! `inspect`, the CLI and a timeout's error), and the holder named in a timeout,
//! as its client wrote it (`who.rs`).

use std::sync::Arc;
use std::time::Duration;

use super::Operators;
use crate::backend::redlock::{self, InspectVote};
use crate::error::LockError;
use crate::keys::LockKeys;
use crate::kinds::HoldMode;
use crate::layout::args::Inspect;
use crate::scripts::{unexpected_reply, InspectReply, LockView};

/// How long a timed-out waiter may take to read who holds the lock, for its error.
const HOLDER_LOOK: Duration = Duration::from_millis(250);

impl Operators {
    /// A new acquisition of (one of) `keys` ended in `err`: the error its caller
    /// gets, with the holder of a timed-out lock named. That is `err`, and when it
    /// is a [`LockError::Timeout`] on one of the locks of `keys`, with the holder
    /// that its client wrote (one read; left out when it does not come within
    /// [`HOLDER_LOOK`], or the holder wrote nothing): the writer or exclusive holder
    /// first.
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    pub(crate) async fn ended(&self, mut err: LockError, keys: &[Arc<LockKeys>]) -> LockError {
        let LockError::Timeout {
            name,
            holder: slot @ None,
            ..
        } = &mut err
        else {
            return err;
        };
        let Some(keys) = keys.iter().find(|keys| keys.display() == *name) else {
            return err;
        };
        if let Ok(Ok(view)) = tokio::time::timeout(HOLDER_LOOK, self.read(keys)).await {
            *slot = view
                .holders
                .into_iter()
                .filter(|holder| holder.info.is_some())
                .max_by_key(|holder| matches!(holder.mode, HoldMode::Exclusive | HoldMode::Write))
                .and_then(|holder| holder.info)
                .map(Box::new);
        }
        err
    }

    /// The state of the lock of `keys`, as `inspect.lua` reads it (on Redlock, as a
    /// majority of nodes sees it).
    ///
    /// # Cancel safety
    ///
    /// Read-only: dropping the future changes nothing.
    pub(crate) async fn read(&self, keys: &Arc<LockKeys>) -> Result<LockView, LockError> {
        let backend = &self.backend;
        let numsub = if backend.publish_command() == "SPUBLISH" {
            "SHARDNUMSUB"
        } else {
            "NUMSUB"
        };
        let replies = backend
            .each(|mut conn| {
                let (scripts, keys) = (self.scripts.clone(), keys.clone());
                async move {
                    let reply: Vec<redis::Value> = scripts
                        .inspect
                        .invoke(&Inspect {
                            lock: &keys.lock,
                            numsub,
                        })
                        .invoke_async(&mut conn)
                        .await?;
                    InspectReply::decode_values(&reply)
                        .ok_or_else(|| unexpected_reply("inspect.lua", &reply))
                }
            })
            .await;
        let quorum = backend.quorum();
        match redlock::inspect(replies, quorum)? {
            InspectVote::View(view) => Ok(view),
            InspectVote::Conflict => Err(LockError::KeyConflict {
                name: keys.display(),
            }),
            InspectVote::Short { got } => Err(LockError::QuorumNotReached {
                got,
                needed: quorum,
                held_elsewhere: 0,
            }),
        }
    }
}
