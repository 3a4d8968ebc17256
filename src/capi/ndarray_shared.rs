//! NDArrays in shared memory: `MXNDArrayGetSharedMemHandle` names an array's `cpu_shared` block
//! as (pid, id), and `MXNDArrayCreateFromSharedMem(Ex)` maps such a block, made in this or another
//! process, as a new array.

use super::args::{self, count};
use super::error::api_call;
use super::ndarray::{nd, new_handle};
use super::types::*;
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::FnProperty;
use crate::error::Error;
use crate::ndarray::NDArray;
use smallvec::SmallVec;
use std::ffi::c_int;

type Shape64 = SmallVec<[i64; 6]>;

/// Maps a cpu_shared block made by MXNDArrayGetSharedMemHandle (in this or another process) as a
/// new array of `shape[0..ndim)` and `dtype`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateFromSharedMem(
    shared_pid: c_int,
    shared_id: c_int,
    shape: *const u32,
    ndim: u32,
    dtype: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayCreateFromSharedMem", || {
        // SAFETY: API contract: out-parameter and `ndim` dims.
        let out = unsafe { args::out(out, "out")? };
        // SAFETY: as above.
        let dims: Shape64 = unsafe { args::slice(shape, ndim as usize, "shape")? }
            .iter()
            .map(|&d| d as i64)
            .collect();
        *out = new_handle(NDArray::from_shared(
            shared_pid,
            shared_id,
            &dims,
            DType::from_code(dtype)?,
        )?);
        Ok(())
    })
}

/// MXNDArrayCreateFromSharedMem with int dims.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCreateFromSharedMemEx(
    shared_pid: c_int,
    shared_id: c_int,
    shape: *const c_int,
    ndim: c_int,
    dtype: c_int,
    out: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayCreateFromSharedMemEx", || {
        // SAFETY: API contract: out-parameter and `ndim` dims.
        let out = unsafe { args::out(out, "out")? };
        let n = count(ndim.into(), "ndim")?;
        // SAFETY: as above.
        let dims: Shape64 = unsafe { args::slice(shape, n, "shape")? }
            .iter()
            .map(|&d| d.into())
            .collect();
        *out = new_handle(NDArray::from_shared(
            shared_pid,
            shared_id,
            &dims,
            DType::from_code(dtype)?,
        )?);
        Ok(())
    })
}

/// Shares the array with another process: writes `(shared_pid, shared_id)` for
/// MXNDArrayCreateFromSharedMem. For a cpu_shared array `shared_id` is a file descriptor the array
/// keeps open (MXNet's Linux convention, for descriptor passing); any other array is first copied
/// into a new cpu_shared block, named by `(pid, id)`, which lives until the receiver drops it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetSharedMemHandle(
    handle: NDArrayHandle,
    shared_pid: *mut c_int,
    shared_id: *mut c_int,
) -> c_int {
    api_call("MXNDArrayGetSharedMemHandle", || {
        // SAFETY: API contract: out-parameters.
        let (op, oi) = unsafe {
            (
                args::out(shared_pid, "shared_pid")?,
                args::out(shared_id, "shared_id")?,
            )
        };
        let a = nd(handle, "handle")?;
        let (pid, id) = match a.ctx() {
            Some(c) if c.dev_type == crate::DeviceType::CpuShared => a.shared_handle()?,
            Some(_) => {
                let copy = NDArray::new(a.shape(), Context::cpu_shared(0), a.dtype(), false)?;
                copy.copy_from(&a, 0, FnProperty::Normal)?;
                copy.shared_name()?
            }
            None => return Err(Error::invalid("handle is a none array")),
        };
        (*op, *oi) = (pid, id);
        Ok(())
    })
}
