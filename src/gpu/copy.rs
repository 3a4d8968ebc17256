//! Moving bytes between host memory and GPUs, and between GPUs.

use super::stream;
use crate::context::{Context, DeviceType};
use crate::error::Result;
use cudarc::driver::result;

/// One side of a copy: host memory (cpu, cpu_pinned, cpu_shared) or an address on a GPU.
#[derive(Clone, Copy, Debug)]
pub enum Endpoint {
    Host(*mut u8),
    Device { dev: i32, addr: u64 },
}

impl Endpoint {
    /// The endpoint of `ptr` in memory of `ctx`.
    pub fn of(ctx: Context, ptr: *mut u8) -> Endpoint {
        match ctx.dev_type {
            DeviceType::Gpu => Endpoint::Device {
                dev: ctx.dev_id,
                addr: ptr as usize as u64,
            },
            _ => Endpoint::Host(ptr),
        }
    }
}

/// Copies `n` bytes from `src` to `dst` and returns when the copy is complete. Host to host
/// ranges may overlap; a device side is copied on the calling thread's stream of that device
/// (of the destination device between two GPUs: a peer copy, which the driver stages through
/// host memory when the devices cannot reach each other).
///
/// # Safety
/// Both ranges must be live memory of `n` bytes on their devices that nothing else writes (and,
/// for `dst`, reads) during the call.
pub unsafe fn copy(dst: Endpoint, src: Endpoint, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    match (dst, src) {
        (Endpoint::Host(d), Endpoint::Host(s)) => {
            // SAFETY: the caller guarantees both ranges; `copy` allows overlap.
            unsafe { std::ptr::copy(s, d, n) };
            Ok(())
        }
        (Endpoint::Device { dev, addr }, Endpoint::Host(s)) => {
            stream::run(dev, "copying host memory to the device", |st| {
                // SAFETY: `s` has `n` readable bytes until `run` returns, which waits for the copy.
                let src = unsafe { std::slice::from_raw_parts(s, n) };
                // SAFETY: `addr` has `n` writable bytes on `dev` (the caller's contract).
                unsafe { result::memcpy_htod_async(addr, src, st) }
            })
        }
        (Endpoint::Host(d), Endpoint::Device { dev, addr }) => {
            stream::run(dev, "copying device memory to the host", |st| {
                // SAFETY: `d` has `n` writable bytes until `run` returns, which waits for the copy.
                let dst = unsafe { std::slice::from_raw_parts_mut(d, n) };
                // SAFETY: `addr` has `n` readable bytes on `dev`.
                unsafe { result::memcpy_dtoh_async(dst, addr, st) }
            })
        }
        (Endpoint::Device { dev: dd, addr: da }, Endpoint::Device { dev: sd, addr: sa })
            if dd == sd =>
        {
            stream::run(dd, "copying device memory", |st| {
                // SAFETY: both ranges are `n` bytes on `dd` (the caller's contract).
                unsafe { result::memcpy_dtod_async(da, sa, n, st) }
            })
        }
        (Endpoint::Device { dev: dd, addr: da }, Endpoint::Device { dev: sd, addr: sa }) => {
            let (dst_ctx, src_ctx) = (super::context(i64::from(dd))?, super::context(i64::from(sd))?);
            stream::run(dd, &format!("copying device memory from gpu({sd})"), |st| {
                // SAFETY: `da` has `n` bytes on `dd`, `sa` on `sd`; both contexts are live.
                unsafe {
                    result::memcpy_peer_async(dst_ctx.cu_ctx(), da, src_ctx.cu_ctx(), sa, n, st)
                }
            })
        }
    }
}

/// Sets `n` bytes at `dst` to `value` and returns when done.
///
/// # Safety
/// `dst` must be `n` bytes of live memory that nothing else uses during the call.
pub unsafe fn fill_bytes(dst: Endpoint, value: u8, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    match dst {
        Endpoint::Host(d) => {
            // SAFETY: the caller guarantees the range.
            unsafe { std::ptr::write_bytes(d, value, n) };
            Ok(())
        }
        Endpoint::Device { dev, addr } => stream::run(dev, "setting device memory", |st| {
            // SAFETY: `addr` has `n` writable bytes on `dev`.
            unsafe { result::memset_d8_async(addr, value, n, st) }
        }),
    }
}

