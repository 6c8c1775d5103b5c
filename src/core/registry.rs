//! The wait queues of all locks on a server, and the index of who waits where.
//!
//! Queues are keyed by (db, key name), not stored in the lock value: a queue belongs to the
//! name its waiters asked for, so DEL, RENAME, SWAPDB or FLUSHALL move or drop the holder but
//! leave the waiters where they were, and settling (`settle`) decides what they get.
//!
//! A client waiting for a set of locks at once (`LOCK.MACQUIRE ... WAIT`) takes a seat in every
//! one of its keys' queues in the same step. Arrival order is then one order across all queues:
//! the earliest waiter anywhere heads each of its queues, so it is served once its keys' holders
//! are gone, and no two waiters can each wait for the other (no deadlock). A set is served when it
//! heads every one of its queues and fits beside each key's live holds (`grant_set`), never
//! from one queue alone: single-key waiters behind it keep their FIFO order.
//!
//! Generic over the client handle, so it is tested here with plain numbers; the Redis layer
//! keeps one instance of it over blocked clients (`effects::queues`). Tokens come from whoever
//! calls `hand_off` or `grant_set`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::lock::{fits, Holder, LockState, Millis, Token, Want};
use crate::core::owner::Owner;
use crate::core::queue::{Handed, Place, WaitQueue, Waiter};

/// The name a queue belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct QueueKey {
    pub db: i32,
    pub name: Box<[u8]>,
}

/// A waiter that left its queue (or its queues).
pub struct Left<C> {
    pub waiter: Waiter<C>,
    /// The queues to settle now: it was their head and others wait behind it.
    pub settle: Vec<QueueKey>,
}

/// A queued client: the registry indexes it by its id.
pub trait Client {
    fn id(&self) -> u64;
}

/// Who stands at a place in a queue: a client waiting for this key alone, or (by its client
/// id) one waiting for a set of keys, whose client is kept once in `Registry::sets`.
#[derive(Debug)]
pub enum Seat<C> {
    Alone(C),
    InSet(u64),
}

/// A client waiting for a set of keys, and its place in each key's queue (in the order the
/// keys were given).
struct SetWaiter<C> {
    waiter: Waiter<C>,
    places: Vec<(Arc<QueueKey>, Place)>,
}

/// What a waiting set asks for, to read its keys' states before `grant_set`.
#[derive(Clone, Debug)]
pub struct SetWants {
    pub keys: Vec<QueueKey>,
    pub owner: Owner,
    pub want: Want,
}

/// A set granted in one step: its waiter, and each key's token and new state (key order).
#[derive(Debug)]
pub struct SetHanded<C> {
    pub waiter: Waiter<C>,
    pub members: Vec<(QueueKey, Token, LockState)>,
}

pub struct Registry<C> {
    /// The key is shared with the index entry of each of its waiters (one copy of the name
    /// per queue, not one per waiter).
    queues: HashMap<Arc<QueueKey>, WaitQueue<Seat<C>>>,
    /// Where each client waiting alone stands: its queue and its place in it.
    client_queue: HashMap<u64, (Arc<QueueKey>, Place)>,
    /// Each client waiting for a set, by id.
    sets: HashMap<u64, SetWaiter<C>>,
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        Self {
            queues: HashMap::new(),
            client_queue: HashMap::new(),
            sets: HashMap::new(),
        }
    }
}

fn alone<C>(seat: &Seat<C>) -> bool {
    matches!(seat, Seat::Alone(_))
}

impl<C: Client> Registry<C> {
    /// The shared copy of `key` if it has a queue, else a new one.
    fn shared(&self, key: QueueKey) -> Arc<QueueKey> {
        match self.queues.get_key_value(&key) {
            Some((shared, _)) => Arc::clone(shared),
            None => Arc::new(key),
        }
    }

    /// Queue a client at the tail of `key`'s queue.
    pub fn join(&mut self, key: QueueKey, waiter: Waiter<C>) {
        let client_id = waiter.client.id();
        let key = self.shared(key);
        let place = self
            .queues
            .entry(Arc::clone(&key))
            .or_default()
            .push(waiter.map_client(Seat::Alone));
        self.client_queue.insert(client_id, (key, place));
    }

