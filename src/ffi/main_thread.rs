//! State only the server's main thread touches (commands, type and event callbacks, timers:
//! never a lazy-free thread), kept without a mutex. Taking a mutex is two locked instructions
//! (about 40 cycles on x86), and the lease heap is taken twice per lock cycle. What a mutex
//! guarded against is checked instead: a touch from another thread, or a second one from the
//! same thread while the first is held, panics (contained like any panic: `panics`) rather
//! than race or deadlock.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use crate::core::tally;

pub struct MainOnly<T> {
    held: Cell<bool>,
    value: UnsafeCell<Option<T>>,
    make: fn() -> T,
}

// SAFETY: only the thread that claimed to be the server's main thread (`tally`) gets at the
// value (`hold` checks, before anything else), so it is never shared between threads: it only
// needs to be sendable there.
unsafe impl<T: Send> Sync for MainOnly<T> {}

impl<T> MainOnly<T> {
    /// Made by `make` when first held.
    pub const fn new(make: fn() -> T) -> Self {
        Self {
            held: Cell::new(false),
            value: UnsafeCell::new(None),
            make,
        }
    }

    /// The value, for the main thread, once at a time.
    pub fn hold(&self) -> MainGuard<'_, T> {
        assert!(
            tally::on_main(),
            "main-thread state touched from another thread"
        );
        assert!(!self.held.replace(true), "main-thread state taken twice");
        // SAFETY: on the main thread, and no guard holds it (checked just above): this is the
        // one reference until the guard lets go.
        let value = unsafe { &mut *self.value.get() };
        MainGuard {
            held: &self.held,
            value: value.get_or_insert_with(self.make),
            not_send: PhantomData,
        }
    }
}

/// The value while held; let go when dropped. It stays on the main thread.
pub struct MainGuard<'a, T> {
    held: &'a Cell<bool>,
    value: &'a mut T,
    not_send: PhantomData<*const ()>,
}

impl<T> Deref for MainGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> DerefMut for MainGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
    }
}

impl<T> Drop for MainGuard<'_, T> {
    fn drop(&mut self) {
        self.held.set(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_main_thread_holds_it_once_at_a_time_and_no_other_thread_does() {
        static COUNT: MainOnly<Vec<u32>> = MainOnly::new(Vec::new);
        // A test thread is no main thread until it claims to be.
        let touched = std::panic::catch_unwind(|| COUNT.hold().len());
        assert!(touched.is_err(), "another thread got in");
        tally::claim_main_thread();
        COUNT.hold().push(1);
        {
            let held = COUNT.hold();
            let again =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| COUNT.hold().len()));
            assert!(again.is_err(), "taken twice");
            assert_eq!(*held, [1]);
        }
        COUNT.hold().push(2);
        assert_eq!(*COUNT.hold(), [1, 2], "let go after the failed second hold");
        std::thread::scope(|s| {
            let other = s.spawn(|| COUNT.hold().len()).join();
            assert!(other.is_err(), "a thread that never claimed got in");
        });
    }
}
