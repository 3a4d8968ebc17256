//! Storage functions: MXNet's MXStorageEmptyCache and mxrt's pool statistics.

use super::args;
use super::error::api_call;
use crate::context::Context;
use std::ffi::c_int;

/// Pool statistics of one device's storage manager (MXStorageGetStats). Byte counts are after the
/// pool's size rounding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MXStorageStats {
    /// Bytes handed out and not yet freed.
    pub bytes_in_use: u64,
    /// Bytes kept by the pool for reuse.
    pub bytes_cached: u64,
    /// Highest `bytes_in_use` seen.
    pub peak_in_use: u64,
    /// Allocations served from the cache.
    pub hits: u64,
    /// Allocations that needed new memory from the device.
    pub misses: u64,
    /// Allocations and frees requested.
    pub allocs: u64,
    pub frees: u64,
}

/// Releases the memory the storage pool of (`dev_type`, `dev_id`) keeps cached for reuse. For a
/// gpu that never allocated it fails as MXNet does; host devices always succeed.
#[unsafe(no_mangle)]
pub extern "C" fn MXStorageEmptyCache(dev_type: c_int, dev_id: c_int) -> c_int {
    api_call("MXStorageEmptyCache", || {
        crate::gpu::storage().empty_cache(Context::from_codes(dev_type, dev_id)?)
    })
}

/// mxrt addition. Writes the pool statistics of (`dev_type`, `dev_id`) into `*out`; all zero for a
/// device nothing was allocated on yet. cpu ids share one pool, as do cpu_shared ids.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXStorageGetStats(
    dev_type: c_int,
    dev_id: c_int,
    out: *mut MXStorageStats,
) -> c_int {
    api_call("MXStorageGetStats", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let ctx = Context::from_codes(dev_type, dev_id)?;
        *out = crate::gpu::storage()
            .stats(ctx)
            .map_or_else(MXStorageStats::default, |s| MXStorageStats {
                bytes_in_use: s.bytes_in_use as u64,
                bytes_cached: s.bytes_cached as u64,
                peak_in_use: s.peak_in_use as u64,
                hits: s.hits,
                misses: s.misses,
                allocs: s.allocs,
                frees: s.frees,
            });
        Ok(())
    })
}
