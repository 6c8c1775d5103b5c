//! The checks of a Sentinel workload's history: the fenced store's (as a scenario's), tokens
//! per node and across masters, who held the lock at once, what was refused when.

use std::collections::HashMap;
use std::time::Duration;

use super::workload::{Grant, Refusal};
use crate::scenario::{self, Outcome, Record};
use crate::store::Write;
use crate::tokens::{check_epochs, Span};

/// What a workload did.
pub struct History {
    pub grants: Vec<Grant>,
    pub refusals: Vec<Refusal>,
    pub final_counter: i64,
    pub ttl: Duration,
}

/// A time as seconds, for messages.
pub fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

impl History {
    /// The fenced store's checks (`scenario::check`): the accepted writes form the chain
    /// 1, 2, 3... with increasing tokens (no write that should have been refused got in),
    /// the counter is exact, and no token went to two owners (every grant, used or not).
    /// Returns (accepted writes, refused writes).
    pub fn check_store(&self) -> (usize, usize) {
        let records = self
            .grants
            .iter()
            .map(|g| Record {
                owner: g.owner.clone(),
                token: g.token,
                epoch: None,
                write: g.write.clone(),
                extended: None,
                released: g.released,
            })
            .collect();
        scenario::check(&Outcome {
            records,
            reads: Vec::new(),
            final_counter: self.final_counter,
            injected: 1,
            server_grants: None,
        })
    }

    /// The nodes that granted, in the order of their first grants.
    pub fn masters(&self) -> Vec<usize> {
        let mut first: HashMap<usize, Duration> = HashMap::new();
        for g in &self.grants {
            let t = first.entry(g.node).or_insert(g.granted);
            *t = (*t).min(g.granted);
        }
        let mut nodes: Vec<(usize, Duration)> = first.into_iter().collect();
        nodes.sort_by_key(|(_, t)| *t);
        nodes.into_iter().map(|(n, _)| n).collect()
    }

    /// Tokens and masters: on each node a grant answered before another was asked has the
    /// smaller token; and every token of a master is above every token of each master that
    /// granted before it did (ever: before, during and after a cut, also while both granted at
    /// once): each promotion starts an epoch above what the promoted replica has seen.
    pub fn check_epochs(&self) {
        let mut by_node: HashMap<usize, Vec<&Grant>> = HashMap::new();
        for g in &self.grants {
            by_node.entry(g.node).or_default().push(g);
        }
        for (node, grants) in &mut by_node {
            grants.sort_by_key(|g| g.granted);
            let mut highest: Option<&Grant> = None;
            // Sweep by send time: every grant answered before `g` was sent must be below it.
            let mut by_sent = grants.clone();
            by_sent.sort_by_key(|g| g.sent);
            let mut i = 0;
            for g in by_sent {
                while i < grants.len() && grants[i].granted < g.sent {
                    if highest.is_none_or(|h| grants[i].token > h.token) {
                        highest = Some(grants[i]);
                    }
                    i += 1;
                }
                if let Some(h) = highest {
                    assert!(
                        g.token > h.token,
                        "node {node} went backwards: {} got {} at {}, after {} got {} at {}",
                        g.owner,
                        g.token,
                        secs(g.granted),
                        h.owner,
                        h.token,
                        secs(h.granted)
                    );
                }
            }
        }
        let spans: Vec<Span> = self
            .masters()
            .into_iter()
            .filter_map(|node| {
                let mine = || self.grants.iter().filter(move |g| g.node == node);
                let (lowest, highest) = (
                    mine().min_by_key(|g| g.token)?,
                    mine().max_by_key(|g| g.token)?,
                );
                let note = |g: &Grant| (g.token, format!("{} at {}", g.owner, secs(g.granted)));
                Some(Span {
                    name: format!("node {node}"),
                    lowest: note(lowest),
                    highest: note(highest),
                })
            })
            .collect();
        check_epochs("masters (in the order of their first grants)", &spans);
    }

    /// Pairs of grants to different owners, both used, that held the lock at once by their
    /// own accounts (`Grant::held_from` .. `held_until`), among the grants `which` picks.
    pub fn overlaps(&self, which: impl Fn(&Grant) -> bool) -> Vec<(&Grant, &Grant)> {
        let mut picked: Vec<&Grant> = self
            .grants
            .iter()
            .filter(|g| g.used() && which(g))
            .collect();
        picked.sort_by_key(|g| g.held_from());
        let mut found = Vec::new();
        for (i, a) in picked.iter().enumerate() {
            let until = a.held_until(self.ttl);
            for b in &picked[i + 1..] {
                if b.held_from() >= until {
                    break;
                }
                if b.owner != a.owner && b.held_from() < b.held_until(self.ttl) {
                    found.push((*a, *b));
                }
            }
        }
        found
    }

    /// The first grant `node` made at or after `after`.
    pub fn first_grant(&self, node: usize, after: Duration) -> Option<&Grant> {
        self.grants
            .iter()
            .filter(|g| g.node == node && g.granted >= after)
            .min_by_key(|g| g.granted)
    }

    /// Grants `which` picks.
    pub fn count(&self, which: impl Fn(&Grant) -> bool) -> usize {
        self.grants.iter().filter(|g| which(g)).count()
    }

    /// Accepted writes of grants `which` picks.
    pub fn accepted(&self, which: impl Fn(&Grant) -> bool) -> usize {
        self.grants
            .iter()
            .filter(|g| matches!(g.write, Write::Accepted(_)) && which(g))
            .count()
    }

    /// When the first and the last refusal containing `code` came from `node`.
    pub fn refused(&self, node: usize, code: &str) -> Option<(Duration, Duration, usize)> {
        let times: Vec<Duration> = self
            .refusals
            .iter()
            .filter(|r| r.node == node && r.error.contains(code))
            .map(|r| r.at)
            .collect();
        Some((*times.iter().min()?, *times.iter().max()?, times.len()))
    }
}
