//! NDArray functions of MXNet 1.9.1's C API: creation, copies, waits, views and queries. Saving
//! and loading are in `ndarray_io.rs`, shared memory in `ndarray_shared.rs`, the ND engine
//! pushes with the other pushes in `engine_push.rs`.
//!
//! An `NDArrayHandle` names an `Arc<NDArray>` in the handle table: views and shallow copies are
//! new handles to new `NDArray` values sharing the same chunk.

use super::handle::{self, Handle, HandleKind};
use super::types::NDArrayHandle;
use crate::error::Result;
use crate::ndarray::NDArray;
use std::sync::Arc;

impl Handle for NDArray {
    const KIND: HandleKind = HandleKind::NDArray;
}

/// Looks up an NDArray handle.
pub(crate) fn nd(h: NDArrayHandle, arg: &str) -> Result<Arc<NDArray>> {
    handle::borrow::<NDArray>(h, arg)
}

/// Hands a new NDArray to C.
pub(crate) fn new_handle(a: NDArray) -> NDArrayHandle {
    handle::into_handle(Arc::new(a))
}

use super::args::{self, count};
use super::error::api_call;
use super::types::*;
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::Engine;
use crate::error::Error;
use crate::ndarray::{self as nda, np_shape};
use smallvec::SmallVec;
use std::cell::RefCell;
use std::ffi::{c_int, c_void};


thread_local! {
    static SHAPE_U32: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    static SHAPE_I32: RefCell<Vec<i32>> = const { RefCell::new(Vec::new()) };
    static SHAPE_I64: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
}

fn create(
    shape: &[i64],
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
) -> Result<NDArray> {
    let dtype = DType::from_code(dtype)?;
    let ctx = Context::from_codes(dev_type, dev_id)?;
    NDArray::new(shape, ctx, dtype, delay_alloc != 0)
}

/// Writes a new handle to the array `make` derives from the array behind `handle` (a view or a
/// shallow copy) into `*out`.
///
/// # Safety
/// A non-NULL `out` must be valid for a write of a handle (`handle` itself is checked).
unsafe fn derive(
    out: *mut NDArrayHandle,
    handle: NDArrayHandle,
    arg: &str,
    make: impl FnOnce(&NDArray) -> Result<NDArray>,
) -> Result<()> {
    // SAFETY: API contract: out-parameter.
    let out = unsafe { args::out(out, "out")? };
    *out = new_handle(make(&*nd(handle, arg)?)?);
    Ok(())
}

/// Creates a "none" array: no shape, no data (shape queries report ndim 0, dtype -1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateNone(out: *mut NDArrayHandle) -> c_int {
    api_call("MXNDArrayCreateNone", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(out, "out")? } = new_handle(NDArray::none());
        Ok(())
    })
}

/// Creates a dense float32 array of `shape[0..ndim)` on (`dev_type`, `dev_id`); with
/// `delay_alloc` != 0 the memory is allocated on first use.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreate(
    shape: *const u32,
    ndim: u32,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayCreate", || {
        // SAFETY: API contract: out-parameter and `ndim` dims.
        let out = unsafe { args::out(out, "out")? };
        // SAFETY: as above.
        let dims: Shape64 = unsafe { args::slice(shape, ndim as usize, "shape")? }
            .iter()
            .map(|&d| d as i64)
            .collect();
        *out = new_handle(create(&dims, dev_type, dev_id, delay_alloc, 0)?);
        Ok(())
    })
}

type Shape64 = SmallVec<[i64; 6]>;

/// Creates a dense array of type `dtype` (MXNet's type codes 0-7 and 12; mxrt also accepts 8-11:
/// int16, uint16, uint32, uint64).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateEx(
    shape: *const u32,
    ndim: u32,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayCreateEx", || {
        // SAFETY: API contract: out-parameter and `ndim` dims.
        let out = unsafe { args::out(out, "out")? };
        // SAFETY: as above.
        let dims: Shape64 = unsafe { args::slice(shape, ndim as usize, "shape")? }
            .iter()
            .map(|&d| d as i64)
            .collect();
        *out = new_handle(create(&dims, dev_type, dev_id, delay_alloc, dtype)?);
        Ok(())
    })
}

