//! Sparse NDArrays (`row_sparse`, `csr`) in MXNet 1.9.1's C API: creation, storage type, the
//! parts as dense arrays, building an array part by part and checking its structure.

use super::args::{self, count};
use super::error::api_call;
use super::ndarray::{nd, new_handle};
use super::types::NDArrayHandle;
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::FnProperty;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use crate::ndarray::sparse::{SparseValue, dense_len, zeroed};
use std::ffi::c_int;

/// Builds the array `MXNDArrayCreateSparseEx(64)` describe: all-zero parts of the given aux
/// shapes (the values get the matching storage shape), to be filled by SyncCopyFromNDArray.
#[allow(clippy::too_many_arguments)]
fn create_sparse(
    storage_type: c_int,
    shape: &[i64],
    dev_type: c_int,
    dev_id: c_int,
    dtype: c_int,
    aux_types: &[c_int],
    aux_shapes: &[Vec<i64>],
) -> Result<NDArray> {
    let stype = match StorageType::from_code(storage_type) {
        Some(s @ (StorageType::RowSparse | StorageType::Csr)) => s,
        _ => {
            return Err(Error::invalid(format!(
                "storage_type {storage_type} is not sparse (1 row_sparse, 2 csr; dense arrays \
                 come from MXNDArrayCreateEx)"
            )));
        }
    };
    let dtype = DType::from_code(dtype)?;
    let ctx = Context::from_codes(dev_type, dev_id)?;
    if aux_types.len() != stype.num_aux() {
        return Err(Error::invalid(format!(
            "num_aux is {}, a {} array has {}",
            aux_types.len(),
            stype.name(),
            stype.num_aux()
        )));
    }
    let aux_types = aux_types
        .iter()
        .map(|&t| DType::from_code(t))
        .collect::<Result<Vec<_>>>()?;
    crate::ndarray::sparse::check_shape(stype, shape)?;
    let len = |i: usize| -> Result<usize> {
        match aux_shapes[i].as_slice() {
            [n] if *n >= 0 => Ok(*n as usize),
            other => Err(Error::invalid(format!(
                "aux_shape {i} is {other:?}: aux arrays are 1-dimensional"
            ))),
        }
    };
    let mut value = SparseValue::zeros(stype, shape)?;
    for i in 0..stype.num_aux() {
        value.aux[i] = zeroed(len(i)?)?;
    }
    value.data_shape[0] = len(stype.num_aux() - 1)? as i64;
    value.data = zeroed(dense_len(&value.data_shape, dtype)?)?;
    NDArray::from_sparse_value(shape, ctx, dtype, &aux_types, value)
}

/// Reads the aux description of the CreateSparseEx functions: `num_aux` types, `num_aux` dim
/// counts, and the aux shapes concatenated in `aux_shape`.
///
/// # Safety
/// Per the API contract: `aux_type` and `aux_ndims` hold `num_aux` values, `aux_shape` the sum
/// of the dim counts (any of them may be NULL when that count is 0).
unsafe fn aux_description<'a, N: Copy + Into<i64>, D: Copy + Into<i64>>(
    num_aux: u32,
    aux_type: *const c_int,
    aux_ndims: *const N,
    aux_shape: *const D,
) -> Result<(&'a [c_int], Vec<Vec<i64>>)> {
    // SAFETY: per the contract.
    let types = unsafe { args::slice(aux_type, num_aux as usize, "aux_type")? };
    // SAFETY: per the contract.
    let ndims = unsafe { args::slice(aux_ndims, num_aux as usize, "aux_ndims")? };
    let ndims = ndims
        .iter()
        .map(|&n| count(n.into(), "aux_ndims"))
        .collect::<Result<Vec<_>>>()?;
    // SAFETY: per the contract.
    let flat = unsafe { args::slice(aux_shape, ndims.iter().sum(), "aux_shape")? };
    let mut at = 0;
    let shapes = ndims
        .iter()
        .map(|&n| {
            at += n;
            flat[at - n..at].iter().map(|&d| d.into()).collect()
        })
        .collect();
    Ok((types, shapes))
}

/// Creates a row_sparse (1) or csr (2) array of logical `shape`; aux array i has type
/// `aux_type[i]` and shape `aux_shape[..]` (`aux_ndims[i]` dims each, concatenated). Sparse
/// arrays live on CPU contexts.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateSparseEx(
    storage_type: c_int,
    shape: *const u32,
    ndim: u32,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
    num_aux: u32,
    aux_type: *mut c_int,
    aux_ndims: *mut u32,
    aux_shape: *const u32,
    out: *mut NDArrayHandle,
) -> c_int {
    let _ = delay_alloc; // sparse parts are allocated when written
    api_call("MXNDArrayCreateSparseEx", || {
        // SAFETY: API contract: out-parameter, `ndim` dims.
        let (out, dims) = unsafe {
            (
                args::out(out, "out")?,
                args::slice(shape, ndim as usize, "shape")?,
            )
        };
        let dims: Vec<i64> = dims.iter().map(|&d| d.into()).collect();
        // SAFETY: API contract: the aux description.
        let (types, shapes) = unsafe {
            aux_description(
                num_aux,
                aux_type.cast_const(),
                aux_ndims.cast_const(),
                aux_shape,
            )?
        };
        *out = new_handle(create_sparse(
            storage_type,
            &dims,
            dev_type,
            dev_id,
            dtype,
            types,
            &shapes,
        )?);
        Ok(())
    })
}

