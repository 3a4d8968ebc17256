//! Data-iterator functions of MXNet 1.9.1's C API: the list of iterators with their argument
//! documentation, and creating and driving `MNISTIter`, `CSVIter` and `LibSVMIter`
//! (`crate::io`). The image iterators are listed but creating one is -1 naming it.
//!
//! Creator handles point into the registry's table and live for the process (`operator.rs`);
//! an iterator is a handle of its own kind. `MXDataIterGetData`/`GetLabel` return new NDArray
//! handles over the current batch's arrays (the caller frees them); each batch has arrays of its
//! own, so arrays kept from earlier batches keep their values (MXNet reuses its buffers after
//! `prefetch_buffer` batches). The index from `MXDataIterGetIndex` lives in the iterator until
//! its next `Next`, `BeforeFirst` or free. Asking for the batch before the first `Next`, or after
//! one that returned 0, is -1 (MXNet reads a stale or NULL batch).
//!
//! # Safety
//! Every export has MXNet's C contract: pointer arguments are NULL or valid for the counts given,
//! strings are NUL-terminated, handles come from mxrt. NULL and stale handles are reported (-1).
#![allow(clippy::missing_safety_doc)]

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::operator::{CEntry, entry_index, report, table};
use super::types::NDArrayHandle;
use crate::error::{Error, Result};
use crate::io::DataIter;
use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

/// A data iterator's creator (from `MXListDataIters`).
pub type DataIterCreator = *mut c_void;
/// A data iterator (`MXDataIterCreateIter`).
pub type DataIterHandle = *mut c_void;

pub(crate) struct CDataIter(Mutex<DataIter>);

impl Handle for CDataIter {
    const KIND: HandleKind = HandleKind::DataIter;
}

fn iter(h: DataIterHandle) -> Result<Arc<CDataIter>> {
    handle::borrow::<CDataIter>(h, "handle")
}

/// Lists the data iterators MXNet 1.9.1 has (CSVIter, MNISTIter, ImageRecordIter, ...); the
/// handles stay valid for the life of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXListDataIters(
    out_size: *mut u32,
    out_array: *mut *mut DataIterCreator,
) -> c_int {
    api_call("MXListDataIters", || {
        // SAFETY: API contract: out-parameters.
        unsafe { args::static_list(out_size, out_array, &table().iter_ptrs) }
    })
}

fn creator_arg(creator: DataIterCreator, name: &str) -> Result<&'static CEntry> {
    if creator.is_null() {
        return Err(Error::invalid(format!("{name} is NULL")));
    }
    let t = table();
    entry_index(&t.iters, creator)
        .map(|i| &t.iters[i])
        .ok_or_else(|| {
            Error::invalid(format!(
                "{name} ({creator:p}) is not a data iterator handle (get one from MXListDataIters)"
            ))
        })
}

/// Describes a data iterator: name, description and arguments, as MXNet reports them. NULL
/// out-parameters are skipped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterGetIterInfo(
    creator: DataIterCreator,
    name: *mut *const c_char,
    description: *mut *const c_char,
    num_args: *mut u32,
    arg_names: *mut *mut *const c_char,
    arg_type_infos: *mut *mut *const c_char,
    arg_descriptions: *mut *mut *const c_char,
) -> c_int {
    api_call("MXDataIterGetIterInfo", || {
        let entry = creator_arg(creator, "creator")?;
        // SAFETY: API contract: each out-parameter is NULL or writable.
        unsafe {
            report(
                entry,
                name,
                description,
                num_args,
                arg_names,
                arg_type_infos,
                arg_descriptions,
                std::ptr::null_mut(),
            )
        };
        Ok(())
    })
}