/// MXNDArrayCreateEx with 64-bit dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateEx64(
    shape: *const i64,
    ndim: c_int,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayCreateEx64", || {
        // SAFETY: API contract: out-parameter and `ndim` dims.
        let out = unsafe { args::out(out, "out")? };
        let n = count(ndim.into(), "ndim")?;
        // SAFETY: as above.
        let dims = unsafe { args::slice(shape, n, "shape")? };
        *out = new_handle(create(dims, dev_type, dev_id, delay_alloc, dtype)?);
        Ok(())
    })
}

/// Frees a handle. The memory is released once no handle, view or pending op uses it. Freeing a
/// handle twice is an error (-1), not a crash.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayFree(handle: NDArrayHandle) -> c_int {
    api_call("MXNDArrayFree", || {
        handle::take::<NDArray>(handle, "handle")?;
        Ok(())
    })
}

/// A new handle sharing the array's memory, variable, shape and offset.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXShallowCopyNDArray(
    src: NDArrayHandle,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXShallowCopyNDArray", || {
        // SAFETY: forwarded API contract.
        unsafe { derive(out, src, "src", |a| Ok(a.clone())) }
    })
}

/// Copies `size` elements from `data` into the array (they must be exactly its size), after the
/// ops pushed on it before. Runs on the calling thread; when no op is queued on the array it
/// pushes no op at all.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySyncCopyFromCPU(
    handle: NDArrayHandle,
    data: *const c_void,
    size: usize,
) -> c_int {
    api_call("MXNDArraySyncCopyFromCPU", || {
        let a = nd(handle, "handle")?;
        if size != a.size() {
            return Err(Error::invalid(format!(
                "Memory size do not match: size {size} elements, the array has {}",
                a.size()
            )));
        }
        // SAFETY: API contract: `data` holds `size` elements of the array's type.
        let src = unsafe { args::slice(data as *const u8, a.nbytes(), "data")? };
        a.sync_copy_from_bytes(src)
    })
}

/// Copies the array (exactly `size` elements) into `data` after the writes pushed before;
/// -1 with the op's message if the array carries an unreported error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySyncCopyToCPU(
    handle: NDArrayHandle,
    data: *mut c_void,
    size: usize,
) -> c_int {
    api_call("MXNDArraySyncCopyToCPU", || {
        let a = nd(handle, "handle")?;
        if size != a.size() {
            return Err(Error::invalid(format!(
                "Memory size do not match: size {size} elements, the array has {}",
                a.size()
            )));
        }
        let n = a.nbytes();
        if n > 0 && data.is_null() {
            return Err(Error::invalid("data is NULL"));
        }
        let dst: &mut [u8] = if n == 0 {
            &mut []
        } else {
            // SAFETY: API contract: `data` has room for `size` elements of the array's type.
            unsafe { std::slice::from_raw_parts_mut(data as *mut u8, n) }
        };
        a.sync_copy_to_bytes(dst)
    })
}

/// Waits until the writes pushed to the array before have finished; -1 with the op's message if
/// one of them failed (reported once).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayWaitToRead(handle: NDArrayHandle) -> c_int {
    api_call("MXNDArrayWaitToRead", || {
        nd(handle, "handle")?.wait_to_read()
    })
}

/// Waits until every read and write pushed to the array before has finished.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayWaitToWrite(handle: NDArrayHandle) -> c_int {
    api_call("MXNDArrayWaitToWrite", || {
        nd(handle, "handle")?.wait_to_write()
    })
}

/// Waits for every pushed op; -1 with the first unreported error of a failed op. The calling
/// thread may run queued CPU ops meanwhile (see MXEngineWaitForAll).
#[unsafe(no_mangle)]
pub extern "C" fn MXNDArrayWaitAll() -> c_int {
    api_call("MXNDArrayWaitAll", || Engine::global()?.wait_for_all())
}

/// The address of the array's data (offset applied), without waiting; NULL for a none or empty
/// array. Delayed storage is allocated here.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetData(
    handle: NDArrayHandle,
    out_pdata: *mut *mut c_void,
) -> c_int {
    api_call("MXNDArrayGetData", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_pdata, "out_pdata")? };
        let a = nd(handle, "handle")?;
        *out = if a.is_none() {
            std::ptr::null_mut()
        } else {
            a.data_ptr()? as *mut c_void
        };
        Ok(())
    })
}

