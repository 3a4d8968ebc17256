#![allow(non_camel_case_types)]
//! The C types of MXNet 1.9.1's API: handle typedefs and callback signatures, exactly as
//! `mxnet/c_api.h` declares them (so both headers can be included together).

use std::ffi::c_void;

/// Unsigned int, MXNet's `mx_uint`.
pub type mx_uint = u32;
/// Float, MXNet's `mx_float`.
pub type mx_float = f32;
/// Dimension type of shapes, MXNet's `dim_t`.
pub type dim_t = i64;

/// An NDArray.
pub type NDArrayHandle = *mut c_void;
/// A Symbol (a graph's output list).
pub type SymbolHandle = *mut c_void;
/// A KVStore.
pub type KVStoreHandle = *mut c_void;
/// A RecordIO writer or reader.
pub type RecordIOHandle = *mut c_void;
/// A profiler object (domain, task, frame, event or counter).
pub type ProfileHandle = *mut c_void;
/// A DLPack `DLManagedTensor`.
pub type DLManagedTensorHandle = *mut c_void;
/// Points to `struct { int32_t dev_type; int32_t dev_id; }`.
pub type ContextHandle = *const c_void;
/// Points to an `int` holding an FnProperty value; NULL means kNormal.
pub type EngineFnPropertyHandle = *const c_void;
/// An array of engine variable handles (`void *vars[n]`).
pub type EngineVarHandle = *mut c_void;

/// Body of an async op: `(RunContext *run_ctx, CallbackOnComplete *on_complete, void *param)`.
pub type EngineAsyncFunc = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void)>;
/// Body of a sync op: `(RunContext *run_ctx, void *param)`.
pub type EngineSyncFunc = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;
/// Frees an op's `param` once the op object is destroyed.
pub type EngineFuncParamDeleter = Option<unsafe extern "C" fn(*mut c_void)>;

/// `{dev_type, dev_id}`, what a ContextHandle points to.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MXContext {
    pub dev_type: i32,
    pub dev_id: i32,
}
