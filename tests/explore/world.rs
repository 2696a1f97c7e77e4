//! The small worlds the explorer enumerates: who runs which program on which client.

/// One operation of an actor's program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    /// `lock(x)`: a plain lock, waiting.
    Lock,
    /// `read_lock(x)`.
    Read,
    /// `write_lock(x)`.
    Write,
    /// `semaphore(x, 1).acquire()`.
    Sem,
    /// `lock_all([x, y])`.
    All,
    /// `lock(x)` inside the scope of this actor's newest guard: a re-entry.
    Reenter,
    /// `lock(x)` inside the context of another actor's newest guard, handed over as
    /// a spawned task would be: a re-entry from another call chain of one owner.
    Handover,
    /// `unlock()` of this actor's newest guard.
    Unlock,
    /// Drop of this actor's newest guard: a background release.
    Drop,
    /// Time passes until the watchdog renews every lease.
    Renew,
    /// An operator's `force_unlock(x)`.
    Force,
    /// The lease of `x` ends on the server (`PEXPIRE`), as it does when a holder
    /// stops renewing.
    Expire,
    /// `shutdown()` of the actor's client, while its other operations may be in
    /// flight.
    Shutdown,
    /// The address answers with another, empty server (a restart without
    /// persistence, or a replacement behind the address): every connection through
    /// the proxies is reset, and the new ones reach the other server.
    Replace,
    /// As [`Op::Replace`], but the other server has the function library already
    /// (another client of the service reached it first, or it was loaded by its
    /// operator): a request's first try there runs at once, with no reload of the
    /// library between the discovery and the request.
    ReplaceLoaded,
    /// An outage longer than a final release's record lives: nothing reaches the
    /// server for [`OUTAGE`](crate::schedule::OUTAGE) (every held request stays
    /// held) while the client's time and the server's key lifetimes move by it.
    Outage,
    /// A whole lease passes with nothing reaching the server (every held request,
    /// renewals included, stays held): every lease ends on the server's clock and
    /// on the clients' alike, as when a network partition outlasts it. (`Expire`
    /// ends a lease on the server alone.)
    Lapse,
}

impl Op {
    pub(crate) fn letter(self) -> char {
        match self {
            Op::Lock => 'l',
            Op::Read => 'r',
            Op::Write => 'w',
            Op::Sem => 's',
            Op::All => 'a',
            Op::Reenter => 'e',
            Op::Handover => 'h',
            Op::Unlock => 'u',
            Op::Drop => 'd',
            Op::Renew => 'n',
            Op::Force => 'f',
            Op::Expire => 'x',
            Op::Shutdown => 'z',
            Op::Replace => 'p',
            Op::ReplaceLoaded => 'q',
            Op::Outage => 'o',
            Op::Lapse => 't',
        }
    }

    /// Whether the operation takes a new hold of its own (not a re-entry).
    pub(crate) fn acquires(self) -> bool {
        matches!(self, Op::Lock | Op::Read | Op::Write | Op::Sem | Op::All)
    }

    /// Whether the operation gives a hold of the actor back.
    pub(crate) fn releases(self) -> bool {
        matches!(self, Op::Unlock | Op::Drop)
    }

    /// Whether the operation is the world's (time, operator), not a call chain's.
    pub(crate) fn is_world(self) -> bool {
        matches!(
            self,
            Op::Renew
                | Op::Force
                | Op::Expire
                | Op::Replace
                | Op::ReplaceLoaded
                | Op::Outage
                | Op::Lapse
        )
    }

    /// Whether the operation puts another server behind the address: a request
    /// sent before it meets the old server (and is cut off), one sent after it is
    /// the first to meet the new one.
    pub(crate) fn replaces_server(self) -> bool {
        matches!(self, Op::Replace | Op::ReplaceLoaded)
    }

    /// Whether the operation can yield a guard (an acquisition or a re-entry).
    pub(crate) fn grants(self) -> bool {
        self.acquires() || matches!(self, Op::Reenter | Op::Handover)
    }
}

/// One actor: a call chain on a client running a short program.
#[derive(Debug, Clone)]
pub(crate) struct Actor {
    pub(crate) label: &'static str,
    /// The client it runs on; `None` for the world's actor (time, operator).
    pub(crate) client: Option<usize>,
    /// The actor whose context a [`Op::Handover`] borrows.
    pub(crate) shares: Option<usize>,
    pub(crate) program: Vec<Op>,
}

