//! CachedOp (MXNet 1.9.1): a symbol called like one operator, what Gluon's `hybridize()` and
//! `SymbolBlock` run. The graph runner is `crate::graph::exec::CachedOp`.

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::ndarray::new_handle;
use super::symbol::sym;
use super::types::{NDArrayHandle, SymbolHandle};
use crate::error::Result;
use crate::graph::exec::{CachedOp, CachedOpFlags, Monitor};
use crate::ndarray::NDArray;
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// A CachedOp.
pub type CachedOpHandle = *mut c_void;

/// Called per op output of a CachedOp run: `(node name, op name, new array handle)`.
pub type CachedOpMonitorCallback =
    Option<unsafe extern "C" fn(*const c_char, *const c_char, NDArrayHandle)>;

/// What a CachedOpHandle points to.
pub(crate) struct CCachedOp(CachedOp);

impl Handle for CCachedOp {
    const KIND: HandleKind = HandleKind::CachedOp;
}

thread_local! {
    /// The last invoke's allocated outputs and their storage types (valid until the thread's
    /// next invoke, as in MXNet).
    // boxed: the library's thread-locals live in the static TLS block, which is small
    static RETURNED: RefCell<Option<Box<Returned>>> = const { RefCell::new(None) };
}

type Returned = (Vec<NDArrayHandle>, Vec<c_int>);

/// Runs `f` on this thread's returned values.
fn with_returned<R>(f: impl FnOnce(&mut Returned) -> R) -> R {
    RETURNED.with(|r| f(r.borrow_mut().get_or_insert_with(Box::default)))
}

/// Reads `n` flag pairs.
///
/// # Safety
/// `keys` and `vals` are NULL or point to `n` pointers, each NULL or a C string.
unsafe fn flags(
    n: c_int,
    keys: *const *const c_char,
    vals: *const *const c_char,
) -> Result<CachedOpFlags> {
    let n = args::count(i64::from(n), "num_flags")?;
    // SAFETY: per the contract.
    let (ks, vs) = unsafe { (args::slice(keys, n, "keys")?, args::slice(vals, n, "vals")?) };
    let mut pairs = Vec::with_capacity(n);
    for (i, (&k, &v)) in ks.iter().zip(vs).enumerate() {
        // SAFETY: per the contract: C strings.
        let (k, v) = unsafe { (args::c_str_at(k, "keys", i)?, args::c_str_at(v, "vals", i)?) };
        pairs.push((k, v));
    }
    CachedOpFlags::parse(&pairs)
}

/// # Safety
/// As for [`flags`]; `out` is valid for a write.
unsafe fn create(
    symbol: SymbolHandle,
    num_flags: c_int,
    keys: *const *const c_char,
    vals: *const *const c_char,
    out: *mut CachedOpHandle,
) -> Result<()> {
    let s = sym(symbol, "handle")?;
    // SAFETY: forwarded contract.
    let f = unsafe { flags(num_flags, keys, vals)? };
    // SAFETY: forwarded contract.
    let out = unsafe { args::out(out, "out")? };
    let op = CachedOp::new(&s, f)?;
    *out = handle::into_handle(Arc::new(CCachedOp(op)));
    Ok(())
}

/// Creates a CachedOp of `handle`'s symbol with default flags.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCreateCachedOp(handle: SymbolHandle, out: *mut CachedOpHandle) -> c_int {
    api_call("MXCreateCachedOp", || {
        // SAFETY: no flags; `out` per the API contract.
        unsafe { create(handle, 0, std::ptr::null(), std::ptr::null(), out) }
    })
}

/// Creates a CachedOp with flags as strings (`static_alloc`, `static_shape`, `inline_limit`,
/// `forward_bulk_size`, `backward_bulk_size`, `data_indices`, `param_indices`); an unknown key
/// is -1 naming it. The graph's inputs are its variables in `list_inputs()` order.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCreateCachedOpEx(
    handle: SymbolHandle,
    num_flags: c_int,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
    out: *mut CachedOpHandle,
) -> c_int {
    api_call("MXCreateCachedOpEx", || {
        // SAFETY: forwarded API contract.
        unsafe { create(handle, num_flags, keys.cast_const(), vals.cast_const(), out) }
    })
}

/// [`MXCreateCachedOpEx`]; `thread_safe` is accepted (invokes of one CachedOp from several
/// threads are safe in mxrt either way).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCreateCachedOpEX(
    handle: SymbolHandle,
    num_flags: c_int,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
    out: *mut CachedOpHandle,
    thread_safe: bool,
) -> c_int {
    let _ = thread_safe;
    api_call("MXCreateCachedOpEX", || {
        // SAFETY: forwarded API contract.
        unsafe { create(handle, num_flags, keys.cast_const(), vals.cast_const(), out) }
    })
}

