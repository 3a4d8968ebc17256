//! Resources for C ops: MXNet 1.9.1's `MXRandomSeed`/`MXRandomSeedContext`, plus mxrt's
//! `MXResource*` functions through which an op pushed with MXEnginePushSync/Async gets random
//! numbers and temporary workspace.
//!
//! How a C op uses a resource:
//! 1. `MXResourceRequest(dev_type, dev_id, kind, &res)` once (kind 0 kRandom, 1 kTempSpace,
//!    2 kParallelRandom); `MXResourceGetVar(res, &var)` gives its engine variable.
//! 2. Push the op with `var` among its **mutable** variables; the engine then runs the users of
//!    the resource one at a time, in push order, and orders reseeding between them.
//! 3. Inside the op's function call `MXResourceRandomUniform/Normal/Bits(res, ...)` or
//!    `MXResourceGetTempSpace(res, bytes, &ptr)`.
//!
//! Resource handles (and their variable handles) belong to mxrt and live until the process
//! exits; never free them.

// The exports are C functions whose pointer contracts are stated in their docs (and the header).
#![allow(clippy::missing_safety_doc)]

use super::args;
use super::error::api_call;
use super::handle;
use crate::context::Context;
use crate::engine::VarInner;
use crate::error::{Error, Result};
use crate::resource::{Resource, ResourceManager, ResourceRequest};
use parking_lot::RwLock;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, LazyLock};

/// Resources handed to C, by handle address. Entries are never removed: resources live as long
/// as the manager, which is the process.
static HANDLES: LazyLock<RwLock<HashMap<usize, Resource>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// The engine variable handle given out for each resource (by resource handle), so that repeated
/// MXResourceGetVar calls return the same handle while it is live.
static VAR_HANDLES: LazyLock<parking_lot::Mutex<HashMap<usize, usize>>> =
    LazyLock::new(|| parking_lot::Mutex::new(HashMap::new()));

fn resource_arg(res: *mut c_void) -> Result<Resource> {
    if res.is_null() {
        return Err(Error::invalid("res is NULL"));
    }
    HANDLES.read().get(&(res as usize)).cloned().ok_or_else(|| {
        Error::invalid(format!(
            "res ({res:p}) is not a resource handle (get one from MXResourceRequest)"
        ))
    })
}

/// Seeds every random number resource on every device (MXNet 1.9.1): kRandom and
/// kParallelRandom, of the devices used so far and of those used later. The reseeding runs
/// through the engine after the ops already pushed that use a generator, and before those pushed
/// afterwards, so the same seed followed by the same pushes gives the same numbers on every
/// engine type and worker count. Returns without waiting.
#[unsafe(no_mangle)]
pub extern "C" fn MXRandomSeed(seed: c_int) -> c_int {
    api_call("MXRandomSeed", || {
        ResourceManager::global()?.seed(seed as u32)
    })
}

/// Seeds the random number resources of one device (MXNet 1.9.1), as MXRandomSeed does for all.
/// Every host device type shares the CPU's generators. A gpu is accepted (0): mxrt has no GPU
/// resources, and the seed is kept for the device.
#[unsafe(no_mangle)]
pub extern "C" fn MXRandomSeedContext(seed: c_int, dev_type: c_int, dev_id: c_int) -> c_int {
    api_call("MXRandomSeedContext", || {
        let ctx = Context::from_codes(dev_type, dev_id)?;
        ResourceManager::global()?.seed_context(seed as u32, ctx)
    })
}

/// mxrt addition. Gets a resource for ops on device `(dev_type, dev_id)`: `kind` 0 is the
/// device's random generator (kRandom, always the same handle), 1 a temporary-workspace buffer
/// (kTempSpace) and 2 a set of parallel random streams (kParallelRandom); for 1 and 2 successive
/// requests cycle through the device's copies (MXNET_CPU_TEMP_COPY, default 4, and
/// MXNET_CPU_PARALLEL_RAND_COPY, default 1). All host device types share the CPU's resources;
/// a gpu is -1 (mxrt has no GPU random generators or temp space). `*out` belongs to mxrt and
/// stays valid until the process exits.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceRequest(
    dev_type: c_int,
    dev_id: c_int,
    kind: c_int,
    out: *mut *mut c_void,
) -> c_int {
    api_call("MXResourceRequest", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let ctx = Context::from_codes(dev_type, dev_id)?;
        let req = ResourceRequest::from_code(kind)?;
        let res = ResourceManager::global()?.request(ctx, req)?;
        let addr = res.addr();
        HANDLES.write().entry(addr).or_insert(res);
        *out = addr as *mut c_void;
        Ok(())
    })
}

