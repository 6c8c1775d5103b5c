//! The module's allocator: Redis's own (`RedisModule_Alloc`, so `used_memory` and `maxmemory`
//! see every byte the module holds), counting what the module's code holds right now. `INFO
//! lock` shows it as `lock_module_heap_bytes`, and `make bench` divides its growth by the
//! waiters it blocks: the module-owned bytes per waiter, apart from the server's own (its
//! blocked-client record and temporary clients).
//!
//! Counted are the sizes asked for (rounded up to the alignment, as `RedisAlloc` asks Redis);
//! the allocator's own size classes are not. The count is atomic: a value's free callback may
//! run on Redis's lazy-free thread.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

static HELD: AtomicUsize = AtomicUsize::new(0);

/// Bytes the module's code holds right now.
pub fn held_bytes() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// `A`, counting the bytes held.
pub struct Counting<A>(pub A);

fn counted(layout: Layout) -> usize {
    layout.size().next_multiple_of(layout.align())
}

// SAFETY: every call is forwarded unchanged to `A`, which upholds GlobalAlloc's contract; the
// count is only bookkeeping beside it.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout is passed on as it came.
        let ptr = unsafe { self.0.alloc(layout) };
        if !ptr.is_null() {
            HELD.fetch_add(counted(layout), Ordering::Relaxed);
        }
        ptr
    }

    // SAFETY: the trait's own contract (a pointer from `alloc` with its layout), forwarded.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout (the caller's promise).
        unsafe { self.0.dealloc(ptr, layout) };
        HELD.fetch_sub(counted(layout), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_counted_until_freed() {
        let counting = Counting(std::alloc::System);
        let layout = Layout::from_size_align(100, 8).unwrap();
        let before = held_bytes();
        // SAFETY: a valid non-zero layout, freed once with the same layout.
        unsafe {
            let p = counting.alloc(layout);
            assert!(!p.is_null());
            assert_eq!(held_bytes() - before, 104);
            counting.dealloc(p, layout);
        }
        assert_eq!(held_bytes(), before);
    }
}
