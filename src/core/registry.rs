//! The wait queues of all locks on a server, and the index of who waits where.
//!
//! Queues are keyed by (db, key name), not stored in the lock value: a queue belongs to the
//! name its waiters asked for, so DEL, RENAME, SWAPDB or FLUSHALL move or drop the holder but
//! leave the waiters where they were, and settling (`settle`) decides what they get.
//!
//! Generic over the client handle, so it is tested here with plain numbers; the Redis layer
//! keeps one instance of it over blocked clients (`effects::queues`). Tokens come from whoever
//! calls `hand_off`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::lock::{LockState, Millis, Token};
use crate::core::queue::{Handed, Place, WaitQueue, Waiter};

/// The name a queue belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct QueueKey {
    pub db: i32,
    pub name: Box<[u8]>,
}

/// A waiter that left its queue.
pub struct Left<C> {
    pub waiter: Waiter<C>,
    /// The queue to settle now: the waiter was its head and others wait behind it.
    pub settle: Option<QueueKey>,
}

/// A queued client: the registry indexes it by its id.
pub trait Client {
    fn id(&self) -> u64;
}

pub struct Registry<C> {
    /// The key is shared with the index entry of each of its waiters (one copy of the name
    /// per queue, not one per waiter).
    queues: HashMap<Arc<QueueKey>, WaitQueue<C>>,
    /// Where each queued client stands: its queue and its place in it.
    client_queue: HashMap<u64, (Arc<QueueKey>, Place)>,
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            client_queue: HashMap::new(),
        }
    }
}

