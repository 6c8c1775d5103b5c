//! The module's allocator: Redis's own (`RedisModule_Alloc`, so `used_memory` and `maxmemory`
//! see every byte the module holds), counting what the module's code holds right now. `INFO
//! lock` shows it as `lock_module_heap_bytes`, and `make bench` divides its growth by the
//! waiters it blocks: the module-owned bytes per waiter, apart from the server's own (its
//! blocked-client record and temporary clients).
//!
//! Counted are the sizes asked for (rounded up to the alignment, as `RedisAlloc` asks Redis);
//! the allocator's own size classes are not. The count is a `Tally`: plain on the main thread,
//! atomic on the others (a value's free callback may run on Redis's lazy-free thread).
//!
//! `MallocAligned` gives every block of 16 bytes or more the 16-byte alignment C's `malloc`
//! promises. Rust's panic allocates its `_Unwind_Exception` with an alignment of 8 (until
//! rust-lang/rust#161368), while LLVM's libunwind, which the zig-linked `make dist` build
//! carries, stores into it with 16-byte-aligned SSE moves; Redis 7.4's jemalloc (8-byte size
//! classes) hands out 56-byte blocks on 8-byte boundaries, and a contained panic then crashed
//! the server (tests/panics.rs on `make test-dist`). `RedisAlloc` aligns by rounding the size,
//! so a size rounded to 16 lands in a 16-aligned size class.

use std::alloc::{GlobalAlloc, Layout};

use crate::core::tally::Tally;

static HELD: Tally = Tally::new();

/// Bytes the module's code holds right now.
pub fn held_bytes() -> usize {
    HELD.get() as usize
}

/// `A`, with the alignment of every request of 16 bytes or more raised to 16 (see above).
pub struct MallocAligned<A>(pub A);

fn malloc_like(layout: Layout) -> Layout {
    if layout.size() >= 16 && layout.align() < 16 {
        Layout::from_size_align(layout.size(), 16).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: `A` gets a layout at least as aligned as the caller's, and the same one again on
// dealloc, so the block satisfies the caller's layout and `A`'s contract holds.
unsafe impl<A: GlobalAlloc> GlobalAlloc for MallocAligned<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: a valid layout of the same size, only more aligned.
        unsafe { self.0.alloc(malloc_like(layout)) }
    }

    // SAFETY: the trait's own contract, forwarded with the layout `alloc` used.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout, so from `A` with `malloc_like` of it.
        unsafe { self.0.dealloc(ptr, malloc_like(layout)) }
    }
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
            HELD.add(counted(layout) as u64);
        }
        ptr
    }

    // SAFETY: the trait's own contract (a pointer from `alloc` with its layout), forwarded.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` with this layout (the caller's promise).
        unsafe { self.0.dealloc(ptr, layout) };
        HELD.add((counted(layout) as u64).wrapping_neg());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_16_bytes_or_more_are_16_aligned() {
        let layout = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(malloc_like(layout(56, 8)), layout(56, 16));
        assert_eq!(malloc_like(layout(16, 1)), layout(16, 16));
        assert_eq!(malloc_like(layout(8, 8)), layout(8, 8));
        assert_eq!(malloc_like(layout(15, 1)), layout(15, 1));
        assert_eq!(malloc_like(layout(64, 64)), layout(64, 64));
        let aligned = MallocAligned(std::alloc::System);
        // SAFETY: a valid non-zero layout, freed once with the same layout.
        unsafe {
            let p = aligned.alloc(layout(56, 8));
            assert!(!p.is_null());
            assert_eq!(p as usize % 16, 0);
            aligned.dealloc(p, layout(56, 8));
        }
    }

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
