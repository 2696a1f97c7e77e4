//! How the answers of several nodes make one verdict: Redlock's majority rules for
//! acquire, release, renew, inspect and force-release, as pure functions.
//!
//! An operation on Redlock goes to every master; each master answers as one server
//! would (the replies of `scripts.rs`), or not at all. These functions combine
//! those answers. With a single endpoint the same rules hold with one node and a
//! quorum of one, so every operation is written once.

use crate::scripts::{
    AcquireReply, ForceReleaseReply, InspectReply, LockView, ReleaseReply, RenewReply,
};

/// The verdict on one acquire attempt sent to every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireVote {
    /// A majority granted it: the deepest hold count among the grants.
    Granted { count: u64 },
    /// Too few granted it.
    Short {
        /// The nodes (by index) that granted it: their grants must be given back.
        granted: Vec<usize>,
        /// Whether a node found a key of another type.
        conflict: bool,
        /// A node's refusal of what was asked (another mode of a read-write lock held
        /// by the owner, another permit count), to report as it is; or a node where
        /// a new acquisition found its owner id holding already.
        refused: Option<AcquireReply>,
        /// How many nodes answered that another owner holds it.
        busy: usize,
        /// When a majority is held by other owners, how long to wait for them at
        /// most: the shortest lease among them (0: ending now; -1: unknown). `None` when
        /// no majority holds it elsewhere (a split vote, or silent nodes): try again
        /// soon.
        wait_ms: Option<i64>,
    },
}

/// Combines the nodes' answers to one acquire attempt (`None`: no answer, or one
/// that could not be read).
pub(crate) fn acquire(replies: &[Option<AcquireReply>], quorum: usize) -> AcquireVote {
    let grants: Vec<(usize, u64)> = replies
        .iter()
        .enumerate()
        .filter_map(|(index, reply)| match reply {
            Some(AcquireReply::Acquired { count, .. }) => Some((index, *count)),
            _ => None,
        })
        .collect();
    if grants.len() >= quorum {
        let count = grants.iter().map(|(_, count)| *count).max().unwrap_or(1);
        return AcquireVote::Granted { count };
    }
    let busy: Vec<i64> = replies
        .iter()
        .filter_map(|reply| match reply {
            Some(AcquireReply::Busy { pttl_ms }) => Some(*pttl_ms),
            _ => None,
        })
        .collect();
    let wait_ms = (busy.len() >= quorum).then(|| {
        busy.iter()
            .copied()
            .filter(|ms| *ms >= 0)
            .min()
            .unwrap_or(-1)
    });
    AcquireVote::Short {
        granted: grants.into_iter().map(|(index, _)| index).collect(),
        conflict: replies.contains(&Some(AcquireReply::Conflict)),
        refused: replies.iter().find_map(|reply| match reply {
            Some(
                refusal @ (AcquireReply::OtherMode
                | AcquireReply::OtherKind { .. }
                | AcquireReply::HeldAlready { .. }),
            ) => Some(*refusal),
            _ => None,
        }),
        busy: busy.len(),
        wait_ms,
    }
}

/// Combines the nodes' answers to one release: released where a majority gave the
/// hold back (the most holds left among them); a conflict anywhere is a conflict;
/// otherwise the first failure, or not held.
pub(crate) fn release<E>(
    replies: impl IntoIterator<Item = Result<ReleaseReply, E>>,
    quorum: usize,
) -> Result<ReleaseReply, E> {
    let (mut released, mut first_error) = (Vec::new(), None);
    for reply in replies {
        match reply {
            Ok(ReleaseReply::Released { remaining }) => released.push(remaining),
            // Redlock releases carry no successor: a single endpoint's answer.
            Ok(handed @ ReleaseReply::Handed { .. }) => return Ok(handed),
            Ok(ReleaseReply::Conflict) => return Ok(ReleaseReply::Conflict),
            Ok(ReleaseReply::NotHeld) => {}
            Err(err) => first_error = first_error.or(Some(err)),
        }
    }
    if released.len() >= quorum {
        let remaining = released.into_iter().max().unwrap_or(0);
        return Ok(ReleaseReply::Released { remaining });
    }
    first_error.map_or(Ok(ReleaseReply::NotHeld), Err)
}

