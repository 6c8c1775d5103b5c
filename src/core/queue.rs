//! The FIFO wait queue of one lock, generic over the client handle (`C`): the Redis layer
//! stores blocked clients in it, the tests plain numbers.

use std::collections::VecDeque;

use crate::core::lock::{fits, Holder, LockState, Millis, Token, Want};
use crate::core::owner::Owner;

/// A connection blocked in `LOCK.ACQUIRE ... WAIT`. `C` identifies it to the Redis layer.
#[derive(Debug)]
pub struct Waiter<C> {
    pub client: C,
    pub owner: Owner,
    /// The lease it asked for; it starts when the lock is handed over.
    pub ttl: Millis,
    /// The hold it asked for.
    pub want: Want,
}

impl<C> Waiter<C> {
    /// The same waiter with its client handle turned into another.
    pub fn map_client<D>(self, to: impl FnOnce(C) -> D) -> Waiter<D> {
        Waiter {
            client: to(self.client),
            owner: self.owner,
            ttl: self.ttl,
            want: self.want,
        }
    }
}

/// Waiters served in one step, with their tokens, and the state they hold it in.
#[derive(Debug)]
pub struct Handed<C> {
    pub served: Vec<(Waiter<C>, Token)>,
    pub state: LockState,
}

/// A waiter's place in its queue: places only grow, so the smallest is the head.
pub type Place = u64;

/// The FIFO queue of one lock. A waiter that times out or disconnects leaves from wherever it
/// stands in O(log n) (a binary search for its place) and leaves a gap: gaps at the head go at
/// once, the others are swept in one pass when they outnumber the waiters (O(1) amortized), so
/// a fleet of 100k waiters dropping at once never turns into a quadratic stall of the server.
/// One flat ring of 16-byte slots, each waiter boxed: a doubling of the ring costs a waiter 16
/// bytes, not its whole size again (a tree of nodes cost twice a waiter's size).
#[derive(Debug)]
pub struct WaitQueue<C> {
    /// (place, waiter or gap) in increasing place order; the front slot is never a gap.
    slots: VecDeque<(Place, Option<Box<Waiter<C>>>)>,
    waiting: usize,
    next_place: Place,
}

impl<C> Default for WaitQueue<C> {
    fn default() -> Self {
        Self {
            slots: VecDeque::new(),
            waiting: 0,
            next_place: 0,
        }
    }
}

/// Gaps tolerated beyond the number of waiters before a sweep.
const SLACK: usize = 32;

impl<C> WaitQueue<C> {
    /// Queue a waiter at the tail; its place identifies it later.
    pub fn push(&mut self, waiter: Waiter<C>) -> Place {
        let place = self.next_place;
        self.next_place += 1;
        self.slots.push_back((place, Some(Box::new(waiter))));
        self.waiting += 1;
        place
    }

    /// Take a waiter out wherever it stands (timeout, disconnect).
    pub fn remove(&mut self, place: Place) -> Option<Waiter<C>> {
        let at = self.slots.binary_search_by_key(&place, |(p, _)| *p).ok()?;
        let waiter = self.slots[at].1.take()?;
        self.waiting -= 1;
        self.tidy();
        Some(*waiter)
    }

    /// Drop the gaps at the head; sweep the rest when they outnumber the waiters, and give
    /// back memory a burst of waiters left behind.
    fn tidy(&mut self) {
        while self.slots.front().is_some_and(|(_, w)| w.is_none()) {
            self.slots.pop_front();
        }
        if self.slots.len() > 2 * self.waiting + SLACK {
            self.slots.retain(|(_, w)| w.is_some());
        }
        if self.slots.capacity() > 4 * self.slots.len() + SLACK {
            self.slots.shrink_to(2 * self.slots.len());
        }
    }

    /// Take the head out (it was just looked at).
    pub fn pop_head(&mut self) -> Option<Waiter<C>> {
        let Some((_, Some(waiter))) = self.slots.pop_front() else {
            return None; // the front slot is never a gap
        };
        self.waiting -= 1;
        self.tidy();
        Some(*waiter)
    }

