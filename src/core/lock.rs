//! The pure lock state machine: holder, fencing token, deadline, and what each command does to
//! them.
//!
//! No FFI here. The Redis layer keeps the holder in the keyspace (it is data: persisted and
//! replicated) and the queues beside it (`queue`, `registry`: waiters are connections, neither
//! persisted nor replicated), and asks these functions what each command does.

use crate::core::error::LockError;
use crate::core::owner::Owner;

/// Unix time or a duration, in milliseconds.
pub type Millis = i64;
/// A fencing token: positive, strictly increasing per server (see `fencing`).
pub type Token = u64;

/// Who holds a lock, under which token, until when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: Owner,
    pub token: Token,
    /// The lease ends at this unix-ms instant: the holder is live while `now < deadline`.
    pub deadline: Millis,
    /// When this owner was granted the lock (unix ms); renewals and extensions keep it.
    pub granted: Millis,
}

impl Holder {
    pub fn is_live(&self, now: Millis) -> bool {
        now < self.deadline
    }

    /// Milliseconds left on the lease (0 once it ran out).
    pub fn remaining(&self, now: Millis) -> Millis {
        self.deadline.saturating_sub(now).max(0)
    }

    /// Milliseconds since the grant.
    pub fn held_for(&self, now: Millis) -> Millis {
        now.saturating_sub(self.granted).max(0)
    }
}

/// The holder, if its lease is still running.
pub fn live(holder: Option<&Holder>, now: Millis) -> Option<&Holder> {
    holder.filter(|h| h.is_live(now))
}

/// The deadline of a lease of `ttl` ms that starts `now`; an error if it does not fit.
pub fn deadline(now: Millis, ttl: Millis) -> Result<Millis, LockError> {
    if ttl <= 0 {
        return Err(LockError::TtlNotPositive);
    }
    now.checked_add(ttl).ok_or(LockError::TtlTooLarge)
}

/// What an acquire attempt does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// The lock was free and nobody waited: a new holder with a fresh token.
    Granted(Holder),
    /// The caller already held it: same token, the lease restarts.
    Renewed(Holder),
    /// Someone else holds it, or others wait for it first.
    Busy,
}

/// Decide `owner`'s attempt to take the lock for `ttl` ms. `others_waiting` keeps the queue fair:
/// a free lock with waiters belongs to the head of the queue, never to a newcomer.
pub fn acquire(
    holder: Option<&Holder>,
    others_waiting: bool,
    owner: &[u8],
    ttl: Millis,
    now: Millis,
    issue_token: impl FnOnce() -> Option<Token>,
) -> Result<Acquire, LockError> {
    let deadline = deadline(now, ttl)?;
    Ok(match live(holder, now) {
        Some(h) if h.owner.matches(owner) => Acquire::Renewed(Holder {
            deadline,
            ..h.clone()
        }),
        Some(_) => Acquire::Busy,
        None if others_waiting => Acquire::Busy,
        None => Acquire::Granted(Holder {
            owner: Owner::new(owner),
            token: issue_token().ok_or(LockError::TokensExhausted)?,
            deadline,
            granted: now,
        }),
    })
}

/// Whether `owner` may release: only the live holder can.
pub fn may_release(holder: Option<&Holder>, owner: &[u8], now: Millis) -> bool {
    live(holder, now).is_some_and(|h| h.owner.matches(owner))
}

/// The extended holder if `owner` holds the lock, `None` otherwise.
pub fn extend(
    holder: Option<&Holder>,
    owner: &[u8],
    ttl: Millis,
    now: Millis,
) -> Result<Option<Holder>, LockError> {
    let deadline = deadline(now, ttl)?;
    Ok(live(holder, now)
        .filter(|h| h.owner.matches(owner))
        .map(|h| Holder {
            deadline,
            ..h.clone()
        }))
}

/// The live holder's token.
pub fn fence(holder: Option<&Holder>, now: Millis) -> Option<Token> {
    live(holder, now).map(|h| h.token)
}