/// The verdict on one renewal sent to every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewVote {
    /// `Some(true)`: a majority renewed it; `Some(false)`: a majority can no longer
    /// have it (lost); `None`: neither (retried soon).
    pub(crate) held: Option<bool>,
    /// The nodes (by index) to write the lock back on: where the owner still holds
    /// a majority, the nodes where the lock is free (no key: it came back empty, or
    /// its lease ended there). A node where another owner holds it is never among
    /// them; it counts against the majority until the lock is free there.
    pub(crate) repair: Vec<usize>,
}

/// Combines the nodes' answers to one renewal (`None`: no answer): renewed where a
/// majority renewed it, lost once a majority can no longer have it, otherwise
/// unknown (retried soon); and where it is renewed, the nodes where it is free, to
/// write it back on, so that nodes that lose it one after another (restarts
/// without persistence, spread over time) do not add up to a lost majority.
pub(crate) fn renew(replies: &[Option<RenewReply>], quorum: usize, nodes: usize) -> RenewVote {
    let held = replies
        .iter()
        .filter(|reply| **reply == Some(RenewReply::Held))
        .count();
    // Every answer but held.
    let gone = replies.iter().flatten().count() - held;
    if held >= quorum {
        let repair = replies
            .iter()
            .enumerate()
            .filter(|(_, reply)| **reply == Some(RenewReply::Free))
            .map(|(index, _)| index)
            .collect();
        return RenewVote {
            held: Some(true),
            repair,
        };
    }
    RenewVote {
        held: (gone > nodes - quorum).then_some(false),
        repair: Vec::new(),
    }
}

/// The verdict on one inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InspectVote {
    /// The state a majority sees.
    View(LockView),
    /// A key of the lock holds a value of another type.
    Conflict,
    /// Too few nodes answered: `got` did.
    Short { got: usize },
}

/// Combines the nodes' views of a lock: held when a majority holds it (the deepest
/// count, the shortest lease), otherwise free (with the highest fencing token ever
/// issued on any node). With several nodes a minority that does not answer does not
/// hide the state; with one, its failure is the answer.
pub(crate) fn inspect<E>(
    replies: Vec<Result<InspectReply, E>>,
    quorum: usize,
) -> Result<InspectVote, E> {
    let nodes = replies.len();
    let mut views = Vec::with_capacity(nodes);
    for reply in replies {
        match reply {
            Ok(InspectReply::View(view)) => views.push(view),
            Ok(InspectReply::Conflict) => return Ok(InspectVote::Conflict),
            Err(err) if nodes == 1 => return Err(err),
            Err(_) => {}
        }
    }
    if views.len() < quorum {
        return Ok(InspectVote::Short { got: views.len() });
    }
    // A client with waiters listens on every node: the most any node counts.
    let listening = views.iter().filter_map(|view| view.listening).max();
    let holding: Vec<&LockView> = views.iter().filter(|view| view.held).collect();
    if holding.len() >= quorum {
        let mut view = holding[0].clone();
        view.listening = listening;
        view.hold_count = holding
            .iter()
            .map(|view| view.hold_count)
            .max()
            .unwrap_or(0);
        view.lease_remaining = holding.iter().filter_map(|view| view.lease_remaining).min();
        return Ok(InspectVote::View(view));
    }
    let mut view = views
        .iter()
        .find(|view| !view.held)
        .unwrap_or(&views[0])
        .clone();
    view.last_fencing_token = views
        .iter()
        .filter_map(|view| view.last_fencing_token)
        .max();
    view.listening = listening;
    Ok(InspectVote::View(view))
}

/// The verdict on one force-release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForceVote {
    /// Whether a lock was deleted on some node.
    Done { deleted: bool },
    /// A key of the lock holds a value of another type (nothing deleted there).
    Conflict,
}

