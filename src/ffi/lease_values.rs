//! The lease heap's handles (`core::lease_heap`): addresses of lock values the server owns.
//!
//! What keeps a handle valid is one rule the shell keeps: a value leaves the heap before its
//! memory goes back. The unlink hook and a flush's start take it out; a value the server frees
//! while the heap still holds it (a path with no unlink, such as a replica discarding its old
//! data) is not freed then but handed to `effects::timers`, which takes it out and drops it on
//! the main thread.

use std::ptr::NonNull;

use crate::core::lease_heap::Places;
use crate::core::lock::Millis;
use crate::core::value::{Lease, LockValue};

/// A lock value in the lease heap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValuePtr(NonNull<LockValue>);

// SAFETY: handles live in the timers' mutex, and are only dereferenced by the main thread while
// the value is in the heap (so alive, see above); a lazy-free thread reads only the atomic place
// of the value it frees.
unsafe impl Send for ValuePtr {}

impl ValuePtr {
    pub fn of(value: &LockValue) -> Self {
        Self(NonNull::from(value))
    }

    /// Where the value is watched from.
    pub fn lease(&self) -> &Lease {
        // SAFETY: a handle is made from a live value and used only while that value is in the
        // heap or is the value at hand (the rule above); only shared access: the place and db
        // are atomics, and `due` is written through the value's owner, never through a handle.
        unsafe { &self.0.as_ref().lease }
    }
}

/// The values' own fields, as the heap's `Places`.
pub struct Values;

impl Places<ValuePtr> for Values {
    fn due(&self, h: ValuePtr) -> Millis {
        h.lease().due
    }
    fn place(&self, h: ValuePtr) -> Option<usize> {
        h.lease().place()
    }
    fn set_place(&mut self, h: ValuePtr, at: Option<usize>) {
        h.lease().set_place(at);
    }
}