    /// Queue a client at the tail of every queue of `keys` (distinct names), in one step.
    pub fn join_set(&mut self, keys: Vec<QueueKey>, waiter: Waiter<C>) {
        let client_id = waiter.client.id();
        let mut places = Vec::with_capacity(keys.len());
        for key in keys {
            let key = self.shared(key);
            let seat = Waiter {
                client: Seat::InSet(client_id),
                owner: waiter.owner.clone(),
                ttl: waiter.ttl,
                want: waiter.want,
            };
            let place = self.queues.entry(Arc::clone(&key)).or_default().push(seat);
            places.push((key, place));
        }
        self.sets.insert(client_id, SetWaiter { waiter, places });
    }

    /// Take a client out of whatever queues it is in (timeout, disconnect). `None` if it was
    /// not queued (already answered).
    pub fn leave(&mut self, client_id: u64) -> Option<Left<C>> {
        let left = match self.client_queue.remove(&client_id) {
            Some((key, place)) => {
                let (seat, settle) = self.unseat(&key, place)?;
                Left {
                    // The index never points at a set's seat.
                    waiter: unseated(seat).ok()?,
                    settle: settle.into_iter().collect(),
                }
            }
            None => {
                let set = self.sets.remove(&client_id)?;
                Left {
                    settle: self.unseat_set(&set),
                    waiter: set.waiter,
                }
            }
        };
        self.shrink_if_idle();
        Some(left)
    }

    /// Take the seat at `place` out of `key`'s queue; with the key to settle if it was the
    /// head and others wait behind it (they may fit now: readers behind a writer).
    fn unseat(
        &mut self,
        key: &Arc<QueueKey>,
        place: Place,
    ) -> Option<(Waiter<Seat<C>>, Option<QueueKey>)> {
        let entry = self.queues.get_mut(&**key)?;
        let was_head = entry.is_head(place);
        let seat = entry.remove(place)?;
        let others_wait = !entry.is_empty();
        if !others_wait {
            self.queues.remove(&**key);
        }
        Some((seat, (was_head && others_wait).then(|| (**key).clone())))
    }

