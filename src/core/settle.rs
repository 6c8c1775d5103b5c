//! Settling a queue, as values: what to do when a lease ends or a holder leaves (`decide`), the
//! delayed work timers carry (`Job`), and how a blocked client is answered (`Answer`; its
//! reply is built by `ffi::reply`).
//!
//! The shell (`shell::settling`) reads the lock, asks `decide`, and carries the answer out.

use crate::core::error::LockError;
use crate::core::lock::{LockState, Millis, Token};
use crate::core::owner::Owner;
use crate::core::registry::QueueKey;
use crate::core::watch::Seen;

/// How soon to look again at a queue whose head fits nowhere though nobody holds the lock.
pub const NO_FIT_RETRY_MS: Millis = 10;

/// What a lock needs after a change (a lease ran out, a holder released, the key was deleted,
/// a waiter left the head of the queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Serve the head of its queue (and whoever fits behind it).
    HandOff,
    /// Look again at this time: the earliest live deadline, when the state changes on its own.
    WatchUntil(Millis),
    /// No live hold and nobody waits: delete the key.
    Remove,
}

/// What `decide` looks at.
#[derive(Clone, Copy, Debug)]
pub struct Look {
    /// The earliest deadline of a live hold (`None`: no live hold).
    pub next_deadline: Option<Millis>,
    /// Someone waits for the key.
    pub waiting: bool,
    /// The head of the queue fits beside the live holds.
    pub head_fits: bool,
}

/// Decide what a lock needs. Every live lock is watched until its next deadline, waiters or
/// not: its key has no TTL, the module ends each lease (and each expiry is accounted and
/// announced on time).
pub fn decide(look: Look, now: Millis) -> Next {
    match look {
        Look {
            waiting: true,
            head_fits: true,
            ..
        } => Next::HandOff,
        Look {
            next_deadline: Some(at),
            ..
        } => Next::WatchUntil(at),
        Look { waiting: true, .. } => Next::WatchUntil(now.saturating_add(NO_FIT_RETRY_MS)),
        Look { .. } => Next::Remove,
    }
}

/// The stored state without the holds whose lease ran out, when some did and others live on
/// (the shell stores it, which accounts and announces each expiry).
pub fn pruned(state: &LockState, now: Millis) -> Option<LockState> {
    if state.has_expired(now) {
        state.live(now)
    } else {
        None
    }
}

/// Work a timer carries out later.
#[derive(Debug)]
pub enum Job {
    /// Re-check a lock and its queue (deadline reached, key deleted, db flushed or swapped).
    Settle { key: QueueKey },
    /// A waiter disconnected before its grant's reply went out: release that grant.
    Revoke { key: QueueKey, token: Token },
    /// A waiter's WAIT timeout ran out.
    TimeOut { client_id: u64 },
    /// Lock values left their names but were not freed (a rename or move): walk the keyspace
    /// for them (`effects::adrift`), a step at a time.
    FindAdrift,
    /// A connection with session holds closed (or was RESET): release them.
    EndSession { client_id: u64 },
    /// This server started or became master: start its fencing epoch (`effects::epochs`).
    StartEpoch,
    /// A command ran while waiters wait behind plain strings (`effects::foreign`): settle those
    /// names.
    LookAtForeign,
    /// Watched names may have changed (`effects::watches`): answer whoever has news.
    LookAtWatched,
    /// A plain string stands under a watched name: look at such names again.
    RecheckWatched,
}

impl Job {
    /// Whether the job may write to the dataset (and so must wait while writes are paused).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Job::Settle { .. }
                | Job::Revoke { .. }
                | Job::EndSession { .. }
                | Job::StartEpoch
                | Job::LookAtForeign
        )
    }
}

/// The lock handed to a waiter.
#[derive(Debug)]
pub struct Grant {
    pub key: QueueKey,
    pub owner: Owner,
    pub token: Token,
    /// The waiter asked with owner `*`: the reply is `[owner, token]`.
    pub with_owner: bool,
}

/// A lock set handed to a waiter: each key with its token, in the order the keys were named.
#[derive(Debug)]
pub struct SetGrant {
    pub members: Vec<(QueueKey, Token)>,
    pub owner: Owner,
    /// The waiter asked with owner `*`: the reply is `[owner, [token ...]]`.
    pub with_owner: bool,
}

