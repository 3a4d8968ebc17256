//! Engine functions: MXNet 1.9.1's `MXEngineSetBulkSize`, mxrt's additions for pure C callers
//! (variables, waits, operators, error reporting), and what every C-bodied op shares: the C
//! function and its parameter (`CParam`, `CFunc`) and `push_c`. The pushes themselves are in
//! `engine_push.rs`.

use super::args::{self, count};
use super::completion::{self, CallbackOnComplete};
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::types::*;
use crate::context::Context;
use crate::engine::{
    Completion, Engine, FnProperty, OnQueued, OpResult, Operator, PushArgs, RunContext, Var,
    VarInner, VarList,
};
use crate::error::{Error, Result};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

impl Handle for VarInner {
    const KIND: HandleKind = HandleKind::EngineVar;
}
impl Handle for Operator {
    const KIND: HandleKind = HandleKind::EngineOperator;
}

pub(crate) fn engine() -> Result<&'static Engine> {
    Engine::global()
}

/// Reads a ContextHandle (must not be NULL).
///
/// # Safety
/// A non-NULL `ctx` must be valid for reads of an `MXContext` (MXNet's 8-byte Context).
pub(crate) unsafe fn context_arg(ctx: ContextHandle, name: &str) -> Result<Context> {
    // SAFETY: a non-NULL ContextHandle points to MXNet's 8-byte Context per the API contract.
    let c = unsafe { args::reference(ctx as *const MXContext, name)? };
    Context::from_codes(c.dev_type, c.dev_id).map_err(|e| e.context(name))
}

/// Reads an EngineFnPropertyHandle (NULL = kNormal).
///
/// # Safety
/// A non-NULL `prop` must be valid for reads of an `int`.
pub(crate) unsafe fn prop_arg(prop: EngineFnPropertyHandle) -> Result<FnProperty> {
    if prop.is_null() {
        return Ok(FnProperty::Normal);
    }
    // SAFETY: a non-NULL property handle points to an int per the API contract.
    FnProperty::from_code(unsafe { *(prop as *const c_int) }).map_err(|e| e.context("prop_handle"))
}

/// Looks up `n` engine variable handles.
///
/// # Safety
/// A non-NULL `vars` must be valid for reads of `n` pointers (each handle is checked).
unsafe fn vars_arg(vars: EngineVarHandle, n: c_int, what: &str, name: &str) -> Result<VarList> {
    let n = usize::try_from(n).map_err(|_| {
        Error::invalid(format!(
            "Non-negative number of {what} vars expected ({name} count = {n})"
        ))
    })?;
    // SAFETY: per the API contract `vars` is an array of `n` variable handles.
    let list = unsafe { handle::borrow_all::<VarInner>(vars as *const *mut c_void, n, name)? };
    Ok(list.into_iter().map(Var::from_inner).collect())
}

/// Looks up both variable arrays of a push (`const_vars` read, `mutable_vars` written).
///
/// # Safety
/// Each array must be NULL or valid for reads of its count of pointers, as for [`vars_arg`].
pub(crate) unsafe fn var_lists(
    const_vars: EngineVarHandle,
    num_const: c_int,
    const_name: &str,
    mutable_vars: EngineVarHandle,
    num_mutable: c_int,
    mutable_name: &str,
) -> Result<(VarList, VarList)> {
    // SAFETY: API contract for the variable arrays.
    unsafe {
        Ok((
            vars_arg(const_vars, num_const, "const", const_name)?,
            vars_arg(mutable_vars, num_mutable, "mutable", mutable_name)?,
        ))
    }
}

/// Owns a C op's `param`; runs the deleter when dropped (after the op, or when a push fails).
pub(crate) struct CParam {
    pub(crate) param: *mut c_void,
    deleter: EngineFuncParamDeleter,
}

// SAFETY: MXNet's contract lets the engine hand `param` to the op on any worker thread and run
// the deleter on the completing thread; C callers provide thread-safe parameters.
unsafe impl Send for CParam {}
// SAFETY: as above; mxrt only passes the pointer along.
unsafe impl Sync for CParam {}

impl CParam {
    pub(crate) fn new(param: *mut c_void, deleter: EngineFuncParamDeleter) -> Self {
        CParam { param, deleter }
    }
    /// The raw parameter (a method, so closures capture the whole owner, not just the pointer).
    pub(crate) fn ptr(&self) -> *mut c_void {
        self.param
    }
}

impl Drop for CParam {
    fn drop(&mut self) {
        if let Some(d) = self.deleter {
            let param = self.param;
            // put off while this thread holds registry locks (a push that failed part way)
            super::handle::run_c(move || {
                // SAFETY: the caller gave us `deleter` for `param`; it runs exactly once, here.
                unsafe { d(param) };
            });
        }
    }
}

thread_local! {
    /// `Some` while a C sync function runs on this thread; holds what MXEngineSetOpError reported.
    static OP_ERROR: RefCell<Option<Option<String>>> = const { RefCell::new(None) };
}