    /// The waiter at the head of the queue.
    pub fn head(&self) -> Option<&Waiter<C>> {
        self.slots.front().and_then(|(_, w)| w.as_deref())
    }

    /// Whether the waiter at `place` is the head of the queue.
    pub fn is_head(&self, place: Place) -> bool {
        self.slots
            .front()
            .is_some_and(|(p, w)| *p == place && w.is_some())
    }

    pub fn len(&self) -> usize {
        self.waiting
    }

    pub fn is_empty(&self) -> bool {
        self.waiting == 0
    }

    /// The waiters in the order they will be served.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter<C>> {
        self.slots.iter().filter_map(|(_, w)| w.as_deref())
    }

    pub fn drain(&mut self) -> impl Iterator<Item = Waiter<C>> {
        self.waiting = 0;
        std::mem::take(&mut self.slots)
            .into_iter()
            .filter_map(|(_, w)| w.map(|w| *w))
    }

    /// Whether the head of the queue fits beside the live holds of `state`.
    pub fn head_fits(&self, state: Option<&LockState>, now: Millis) -> bool {
        self.head()
            .is_some_and(|w| fits(state, w.owner.bytes(), w.want, now))
    }

    /// Serve the head of the queue while it fits beside the live holds of `state`: one
    /// exclusive waiter, or every shared waiter (or semaphore request) in a row that fits; the
    /// first that does not fit stops the step, so nobody behind it overtakes it, and so does
    /// the first that cannot be served from this queue `alone` (a member of a lock set, served
    /// with its other keys). Each lease starts `now`. Without a token left to issue, or at
    /// `max_holders`, serving stops.
    pub fn hand_off(
        &mut self,
        state: Option<&LockState>,
        now: Millis,
        max_holders: usize,
        alone: impl Fn(&C) -> bool,
        mut issue_token: impl FnMut() -> Option<Token>,
    ) -> Option<Handed<C>> {
        if !self.head_fits(state, now) {
            return None;
        }
        let mut next = state.and_then(|s| s.live(now));
        let mut served = Vec::new();
        while let Some(head) = self.head() {
            if !alone(&head.client)
                || !fits(next.as_ref(), head.owner.bytes(), head.want, now)
                || next
                    .as_ref()
                    .is_some_and(|s| s.live_count(now) >= max_holders)
            {
                break;
            }
            let Some(token) = issue_token() else {
                break;
            };
            let Some(waiter) = self.pop_head() else {
                break;
            };
            let holder = Holder {
                owner: waiter.owner.clone(),
                token,
                // The ttl was checked when the waiter queued; saturate rather than fail later.
                deadline: now.saturating_add(waiter.ttl),
                granted: now,
            };
            next = Some(match next {
                Some(live) => live.with(waiter.want, holder),
                None => LockState::first(waiter.want, holder),
            });
            served.push((waiter, token));
        }
        Some(Handed {
            state: next.filter(|_| !served.is_empty())?,
            served,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lock::holder;

    fn waiter(client: u32, owner: &str, ttl: Millis, want: Want) -> Waiter<u32> {
        Waiter {
            client,
            owner: Owner::new(owner.as_bytes()),
            ttl,
            want,
        }
    }

    fn served(h: &Handed<u32>) -> Vec<(u32, Token)> {
        h.served.iter().map(|(w, t)| (w.client, *t)).collect()
    }

    #[test]
    fn leaving_from_anywhere_keeps_the_order_and_sweeps_the_gaps() {
        let mut q = WaitQueue::default();
        let places: Vec<Place> = (0..1000)
            .map(|i| q.push(waiter(i, "w", 10, Want::Exclusive)))
            .collect();
        // Everyone but every tenth leaves, the head last.
        for (i, &place) in places.iter().enumerate().skip(1) {
            if i % 10 != 0 {
                assert_eq!(q.remove(place).map(|w| w.client), Some(i as u32));
            }
            assert!(q.slots.len() <= 2 * q.len() + SLACK);
        }
        assert!(q.remove(places[5]).is_none(), "already gone");
        let left: Vec<u32> = q.iter().map(|w| w.client).collect();
        assert_eq!(left, (0..1000).step_by(10).collect::<Vec<u32>>());
        assert!(q.is_head(places[0]) && !q.is_head(places[10]));
        assert_eq!(q.remove(places[0]).map(|w| w.client), Some(0));
        assert!(q.is_head(places[10]));
        assert_eq!(q.len(), 99);
        assert!(q.slots.capacity() <= 4 * q.slots.len() + SLACK);
    }

    #[test]
    fn without_a_token_left_the_head_keeps_its_place() {
        let mut q = WaitQueue::default();
        q.push(waiter(1, "x", 10, Want::Exclusive));
        assert!(q.hand_off(None, 0, 10, |_| true, || None).is_none());
        assert_eq!(q.len(), 1, "the waiter keeps its place");
    }

    #[test]
    fn hand_off_goes_to_the_head_and_the_lease_starts_then() {
        let mut q = WaitQueue::default();
        let _first = q.push(waiter(1, "x", 10, Want::Exclusive));
        let second = q.push(waiter(2, "y", 20, Want::Exclusive));
        let h = LockState::Exclusive(holder("a", 3, 100));
        assert!(q.hand_off(Some(&h), 50, 10, |_| true, || Some(4)).is_none());
        let handed = q.hand_off(Some(&h), 100, 10, |_| true, || Some(4)).unwrap();
        assert_eq!(served(&handed), [(1, 4)]);
        assert_eq!(
            handed.state,
            LockState::Exclusive(Holder {
                granted: 100,
                ..holder("x", 4, 110)
            })
        );
        assert_eq!(q.len(), 1);
        assert_eq!(q.remove(second).map(|w| w.client), Some(2));
        assert!(q.remove(second).is_none());
        assert!(q.hand_off(None, 0, 10, |_| true, || Some(5)).is_none());
    }

    #[test]
    fn readers_batch_and_stop_at_a_writer() {
        // [S1, S2, X, S3] behind an exclusive holder: S1 and S2 together, X next, S3 after X.
        let mut q = WaitQueue::default();
        q.push(waiter(1, "s1", 10, Want::Shared));
        q.push(waiter(2, "s2", 10, Want::Shared));
        q.push(waiter(3, "x", 10, Want::Exclusive));
        q.push(waiter(4, "s3", 10, Want::Shared));
        let mut token = 10;
        let mut issue = || {
            token += 1;
            Some(token)
        };
        let held = LockState::Exclusive(holder("a", 1, 100));
        assert!(q
            .hand_off(Some(&held), 99, 10, |_| true, &mut issue)
            .is_none());
        let readers = q
            .hand_off(Some(&held), 100, 10, |_| true, &mut issue)
            .unwrap();
        assert_eq!(served(&readers), [(1, 11), (2, 12)]);
        assert!(
            q.hand_off(Some(&readers.state), 105, 10, |_| true, &mut issue)
                .is_none(),
            "X waits for both"
        );
        let writer = q
            .hand_off(Some(&readers.state), 110, 10, |_| true, &mut issue)
            .unwrap();
        assert_eq!(served(&writer), [(3, 13)]);
        let last = q
            .hand_off(Some(&writer.state), 120, 10, |_| true, &mut issue)
            .unwrap();
        assert_eq!(served(&last), [(4, 14)]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_big_semaphore_request_is_not_overtaken() {
        let p = |n| Want::Permits { limit: 3, n };
        let mut q = WaitQueue::default();
        q.push(waiter(1, "big", 10, p(3)));
        q.push(waiter(2, "small", 10, p(1)));
        let sem = LockState::Semaphore {
            limit: 3,
            holds: vec![crate::core::lock::Permit {
                holder: holder("a", 1, 100),
                n: 1,
            }],
        };
        assert!(
            q.hand_off(Some(&sem), 50, 10, |_| true, || Some(5))
                .is_none(),
            "2 free permits: small must not pass big"
        );
        let handed = q
            .hand_off(Some(&sem), 100, 10, |_| true, || Some(5))
            .unwrap();
        assert_eq!(served(&handed), [(1, 5)]);
    }
}
