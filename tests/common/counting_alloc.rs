//! A global allocator that records the largest single allocation, for the file-format mutation
//! tests (`format_mutation`, `graph_mutation`, `io_mutation`): a reader that sized a buffer from
//! a declared count or shape fails there even when the allocation itself succeeds.
//!
//! Two maxima are kept: one per thread (a parse on the calling thread) and one for the whole
//! process (readers that allocate on their own prefetch or decoding threads). Including this
//! module installs the allocator, so it conflicts with mxrt's mimalloc: the test files that
//! use it build only without that feature.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

thread_local! {
    /// Largest single allocation (or reallocation target) on this thread since its reset.
    static THREAD_MAX: Cell<usize> = const { Cell::new(0) };
}

/// Largest single allocation in the process since its reset.
static PROCESS_MAX: AtomicUsize = AtomicUsize::new(0);

fn note(size: usize) {
    // `try_with`: the slot may be gone while the thread is being torn down.
    let _ = THREAD_MAX.try_with(|m| m.set(m.get().max(size)));
    PROCESS_MAX.fetch_max(size, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the only
// extra work is updating a const-initialised thread-local `Cell<usize>` and an atomic, neither
// of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded verbatim; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded verbatim.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded verbatim; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded verbatim; `ptr` came from `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts a new measurement on the calling thread.
#[allow(dead_code)]
pub fn reset_thread_max() {
    THREAD_MAX.with(|m| m.set(0));
}

/// The largest single allocation on the calling thread since `reset_thread_max`.
#[allow(dead_code)]
pub fn thread_max() -> usize {
    THREAD_MAX.with(Cell::get)
}

/// Starts a new process-wide measurement (callers serialise the measured cases).
#[allow(dead_code)]
pub fn reset_process_max() {
    PROCESS_MAX.store(0, Ordering::Relaxed);
}

/// The largest single allocation in the process since `reset_process_max`.
#[allow(dead_code)]
pub fn process_max() -> usize {
    PROCESS_MAX.load(Ordering::Relaxed)
}
