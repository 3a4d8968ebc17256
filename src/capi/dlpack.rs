//! DLPack (v0.2) exchange: MXNDArrayToDLPack, MXNDArrayFromDLPack(Ex), MXNDArrayCallDLPackDeleter.
//! The structs mirror dlpack.h v0.2 (`DLPACK_VERSION 020`); they are not in mxrt.h, whose handle
//! type for them is `DLManagedTensorHandle` (void *), as in MXNet.

use super::args;
use super::error::api_call;
use super::ndarray::{nd, new_handle};
use super::types::{DLManagedTensorHandle, NDArrayHandle};
use crate::context::{Context, DeviceType};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::ndarray::shape::MAX_NDIM;
use std::ffi::{c_int, c_void};

#[repr(C)]
#[derive(Clone, Copy)]
struct DLContext {
    device_type: c_int,
    device_id: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLTensor {
    data: *mut c_void,
    ctx: DLContext,
    ndim: c_int,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

const KDL_CPU: c_int = 1;
const KDL_GPU: c_int = 2;
const KDL_CPU_PINNED: c_int = 3;
const KDL_INT: u8 = 0;
const KDL_UINT: u8 = 1;
const KDL_FLOAT: u8 = 2;
const KDL_BFLOAT: u8 = 4;
/// Newer DLPack versions' boolean code (accepted on import).
const KDL_BOOL: u8 = 6;

fn to_dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::F32 => (KDL_FLOAT, 32),
        DType::F64 => (KDL_FLOAT, 64),
        DType::F16 => (KDL_FLOAT, 16),
        DType::BF16 => (KDL_BFLOAT, 16),
        DType::U8 => (KDL_UINT, 8),
        DType::U16 => (KDL_UINT, 16),
        DType::U32 => (KDL_UINT, 32),
        DType::U64 => (KDL_UINT, 64),
        DType::I8 => (KDL_INT, 8),
        DType::I16 => (KDL_INT, 16),
        DType::I32 => (KDL_INT, 32),
        DType::I64 => (KDL_INT, 64),
        DType::Bool => (KDL_UINT, 1),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn from_dl_dtype(t: DLDataType) -> Result<DType> {
    if t.lanes != 1 {
        return Err(Error::not_supported(format!(
            "DLPack dtype with {} lanes (only 1 is supported)",
            t.lanes
        )));
    }
    Ok(match (t.code, t.bits) {
        (KDL_FLOAT, 32) => DType::F32,
        (KDL_FLOAT, 64) => DType::F64,
        (KDL_FLOAT, 16) => DType::F16,
        (KDL_BFLOAT, 16) => DType::BF16,
        (KDL_UINT, 8) => DType::U8,
        (KDL_UINT, 16) => DType::U16,
        (KDL_UINT, 32) => DType::U32,
        (KDL_UINT, 64) => DType::U64,
        (KDL_INT, 8) => DType::I8,
        (KDL_INT, 16) => DType::I16,
        (KDL_INT, 32) => DType::I32,
        (KDL_INT, 64) => DType::I64,
        (KDL_UINT, 1) | (KDL_BOOL, 8) => DType::Bool,
        (c, b) => {
            return Err(Error::not_supported(format!(
                "DLPack dtype code {c} with {b} bits"
            )));
        }
    })
}

/// What a tensor handed out by MXNDArrayToDLPack owns; `managed` is first, so a pointer to it is
/// a pointer to the whole.
#[repr(C)]
struct Exported {
    managed: DLManagedTensor,
    array: NDArray,
    shape: Vec<i64>,
}

/// The `deleter` of every tensor MXNDArrayToDLPack hands out: frees the `Exported` behind it.
///
/// # Safety
/// `t` is NULL or a tensor MXNDArrayToDLPack returned whose deleter has not run yet.
unsafe extern "C" fn delete_exported(t: *mut DLManagedTensor) {
    if !t.is_null() {
        // SAFETY: `t` came from MXNDArrayToDLPack, which made it with Box::into_raw(Exported),
        // and DLPack calls the deleter once.
        drop(unsafe { Box::from_raw(t as *mut Exported) });
    }
}

/// Exports the array as a DLPack v0.2 `DLManagedTensor` that keeps the array's memory alive until
/// its `deleter` is called (or MXNDArrayCallDLPackDeleter). Does not wait for pending writes
/// (call MXNDArrayWaitToRead first). `strides` is NULL (compact row-major).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayToDLPack(
    handle: NDArrayHandle,
    out_dlpack: *mut DLManagedTensorHandle,
) -> c_int {
    api_call("MXNDArrayToDLPack", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_dlpack, "out_dlpack")? };
        let a = nd(handle, "handle")?;
        if a.is_none() {
            return Err(Error::invalid("NDArray is not initialized (a none array)"));
        }
        let ctx = a.ctx().expect("not none");
        let device_type = match ctx.dev_type {
            DeviceType::Cpu | DeviceType::CpuShared => KDL_CPU,
            DeviceType::CpuPinned => KDL_CPU_PINNED,
            DeviceType::Gpu => KDL_GPU,
        };
        let data = a.data_ptr()? as *mut c_void;
        let mut boxed = Box::new(Exported {
            managed: DLManagedTensor {
                dl_tensor: DLTensor {
                    data,
                    ctx: DLContext {
                        device_type,
                        device_id: ctx.dev_id,
                    },
                    ndim: a.shape().len() as c_int,
                    dtype: to_dl_dtype(a.dtype()),
                    shape: std::ptr::null_mut(),
                    strides: std::ptr::null_mut(),
                    byte_offset: 0,
                },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete_exported),
            },
            shape: a.shape().to_vec(),
            array: (*a).clone(),
        });
        boxed.managed.dl_tensor.shape = boxed.shape.as_mut_ptr();
        let raw = Box::into_raw(boxed);
        // SAFETY: `raw` is a live box; manager_ctx points at the owner for DLPack consumers.
        unsafe { (*raw).managed.manager_ctx = raw as *mut c_void };
        *out = raw as DLManagedTensorHandle;
        Ok(())
    })
}

