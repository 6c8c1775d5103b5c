//! Settling a queue, as values: what to do when a lease ends or a holder leaves (`decide`), the
//! delayed work timers carry (`Job`), and how a blocked client is answered (`Answer`).
//!
//! The shell (`shell::waiting`) reads the lock, asks `decide`, and carries the answer out.

use redis_module::{RedisResult, RedisValue};

use crate::core::error::LockError;
use crate::core::lock::{Millis, Token};
use crate::core::owner::Owner;
use crate::core::registry::QueueKey;

/// How soon to look again at a lock whose expired value Redis may not delete yet (it keeps
/// such values while writes are paused).
pub const KEPT_VALUE_RETRY_MS: Millis = 10;

/// What a lock needs after a change (a lease ran out, the holder released, the key was deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Hand the lock to the head of its queue.
    HandOff,
    /// The holder is live and others wait: look again at its deadline.
    WatchUntil(Millis),
    /// The holder is live and nobody waits: its key's TTL does the rest.
    Keep,
    /// Not live and nobody waits: delete the key.
    Remove,
    /// Redis still keeps the expired value and may not delete it now; writing a new value over
    /// it would trip the server's own assertion. Look again at this time.
    RetryAt(Millis),
}

/// Decide what a lock needs. `live_deadline`: the live holder's deadline (none if the lease ran
/// out or nobody holds it); `waiting`: whether its queue has anyone; `exists`: whether a value
/// is stored under the key; `value_kept`: whether Redis keeps an expired value it would not let
/// us replace (asked only when it matters: it costs a server call).
pub fn decide(
    live_deadline: Option<Millis>,
    waiting: bool,
    exists: bool,
    value_kept: impl FnOnce() -> bool,
    now: Millis,
) -> Next {
    match (live_deadline, waiting) {
        (Some(deadline), true) => Next::WatchUntil(deadline),
        (Some(_), false) => Next::Keep,
        (None, false) => Next::Remove,
        (None, true) if !exists && value_kept() => {
            Next::RetryAt(now.saturating_add(KEPT_VALUE_RETRY_MS))
        }
        (None, true) => Next::HandOff,
    }
}

/// Work a timer carries out later.
#[derive(Debug)]
pub enum Job {
    /// Re-check a queue (deadline reached, key deleted, db flushed or swapped).
    Settle { key: QueueKey, due: Millis },
    /// A waiter disconnected before its grant's reply went out: release that grant.
    Revoke { key: QueueKey, token: Token },
    /// A waiter's WAIT timeout ran out.
    TimeOut { client_id: u64 },
    /// A `CONFIG RESETSTAT` went by: see whether the server really ran it.
    CheckResetStat,
}

