//! The engine's push functions: `MXEnginePushAsync`/`MXEnginePushSync` on engine variables and
//! `MXEnginePushAsyncND`/`MXEnginePushSyncND` on the variables of NDArrays. Both pairs take over
//! the C function and its parameter (`CParam`) and hand a C-bodied op to the engine through
//! `engine::push_c`; the ND pair looks its arrays up without counting references (`NdVars`).

use super::args;
use super::engine::{CFunc, CParam, push_c, var_lists};
use super::error::api_call;
use super::handle;
use super::types::*;
use crate::engine::{OnQueued, Var};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use smallvec::SmallVec;
use std::ffi::{c_char, c_int, c_void};

/// Pushes an asynchronous operation (MXNet 1.9.1). `async_func(run_ctx, on_complete, func_param)`
/// runs once the reads of `const_vars_handle[0..num_const_vars)` and writes of
/// `mutable_vars_handle[0..num_mutable_vars)` may start; it must complete exactly once with
/// `on_complete->callback(on_complete->engine, on_complete->param, error)` (or
/// MXEngineCallbackInvoke), from any thread, after copying the struct if it completes later. A
/// non-NULL `error` is a NUL-terminated message that fails the op. `deleter(func_param)` runs when
/// the op is destroyed, and also when this push fails. Repeated variables are merged.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEnginePushAsync(
    async_func: EngineAsyncFunc,
    func_param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx_handle: ContextHandle,
    const_vars_handle: EngineVarHandle,
    num_const_vars: c_int,
    mutable_vars_handle: EngineVarHandle,
    num_mutable_vars: c_int,
    prop_handle: EngineFnPropertyHandle,
    priority: c_int,
    opr_name: *const c_char,
    wait: bool,
) -> c_int {
    api_call("MXEnginePushAsync", || {
        // SAFETY: forwarded API contract.
        unsafe {
            push_vars(
                CFunc::Async(async_func),
                func_param,
                deleter,
                ctx_handle,
                const_vars_handle,
                num_const_vars,
                mutable_vars_handle,
                num_mutable_vars,
                prop_handle,
                priority,
                opr_name,
                wait,
            )
        }
    })
}

/// Pushes a synchronous operation (MXNet 1.9.1): `sync_func(run_ctx, func_param)`; the op
/// completes when it returns. To fail the op, call MXEngineSetOpError from inside `sync_func`.
/// Ownership of `func_param` and the variable rules are as for MXEnginePushAsync. Eligible for bulk
/// execution (MXEngineSetBulkSize) when `prop_handle` is NULL/kNormal and `priority` is 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEnginePushSync(
    sync_func: EngineSyncFunc,
    func_param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx_handle: ContextHandle,
    const_vars_handle: EngineVarHandle,
    num_const_vars: c_int,
    mutable_vars_handle: EngineVarHandle,
    num_mutable_vars: c_int,
    prop_handle: EngineFnPropertyHandle,
    priority: c_int,
    opr_name: *const c_char,
) -> c_int {
    api_call("MXEnginePushSync", || {
        // SAFETY: forwarded API contract.
        unsafe {
            push_vars(
                CFunc::Sync(sync_func),
                func_param,
                deleter,
                ctx_handle,
                const_vars_handle,
                num_const_vars,
                mutable_vars_handle,
                num_mutable_vars,
                prop_handle,
                priority,
                opr_name,
                false,
            )
        }
    })
}

/// The shared body of the variable pushes: takes over `func_param`, looks up the variables, then
/// pushes `func` on them.
///
/// # Safety
/// MXEnginePushAsync's contract: `c` and `m` NULL or valid for reads of `nc` and `nm` handles
/// (as for [`var_lists`]), and `ctx`, `prop`, `name` and `func` as for [`push_c`].
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn push_vars(
    func: CFunc,
    func_param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx: ContextHandle,
    c: EngineVarHandle,
    nc: c_int,
    m: EngineVarHandle,
    nm: c_int,
    prop: EngineFnPropertyHandle,
    priority: c_int,
    name: *const c_char,
    wait: bool,
) -> Result<()> {
    let param = CParam::new(func_param, deleter);
    // SAFETY: API contract for the variable arrays.
    let (c, m) = unsafe { var_lists(c, nc, "const_vars_handle", m, nm, "mutable_vars_handle")? };
    // SAFETY: forwarded API contract.
    unsafe { push_c(func, param, ctx, &c, &m, prop, priority, name, wait, None) }
}

/// Pushes an async op reading the arrays `const_nds_handle` and writing `mutable_nds_handle` (see
/// MXEnginePushAsync). Invalid array arguments fail before `func_param` is taken over (the
/// deleter is not called, as in MXNet); later failures call it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEnginePushAsyncND(
    async_func: EngineAsyncFunc,
    func_param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx_handle: ContextHandle,
    const_nds_handle: *mut NDArrayHandle,
    num_const_nds: c_int,
    mutable_nds_handle: *mut NDArrayHandle,
    num_mutable_nds: c_int,
    prop_handle: EngineFnPropertyHandle,
    priority: c_int,
    opr_name: *const c_char,
    wait: bool,
) -> c_int {
    api_call("MXEnginePushAsyncND", || {
        // SAFETY: forwarded API contract.
        unsafe {
            push_nd(
                CFunc::Async(async_func),
                func_param,
                deleter,
                ctx_handle,
                const_nds_handle,
                num_const_nds,
                mutable_nds_handle,
                num_mutable_nds,
                prop_handle,
                priority,
                opr_name,
                wait,
            )
        }
    })
}

