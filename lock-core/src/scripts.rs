//! The Lua scripts of `lua/`, built once per client, and the decoding of their replies.

use redis::Script;

/// Every script a client runs; built once, so that their SHA1s are computed once.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_release: Script,
    pub(crate) inspect: Script,
}

const ACQUIRE: &str = include_str!("../../lua/acquire.lua");
const RELEASE: &str = include_str!("../../lua/release.lua");
const RENEW: &str = include_str!("../../lua/renew.lua");
const FORCE_RELEASE: &str = include_str!("../../lua/force_release.lua");
const INSPECT: &str = include_str!("../../lua/inspect.lua");

/// The source of every script, for loading them ahead of use.
pub(crate) const SOURCES: [&str; 5] = [ACQUIRE, RELEASE, RENEW, FORCE_RELEASE, INSPECT];

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
            renew: Script::new(RENEW),
            force_release: Script::new(FORCE_RELEASE),
            inspect: Script::new(INSPECT),
        }
    }
}

/// What `acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken (or re-entered): the owner's hold count and the fencing token (0: none).
    Acquired { count: u64, fence: u64 },
    /// Held by another owner for `pttl_ms` more milliseconds (negative: unknown).
    Busy { pttl_ms: i64 },
    /// A re-entry found that the owner no longer holds the lock.
    NotHeld,
    /// A key of the lock holds a value of another type.
    Conflict,
    /// Redlock: too few nodes granted it (their grants were given back): `granted`
    /// granted it, `held` answered that another owner holds it. Ask again after
    /// `retry_ms` at most (negative: unknown).
    NoQuorum {
        granted: u64,
        held: u64,
        retry_ms: i64,
    },
}

impl AcquireReply {
    pub(crate) fn decode(reply: &[i64]) -> Option<Self> {
        match *reply {
            [1, count, fence] => Some(Self::Acquired {
                count: u64::try_from(count).ok()?,
                fence: u64::try_from(fence).ok()?,
            }),
            [0, pttl_ms] => Some(Self::Busy { pttl_ms }),
            [-1] => Some(Self::NotHeld),
            [-2] => Some(Self::Conflict),
            [-3, granted, held, retry_ms] => Some(Self::NoQuorum {
                granted: u64::try_from(granted).ok()?,
                held: u64::try_from(held).ok()?,
                retry_ms,
            }),
            _ => None,
        }
    }
}

/// What `release.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// One hold given back; `remaining` holds are left (0: the lock is free).
    Released { remaining: u64 },
    /// The owner does not hold the lock.
    NotHeld,
    /// The lock key holds a value of another type.
    Conflict,
}

impl ReleaseReply {
    pub(crate) fn decode(reply: &[i64]) -> Option<Self> {
        match *reply {
            [1, remaining] => Some(Self::Released {
                remaining: u64::try_from(remaining).ok()?,
            }),
            [-1] => Some(Self::NotHeld),
            [-2] => Some(Self::Conflict),
            _ => None,
        }
    }
}

/// An error for a reply that does not have the shape the script returns.
pub(crate) fn unexpected_reply(script: &'static str, reply: &[i64]) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected script reply",
        format!("{script} answered {reply:?}"),
    ))
}
