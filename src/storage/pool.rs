//! The pooled storage manager: caches freed blocks by rounded size and reuses them.
//!
//! * **Hit path** (a cached block of the right size exists): one uncontended `parking_lot` mutex
//!   per manager (per device, never a process-wide lock), a hash lookup, a `Vec::pop` and a few
//!   counter updates. No system call, no allocation, no device call.
//! * **Miss path**: the trim policy (below), the reserve rule, then the device allocation outside
//!   the lock. If the device fails, the pool releases its whole cache and retries once before
//!   reporting `OutOfMemory`; it never aborts.
//! * **Trim policy**: the pool keeps `bytes_in_use + bytes_cached <= 2 * peak_in_use`. Frees and
//!   hits leave that sum unchanged, so only a miss can break it; before a miss allocates a new
//!   block, cached blocks are released until the sum with the new block fits, taking whole
//!   buckets in least-recently-used order. As `bytes_in_use <= peak_in_use`, the cache alone is
//!   then always within 2x of the peak in use, whatever the size pattern.
//! * **Reserve rule** (`*_MEM_POOL_RESERVE`, MXNet's): on a miss, if the device's free memory
//!   minus the new block would fall below `reserve%` of its total, the cache is released first.
//!
//! Cost, measured with `bench_pool_hit` in `storage/tests.rs` (release build, best of 5, on the
//! shared 2-core development VM at load average ~5, so noisy): 1 KiB alloc+free through
//! [`Storage::alloc`](super::Storage::alloc) and `Drop` takes 70-115 ns on a warm Naive pool
//! (two uncontended lock/unlock pairs and one `Arc` clone/drop dominate), 200-350 ns unpooled
//! (glibc `posix_memalign`/`free`), and 150-200 ns per operation when two threads hammer the same
//! pool. A per-thread front cache would remove the shared lock from the hit path but would make
//! `empty_cache`, the statistics and the trim bound approximate, so it is not done.

