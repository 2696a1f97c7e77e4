//! The Lua scripts of `lua/`, built once per client, and the decoding of their
//! replies: each reply is decoded here, once, into a type of its own.

use std::time::Duration;

use crate::kinds::{HoldMode, LockKind};
use crate::layout::lua::{ORDER_EDGE, PRELUDE, SOURCES};
use crate::library::{Library, Script};

use crate::who::HolderInfo;

/// Every script a client runs; built once, so that their library and SHA1s are
/// made once.
#[derive(Debug)]
pub(crate) struct Scripts {
    /// `acquire.lua` for a new acquisition of any kind: refused on a server out of
    /// memory.
    pub(crate) acquire: Script,
    /// `acquire.lua` for a re-entry: `allow-oom`, since a re-entry creates nothing.
    pub(crate) reenter: Script,
    /// `acquire_all.lua`: every lock of a set, or none.
    pub(crate) acquire_all: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) force_release: Script,
    pub(crate) inspect: Script,
    /// `withdraw.lua`: a waiter that gives up takes back the place it kept.
    pub(crate) withdraw: Script,
    /// `order_edge.lua`: an edge of the namespace's shared lock-order graph. Not in
    /// the library: used only by clients that share their lock-order edges.
    pub(crate) order_edge: redis::Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let [acquire, reenter, acquire_all, release, renew, force_release, inspect, withdraw] =
            Library::build(PRELUDE, &SOURCES);
        Self {
            acquire,
            reenter,
            acquire_all,
            release,
            renew,
            force_release,
            inspect,
            withdraw,
            order_edge: redis::Script::new(&format!("#!lua\n{ORDER_EDGE}")),
        }
    }

    /// Every script of the library.
    pub(crate) fn all(&self) -> [&Script; 8] {
        [
            &self.acquire,
            &self.reenter,
            &self.acquire_all,
            &self.release,
            &self.renew,
            &self.force_release,
            &self.inspect,
            &self.withdraw,
        ]
    }

    /// The function library every script is part of.
    pub(crate) fn library(&self) -> &Library {
        self.acquire.library()
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
    /// The owner holds the read-write lock in the other mode: a read hold asked for
    /// the write hold.
    OtherMode,
    /// The name is held (or waited for) as another kind of lock.
    OtherKind { held_as: LockKind },
    /// A new acquisition found its own owner id holding the lock already, `count`
    /// times: a hold its client does not know of, left as it was (see
    /// `acquire.lua`, "Never added to").
    HeldAlready { count: u64 },
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
            [-3] => Some(Self::OtherMode),
            [-5, kind, permits] => Some(Self::OtherKind {
                held_as: LockKind::from_code(kind, permits)?,
            }),
            [-7, count] => Some(Self::HeldAlready {
                count: u64::try_from(count).ok().filter(|count| *count > 0)?,
            }),
            _ => None,
        }
    }
}

/// What `acquire_all.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireAllReply {
    /// Every lock taken or re-entered: the hold count and fencing token (0: none)
    /// of each, in order.
    Acquired(Vec<(u64, u64)>),
    /// The name at this index (from 0) is held by another owner, for `pttl_ms` more
    /// milliseconds (negative: unknown).
    Busy { index: usize, pttl_ms: i64 },
    /// The name at this index was to be re-entered, but is no longer held by its owner.
    NotHeld { index: usize },
    /// A key of the name at this index holds a value of another type.
    Conflict { index: usize },
    /// The name at this index is held as another kind of lock.
    OtherKind { index: usize, held_as: LockKind },
    /// The name at this index was to be newly taken, but the set's owner id holds
    /// it already, `count` times (see [`AcquireReply::HeldAlready`]).
    HeldAlready { index: usize, count: u64 },
}