/// Wraps a C sync function as an engine body.
pub(crate) fn c_sync_body(
    f: unsafe extern "C" fn(*mut c_void, *mut c_void),
    param: CParam,
) -> impl Fn(&RunContext) -> OpResult + Send + Sync + 'static {
    move |rc: &RunContext| {
        let outer = OP_ERROR.with(|e| e.borrow_mut().replace(None));
        // SAFETY: calling the user's function with MXNet's arguments: a RunContext pointer valid
        // for the call and the user's own parameter.
        unsafe { f(rc as *const RunContext as *mut c_void, param.ptr()) };
        let reported = OP_ERROR.with(|e| std::mem::replace(&mut *e.borrow_mut(), outer));
        match reported.flatten() {
            Some(msg) => Err(msg),
            None => Ok(()),
        }
    }
}

/// Wraps a C async function as an engine body.
pub(crate) fn c_async_body(
    f: unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void),
    param: CParam,
) -> impl Fn(&RunContext, Completion) + Send + Sync + 'static {
    move |rc: &RunContext, done: Completion| {
        let mut cb = completion::register(done);
        // SAFETY: MXNet's calling convention: RunContext and CallbackOnComplete pointers valid for
        // the call (C copies the latter to complete later) and the user's parameter.
        unsafe {
            f(
                rc as *const RunContext as *mut c_void,
                &mut cb as *mut CallbackOnComplete as *mut c_void,
                param.ptr(),
            )
        };
    }
}

pub(crate) enum CFunc {
    Sync(EngineSyncFunc),
    Async(EngineAsyncFunc),
}

/// Shared tail of every push: takes ownership of `param` first, so the deleter runs on failure.
///
/// # Safety
/// `ctx` as for [`context_arg`], `prop` as for [`prop_arg`], and a non-NULL `name` must be a
/// NUL-terminated string valid for the call. The C function in `func` must be safe to call with
/// MXNet's arguments on any engine thread, as MXNet's push functions require.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn push_c(
    func: CFunc,
    param: CParam,
    ctx: ContextHandle,
    const_vars: &[Var],
    mutable_vars: &[Var],
    prop: EngineFnPropertyHandle,
    priority: c_int,
    name: *const c_char,
    wait: bool,
    on_queued: Option<OnQueued<'_>>,
) -> Result<()> {
    // SAFETY: forwarded API contracts.
    let ctx = unsafe { context_arg(ctx, "ctx_handle")? };
    // SAFETY: as above.
    let prop = unsafe { prop_arg(prop)? };
    // SAFETY: as above.
    let name = unsafe { args::opt_c_str(name, "opr_name")? };
    let mut a = PushArgs::new(ctx)
        .reads(const_vars)
        .writes(mutable_vars)
        .prop(prop)
        .priority(priority)
        .wait(wait);
    a.name = name;
    a.on_queued = on_queued;
    let engine = engine()?;
    match func {
        CFunc::Sync(f) => {
            let f = f.ok_or_else(|| Error::invalid("sync_func is NULL"))?;
            engine.push_fn(a, c_sync_body(f, param))
        }
        CFunc::Async(f) => {
            let f = f.ok_or_else(|| Error::invalid("async_func is NULL"))?;
            engine.push_async_fn(a, c_async_body(f, param))
        }
    }
}

/// Sets the calling thread's bulk size (the number of small sync ops collected into one engine
/// op) and writes the previous size to `prev_bulk_size`. 0 disables bulking (the default). A
/// segment is also pushed when the thread pushes anything else or waits. NaiveEngine never bulks
/// and reports 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineSetBulkSize(
    bulk_size: c_int,
    prev_bulk_size: *mut c_int,
) -> c_int {
    api_call("MXEngineSetBulkSize", || {
        // SAFETY: API contract: out-parameter.
        let prev = unsafe { args::out(prev_bulk_size, "prev_bulk_size")? };
        let size = count(bulk_size.into(), "bulk_size")?;
        let old = engine()?.set_bulk_size(size)?;
        *prev = c_int::try_from(old).unwrap_or(c_int::MAX);
        Ok(())
    })
}

/// mxrt addition. Creates an engine variable; `*out` is its handle. Free it with
/// MXEngineDeleteVariable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineNewVariable(out: *mut *mut c_void) -> c_int {
    api_call("MXEngineNewVariable", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        *out = handle::into_handle(Var::new().into_inner());
        Ok(())
    })
}

/// mxrt addition. Deletes a variable once every op already pushed on it has finished. The handle
/// is invalid as soon as this returns; using it again is an error (-1), not a crash.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineDeleteVariable(var: *mut c_void) -> c_int {
    api_call("MXEngineDeleteVariable", || {
        let v = Var::from_inner(handle::take::<VarInner>(var, "var")?);
        engine()?.delete_variable(None, Context::cpu(0), v)
    })
}

/// mxrt addition. Blocks until every write pushed to `var` before this call has finished. Returns
/// -1 with the op's message if `var` carries an error not yet reported (which reports it). Must not
/// be called from inside an engine op (-1).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineWaitForVar(var: *mut c_void) -> c_int {
    api_call("MXEngineWaitForVar", || {
        let v = Var::from_inner(handle::borrow::<VarInner>(var, "var")?);
        engine()?.wait_for_var(&v)
    })
}