/// Pushes a sync op reading the arrays `const_nds_handle` and writing `mutable_nds_handle` (see
/// MXEnginePushSync and MXEnginePushAsyncND).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEnginePushSyncND(
    sync_func: EngineSyncFunc,
    func_param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx_handle: ContextHandle,
    const_nds_handle: *mut NDArrayHandle,
    num_const_nds: c_int,
    mutable_nds_handle: *mut NDArrayHandle,
    num_mutable_nds: c_int,
    prop_handle: EngineFnPropertyHandle,
    priority: c_int,
    opr_name: *const c_char,
) -> c_int {
    api_call("MXEnginePushSyncND", || {
        // SAFETY: forwarded API contract.
        unsafe {
            push_nd(
                CFunc::Sync(sync_func),
                func_param,
                deleter,
                ctx_handle,
                const_nds_handle,
                num_const_nds,
                mutable_nds_handle,
                num_mutable_nds,
                prop_handle,
                priority,
                opr_name,
                false,
            )
        }
    })
}

/// The shared body of the ND pushes: looks up the arrays (failing before `func_param` is taken
/// over, as MXNet does), then pushes `func` on their variables.
///
/// # Safety
/// MXEnginePushAsyncND's contract: `c` and `m` NULL or valid for reads of `nc` and `nm` NDArray
/// handles (as for [`NdVars::look_up`]), and `ctx`, `prop`, `name` and `func` as for [`push_c`].
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn push_nd(
    func: CFunc,
    func_param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    ctx: ContextHandle,
    c: *mut NDArrayHandle,
    nc: c_int,
    m: *mut NDArrayHandle,
    nm: c_int,
    prop: EngineFnPropertyHandle,
    priority: c_int,
    name: *const c_char,
    wait: bool,
) -> Result<()> {
    let lookup = handle::SharedLookup::new();
    let mut nds = NdVars::default();
    // SAFETY: API contract for the handle arrays.
    unsafe { nds.look_up(&lookup, c, nc, m, nm)? };
    let param = CParam::new(func_param, deleter);
    // the engine holds the variables from here on; nothing from `lookup` is used after this
    let release = || lookup.release();
    // SAFETY: forwarded API contract.
    unsafe {
        push_c(
            func,
            param,
            ctx,
            nds.const_vars(),
            nds.mutable_vars(),
            prop,
            priority,
            name,
            wait,
            Some(OnQueued(&release)),
        )
    }
}

/// Arrays an ND push looks up without allocating (the push is on the caller's hot path).
const ND_INLINE: usize = 16;

/// The variables of the arrays a push names: uncounted copies, valid while the registry lookup
/// that found the arrays is held (it keeps them from being freed) and, once the engine has queued
/// the op on them, while the op is queued (each variable holds itself then). Counting no
/// references leaves the arrays' and variables' cache lines alone until the engine queues the op
/// (a worker touches a variable's line whenever an op on it finishes). Filled in place (it is
/// large enough that returning it by value costs a copy per push).
#[derive(Default)]
struct NdVars {
    vars: SmallVec<[std::mem::ManuallyDrop<Var>; ND_INLINE]>,
    n_const: usize,
}

impl NdVars {
    fn const_vars(&self) -> &[Var] {
        &crate::engine::uncounted_slice(&self.vars)[..self.n_const]
    }
    fn mutable_vars(&self) -> &[Var] {
        &crate::engine::uncounted_slice(&self.vars)[self.n_const..]
    }

    /// Looks up the arrays of an ND push in `lookup`: `c` (read) and `m` (written); none may be a
    /// none array. The variables are valid while `lookup` is held (see above).
    ///
    /// # Safety
    /// `c` and `m` must be NULL or valid for reads of `nc` and `nm` handles (each handle is
    /// checked). The caller must not use the variables stored in `self` after releasing `lookup`,
    /// except by handing them to the engine with the op being pushed (see [`NdVars`]).
    unsafe fn look_up(
        &mut self,
        lookup: &handle::SharedLookup,
        c: *mut NDArrayHandle,
        nc: c_int,
        m: *mut NDArrayHandle,
        nm: c_int,
    ) -> Result<()> {
        let list = |p: *mut NDArrayHandle, n: c_int, what: &str, name: &str| {
            let len = usize::try_from(n).map_err(|_| {
                Error::invalid(format!(
                    "Non-negative number of {what} NDArrays expected ({name} count = {n})"
                ))
            })?;
            // SAFETY: API contract: `len` handles.
            unsafe { args::slice(p as *const NDArrayHandle, len, name) }
        };
        let reads = list(c, nc, "const", "const_nds_handle")?;
        let writes = list(m, nm, "mutable", "mutable_nds_handle")?;
        lookup.lock(reads.iter().chain(writes).map(|&h| h as *const c_void));
        for (hs, name) in [(reads, "const_nds_handle"), (writes, "mutable_nds_handle")] {
            for (i, &h) in hs.iter().enumerate() {
                // SAFETY: `a` is used only in this iteration, before the caller releases `lookup`.
                let a = unsafe { lookup.get::<NDArray>(h, name, i)? };
                let v = a
                    .var()
                    .ok_or_else(|| Error::invalid(format!("{name}[{i}] is a none array")))?;
                // SAFETY: the copy is used while `lookup` is held, which keeps the array and so
                // its variable alive, and then by the engine, which takes over as documented on
                // `NdVars`.
                self.vars.push(unsafe { crate::engine::uncounted(v) });
            }
        }
        self.n_const = reads.len();
        Ok(())
    }
}
