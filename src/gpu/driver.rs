//! Finding the CUDA driver and its devices.
//!
//! cudarc resolves the driver library on first use and panics (rather than failing) when there is
//! none, and panics again on every later call; so the library's presence is probed once, and the
//! one call that could still panic is made under `catch_unwind`. With a driver but no device the
//! count is 0, as with no driver.

use crate::error::{Error, Result};
use cudarc::driver::CudaContext;
use std::sync::{Arc, OnceLock};

struct Driver {
    /// The process that found the driver: a child forked later cannot use its contexts.
    pid: u32,
    count: usize,
    /// Why there are no GPUs, when there are none.
    problem: Option<String>,
    contexts: Vec<OnceLock<std::result::Result<Arc<CudaContext>, Error>>>,
}

static DRIVER: OnceLock<Driver> = OnceLock::new();

fn probe() -> Driver {
    let pid = std::process::id();
    let none = |problem: String| Driver {
        pid,
        count: 0,
        problem: Some(problem),
        contexts: Vec::new(),
    };
    // Miri cannot call foreign functions (dlopen): under it the process has no driver, and
    // everything a machine without GPUs runs can still be checked.
    if cfg!(miri) {
        return none("no CUDA driver (Miri cannot load libcuda.so)".into());
    }
    // SAFETY: the probe only tries to dlopen the driver's candidate library names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return none("no CUDA driver (libcuda.so) was found".into());
    }
    match std::panic::catch_unwind(CudaContext::device_count) {
        Ok(Ok(n)) if n > 0 => Driver {
            pid,
            count: n as usize,
            problem: None,
            contexts: (0..n).map(|_| OnceLock::new()).collect(),
        },
        Ok(Ok(_)) => none("the CUDA driver reports no device".into()),
        Ok(Err(e)) => none(format!("the CUDA driver failed to start: {e:?}")),
        Err(_) => none("the CUDA driver library could not be used".into()),
    }
}

fn driver() -> &'static Driver {
    DRIVER.get_or_init(probe)
}

/// The number of GPUs (0 without a driver).
pub fn device_count() -> usize {
    driver().count
}

/// Why there are no GPUs (None when there are some).
pub fn driver_problem() -> Option<&'static str> {
    driver().problem.as_deref()
}

fn no_such_device(dev: i64) -> Error {
    let d = driver();
    match &d.problem {
        Some(p) => Error::invalid(format!("gpu({dev}) does not exist: {p}")),
        None => Error::invalid(format!(
            "gpu({dev}) does not exist: this machine has {} GPU(s), gpu(0) to gpu({})",
            d.count,
            d.count - 1
        )),
    }
}

/// Fails in a child forked after this process started using the driver: CUDA does not survive
/// fork (the parent's contexts, streams and completion threads are not the child's).
pub(crate) fn same_process(dev: i64) -> Result<()> {
    let d = driver();
    if d.count > 0 && std::process::id() != d.pid {
        return Err(Error::invalid(format!(
            "gpu({dev}) cannot be used in a process forked after the parent started using the \
             CUDA driver (start the child with exec, or use GPUs only in the child)"
        )));
    }
    Ok(())
}

/// The context of GPU `dev` (its primary context), made on first use. cudarc's automatic event
/// tracking is off: the engine orders every use of device memory itself.
pub fn context(dev: i64) -> Result<Arc<CudaContext>> {
    let d = driver();
    same_process(dev)?;
    let slot = usize::try_from(dev)
        .ok()
        .and_then(|i| d.contexts.get(i))
        .ok_or_else(|| no_such_device(dev))?;
    slot.get_or_init(|| {
        let ctx = CudaContext::new(dev as usize).map_err(|e| {
            Error::internal(format!("gpu({dev}): creating its context failed: {e:?}"))
        })?;
        // SAFETY: called before any stream or allocation exists on this context.
        unsafe { ctx.disable_event_tracking() };
        Ok(ctx)
    })
    .clone()
}

/// Free and total memory of GPU `dev`, in bytes.
pub fn memory_info(dev: i64) -> Result<(u64, u64)> {
    let ctx = context(dev)?;
    let (free, total) = ctx
        .mem_get_info()
        .map_err(|e| Error::internal(format!("gpu({dev}): querying its memory failed: {e:?}")))?;
    Ok((free as u64, total as u64))
}

/// An error of the driver in `what` on gpu(`dev`), with the driver's name and text for it.
pub(crate) fn cuda_error(dev: i32, what: &str, e: cudarc::driver::DriverError) -> Error {
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned());
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned());
    let detail = match (name, text) {
        (Ok(n), Ok(t)) => format!("{n}: {t}"),
        _ => format!("CUDA error {}", e.0 as i32),
    };
    Error::internal(format!("gpu({dev}): {what} failed: {detail}"))
}

/// Lets gpu(`dev`) read gpu(`peer`)'s memory directly when the hardware allows it and
/// `MXNET_ENABLE_GPU_P2P` (default 1) is not 0, as MXNet's device KVStore does; done once per
/// pair. Without peer access a peer copy still works: the driver stages it through host memory.
pub(crate) fn enable_peer_access(dev: i32, peer: i32) {
    static DONE: parking_lot::Mutex<Vec<(i32, i32)>> = parking_lot::Mutex::new(Vec::new());
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    let allowed = *ALLOWED
        .get_or_init(|| std::env::var("MXNET_ENABLE_GPU_P2P").map_or(true, |v| v.trim() != "0"));
    if !allowed || dev == peer {
        return;
    }
    let mut done = DONE.lock();
    if done.contains(&(dev, peer)) {
        return;
    }
    done.push((dev, peer));
    let (Ok(ctx), Ok(peer_ctx)) = (context(i64::from(dev)), context(i64::from(peer))) else {
        return;
    };
    if ctx.bind_to_thread().is_err() {
        return;
    }
    let mut can = 0;
    // SAFETY: a query of two valid devices into a local.
    let r = unsafe {
        cudarc::driver::sys::cuDeviceCanAccessPeer(&mut can, ctx.cu_device(), peer_ctx.cu_device())
    };
    if r == cudarc::driver::sys::CUresult::CUDA_SUCCESS && can == 1 {
        // SAFETY: enables access from the bound context to the peer's live context; "already
        // enabled" is harmless.
        let _ = unsafe { cudarc::driver::sys::cuCtxEnablePeerAccess(peer_ctx.cu_ctx(), 0) };
    }
}