use super::backend::DeviceMemory;
use super::config::PoolConfig;
use super::manager::StorageManager;
use super::stats::{Hooks, MemoryEvent, MemoryEventKind, PoolStats};
use super::strategy::Strategy;
use crate::context::Context;
use crate::error::{Error, ErrorKind, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ptr::NonNull;
use std::sync::Arc;

/// A cached block address. Only the pool touches it, under its lock.
struct BlockPtr(NonNull<u8>);
// SAFETY: a cached block is plain device memory owned by the pool; the pointer is only moved
// between threads under the pool's mutex, never dereferenced by the pool.
unsafe impl Send for BlockPtr {}

struct Bucket {
    blocks: Vec<BlockPtr>,
    /// Pool clock at the bucket's last hit or free (for LRU trimming).
    last_used: u64,
}

#[derive(Default)]
struct PoolState {
    buckets: HashMap<usize, Bucket, BuildHasherDefault<crate::util::IntHasher>>,
    clock: u64,
    stats: PoolStats,
}

impl PoolState {
    /// Takes cached blocks, least recently used buckets first, until `bytes_cached <= limit`.
    fn evict_until(&mut self, limit: usize, out: &mut Vec<(BlockPtr, usize)>) {
        if self.stats.bytes_cached <= limit {
            return;
        }
        // Buckets emptied by hits stay in the map (keeping the hit path allocation-free); drop
        // them here, on the slow path.
        self.buckets.retain(|_, b| !b.blocks.is_empty());
        let mut order: Vec<(u64, usize)> = self
            .buckets
            .iter()
            .map(|(&size, b)| (b.last_used, size))
            .collect();
        order.sort_unstable();
        for (_, size) in order {
            let bucket = self.buckets.get_mut(&size).expect("bucket listed above");
            while let Some(p) = bucket.blocks.pop() {
                self.stats.bytes_cached -= size;
                self.stats.blocks_cached -= 1;
                self.stats.blocks_released += 1;
                out.push((p, size));
                if self.stats.bytes_cached <= limit {
                    break;
                }
            }
            if bucket.blocks.is_empty() {
                self.buckets.remove(&size);
            }
            if self.stats.bytes_cached <= limit {
                return;
            }
        }
    }

    fn take_all(&mut self) -> Vec<(BlockPtr, usize)> {
        let mut out = Vec::with_capacity(self.stats.blocks_cached);
        for (size, bucket) in self.buckets.drain() {
            out.extend(bucket.blocks.into_iter().map(|p| (p, size)));
        }
        self.stats.blocks_released += out.len() as u64;
        self.stats.bytes_cached = 0;
        self.stats.blocks_cached = 0;
        out
    }
}

/// A pooled (or unpooled) manager over one device backend.
pub struct PooledManager {
    ctx: Context,
    config: PoolConfig,
    backend: Arc<dyn DeviceMemory>,
    hooks: Arc<Hooks>,
    state: Mutex<PoolState>,
}

impl PooledManager {
    pub(crate) fn new(
        ctx: Context,
        config: PoolConfig,
        backend: Arc<dyn DeviceMemory>,
        hooks: Arc<Hooks>,
    ) -> Self {
        PooledManager {
            ctx,
            config,
            backend,
            hooks,
            state: Mutex::new(PoolState::default()),
        }
    }

    /// The settings the manager was created with.
    pub fn config(&self) -> PoolConfig {
        self.config
    }

    fn device_alloc(&self, block: usize) -> Result<NonNull<u8>> {
        if self.hooks.take_failure() {
            return Err(Error::out_of_memory(format!(
                "simulated allocation failure of {block} bytes"
            )));
        }
        self.backend.allocate(block)
    }

    fn give_back(&self, blocks: Vec<(BlockPtr, usize)>) -> usize {
        let mut bytes = 0;
        for (p, size) in blocks {
            bytes += size;
            // SAFETY: every cached block came from `self.backend.allocate(size)` and was removed
            // from the cache under the lock, so it is freed exactly once.
            unsafe { self.backend.deallocate(p.0, size) };
        }
        bytes
    }

    /// True when a new block of `block` bytes would eat into the reserve.
    fn below_reserve(&self, block: usize) -> bool {
        if self.config.reserve_percent == 0 {
            return false;
        }
        match self.backend.memory_info() {
            Some(info) => {
                let reserve = info.total / 100 * self.config.reserve_percent as usize;
                !(info.free > block && info.free - block >= reserve)
            }
            None => false,
        }
    }

    fn alloc_unpooled(&self, size: usize) -> Result<NonNull<u8>> {
        let result = self.device_alloc(size);
        let in_use = {
            let mut st = self.state.lock();
            st.stats.allocs += 1;
            st.stats.misses += 1;
            if result.is_ok() {
                st.stats.bytes_in_use += size;
                st.stats.peak_in_use = st.stats.peak_in_use.max(st.stats.bytes_in_use);
            }
            st.stats.bytes_in_use
        };
        let ptr = result.map_err(|e| self.oom(size, size, 0, e))?;
        self.notify(MemoryEventKind::Alloc, size, size, in_use);
        Ok(ptr)
    }

    /// The error of a failed allocation: MXNet's out-of-memory message when the device is
    /// full, the device's own error (with the request) otherwise.
    fn oom(&self, size: usize, block: usize, released: usize, cause: Error) -> Error {
        if cause.kind() != ErrorKind::OutOfMemory {
            return cause.context(format!("allocating {size} bytes on {}", self.ctx));
        }
        Error::out_of_memory(format!(
            "Memory allocation failed (out of memory): cannot allocate {size} bytes ({block}-byte block) on {} \
             after releasing {released} cached bytes: {cause}",
            self.ctx
        ))
    }

    fn notify(&self, kind: MemoryEventKind, size: usize, block_size: usize, bytes_in_use: usize) {
        let ctx = self.ctx;
        self.hooks.notify(|| MemoryEvent {
            ctx,
            kind,
            size,
            block_size,
            bytes_in_use,
        });
    }
}

impl StorageManager for PooledManager {
    fn context(&self) -> Context {
        self.ctx
    }

    fn alloc(&self, size: usize) -> Result<NonNull<u8>> {
        let strategy = self.config.strategy;
        if strategy == Strategy::Unpooled {
            return self.alloc_unpooled(size);
        }
        let block = strategy.block_size(size)?;
        let mut evicted = Vec::new();
        {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            st.clock += 1;
            st.stats.allocs += 1;
            if let Some(bucket) = st.buckets.get_mut(&block)
                && let Some(p) = bucket.blocks.pop()
            {
                bucket.last_used = st.clock;
                st.stats.hits += 1;
                st.stats.bytes_cached -= block;
                st.stats.blocks_cached -= 1;
                st.stats.bytes_in_use += block;
                st.stats.peak_in_use = st.stats.peak_in_use.max(st.stats.bytes_in_use);
                let in_use = st.stats.bytes_in_use;
                drop(guard);
                self.notify(MemoryEventKind::Alloc, size, block, in_use);
                return Ok(p.0);
            }
            st.stats.misses += 1;
            // Count the block as in use now, so concurrent misses see it in the trim bound.
            st.stats.bytes_in_use += block;
            let peak = st.stats.peak_in_use.max(st.stats.bytes_in_use);
            let limit = (2 * peak).saturating_sub(st.stats.bytes_in_use);
            st.evict_until(limit, &mut evicted);
        }
        self.give_back(evicted);
        let mut released = 0;
        if self.below_reserve(block) {
            released += self.give_back(self.state.lock().take_all());
        }
        let mut result = self.device_alloc(block);
        if result.as_ref().is_err_and(|e| e.kind() == ErrorKind::OutOfMemory) {
            // Fragmentation or a full device: give the whole cache back and try once more.
            released += self.give_back(self.state.lock().take_all());
            result = result.or_else(|_| self.device_alloc(block));
        }
        let mut st = self.state.lock();
        match result {
            Ok(p) => {
                st.stats.peak_in_use = st.stats.peak_in_use.max(st.stats.bytes_in_use);
                let in_use = st.stats.bytes_in_use;
                drop(st);
                self.notify(MemoryEventKind::Alloc, size, block, in_use);
                Ok(p)
            }
            Err(e) => {
                st.stats.bytes_in_use -= block;
                drop(st);
                Err(self.oom(size, block, released, e))
            }
        }
    }

    unsafe fn free(&self, ptr: NonNull<u8>, size: usize) {
        let strategy = self.config.strategy;
        if strategy == Strategy::Unpooled {
            // SAFETY: the caller guarantees `ptr` came from `alloc(size)`, which for an unpooled
            // manager is `backend.allocate(size)`.
            unsafe { self.backend.deallocate(ptr, size) };
            let in_use = {
                let mut st = self.state.lock();
                st.stats.frees += 1;
                st.stats.bytes_in_use -= size;
                st.stats.bytes_in_use
            };
            self.notify(MemoryEventKind::Free, size, size, in_use);
            return;
        }
        let block = strategy
            .block_size(size)
            .expect("the size was valid when the block was allocated");
        let in_use = {
            let mut guard = self.state.lock();
            let st = &mut *guard;
            st.clock += 1;
            let clock = st.clock;
            let bucket = st.buckets.entry(block).or_insert_with(|| Bucket {
                blocks: Vec::new(),
                last_used: 0,
            });
            bucket.blocks.push(BlockPtr(ptr));
            bucket.last_used = clock;
            st.stats.frees += 1;
            st.stats.bytes_in_use -= block;
            st.stats.bytes_cached += block;
            st.stats.blocks_cached += 1;
            st.stats.bytes_in_use
        };
        self.notify(MemoryEventKind::Free, size, block, in_use);
    }

    fn release_all(&self) {
        let blocks = self.state.lock().take_all();
        self.give_back(blocks);
    }

    fn stats(&self) -> PoolStats {
        self.state.lock().stats
    }
}

impl Drop for PooledManager {
    fn drop(&mut self) {
        // Blocks still in use keep the manager alive through their `Allocation`s, so only the
        // cache is left here.
        self.release_all();
    }
}