impl Job {
    /// Whether the job may write to the dataset (and so must wait while writes are paused).
    pub fn writes(&self) -> bool {
        matches!(self, Job::Settle { .. } | Job::Revoke { .. })
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

/// How a blocked client is answered.
#[derive(Debug)]
pub enum Answer {
    Granted(Grant),
    TimedOut,
    Failed(LockError),
}

impl Answer {
    /// The reply the client reads.
    pub fn reply(&self) -> RedisResult {
        match self {
            Answer::Granted(grant) => Ok(grant_reply(
                &grant.owner.bytes(),
                grant.token,
                grant.with_owner,
            )),
            Answer::TimedOut => Ok(RedisValue::Null),
            Answer::Failed(err) => Err((*err).into()),
        }
    }
}

/// A token as an integer reply (tokens stay below 2^53, see `fencing`).
pub fn token_reply(token: Token) -> RedisValue {
    RedisValue::Integer(i64::try_from(token).unwrap_or(i64::MAX))
}

/// The reply of a granted acquire: the token, or `[owner, token]` for owner `*`.
pub fn grant_reply(owner: &[u8], token: Token, with_owner: bool) -> RedisValue {
    if with_owner {
        RedisValue::Array(vec![
            RedisValue::StringBuffer(owner.to_vec()),
            token_reply(token),
        ])
    } else {
        token_reply(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fencing::TokenSource;
    use crate::core::lock::{live, Holder};
    use crate::core::queue::Waiter;
    use crate::core::registry::{Client, Registry};
    use proptest::prelude::*;

    #[test]
    fn decisions() {
        let never = || -> bool { panic!("asked without need") };
        assert_eq!(decide(Some(9), true, true, never, 0), Next::WatchUntil(9));
        assert_eq!(decide(Some(9), false, true, never, 0), Next::Keep);
        assert_eq!(decide(None, false, true, never, 0), Next::Remove);
        assert_eq!(decide(None, false, false, never, 0), Next::Remove);
        assert_eq!(decide(None, true, true, never, 0), Next::HandOff);
        assert_eq!(decide(None, true, false, || false, 0), Next::HandOff);
        assert_eq!(decide(None, true, false, || true, 5), Next::RetryAt(15));
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Conn(u64);
    impl Client for Conn {
        fn id(&self) -> u64 {
            self.0
        }
    }

    #[derive(Debug, Clone)]
    enum Event {
        Advance(i64),
        Acquire { lock: u8, owner: u8, ttl: i64 },
        Wait { lock: u8, owner: u8, ttl: i64 },
        Release(u8),
        Leave(u8),
        Delete(u8),
        ValueKept(bool),
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            3 => (0i64..30).prop_map(Event::Advance),
            2 => (0u8..2, 0u8..3, 1i64..40).prop_map(|(lock, owner, ttl)| Event::Acquire { lock, owner, ttl }),
            4 => (0u8..2, 0u8..3, 1i64..40).prop_map(|(lock, owner, ttl)| Event::Wait { lock, owner, ttl }),
            2 => (0u8..2).prop_map(Event::Release),
            2 => any::<u8>().prop_map(Event::Leave),
            1 => (0u8..2).prop_map(Event::Delete),
            1 => any::<bool>().prop_map(Event::ValueKept),
        ]
    }

    /// The keyspace of the model: one optional holder per lock (a stored value may be expired).
    struct World {
        now: Millis,
        holders: [Option<Holder>; 2],
        registry: Registry<Conn>,
        tokens: TokenSource,
        kept: bool,
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

        /// What the shell does when it settles a lock: ask `decide`, carry it out. Returns the
        /// time to look again, if any.
        fn settle(&mut self, lock: usize) -> Result<Option<Millis>, TestCaseError> {
            let key = Self::key(lock);
            let holder = self.holders[lock].clone();
            let deadline = live(holder.as_ref(), self.now).map(|h| h.deadline);
            let kept = self.kept;
            let next = decide(
                deadline,
                self.registry.has_waiters(&key),
                holder.is_some(),
                || kept,
                self.now,
            );
            Ok(match next {
                Next::HandOff => {
                    let tokens = &mut self.tokens;
                    let (w, h) = self
                        .registry
                        .hand_off(&key, holder.as_ref(), self.now, || tokens.issue(0))
                        .ok_or_else(|| {
                            TestCaseError::fail("HandOff on a queue that cannot hand off")
                        })?;
                    prop_assert!(h.token > self.last_token, "tokens increase");
                    prop_assert!(!self.granted.contains(&w.client.0), "granted twice");
                    self.last_token = h.token;
                    self.granted.push(w.client.0);
                    let due = h.deadline;
                    self.holders[lock] = Some(h);
                    Some(due)
                }
                Next::WatchUntil(at) | Next::RetryAt(at) => Some(at),
                Next::Keep => None,
                Next::Remove => {
                    self.holders[lock] = None;
                    None
                }
            })
        }
    }

    proptest! {
        /// Random holds, waits, releases, leaves, deletions and kept values on two locks, with the
        /// shell's settle loop run where it runs it: afterwards no queue waits on a free lock,
        /// waiters are served in order, nobody twice, tokens only increase.
        #[test]
        fn no_queue_is_left_waiting_on_a_free_lock(events in proptest::collection::vec(event(), 1..150)) {
            let mut w = World {
                now: 1_000,
                holders: [None, None],
                registry: Registry::default(),
                tokens: TokenSource::default(),
                kept: false,
                granted: Vec::new(),
                last_token: 0,
            };
            let mut next_client = 0u64;
            let mut timers: Vec<(Millis, usize)> = Vec::new();
            let mut queued_order: Vec<Vec<u64>> = vec![Vec::new(), Vec::new()];
            for event in events {
                let touched: Option<usize> = match event {
                    Event::Advance(ms) => { w.now += ms; None }
                    Event::ValueKept(kept) => { w.kept = kept; None }
                    Event::Acquire { lock, owner, ttl } => {
                        let lock = lock as usize;
                        let waiting = w.registry.has_waiters(&World::key(lock));
                        let tokens = &mut w.tokens;
                        if let Ok(crate::core::lock::Acquire::Granted(h) | crate::core::lock::Acquire::Renewed(h)) =
                            crate::core::lock::acquire(w.holders[lock].as_ref(), waiting, &[owner], ttl, w.now, || tokens.issue(0))
                        {
                            w.holders[lock] = Some(h);
                        }
                        Some(lock)
                    }
                    Event::Wait { lock, owner, ttl } => {
                        let lock = lock as usize;
                        next_client += 1;
                        w.registry.join(World::key(lock), Waiter { client: Conn(next_client), owner: Owner::new(&[owner]), ttl });
                        queued_order[lock].push(next_client);
                        Some(lock)
                    }
                    Event::Release(lock) => {
                        let lock = lock as usize;
                        if live(w.holders[lock].as_ref(), w.now).is_some() {
                            w.holders[lock] = None;
                        }
                        Some(lock)
                    }
                    Event::Leave(i) => {
                        if let Some(waiter) = w.registry.leave(u64::from(i) % (next_client + 1)) {
                            for q in &mut queued_order { q.retain(|c| *c != waiter.client.0); }
                        }
                        None
                    }
                    Event::Delete(lock) => { w.holders[lock as usize] = None; Some(lock as usize) }
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
                // Invariant: a queue with waiters has a live holder, or a timer that will serve it.
                for lock in 0..2 {
                    let waiting = w.registry.has_waiters(&World::key(lock));
                    let holder_live = live(w.holders[lock].as_ref(), w.now).is_some();
                    let timer = timers.iter().any(|(_, l)| *l == lock);
                    prop_assert!(!waiting || holder_live || timer,
                        "lock {} free with waiters and no timer", lock);
                    if waiting && !holder_live && !w.kept {
                        // Only a kept value may delay a handoff, and then a retry is pending.
                        prop_assert!(timer);
                    }
                }
            }
            // FIFO per lock: grants of one lock follow the order its waiters queued in.
            for order in &queued_order {
                let served: Vec<u64> = w.granted.iter().copied().filter(|c| order.contains(c)).collect();
                let mut expected: Vec<u64> = order.iter().copied().filter(|c| served.contains(c)).collect();
                expected.truncate(served.len());
                prop_assert_eq!(served, expected);
            }
        }
    }
}
