//! Saving and loading NDArrays: `MXNDArraySave`, `MXNDArrayLoad`, `MXNDArrayLoadFromBuffer` (lists
//! of arrays in MXNet's file format) and `MXNDArraySaveRawBytes`/`MXNDArrayLoadFromRawBytes` (one
//! array's record). The format itself is `crate::ndarray::format`.

use super::args;
use super::error::api_call;
use super::handle;
use super::ndarray::{nd, new_handle};
use super::types::*;
use crate::error::{Error, Result};
use crate::ndarray::format;
use crate::ndarray::{self as nda, NDArray, np_shape};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

thread_local! {
    static LOAD_HANDLES: RefCell<Vec<NDArrayHandle>> = const { RefCell::new(Vec::new()) };
    static LOAD_NAMES: RefCell<(Vec<CString>, Vec<*const c_char>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    static RAW_BYTES: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Looks up `n` NDArray handles.
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads of `n` handles (each handle is checked).
unsafe fn handles_arg(ptr: *mut NDArrayHandle, n: usize, name: &str) -> Result<Vec<Arc<NDArray>>> {
    // SAFETY: API contract: `n` handles.
    let hs = unsafe { args::slice(ptr as *const NDArrayHandle, n, name)? };
    hs.iter()
        .enumerate()
        .map(|(i, &h)| handle::borrow_at::<NDArray>(h, name, i))
        .collect()
}

/// Saves `num_args` arrays to `fname` in MXNet's format (byte-compatible with MXNet 1.9.1), with
/// names `keys[i]` or no names when `keys` is NULL. Waits for pending writes to the arrays.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySave(
    fname: *const c_char,
    num_args: u32,
    args: *mut NDArrayHandle,
    keys: *mut *const c_char,
) -> c_int {
    api_call("MXNDArraySave", || {
        // SAFETY: API contract: NUL-terminated path.
        let path = unsafe { args::c_str(fname, "fname")? };
        // SAFETY: API contract: `num_args` handles.
        let arrays = unsafe { handles_arg(args, num_args as usize, "args")? };
        let names: Vec<&str> = if keys.is_null() {
            Vec::new()
        } else {
            // SAFETY: API contract: `num_args` names.
            let ks =
                unsafe { args::slice(keys as *const *const c_char, num_args as usize, "keys")? };
            ks.iter()
                .enumerate()
                // SAFETY: API contract: each key is a NUL-terminated string.
                .map(|(i, &k)| unsafe { args::c_str_at(k, "keys", i) })
                .collect::<Result<_>>()?
        };
        let refs: Vec<&NDArray> = arrays.iter().map(|a| &**a).collect();
        let mut buf = Vec::new();
        nda::save_list(&mut buf, &refs, &names, np_shape::current())?;
        std::fs::write(path, &buf).map_err(|e| Error::io(format!("cannot write {path:?}: {e}")))
    })
}

/// Hands loaded arrays and their names to C through the thread-local buffers.
///
/// # Safety
/// Each non-NULL out-parameter must be valid for a write of its type.
unsafe fn publish_loaded(
    arrays: Vec<NDArray>,
    names: Vec<String>,
    out_size: *mut u32,
    out_arr: *mut *mut NDArrayHandle,
    out_name_size: *mut u32,
    out_names: *mut *mut *const c_char,
) -> Result<()> {
    // SAFETY: API contract: out-parameters.
    let (os, oa, ons, on) = unsafe {
        (
            args::out(out_size, "out_size")?,
            args::out(out_arr, "out_arr")?,
            args::out(out_name_size, "out_name_size")?,
            args::out(out_names, "out_names")?,
        )
    };
    let cnames = names
        .iter()
        .map(|n| {
            CString::new(n.as_bytes())
                .map_err(|_| Error::format(format!("array name {n:?} contains a NUL byte")))
        })
        .collect::<Result<Vec<_>>>()?;
    LOAD_HANDLES.with(|h| {
        let mut h = h.borrow_mut();
        *h = arrays.into_iter().map(new_handle).collect();
        *os = h.len() as u32;
        *oa = h.as_mut_ptr();
    });
    LOAD_NAMES.with(|n| {
        let mut n = n.borrow_mut();
        n.1 = cnames.iter().map(|c| c.as_ptr()).collect();
        n.0 = cnames;
        *ons = n.1.len() as u32;
        *on = n.1.as_mut_ptr();
    });
    Ok(())
}

/// Loads an MXNet array file: `*out_arr` holds `*out_size` new handles (the caller frees each),
/// `*out_names` holds `*out_name_size` names (0, or one per array). Both arrays are thread-local
/// buffers valid until the next load on this thread. Corrupt or truncated files are -1 with a
/// message; nothing is allocated beyond the file's size.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayLoad(
    fname: *const c_char,
    out_size: *mut u32,
    out_arr: *mut *mut NDArrayHandle,
    out_name_size: *mut u32,
    out_names: *mut *mut *const c_char,
) -> c_int {
    api_call("MXNDArrayLoad", || {
        // SAFETY: API contract: NUL-terminated path.
        let path = unsafe { args::c_str(fname, "fname")? };
        let bytes =
            std::fs::read(path).map_err(|e| Error::io(format!("cannot read {path:?}: {e}")))?;
        let (arrays, names) = nda::load_list(&bytes, np_shape::current())?;
        // SAFETY: forwarded out-parameters.
        unsafe { publish_loaded(arrays, names, out_size, out_arr, out_name_size, out_names) }
    })
}