/// A DLManagedTensor pointer that may cross threads (released from whichever thread drops the
/// array's memory).
struct SendTensor(*mut DLManagedTensor);
// SAFETY: DLPack producers allow their deleter to be called from any thread.
unsafe impl Send for SendTensor {}

impl SendTensor {
    fn release(self) {
        // SAFETY: called once, when the imported array's memory is released.
        unsafe {
            if let Some(d) = (*self.0).deleter {
                d(self.0);
            }
        }
    }
}

/// Wraps the tensor `dlpack` describes as an array; its deleter runs when the array's memory is
/// released (with `transient`, on a copy of the struct).
///
/// # Safety
/// A non-NULL `dlpack` must point to a `DLManagedTensor` whose `shape` (and `strides`, when not
/// NULL) holds `ndim` entries and whose data, from `byte_offset` on, stays valid for the tensor's
/// bytes until its deleter runs; the deleter must accept being called from any thread. Unless
/// `transient`, the struct itself must also live until then.
unsafe fn from_dlpack(dlpack: DLManagedTensorHandle, transient: bool) -> Result<NDArray> {
    // SAFETY: API contract: `dlpack` points to a DLManagedTensor.
    let t = unsafe { args::reference(dlpack as *const DLManagedTensor, "dlpack")? };
    let tensor = t.dl_tensor;
    let ndim = usize::try_from(tensor.ndim)
        .ok()
        .filter(|&n| n <= MAX_NDIM)
        .ok_or_else(|| {
            Error::invalid(format!(
                "dlpack ndim {} is out of range (0..={MAX_NDIM})",
                tensor.ndim
            ))
        })?;
    // SAFETY: DLPack contract: `shape` has `ndim` entries.
    let shape = unsafe { args::slice(tensor.shape as *const i64, ndim, "dlpack shape")? }.to_vec();
    if !tensor.strides.is_null() && ndim > 0 {
        // SAFETY: DLPack contract: non-NULL `strides` has `ndim` entries.
        let strides = unsafe { std::slice::from_raw_parts(tensor.strides, ndim) };
        let mut expect = 1i64;
        for i in (0..ndim).rev() {
            if shape[i] > 1 && strides[i] != expect {
                return Err(Error::not_supported(format!(
                    "dlpack tensor is not compact row-major (strides {strides:?} for shape {shape:?})"
                )));
            }
            expect = expect.saturating_mul(shape[i]);
        }
    }
    let ctx = match tensor.ctx.device_type {
        KDL_CPU => Context::cpu(tensor.ctx.device_id.max(0)),
        KDL_CPU_PINNED => Context::cpu_pinned(tensor.ctx.device_id.max(0)),
        KDL_GPU => {
            let dev = tensor.ctx.device_id;
            // device memory of a GPU this process can use
            crate::gpu::context(i64::from(dev))
                .map_err(|e| e.context("dlpack tensor on a GPU"))?;
            Context::gpu(dev)
        }
        other => {
            return Err(Error::not_supported(format!(
                "dlpack device type {other}: only CPU (1), CUDA (2) and CPU pinned (3) memory can be imported"
            )));
        }
    };
    let dtype = from_dl_dtype(tensor.dtype)?;
    let offset = usize::try_from(tensor.byte_offset)
        .map_err(|_| Error::invalid("dlpack byte_offset too large"))?;
    let data = (tensor.data as *mut u8).wrapping_add(offset);
    if data.is_null() && crate::ndarray::shape::num_elements(&shape)? > 0 {
        return Err(Error::invalid("dlpack data is NULL"));
    }
    let owner = if transient {
        // the caller's struct may go away after this call: keep a copy and hand that to the deleter
        SendTensor(Box::into_raw(Box::new(*t)))
    } else {
        SendTensor(dlpack as *mut DLManagedTensor)
    };
    let release = Box::new(move || {
        let copy = if transient { Some(owner.0) } else { None };
        owner.release();
        if let Some(c) = copy {
            // SAFETY: the copy was made with Box::into_raw above and is freed once, here.
            drop(unsafe { Box::from_raw(c) });
        }
    });
    // SAFETY: DLPack contract: the data stays valid until the deleter runs, which `release` does
    // only when the array's memory is dropped.
    unsafe { NDArray::from_foreign(data, &shape, dtype, ctx, release) }
}

