//! A count the server's main thread updates without a locked instruction.
//!
//! Nearly every command and callback runs on the server's main thread. Not all: a value's
//! free callback may run on a lazy-free thread (`FLUSHALL ASYNC`, `UNLINK`), another module
//! may call our commands from its own thread (holding the server's lock), and the allocator
//! serves every thread. A locked add (`fetch_add`) costs about 20 cycles on x86 however
//! uncontended, and a lock cycle made some twenty of them (about a tenth of the server's CPU
//! time per cycle, by `perf`). A `Tally` keeps two cells: the main thread's, updated with a
//! plain load and store (no other thread writes it), and the other threads', updated
//! atomically. A read adds them, wrapping: either cell alone may go below zero.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

thread_local! {
    static ON_MAIN: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread is the server's main thread (called once, when the module loads). Until
/// then, and on every other thread, tallies count atomically.
pub fn claim_main_thread() {
    ON_MAIN.set(true);
}

fn on_main() -> bool {
    ON_MAIN.get()
}

pub struct Tally {
    main: AtomicU64,
    others: AtomicU64,
}

impl Tally {
    pub const fn new() -> Self {
        Self {
            main: AtomicU64::new(0),
            others: AtomicU64::new(0),
        }
    }

    /// Add `n` (wrapping: `add(n.wrapping_neg())` takes `n` away).
    pub fn add(&self, n: u64) {
        if on_main() {
            let main = self.main.load(Ordering::Relaxed);
            self.main.store(main.wrapping_add(n), Ordering::Relaxed);
        } else {
            self.others.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> u64 {
        let main = self.main.load(Ordering::Relaxed);
        main.wrapping_add(self.others.load(Ordering::Relaxed))
    }

    /// Make the sum `value` (a reset, on the main thread: a concurrent `add` from another
    /// thread still counts).
    pub fn set(&self, value: u64) {
        let others = self.others.load(Ordering::Relaxed);
        self.main
            .store(value.wrapping_sub(others), Ordering::Relaxed);
    }
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_and_other_threads_add_up() {
        let tally = Tally::new();
        tally.add(5); // a test thread counts as another thread
        std::thread::scope(|s| {
            s.spawn(|| {
                claim_main_thread();
                tally.add(3);
                tally.add(10u64.wrapping_neg());
            });
            for _ in 0..4 {
                s.spawn(|| (0..1000).for_each(|_| tally.add(1)));
            }
        });
        assert_eq!(tally.get(), 5 + 3 + 4000 - 10);
    }

    #[test]
    fn set_counts_what_other_threads_added() {
        let tally = Tally::new();
        tally.add(7);
        std::thread::scope(|s| {
            s.spawn(|| {
                claim_main_thread();
                tally.add(2);
                tally.set(1);
            });
        });
        assert_eq!(tally.get(), 1);
        tally.add(4);
        assert_eq!(tally.get(), 5);
    }
}