    /// Take a set's seats out of all its queues; the queues to settle.
    fn unseat_set(&mut self, set: &SetWaiter<C>) -> Vec<QueueKey> {
        set.places
            .iter()
            .filter_map(|(key, place)| self.unseat(key, *place)?.1)
            .collect()
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
                .map(|w| Box::<[u8]>::from(w.owner.bytes()))
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

    /// The set (its client id) whose seat heads `key`'s queue, if a set's does.
    pub fn head_set(&self, key: &QueueKey) -> Option<u64> {
        match self.queues.get(key)?.head()?.client {
            Seat::InSet(id) => Some(id),
            Seat::Alone(_) => None,
        }
    }

    /// What the waiting set `id` asks for.
    pub fn set_wants(&self, id: u64) -> Option<SetWants> {
        let set = self.sets.get(&id)?;
        Some(SetWants {
            keys: set.places.iter().map(|(k, _)| (**k).clone()).collect(),
            owner: set.waiter.owner.clone(),
            want: set.waiter.want,
        })
    }

    /// Serve the head of `key`'s queue (and whoever fits behind it, see
    /// `WaitQueue::hand_off`), with tokens from `issue_token`. A set's seat stops the step.
    pub fn hand_off(
        &mut self,
        key: &QueueKey,
        state: Option<&LockState>,
        now: Millis,
        max_holders: usize,
        issue_token: impl FnMut() -> Option<Token>,
    ) -> Option<Handed<C>> {
        let entry = self.queues.get_mut(key)?;
        let handed = entry.hand_off(state, now, max_holders, alone, issue_token);
        if entry.is_empty() {
            self.queues.remove(key);
        }
        self.shrink_if_idle();
        let Handed { served, state } = handed?;
        let served = served
            .into_iter()
            .filter_map(|(seat, token)| {
                // `alone` let only clients waiting alone through.
                let waiter = unseated(seat).ok()?;
                self.client_queue.remove(&waiter.client.id());
                Some((waiter, token))
            })
            .collect();
        Some(Handed { served, state })
    }

    /// Grant the waiting set `id` every one of its keys in one step, if it heads each key's
    /// queue and fits beside its live holds: `states` are its keys' stored states, in the
    /// order of `set_wants(id).keys`. Each key gets its own token, in key order. `None` (and
    /// nothing changes but tokens maybe spent) if any key is not its yet.
    pub fn grant_set(
        &mut self,
        id: u64,
        states: &[Option<LockState>],
        now: Millis,
        max_holders: usize,
        mut issue_token: impl FnMut() -> Option<Token>,
    ) -> Option<SetHanded<C>> {
        let set = self.sets.get(&id)?;
        let w = &set.waiter;
        if states.len() != set.places.len() {
            return None;
        }
        let ready = set.places.iter().zip(states).all(|((key, place), state)| {
            let live = state.as_ref().and_then(|s| s.live(now));
            self.queues.get(&**key).is_some_and(|q| q.is_head(*place))
                && fits(live.as_ref(), w.owner.bytes(), w.want, now)
                && live
                    .as_ref()
                    .is_none_or(|s| s.live_count(now) < max_holders)
        });
        if !ready {
            return None;
        }
        let mut members = Vec::with_capacity(states.len());
        for ((key, _), state) in set.places.iter().zip(states) {
            let holder = Holder {
                owner: w.owner.clone(),
                token: issue_token()?,
                deadline: now.saturating_add(w.ttl),
                granted: now,
            };
            let token = holder.token;
            let next = match state.as_ref().and_then(|s| s.live(now)) {
                Some(live) => live.with(w.want, holder),
                None => LockState::first(w.want, holder),
            };
            members.push(((**key).clone(), token, next));
        }
        let set = self.sets.remove(&id)?;
        for (key, place) in &set.places {
            self.unseat(key, *place);
        }
        self.shrink_if_idle();
        Some(SetHanded {
            waiter: set.waiter,
            members,
        })
    }

    /// Remove and return every waiter of one queue, in order, with the other queues to settle
    /// (a set among them left those too, from their head maybe).
    pub fn take_all(&mut self, key: &QueueKey) -> (Vec<Waiter<C>>, Vec<QueueKey>) {
        let seats: Vec<_> = self
            .queues
            .remove(key)
            .map(|mut e| e.drain().collect())
            .unwrap_or_default();
        let mut waiters = Vec::with_capacity(seats.len());
        let mut settle = Vec::new();
        for seat in seats {
            match unseated(seat) {
                Ok(waiter) => {
                    self.client_queue.remove(&waiter.client.id());
                    waiters.push(waiter);
                }
                Err(id) => {
                    if let Some(set) = self.sets.remove(&id) {
                        settle.extend(self.unseat_set(&set));
                        waiters.push(set.waiter);
                    }
                }
            }
        }
        self.shrink_if_idle();
        (waiters, settle)
    }

    /// Remove and return every waiter of every queue.
    pub fn take_everyone(&mut self) -> Vec<Waiter<C>> {
        self.client_queue.clear();
        let mut everyone: Vec<_> = self
            .queues
            .drain()
            .flat_map(|(_, mut e)| e.drain().collect::<Vec<_>>())
            .filter_map(|seat| unseated(seat).ok())
            .collect();
        everyone.extend(self.sets.drain().map(|(_, set)| set.waiter));
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
            self.sets = HashMap::new();
        }
    }
}