/// Wraps a DLPack tensor as an array without copying; the tensor's deleter runs when the array's
/// memory is released (MXNDArrayFromDLPackEx with transient_handle = false).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayFromDLPack(
    dlpack: DLManagedTensorHandle,
    out_handle: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayFromDLPack", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_handle, "out_handle")? };
        // SAFETY: API contract.
        *out = new_handle(unsafe { from_dlpack(dlpack, false)? });
        Ok(())
    })
}

/// Wraps a DLPack tensor as an array without copying. With `transient_handle` the
/// DLManagedTensor struct itself may be freed by the caller after this call: mxrt keeps a copy and
/// passes the copy to the deleter.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayFromDLPackEx(
    dlpack: DLManagedTensorHandle,
    transient_handle: bool,
    out_handle: *mut NDArrayHandle,
) -> c_int {
    api_call("MXNDArrayFromDLPackEx", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_handle, "out_handle")? };
        // SAFETY: API contract.
        *out = new_handle(unsafe { from_dlpack(dlpack, transient_handle)? });
        Ok(())
    })
}

/// Calls `dlpack->deleter(dlpack)` if both are non-NULL (NULL is accepted and ignored, as in
/// MXNet).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayCallDLPackDeleter(dlpack: DLManagedTensorHandle) -> c_int {
    api_call("MXNDArrayCallDLPackDeleter", || {
        let t = dlpack as *mut DLManagedTensor;
        if !t.is_null() {
            // SAFETY: API contract: a non-NULL handle points to a DLManagedTensor.
            if let Some(d) = unsafe { (*t).deleter } {
                // SAFETY: DLPack contract: the deleter frees the tensor it is given.
                unsafe { d(t) };
            }
        }
        Ok(())
    })
}
