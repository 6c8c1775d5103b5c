//! The checks of a scenario's history: what the README promises of the fenced store's writes
//! and reads, and of the tokens.

use std::collections::{HashMap, HashSet};

use crate::store::{Read, Write};
use crate::tokens::{check_epochs, Span};

#[derive(Clone, Debug)]
pub struct Record {
    pub owner: String,
    pub token: i64,
    /// Restart epoch of the lock server when the grant was sent and received (same epoch).
    pub epoch: Option<usize>,
    pub write: Write,
    /// For a holder whose write was rejected: what LOCK.EXTEND answered right after.
    pub extended: Option<i64>,
    pub released: Option<i64>,
}

#[derive(Clone, Debug)]
pub struct ReadRecord {
    pub owner: String,
    pub token: i64,
    pub read: Read,
}

pub struct Outcome {
    pub records: Vec<Record>,
    pub reads: Vec<ReadRecord>,
    pub final_counter: i64,
    pub injected: usize,
    /// Grants the lock server counted (INFO lock) and did not take back, if it still answers.
    pub server_grants: Option<i64>,
}

/// `check`, and what nearly every fault test asserts besides: exactly `faults` faults were
/// injected and the workload went on (more than `min_accepted` accepted writes). The accepted
/// and stale counts, as `check` gives them.
pub fn check_faults(outcome: &Outcome, faults: usize, min_accepted: usize) -> (usize, usize) {
    let (accepted, stale) = check(outcome);
    assert_eq!(outcome.injected, faults, "faults injected");
    assert!(
        accepted > min_accepted,
        "writers kept working: {accepted} accepted writes"
    );
    (accepted, stale)
}

/// Check the properties the README promises; returns (accepted writes, stale rejections).
pub fn check(outcome: &Outcome) -> (usize, usize) {
    let accepted = check_writes(outcome);
    check_reads(outcome, &accepted);
    check_tokens_unique(outcome);
    check_restart_epochs(outcome);
    let stale = outcome
        .records
        .iter()
        .filter(|r| matches!(r.write, Write::Stale | Write::Skipped))
        .count();
    let distinct: HashSet<_> = outcome.records.iter().map(|r| r.token).collect();
    let reads = if outcome.reads.is_empty() {
        String::new()
    } else {
        format!(", reads {}", outcome.reads.len())
    };
    eprintln!(
        "operations {}{reads}, distinct grants {}, accepted writes {}, stale rejected {}, faults injected {}",
        outcome.records.len(),
        distinct.len(),
        accepted.len(),
        stale,
        outcome.injected
    );
    (accepted.len(), stale)
}

/// The accepted writes form the chain 1..N with increasing tokens, and the counter is exact.
/// Returns them as (value, token), sorted.
fn check_writes(outcome: &Outcome) -> Vec<(i64, i64)> {
    let mut accepted: Vec<(i64, i64)> = outcome
        .records
        .iter()
        .filter_map(|r| match r.write {
            Write::Accepted(v) => Some((v, r.token)),
            _ => None,
        })
        .collect();
    accepted.sort_unstable();
    for (i, (value, _)) in accepted.iter().enumerate() {
        assert_eq!(
            *value,
            i as i64 + 1,
            "accepted writes must form the chain 1..N (lost or double update)"
        );
    }
    for pair in accepted.windows(2) {
        assert!(
            pair[1].1 > pair[0].1,
            "accepted write tokens must increase: {pair:?}"
        );
    }
    assert_eq!(
        outcome.final_counter,
        accepted.len() as i64,
        "the counter is exact"
    );
    accepted
}

/// No reader saw a write in progress (only abandoned ones), or a value no accepted write wrote.
fn check_reads(outcome: &Outcome, accepted: &[(i64, i64)]) {
    let refused: HashSet<i64> = outcome
        .records
        .iter()
        .filter(|r| r.write == Write::Stale)
        .map(|r| r.token)
        .collect();
    for read in &outcome.reads {
        if let Read::InProgress { writer } = read.read {
            assert!(
                refused.contains(&writer),
                "reader {} (token {}) saw the write in progress of token {writer}",
                read.owner,
                read.token
            );
        }
        if let Read::Value(v) = read.read {
            assert!(
                v == 0
                    || accepted
                        .binary_search_by_key(&v, |(value, _)| *value)
                        .is_ok(),
                "reader {} saw {v}, which no accepted write wrote",
                read.owner
            );
        }
    }
}

/// No token was handed to two different acquisitions.
fn check_tokens_unique(outcome: &Outcome) {
    let mut owner_of: HashMap<i64, &str> = HashMap::new();
    let grants = outcome
        .records
        .iter()
        .map(|r| (r.token, &r.owner))
        .chain(outcome.reads.iter().map(|r| (r.token, &r.owner)));
    for (token, owner) in grants {
        let previous = owner_of.insert(token, owner);
        assert!(
            previous.is_none_or(|o| o == owner),
            "token {token} granted twice: {previous:?} and {owner}"
        );
    }
}

/// Tokens never went backwards across the lock server's restarts (grants sent and answered in
/// one restart epoch, none during a fault).
fn check_restart_epochs(outcome: &Outcome) {
    let mut by_epoch: HashMap<usize, (i64, i64)> = HashMap::new();
    for r in &outcome.records {
        if let Some(e) = r.epoch {
            let entry = by_epoch.entry(e).or_insert((i64::MAX, i64::MIN));
            entry.0 = entry.0.min(r.token);
            entry.1 = entry.1.max(r.token);
        }
    }
    let mut epochs: Vec<_> = by_epoch.into_iter().collect();
    epochs.sort_unstable();
    let spans: Vec<Span> = epochs
        .into_iter()
        .map(|(e, (lowest, highest))| Span {
            name: format!("epoch {e}"),
            lowest: (lowest, String::new()),
            highest: (highest, String::new()),
        })
        .collect();
    check_epochs("a restart", &spans);
}
