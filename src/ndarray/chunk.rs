//! The memory behind one or more NDArrays (views share it) and the engine variable that orders
//! every op on it. Storage is allocated at creation, or on first use with `delay_alloc`, and
//! released only after every op queued on the variable has finished.

use crate::context::Context;
use crate::engine::{Engine, Var};
use crate::error::Result;
use crate::storage::Allocation;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Memory a chunk owns: from the storage managers, or foreign memory (DLPack) released by a
/// callback.
pub(crate) enum Memory {
    Storage(Allocation),
    Foreign {
        ptr: *mut u8,
        release: Option<Box<dyn FnOnce() + Send>>,
    },
}

// SAFETY: foreign memory is only reached through the chunk's engine-ordered accesses, and its
// release callback is `Send`.
unsafe impl Send for Memory {}

impl Memory {
    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Storage(a) => a.as_ptr(),
            Memory::Foreign { ptr, .. } => *ptr,
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if let Memory::Foreign { release, .. } = self
            && let Some(f) = release.take()
        {
            f();
        }
    }
}

pub(crate) struct Chunk {
    pub(crate) var: Var,
    pub(crate) ctx: Context,
    /// Bytes the chunk holds.
    pub(crate) size: usize,
    storage: Mutex<Option<Memory>>,
    /// Cached start of the storage once allocated (null before).
    ptr: AtomicPtr<u8>,
}

impl Chunk {
    pub(crate) fn new(ctx: Context, size: usize, delay_alloc: bool) -> Result<Chunk> {
        let chunk = Chunk {
            var: Var::new(),
            ctx,
            size,
            storage: Mutex::new(None),
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        };
        if !delay_alloc {
            chunk.data()?;
        }
        Ok(chunk)
    }

    /// A chunk over existing memory (shared memory attached from another process, or a
    /// DLPack tensor).
    pub(crate) fn from_memory(memory: Memory, ctx: Context, size: usize) -> Chunk {
        let ptr = memory.ptr();
        Chunk {
            var: Var::new(),
            ctx,
            size,
            storage: Mutex::new(Some(memory)),
            ptr: AtomicPtr::new(ptr),
        }
    }

    /// Start of the storage, allocating it on first use. Null for a 0-byte chunk.
    pub(crate) fn data(&self) -> Result<*mut u8> {
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() || self.size == 0 {
            return Ok(p);
        }
        let mut slot = self.storage.lock();
        if slot.is_none() {
            let alloc = crate::gpu::storage().alloc(self.ctx, self.size)?;
            self.ptr.store(alloc.as_ptr(), Ordering::Release);
            *slot = Some(Memory::Storage(alloc));
        }
        Ok(self.ptr.load(Ordering::Acquire))
    }

    /// Runs `f` on the allocation (allocating it first), e.g. to share it.
    pub(crate) fn with_allocation<R>(&self, f: impl FnOnce(&Allocation) -> Result<R>) -> Result<R> {
        self.data()?;
        let slot = self.storage.lock();
        match slot.as_ref() {
            Some(Memory::Storage(a)) => f(a),
            _ => f(&Allocation::empty(self.ctx)),
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let storage = self.storage.get_mut().take();
        // No op holds the variable: nothing can still use the memory, free it now. Otherwise free
        // it in a deletion op that runs after the ops queued on the variable.
        if storage.is_none() || self.var.is_unshared() {
            return;
        }
        if let Ok(engine) = Engine::global() {
            let free = Box::new(move |_: &crate::engine::RunContext| drop(storage));
            let _ = engine.delete_variable(Some(free), Context::cpu(0), self.var.clone());
        }
    }
}
