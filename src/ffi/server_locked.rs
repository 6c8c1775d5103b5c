//! State the server's own lock serializes: commands, type and event callbacks and timers run
//! one at a time, on the main thread or on a thread holding the server's lock (another module's
//! thread-safe context calling our commands), never alongside each other. Such state needs no
//! mutex that waits, only a check that it is not held twice: a hold is one swap of a flag (a
//! mutex is two locked instructions, and the lease heap is held twice per lock cycle), and a
//! second hold, from the same thread re-entering or a thread outside the server's lock,
//! panics (contained like any panic) where a mutex would deadlock or wait.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct ServerLocked<T> {
    held: AtomicBool,
    value: UnsafeCell<Option<T>>,
    make: fn() -> T,
}

// SAFETY: the value is reached only through a hold, and a hold is exclusive across threads:
// `held` is taken by an atomic swap (acquire) and given back by a release store, so two holds
// never overlap and each sees the writes of the one before.
unsafe impl<T: Send> Sync for ServerLocked<T> {}

impl<T> ServerLocked<T> {
    /// Made by `make` when first held.
    pub const fn new(make: fn() -> T) -> Self {
        Self {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(None),
            make,
        }
    }

    /// The value, once at a time.
    pub fn hold(&self) -> Held<'_, T> {
        assert!(
            !self.held.swap(true, Ordering::Acquire),
            "state of the server's lock held twice"
        );
        let release = Release(&self.held); // given back even if `make` panics
                                           // SAFETY: the swap above made this the one hold: no other reference to the value exists
                                           // until `release` gives it back.
        let value = unsafe { &mut *self.value.get() };
        Held {
            value: value.get_or_insert_with(self.make),
            _release: release,
        }
    }
}

struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The value while held; given back when dropped.
pub struct Held<'a, T> {
    value: &'a mut T,
    _release: Release<'a>,
}

impl<T> Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_held_once_at_a_time_on_any_thread() {
        static LIST: ServerLocked<Vec<u32>> = ServerLocked::new(Vec::new);
        LIST.hold().push(1);
        {
            let held = LIST.hold();
            let again =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| LIST.hold().len()));
            assert!(again.is_err(), "held twice");
            let other = std::thread::scope(|s| s.spawn(|| LIST.hold().len()).join());
            assert!(other.is_err(), "held from another thread meanwhile");
            assert_eq!(*held, [1]);
        }
        // Given back: another thread holds it in turn and sees what came before.
        std::thread::scope(|s| {
            s.spawn(|| LIST.hold().push(2));
        });
        assert_eq!(*LIST.hold(), [1, 2]);
    }

    #[test]
    fn a_panic_while_making_the_value_gives_it_back() {
        static FAILS_ONCE: ServerLocked<u32> = ServerLocked::new(|| {
            static TRIED: AtomicBool = AtomicBool::new(false);
            assert!(TRIED.swap(true, Ordering::Relaxed), "first make fails");
            7
        });
        assert!(std::panic::catch_unwind(|| *FAILS_ONCE.hold()).is_err());
        assert_eq!(*FAILS_ONCE.hold(), 7);
    }
}
