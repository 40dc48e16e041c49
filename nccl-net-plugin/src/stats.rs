//! What the plugin counts about itself, for tools rather than NCCL: the heap allocations of the
//! whole process (the plugin's global allocator is the system allocator with a counter), and a
//! comm's counters, exported as `ferroNetStats_v1` next to NCCL's tables. The benchmark reads
//! them to print posts, polls and allocations per message; NCCL never looks the symbol up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting allocations and reallocations (one relaxed increment each;
/// the data path makes none in steady state, so this costs nothing there).
#[derive(Debug)]
pub struct CountingAlloc;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to the system allocator with the same arguments; the counter has
// no effect on the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Heap allocations (and reallocations) made by Rust code in this process so far: the
/// plugin's own in the shared library NCCL loads; every crate's when the plugin is linked in.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_allocation_and_reallocation_is_counted() {
        let before = allocations();
        let mut v: Vec<u64> = Vec::with_capacity(1);
        v.extend([1, 2, 3, 4, 5]);
        let after = allocations();
        // One allocation and at least one reallocation (other test threads may add more).
        assert!(after - before >= 2, "{before} -> {after}");
        drop(v);
    }
}