/// A seat's waiter as the client waiting alone there, or else the id of the set it belongs to.
fn unseated<C>(w: Waiter<Seat<C>>) -> Result<Waiter<C>, u64> {
    let Waiter {
        client,
        owner,
        ttl,
        want,
    } = w;
    match client {
        Seat::Alone(client) => Ok(Waiter {
            client,
            owner,
            ttl,
            want,
        }),
        Seat::InSet(id) => Err(id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::{Holder, Want};
    use crate::core::owner::Owner;
    use proptest::prelude::*;
    use std::collections::HashSet;

    impl Client for u64 {
        fn id(&self) -> u64 {
            *self
        }
    }

    impl Registry<u64> {
        /// Every waiter alone stands in exactly one queue and the index says where; every set
        /// has one seat in each of its keys' queues, at the place it keeps.
        fn check_index(&self) -> Result<(), String> {
            let mut alone = 0;
            let mut set_seats = 0;
            for (key, entry) in &self.queues {
                if entry.is_empty() {
                    return Err(format!("empty queue kept for {key:?}"));
                }
                for w in entry.iter() {
                    match w.client {
                        Seat::Alone(id) => {
                            alone += 1;
                            match self.client_queue.get(&id) {
                                Some((k, _)) if Arc::ptr_eq(k, key) => {}
                                other => return Err(format!("client {id} indexed as {other:?}")),
                            }
                        }
                        Seat::InSet(id) => {
                            set_seats += 1;
                            let set = self.sets.get(&id).ok_or(format!("set {id} unknown"))?;
                            if !set.places.iter().any(|(k, _)| Arc::ptr_eq(k, key)) {
                                return Err(format!("set {id} seated where it does not know"));
                            }
                        }
                    }
                }
            }
            if alone != self.client_queue.len() {
                return Err(format!(
                    "{alone} queued, {} indexed",
                    self.client_queue.len()
                ));
            }
            let places: usize = self.sets.values().map(|s| s.places.len()).sum();
            if places != set_seats {
                return Err(format!("{set_seats} set seats, {places} places"));
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
        // A seat costs at most a tag more than the waiter alone (a client with a niche, as
        // the server's blocked client has, costs nothing more: `effects::queues`).
        assert!(
            std::mem::size_of::<Waiter<Seat<[u64; 4]>>>()
                <= std::mem::size_of::<Waiter<[u64; 4]>>() + 8
        );
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join(u8),
        /// A set of the keys whose bits are set (at least two).
        JoinSet(u8),
        Leave(u8),
        HandOff {
            key: u8,
            free: bool,
        },
        GrantHeadSet {
            key: u8,
            free: bool,
        },
        TakeAll(u8),
        TakeEveryone,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3).prop_map(Op::Join),
            2 => (0u8..8).prop_filter("two keys or more", |m| m.count_ones() >= 2).prop_map(Op::JoinSet),
            3 => any::<u8>().prop_map(Op::Leave),
            3 => (0u8..3, any::<bool>()).prop_map(|(key, free)| Op::HandOff { key, free }),
            3 => (0u8..3, any::<bool>()).prop_map(|(key, free)| Op::GrantHeadSet { key, free }),
            1 => (0u8..3).prop_map(Op::TakeAll),
            1 => Just(Op::TakeEveryone),
        ]
    }

    /// The model: one ordered list of client ids per key, and each set's keys.
    #[derive(Default)]
    struct Model {
        queues: HashMap<u8, Vec<u64>>,
        sets: HashMap<u64, Vec<u8>>,
    }

    impl Model {
        fn head(&self, k: u8) -> Option<u64> {
            self.queues.get(&k).and_then(|q| q.first().copied())
        }

        /// Take `id` out of every list; the keys it stood in.
        fn remove(&mut self, id: u64) -> Vec<u8> {
            let mut keys = Vec::new();
            for (k, q) in &mut self.queues {
                if let Some(at) = q.iter().position(|c| *c == id) {
                    q.remove(at);
                    keys.push(*k);
                }
            }
            self.sets.remove(&id);
            keys
        }
    }

    fn waiter(id: u64) -> Waiter<u64> {
        Waiter {
            client: id,
            owner: Owner::new(&id.to_be_bytes()),
            ttl: 10,
            want: Want::Exclusive,
        }
    }

    fn busy() -> LockState {
        LockState::Exclusive(Holder {
            owner: Owner::new(b"h"),
            token: 1,
            deadline: 100,
            granted: 0,
        })
    }

    proptest! {
        /// Random joins (alone and in sets), leaves (timeouts, disconnects), handoffs, set grants
        /// and flushes against a model of one ordered list per key.
        #[test]
        fn the_registry_matches_a_model_of_ordered_lists(ops in proptest::collection::vec(op(), 1..200)) {
            let mut r: Registry<u64> = Registry::default();
            let mut model = Model::default();
            let mut next_id = 0u64;
            let mut next_token = 0u64;
            let mut granted = HashSet::new();
            for op in ops {
                match op {
                    Op::Join(k) => {
                        next_id += 1;
                        r.join(key(k), waiter(next_id));
                        model.queues.entry(k).or_default().push(next_id);
                    }
                    Op::JoinSet(mask) => {
                        next_id += 1;
                        let keys: Vec<u8> = (0..3).filter(|k| mask & (1 << k) != 0).collect();
                        r.join_set(keys.iter().map(|k| key(*k)).collect(), waiter(next_id));
                        for k in &keys {
                            model.queues.entry(*k).or_default().push(next_id);
                        }
                        model.sets.insert(next_id, keys);
                    }
                    Op::Leave(i) => {
                        let id = u64::from(i) % (next_id + 1);
                        let heads: Vec<u8> = (0..3).filter(|k| model.head(*k) == Some(id)).collect();
                        let stood = model.remove(id);
                        let left = r.leave(id);
                        prop_assert_eq!(left.as_ref().map(|l| l.waiter.client), (!stood.is_empty()).then_some(id));
                        let mut settle: Vec<QueueKey> = left.map(|l| l.settle).unwrap_or_default();
                        let mut expected: Vec<QueueKey> = heads.into_iter().filter(|k| model.head(*k).is_some()).map(key).collect();
                        settle.sort_by(|a, b| a.name.cmp(&b.name));
                        expected.sort_by(|a, b| a.name.cmp(&b.name));
                        prop_assert_eq!(settle, expected, "settle where it was the head, with others behind");
                    }
                    Op::HandOff { key: k, free } => {
                        let holder = busy();
                        let got = r.hand_off(&key(k), (!free).then_some(&holder), 50, 10, || { next_token += 1; Some(next_token) });
                        match model.head(k) {
                            Some(head) if free && !model.sets.contains_key(&head) => {
                                model.remove(head);
                                let handed = got.expect("a free lock goes to the head");
                                prop_assert_eq!(handed.served.len(), 1, "exclusive waiters one at a time");
                                let (w, token) = &handed.served[0];
                                prop_assert_eq!(w.client, head);
                                prop_assert_eq!(handed.state.last_deadline(), 60);
                                prop_assert_eq!(handed.state.holds().next().map(|(h, _)| h.token), Some(*token));
                                prop_assert!(granted.insert(w.client), "granted twice");
                            }
                            _ => prop_assert!(got.is_none(), "a set's seat is served with its set only"),
                        }
                    }
                    Op::GrantHeadSet { key: k, free } => {
                        let Some(id) = r.head_set(&key(k)) else {
                            prop_assert!(model.head(k).is_none_or(|h| !model.sets.contains_key(&h)));
                            continue;
                        };
                        let wants = r.set_wants(id).expect("a seated set is known");
                        let mut states: Vec<Option<LockState>> = vec![None; wants.keys.len()];
                        if !free {
                            states[0] = Some(busy());
                        }
                        let keys = model.sets[&id].clone();
                        let heads_all = keys.iter().all(|k| model.head(*k) == Some(id));
                        let got = r.grant_set(id, &states, 50, 10, || { next_token += 1; Some(next_token) });
                        if free && heads_all {
                            let handed = got.expect("a set heading all its queues, all free, is granted");
                            prop_assert_eq!(handed.waiter.client, id);
                            let names: Vec<QueueKey> = handed.members.iter().map(|(k, _, _)| k.clone()).collect();
                            prop_assert_eq!(names, keys.iter().map(|k| key(*k)).collect::<Vec<_>>());
                            for (_, token, state) in &handed.members {
                                prop_assert_eq!(state.holds().next().map(|(h, _)| h.token), Some(*token));
                            }
                            prop_assert!(granted.insert(id), "granted twice");
                            model.remove(id);
                        } else {
                            prop_assert!(got.is_none(), "not all heads, or a key is held");
                        }
                    }
                    Op::TakeAll(k) => {
                        let (taken, _) = r.take_all(&key(k));
                        let taken: Vec<u64> = taken.into_iter().map(|w| w.client).collect();
                        let expected = model.queues.get(&k).cloned().unwrap_or_default();
                        for id in &expected {
                            model.remove(*id);
                        }
                        prop_assert_eq!(taken, expected);
                    }
                    Op::TakeEveryone => {
                        let mut taken: Vec<u64> = r.take_everyone().into_iter().map(|w| w.client).collect();
                        let mut expected: Vec<u64> = model.queues.drain().flat_map(|(_, q)| q).collect::<HashSet<_>>().into_iter().collect();
                        model.sets.clear();
                        taken.sort_unstable();
                        expected.sort_unstable();
                        prop_assert_eq!(taken, expected);
                    }
                }
                r.check_index().map_err(TestCaseError::fail)?;
                for (k, q) in &model.queues {
                    prop_assert_eq!(r.waiting(&key(*k)), q.len());
                    prop_assert_eq!(r.has_waiters(&key(*k)), !q.is_empty());
                    prop_assert_eq!(r.head_set(&key(*k)), q.first().copied().filter(|h| model.sets.contains_key(h)));
                }
                prop_assert_eq!(r.anyone_waiting(), model.queues.values().any(|q| !q.is_empty()));
            }
        }
    }
}