/// MXNDArrayCreateSparseEx with 64-bit dimensions.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateSparseEx64(
    storage_type: c_int,
    shape: *const i64,
    ndim: c_int,
    dev_type: c_int,
    dev_id: c_int,
    delay_alloc: c_int,
    dtype: c_int,
    num_aux: u32,
    aux_type: *mut c_int,
    aux_ndims: *mut c_int,
    aux_shape: *const i64,
    out: *mut NDArrayHandle,
) -> c_int {
    let _ = delay_alloc;
    api_call("MXNDArrayCreateSparseEx64", || {
        // SAFETY: API contract: out-parameter, `ndim` dims.
        let (out, dims) = unsafe {
            (
                args::out(out, "out")?,
                args::slice(shape, count(ndim.into(), "ndim")?, "shape")?,
            )
        };
        // SAFETY: API contract: the aux description.
        let (types, shapes) = unsafe {
            aux_description(
                num_aux,
                aux_type.cast_const(),
                aux_ndims.cast_const(),
                aux_shape,
            )?
        };
        *out = new_handle(create_sparse(
            storage_type,
            dims,
            dev_type,
            dev_id,
            dtype,
            types,
            &shapes,
        )?);
        Ok(())
    })
}

/// Storage type: 0 default (dense), 1 row_sparse, 2 csr; -1 for a none array.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetStorageType(
    handle: NDArrayHandle,
    out_storage_type: *mut c_int,
) -> c_int {
    api_call("MXNDArrayGetStorageType", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_storage_type, "out_storage_type")? };
        let a = nd(handle, "handle")?;
        *out = if a.is_none() { -1 } else { a.stype().code() };
        Ok(())
    })
}

/// The dtype of aux array `i` of a sparse array (row_sparse: 0 indices; csr: 0 indptr,
/// 1 indices).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetAuxType(
    handle: NDArrayHandle,
    i: u32,
    out_type: *mut c_int,
) -> c_int {
    api_call("MXNDArrayGetAuxType", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_type, "out_type")? };
        *out = nd(handle, "handle")?.aux_type(i as usize)?.code();
        Ok(())
    })
}

/// A new dense array holding a copy of aux array `i` (waits for the writes pushed before).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetAuxNDArray(
    handle: NDArrayHandle,
    i: u32,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayGetAuxNDArray", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        *out = new_handle(nd(handle, "handle")?.aux_array(i as usize)?);
        Ok(())
    })
}

/// A new dense array holding a copy of the data: a sparse array's stored values, or a dense
/// array's elements (waits for the writes pushed before).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetDataNDArray(
    handle: NDArrayHandle,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayGetDataNDArray", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let a = nd(handle, "handle")?;
        let copy = if a.is_sparse() {
            a.data_array()?
        } else {
            let ctx = a
                .ctx()
                .ok_or_else(|| Error::invalid("handle is a none array"))?;
            let copy = NDArray::new(a.shape(), ctx, a.dtype(), false)?;
            copy.copy_from(&a, 0, FnProperty::Normal)?;
            copy.wait_to_read()?;
            copy
        };
        *out = new_handle(copy);
        Ok(())
    })
}

/// Copies the dense `handle_src` into `handle_dst` and waits: into a sparse array's values
/// (`i` = -1) or aux array `i`, which take the source's length; into a dense array (`i` = -1)
/// as a plain copy.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySyncCopyFromNDArray(
    handle_dst: NDArrayHandle,
    handle_src: NDArrayHandle,
    i: c_int,
) -> c_int {
    api_call("MXNDArraySyncCopyFromNDArray", || {
        let (dst, src) = (nd(handle_dst, "handle_dst")?, nd(handle_src, "handle_src")?);
        if i < -1 {
            return Err(Error::invalid(format!(
                "i is {i}: -1 (the data) or an aux index"
            )));
        }
        if dst.is_sparse() {
            let part = (i >= 0).then_some(i as usize);
            let want = match part {
                None => dst.dtype(),
                Some(k) => dst.aux_type(k)?,
            };
            // values of another dtype are cast, as MXNet's copy does
            let src = if src.dtype() != want && !src.is_sparse() && !src.is_none() {
                let dtype = want.name();
                crate::operator::imperative::invoke(crate::operator::imperative::Invoke {
                    op: "Cast",
                    called_as: "Cast",
                    inputs: &[NDArray::clone(&src)],
                    params: vec![("dtype", dtype)],
                    outputs: None,
                    state: None,
                })?
                .remove(0)
            } else {
                NDArray::clone(&src)
            };
            return dst.sync_copy_part_from(&src, part);
        }
        if i != -1 {
            return Err(Error::invalid(format!(
                "aux blob {i}: handle_dst has default (dense) storage, which has no aux arrays"
            )));
        }
        dst.copy_storage_from(&src, 0)?;
        dst.wait_to_read()
    })
}

/// Checks a sparse array's structure (sizes, index ranges and order; with `full_check` also the
/// order of csr columns within rows); -1 naming what is wrong. Dense arrays pass.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySyncCheckFormat(
    handle: NDArrayHandle,
    full_check: bool,
) -> c_int {
    api_call("MXNDArraySyncCheckFormat", || {
        nd(handle, "handle")?.check_format(full_check)
    })
}
