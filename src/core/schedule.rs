//! Work due at a time on the module's own clock (`ffi::clock`, monotonic), in due order.
//!
//! Redis's module timers and key TTLs follow the wall clock: a clock stepped forward fires
//! them at once, one stepped back holds them back by the step. So the module keeps its own
//! schedule and lets one Redis timer stand for its earliest entry (`Alarm`); whenever that
//! timer could be wrong (it fired early, or the wall clock moved against the monotonic one) it
//! is set again from here. Generic over the job and over the key that keyed entries are
//! deduplicated by, so it is tested with plain numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use ahash::RandomState;
use std::num::NonZeroU64;

use hashbrown::HashTable;

use crate::core::lock::Millis;

/// One scheduled entry: its due time, and a sequence number that keeps entries due at the
/// same millisecond apart (and in the order they were added).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot {
    due: Millis,
    seq: NonZeroU64,
}

impl Slot {
    pub fn due(&self) -> Millis {
        self.due
    }
}

/// What is due: a job, a key whose one pending entry came up, or an id (a waiter's timeout).
#[derive(Debug, PartialEq, Eq)]
pub enum Due<K, J> {
    Job(J),
    Key(K),
    Id(u64),
}

/// The next slot at `due`: sequence numbers count up from 1 (wrapping past 2^64 never happens).
fn next_slot(last_seq: &mut u64, due: Millis) -> Slot {
    *last_seq = last_seq.wrapping_add(1).max(1);
    Slot {
        due,
        seq: NonZeroU64::new(*last_seq).unwrap_or(NonZeroU64::MIN),
    }
}

pub struct Schedule<K, J> {
    jobs: BTreeMap<Slot, J>,
    /// Keys apart from jobs: there is one per lock, and a key is smaller than a job.
    keys: BTreeMap<Slot, K>,
    /// The one pending entry of each key (the earliest asked for) and the key's hash, found by
    /// that hash: the key itself is kept once, in `keys` (a lock's name is most of what it
    /// costs here).
    keyed: HashTable<(Slot, u64)>,
    /// Lock names are the clients' choice: keyed with random keys (HashDoS), but aHash rather
    /// than SipHash, which cost ~285 instructions per name, twice per lock.
    hasher: RandomState,
    /// Ids due at a time, kept apart in 16 bytes each: there is one per waiting client with a
    /// timeout, and a waiter is meant to cost little.
    ids: BTreeSet<(Millis, u64)>,
    last_seq: u64,
}

