//! The most contended lock names, in bounded memory: a Space-Saving table (Metwally, Agrawal and
//! El Abbadi, 2005) per signal (requests that joined a queue, leases that ran out while held).
//!
//! A table keeps at most `capacity` names. A name already in it counts up; a new name takes a
//! free slot, or else the slot of the name with the least count, inheriting that count as its
//! error bound. So for every name listed, `count - error <= true count <= count`, the counts
//! add up to every event recorded, and any name seen more than `total / capacity` times is
//! listed. `LOCK.HOT` reports the first K (`lock.hot-names`) of a table four times that size.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::core::args::{self, Arg};
use crate::core::config;
use crate::core::error::LockError;

/// One listed name: its estimated count and how far above the true count it may be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: Vec<u8>,
    pub count: u64,
    pub error: u64,
}

/// A Space-Saving table of at most `capacity` names.
#[derive(Debug, Default)]
pub struct SpaceSaving {
    capacity: usize,
    entries: Vec<Entry>,
    index: HashMap<Vec<u8>, usize>,
}

impl SpaceSaving {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Vec::new(),
            index: HashMap::new(),
        }
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Forget every name, and keep `capacity` of them from now on.
    pub fn reset(&mut self, capacity: usize) {
        *self = Self::new(capacity);
    }

    /// One event for `name`: O(1) for a listed name or a free slot; a new name in a full table
    /// replaces the least counted one, found in O(capacity).
    pub fn record(&mut self, name: &[u8]) {
        if let Some(&i) = self.index.get(name) {
            self.entries[i].count += 1;
            return;
        }
        if self.entries.len() < self.capacity {
            self.index.insert(name.to_vec(), self.entries.len());
            self.entries.push(Entry {
                name: name.to_vec(),
                count: 1,
                error: 0,
            });
            return;
        }
        let Some((least, _)) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.count) else {
            return; // capacity 0: nothing is kept
        };
        let old = std::mem::replace(&mut self.entries[least].name, name.to_vec());
        self.index.remove(&old);
        self.index.insert(name.to_vec(), least);
        let entry = &mut self.entries[least];
        entry.error = entry.count;
        entry.count += 1;
    }

    /// The `k` names with the highest counts, highest first (ties: by name).
    pub fn top(&self, k: usize) -> Vec<Entry> {
        let mut all = self.entries.clone();
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
        all.truncate(k);
        all
    }
}

/// The table size that serves a top `k`: four times as many names, so that the top k's
/// errors stay small against their counts.
pub fn capacity_for(k: usize) -> usize {
    k.saturating_mul(4)
}

/// What a table counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// Requests that joined a lock's queue.
    Waits,
    /// Leases that ran out while held.
    Expired,
}

/// The server's two tables, made at first use.
static TABLES: Mutex<Option<[SpaceSaving; 2]>> = Mutex::new(None);

/// Run `f` on `signal`'s table, sized for `lock.hot-names` (a change of it clears the table).
fn with_table<T>(signal: Signal, f: impl FnOnce(&mut SpaceSaving) -> T) -> T {
    let capacity = capacity_for(config::hot_names());
    let mut tables = TABLES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let tables = tables.get_or_insert_with(|| [0, 1].map(|_| SpaceSaving::new(capacity)));
    let table = &mut tables[signal as usize];
    if table.capacity() != capacity {
        table.reset(capacity);
    }
    f(table)
}

/// One event of `signal` on the lock `name`.
pub fn record(signal: Signal, name: &[u8]) {
    if config::hot_names() > 0 {
        with_table(signal, |t| t.record(name));
    }
}

/// The `lock.hot-names` most counted names of `signal` (at most `k` of them), highest first.
pub fn top(signal: Signal, k: usize) -> Vec<Entry> {
    with_table(signal, |t| t.top(k.min(config::hot_names())))
}

/// `LOCK.HOT WAITS|EXPIRED [COUNT count]`, after the name: the signal and at most how many
/// names (all that `lock.hot-names` allows without COUNT).
pub fn parse<A: Arg>(rest: &[A]) -> Result<(Signal, usize), LockError> {
    let (signal, rest) = match rest {
        [s, tail @ ..] if s.bytes().eq_ignore_ascii_case(b"WAITS") => (Signal::Waits, tail),
        [s, tail @ ..] if s.bytes().eq_ignore_ascii_case(b"EXPIRED") => (Signal::Expired, tail),
        _ => return Err(LockError::Syntax),
    };
    let count = if rest.is_empty() {
        usize::MAX
    } else {
        args::info(rest)?
    };
    Ok((signal, count))
}

/// Forget every name (`CONFIG RESETSTAT`).
pub fn clear() {
    *TABLES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact(stream: &[u8]) -> HashMap<Vec<u8>, u64> {
        let mut counts = HashMap::new();
        for &b in stream {
            *counts.entry(vec![b]).or_insert(0) += 1;
        }
        counts
    }

    proptest! {
        /// The Space-Saving guarantees against exact counts.
        #[test]
        fn bounds_hold_against_exact_counts(
            stream in prop::collection::vec(0u8..24, 0..400),
            capacity in 0usize..12,
        ) {
            let mut t = SpaceSaving::new(capacity);
            for &b in &stream {
                t.record(&[b]);
            }
            let truth = exact(&stream);
            let listed = t.top(usize::MAX);
            prop_assert!(listed.len() <= capacity);
            if capacity > 0 {
                let total: u64 = listed.iter().map(|e| e.count).sum();
                prop_assert_eq!(total, stream.len() as u64, "counts add up to every event");
            }
            for e in &listed {
                let true_count = truth.get(&e.name).copied().unwrap_or(0);
                prop_assert!(e.count - e.error <= true_count && true_count <= e.count, "{:?}", e);
            }
            for (name, &n) in &truth {
                if capacity > 0 && n * capacity as u64 > stream.len() as u64 {
                    prop_assert!(listed.iter().any(|e| &e.name == name), "frequent {:?} missing", name);
                }
            }
            for pair in listed.windows(2) {
                prop_assert!(pair[0].count >= pair[1].count, "highest first");
            }
        }
    }

    #[test]
    fn parse_takes_a_signal_and_an_optional_count() {
        let words = |w: &[&'static str]| w.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        assert_eq!(parse(&words(&["waits"])), Ok((Signal::Waits, usize::MAX)));
        assert_eq!(
            parse(&words(&["EXPIRED", "count", "3"])),
            Ok((Signal::Expired, 3))
        );
        assert_eq!(parse(&words(&["holds"])), Err(LockError::Syntax));
        assert_eq!(parse(&words(&["WAITS", "COUNT"])), Err(LockError::Syntax));
        assert_eq!(
            parse(&words(&["WAITS", "COUNT", "-1"])),
            Err(LockError::CountNegative)
        );
    }

    #[test]
    fn a_hot_name_tops_the_table_among_many_cold_ones() {
        let mut t = SpaceSaving::new(capacity_for(2));
        for i in 0..1000u32 {
            t.record(&i.to_be_bytes());
            t.record(b"hot\x00\xff");
        }
        let top = t.top(2);
        assert_eq!(top[0].name, b"hot\x00\xff");
        assert!(top[0].count - top[0].error <= 1000 && top[0].count >= 1000);
        assert_eq!(top.len(), 2);
        t.reset(3);
        assert_eq!((t.top(5).len(), t.capacity()), (0, 3));
    }
}
