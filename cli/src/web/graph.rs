//! The wait-for graph, drawn from the deadlock detector's records: a chain that
//! holds locks and waits for another writes, under each owner id it holds locks
//! with, `<ns>:{<owner>}:waits = "<wait id> <locks held> <beat> <key waited for>"`
//! (see `ops/deadlock.rs` in distlock-core). The graph has an edge from that owner
//! to the lock it waits for, and from each lock waited for to the owners holding
//! it (read from the lock itself). A strongly connected part of more than one node
//! is a cycle: its edges are marked.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// A node: an owner or a lock.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub(crate) struct Node {
    /// `owner` or `lock`.
    pub(crate) kind: &'static str,
    /// The owner id or the lock name.
    pub(crate) id: String,
    /// What the page writes on it: the lock name, or the owner's service when its
    /// client wrote one.
    pub(crate) label: String,
}

/// An edge: an owner waits for a lock, or a lock is held by an owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Edge {
    /// The index of its tail in [`Graph::nodes`].
    pub(crate) from: usize,
    /// The index of its head.
    pub(crate) to: usize,
    /// `waits` or `held_by`.
    pub(crate) what: &'static str,
    /// Whether it is on a cycle.
    pub(crate) cycle: bool,
}

/// The wait-for graph.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Graph {
    /// Its nodes.
    pub(crate) nodes: Vec<Node>,
    /// Its edges.
    pub(crate) edges: Vec<Edge>,
    /// Whether some edge is on a cycle.
    pub(crate) has_cycle: bool,
}

/// A wait-for record, read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct WaitRecord {
    /// The owner id whose record it is.
    pub(crate) owner: String,
    /// The key of the lock its chain waits for.
    pub(crate) lock_key: Vec<u8>,
}

impl WaitRecord {
    /// Reads the record of `owner`; `None` when it is not of the form above.
    pub(crate) fn parse(owner: String, value: &[u8]) -> Option<Self> {
        let mut words = value.splitn(4, |byte| *byte == b' ');
        let _wait_id = words.next()?;
        let _held = words.next()?;
        let _beat = words.next()?;
        let lock_key = words.next().filter(|key| !key.is_empty())?.to_vec();
        Some(Self { owner, lock_key })
    }
}

impl Graph {
    /// The graph of `waits` (owner → name of the lock waited for), with the
    /// holders of each lock waited for from `holders_of` (name → owner ids), and
    /// the owners' services from `service_of`.
    pub(crate) fn build(
        waits: &[(String, String)],
        holders_of: impl Fn(&str) -> Vec<String>,
        service_of: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let mut graph = Self::default();
        let mut index: BTreeMap<(&'static str, String), usize> = BTreeMap::new();
        let mut node = |graph: &mut Self, kind: &'static str, id: &str| -> usize {
            *index.entry((kind, id.to_owned())).or_insert_with(|| {
                let label = if kind == "owner" {
                    service_of(id).unwrap_or_else(|| short_owner(id))
                } else {
                    id.to_owned()
                };
                graph.nodes.push(Node {
                    kind,
                    id: id.to_owned(),
                    label,
                });
                graph.nodes.len() - 1
            })
        };
        let mut locks = BTreeSet::new();
        for (owner, lock) in waits {
            let from = node(&mut graph, "owner", owner);
            let to = node(&mut graph, "lock", lock);
            graph.edge(from, to, "waits");
            locks.insert(lock.clone());
        }
        for lock in locks {
            let from = node(&mut graph, "lock", &lock);
            for owner in holders_of(&lock) {
                let to = node(&mut graph, "owner", &owner);
                graph.edge(from, to, "held_by");
            }
        }
        graph.mark_cycles();
        graph
    }

    fn edge(&mut self, from: usize, to: usize, what: &'static str) {
        self.edges.push(Edge {
            from,
            to,
            what,
            cycle: false,
        });
    }

    /// Marks the edges inside a strongly connected part of more than one node.
    fn mark_cycles(&mut self) {
        let part = components(self.nodes.len(), &self.edges);
        let mut size = vec![0usize; self.nodes.len()];
        for &p in &part {
            if let Some(count) = size.get_mut(p) {
                *count += 1;
            }
        }
        for edge in &mut self.edges {
            let (a, b) = (part[edge.from], part[edge.to]);
            edge.cycle = a == b && size[a] > 1;
        }
        self.has_cycle = self.edges.iter().any(|edge| edge.cycle);
    }
}

/// The strongly connected part of each node (Kosaraju: an order of finishing on
/// the graph, then a walk of the reversed graph in the reverse of that order).
fn components(n: usize, edges: &[Edge]) -> Vec<usize> {
    let mut out = vec![Vec::new(); n];
    let mut back = vec![Vec::new(); n];
    for edge in edges {
        out[edge.from].push(edge.to);
        back[edge.to].push(edge.from);
    }
    let mut seen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    for start in 0..n {
        if seen[start] {
            continue;
        }
        seen[start] = true;
        let mut stack = vec![(start, 0usize)];
        while let Some((node, next)) = stack.pop() {
            if let Some(&to) = out[node].get(next) {
                stack.push((node, next + 1));
                if !seen[to] {
                    seen[to] = true;
                    stack.push((to, 0));
                }
            } else {
                order.push(node);
            }
        }
    }
    let mut part = vec![usize::MAX; n];
    for (label, &start) in order.iter().rev().enumerate() {
        if part[start] != usize::MAX {
            continue;
        }
        part[start] = label;
        let mut stack = vec![start];
        while let Some(node) = stack.pop() {
            for &from in &back[node] {
                if part[from] == usize::MAX {
                    part[from] = label;
                    stack.push(from);
                }
            }
        }
    }
    part
}

/// An owner id in short: its client's id cut to 8 characters, and its number.
pub(crate) fn short_owner(owner: &str) -> String {
    match owner.rsplit_once(':') {
        Some((client, n)) => format!("{}…:{n}", client.chars().take(8).collect::<String>()),
        None => owner.chars().take(12).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_is_marked_and_a_plain_wait_is_not() {
        let waits = vec![
            ("o1".to_owned(), "a".to_owned()),
            ("o2".to_owned(), "b".to_owned()),
            ("o3".to_owned(), "c".to_owned()),
        ];
        let holders = |lock: &str| match lock {
            "a" => vec!["o2".to_owned()],
            "b" => vec!["o1".to_owned()],
            _ => vec!["o9".to_owned()],
        };
        let graph = Graph::build(&waits, holders, |_| None);
        assert!(graph.has_cycle);
        let on_cycle: BTreeSet<(String, String)> = graph
            .edges
            .iter()
            .filter(|edge| edge.cycle)
            .map(|edge| {
                (
                    graph.nodes[edge.from].id.clone(),
                    graph.nodes[edge.to].id.clone(),
                )
            })
            .collect();
        let expected: BTreeSet<(String, String)> =
            [("o1", "a"), ("a", "o2"), ("o2", "b"), ("b", "o1")]
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect();
        assert_eq!(on_cycle, expected);
        assert_eq!(graph.edges.len(), 6);
    }

    #[test]
    fn records_read_back() {
        let record = WaitRecord::parse("o1".to_owned(), b"w:1 2 7 distlock:{a b}");
        assert_eq!(
            record,
            Some(WaitRecord {
                owner: "o1".to_owned(),
                lock_key: b"distlock:{a b}".to_vec()
            })
        );
        assert_eq!(WaitRecord::parse("o1".to_owned(), b"w:1 2"), None);
        assert_eq!(short_owner("0123456789abcdef:3"), "01234567…:3");
    }
}
