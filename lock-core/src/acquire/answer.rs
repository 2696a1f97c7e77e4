//! What one attempt of a wait came to, for one name (`acquire.lua`) or a set
//! (`acquire_all.lua`): one answer type for the one wait loop.

use crate::attempt::Outcome;
use crate::error::LockError;
use crate::keys::LockKeys;
use crate::scripts::unexpected_reply;

use super::options::kind_conflict;

/// What one attempt of a wait came to.
pub(crate) enum Answer {
    /// Granted: the owner's hold count and fencing token (0: none), per name.
    Granted(Granted),
    /// The name at `index` (0 for one name) is held by another owner for
    /// `pttl_ms` more milliseconds (negative: unknown).
    Busy { index: usize, pttl_ms: i64 },
    /// Redlock: too few nodes granted it (see [`Outcome::NoQuorum`]).
    NoQuorum {
        granted: u64,
        held: u64,
        retry_ms: i64,
    },
    /// Refused for good: the wait ends with this error.
    Refused(LockError),
    /// The name at `index` (0 for one name) was not taken: the attempt's owner id
    /// holds it already, `count` times, a hold no guard owns (see `acquire.lua`,
    /// "Never added to"). It is given back, and the wait asks again under a fresh
    /// owner id.
    HeldAlready { index: usize, count: u64 },
}

/// A grant: `(hold count, fencing token)` of the one name, or of each name of a set.
pub(crate) enum Granted {
    One(u64, u64),
    Set(Vec<(u64, u64)>),
}

/// One name's attempt as the wait reads it.
pub(super) fn answer_of(keys: &LockKeys, outcome: Outcome) -> Answer {
    match outcome {
        Outcome::Acquired { count, fence } => Answer::Granted(Granted::One(count, fence)),
        Outcome::Busy { pttl_ms } => Answer::Busy { index: 0, pttl_ms },
        Outcome::NoQuorum {
            granted,
            held,
            retry_ms,
        } => Answer::NoQuorum {
            granted,
            held,
            retry_ms,
        },
        Outcome::NotHeld => Answer::Refused(unexpected_reply("acquire.lua", &[-1]).into()),
        Outcome::Conflict => Answer::Refused(LockError::KeyConflict {
            name: keys.display(),
        }),
        Outcome::OtherMode => Answer::Refused(LockError::UpgradeNotAllowed {
            name: keys.display(),
        }),
        Outcome::OtherKind { held_as } => Answer::Refused(kind_conflict(keys, held_as)),
        Outcome::HeldAlready { count } => Answer::HeldAlready { index: 0, count },
    }
}
