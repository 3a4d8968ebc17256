//! kTempSpace: a scratch buffer from the storage pool that grows to the largest size asked for.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::storage::{Allocation, Storage};

/// One temp-space copy's buffer.
pub struct TempSpace {
    storage: &'static Storage,
    block: Allocation,
}

impl TempSpace {
    /// An empty buffer on `ctx`; memory is taken on first use.
    pub fn new(storage: &'static Storage, ctx: Context) -> Self {
        TempSpace {
            storage,
            block: Allocation::empty(ctx),
        }
    }

    /// Current capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.block.len()
    }

    /// Start of the buffer (null before the first non-empty request).
    pub fn as_ptr(&self) -> *mut u8 {
        self.block.as_ptr()
    }

    pub fn ctx(&self) -> Context {
        self.block.ctx()
    }

    /// Makes the buffer at least `bytes` long and returns its start (null when `bytes` is 0 and
    /// nothing was allocated yet). Growing frees the old block first (its contents are lost,
    /// earlier pointers dangle) and zero-fills the new one, so the bytes are always initialised.
    pub fn reserve(&mut self, bytes: usize) -> Result<*mut u8> {
        if bytes > self.block.len() {
            let ctx = self.block.ctx();
            // free first: the pool may hand the same memory back rounded up
            self.block = Allocation::empty(ctx);
            let block = self.storage.alloc(ctx, bytes)?;
            if ctx.is_host() {
                // SAFETY: a fresh host block of `bytes` writable bytes that nothing else uses.
                unsafe { std::ptr::write_bytes(block.as_ptr(), 0, bytes) };
            }
            self.block = block;
        }
        Ok(self.block.as_ptr())
    }

    /// The first `bytes` of the buffer as a slice, after [`reserve`](Self::reserve).
    pub fn slice_mut(&mut self, bytes: usize) -> Result<&mut [u8]> {
        if !self.ctx().is_host() {
            return Err(Error::invalid(format!(
                "temp space on {} is device memory: use its pointer, not a host slice",
                self.ctx()
            )));
        }
        let ptr = self.reserve(bytes)?;
        if bytes == 0 {
            return Ok(&mut []);
        }
        // SAFETY: `reserve` made the host block at least `bytes` long and initialised it; the
        // slice borrows `self` mutably, so the block can neither move nor be aliased meanwhile.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, bytes) })
    }
}

impl std::fmt::Debug for TempSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TempSpace")
            .field("block", &self.block)
            .finish()
    }
}