impl AcquireAllReply {
    /// Decodes the reply for a set of `names` names.
    pub(crate) fn decode(reply: &[i64], names: usize) -> Option<Self> {
        let index = |i: i64| {
            usize::try_from(i)
                .ok()?
                .checked_sub(1)
                .filter(|i| *i < names)
        };
        match reply {
            [1, rest @ ..] if rest.len() == 2 * names => rest
                .chunks_exact(2)
                .map(|pair| Some((u64::try_from(pair[0]).ok()?, u64::try_from(pair[1]).ok()?)))
                .collect::<Option<Vec<_>>>()
                .map(Self::Acquired),
            [0, i, pttl_ms] => Some(Self::Busy {
                index: index(*i)?,
                pttl_ms: *pttl_ms,
            }),
            [-1, i] => Some(Self::NotHeld { index: index(*i)? }),
            [-2, i] => Some(Self::Conflict { index: index(*i)? }),
            [-5, i, kind, permits] => Some(Self::OtherKind {
                index: index(*i)?,
                held_as: LockKind::from_code(*kind, *permits)?,
            }),
            [-7, i, count] => Some(Self::HeldAlready {
                index: index(*i)?,
                count: u64::try_from(*count).ok().filter(|count| *count > 0)?,
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
    /// The last hold given back, and the lock handed to the release's successor
    /// with fencing token `fence` (0: none).
    Handed { fence: u64 },
    /// The owner does not hold the lock.
    NotHeld,
    /// The lock key holds a value of another type.
    Conflict,
}

impl ReleaseReply {
    /// `release.lua`'s "not held, and its record says this release was not
    /// applied" (a force-unlock's record, say): read as [`ReleaseReply::NotHeld`],
    /// and never taken for an applied release that left no record.
    pub(crate) const NOT_APPLIED: i64 = -8;

    pub(crate) fn decode(reply: &[i64]) -> Option<Self> {
        match *reply {
            [1, remaining] => Some(Self::Released {
                remaining: u64::try_from(remaining).ok()?,
            }),
            [2, fence] => Some(Self::Handed {
                fence: u64::try_from(fence).ok()?,
            }),
            [-1] | [Self::NOT_APPLIED] => Some(Self::NotHeld),
            [-2] => Some(Self::Conflict),
            _ => None,
        }
    }
}

/// What `inspect.lua` answered on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InspectReply {
    /// The state of the lock on that node.
    View(LockView),
    /// A key of the lock holds a value of another type.
    Conflict,
}

/// The state of a lock on one node, as `inspect.lua` reads it. For a lock that
/// several owners may hold (readers, permits), `hold_count` is the sum of their
/// counts, `lease_remaining` the latest end of their leases and `fencing_token` the
/// writer's. A free lock's view is the default, but for its counter and listeners.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LockView {
    pub(crate) held: bool,
    pub(crate) hold_count: u64,
    pub(crate) lease_remaining: Option<Duration>,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) last_fencing_token: Option<u64>,
    /// What is at the name; `None` when nothing holds a plain lock there.
    pub(crate) kind: Option<LockKind>,
    /// Every holder (one for a held plain lock).
    pub(crate) holders: Vec<HolderView>,
    /// Waiters that keep a place in Redis: writers of a read-write lock, a fair
    /// lock's queue.
    pub(crate) waiting: u64,
    /// Connections subscribed to the lock's release channel; `None` when the
    /// server refused `PUBSUB`.
    pub(crate) listening: Option<u64>,
}

/// One holder, as `inspect.lua` tells it (never its owner id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HolderView {
    /// How it holds the lock (the plain lock's holder and a fair lock's are
    /// exclusive).
    pub(crate) mode: HoldMode,
    pub(crate) hold_count: u64,
    pub(crate) lease_remaining: Option<Duration>,
    pub(crate) fencing_token: Option<u64>,
    /// What its client wrote of it, when it wrote anything.
    pub(crate) info: Option<HolderInfo>,
}

/// A holder's mode as `inspect.lua` numbers it: 0 the plain lock's holder, 1 a
/// reader, 2 the writer, 3 a permit, 4 a fair lock's holder.
fn hold_mode(code: i64) -> Option<HoldMode> {
    Some(match code {
        0 | 4 => HoldMode::Exclusive,
        1 => HoldMode::Read,
        2 => HoldMode::Write,
        3 => HoldMode::Permit,
        _ => return None,
    })
}