/// Creates a data iterator from `num_param` keyword arguments (strings, as MXNet's dmlc
/// parameters read them; names the iterator does not declare are ignored, as in MXNet). Files
/// are opened and parameters checked now; its thread starts preparing batches at once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterCreateIter(
    handle: DataIterCreator,
    num_param: u32,
    keys: *mut *const c_char,
    vals: *mut *const c_char,
    out: *mut DataIterHandle,
) -> c_int {
    api_call("MXDataIterCreateIter", || {
        let entry = creator_arg(handle, "handle")?;
        let n = num_param as usize;
        // SAFETY: API contract: `keys` and `vals` hold `num_param` C strings; out-parameter.
        let (keys, vals, out) = unsafe {
            (
                args::slice(keys.cast_const(), n, "keys")?,
                args::slice(vals.cast_const(), n, "vals")?,
                args::out(out, "out")?,
            )
        };
        let mut kwargs = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: API contract: each entry is a NUL-terminated string.
            let (k, v) = unsafe {
                (
                    args::c_str(keys[i], &format!("keys[{i}]"))?,
                    args::c_str(vals[i], &format!("vals[{i}]"))?,
                )
            };
            kwargs.push((k.to_owned(), v.to_owned()));
        }
        let name = entry.name.to_string_lossy();
        let it = DataIter::create(&name, &kwargs).map_err(|e| e.context(&name))?;
        *out = handle::into_handle(Arc::new(CDataIter(Mutex::new(it))));
        Ok(())
    })
}

/// Stops the iterator's thread and frees it. Arrays handed out stay valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterFree(handle: DataIterHandle) -> c_int {
    api_call("MXDataIterFree", || {
        handle::take::<CDataIter>(handle, "handle").map(drop)
    })
}

/// Moves to the next batch: `*out` is 1, or 0 at the end of the epoch (and until
/// `MXDataIterBeforeFirst`). An error while reading the data (a bad row, a missing label) is
/// -1 here, naming the file and the row.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterNext(handle: DataIterHandle, out: *mut c_int) -> c_int {
    api_call("MXDataIterNext", || {
        let it = iter(handle)?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let mut g = it.0.lock();
        let name = g.name().to_owned();
        *out = g.next_batch().map_err(|e| e.context(&name))? as c_int;
        Ok(())
    })
}

/// Starts the next epoch (with `round_batch`, after the instances the last batch wrapped to).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterBeforeFirst(handle: DataIterHandle) -> c_int {
    api_call("MXDataIterBeforeFirst", || {
        let it = iter(handle)?;
        let mut g = it.0.lock();
        let name = g.name().to_owned();
        g.before_first().map_err(|e| e.context(&name))
    })
}

/// A new NDArray handle over the current batch's data (csr for `LibSVMIter`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterGetData(
    handle: DataIterHandle,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXDataIterGetData", || {
        let it = iter(handle)?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let data = it.0.lock().current()?.data.clone();
        *out = handle::into_handle(Arc::new(data));
        Ok(())
    })
}

/// A new NDArray handle over the current batch's label (`(batch,)` where the label of one
/// instance has one element).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterGetLabel(
    handle: DataIterHandle,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXDataIterGetLabel", || {
        let it = iter(handle)?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let label = it.0.lock().current()?.label.clone();
        *out = handle::into_handle(Arc::new(label));
        Ok(())
    })
}

/// The current batch's instance indices (`batch_size` of them; all 0 for `MNISTIter`, as in
/// MXNet), valid until the iterator's next `Next`, `BeforeFirst` or free.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterGetIndex(
    handle: DataIterHandle,
    out_index: *mut *mut u64,
    out_size: *mut u64,
) -> c_int {
    api_call("MXDataIterGetIndex", || {
        let it = iter(handle)?;
        // SAFETY: API contract: out-parameters.
        let (index, size) = unsafe {
            (
                args::out(out_index, "out_index")?,
                args::out(out_size, "out_size")?,
            )
        };
        let g = it.0.lock();
        let b = g.current()?;
        // C's `uint64_t *` is mutable by type only: the caller reads it
        *index = b.index.as_ptr().cast_mut();
        *size = b.index.len() as u64;
        Ok(())
    })
}

/// How many slots at the end of the current batch hold no new instance.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXDataIterGetPadNum(handle: DataIterHandle, pad: *mut c_int) -> c_int {
    api_call("MXDataIterGetPadNum", || {
        let it = iter(handle)?;
        // SAFETY: API contract: out-parameter.
        let pad = unsafe { args::out(pad, "pad")? };
        *pad = it.0.lock().current()?.pad as c_int;
        Ok(())
    })
}
