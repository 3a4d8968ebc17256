//! Pool statistics, and the hooks a storage instance hands to its managers: the memory-event
//! callback (for the profiler) and the simulated-failure counter (for tests).

use crate::context::Context;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

/// Counters of one storage manager. Byte counts are block sizes (after rounding), so
/// `bytes_in_use + bytes_cached` is what the manager holds from its device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes of blocks handed out and not yet freed.
    pub bytes_in_use: usize,
    /// Bytes of freed blocks kept for reuse.
    pub bytes_cached: usize,
    /// Largest `bytes_in_use` seen.
    pub peak_in_use: usize,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that went to the device.
    pub misses: u64,
    /// Non-empty allocations requested (hits + misses, including failed ones).
    pub allocs: u64,
    /// Blocks given back by their owners.
    pub frees: u64,
    /// Number of cached blocks.
    pub blocks_cached: usize,
    /// Cached blocks returned to the device by the trim policy, the reserve rule, the
    /// out-of-memory retry or `empty_cache`.
    pub blocks_released: u64,
}

/// Whether a [`MemoryEvent`] is an allocation or a free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryEventKind {
    Alloc,
    Free,
}

/// What a memory hook receives after each non-empty allocation and free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryEvent {
    /// The manager's context (cpu and cpu_shared managers report dev_id 0).
    pub ctx: Context,
    pub kind: MemoryEventKind,
    /// Requested bytes.
    pub size: usize,
    /// Bytes of the block that serves the request (rounded).
    pub block_size: usize,
    /// The manager's `bytes_in_use` right after the event.
    pub bytes_in_use: usize,
}

/// Receives memory events (the profiler's memory counters). It runs on the allocating or freeing
/// thread, outside the pool's lock, and must be cheap and must not allocate from the same storage.
pub type MemoryHook = fn(&MemoryEvent);

/// Per-storage-instance state shared with its managers.
#[derive(Default)]
pub(crate) struct Hooks {
    /// A `MemoryHook` stored as a pointer (keeping its provenance); null means none.
    hook: AtomicPtr<()>,
    /// Number of upcoming device allocations that fail on purpose.
    fail_next: AtomicUsize,
}

impl Hooks {
    pub(crate) fn set_hook(&self, hook: Option<MemoryHook>) {
        let raw = hook.map_or(std::ptr::null_mut(), |f| f as *mut ());
        self.hook.store(raw, Ordering::Release);
    }

    pub(crate) fn notify(&self, event: impl FnOnce() -> MemoryEvent) {
        let raw = self.hook.load(Ordering::Acquire);
        if !raw.is_null() {
            // SAFETY: the only non-null values ever stored are `MemoryHook` function pointers cast
            // to `*mut ()` (`set_hook`), with their provenance; a function pointer and a data
            // pointer have the same size on every target Rust supports for this crate.
            let hook: MemoryHook = unsafe { std::mem::transmute::<*mut (), MemoryHook>(raw) };
            hook(&event());
        }
    }

    pub(crate) fn fail_next(&self, n: usize) {
        self.fail_next.store(n, Ordering::Release);
    }

    /// True if this device allocation must fail (consumes one pending failure).
    pub(crate) fn take_failure(&self) -> bool {
        if self.fail_next.load(Ordering::Relaxed) == 0 {
            return false;
        }
        self.fail_next
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    static SEEN: AtomicU64 = AtomicU64::new(0);
    fn record(e: &MemoryEvent) {
        SEEN.fetch_add(e.size as u64, Ordering::SeqCst);
    }

    #[test]
    fn hook_slot_and_failure_counter() {
        let hooks = Hooks::default();
        let ev = || MemoryEvent {
            ctx: Context::cpu(0),
            kind: MemoryEventKind::Alloc,
            size: 5,
            block_size: 64,
            bytes_in_use: 64,
        };
        hooks.notify(ev);
        assert_eq!(SEEN.load(Ordering::SeqCst), 0);
        hooks.set_hook(Some(record));
        hooks.notify(ev);
        hooks.notify(ev);
        assert_eq!(SEEN.load(Ordering::SeqCst), 10);
        hooks.set_hook(None);
        hooks.notify(ev);
        assert_eq!(SEEN.load(Ordering::SeqCst), 10);

        assert!(!hooks.take_failure());
        hooks.fail_next(2);
        assert!(hooks.take_failure());
        assert!(hooks.take_failure());
        assert!(!hooks.take_failure());
    }
}