impl InspectReply {
    /// Decodes `inspect.lua`'s reply: numbers, then one string per holder (what
    /// its client wrote of it, `""` for nothing), in the holders' order.
    pub(crate) fn decode_values(reply: &[redis::Value]) -> Option<Self> {
        let numbers: Vec<i64> = reply
            .iter()
            .map_while(|value| match value {
                redis::Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect();
        let mut decoded = Self::decode(&numbers)?;
        let texts = &reply[numbers.len()..];
        if let Self::View(view) = &mut decoded {
            if texts.len() != view.holders.len() && !texts.is_empty() {
                return None;
            }
            for (holder, text) in view.holders.iter_mut().zip(texts) {
                holder.info = match text {
                    redis::Value::BulkString(bytes) => HolderInfo::parse(bytes),
                    redis::Value::SimpleString(text) => HolderInfo::parse(text.as_bytes()),
                    _ => return None,
                };
            }
        }
        Some(decoded)
    }

    pub(crate) fn decode(reply: &[i64]) -> Option<Self> {
        let positive = |value: i64| u64::try_from(value).ok().filter(|v| *v > 0);
        match *reply {
            [-2] => Some(Self::Conflict),
            [0, 0, -2, 0, counter, listening] => Some(Self::View(LockView {
                last_fencing_token: positive(counter),
                listening: u64::try_from(listening).ok(),
                ..LockView::default()
            })),
            [3, kind, permits, counter, waiting, listening, n, ref rest @ ..]
                if usize::try_from(n).ok()?.checked_mul(4)? == rest.len() =>
            {
                let holders = rest
                    .chunks_exact(4)
                    .map(|h| {
                        Some(HolderView {
                            mode: hold_mode(h[0])?,
                            hold_count: u64::try_from(h[1]).ok()?,
                            lease_remaining: positive(h[2]).map(Duration::from_millis),
                            fencing_token: positive(h[3]),
                            info: None,
                        })
                    })
                    .collect::<Option<Vec<_>>>()?;
                Some(Self::View(LockView {
                    held: !holders.is_empty(),
                    hold_count: holders.iter().map(|h| h.hold_count).sum(),
                    lease_remaining: holders.iter().filter_map(|h| h.lease_remaining).max(),
                    fencing_token: holders.iter().find_map(|h| h.fencing_token),
                    last_fencing_token: positive(counter),
                    kind: Some(LockKind::from_code(kind, permits)?),
                    holders,
                    waiting: u64::try_from(waiting).ok()?,
                    listening: u64::try_from(listening).ok(),
                }))
            }
            _ => None,
        }
    }
}

/// What `force_release.lua` answered on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForceReleaseReply {
    /// The lock was deleted (and its waiters told).
    Deleted,
    /// There was no lock.
    Free,
    /// The lock key holds a value of another type (left untouched).
    Conflict,
}

impl ForceReleaseReply {
    pub(crate) fn decode(reply: i64) -> Option<Self> {
        match reply {
            1 => Some(Self::Deleted),
            0 => Some(Self::Free),
            -2 => Some(Self::Conflict),
            _ => None,
        }
    }
}

/// What `renew.lua` answered for one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RenewReply {
    /// The owner holds it: renewed, or written back where it was free.
    Held,
    /// The owner does not hold it, and there is no key there (its lease ended, it
    /// was deleted, or the server came back without it).
    Free,
    /// The owner does not hold it, and the key is there (another owner holds it,
    /// or it holds what distlock did not write).
    Taken,
}

/// What `renew.lua` answered for one lock; `None` for no answer that can be read
/// (an error inside a pipeline, a node that did not answer).
pub(crate) fn renew_reply(reply: &redis::Value) -> Option<RenewReply> {
    match reply {
        redis::Value::Int(1 | 2) => Some(RenewReply::Held),
        redis::Value::Int(-1) => Some(RenewReply::Free),
        redis::Value::Int(0) => Some(RenewReply::Taken),
        _ => None,
    }
}