/// Slices rows [slice_begin, slice_end) of axis 0 into a new handle sharing memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySlice(
    handle: NDArrayHandle,
    slice_begin: u32,
    slice_end: u32,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArraySlice", || {
        // SAFETY: forwarded API contract.
        unsafe {
            derive(out, handle, "handle", |a| {
                sliced(a, slice_begin.into(), slice_end.into())
            })
        }
    })
}

/// Rows `[begin, end)` as a view, recorded as MXNet's `slice` while recording.
fn sliced(a: &NDArray, begin: i64, end: i64) -> Result<NDArray> {
    let v = a.slice(begin, end)?;
    crate::autograd::record_view(
        "slice",
        &[("begin", format!("({begin},)")), ("end", format!("({end},)"))],
        a,
        &v,
    )?;
    Ok(v)
}

/// A reshaped view, recorded as MXNet's `Reshape` while recording.
fn reshaped(a: &NDArray, shape: &[i64]) -> Result<NDArray> {
    let v = a.reshape(shape)?;
    let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
    crate::autograd::record_view("Reshape", &[("shape", format!("({})", dims.join(",")))], a, &v)?;
    Ok(v)
}

/// Row `idx` as a view: a slice and a reshape, each recorded while recording (as MXNet does).
fn row(a: &NDArray, idx: i64) -> Result<NDArray> {
    let rows = a.shape().first().copied().unwrap_or(0);
    if idx < 0 || idx >= rows {
        return Err(Error::invalid(format!(
            "index {idx} out of range for axis 0 of size {rows}"
        )));
    }
    let s = sliced(a, idx, idx + 1)?;
    let v = a.at(idx)?;
    if v.shape() == s.shape() {
        return Ok(s);
    }
    reshaped(&s, v.shape())
}

/// MXNDArraySlice with 64-bit bounds.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySlice64(
    handle: NDArrayHandle,
    slice_begin: i64,
    slice_end: i64,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArraySlice64", || {
        // SAFETY: forwarded API contract.
        unsafe { derive(out, handle, "handle", |a| sliced(a, slice_begin, slice_end)) }
    })
}

/// Row `idx` of axis 0 as a new handle sharing memory (axis 0 dropped if ndim > 1 or in
/// numpy-shape mode).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayAt(
    handle: NDArrayHandle,
    idx: u32,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayAt", || {
        // SAFETY: forwarded API contract.
        unsafe { derive(out, handle, "handle", |a| row(a, idx.into())) }
    })
}

/// MXNDArrayAt with a 64-bit index.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayAt64(
    handle: NDArrayHandle,
    idx: i64,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayAt64", || {
        // SAFETY: forwarded API contract.
        unsafe { derive(out, handle, "handle", |a| row(a, idx)) }
    })
}

/// A view with shape `dims[0..ndim)` sharing memory: one -1 is inferred, 0 copies the source
/// dimension; the new size may not exceed the old.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayReshape(
    handle: NDArrayHandle,
    ndim: c_int,
    dims: *mut c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayReshape", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let n = count(ndim.into(), "ndim")?;
        // SAFETY: API contract: `ndim` dims.
        let dims: Shape64 = unsafe { args::slice(dims as *const c_int, n, "dims")? }
            .iter()
            .map(|&d| d.into())
            .collect();
        let a = nd(handle, "handle")?;
        let shape = nda::shape::reshape_simple(a.shape(), &dims)?;
        *out = new_handle(reshaped(&a, &shape)?);
        Ok(())
    })
}

/// A view with the reshape operator's codes (0 copy, -1 infer, -2 copy the rest, -3 merge two,
/// -4 split one), matched right to left when `reverse`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayReshape64(
    handle: NDArrayHandle,
    ndim: c_int,
    dims: *mut dim_t,
    reverse: bool,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayReshape64", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let n = count(ndim.into(), "ndim")?;
        // SAFETY: API contract: `ndim` dims.
        let dims = unsafe { args::slice(dims as *const dim_t, n, "dims")? };
        let a = nd(handle, "handle")?;
        let shape = nda::shape::reshape_codes(a.shape(), dims, reverse)?;
        *out = new_handle(reshaped(&a, &shape)?);
        Ok(())
    })
}

