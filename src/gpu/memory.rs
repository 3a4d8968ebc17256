//! Raw memory the storage managers pool: device memory of one GPU, and page-locked host memory.

use super::driver::{self, cuda_error};
use crate::error::{Error, Result};
use crate::storage::{DeviceMemory, HostMemory, MemoryInfo};
use cudarc::driver::{CudaContext, result, sys};
use std::ptr::NonNull;
use std::sync::Arc;

/// `cuMemHostAlloc` flag: the memory is page-locked for every context, not only the current one.
const CU_MEMHOSTALLOC_PORTABLE: u32 = 1;

/// Device memory of one GPU (`cuMemAlloc`/`cuMemFree`). Any thread may allocate or free: each
/// call binds the device's context first.
struct CudaMemory {
    dev: i32,
    ctx: Arc<CudaContext>,
}

impl DeviceMemory for CudaMemory {
    fn allocate(&self, size: usize) -> Result<NonNull<u8>> {
        let dev = self.dev;
        driver::same_process(i64::from(dev))?;
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_error(dev, "binding its context", e))?;
        // SAFETY: a plain allocation on the bound context; the memory is handed out uninitialised,
        // as every storage block is.
        let ptr = unsafe { result::malloc_sync(size) }.map_err(|e| {
            let oom = e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY;
            let e = cuda_error(dev, &format!("allocating {size} bytes"), e);
            // only a full device is worth the pool's release-and-retry
            if oom {
                Error::out_of_memory(e.message())
            } else {
                e
            }
        })?;
        NonNull::new(ptr as usize as *mut u8)
            .ok_or_else(|| Error::internal(format!("gpu({dev}): the driver returned address 0")))
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _size: usize) {
        // A failure here (a sticky device error) leaves nothing to recover; the device reports
        // the error again on its next use.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the caller guarantees `ptr` came from `allocate` on this device and that no
            // engine op still uses it (the engine completes an op only after its stream work).
            let _ = unsafe { result::free_sync(ptr.as_ptr() as usize as u64) };
        }
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        self.ctx.bind_to_thread().ok()?;
        let (free, total) = result::mem_get_info().ok()?;
        Some(MemoryInfo { free, total })
    }
}

/// Page-locked host memory (`cuMemHostAlloc`, portable to every context).
struct PinnedMemory {
    ctx: Arc<CudaContext>,
}

impl DeviceMemory for PinnedMemory {
    fn allocate(&self, size: usize) -> Result<NonNull<u8>> {
        driver::same_process(0).map_err(|e| e.context("page-locked (cpu_pinned) memory"))?;
        self.ctx
            .bind_to_thread()
            .map_err(|e| cuda_error(0, "binding its context", e))?;
        // SAFETY: a plain page-locked allocation of `size > 0` bytes.
        let p = unsafe { result::malloc_host(size, CU_MEMHOSTALLOC_PORTABLE) }.map_err(|e| {
            let e = cuda_error(0, &format!("allocating {size} bytes of pinned memory"), e);
            Error::out_of_memory(e.message())
        })?;
        NonNull::new(p as *mut u8).ok_or_else(|| {
            Error::internal("cuMemHostAlloc returned a null pointer without an error")
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, _size: usize) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `ptr` came from `cuMemHostAlloc` (`allocate`) and is freed once.
            let _ = unsafe { result::free_host(ptr.as_ptr().cast()) };
        }
    }

    fn memory_info(&self) -> Option<MemoryInfo> {
        HostMemory::new().memory_info()
    }
}

/// The memory backend of gpu(`dev`) for its storage manager: an error naming the reason when the
/// device does not exist.
pub fn device_memory(dev: i32) -> Result<Arc<dyn DeviceMemory>> {
    let ctx = driver::context(i64::from(dev))?;
    Ok(Arc::new(CudaMemory { dev, ctx }))
}

/// The memory backend of cpu_pinned(`dev`): page-locked memory when the machine has a GPU,
/// ordinary host memory otherwise (as MXNet does without GPUs).
pub fn pinned_memory(_dev: i32) -> Result<Arc<dyn DeviceMemory>> {
    if driver::device_count() == 0 {
        return Ok(Arc::new(HostMemory::new()));
    }
    Ok(Arc::new(PinnedMemory {
        ctx: driver::context(0)?,
    }))
}
