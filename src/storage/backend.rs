//! Raw device memory: the trait a device backend implements, and the host (CPU) backend.
//!
//! A pooled manager only ever talks to a [`DeviceMemory`]; a GPU backend (CUDA `cudaMalloc`/
//! `cudaFree`/`cudaMemGetInfo`) slots in by implementing it and registering a factory with
//! [`Storage::set_gpu_backend`](super::Storage::set_gpu_backend).

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

/// Alignment of every host block (cache line, and what MKLDNN-style kernels expect).
pub const HOST_ALIGNMENT: usize = 64;

/// Free and total bytes of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free: usize,
    pub total: usize,
}

/// Allocates and frees raw blocks on one device. Implementations must be thread-safe; the pool
/// calls them without holding its own lock.
pub trait DeviceMemory: Send + Sync {
    /// Allocates `size > 0` bytes. An `Err` means the device is out of memory (or refused); the
    /// pool then releases its cache and retries once.
    fn allocate(&self, size: usize) -> Result<NonNull<u8>>;

    /// Frees a block.
    ///
    /// # Safety
    /// `ptr` must come from `allocate(size)` on this backend with the same `size`, and must not be
    /// used or freed again.
    unsafe fn deallocate(&self, ptr: NonNull<u8>, size: usize);

    /// Free/total memory of the device if known; the pool uses it for the reserve rule.
    fn memory_info(&self) -> Option<MemoryInfo> {
        None
    }
}

/// Host memory from the global allocator, aligned to [`HOST_ALIGNMENT`]. Used for cpu, and for
/// cpu_pinned while there is no CUDA backend (pinned memory then behaves as ordinary memory).
#[derive(Default)]
pub struct HostMemory {
    meminfo: Mutex<Option<(Instant, MemoryInfo)>>,
}

/// How long a `/proc/meminfo` reading is reused before the file is read again.
const MEMINFO_TTL: Duration = Duration::from_millis(100);

impl HostMemory {
    pub fn new() -> Self {
        crate::allocator::configure();
        Self::default()
    }

    fn layout(size: usize) -> Result<Layout> {
        Layout::from_size_align(size, HOST_ALIGNMENT).map_err(|_| {
            Error::out_of_memory(format!("cannot allocate {size} bytes: size too large"))
        })
    }
}

impl DeviceMemory for HostMemory {
    fn allocate(&self, size: usize) -> Result<NonNull<u8>> {
        let layout = Self::layout(size)?;
        debug_assert!(size > 0);
        // SAFETY: the layout has a non-zero size (the pool never asks for 0 bytes).
        let ptr = unsafe { std::alloc::alloc(layout) };
        NonNull::new(ptr).ok_or_else(|| {
            Error::out_of_memory(format!(
                "host allocation of {size} bytes failed: {}",
                std::io::Error::last_os_error()
            ))
        })
    }

    unsafe fn deallocate(&self, ptr: NonNull<u8>, size: usize) {
        let layout = Self::layout(size).expect("layout was valid when the block was allocated");
        // SAFETY: the caller guarantees `ptr` came from `allocate(size)`, i.e. from
        // `std::alloc::alloc` with this same layout, and is freed once.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) }
    }

    /// `MemAvailable`/`MemTotal` from `/proc/meminfo`, re-read at most every 100 ms (only pool
    /// misses ask, so the hit path never touches the file).
    fn memory_info(&self) -> Option<MemoryInfo> {
        let mut cached = self.meminfo.lock();
        if let Some((at, info)) = *cached
            && at.elapsed() < MEMINFO_TTL
        {
            return Some(info);
        }
        let info = read_proc_meminfo()?;
        *cached = Some((Instant::now(), info));
        Some(info)
    }
}

fn read_proc_meminfo() -> Option<MemoryInfo> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text)
}

fn parse_meminfo(text: &str) -> Option<MemoryInfo> {
    let field = |name: &str| -> Option<usize> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kib: usize = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        kib.checked_mul(1024)
    };
    Some(MemoryInfo {
        free: field("MemAvailable:")?,
        total: field("MemTotal:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_blocks_are_aligned_and_usable() {
        let host = HostMemory::new();
        for size in [1usize, 7, 64, 1000, 4096, 1 << 20] {
            let p = host.allocate(size).unwrap();
            assert_eq!(p.as_ptr() as usize % HOST_ALIGNMENT, 0, "size {size}");
            // SAFETY: the block has `size` writable bytes.
            unsafe {
                std::ptr::write_bytes(p.as_ptr(), 0xAB, size);
                assert_eq!(*p.as_ptr().add(size - 1), 0xAB);
                host.deallocate(p, size);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // Miri aborts on an allocation it cannot satisfy instead of returning null
    fn impossible_host_allocation_is_an_error() {
        let host = HostMemory::new();
        let e = host.allocate(usize::MAX - 4096).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::OutOfMemory);
        // A huge but valid layout: the allocator returns NULL instead of aborting.
        let e = host.allocate(1usize << 62).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::OutOfMemory);
    }

    #[test]
    fn meminfo_parsing() {
        let text =
            "MemTotal:        2000 kB\nMemFree:          100 kB\nMemAvailable:     1500 kB\n";
        assert_eq!(
            parse_meminfo(text),
            Some(MemoryInfo {
                free: 1500 * 1024,
                total: 2000 * 1024
            })
        );
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
        let live = HostMemory::new()
            .memory_info()
            .expect("/proc/meminfo on Linux");
        assert!(live.total > 0 && live.free <= live.total);
    }
}