/// The body of the GetShape functions: writes the shape of `handle`, each dimension converted by
/// `dim`, into the calling thread's `buffer` (valid until the next call on this thread) and
/// reports its length, or -1 for a none array in numpy-shape mode when `np_rules` (MXNet's Ex
/// functions) is set.
///
/// # Safety
/// Non-NULL `out_dim` and `out_pdata` must be valid for a write of their types.
unsafe fn report_shape<D: Copy + 'static, N: TryFrom<i64>>(
    handle: NDArrayHandle,
    out_dim: *mut N,
    out_pdata: *mut *const D,
    buffer: &'static std::thread::LocalKey<RefCell<Vec<D>>>,
    dim: impl Fn(i64) -> Result<D>,
    np_rules: bool,
) -> Result<()> {
    // SAFETY: API contract: out-parameters.
    let (od, op) = unsafe {
        (
            args::out(out_dim, "out_dim")?,
            args::out(out_pdata, "out_pdata")?,
        )
    };
    let a = nd(handle, "handle")?;
    let dims = a
        .shape()
        .iter()
        .map(|&d| dim(d))
        .collect::<Result<Vec<D>>>()?;
    let ndim = if np_rules && a.is_none() && np_shape::current().is_on() {
        -1
    } else {
        dims.len() as i64
    };
    let ndim = N::try_from(ndim)
        .map_err(|_| Error::invalid(format!("ndim {ndim} does not fit the out_dim type")))?;
    buffer.with(|b| {
        let mut b = b.borrow_mut();
        *b = dims;
        *op = b.as_ptr();
    });
    *od = ndim;
    Ok(())
}

/// Reports the shape as unsigned 32-bit dims in a thread-local buffer (valid until the next call
/// on this thread); a none array has ndim 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetShape(
    handle: NDArrayHandle,
    out_dim: *mut u32,
    out_pdata: *mut *const u32,
) -> c_int {
    api_call("MXNDArrayGetShape", || {
        // SAFETY: forwarded API contract.
        unsafe {
            report_shape(
                handle,
                out_dim,
                out_pdata,
                &SHAPE_U32,
                |d| Ok(d as u32),
                false,
            )
        }
    })
}

/// Reports the shape as int dims (thread-local buffer). In numpy-shape mode a none array has
/// ndim -1. Dimensions above INT_MAX are an error (use MXNDArrayGetShapeEx64).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetShapeEx(
    handle: NDArrayHandle,
    out_dim: *mut c_int,
    out_pdata: *mut *const c_int,
) -> c_int {
    api_call("MXNDArrayGetShapeEx", || {
        let dim = |d: i64| {
            i32::try_from(d).map_err(|_| {
                Error::invalid(format!(
                    "dimension {d} does not fit in int: use MXNDArrayGetShapeEx64"
                ))
            })
        };
        // SAFETY: forwarded API contract.
        unsafe { report_shape(handle, out_dim, out_pdata, &SHAPE_I32, dim, true) }
    })
}

/// Reports the shape as 64-bit dims (thread-local buffer); numpy-shape rules as GetShapeEx.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetShapeEx64(
    handle: NDArrayHandle,
    out_dim: *mut c_int,
    out_pdata: *mut *const i64,
) -> c_int {
    api_call("MXNDArrayGetShapeEx64", || {
        // SAFETY: forwarded API contract.
        unsafe { report_shape(handle, out_dim, out_pdata, &SHAPE_I64, Ok, true) }
    })
}

/// The type code (see MXNDArrayCreateEx); -1 for a none array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetDType(handle: NDArrayHandle, out_dtype: *mut c_int) -> c_int {
    api_call("MXNDArrayGetDType", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_dtype, "out_dtype")? };
        let a = nd(handle, "handle")?;
        *out = if a.is_none() { -1 } else { a.dtype().code() };
        Ok(())
    })
}

/// The device; (0, 0) for a none array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetContext(
    handle: NDArrayHandle,
    out_dev_type: *mut c_int,
    out_dev_id: *mut c_int,
) -> c_int {
    api_call("MXNDArrayGetContext", || {
        // SAFETY: API contract: out-parameters.
        let (t, i) = unsafe {
            (
                args::out(out_dev_type, "out_dev_type")?,
                args::out(out_dev_id, "out_dev_id")?,
            )
        };
        match nd(handle, "handle")?.ctx() {
            Some(c) => (*t, *i) = (c.dev_type.code(), c.dev_id),
            None => (*t, *i) = (0, 0),
        }
        Ok(())
    })
}