/// Whether `token` belongs to the live holder.
pub fn token_is_current(holder: Option<&Holder>, token: Token, now: Millis) -> bool {
    fence(holder, now) == Some(token)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fencing::TokenSource;
    use crate::core::queue::{Place, WaitQueue, Waiter};
    use proptest::prelude::*;

    fn holder(owner: &str, token: Token, deadline: Millis) -> Holder {
        granted_at(owner, token, deadline, 0)
    }

    fn granted_at(owner: &str, token: Token, deadline: Millis, granted: Millis) -> Holder {
        Holder {
            owner: Owner::new(owner.as_bytes()),
            token,
            deadline,
            granted,
        }
    }

    #[test]
    fn free_lock_is_granted_with_a_fresh_token() {
        let got = acquire(None, false, b"a", 100, 1_000, || Some(7)).unwrap();
        assert_eq!(got, Acquire::Granted(granted_at("a", 7, 1_100, 1_000)));
    }

    #[test]
    fn without_a_token_left_nothing_is_granted() {
        assert_eq!(
            acquire(None, false, b"a", 100, 1_000, || None),
            Err(LockError::TokensExhausted)
        );
    }

    #[test]
    fn same_owner_renews_with_the_same_token() {
        let h = holder("a", 7, 1_100);
        let got = acquire(Some(&h), true, b"a", 500, 1_050, || unreachable!()).unwrap();
        assert_eq!(got, Acquire::Renewed(holder("a", 7, 1_550)));
    }

    #[test]
    fn other_owner_is_busy_until_the_deadline() {
        let h = holder("a", 7, 1_100);
        assert_eq!(
            acquire(Some(&h), false, b"b", 10, 1_099, || Some(8)).unwrap(),
            Acquire::Busy
        );
        assert_eq!(
            acquire(Some(&h), false, b"b", 10, 1_100, || Some(8)).unwrap(),
            Acquire::Granted(granted_at("b", 8, 1_110, 1_100))
        );
    }

    #[test]
    fn newcomer_never_overtakes_the_queue() {
        assert_eq!(
            acquire(None, true, b"b", 10, 0, || Some(1)).unwrap(),
            Acquire::Busy
        );
        let expired = holder("a", 1, 5);
        assert_eq!(
            acquire(Some(&expired), true, b"b", 10, 9, || Some(2)).unwrap(),
            Acquire::Busy
        );
    }

    #[test]
    fn ttl_must_be_positive_and_fit() {
        assert_eq!(
            acquire(None, false, b"a", 0, 0, || Some(1)),
            Err(LockError::TtlNotPositive)
        );
        assert_eq!(
            acquire(None, false, b"a", -5, 0, || Some(1)),
            Err(LockError::TtlNotPositive)
        );
        assert_eq!(
            acquire(None, false, b"a", i64::MAX, 10, || Some(1)),
            Err(LockError::TtlTooLarge)
        );
        assert_eq!(
            extend(None, b"a", i64::MAX, 10),
            Err(LockError::TtlTooLarge)
        );
    }

    #[test]
    fn only_the_live_holder_releases_or_extends() {
        let h = holder("a", 3, 100);
        assert!(may_release(Some(&h), b"a", 99));
        assert!(!may_release(Some(&h), b"b", 99));
        assert!(!may_release(Some(&h), b"a", 100));
        assert!(!may_release(None, b"a", 0));
        assert_eq!(
            extend(Some(&h), b"a", 50, 60).unwrap(),
            Some(holder("a", 3, 110))
        );
        assert_eq!(extend(Some(&h), b"b", 50, 60).unwrap(), None);
        assert_eq!(extend(Some(&h), b"a", 50, 100).unwrap(), None);
    }

    #[test]
    fn fence_reports_only_the_live_token() {
        let h = holder("a", 3, 100);
        assert_eq!(fence(Some(&h), 99), Some(3));
        assert_eq!(fence(Some(&h), 100), None);
        assert!(token_is_current(Some(&h), 3, 0));
        assert!(!token_is_current(Some(&h), 2, 0));
        assert!(!token_is_current(None, 3, 0));
    }

    /// One lock driven by random operations, checked against the properties the README promises.
    #[derive(Debug, Clone)]
    enum Op {
        Advance(i64),
        Acquire { owner: u8, ttl: i64, wait: bool },
        Release(u8),
        Extend(u8, i64),
        Leave(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0i64..50).prop_map(Op::Advance),
            (0u8..4, -2i64..40, any::<bool>()).prop_map(|(owner, ttl, wait)| Op::Acquire {
                owner,
                ttl,
                wait
            }),
            (0u8..4).prop_map(Op::Release),
            (0u8..4, -2i64..40).prop_map(|(o, t)| Op::Extend(o, t)),
            (0u8..8).prop_map(Op::Leave),
        ]
    }

    proptest! {
        #[test]
        fn random_histories_keep_the_lock_safe_and_fair(ops in proptest::collection::vec(op(), 1..120)) {
            let mut now: Millis = 1_000;
            let mut tokens = TokenSource::default();
            let mut holder: Option<Holder> = None;
            let mut queue: WaitQueue<u32> = WaitQueue::default();
            let mut next_client = 0u32;
            let mut enqueued: Vec<(u32, Place)> = Vec::new();
            let mut served: Vec<u32> = Vec::new();
            let mut last_token = 0;

            for op in ops {
                // The Redis layer hands a free lock to the queue head before anything else.
                while let Some((w, h)) = queue.hand_off(holder.as_ref(), now, || tokens.issue(0)) {
                    prop_assert!(h.token > last_token);
                    prop_assert_eq!(h.deadline, now + w.ttl);
                    last_token = h.token;
                    served.push(w.client);
                    holder = Some(h);
                }
                let before = holder.clone();
                match op {
                    Op::Advance(ms) => now += ms,
                    Op::Acquire { owner, ttl, wait } => {
                        let name = [owner];
                        match acquire(holder.as_ref(), !queue.is_empty(), &name, ttl, now, || tokens.issue(0)) {
                            Err(_) => { prop_assert!(ttl <= 0); prop_assert_eq!(&holder, &before); }
                            Ok(Acquire::Granted(h)) => {
                                prop_assert!(live(before.as_ref(), now).is_none() && queue.is_empty());
                                prop_assert!(h.token > last_token);
                                last_token = h.token;
                                holder = Some(h);
                            }
                            Ok(Acquire::Renewed(h)) => {
                                let b = before.as_ref().unwrap();
                                prop_assert_eq!(h.token, b.token);
                                prop_assert!(h.owner.matches(&name));
                                holder = Some(h);
                            }
                            Ok(Acquire::Busy) => {
                                prop_assert!(live(before.as_ref(), now).is_some() || !queue.is_empty());
                                if wait {
                                    next_client += 1;
                                    let place = queue.push(Waiter { client: next_client, owner: Owner::new(&name), ttl });
                                    enqueued.push((next_client, place));
                                }
                            }
                        }
                    }
                    Op::Release(owner) => {
                        if may_release(holder.as_ref(), &[owner], now) {
                            holder = None;
                        }
                        if holder.is_some() && before.is_some() {
                            prop_assert_eq!(&holder, &before);
                        }
                    }
                    Op::Extend(owner, ttl) => {
                        if let Ok(Some(h)) = extend(holder.as_ref(), &[owner], ttl, now) {
                            prop_assert_eq!(h.token, before.as_ref().unwrap().token);
                            holder = Some(h);
                        } else {
                            prop_assert_eq!(&holder, &before);
                        }
                    }
                    Op::Leave(which) => {
                        if let Some(&(client, place)) = enqueued.get(which as usize) {
                            if let Some(w) = queue.remove(place) {
                                prop_assert_eq!(w.client, client);
                                enqueued.retain(|(c, _)| *c != client);
                            }
                        }
                    }
                }
            }
            // FIFO: waiters were served in the order they queued.
            let mut sorted = served.clone();
            sorted.sort_unstable();
            prop_assert_eq!(served, sorted);
        }
    }
}