/// A world: clients, actors, and how many faults a schedule may contain.
#[derive(Debug, Clone)]
pub(crate) struct World {
    pub(crate) name: &'static str,
    pub(crate) what: &'static str,
    pub(crate) clients: usize,
    pub(crate) actors: Vec<Actor>,
    pub(crate) faults: usize,
}

impl World {
    pub(crate) fn bound(&self) -> String {
        let ops: Vec<String> = self
            .actors
            .iter()
            .map(|a| {
                let program: String = a.program.iter().map(|op| op.letter()).collect();
                format!("{}:{program}", a.label)
            })
            .collect();
        format!(
            "{} actors, {} ops ({}), {} fault(s)",
            self.actors.len(),
            self.actors.iter().map(|a| a.program.len()).sum::<usize>(),
            ops.join(" "),
            self.faults
        )
    }

    /// The names the world locks.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        if self.actors.iter().any(|a| a.program.contains(&Op::All)) {
            vec!["x", "y"]
        } else {
            vec!["x"]
        }
    }

    /// The actor a hold of `actor` belongs to: itself, or the one whose context it
    /// borrows.
    pub(crate) fn group(&self, actor: usize) -> usize {
        match self.actors[actor].program.first() {
            Some(Op::Handover) => self.actors[actor].shares.unwrap_or(actor),
            _ => actor,
        }
    }
}

fn actor(label: &'static str, client: usize, program: &[Op]) -> Actor {
    Actor {
        label,
        client: Some(client),
        shares: None,
        program: program.to_vec(),
    }
}

fn chain_of(label: &'static str, client: usize, shares: usize, program: &[Op]) -> Actor {
    Actor {
        label,
        client: Some(client),
        shares: Some(shares),
        program: program.to_vec(),
    }
}

fn world_actor(program: &[Op]) -> Actor {
    Actor {
        label: "W",
        client: None,
        shares: None,
        program: program.to_vec(),
    }
}

/// How much of each world a run explores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    /// What CI runs: every interleaving without faults of `chains`, `reentry`,
    /// `semaphore`, `all`, `expiry`, `shutdown` and `discover` (faults in CI come
    /// from `--seeded`).
    Slice,
    /// The whole bound (`--full`), run to the end in under an hour with four
    /// processes: one fault per schedule in every world of two owners (`deep`, two
    /// owners with three operations each, among them), in `chains`, and in the
    /// worlds of a shutdown, a replaced server and an outage; the other
    /// three-actor worlds (`handoff`, `rw`, `expiry`, `operator`) without faults:
    /// with one, each is tens of thousands of schedules to hundreds of thousands.
    Full,
    /// Past it (`--beyond`): `handoff`, `rw`, `expiry` and `operator` with one fault,
    /// and `chains2` (two faults per schedule); hours to days (`--estimate` says how
    /// many).
    Beyond,
}

impl Bound {
    /// `--beyond`, `--full`, or else the slice.
    pub(crate) fn of(args: &[String]) -> Bound {
        if args.iter().any(|a| a == "--beyond") {
            Bound::Beyond
        } else if args.iter().any(|a| a == "--full") {
            Bound::Full
        } else {
            Bound::Slice
        }
    }
}