/// mxrt addition. Writes the resource's engine variable handle to `*out_var`. Every op that uses
/// the resource must list it among its mutable variables (MXEnginePushSync/PushAsync). The handle
/// belongs to the resource: do not delete it (it is re-registered if you do).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceGetVar(res: *mut c_void, out_var: *mut *mut c_void) -> c_int {
    api_call("MXResourceGetVar", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_var, "out_var")? };
        let r = resource_arg(res)?;
        let mut given = VAR_HANDLES.lock();
        let slot = given.entry(res as usize).or_insert(0);
        let live = *slot != 0
            && handle::borrow::<VarInner>(*slot as *const c_void, "var")
                .is_ok_and(|v| Arc::ptr_eq(&v, r.var().inner()));
        if !live {
            // the handle table's reference keeps nothing alive the resource does not
            let inner: Arc<VarInner> = r.var().clone().into_inner();
            *slot = handle::into_handle(inner) as usize;
        }
        *out = *slot as *mut c_void;
        Ok(())
    })
}

/// mxrt addition. Describes a resource: its kind (0 kRandom, 1 kTempSpace, 2 kParallelRandom),
/// the device it serves (cpu for every host type) and which copy of its kind it is. NULL
/// out-parameters are skipped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceGetInfo(
    res: *mut c_void,
    kind: *mut c_int,
    dev_type: *mut c_int,
    dev_id: *mut c_int,
    copy_id: *mut c_int,
) -> c_int {
    api_call("MXResourceGetInfo", || {
        let r = resource_arg(res)?;
        let values = [
            (kind, r.req().code()),
            (dev_type, r.ctx().dev_type.code()),
            (dev_id, r.ctx().dev_id),
            (copy_id, c_int::try_from(r.id()).unwrap_or(c_int::MAX)),
        ];
        for (ptr, v) in values {
            // SAFETY: API contract: each non-NULL pointer is valid for writing an int.
            if let Some(slot) = unsafe { ptr.as_mut() } {
                *slot = v;
            }
        }
        Ok(())
    })
}

/// mxrt addition. Call from inside an op that holds the kTempSpace resource `res` (its variable
/// among the op's mutable variables): makes its buffer at least `bytes` long and writes the start
/// to `*out_ptr` (64-byte aligned; NULL when `bytes` is 0 and nothing was allocated yet). The
/// memory stays valid until the op finishes; contents are whatever the previous user left
/// (zeros where the buffer just grew). A larger request frees the old buffer, so earlier pointers
/// from this resource must not be used after it. Errors: the wrong kind of resource, or (on the
/// threaded engines) no op holding the resource's variable, or another op using it at the same
/// time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceGetTempSpace(
    res: *mut c_void,
    bytes: usize,
    out_ptr: *mut *mut c_void,
) -> c_int {
    api_call("MXResourceGetTempSpace", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_ptr, "out_ptr")? };
        *out = resource_arg(res)?.temp_space_ptr(bytes)? as *mut c_void;
        Ok(())
    })
}

/// mxrt addition. Call from inside an op that holds the kRandom or kParallelRandom resource
/// `res`: writes `n` floats uniformly distributed in `[low, high)` to `out` (all `low` when the
/// bounds are equal). The numbers depend only on the seed and the sequence of draws from this
/// resource (a kParallelRandom resource cuts `out` into one chunk per stream). Errors: bounds not
/// finite or `low > high`, the wrong kind of resource, or the misuse MXResourceGetTempSpace
/// describes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceRandomUniform(
    res: *mut c_void,
    out: *mut f32,
    n: usize,
    low: f32,
    high: f32,
) -> c_int {
    api_call("MXResourceRandomUniform", || {
        let r = resource_arg(res)?;
        // SAFETY: API contract: `out` holds `n` writable floats.
        let out = unsafe { args::slice_mut(out, n, "out")? };
        r.fill_uniform(out, low, high)
    })
}

/// mxrt addition. As MXResourceRandomUniform, with normally distributed values of mean `mean`
/// and standard deviation `std` (finite, >= 0).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceRandomNormal(
    res: *mut c_void,
    out: *mut f32,
    n: usize,
    mean: f32,
    std: f32,
) -> c_int {
    api_call("MXResourceRandomNormal", || {
        let r = resource_arg(res)?;
        // SAFETY: API contract: `out` holds `n` writable floats.
        let out = unsafe { args::slice_mut(out, n, "out")? };
        r.fill_normal(out, mean, std)
    })
}

/// mxrt addition. As MXResourceRandomUniform, with `n` raw uniformly distributed 32-bit words.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXResourceRandomBits(res: *mut c_void, out: *mut u32, n: usize) -> c_int {
    api_call("MXResourceRandomBits", || {
        let r = resource_arg(res)?;
        // SAFETY: API contract: `out` holds `n` writable words.
        let out = unsafe { args::slice_mut(out, n, "out")? };
        r.fill_bits(out)
    })
}
