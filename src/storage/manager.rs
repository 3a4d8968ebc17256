//! The interface between the [`Storage`](super::Storage) facade and one device's manager.

use super::stats::PoolStats;
use crate::context::Context;
use crate::error::{Error, Result};
use std::ptr::NonNull;

/// One device's memory manager: the pooled manager (host or any [`DeviceMemory`](super::DeviceMemory)
/// backend) or the cpu_shared manager.
pub trait StorageManager: Send + Sync {
    /// The context the manager serves (dev_id 0 for cpu and cpu_shared).
    fn context(&self) -> Context;

    /// Allocates `size > 0` bytes. Errors are `OutOfMemory` (after the cache was released and the
    /// device allocation retried) or whatever the device reports.
    fn alloc(&self, size: usize) -> Result<NonNull<u8>>;

    /// Gives a block back (to the cache, or to the device for unpooled managers).
    ///
    /// # Safety
    /// `ptr` must come from `alloc(size)` on this manager with the same `size`, and must not be
    /// used or freed again.
    unsafe fn free(&self, ptr: NonNull<u8>, size: usize);

    /// Returns every cached block to the device; blocks in use are untouched.
    fn release_all(&self);

    /// A snapshot of the counters.
    fn stats(&self) -> PoolStats;

    /// For cpu_shared blocks: bumps the cross-process reference count and returns
    /// `(shared_pid, shared_id)`. Other managers refuse.
    ///
    /// # Safety
    /// `ptr`/`size` must describe a live block from `alloc` (or attach) on this manager.
    unsafe fn share(&self, ptr: NonNull<u8>, size: usize) -> Result<(i32, i32)> {
        let _ = (ptr, size);
        Err(Error::invalid(format!(
            "only cpu_shared memory has a shared-memory handle, this block is on {}",
            self.context()
        )))
    }

    /// For the cpu_shared manager: maps the existing block `(pid, id)` of `size > 0` bytes; the
    /// result is freed with `free` like any block. Other managers refuse.
    fn attach(&self, pid: i32, id: i32, size: usize) -> Result<NonNull<u8>> {
        let _ = (pid, id, size);
        Err(Error::invalid(format!(
            "{} memory cannot be attached from another process",
            self.context()
        )))
    }
}