/// Frees a CachedOp handle (graphs recorded through it keep what they need); NULL is a no-op,
/// as in MXNet (the Python package frees the handle of a CachedOp whose creation failed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXFreeCachedOp(handle: CachedOpHandle) -> c_int {
    api_call("MXFreeCachedOp", || {
        if handle.is_null() {
            return Ok(());
        }
        handle::take::<CCachedOp>(handle, "handle").map(drop)
    })
}

/// # Safety
/// MXInvokeCachedOpEx's contract.
unsafe fn invoke(
    handle: CachedOpHandle,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
) -> Result<()> {
    let op = handle::borrow::<CCachedOp>(handle, "handle")?;
    let n_in = args::count(i64::from(num_inputs), "num_inputs")?;
    // SAFETY: API contract for the arrays and out-parameters.
    let (hs, num_outputs, outputs) = unsafe {
        (
            args::slice(inputs.cast_const(), n_in, "inputs")?,
            args::out(num_outputs, "num_outputs")?,
            args::out(outputs, "outputs")?,
        )
    };
    let arrays = hs
        .iter()
        .enumerate()
        .map(|(i, &h)| handle::borrow_at::<NDArray>(h, "inputs", i).map(|a| NDArray::clone(&a)))
        .collect::<Result<Vec<_>>>()?;
    let given = if outputs.is_null() {
        None
    } else {
        let n_out = args::count(i64::from(*num_outputs), "*num_outputs")?;
        // SAFETY: API contract: a non-NULL `*outputs` holds `*num_outputs` handles.
        let hs = unsafe { args::slice((*outputs).cast_const(), n_out, "*outputs")? };
        Some(
            hs.iter()
                .enumerate()
                .map(|(i, &h)| {
                    handle::borrow_at::<NDArray>(h, "outputs", i).map(|a| NDArray::clone(&a))
                })
                .collect::<Result<Vec<_>>>()?,
        )
    };
    let results = op.0.invoke(&arrays, given.as_deref())?;
    with_returned(|r| {
        r.1.clear();
        r.1.extend(results.iter().map(|a| a.stype().code()));
        if given.is_none() {
            r.0.clear();
            r.0.extend(results.into_iter().map(new_handle));
            *outputs = r.0.as_mut_ptr();
            *num_outputs = r.0.len() as c_int;
        }
    });
    Ok(())
}

/// Runs the CachedOp on `inputs` (its input count, in `list_inputs()` order). With `*outputs`
/// NULL the library allocates the outputs and sets `*outputs` (valid until this thread's next
/// invoke) and `*num_outputs`; otherwise `*num_outputs` must be the output count and results
/// are written into the given arrays. While the thread records, the graph's ops are recorded.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXInvokeCachedOp(
    handle: CachedOpHandle,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
) -> c_int {
    api_call("MXInvokeCachedOp", || {
        // SAFETY: forwarded API contract.
        unsafe { invoke(handle, num_inputs, inputs, num_outputs, outputs) }
    })
}

/// [`MXInvokeCachedOp`]; `*out_stypes` receives the outputs' storage types.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXInvokeCachedOpEx(
    handle: CachedOpHandle,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    out_stypes: *mut *const c_int,
) -> c_int {
    api_call("MXInvokeCachedOpEx", || {
        // SAFETY: API contract: out-parameter.
        let out_stypes = unsafe { args::out(out_stypes, "out_stypes")? };
        // SAFETY: forwarded API contract.
        unsafe { invoke(handle, num_inputs, inputs, num_outputs, outputs)? };
        *out_stypes = with_returned(|r| r.1.as_ptr());
        Ok(())
    })
}

/// A C callback made callable from any thread.
struct HookFn(unsafe extern "C" fn(*const c_char, *const c_char, NDArrayHandle));
// SAFETY: the callback is a plain C function pointer; MXNet's contract lets the library call it
// from the thread that runs the CachedOp, which is where the runner calls it.
unsafe impl Send for HookFn {}
// SAFETY: as above; the pointer itself is never mutated.
unsafe impl Sync for HookFn {}

/// Installs (or with a NULL callback removes) a monitor called with `(node name, op name, new
/// array handle)` for every op output of later invokes, and for inputs with `monitor_all`. The
/// handle argument is the CachedOpHandle (MXNet declares it as an NDArrayHandle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCachedOpRegisterOpHook(
    handle: NDArrayHandle,
    callback: CachedOpMonitorCallback,
    monitor_all: bool,
) -> c_int {
    api_call("MXCachedOpRegisterOpHook", || {
        let op = handle::borrow::<CCachedOp>(handle, "handle")?;
        let m: Option<Monitor> = callback.map(|f| {
            let f = HookFn(f);
            Arc::new(move |name: &str, opname: &str, a: &NDArray| {
                let (Ok(n), Ok(o)) = (CString::new(name), CString::new(opname)) else {
                    return;
                };
                // SAFETY: the C caller's callback with valid strings and a new handle it owns.
                unsafe { (f.0)(n.as_ptr(), o.as_ptr(), new_handle(a.clone())) }
            }) as Monitor
        });
        op.0.set_hook(m, monitor_all);
        Ok(())
    })
}