impl<C: Client> Registry<C> {
    /// Queue a client at the tail of `key`'s queue.
    pub fn join(&mut self, key: QueueKey, waiter: Waiter<C>) {
        let client_id = waiter.client.id();
        let key = match self.queues.get_key_value(&key) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::new(key),
        };
        let place = self
            .queues
            .entry(Arc::clone(&key))
            .or_default()
            .push(waiter);
        self.client_queue.insert(client_id, (key, place));
    }

    /// Take a client out of whatever queue it is in (timeout, disconnect). `None` if it was not
    /// queued (already answered).
    pub fn leave(&mut self, client_id: u64) -> Option<Left<C>> {
        let (key, place) = self.client_queue.remove(&client_id)?;
        let entry = self.queues.get_mut(&*key)?;
        let was_head = entry.is_head(place);
        let waiter = entry.remove(place)?;
        let others_wait = !entry.is_empty();
        if !others_wait {
            self.queues.remove(&*key);
        }
        self.shrink_if_idle();
        Some(Left {
            // Who stands behind a head that left may fit now (readers behind a writer).
            settle: (was_head && others_wait).then(|| (*key).clone()),
            waiter,
        })
    }

    /// Whether any lock has a queue (a cheap check before building a key).
    pub fn anyone_waiting(&self) -> bool {
        !self.queues.is_empty()
    }

    pub fn has_waiters(&self, key: &QueueKey) -> bool {
        self.queues.get(key).is_some_and(|e| !e.is_empty())
    }

    pub fn waiting(&self, key: &QueueKey) -> usize {
        self.queues.get(key).map_or(0, |e| e.len())
    }

    /// The queue length and the owners of its first `count` waiters, in order.
    pub fn owners(&self, key: &QueueKey, count: usize) -> (usize, Vec<Box<[u8]>>) {
        self.queues.get(key).map_or((0, Vec::new()), |e| {
            let first = e
                .iter()
                .take(count)
                .map(|w| Box::<[u8]>::from(&*w.owner.bytes()))
                .collect();
            (e.len(), first)
        })
    }

    /// Whether the head of `key`'s queue fits beside the live holds of `state`.
    pub fn head_fits(&self, key: &QueueKey, state: Option<&LockState>, now: Millis) -> bool {
        self.queues
            .get(key)
            .is_some_and(|e| e.head_fits(state, now))
    }

    /// Serve the head of `key`'s queue (and whoever fits behind it, see
    /// `WaitQueue::hand_off`), with tokens from `issue_token`.
    pub fn hand_off(
        &mut self,
        key: &QueueKey,
        state: Option<&LockState>,
        now: Millis,
        max_holders: usize,
        issue_token: impl FnMut() -> Option<Token>,
    ) -> Option<Handed<C>> {
        let entry = self.queues.get_mut(key)?;
        let handed = entry.hand_off(state, now, max_holders, issue_token);
        if entry.is_empty() {
            self.queues.remove(key);
        }
        for (waiter, _) in handed.iter().flat_map(|h| &h.served) {
            self.client_queue.remove(&waiter.client.id());
        }
        self.shrink_if_idle();
        handed
    }

    /// Remove and return every waiter of one queue, in order.
    pub fn take_all(&mut self, key: &QueueKey) -> Vec<Waiter<C>> {
        let waiters: Vec<_> = self
            .queues
            .remove(key)
            .map(|mut e| e.drain().collect())
            .unwrap_or_default();
        for w in &waiters {
            self.client_queue.remove(&w.client.id());
        }
        self.shrink_if_idle();
        waiters
    }

    /// Remove and return every waiter of every queue.
    pub fn take_everyone(&mut self) -> Vec<Waiter<C>> {
        self.client_queue.clear();
        let everyone: Vec<_> = self
            .queues
            .drain()
            .flat_map(|(_, mut e)| e.drain().collect::<Vec<_>>())
            .collect();
        self.shrink_if_idle();
        everyone
    }

    /// The queues of one db (`None`: of every db).
    pub fn queues_in(&self, db: Option<i32>) -> Vec<QueueKey> {
        self.queues
            .keys()
            .filter(|k| db.is_none_or(|d| d == k.db))
            .map(|k| (**k).clone())
            .collect()
    }

    /// Once nobody waits anywhere, give the tables' memory back (a burst of 10k waiters
    /// should not leave its high-water mark behind).
    fn shrink_if_idle(&mut self) {
        if self.queues.is_empty() && self.queues.capacity() > 0 {
            self.queues = HashMap::new();
            self.client_queue = HashMap::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::{Holder, Want};
    use crate::core::owner::Owner;
    use proptest::prelude::*;

    impl Client for u64 {
        fn id(&self) -> u64 {
            *self
        }
    }

    impl Registry<u64> {
        /// Every waiter stands in exactly one queue, and the index says where.
        fn check_index(&self) -> Result<(), String> {
            let mut count = 0;
            for (key, entry) in &self.queues {
                if entry.is_empty() {
                    return Err(format!("empty queue kept for {key:?}"));
                }
                for w in entry.iter() {
                    count += 1;
                    match self.client_queue.get(&w.client) {
                        Some((k, _)) if Arc::ptr_eq(k, key) => {}
                        other => return Err(format!("client {} indexed as {other:?}", w.client)),
                    }
                }
            }
            if count != self.client_queue.len() {
                return Err(format!(
                    "{count} queued, {} indexed",
                    self.client_queue.len()
                ));
            }
            Ok(())
        }
    }

    fn key(k: u8) -> QueueKey {
        QueueKey {
            db: i32::from(k % 2),
            name: vec![b'k', k].into(),
        }
    }

    #[test]
    fn a_queue_entry_stays_small() {
        // The index entry of a waiter: its client id, its queue's shared key, its place.
        assert_eq!(std::mem::size_of::<(u64, (Arc<QueueKey>, Place))>(), 24);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join(u8),
        Leave(u8),
        HandOff { key: u8, free: bool },
        TakeAll(u8),
        TakeEveryone,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3).prop_map(Op::Join),
            3 => any::<u8>().prop_map(Op::Leave),
            3 => (0u8..3, any::<bool>()).prop_map(|(key, free)| Op::HandOff { key, free }),
            1 => (0u8..3).prop_map(Op::TakeAll),
            1 => Just(Op::TakeEveryone),
        ]
    }

    proptest! {
        /// Random joins, leaves (timeouts, disconnects), handoffs and flushes against a model of
        /// one ordered list per key.
        #[test]
        fn the_registry_matches_a_model_of_ordered_lists(ops in proptest::collection::vec(op(), 1..200)) {
            let mut r: Registry<u64> = Registry::default();
            let mut model: HashMap<u8, Vec<u64>> = HashMap::new();
            let mut next_id = 0u64;
            let mut next_token = 0u64;
            let mut granted = std::collections::HashSet::new();
            let busy = LockState::Exclusive(Holder { owner: Owner::new(b"h"), token: 1, deadline: 100, granted: 0 });
            for op in ops {
                match op {
                    Op::Join(k) => {
                        next_id += 1;
                        r.join(key(k), Waiter { client: next_id, owner: Owner::new(&next_id.to_be_bytes()), ttl: 10, want: Want::Exclusive });
                        model.entry(k).or_default().push(next_id);
                    }
                    Op::Leave(i) => {
                        let id = u64::from(i) % (next_id + 1);
                        let expected = model.values_mut().find_map(|q| {
                            let at = q.iter().position(|c| *c == id)?;
                            Some(q.remove(at))
                        });
                        prop_assert_eq!(r.leave(id).map(|l| l.waiter.client), expected);
                    }
                    Op::HandOff { key: k, free } => {
                        let holder = (!free).then_some(&busy);
                        let got = r.hand_off(&key(k), holder, 50, 10, || { next_token += 1; Some(next_token) });
                        let queue = model.entry(k).or_default();
                        if free && !queue.is_empty() {
                            let head = queue.remove(0);
                            let handed = got.expect("a free lock goes to the head");
                            prop_assert_eq!(handed.served.len(), 1, "exclusive waiters one at a time");
                            let (w, token) = &handed.served[0];
                            prop_assert_eq!(w.client, head);
                            prop_assert_eq!(handed.state.last_deadline(), 60);
                            prop_assert_eq!(handed.state.holds().next().map(|(h, _)| h.token), Some(*token));
                            prop_assert!(granted.insert(w.client), "granted twice");
                        } else {
                            prop_assert!(got.is_none());
                        }
                    }
                    Op::TakeAll(k) => {
                        let taken: Vec<u64> = r.take_all(&key(k)).into_iter().map(|w| w.client).collect();
                        prop_assert_eq!(taken, model.remove(&k).unwrap_or_default());
                    }
                    Op::TakeEveryone => {
                        let mut taken: Vec<u64> = r.take_everyone().into_iter().map(|w| w.client).collect();
                        let mut expected: Vec<u64> = model.drain().flat_map(|(_, q)| q).collect();
                        taken.sort_unstable();
                        expected.sort_unstable();
                        prop_assert_eq!(taken, expected);
                    }
                }
                r.check_index().map_err(TestCaseError::fail)?;
                for (k, q) in &model {
                    prop_assert_eq!(r.waiting(&key(*k)), q.len());
                    prop_assert_eq!(r.has_waiters(&key(*k)), !q.is_empty());
                }
                prop_assert_eq!(r.anyone_waiting(), model.values().any(|q| !q.is_empty()));
            }
        }
    }
}