/// Every world, with the faults per schedule of `bound`.
pub(crate) fn worlds(bound: Bound) -> Vec<World> {
    use Op::*;
    let mut worlds = vec![
        World {
            name: "chains",
            what: "one owner's two call chains (a hand-over re-entry) and another client",
            clients: 2,
            actors: vec![
                actor("A1", 0, &[Lock, Unlock]),
                chain_of("A2", 0, 0, &[Handover, Unlock]),
                actor("B", 1, &[Lock, Unlock]),
            ],
            faults: 1,
        },
        World {
            name: "reentry",
            what: "re-entry, a dropped guard, and another client waiting",
            clients: 2,
            actors: vec![
                actor("A", 0, &[Lock, Reenter, Drop]),
                actor("B", 1, &[Lock, Unlock]),
            ],
            faults: 1,
        },
        World {
            name: "handoff",
            what: "two owners on one client (local hand-off) and a third elsewhere",
            clients: 2,
            actors: vec![
                actor("A1", 0, &[Lock, Unlock]),
                actor("A2", 0, &[Lock, Unlock]),
                actor("B", 1, &[Lock, Drop]),
            ],
            faults: 1,
        },
        World {
            name: "rw",
            what: "readers and a writer",
            clients: 2,
            actors: vec![
                actor("A", 0, &[Read, Unlock]),
                actor("B", 1, &[Write, Unlock]),
                actor("C", 1, &[Read, Drop]),
            ],
            faults: 1,
        },
        World {
            name: "semaphore",
            what: "one permit, two clients",
            clients: 2,
            actors: vec![actor("A", 0, &[Sem, Unlock]), actor("B", 1, &[Sem, Unlock])],
            faults: 1,
        },
        World {
            name: "all",
            what: "lock_all of two names against a plain lock of one",
            clients: 2,
            actors: vec![
                actor("A", 0, &[All, Unlock]),
                actor("B", 1, &[Lock, Unlock]),
            ],
            faults: 1,
        },
        World {
            name: "operator",
            what: "an operator's force-unlock, a lease that ends, renewal",
            clients: 2,
            actors: vec![
                actor("A", 0, &[Lock, Unlock]),
                actor("B", 1, &[Lock, Unlock]),
                world_actor(&[Force, Renew]),
            ],
            faults: 1,
        },
        World {
            name: "expiry",
            what: "a lease that ends on the server, then renewal",
            clients: 2,
            actors: vec![
                actor("A", 0, &[Lock, Unlock]),
                actor("B", 1, &[Lock, Unlock]),
                world_actor(&[Expire, Renew]),
            ],
            faults: 1,
        },
        World {
            name: "shutdown",
            what: "shutdown() of a client while its other chain locks, and another client",
            clients: 2,
            actors: vec![
                actor("A", 0, &[Lock, Unlock]),
                actor("S", 0, &[Shutdown]),
                actor("B", 1, &[Lock, Unlock]),
            ],
            faults: 1,
        },
        World {
            name: "replace",
            what: "two owners of one client, and the server replaced by an empty one",
            clients: 1,
            actors: vec![
                actor("A1", 0, &[Lock, Unlock]),
                actor("A2", 0, &[Lock, Unlock]),
                world_actor(&[Replace]),
            ],
            faults: 1,
        },
        World {
            name: "discover",
            what: "a chain that keeps its lock, the server replaced by an empty one, and \
                   another chain of its client the first to meet the new server",
            clients: 1,
            actors: vec![
                actor("A1", 0, &[Lock]),
                actor("A2", 0, &[Lock]),
                world_actor(&[ReplaceLoaded]),
            ],
            faults: 1,
        },
        World {
            name: "outage",
            what: "a local hand-off, and an outage longer than a final release is remembered",
            clients: 1,
            actors: vec![
                actor("A1", 0, &[Lock, Unlock]),
                actor("A2", 0, &[Lock, Unlock]),
                world_actor(&[Outage]),
            ],
            faults: 1,
        },
        World {
            name: "lapse",
            what: "two clients, and a whole lease with nothing reaching the server",
            clients: 2,
            actors: vec![
                actor("A", 0, &[Lock, Unlock]),
                actor("B", 1, &[Lock, Unlock]),
                world_actor(&[Lapse]),
            ],
            faults: 1,
        },
    ];
    if bound == Bound::Slice {
        worlds.retain(|w| {
            !matches!(
                w.name,
                "handoff" | "rw" | "operator" | "replace" | "outage" | "lapse"
            )
        });
        for world in &mut worlds {
            world.faults = 0;
        }
        return worlds;
    }
    worlds.push(World {
        name: "deep",
        what: "two owners with three operations each",
        clients: 2,
        actors: vec![
            actor("A", 0, &[Lock, Reenter, Unlock]),
            actor("B", 1, &[Lock, Unlock, Lock]),
        ],
        faults: 1,
    });
    if bound == Bound::Full {
        for world in &mut worlds {
            if matches!(world.name, "handoff" | "rw" | "expiry" | "operator") {
                world.faults = 0;
            }
        }
        return worlds;
    }
    worlds.push(World {
        name: "chains2",
        what: "the chains world with two faults per schedule",
        clients: 2,
        actors: vec![
            actor("A1", 0, &[Lock, Unlock]),
            chain_of("A2", 0, 0, &[Handover, Unlock]),
            actor("B", 1, &[Lock, Unlock]),
        ],
        faults: 2,
    });
    worlds
}
