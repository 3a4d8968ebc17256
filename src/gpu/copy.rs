//! Moving bytes between host memory and GPUs, and between GPUs.

use super::stream::{self, Finish, finish_now};
use crate::context::{Context, DeviceType};
use crate::error::Result;
use cudarc::driver::{DriverError, result, sys};

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

type Work = Box<dyn FnOnce(sys::CUstream) -> std::result::Result<(), DriverError>>;
/// The device that runs a copy, what the copy is (for errors) and its stream work.
type Routed = (i32, &'static str, Work);

/// The device, description and stream work of a copy that involves a GPU; `None` for host to
/// host.
///
/// # Safety
/// As [`copy`]; the work must be queued while the ranges are live.
unsafe fn route(dst: Endpoint, src: Endpoint, n: usize) -> Result<Option<Routed>> {
    Ok(Some(match (dst, src) {
        (Endpoint::Host(_), Endpoint::Host(_)) => return Ok(None),
        (Endpoint::Device { dev, addr }, Endpoint::Host(s)) => (
            dev,
            "copying host memory to the device",
            Box::new(move |st| {
                // SAFETY: `s` has `n` readable bytes until the copy has completed (the caller's
                // contract); `addr` has `n` writable bytes on `dev`.
                unsafe { result::memcpy_htod_async(addr, std::slice::from_raw_parts(s, n), st) }
            }),
        ),
        (Endpoint::Host(d), Endpoint::Device { dev, addr }) => (
            dev,
            "copying device memory to the host",
            Box::new(move |st| {
                // SAFETY: `d` has `n` writable bytes until the copy has completed; `addr` has `n`
                // readable bytes on `dev`.
                unsafe { result::memcpy_dtoh_async(std::slice::from_raw_parts_mut(d, n), addr, st) }
            }),
        ),
        (Endpoint::Device { dev: dd, addr: da }, Endpoint::Device { dev: sd, addr: sa })
            if dd == sd =>
        {
            (
                dd,
                "copying device memory",
                // SAFETY: both ranges are `n` bytes on `dd` (the caller's contract).
                Box::new(move |st| unsafe { result::memcpy_dtod_async(da, sa, n, st) }),
            )
        }
        (Endpoint::Device { dev: dd, addr: da }, Endpoint::Device { dev: sd, addr: sa }) => {
            super::driver::enable_peer_access(dd, sd);
            let (dst_ctx, src_ctx) = (
                super::context(i64::from(dd))?,
                super::context(i64::from(sd))?,
            );
            (
                dd,
                "copying device memory between GPUs",
                Box::new(move |st| {
                    // SAFETY: `da` has `n` bytes on `dd`, `sa` on `sd`; both contexts are live.
                    unsafe {
                        result::memcpy_peer_async(dst_ctx.cu_ctx(), da, src_ctx.cu_ctx(), sa, n, st)
                    }
                }),
            )
        }
    }))
}

/// Copies `n` bytes from `src` to `dst`, finishing as `finish` says. Host to host ranges may
/// overlap and are copied at once; a device side is copied on the calling thread's stream of
/// that device (of the destination device between two GPUs: a peer copy, which the driver stages
/// through host memory when the devices cannot reach each other).
///
/// # Safety
/// Both ranges must be live memory of `n` bytes on their devices, that nothing else writes (and,
/// for `dst`, reads) until the copy has finished.
pub unsafe fn copy_finish(dst: Endpoint, src: Endpoint, n: usize, finish: Finish) -> Result<()> {
    if n == 0 {
        return finish_now(Ok(()), finish);
    }
    // SAFETY: the caller's contract.
    match unsafe { route(dst, src, n) } {
        Ok(None) => {
            let (Endpoint::Host(d), Endpoint::Host(s)) = (dst, src) else {
                unreachable!("route handles every device side")
            };
            // SAFETY: the caller guarantees both ranges; `copy` allows overlap.
            unsafe { std::ptr::copy(s, d, n) };
            finish_now(Ok(()), finish)
        }
        Ok(Some((dev, what, work))) => stream::run_finish(dev, what, work, finish),
        Err(e) => finish_now(Err(e), finish),
    }
}

/// [`copy_finish`] returning when the copy is complete.
///
/// # Safety
/// As [`copy_finish`].
pub unsafe fn copy(dst: Endpoint, src: Endpoint, n: usize) -> Result<()> {
    // SAFETY: the caller's contract.
    unsafe { copy_finish(dst, src, n, Finish::Here) }
}

/// Sets `n` bytes at `dst` to `value`, finishing as `finish` says.
///
/// # Safety
/// `dst` must be `n` bytes of live memory that nothing else uses until it has finished.
pub unsafe fn fill_bytes(dst: Endpoint, value: u8, n: usize, finish: Finish) -> Result<()> {
    match dst {
        Endpoint::Host(d) => {
            // SAFETY: the caller guarantees the range.
            unsafe { std::ptr::write_bytes(d, value, n) };
            finish_now(Ok(()), finish)
        }
        Endpoint::Device { dev, addr } => stream::run_finish(
            dev,
            "setting device memory",
            // SAFETY: `addr` has `n` writable bytes on `dev`.
            move |st| unsafe { result::memset_d8_async(addr, value, n, st) },
            finish,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn host_copies_allow_overlap_and_fills_set_every_byte() {
        let mut v: Vec<u8> = (0..32).collect();
        let p = v.as_mut_ptr();
        // SAFETY: both ranges lie inside `v`, which nothing else uses; `copy` allows overlap.
        unsafe { copy(Endpoint::Host(p.wrapping_add(4)), Endpoint::Host(p), 16) }.unwrap();
        let mut expect: Vec<u8> = (0..32).collect();
        expect.copy_within(0..16, 4);
        assert_eq!(v, expect);
        // SAFETY: as above; 0 bytes touch nothing.
        unsafe { copy(Endpoint::Host(p), Endpoint::Host(p.wrapping_add(1)), 0) }.unwrap();
        assert_eq!(v, expect);
        let done = Arc::new(Mutex::new(None));
        let d = done.clone();
        let finish = Finish::Then(Box::new(move |r| *d.lock().unwrap() = Some(r.is_ok())));
        // SAFETY: bytes 8..24 of `v`.
        unsafe { fill_bytes(Endpoint::Host(v.as_mut_ptr().wrapping_add(8)), 0xAB, 16, finish) }
            .unwrap();
        // host work finishes on the calling thread before the call returns
        assert_eq!(*done.lock().unwrap(), Some(true));
        assert!(v[8..24].iter().all(|&b| b == 0xAB));
        assert_eq!(&v[..8], &expect[..8]);
        assert_eq!(&v[24..], &expect[24..]);
    }

    #[test]
    fn endpoints_follow_the_context() {
        let mut x = 0u8;
        let p: *mut u8 = &mut x;
        assert!(matches!(Endpoint::of(Context::cpu(0), p), Endpoint::Host(q) if q == p));
        assert!(matches!(Endpoint::of(Context::cpu_pinned(0), p), Endpoint::Host(_)));
        assert!(matches!(
            Endpoint::of(Context::gpu(3), p),
            Endpoint::Device { dev: 3, addr } if addr == p as usize as u64
        ));
    }

    /// A device side without that device is an error, also for the completion callback.
    #[test]
    fn a_missing_device_is_an_error() {
        let mut v = [0u8; 8];
        let dev = i32::try_from(crate::gpu::device_count()).unwrap();
        let done = Arc::new(Mutex::new(None));
        let d = done.clone();
        let finish = Finish::Then(Box::new(move |r| *d.lock().unwrap() = Some(r.is_err())));
        let missing = Endpoint::Device { dev, addr: 0x1000 };
        // SAFETY: the device does not exist, so nothing is copied.
        let r = unsafe { copy_finish(Endpoint::Host(v.as_mut_ptr()), missing, 8, finish) };
        assert!(r.is_err() || *done.lock().unwrap() == Some(true), "{r:?}");
        assert_eq!(v, [0u8; 8]);
    }
}