/// One request's answer in a script's reply: its numbers, or, for `{-6, error}` (a
/// command it called was refused, see `lua/lock.lua`'s `answer`), that error, as
/// Redis words it (`LockError` tells a refused permission by those words).
pub(crate) fn request_answer(
    script: &'static str,
    reply: redis::Value,
) -> redis::RedisResult<Vec<i64>> {
    if let redis::Value::Array(parts) = &reply {
        if let [redis::Value::Int(-6), text] = parts.as_slice() {
            let text = match text {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                redis::Value::SimpleString(text) => text.clone(),
                other => format!("{other:?}"),
            };
            return Err(redis::RedisError::from((
                redis::ErrorKind::Extension,
                "a command the script called was refused",
                format!("{script}: {text}"),
            )));
        }
    }
    Ok(redis::from_redis_value(reply)?)
}

/// An error for a reply that does not have the shape the script returns.
pub(crate) fn unexpected_reply(
    script: &'static str,
    reply: &(impl std::fmt::Debug + ?Sized),
) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected script reply",
        format!("{script} answered {reply:?}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_reply_decodes_with_its_indexes_from_zero() {
        assert_eq!(
            AcquireAllReply::decode(&[1, 1, 0, 2, 7], 2),
            Some(AcquireAllReply::Acquired(vec![(1, 0), (2, 7)]))
        );
        assert_eq!(
            AcquireAllReply::decode(&[1, 1, 0], 2),
            None,
            "one name short"
        );
        assert_eq!(
            AcquireAllReply::decode(&[0, 2, 150], 2),
            Some(AcquireAllReply::Busy {
                index: 1,
                pttl_ms: 150
            })
        );
        assert_eq!(
            AcquireAllReply::decode(&[0, 3, 150], 2),
            None,
            "no such name"
        );
        assert_eq!(
            AcquireAllReply::decode(&[0, 0, 150], 2),
            None,
            "indexes start at 1"
        );
        assert_eq!(
            AcquireAllReply::decode(&[-1, 1], 2),
            Some(AcquireAllReply::NotHeld { index: 0 })
        );
        assert_eq!(
            AcquireAllReply::decode(&[-2, 2], 2),
            Some(AcquireAllReply::Conflict { index: 1 })
        );
    }

    #[test]
    fn replies_decode_into_their_types() {
        assert_eq!(
            AcquireReply::decode(&[1, 2, 9]),
            Some(AcquireReply::Acquired { count: 2, fence: 9 })
        );
        assert_eq!(
            AcquireReply::decode(&[0, -1]),
            Some(AcquireReply::Busy { pttl_ms: -1 })
        );
        assert_eq!(AcquireReply::decode(&[1, -2, 0]), None);
        assert_eq!(AcquireReply::decode(&[-3, 1, 1, 5]), None);
        assert_eq!(
            ReleaseReply::decode(&[1, 0]),
            Some(ReleaseReply::Released { remaining: 0 })
        );
        assert_eq!(
            ReleaseReply::decode(&[2, 9]),
            Some(ReleaseReply::Handed { fence: 9 })
        );
        assert_eq!(ReleaseReply::decode(&[2, -1]), None);
        assert_eq!(ReleaseReply::decode(&[-1]), Some(ReleaseReply::NotHeld));
        assert_eq!(
            InspectReply::decode(&[3, 0, 0, 7, 0, 2, 1, 0, 2, 500, 0]),
            Some(InspectReply::View(LockView {
                held: true,
                hold_count: 2,
                lease_remaining: Some(Duration::from_millis(500)),
                fencing_token: None,
                last_fencing_token: Some(7),
                kind: Some(LockKind::Exclusive),
                holders: vec![HolderView {
                    mode: HoldMode::Exclusive,
                    hold_count: 2,
                    lease_remaining: Some(Duration::from_millis(500)),
                    fencing_token: None,
                    info: None,
                }],
                waiting: 0,
                listening: Some(2),
            }))
        );
        let Some(InspectReply::View(readers)) =
            InspectReply::decode(&[3, 1, 0, 4, 1, -1, 2, 1, 2, 900, 0, 1, 1, 300, 0])
        else {
            panic!("two readers decode");
        };
        assert_eq!(
            (readers.held, readers.hold_count, readers.waiting),
            (true, 3, 1)
        );
        assert_eq!(readers.listening, None, "PUBSUB refused");
        assert_eq!(readers.lease_remaining, Some(Duration::from_millis(900)));
        assert_eq!(readers.kind, Some(LockKind::ReadWrite));
        assert_eq!(
            InspectReply::decode(&[3, 2, 4, 0, 0, 0, 1, 3, 1, 900]),
            None,
            "a holder short"
        );
        // The old "another permit count" answer is no longer one.
        assert_eq!(AcquireReply::decode(&[-4, 3]), None);
        assert_eq!(AcquireReply::decode(&[-3]), Some(AcquireReply::OtherMode));
        assert_eq!(InspectReply::decode(&[2, 0, 0, 0, 0, 0]), None);
        assert_eq!(
            InspectReply::decode(&[0, 0, -2, 0, 4]),
            None,
            "no listeners"
        );
        assert_eq!(
            InspectReply::decode(&[0, 0, -2, 0, 4, 0]),
            Some(InspectReply::View(LockView {
                held: false,
                hold_count: 0,
                lease_remaining: None,
                fencing_token: None,
                last_fencing_token: Some(4),
                kind: None,
                holders: Vec::new(),
                waiting: 0,
                listening: Some(0),
            }))
        );
        assert_eq!(
            AcquireReply::decode(&[-5, 1, 0]),
            Some(AcquireReply::OtherKind {
                held_as: LockKind::ReadWrite
            })
        );
        assert_eq!(
            AcquireReply::decode(&[-5, 2, 4]),
            Some(AcquireReply::OtherKind {
                held_as: LockKind::Semaphore { permits: 4 }
            })
        );
        assert_eq!(AcquireReply::decode(&[-5, 9, 0]), None);
        assert_eq!(AcquireReply::decode(&[-5, 2, -1]), None);
        assert_eq!(
            AcquireReply::decode(&[-7, 1]),
            Some(AcquireReply::HeldAlready { count: 1 })
        );
        assert_eq!(AcquireReply::decode(&[-7, 0]), None, "no hold is none held");
        assert_eq!(
            AcquireAllReply::decode(&[-7, 2, 1], 2),
            Some(AcquireAllReply::HeldAlready { index: 1, count: 1 })
        );
        assert_eq!(AcquireAllReply::decode(&[-7, 3, 1], 2), None);
        assert_eq!(
            ForceReleaseReply::decode(-2),
            Some(ForceReleaseReply::Conflict)
        );
        assert_eq!(ForceReleaseReply::decode(3), None);
    }

    #[test]
    fn holder_texts_follow_the_numbers_one_per_holder() {
        use redis::Value::{BulkString, Int};
        let held = || [0, 0, 0, 0, 0, 1, 0, 1, 900, 0].map(Int);
        let head = |rest: &[redis::Value]| {
            let mut reply = vec![Int(3)];
            reply.extend(held());
            reply.extend_from_slice(rest);
            reply
        };
        let text = "2140 1700000000000 4121 orders-api host-3 orders::place_order".to_owned();
        let reply = head(&[BulkString(text.into_bytes())]);
        let Some(InspectReply::View(view)) = InspectReply::decode_values(&reply) else {
            panic!("a held lock");
        };
        let info = view.holders[0].info.as_ref().map(|info| info.site.as_str());
        assert_eq!(info, Some("orders::place_order"));
        // A holder whose client wrote nothing, and a reply without texts.
        for reply in [head(&[BulkString(Vec::new())]), head(&[])] {
            let Some(InspectReply::View(view)) = InspectReply::decode_values(&reply) else {
                panic!("a held lock");
            };
            assert_eq!(view.holders[0].info, None);
        }
        // Two texts for one holder: not a reply of inspect.lua.
        let two = head(&[BulkString(Vec::new()), BulkString(Vec::new())]);
        assert_eq!(InspectReply::decode_values(&two), None);
    }
}
