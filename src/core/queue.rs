//! The FIFO wait queue of one lock, generic over the client handle (`C`): the Redis layer
//! stores blocked clients in it, the tests plain numbers.

use std::collections::BTreeMap;

use crate::core::lock::{live, Holder, Millis, Token};
use crate::core::owner::Owner;

/// A connection blocked in `LOCK.ACQUIRE ... WAIT`. `C` identifies it to the Redis layer.
#[derive(Debug)]
pub struct Waiter<C> {
    pub client: C,
    pub owner: Owner,
    /// The lease it asked for; it starts when the lock is handed over.
    pub ttl: Millis,
}

/// A waiter's place in its queue: places only grow, so the smallest is the head.
pub type Place = u64;

/// The FIFO queue of one lock. Keyed by place, so a waiter that times out or disconnects leaves
/// in O(log n) from wherever it stands: a fleet of 100k waiters dropping at once must not turn
/// into a quadratic stall of the server.
#[derive(Debug)]
pub struct WaitQueue<C> {
    waiters: BTreeMap<Place, Waiter<C>>,
    next_place: Place,
}

impl<C> Default for WaitQueue<C> {
    fn default() -> Self {
        Self {
            waiters: BTreeMap::new(),
            next_place: 0,
        }
    }
}

impl<C> WaitQueue<C> {
    /// Queue a waiter at the tail; its place identifies it later.
    pub fn push(&mut self, waiter: Waiter<C>) -> Place {
        let place = self.next_place;
        self.next_place += 1;
        self.waiters.insert(place, waiter);
        place
    }

    /// Take a waiter out wherever it stands (timeout, disconnect).
    pub fn remove(&mut self, place: Place) -> Option<Waiter<C>> {
        self.waiters.remove(&place)
    }

    pub fn len(&self) -> usize {
        self.waiters.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// The waiters in the order they will be served.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter<C>> {
        self.waiters.values()
    }

    pub fn drain(&mut self) -> impl Iterator<Item = Waiter<C>> {
        std::mem::take(&mut self.waiters).into_values()
    }

    /// If nobody holds the lock, give it to the head of the queue: its lease starts `now`.
    /// Without a token left to issue, nobody is served (the waiters keep waiting).
    pub fn hand_off(
        &mut self,
        holder: Option<&Holder>,
        now: Millis,
        issue_token: impl FnOnce() -> Option<Token>,
    ) -> Option<(Waiter<C>, Holder)> {
        if live(holder, now).is_some() || self.waiters.is_empty() {
            return None;
        }
        let token = issue_token()?;
        let (_, waiter) = self.waiters.pop_first()?;
        let granted = Holder {
            owner: waiter.owner.clone(),
            token,
            // The ttl was checked when the waiter queued; saturate rather than fail later.
            deadline: now.saturating_add(waiter.ttl),
            granted: now,
        };
        Some((waiter, granted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(owner: &str, token: Token, deadline: Millis) -> Holder {
        Holder {
            owner: Owner::new(owner.as_bytes()),
            token,
            deadline,
            granted: 0,
        }
    }

    #[test]
    fn without_a_token_left_the_head_keeps_its_place() {
        let mut q = WaitQueue::default();
        q.push(Waiter {
            client: 1,
            owner: Owner::new(b"x"),
            ttl: 10,
        });
        assert!(q.hand_off(None, 0, || None).is_none());
        assert_eq!(q.len(), 1, "the waiter keeps its place");
    }

    #[test]
    fn hand_off_goes_to_the_head_and_the_lease_starts_then() {
        let mut q = WaitQueue::default();
        let _first = q.push(Waiter {
            client: 1,
            owner: Owner::new(b"x"),
            ttl: 10,
        });
        let second = q.push(Waiter {
            client: 2,
            owner: Owner::new(b"y"),
            ttl: 20,
        });
        let h = holder("a", 3, 100);
        assert!(q.hand_off(Some(&h), 50, || Some(4)).is_none());
        let (w, granted) = q.hand_off(Some(&h), 100, || Some(4)).unwrap();
        assert_eq!(w.client, 1);
        assert_eq!(
            granted,
            Holder {
                granted: 100,
                ..holder("x", 4, 110)
            }
        );
        assert_eq!(q.len(), 1);
        assert_eq!(q.remove(second).map(|w| w.client), Some(2));
        assert!(q.remove(second).is_none());
        assert!(q.hand_off(None, 0, || Some(5)).is_none());
    }
}