/// MXNDArrayLoad from `size` bytes in memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayLoadFromBuffer(
    ndarray_buffer: *const c_void,
    size: usize,
    out_size: *mut u32,
    out_arr: *mut *mut NDArrayHandle,
    out_name_size: *mut u32,
    out_names: *mut *mut *const c_char,
) -> c_int {
    api_call("MXNDArrayLoadFromBuffer", || {
        // SAFETY: API contract: `size` readable bytes.
        let bytes = unsafe { args::slice(ndarray_buffer as *const u8, size, "ndarray_buffer")? };
        let (arrays, names) = nda::load_list(bytes, np_shape::current())?;
        // SAFETY: forwarded out-parameters.
        unsafe { publish_loaded(arrays, names, out_size, out_arr, out_name_size, out_names) }
    })
}

/// Serialises one array as a single record (MXNet's pickle format) into a thread-local buffer
/// valid until the next call on this thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySaveRawBytes(
    handle: NDArrayHandle,
    out_size: *mut usize,
    out_buf: *mut *const c_char,
) -> c_int {
    api_call("MXNDArraySaveRawBytes", || {
        // SAFETY: API contract: out-parameters.
        let (os, ob) = unsafe {
            (
                args::out(out_size, "out_size")?,
                args::out(out_buf, "out_buf")?,
            )
        };
        let a = nd(handle, "handle")?;
        let bytes = nda::save_record(&a, np_shape::current())?;
        RAW_BYTES.with(|b| {
            let mut b = b.borrow_mut();
            *b = bytes;
            *os = b.len();
            *ob = b.as_ptr() as *const c_char;
        });
        Ok(())
    })
}

/// Rebuilds an array from MXNDArraySaveRawBytes output.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayLoadFromRawBytes(
    buf: *const c_void,
    size: usize,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayLoadFromRawBytes", || {
        // SAFETY: API contract: out-parameter and `size` readable bytes.
        let out = unsafe { args::out(out, "out")? };
        // SAFETY: as above.
        let bytes = unsafe { args::slice(buf as *const u8, size, "buf")? };
        let rec = format::read_record(bytes, np_shape::current())?;
        *out = new_handle(NDArray::from_record(&rec)?);
        Ok(())
    })
}