/// How a blocked client is answered.
#[derive(Debug)]
pub enum Answer {
    Granted(Grant),
    GrantedSet(SetGrant),
    TimedOut,
    Failed(LockError),
    /// A watcher's news (`LOCK.WATCH`).
    Watched(Box<Seen>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fencing::TokenSource;
    use crate::core::lock::{self, Acquire, Request, Want};
    use crate::core::queue::Waiter;
    use crate::core::registry::{Client, Registry};
    use proptest::prelude::*;

    fn look(next_deadline: Option<Millis>, waiting: bool, head_fits: bool) -> Look {
        Look {
            next_deadline,
            waiting,
            head_fits,
        }
    }

    #[test]
    fn decisions() {
        assert_eq!(decide(look(Some(9), true, false), 0), Next::WatchUntil(9));
        assert_eq!(
            decide(look(Some(9), false, false), 0),
            Next::WatchUntil(9),
            "a lock nobody waits for is still watched: the module ends its lease"
        );
        assert_eq!(
            decide(look(Some(9), true, true), 0),
            Next::HandOff,
            "readers join readers"
        );
        assert_eq!(decide(look(None, false, false), 0), Next::Remove);
        assert_eq!(decide(look(None, true, true), 0), Next::HandOff);
        assert_eq!(decide(look(None, true, false), 5), Next::WatchUntil(15));
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Conn(u64);
    impl Client for Conn {
        fn id(&self) -> u64 {
            self.0
        }
    }

    fn want() -> impl Strategy<Value = Want> {
        prop_oneof![
            Just(Want::Exclusive),
            Just(Want::Shared),
            (1u32..3).prop_map(|n| Want::Permits { limit: 2, n }),
        ]
    }

    #[derive(Debug, Clone)]
    enum Event {
        Advance(i64),
        Acquire {
            lock: u8,
            owner: u8,
            want: Want,
            ttl: i64,
        },
        Wait {
            lock: u8,
            owner: u8,
            want: Want,
            ttl: i64,
        },
        /// A set of both locks (in this order when `flip` is false), exclusive or all shared.
        WaitSet {
            flip: bool,
            owner: u8,
            shared: bool,
            ttl: i64,
        },
        Release(u8, u8),
        Leave(u8),
        Delete(u8),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => (0i64..30).prop_map(Event::Advance),
            2 => (0u8..2, 0u8..4, want(), 1i64..40).prop_map(|(lock, owner, want, ttl)| Event::Acquire { lock, owner, want, ttl }),
            4 => (0u8..2, 0u8..4, want(), 1i64..40).prop_map(|(lock, owner, want, ttl)| Event::Wait { lock, owner, want, ttl }),
            2 => (any::<bool>(), 0u8..4, any::<bool>(), 1i64..40).prop_map(|(flip, owner, shared, ttl)| Event::WaitSet { flip, owner, shared, ttl }),
            2 => (0u8..2, 0u8..4).prop_map(|(l, o)| Event::Release(l, o)),
            2 => any::<u8>().prop_map(Event::Leave),
            1 => (0u8..2).prop_map(Event::Delete),
        ]
    }

    /// The keyspace of the model: one optional state per lock (holds may have expired), the
    /// queues, and the timers the shell would have set.
    struct World {
        now: Millis,
        states: [Option<LockState>; 2],
        registry: Registry<Conn>,
        tokens: TokenSource,
        granted: Vec<u64>,
        last_token: [Token; 2],
        timers: Vec<(Millis, usize)>,
    }

    impl World {
        fn key(lock: usize) -> QueueKey {
            QueueKey {
                db: 0,
                name: vec![b'L', lock as u8].into(),
            }
        }

        fn lock_of(key: &QueueKey) -> usize {
            usize::from(key.name[1])
        }

        /// A grant of `token` on `lock` was stored: tokens of a lock only increase.
        fn granted_token(&mut self, lock: usize, token: Token) -> Result<(), TestCaseError> {
            prop_assert!(token > self.last_token[lock], "tokens increase");
            self.last_token[lock] = token;
            Ok(())
        }

        /// Store a state, and have the lock settled at its first deadline (as every write does).
        fn store(&mut self, lock: usize, state: LockState) {
            self.timers.push((state.first_deadline(), lock));
            self.states[lock] = Some(state);
        }

        /// What the shell does when it settles a lock: prune, ask `decide`, carry it out.
        fn settle(&mut self, lock: usize) -> Result<(), TestCaseError> {
            let key = Self::key(lock);
            let now = self.now;
            if let Some(p) = self.states[lock].as_ref().and_then(|s| pruned(s, now)) {
                self.states[lock] = Some(p);
            }
            let state = self.states[lock].clone();
            let live = lock::live(state.as_ref(), now);
            let next_deadline = live.and_then(|s| s.next_deadline(now));
            let next = decide(
                Look {
                    next_deadline,
                    waiting: self.registry.has_waiters(&key),
                    head_fits: self.registry.head_fits(&key, state.as_ref(), now),
                },
                now,
            );
            match next {
                Next::HandOff => {
                    if !self.hand_off(lock, state.as_ref())? {
                        match next_deadline {
                            Some(at) => self.timers.push((at, lock)),
                            None => self.states[lock] = None,
                        }
                    }
                }
                Next::WatchUntil(at) => self.timers.push((at, lock)),
                Next::Remove => self.states[lock] = None,
            }
            Ok(())
        }

        /// `settling::hand_off`: a set at the head goes whole or waits; else the head and whoever
        /// fits behind it, then a set that may now head the queue.
        fn hand_off(
            &mut self,
            lock: usize,
            state: Option<&LockState>,
        ) -> Result<bool, TestCaseError> {
            let key = Self::key(lock);
            if let Some(set) = self.registry.head_set(&key) {
                return self.grant_set(set);
            }
            let tokens = &mut self.tokens;
            // Nobody served: the live holds are at max_holders (10 here), which `head_fits`
            // does not look at; the shell then watches their next deadline, as `settle` does.
            let Some(handed) = self
                .registry
                .hand_off(&key, state, self.now, 10, || tokens.issue())
            else {
                let live = lock::live(state, self.now).map_or(0, |s| s.live_count(self.now));
                prop_assert!(live >= 10, "a fitting head is served unless at max_holders");
                return Ok(false);
            };
            for (w, token) in &handed.served {
                self.granted_token(lock, *token)?;
                prop_assert!(!self.granted.contains(&w.client.0), "granted twice");
                self.granted.push(w.client.0);
            }
            self.store(lock, handed.state);
            if let Some(set) = self.registry.head_set(&key) {
                self.grant_set(set)?;
            }
            Ok(true)
        }

        /// `sets::grant_waiting`: every key of the set at once, or nothing.
        fn grant_set(&mut self, set: u64) -> Result<bool, TestCaseError> {
            let wants = self
                .registry
                .set_wants(set)
                .ok_or_else(|| TestCaseError::fail("a seated set is known"))?;
            let locks: Vec<usize> = wants.keys.iter().map(Self::lock_of).collect();
            let states: Vec<Option<LockState>> =
                locks.iter().map(|l| self.states[*l].clone()).collect();
            let tokens = &mut self.tokens;
            let Some(handed) = self
                .registry
                .grant_set(set, &states, self.now, 10, || tokens.issue())
            else {
                return Ok(false);
            };
            prop_assert!(!self.granted.contains(&set), "granted twice");
            self.granted.push(set);
            for (key, token, state) in handed.members {
                let lock = Self::lock_of(&key);
                self.granted_token(lock, token)?;
                self.store(lock, state);
                if wants.want == Want::Shared {
                    self.timers.push((self.now, lock)); // readers behind may join
                }
            }
            Ok(true)
        }

        /// Fire every timer due by now, in due order.
        fn fire_due(&mut self) -> Result<(), TestCaseError> {
            loop {
                self.timers.sort_unstable();
                match self.timers.first() {
                    Some(&(due, lock)) if due <= self.now => {
                        self.timers.remove(0);
                        self.settle(lock)?;
                    }
                    _ => return Ok(()),
                }
            }
        }

        /// A set whose every key it heads and fits is never left waiting.
        fn check_sets(&self) -> Result<(), TestCaseError> {
            for lock in 0..2 {
                let Some(set) = self.registry.head_set(&Self::key(lock)) else {
                    continue;
                };
                let wants = self.registry.set_wants(set).expect("seated");
                let ready = wants.keys.iter().all(|k| {
                    let l = Self::lock_of(k);
                    self.registry.head_set(k) == Some(set)
                        && lock::fits(
                            self.states[l].as_ref(),
                            wants.owner.bytes(),
                            wants.want,
                            self.now,
                        )
                });
                let timer = self.timers.iter().any(|(due, _)| *due <= self.now);
                prop_assert!(
                    !ready || timer,
                    "set {} could be served and nothing will serve it",
                    set
                );
            }
            Ok(())
        }

        fn check_locks(&self) -> Result<(), TestCaseError> {
            for lock in 0..2 {
                let key = Self::key(lock);
                let head_alone = self.registry.head_set(&key).is_none();
                let fits_now = head_alone
                    && self
                        .registry
                        .head_fits(&key, self.states[lock].as_ref(), self.now);
                let timer = self.timers.iter().any(|(_, l)| *l == lock);
                prop_assert!(
                    !fits_now || timer,
                    "lock {}: the head fits, nothing will serve it",
                    lock
                );
                let live = lock::live(self.states[lock].as_ref(), self.now);
                prop_assert!(
                    live.is_none() || timer,
                    "lock {}: nothing will end its lease",
                    lock
                );
                if let Some(s) = live {
                    if let LockState::Semaphore { limit, .. } = s {
                        prop_assert!(
                            s.permits_in_use(self.now) <= *limit,
                            "never more than the limit"
                        );
                    }
                    if let LockState::Exclusive(_) = s {
                        prop_assert_eq!(s.live_count(self.now), 1);
                    }
                }
            }
            self.check_sets()
        }
    }

    proptest! {
        /// Random holds of every mode, waits alone and in sets of both locks (in either order),
        /// releases, leaves and deletions, with the shell's settle loop run where it runs it:
        /// afterwards no queue whose head fits is left without a handoff or a timer, no set that
        /// could be served is left waiting, waiters are served in order on each lock (set
        /// members too), nobody twice, tokens only increase, and no state breaks its mode's
        /// rules. Then every lease runs out: every waiter is served (nothing deadlocks).
        #[test]
        fn no_queue_is_left_waiting_when_its_head_fits(events in proptest::collection::vec(event(), 1..150)) {
            let mut w = World {
                now: 1_000,
                states: [None, None],
                registry: Registry::default(),
                tokens: TokenSource::started(),
                granted: Vec::new(),
                last_token: [0, 0],
                timers: Vec::new(),
            };
            let mut next_client = 0u64;
            let mut queued_order: Vec<Vec<u64>> = vec![Vec::new(), Vec::new()];
            for event in events {
                let touched: Vec<usize> = match event {
                    Event::Advance(ms) => { w.now += ms; Vec::new() }
                    Event::Acquire { lock, owner, want, ttl } => {
                        let lock = lock as usize;
                        let queued = w.registry.has_waiters(&World::key(lock));
                        let tokens = &mut w.tokens;
                        let r = Request { owner: &[owner], want, ttl };
                        let got = lock::acquire(w.states[lock].as_ref(), queued, &r, w.now, 10, || tokens.issue());
                        match got {
                            Ok(Acquire::Granted { state, token }) => {
                                w.granted_token(lock, token)?;
                                w.store(lock, state);
                            }
                            Ok(Acquire::Renewed { state, .. }) => w.store(lock, state),
                            _ => {}
                        }
                        vec![lock]
                    }
                    Event::Wait { lock, owner, want, ttl } => {
                        let lock = lock as usize;
                        // The shell queues only a request that did not fit (or met a queue).
                        next_client += 1;
                        let mut name = vec![owner];
                        name.extend_from_slice(&next_client.to_be_bytes());
                        w.registry.join(World::key(lock), Waiter { client: Conn(next_client), owner: Owner::new(&name), ttl, want });
                        queued_order[lock].push(next_client);
                        vec![lock]
                    }
                    Event::WaitSet { flip, owner, shared, ttl } => {
                        next_client += 1;
                        let mut name = vec![owner];
                        name.extend_from_slice(&next_client.to_be_bytes());
                        let locks = if flip { [1, 0] } else { [0, 1] };
                        let want = if shared { Want::Shared } else { Want::Exclusive };
                        w.registry.join_set(locks.iter().map(|l| World::key(*l)).collect(), Waiter { client: Conn(next_client), owner: Owner::new(&name), ttl, want });
                        for lock in locks {
                            queued_order[lock].push(next_client);
                        }
                        locks.to_vec()
                    }
                    Event::Release(lock, owner) => {
                        let lock = lock as usize;
                        if let Some(left) = lock::release(w.states[lock].as_ref(), &[owner], None, w.now) {
                            w.states[lock] = left;
                        }
                        vec![lock]
                    }
                    Event::Leave(i) => match w.registry.leave(u64::from(i) % (next_client + 1)) {
                        Some(left) => {
                            for q in queued_order.iter_mut() {
                                q.retain(|c| *c != left.waiter.client.0);
                            }
                            left.settle.iter().map(World::lock_of).collect()
                        }
                        None => Vec::new(),
                    },
                    Event::Delete(lock) => { w.states[lock as usize] = None; vec![lock as usize] }
                };
                // Timers that are due fire (in due order), then the touched locks are settled.
                w.fire_due()?;
                for lock in touched {
                    w.settle(lock)?;
                }
                w.fire_due()?;
                w.check_locks()?;
            }
            // Every lease runs out in turn: nobody is left waiting.
            for _ in 0..=2 * next_client {
                w.now += 50;
                w.fire_due()?;
                if !w.registry.anyone_waiting() {
                    break;
                }
            }
            prop_assert!(!w.registry.anyone_waiting(), "waiters left after every lease ran out: a deadlock");
            // FIFO per lock: grants of one lock follow the order its waiters queued in.
            for order in &queued_order {
                let served: Vec<u64> = w.granted.iter().copied().filter(|c| order.contains(c)).collect();
                let expected: Vec<u64> = order.iter().copied().filter(|c| served.contains(c)).collect();
                prop_assert_eq!(served, expected);
            }
        }
    }
}