/// mxrt addition. Blocks until every pushed op has finished; returns -1 with the message of the
/// first failed op whose error no wait has reported yet (all such errors count as reported then).
/// While it waits, the calling thread may run queued CPU ops itself, as a worker would, if they
/// are long enough for that to pay (`MXRT_ENGINE_WAIT_HELPS=0` keeps ops on the engine's threads).
#[unsafe(no_mangle)]
pub extern "C" fn MXEngineWaitForAll() -> c_int {
    api_call("MXEngineWaitForAll", || engine()?.wait_for_all())
}

/// mxrt addition. Writes the number of completed writes to `var` into `*out`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineGetVarVersion(var: *mut c_void, out: *mut u64) -> c_int {
    api_call("MXEngineGetVarVersion", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        *out = Var::from_inner(handle::borrow::<VarInner>(var, "var")?).version();
        Ok(())
    })
}

/// mxrt addition. Completes an async op from (a copy of) the `CallbackOnComplete` its function
/// received; `error` NULL means success, else a message that fails the op. Returns -1 (and changes
/// nothing) if that op was already completed or the struct was not made by mxrt. Thread-safe.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineCallbackInvoke(
    on_complete: *const c_void,
    error: *const c_char,
) -> c_int {
    api_call("MXEngineCallbackInvoke", || {
        // SAFETY: API contract: points to a CallbackOnComplete.
        let cb =
            unsafe { args::reference(on_complete as *const CallbackOnComplete, "on_complete")? };
        if !completion::is_ours(cb) {
            return Err(Error::invalid("on_complete was not made by mxrt"));
        }
        // SAFETY: `error` is NULL or NUL-terminated per this function's contract.
        unsafe { completion::complete(cb.engine, cb.param, error) }
    })
}

/// mxrt addition. Called from inside a running sync function (MXEnginePushSync/SyncND, or an
/// operator's body): marks that op as failed with `msg`; its outputs carry the error to later ops
/// and waits. The function should return normally afterwards. -1 if no sync function is running
/// on this thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineSetOpError(msg: *const c_char) -> c_int {
    api_call("MXEngineSetOpError", || {
        // SAFETY: API contract: NUL-terminated string.
        let msg = unsafe { args::c_str(msg, "msg")? }.to_owned();
        OP_ERROR.with(|e| match &mut *e.borrow_mut() {
            Some(slot) => {
                *slot = Some(msg);
                Ok(())
            }
            None => Err(Error::invalid(
                "no engine sync function is running on this thread (async functions report errors through their completion)",
            )),
        })
    })
}

/// mxrt addition. Creates a reusable operator running `fn` (an async function, as for
/// MXEnginePushAsync) on the given variables; each MXEnginePushOperator runs it once.
/// `deleter(param)` runs when the operator is deleted and its last push has finished (or now, if
/// this call fails). `*out` is its handle; free it with MXEngineDeleteOperator.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineNewOperator(
    fn_: EngineAsyncFunc,
    param: *mut c_void,
    deleter: EngineFuncParamDeleter,
    const_vars: EngineVarHandle,
    num_const: c_int,
    mutable_vars: EngineVarHandle,
    num_mutable: c_int,
    prop: EngineFnPropertyHandle,
    name: *const c_char,
    out: *mut *mut c_void,
) -> c_int {
    api_call("MXEngineNewOperator", || {
        let param = CParam::new(param, deleter);
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        // SAFETY: API contract for the variable arrays.
        let (c, m) = unsafe {
            var_lists(
                const_vars,
                num_const,
                "const_vars",
                mutable_vars,
                num_mutable,
                "mutable_vars",
            )?
        };
        // SAFETY: API contract.
        let prop = unsafe { prop_arg(prop)? };
        // SAFETY: API contract.
        let name = unsafe { args::opt_c_str(name, "name")? };
        let f = fn_.ok_or_else(|| Error::invalid("fn is NULL"))?;
        let op = engine()?.new_operator(Arc::new(c_async_body(f, param)), &c, &m, prop, name)?;
        *out = handle::into_handle(op);
        Ok(())
    })
}

/// mxrt addition. Pushes one run of an operator on `ctx` with `priority`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEnginePushOperator(
    op: *mut c_void,
    ctx: ContextHandle,
    priority: c_int,
) -> c_int {
    api_call("MXEnginePushOperator", || {
        let op = handle::borrow::<Operator>(op, "op")?;
        // SAFETY: API contract.
        let ctx = unsafe { context_arg(ctx, "ctx")? };
        engine()?.push_operator(&op, ctx, priority)
    })
}

/// mxrt addition. Deletes an operator after its pending pushes; the handle is invalid afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXEngineDeleteOperator(op: *mut c_void) -> c_int {
    api_call("MXEngineDeleteOperator", || {
        let op = handle::take::<Operator>(op, "op")?;
        engine()?.delete_operator(op)
    })
}
