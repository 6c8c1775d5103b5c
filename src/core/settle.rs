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
    /// A `CONFIG RESETSTAT` went by: see whether the server really ran it.
    CheckResetStat,
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

    /// Whether running it again after a panic is useful (and harmless).
    pub fn retry_after_panic(&self) -> bool {
        !matches!(self, Job::CheckResetStat)
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
        Release(u8, u8),
        Leave(u8),
        Delete(u8),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => (0i64..30).prop_map(Event::Advance),
            2 => (0u8..2, 0u8..4, want(), 1i64..40).prop_map(|(lock, owner, want, ttl)| Event::Acquire { lock, owner, want, ttl }),
            4 => (0u8..2, 0u8..4, want(), 1i64..40).prop_map(|(lock, owner, want, ttl)| Event::Wait { lock, owner, want, ttl }),
            2 => (0u8..2, 0u8..4).prop_map(|(l, o)| Event::Release(l, o)),
            2 => any::<u8>().prop_map(Event::Leave),
            1 => (0u8..2).prop_map(Event::Delete),
        ]
    }

    /// The keyspace of the model: one optional state per lock (holds may have expired).
    struct World {
        now: Millis,
        states: [Option<LockState>; 2],
        registry: Registry<Conn>,
        tokens: TokenSource,
        granted: Vec<u64>,
        last_token: Token,
    }

    impl World {
        fn key(lock: usize) -> QueueKey {
            QueueKey {
                db: 0,
                name: vec![b'L', lock as u8].into(),
            }
        }

        /// What the shell does when it settles a lock: prune, ask `decide`, carry it out.
        /// Returns the time to look again, if any.
        fn settle(&mut self, lock: usize) -> Result<Option<Millis>, TestCaseError> {
            let key = Self::key(lock);
            let now = self.now;
            if let Some(p) = self.states[lock].as_ref().and_then(|s| pruned(s, now)) {
                self.states[lock] = Some(p);
            }
            let state = self.states[lock].clone();
            let live = lock::live(state.as_ref(), now);
            let next = decide(
                Look {
                    next_deadline: live.and_then(|s| s.next_deadline(now)),
                    waiting: self.registry.has_waiters(&key),
                    head_fits: self.registry.head_fits(&key, state.as_ref(), now),
                },
                now,
            );
            Ok(match next {
                Next::HandOff => {
                    let tokens = &mut self.tokens;
                    let handed = self
                        .registry
                        .hand_off(&key, state.as_ref(), now, 10, || tokens.issue())
                        .ok_or_else(|| {
                            TestCaseError::fail("HandOff on a queue that cannot hand off")
                        })?;
                    for (w, token) in &handed.served {
                        prop_assert!(*token > self.last_token, "tokens increase");
                        prop_assert!(!self.granted.contains(&w.client.0), "granted twice");
                        self.last_token = *token;
                        self.granted.push(w.client.0);
                    }
                    let due = handed.state.next_deadline(now);
                    self.states[lock] = Some(handed.state);
                    due
                }
                Next::WatchUntil(at) => Some(at),
                Next::Remove => {
                    self.states[lock] = None;
                    None
                }
            })
        }
    }

    proptest! {
        /// Random holds of every mode, waits, releases, leaves and deletions on two locks, with the shell's settle loop run where it runs it: afterwards no queue whose
        /// head fits is left without a handoff or a timer, waiters are served in order, nobody
        /// twice, tokens only increase, and no state breaks its mode's rules.
        #[test]
        fn no_queue_is_left_waiting_when_its_head_fits(events in proptest::collection::vec(event(), 1..150)) {
            let mut w = World {
                now: 1_000,
                states: [None, None],
                registry: Registry::default(),
                tokens: TokenSource::started(),
                granted: Vec::new(),
                last_token: 0,
            };
            let mut next_client = 0u64;
            let mut timers: Vec<(Millis, usize)> = Vec::new();
            let mut queued_order: Vec<Vec<u64>> = vec![Vec::new(), Vec::new()];
            for event in events {
                let touched: Option<usize> = match event {
                    Event::Advance(ms) => { w.now += ms; None }
                    Event::Acquire { lock, owner, want, ttl } => {
                        let lock = lock as usize;
                        let queued = w.registry.has_waiters(&World::key(lock));
                        let tokens = &mut w.tokens;
                        let r = Request { owner: &[owner], want, ttl };
                        if let Ok(Acquire::Granted { state, token } | Acquire::Renewed { state, token }) =
                            lock::acquire(w.states[lock].as_ref(), queued, &r, w.now, 10, || tokens.issue())
                        {
                            prop_assert!(token >= w.last_token || state.holds().any(|(h, _)| h.token == token));
                            w.last_token = w.last_token.max(token);
                            w.states[lock] = Some(state);
                        }
                        Some(lock)
                    }
                    Event::Wait { lock, owner, want, ttl } => {
                        let lock = lock as usize;
                        // The shell queues only a request that did not fit (or met a queue).
                        next_client += 1;
                        let mut name = vec![owner];
                        name.extend_from_slice(&next_client.to_be_bytes());
                        w.registry.join(World::key(lock), Waiter { client: Conn(next_client), owner: crate::core::owner::Owner::new(&name), ttl, want });
                        queued_order[lock].push(next_client);
                        Some(lock)
                    }
                    Event::Release(lock, owner) => {
                        let lock = lock as usize;
                        if let Some(left) = lock::release(w.states[lock].as_ref(), &[owner], None, w.now) {
                            w.states[lock] = left;
                        }
                        Some(lock)
                    }
                    Event::Leave(i) => {
                        let mut touched = None;
                        if let Some(left) = w.registry.leave(u64::from(i) % (next_client + 1)) {
                            for (lock, q) in queued_order.iter_mut().enumerate() {
                                if left.settle.contains(&World::key(lock)) {
                                    touched = Some(lock); // the head changed
                                }
                                q.retain(|c| *c != left.waiter.client.0);
                            }
                        }
                        touched
                    }
                    Event::Delete(lock) => { w.states[lock as usize] = None; Some(lock as usize) }
                };
                // Timers that are due fire (in due order), then the touched lock is settled.
                timers.sort_unstable();
                while let Some(&(due, lock)) = timers.first() {
                    if due > w.now { break; }
                    timers.remove(0);
                    if let Some(at) = w.settle(lock)? { timers.push((at, lock)); }
                }
                if let Some(lock) = touched {
                    if let Some(at) = w.settle(lock)? { timers.push((at, lock)); }
                }
                for lock in 0..2 {
                    let key = World::key(lock);
                    let fits_now = w.registry.head_fits(&key, w.states[lock].as_ref(), w.now);
                    let timer = timers.iter().any(|(_, l)| *l == lock);
                    prop_assert!(!fits_now || timer, "lock {}: the head fits, nothing will serve it", lock);
                    let waiting = w.registry.has_waiters(&key);
                    let live = lock::live(w.states[lock].as_ref(), w.now);
                    prop_assert!(!waiting || live.is_some() || timer, "lock {} free with waiters and no timer", lock);
                    prop_assert!(live.is_none() || timer, "lock {}: nothing will end its lease", lock);
                    if let Some(s) = live {
                        if let LockState::Semaphore { limit, .. } = s {
                            prop_assert!(s.permits_in_use(w.now) <= *limit, "never more than the limit");
                        }
                        if let LockState::Exclusive(_) = s {
                            prop_assert_eq!(s.live_count(w.now), 1);
                        }
                    }
                }
            }
            // FIFO per lock: grants of one lock follow the order its waiters queued in.
            for order in &queued_order {
                let served: Vec<u64> = w.granted.iter().copied().filter(|c| order.contains(c)).collect();
                let expected: Vec<u64> = order.iter().copied().filter(|c| served.contains(c)).collect();
                prop_assert_eq!(served, expected);
            }
        }
    }
}
