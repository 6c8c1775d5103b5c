//! The locks whose leases the module watches, earliest end first: a 4-ary min-heap of handles
//! whose due time and place in the heap live with the handle's own data (a lock value), not
//! here. One entry is one 8-byte handle (a side table keyed by name cost ~130 bytes a lock and
//! a hash of the name at every grant and release), and a lock leaves the heap through the place
//! it keeps, without a search.
//!
//! Generic over the handle and over where its due time and place are kept (`Places`), so it is
//! tested here with plain numbers against a sorted list.

use crate::core::lock::Millis;

/// Where each handle's due time and place in the heap are kept.
pub trait Places<H> {
    fn due(&self, h: H) -> Millis;
    /// The handle's index in the heap, `None` while it is not in it.
    fn place(&self, h: H) -> Option<usize>;
    fn set_place(&mut self, h: H, at: Option<usize>);
}

/// Children per node: a shallower heap than a binary one, so fewer places to write per move.
const ARITY: usize = 4;

pub struct LeaseHeap<H> {
    items: Vec<H>,
}

impl<H> Default for LeaseHeap<H> {
    fn default() -> Self {
        Self { items: Vec::new() }
    }
}

impl<H: Copy + PartialEq> LeaseHeap<H> {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Every handle in the heap, in no particular order.
    pub fn handles(&self) -> impl Iterator<Item = H> + '_ {
        self.items.iter().copied()
    }

    /// The earliest due time.
    pub fn first_due(&self, p: &impl Places<H>) -> Option<Millis> {
        self.items.first().map(|&h| p.due(h))
    }

    /// Put `h` in (or, already in, move it to its due time, which the caller has just set).
    pub fn upsert(&mut self, p: &mut impl Places<H>, h: H) {
        match p.place(h).filter(|&at| self.items.get(at) == Some(&h)) {
            Some(at) => self.restore(p, at),
            None => {
                self.items.push(h);
                let at = self.items.len() - 1;
                p.set_place(h, Some(at));
                self.sift_up(p, at);
            }
        }
    }

    /// Take `h` out. False if it was not in.
    pub fn remove(&mut self, p: &mut impl Places<H>, h: H) -> bool {
        let Some(at) = p.place(h).filter(|&at| self.items.get(at) == Some(&h)) else {
            return false;
        };
        self.take_at(p, at);
        self.shrink_if_idle();
        true
    }

    /// Take the earliest handle if it is due at `now` or before.
    pub fn pop_due(&mut self, p: &mut impl Places<H>, now: Millis) -> Option<H> {
        let &first = self.items.first()?;
        if p.due(first) > now {
            return None;
        }
        self.take_at(p, 0);
        self.shrink_if_idle();
        Some(first)
    }

    /// Keep only the handles `keep` says (a flushed db's locks go). O(n).
    pub fn retain(&mut self, p: &mut impl Places<H>, mut keep: impl FnMut(H) -> bool) {
        let items = std::mem::take(&mut self.items);
        for h in items {
            if keep(h) {
                self.items.push(h);
            } else {
                p.set_place(h, None);
            }
        }
        for at in 0..self.items.len() {
            p.set_place(self.items[at], Some(at));
        }
        for at in (0..self.items.len()).rev() {
            self.sift_down(p, at);
        }
        self.shrink_if_idle();
    }

    fn take_at(&mut self, p: &mut impl Places<H>, at: usize) {
        let gone = self.items.swap_remove(at);
        p.set_place(gone, None);
        if at < self.items.len() {
            p.set_place(self.items[at], Some(at));
            self.restore(p, at);
        }
    }

    /// The entry at `at` may be out of order either way.
    fn restore(&mut self, p: &mut impl Places<H>, at: usize) {
        let at = self.sift_up(p, at);
        self.sift_down(p, at);
    }

    fn sift_up(&mut self, p: &mut impl Places<H>, mut at: usize) -> usize {
        let h = self.items[at];
        let due = p.due(h);
        while at > 0 {
            let parent = (at - 1) / ARITY;
            let above = self.items[parent];
            if p.due(above) <= due {
                break;
            }
            self.items[at] = above;
            p.set_place(above, Some(at));
            at = parent;
        }
        self.items[at] = h;
        p.set_place(h, Some(at));
        at
    }

    fn sift_down(&mut self, p: &mut impl Places<H>, mut at: usize) {
        let h = self.items[at];
        let due = p.due(h);
        loop {
            let first = at * ARITY + 1;
            let last = (first + ARITY).min(self.items.len());
            let Some((child, child_due)) = (first..last)
                .map(|c| (c, p.due(self.items[c])))
                .min_by_key(|&(_, d)| d)
            else {
                break;
            };
            if child_due >= due {
                break;
            }
            let below = self.items[child];
            self.items[at] = below;
            p.set_place(below, Some(at));
            at = child;
        }
        self.items[at] = h;
        p.set_place(h, Some(at));
    }

    /// A burst of locks should not leave its high-water mark behind: like Redis's own
    /// dictionaries, the heap shrinks once it is less than an eighth full.
    fn shrink_if_idle(&mut self) {
        let (len, capacity) = (self.items.len(), self.items.capacity());
        if capacity > 64 && len < capacity / 8 {
            self.items.shrink_to(len * 2);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Handles are indexes into a table of (due, place).
    #[derive(Default)]
    struct Table(Vec<(Millis, Option<usize>)>);

    impl Places<usize> for Table {
        fn due(&self, h: usize) -> Millis {
            self.0[h].0
        }
        fn place(&self, h: usize) -> Option<usize> {
            self.0[h].1
        }
        fn set_place(&mut self, h: usize, at: Option<usize>) {
            self.0[h].1 = at;
        }
    }

    fn check(heap: &LeaseHeap<usize>, t: &Table) {
        for (at, &h) in heap.items.iter().enumerate() {
            assert_eq!(t.place(h), Some(at), "each handle knows its place");
            if at > 0 {
                assert!(
                    t.due(heap.items[(at - 1) / ARITY]) <= t.due(h),
                    "heap order"
                );
            }
        }
    }

    #[test]
    fn leases_come_up_earliest_first_and_leave_by_their_place() {
        let mut t = Table(vec![(30, None), (10, None), (20, None), (10, None)]);
        let mut heap = LeaseHeap::default();
        for h in 0..4 {
            heap.upsert(&mut t, h);
        }
        assert_eq!(heap.first_due(&t), Some(10));
        assert!(heap.remove(&mut t, 1));
        assert!(!heap.remove(&mut t, 1), "not in twice");
        assert_eq!(t.place(1), None);
        t.0[0].0 = 5; // renewed to end earlier (a shorter EXTEND)
        heap.upsert(&mut t, 0);
        assert_eq!(heap.len(), 3);
        assert_eq!(heap.pop_due(&mut t, 4), None);
        let due: Vec<_> = std::iter::from_fn(|| heap.pop_due(&mut t, 100)).collect();
        assert_eq!(due, vec![0, 3, 2]);
        assert!(heap.is_empty());
    }

    #[test]
    fn the_heap_gives_back_a_burst() {
        let mut t = Table((0..20_000).map(|i| (i, None)).collect());
        let mut heap = LeaseHeap::default();
        for h in 0..20_000 {
            heap.upsert(&mut t, h);
        }
        for h in 0..19_990 {
            heap.remove(&mut t, h);
        }
        assert!(heap.items.capacity() <= 64, "{}", heap.items.capacity());
        heap.retain(&mut t, |_| false);
        assert!(heap.is_empty());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Upsert(usize, Millis),
        Remove(usize),
        Pop(Millis),
        RetainEven,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..12usize, 0..40i64).prop_map(|(h, d)| Op::Upsert(h, d)),
            (0..12usize).prop_map(Op::Remove),
            (0..45i64).prop_map(Op::Pop),
            Just(Op::RetainEven),
        ]
    }

    proptest! {
        /// Against a model (the set of handles in, each with its due time): the same handles are
        /// in, the earliest comes up first (any of those due together), and every place is right.
        #[test]
        fn behaves_like_a_sorted_set(ops in proptest::collection::vec(op(), 1..80)) {
            let mut t = Table(vec![(0, None); 12]);
            let mut heap = LeaseHeap::default();
            let mut model: Vec<usize> = Vec::new();
            for op in ops {
                match op {
                    Op::Upsert(h, due) => {
                        t.0[h].0 = due;
                        heap.upsert(&mut t, h);
                        if !model.contains(&h) { model.push(h); }
                    }
                    Op::Remove(h) => {
                        let was = model.contains(&h);
                        model.retain(|&m| m != h);
                        prop_assert_eq!(heap.remove(&mut t, h), was);
                    }
                    Op::Pop(now) => {
                        let earliest = model.iter().map(|&h| t.due(h)).min();
                        match heap.pop_due(&mut t, now) {
                            Some(h) => {
                                prop_assert_eq!(Some(t.due(h)), earliest);
                                prop_assert!(t.due(h) <= now);
                                model.retain(|&m| m != h);
                            }
                            None => prop_assert!(earliest.is_none_or(|d| d > now)),
                        }
                    }
                    Op::RetainEven => {
                        heap.retain(&mut t, |h| h % 2 == 0);
                        model.retain(|&m| m % 2 == 0);
                    }
                }
                check(&heap, &t);
                let mut inside: Vec<usize> = heap.handles().collect();
                inside.sort_unstable();
                let mut expect = model.clone();
                expect.sort_unstable();
                prop_assert_eq!(inside, expect);
                for h in 0..12 {
                    prop_assert_eq!(t.place(h).is_some(), model.contains(&h));
                }
            }
        }
    }
}