/// Combines the nodes' answers to a force-release: deleting anywhere counts (an
/// operator wants the lock gone everywhere); a failure counts only when nothing was
/// deleted.
pub(crate) fn force_release<E>(
    replies: impl IntoIterator<Item = Result<ForceReleaseReply, E>>,
) -> Result<ForceVote, E> {
    let (mut deleted, mut first_error) = (false, None);
    for reply in replies {
        match reply {
            Ok(ForceReleaseReply::Deleted) => deleted = true,
            Ok(ForceReleaseReply::Free) => {}
            Ok(ForceReleaseReply::Conflict) => return Ok(ForceVote::Conflict),
            Err(err) => first_error = first_error.or(Some(err)),
        }
    }
    match first_error {
        Some(err) if !deleted => Err(err),
        _ => Ok(ForceVote::Done { deleted }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const GRANT: Option<AcquireReply> = Some(AcquireReply::Acquired { count: 1, fence: 0 });
    const SILENT: Option<AcquireReply> = None;

    fn busy(pttl_ms: i64) -> Option<AcquireReply> {
        Some(AcquireReply::Busy { pttl_ms })
    }

    #[test]
    fn a_majority_of_grants_is_granted_with_the_deepest_count() {
        let deeper = Some(AcquireReply::Acquired { count: 3, fence: 0 });
        assert_eq!(
            acquire(&[GRANT, deeper, SILENT], 2),
            AcquireVote::Granted { count: 3 }
        );
        assert_eq!(acquire(&[GRANT], 1), AcquireVote::Granted { count: 1 });
    }

    #[test]
    fn a_minority_of_grants_is_given_back() {
        assert_eq!(
            acquire(&[GRANT, busy(40), SILENT, GRANT, SILENT], 3),
            AcquireVote::Short {
                granted: vec![0, 3],
                conflict: false,
                refused: None,
                busy: 1,
                wait_ms: None,
            }
        );
    }

    #[test]
    fn a_majority_held_elsewhere_waits_for_the_shortest_lease() {
        assert_eq!(
            acquire(&[busy(900), busy(-1), busy(300)], 2),
            AcquireVote::Short {
                granted: vec![],
                conflict: false,
                refused: None,
                busy: 3,
                wait_ms: Some(300),
            }
        );
        let Short { wait_ms, .. } = acquire(&[busy(-1), busy(-1), SILENT], 2) else {
            panic!("not granted");
        };
        assert_eq!(wait_ms, Some(-1), "held without a known lease");
        assert_eq!(
            acquire(&[busy(100)], 1),
            AcquireVote::Short {
                granted: vec![],
                conflict: false,
                refused: None,
                busy: 1,
                wait_ms: Some(100),
            },
            "one server: busy waits for the holder's lease"
        );
    }

    use AcquireVote::Short;

    #[test]
    fn a_conflict_on_any_node_is_reported() {
        let conflict = Some(AcquireReply::Conflict);
        assert!(matches!(
            acquire(&[GRANT, conflict, SILENT], 2),
            Short { conflict: true, .. }
        ));
        assert!(matches!(
            acquire(&[GRANT, Some(AcquireReply::OtherMode), SILENT], 2),
            Short {
                refused: Some(AcquireReply::OtherMode),
                ..
            }
        ));
    }

    #[test]
    fn a_release_counts_by_majority() {
        let released = |remaining| Ok::<_, &str>(ReleaseReply::Released { remaining });
        assert_eq!(
            release([released(0), released(1), Err("down")], 2),
            Ok(ReleaseReply::Released { remaining: 1 })
        );
        assert_eq!(
            release([released(0), Ok(ReleaseReply::NotHeld), Err("down")], 2),
            Err("down")
        );
        assert_eq!(
            release(
                [
                    released(0),
                    Ok(ReleaseReply::NotHeld),
                    Ok(ReleaseReply::NotHeld)
                ],
                2
            ),
            Ok(ReleaseReply::NotHeld)
        );
        assert_eq!(
            release([released(0), Ok(ReleaseReply::Conflict), released(0)], 2),
            Ok(ReleaseReply::Conflict)
        );
        assert_eq!(release([Err::<ReleaseReply, _>("down")], 1), Err("down"));
    }

    #[test]
    fn a_renewal_is_lost_only_when_no_majority_can_have_it() {
        use RenewReply::{Free, Held, Taken};
        let verdict =
            |replies: &[Option<RenewReply>], quorum, nodes| renew(replies, quorum, nodes).held;
        assert_eq!(verdict(&[Some(Held), Some(Held), None], 2, 3), Some(true));
        assert_eq!(verdict(&[Some(Free), Some(Taken), None], 2, 3), Some(false));
        assert_eq!(verdict(&[Some(Held), Some(Free), None], 2, 3), None);
        assert_eq!(verdict(&[None, None, None], 2, 3), None);
        assert_eq!(verdict(&[Some(Free)], 1, 1), Some(false));
        assert_eq!(
            verdict(&[Some(Free), Some(Taken), None, None, Some(Held)], 3, 5),
            None,
            "two nodes silent may still hold it with the one that renewed"
        );
    }

    #[test]
    fn a_held_majority_writes_the_lock_back_where_it_is_free() {
        use RenewReply::{Free, Held, Taken};
        let vote = renew(
            &[Some(Free), Some(Held), Some(Taken), Some(Held), Some(Held)],
            3,
            5,
        );
        assert_eq!(
            vote,
            RenewVote {
                held: Some(true),
                repair: vec![0],
            },
            "never where another owner holds it"
        );
        let vote = renew(
            &[Some(Free), Some(Free), Some(Held), Some(Held), None],
            3,
            5,
        );
        assert_eq!(vote.held, None, "no majority: nothing written back");
        assert!(vote.repair.is_empty());
        let vote = renew(
            &[Some(Free), Some(Free), Some(Free), Some(Held), Some(Held)],
            3,
            5,
        );
        assert_eq!(vote.held, Some(false), "lost: nothing written back");
        assert!(vote.repair.is_empty());
    }

    fn view(
        held: bool,
        count: u64,
        lease_ms: u64,
        last: u64,
    ) -> Result<InspectReply, &'static str> {
        Ok(InspectReply::View(LockView {
            held,
            hold_count: count,
            lease_remaining: (lease_ms > 0).then(|| Duration::from_millis(lease_ms)),
            fencing_token: None,
            last_fencing_token: (last > 0).then_some(last),
            kind: None,
            holders: Vec::new(),
            waiting: 0,
            listening: Some(0),
        }))
    }

    #[test]
    fn inspect_shows_what_a_majority_sees() {
        let Ok(InspectVote::View(held)) = inspect(
            vec![view(true, 1, 900, 0), view(true, 2, 300, 0), Err("down")],
            2,
        ) else {
            panic!("a majority answered");
        };
        assert!(held.held);
        assert_eq!(held.hold_count, 2);
        assert_eq!(held.lease_remaining, Some(Duration::from_millis(300)));

        let Ok(InspectVote::View(free)) = inspect(
            vec![
                view(true, 1, 900, 4),
                view(false, 0, 0, 7),
                view(false, 0, 0, 5),
            ],
            2,
        ) else {
            panic!("all answered");
        };
        assert!(!free.held);
        assert_eq!(free.last_fencing_token, Some(7));

        assert_eq!(
            inspect(vec![view(true, 1, 900, 0), Err("down"), Err("down")], 2),
            Ok(InspectVote::Short { got: 1 })
        );
        assert_eq!(inspect::<&str>(vec![Err("down")], 1), Err("down"));
        assert_eq!(
            inspect(vec![view(false, 0, 0, 0), Ok(InspectReply::Conflict)], 2),
            Ok(InspectVote::Conflict)
        );
    }

    #[test]
    fn force_release_counts_any_deletion() {
        use ForceReleaseReply::{Conflict, Deleted, Free};
        assert_eq!(
            force_release([Ok(Free), Ok(Deleted), Err("down")]),
            Ok(ForceVote::Done { deleted: true })
        );
        assert_eq!(force_release([Ok(Free), Err("down")]), Err("down"));
        assert_eq!(
            force_release([Ok::<_, &str>(Free)]),
            Ok(ForceVote::Done { deleted: false })
        );
        assert_eq!(
            force_release([Ok::<_, &str>(Conflict), Ok(Deleted)]),
            Ok(ForceVote::Conflict)
        );
    }
}