impl<K, J> Default for Schedule<K, J> {
    fn default() -> Self {
        Self {
            jobs: BTreeMap::new(),
            keys: BTreeMap::new(),
            keyed: HashTable::new(),
            hasher: RandomState::new(),
            ids: BTreeSet::new(),
            last_seq: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, J> Schedule<K, J> {
    fn slot(&mut self, due: Millis) -> Slot {
        next_slot(&mut self.last_seq, due)
    }

    /// Run `job` at `due`. The slot cancels it.
    pub fn add(&mut self, due: Millis, job: J) -> Slot {
        let slot = self.slot(due);
        self.jobs.insert(slot, job);
        slot
    }

    /// Take back a job that has not come up yet (a key's slot is cancelled by its key).
    pub fn cancel(&mut self, slot: Slot) -> Option<J> {
        let job = self.jobs.remove(&slot);
        self.shrink_if_idle();
        job
    }

    /// Let `id` come up at `due` (an id is pending at most once per due time).
    pub fn add_id(&mut self, due: Millis, id: u64) {
        self.ids.insert((due, id));
    }

    /// Take back an id that has not come up yet.
    pub fn cancel_id(&mut self, due: Millis, id: u64) -> bool {
        let removed = self.ids.remove(&(due, id));
        self.shrink_if_idle();
        removed
    }

    /// Let `key` come up at `due`, unless it already comes up at or before then. True when
    /// the schedule changed.
    pub fn add_key(&mut self, key: &K, due: Millis) -> bool {
        let hash = self.hasher.hash_one(key);
        if !self.wants(key, hash, due) {
            return false;
        }
        self.insert_key(key.clone(), hash, due);
        true
    }

    /// `add_key` for a key the caller no longer needs (one copy fewer).
    pub fn add_key_owned(&mut self, key: K, due: Millis) -> bool {
        let hash = self.hasher.hash_one(&key);
        if !self.wants(&key, hash, due) {
            return false;
        }
        self.insert_key(key, hash, due);
        true
    }

    /// The pending entry of `key` (whose hash is `hash`).
    fn pending(&self, key: &K, hash: u64) -> Option<Slot> {
        let keys = &self.keys;
        self.keyed
            .find(hash, |(slot, _)| keys.get(slot) == Some(key))
            .map(|(slot, _)| *slot)
    }

    /// Drop the pending entry `slot` of the key whose hash is `hash`.
    fn unkey(&mut self, hash: u64, slot: Slot) {
        if let Ok(entry) = self.keyed.find_entry(hash, |(s, _)| *s == slot) {
            entry.remove();
        }
    }

    /// Whether `key` needs an entry at `due` (dropping a later pending one).
    fn wants(&mut self, key: &K, hash: u64, due: Millis) -> bool {
        match self.pending(key, hash) {
            Some(pending) if pending.due <= due => false,
            Some(pending) => {
                self.unkey(hash, pending);
                self.keys.remove(&pending);
                true
            }
            None => true,
        }
    }

    fn insert_key(&mut self, key: K, hash: u64, due: Millis) {
        let slot = self.slot(due);
        self.insert_key_at(key, hash, slot);
    }

    fn insert_key_at(&mut self, key: K, hash: u64, slot: Slot) {
        self.keys.insert(slot, key);
        // The hash is kept so that growing the table never hashes a key again.
        self.keyed.insert_unique(hash, (slot, hash), |(_, h)| *h);
    }

    /// Forget `key`'s pending entry (the lock it watched is gone).
    pub fn cancel_key(&mut self, key: &K) {
        let hash = self.hasher.hash_one(key);
        if let Some(slot) = self.pending(key, hash) {
            self.unkey(hash, slot);
            self.keys.remove(&slot);
        }
        self.shrink_if_idle();
    }

    /// Whether any key is pending.
    pub fn has_keys(&self) -> bool {
        !self.keys.is_empty()
    }

    /// When the earliest entry is due.
    pub fn first_due(&self) -> Option<Millis> {
        let job = self.jobs.first_key_value().map(|(slot, _)| slot.due);
        let key = self.keys.first_key_value().map(|(slot, _)| slot.due);
        let id = self.ids.first().map(|(due, _)| *due);
        job.into_iter().chain(key).chain(id).min()
    }

    /// Take the earliest entry due at `now` or before: jobs and keys in slot order, then ids
    /// due at the same time.
    pub fn pop_due(&mut self, now: Millis) -> Option<Due<K, J>> {
        let job = self.jobs.first_key_value().map(|(slot, _)| *slot);
        let key = self.keys.first_key_value().map(|(slot, _)| *slot);
        let entry = job.into_iter().chain(key).min().filter(|s| s.due <= now);
        let id = self.ids.first().map(|(due, _)| *due).filter(|d| *d <= now);
        if id.is_some_and(|id| entry.is_none_or(|e| id < e.due)) {
            let id = self.ids.pop_first().map(|(_, id)| Due::Id(id));
            self.shrink_if_idle();
            return id;
        }
        let slot = entry?;
        if job == Some(slot) {
            let job = self.jobs.pop_first().map(|(_, job)| Due::Job(job));
            self.shrink_if_idle();
            return job;
        }
        let (slot, key) = self.keys.pop_first()?;
        self.unkey(self.hasher.hash_one(&key), slot);
        self.shrink_if_idle();
        Some(Due::Key(key))
    }

    /// Rewrite or drop every keyed entry (SWAPDB moves locks between dbs, FLUSHALL drops them).
    pub fn rekey(&mut self, mut f: impl FnMut(&K) -> Option<K>) {
        let keys = std::mem::take(&mut self.keys);
        self.keyed.clear();
        for (slot, key) in keys {
            if let Some(new) = f(&key) {
                let hash = self.hasher.hash_one(&new);
                self.insert_key_at(new, hash, slot);
            }
        }
        self.shrink_if_idle();
    }

    pub fn len(&self) -> usize {
        self.jobs.len() + self.keys.len() + self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.keys.is_empty() && self.ids.is_empty()
    }

    /// A burst of waiters or locks should not leave its high-water mark behind: like Redis's
    /// own dictionaries, the table shrinks once it is less than an eighth full (to twice what
    /// it holds, so a table that fills again does not grow at once). An empty map or table
    /// keeps nothing (a B-tree keeps its last node otherwise).
    fn shrink_if_idle(&mut self) {
        let (len, capacity) = (self.keyed.len(), self.keyed.capacity());
        if len == 0 && capacity > 0 {
            self.keyed = HashTable::new();
        } else if capacity > 64 && len < capacity / 8 {
            self.keyed.shrink_to(len * 2, |(_, h)| *h);
        }
        if self.keys.is_empty() {
            self.keys = BTreeMap::new();
        }
        if self.jobs.is_empty() {
            self.jobs = BTreeMap::new();
        }
        if self.ids.is_empty() {
            self.ids = BTreeSet::new();
        }
    }
}

/// The one Redis timer that stands for the schedule: when it was set to fire (on the module's
/// clock) and how far the wall clock stood from the module's clock then. Redis counts timers
/// on the wall clock, so once that distance changes, the timer fires at the wrong time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alarm {
    pub due: Millis,
    pub wall_offset: Millis,
}

/// How far the wall clock may drift from the monotonic one (NTP slews it by at most 0.5 ms/s)
/// before the Redis timer is set again.
pub const DRIFT_MS: Millis = 2;

/// Whether the Redis timer must be set again (to fire at `first_due`), given the one that is
/// set (`None`: none), the earliest entry, and where the wall clock stands now.
pub fn must_rearm(armed: Option<Alarm>, first_due: Option<Millis>, wall_offset: Millis) -> bool {
    match (armed, first_due) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(alarm), Some(due)) => {
            due < alarm.due || (alarm.wall_offset - wall_offset).abs() > DRIFT_MS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type S = Schedule<u8, u32>;

    fn drain(s: &mut S, now: Millis) -> Vec<Due<u8, u32>> {
        std::iter::from_fn(|| s.pop_due(now)).collect()
    }

    #[test]
    fn entries_come_up_in_due_order_then_in_the_order_added() {
        let mut s = S::default();
        s.add(20, 1);
        s.add(10, 2);
        s.add(10, 3);
        assert!(s.add_key(&7, 15));
        s.add_id(15, 40);
        s.add_id(5, 41);
        assert_eq!(s.first_due(), Some(5));
        assert_eq!(drain(&mut s, 4), vec![]);
        assert_eq!(
            drain(&mut s, 20),
            vec![
                Due::Id(41),
                Due::Job(2),
                Due::Job(3),
                Due::Key(7),
                Due::Id(40),
                Due::Job(1)
            ]
        );
        assert!(s.is_empty());
    }

    #[test]
    fn the_key_table_gives_back_a_burst_however_its_keys_go() {
        let mut s: Schedule<u32, u32> = Schedule::default();
        let burst = |s: &mut Schedule<u32, u32>| {
            for k in 0..20_000 {
                s.add_key_owned(k, 1_000 + i64::from(k));
            }
            assert!(s.keyed.capacity() >= 20_000);
        };
        // A flush (`rekey` dropping every key), one that keeps a few, expiries, cancels.
        burst(&mut s);
        s.rekey(|_| None);
        assert_eq!(s.keyed.capacity(), 0);
        burst(&mut s);
        s.rekey(|k| (*k < 100).then_some(*k));
        assert!(s.keyed.capacity() <= 8 * 100, "{}", s.keyed.capacity());
        burst(&mut s);
        while s.len() > 50 {
            s.pop_due(i64::MAX);
        }
        assert!(s.keyed.capacity() <= 8 * 50, "{}", s.keyed.capacity());
        for k in 0..20_000 {
            s.cancel_key(&k);
        }
        assert_eq!(s.len(), 0);
        assert!(s.keyed.capacity() <= 64, "{}", s.keyed.capacity());
    }

    #[test]
    fn a_key_keeps_only_its_earliest_entry() {
        let mut s = S::default();
        assert!(s.add_key(&1, 50));
        assert!(!s.add_key(&1, 60), "a later one is not needed");
        assert!(!s.add_key(&1, 50));
        assert!(s.add_key(&1, 40), "an earlier one replaces it");
        assert_eq!(s.len(), 1);
        assert_eq!(drain(&mut s, 45), vec![Due::Key(1)]);
        assert!(
            s.add_key(&1, 60),
            "once it came up, the key can be added again"
        );
        s.cancel_key(&1);
        assert!(s.is_empty());
    }

    #[test]
    fn cancelled_jobs_never_come_up() {
        let mut s = S::default();
        let a = s.add(10, 1);
        s.add(10, 2);
        assert_eq!(s.cancel(a), Some(1));
        assert_eq!(s.cancel(a), None);
        s.add_id(10, 7);
        assert!(s.cancel_id(10, 7));
        assert!(!s.cancel_id(10, 7));
        assert_eq!(drain(&mut s, 10), vec![Due::Job(2)]);
    }

    #[test]
    fn rekeying_moves_and_drops_keyed_entries_only() {
        let mut s = S::default();
        s.add_key(&1, 10);
        s.add_key(&2, 20);
        s.add(30, 9);
        s.rekey(|k| (*k == 1).then_some(5));
        assert_eq!(drain(&mut s, 100), vec![Due::Key(5), Due::Job(9)]);
    }

    #[test]
    fn the_alarm_is_set_again_only_when_it_could_be_wrong() {
        let set = Some(Alarm {
            due: 100,
            wall_offset: 7,
        });
        assert!(must_rearm(None, Some(100), 7));
        assert!(!must_rearm(set, None, 7));
        assert!(!must_rearm(set, Some(100), 7));
        assert!(!must_rearm(set, Some(150), 8), "later entries wait for it");
        assert!(must_rearm(set, Some(99), 7), "an earlier entry");
        assert!(
            must_rearm(set, Some(150), 7 + 3_600_000),
            "clock stepped forward"
        );
        assert!(
            must_rearm(set, Some(150), 7 - 3_600_000),
            "clock stepped back"
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(Millis),
        AddKey(u8, Millis),
        Cancel(usize),
        CancelKey(u8),
        AddId(u64, Millis),
        CancelId(u64, Millis),
        Pop(Millis),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..50i64).prop_map(Op::Add),
            (0..4u8, 0..50i64).prop_map(|(k, d)| Op::AddKey(k, d)),
            (0..8usize).prop_map(Op::Cancel),
            (0..4u8).prop_map(Op::CancelKey),
            (0..4u64, 0..50i64).prop_map(|(i, d)| Op::AddId(i, d)),
            (0..4u64, 0..50i64).prop_map(|(i, d)| Op::CancelId(i, d)),
            (0..60i64).prop_map(Op::Pop),
        ]
    }

    /// The model's entry: due, (0, seq) for entries or (1, id) for ids, what comes up.
    type ModelEntry = (Millis, (u8, u64), Due<u8, u32>);

    proptest! {
        /// Against a model (a list of (due, (0, seq) or (1, id), entry)): the same entries
        /// come up, in the same order, and a key is never pending twice.
        #[test]
        fn behaves_like_a_sorted_list(ops in proptest::collection::vec(op(), 1..60)) {
            let mut s = S::default();
            let mut model: Vec<ModelEntry> = Vec::new();
            let mut slots: Vec<(Slot, u64)> = Vec::new();
            let mut seq = 0u64;
            for op in ops {
                match op {
                    Op::Add(due) => {
                        seq += 1;
                        let slot = s.add(due, seq as u32);
                        slots.push((slot, seq));
                        model.push((due, (0, seq), Due::Job(seq as u32)));
                    }
                    Op::AddKey(k, due) => {
                        let pending = model.iter().position(|e| e.2 == Due::Key(k));
                        let changed = match pending {
                            Some(i) if model[i].0 <= due => false,
                            Some(i) => { model.remove(i); true }
                            None => true,
                        };
                        // Both ways of adding a key behave alike.
                        let added = if due % 2 == 0 { s.add_key(&k, due) } else { s.add_key_owned(k, due) };
                        prop_assert_eq!(added, changed);
                        seq += 1;
                        if changed {
                            model.push((due, (0, seq), Due::Key(k)));
                        }
                    }
                    Op::Cancel(i) => {
                        if let Some(&(slot, id)) = slots.get(i) {
                            let at = model.iter().position(|e| e.2 == Due::Job(id as u32));
                            let expect = at.map(|i| { model.remove(i); id as u32 });
                            prop_assert_eq!(s.cancel(slot), expect);
                        }
                    }
                    Op::CancelKey(k) => {
                        model.retain(|e| e.2 != Due::Key(k));
                        s.cancel_key(&k);
                    }
                    Op::AddId(id, due) => {
                        s.add_id(due, id);
                        if !model.iter().any(|e| e.0 == due && e.2 == Due::Id(id)) {
                            model.push((due, (1, id), Due::Id(id)));
                        }
                    }
                    Op::CancelId(id, due) => {
                        let at = model.iter().position(|e| e.0 == due && e.2 == Due::Id(id));
                        if let Some(i) = at {
                            model.remove(i);
                        }
                        prop_assert_eq!(s.cancel_id(due, id), at.is_some());
                    }
                    Op::Pop(now) => {
                        model.sort_by_key(|e| (e.0, e.1));
                        let expect = (model.first().is_some_and(|e| e.0 <= now))
                            .then(|| model.remove(0).2);
                        prop_assert_eq!(s.pop_due(now), expect);
                    }
                }
                prop_assert_eq!(s.len(), model.len());
                prop_assert_eq!(s.first_due(), model.iter().map(|e| e.0).min());
            }
        }
    }
}
