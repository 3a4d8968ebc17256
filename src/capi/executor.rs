//! The Executor API of MXNet 1.9.1 (`Symbol.bind`, `simple_bind`, the Module API): a symbol
//! bound to argument, gradient and auxiliary arrays, run forward and backward. The executor
//! itself is `crate::graph::exec::Executor`.
//!
//! Handle arrays and strings a function returns live in this thread's buffers until its next
//! call of a function returning the same kind, as in MXNet.

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::ndarray::new_handle;
use super::symbol::{self, sym};
use super::types::{NDArrayHandle, SymbolHandle};
use crate::autograd::GradReq;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::exec::{Executor, Monitor};
use crate::graph::{InputKind, Symbol};
use crate::ndarray::NDArray;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// An executor.
pub type ExecutorHandle = *mut c_void;

/// Called per op output of a monitored forward: `(name, new array handle, callback_handle)`.
pub type ExecutorMonitorCallback =
    Option<unsafe extern "C" fn(*const c_char, NDArrayHandle, *mut c_void)>;

/// What an ExecutorHandle points to.
pub(crate) struct CExecutor(Mutex<Executor>);

impl Handle for CExecutor {
    const KIND: HandleKind = HandleKind::Executor;
}

fn exec(h: ExecutorHandle, arg: &str) -> Result<Arc<CExecutor>> {
    handle::borrow::<CExecutor>(h, arg)
}

/// This thread's returned values.
#[derive(Default)]
struct Returned {
    outputs: Vec<NDArrayHandle>,
    args: Vec<NDArrayHandle>,
    grads: Vec<NDArrayHandle>,
    aux: Vec<NDArrayHandle>,
    buffer_names: Vec<CString>,
    buffer_name_ptrs: Vec<*const c_char>,
    buffer_handles: Vec<NDArrayHandle>,
    text: CString,
}

thread_local! {
    // boxed: the library's thread-locals live in the static TLS block, which is small
    static RETURNED: RefCell<Option<Box<Returned>>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's returned values.
fn with_returned<R>(f: impl FnOnce(&mut Returned) -> R) -> R {
    RETURNED.with(|r| f(r.borrow_mut().get_or_insert_with(Box::default)))
}

fn ctx_of(dev_type: c_int, dev_id: c_int) -> Result<Context> {
    Context::from_codes(dev_type, dev_id).map_err(|e| e.context("dev_type/dev_id"))
}

/// MXNet's group-to-context map: `n` group names with their device codes.
///
/// # Safety
/// `keys`, `dev_types` and `dev_ids` each hold `n` elements (or `n` is 0).
unsafe fn group2ctx(
    n: u32,
    keys: *const *const c_char,
    dev_types: *const c_int,
    dev_ids: *const c_int,
) -> Result<Vec<(String, Context)>> {
    let n = n as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: API contract: `n` NUL-terminated names and `n` codes of each kind.
    let (names, types, ids) = unsafe {
        (
            strings(keys, n, "map_keys")?,
            args::slice(dev_types, n, "map_dev_types")?,
            args::slice(dev_ids, n, "map_dev_ids")?,
        )
    };
    names
        .into_iter()
        .zip(types.iter().zip(ids))
        .map(|(name, (&t, &i))| {
            let ctx = Context::from_codes(t, i)
                .map_err(|e| e.context(format!("map_dev_types/map_dev_ids of group {name}")))?;
            Ok((name, ctx))
        })
        .collect()
}

/// Looks up `n` NDArray handles; NULL entries are `None` when `allow_null`.
///
/// # Safety
/// `ptr` is NULL or points to `n` handles.
unsafe fn arrays(
    ptr: *const NDArrayHandle,
    n: usize,
    name: &str,
    allow_null: bool,
) -> Result<Vec<Option<NDArray>>> {
    // SAFETY: per the contract.
    let hs = unsafe { args::slice(ptr, n, name)? };
    hs.iter()
        .enumerate()
        .map(|(i, &h)| {
            if h.is_null() && allow_null {
                Ok(None)
            } else {
                handle::borrow_at::<NDArray>(h, name, i).map(|a| Some(NDArray::clone(&a)))
            }
        })
        .collect()
}

/// # Safety
/// MXExecutorBindEX's contract.
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn bind(
    symbol_handle: SymbolHandle,
    dev_type: c_int,
    dev_id: c_int,
    len: u32,
    in_args: *mut NDArrayHandle,
    arg_grad_store: *mut NDArrayHandle,
    grad_req_type: *mut u32,
    aux_states_len: u32,
    aux_states: *mut NDArrayHandle,
    groups: Vec<(String, Context)>,
    shared: Option<Arc<CExecutor>>,
    out: *mut ExecutorHandle,
) -> Result<()> {
    let s = sym(symbol_handle, "symbol_handle")?;
    let ctx = ctx_of(dev_type, dev_id)?;
    let n = len as usize;
    // SAFETY: API contract: arrays of `len` / `aux_states_len` elements.
    let (args_, grads, reqs, aux, out) = unsafe {
        (
            arrays(in_args, n, "in_args", false)?,
            if arg_grad_store.is_null() {
                vec![None; n]
            } else {
                arrays(arg_grad_store, n, "arg_grad_store", true)?
            },
            if grad_req_type.is_null() {
                vec![0; n]
            } else {
                args::slice(grad_req_type.cast_const(), n, "grad_req_type")?.to_vec()
            },
            arrays(aux_states, aux_states_len as usize, "aux_states", false)?,
            args::out(out, "out")?,
        )
    };
    let mut req_list = Vec::with_capacity(n);
    for (i, &r) in reqs.iter().enumerate() {
        let req = GradReq::from_code(r).ok_or_else(|| {
            Error::invalid(format!(
                "grad_req_type[{i}] = {r} is not a request code (0, 1, 2, 3)"
            ))
        })?;
        req_list.push(if grads[i].is_none() {
            GradReq::Null
        } else {
            req
        });
    }
    let mut e = Executor::bind(
        &s,
        ctx,
        args_.into_iter().map(|a| a.expect("non-NULL")).collect(),
        grads,
        req_list,
        aux.into_iter().map(|a| a.expect("non-NULL")).collect(),
    )?;
    e.set_group2ctx(groups, false)?;
    if let Some(se) = shared {
        e.share_pool_from(&se.0.lock());
    }
    *out = handle::into_handle(Arc::new(CExecutor(Mutex::new(e))));
    Ok(())
}

/// Binds `symbol_handle` to `in_args` (in `list_arguments()` order, used directly, not
/// copied), gradient arrays (NULL entries: no gradient) with request codes (0 null, 1 write,
/// 3 add) and auxiliary states. Ops of a `ctx_group` named in the group-to-context map run on
/// its device (their inputs copied there). With `shared_exec`, planned forwards draw their
/// scratch memory from that executor's pool, as MXNet's draw from its memory pool.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorBindEX(
    symbol_handle: SymbolHandle,
    dev_type: c_int,
    dev_id: c_int,
    num_map_keys: u32,
    map_keys: *mut *const c_char,
    map_dev_types: *const c_int,
    map_dev_ids: *const c_int,
    len: u32,
    in_args: *mut NDArrayHandle,
    arg_grad_store: *mut NDArrayHandle,
    grad_req_type: *mut u32,
    aux_states_len: u32,
    aux_states: *mut NDArrayHandle,
    shared_exec: ExecutorHandle,
    out: *mut ExecutorHandle,
) -> c_int {
    api_call("MXExecutorBindEX", || {
        let shared = if shared_exec.is_null() {
            None
        } else {
            Some(exec(shared_exec, "shared_exec")?)
        };
        // SAFETY: forwarded API contract.
        unsafe {
            let groups = group2ctx(
                num_map_keys,
                map_keys.cast_const(),
                map_dev_types,
                map_dev_ids,
            )?;
            bind(
                symbol_handle,
                dev_type,
                dev_id,
                len,
                in_args,
                arg_grad_store,
                grad_req_type,
                aux_states_len,
                aux_states,
                groups,
                shared,
                out,
            )
        }
    })
}

/// [`MXExecutorBindEX`] without a shared executor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorBindX(
    symbol_handle: SymbolHandle,
    dev_type: c_int,
    dev_id: c_int,
    num_map_keys: u32,
    map_keys: *mut *const c_char,
    map_dev_types: *const c_int,
    map_dev_ids: *const c_int,
    len: u32,
    in_args: *mut NDArrayHandle,
    arg_grad_store: *mut NDArrayHandle,
    grad_req_type: *mut u32,
    aux_states_len: u32,
    aux_states: *mut NDArrayHandle,
    out: *mut ExecutorHandle,
) -> c_int {
    api_call("MXExecutorBindX", || {
        // SAFETY: forwarded API contract.
        unsafe {
            let groups = group2ctx(
                num_map_keys,
                map_keys.cast_const(),
                map_dev_types,
                map_dev_ids,
            )?;
            bind(
                symbol_handle,
                dev_type,
                dev_id,
                len,
                in_args,
                arg_grad_store,
                grad_req_type,
                aux_states_len,
                aux_states,
                groups,
                None,
                out,
            )
        }
    })
}

/// [`MXExecutorBindEX`] without a group-to-context map or shared executor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorBind(
    symbol_handle: SymbolHandle,
    dev_type: c_int,
    dev_id: c_int,
    len: u32,
    in_args: *mut NDArrayHandle,
    arg_grad_store: *mut NDArrayHandle,
    grad_req_type: *mut u32,
    aux_states_len: u32,
    aux_states: *mut NDArrayHandle,
    out: *mut ExecutorHandle,
) -> c_int {
    api_call("MXExecutorBind", || {
        // SAFETY: forwarded API contract.
        unsafe {
            bind(
                symbol_handle,
                dev_type,
                dev_id,
                len,
                in_args,
                arg_grad_store,
                grad_req_type,
                aux_states_len,
                aux_states,
                Vec::new(),
                None,
                out,
            )
        }
    })
}

/// Reads `n` C strings.
///
/// # Safety
/// `ptr` is NULL or points to `n` pointers, each NULL or a C string.
unsafe fn strings(ptr: *const *const c_char, n: usize, name: &str) -> Result<Vec<String>> {
    // SAFETY: per the contract.
    let ps = unsafe { args::slice(ptr, n, name)? };
    ps.iter()
        .enumerate()
        // SAFETY: per the contract.
        .map(|(i, &p)| unsafe { args::c_str_at(p, name, i) }.map(str::to_owned))
        .collect()
}

/// Reads CSR-style shapes: `names[i]` has dims `data[idx[i]..idx[i + 1]]`.
///
/// # Safety
/// `names` points to `n` C strings, `idx` to `n + 1` offsets, `data` to `idx[n]` dims.
unsafe fn shapes<D: Copy + Into<i64>>(
    n: u32,
    names: *const *const c_char,
    data: *const D,
    idx: *const u32,
) -> Result<Vec<(String, Vec<i64>)>> {
    let n = n as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: per the contract.
    let names = unsafe { strings(names, n, "provided_arg_shape_names")? };
    // SAFETY: per the contract.
    let idx = unsafe { args::slice(idx, n + 1, "provided_arg_shape_idx")? };
    let total = idx[n] as usize;
    if idx.windows(2).any(|w| w[0] > w[1]) || total > (1 << 24) {
        return Err(Error::invalid(
            "provided_arg_shape_idx: offsets are not increasing",
        ));
    }
    // SAFETY: per the contract.
    let data = unsafe { args::slice(data, total, "provided_arg_shape_data")? };
    let mut out: Vec<(String, Vec<i64>)> = Vec::with_capacity(n);
    for (i, name) in names.into_iter().enumerate() {
        if out.iter().any(|(m, _)| *m == name) {
            return Err(Error::invalid(format!(
                "Duplicate shapes are provided for argument {name} in simple_bind"
            )));
        }
        let dims = data[idx[i] as usize..idx[i + 1] as usize]
            .iter()
            .map(|&d| d.into())
            .collect();
        out.push((name, dims));
    }
    Ok(out)
}

/// Hands a new executor to C: its arrays through the out-parameters, then its handle in `out`.
///
/// # Safety
/// The out-parameters are NULL or valid for writes.
unsafe fn return_executor(
    e: Executor,
    num_in_args: *mut u32,
    in_args: *mut *mut NDArrayHandle,
    arg_grads: *mut *mut NDArrayHandle,
    num_aux_states: *mut u32,
    aux_states: *mut *mut NDArrayHandle,
    out: *mut ExecutorHandle,
) -> Result<()> {
    // SAFETY: per the contract.
    let (num_in, ins, grads, num_aux, aux, out) = unsafe {
        (
            args::out(num_in_args, "num_in_args")?,
            args::out(in_args, "in_args")?,
            args::out(arg_grads, "arg_grads")?,
            args::out(num_aux_states, "num_aux_states")?,
            args::out(aux_states, "aux_states")?,
            args::out(out, "out")?,
        )
    };
    with_returned(|r| {
        r.args = e.args.iter().cloned().map(new_handle).collect();
        r.grads = e
            .grads
            .iter()
            .map(|g| g.clone().map_or(std::ptr::null_mut(), new_handle))
            .collect();
        r.aux = e.aux.iter().cloned().map(new_handle).collect();
        *num_in = r.args.len() as u32;
        *ins = r.args.as_mut_ptr();
        *grads = r.grads.as_mut_ptr();
        *num_aux = r.aux.len() as u32;
        *aux = r.aux.as_mut_ptr();
    });
    *out = handle::into_handle(Arc::new(CExecutor(Mutex::new(e))));
    Ok(())
}

/// The grad_req encoding of simple_bind (see MXNet's `MXExecutorSimpleBindEx`).
fn req_of(s: &str) -> Result<GradReq> {
    match s {
        "null" => Ok(GradReq::Null),
        "write" => Ok(GradReq::Write),
        "add" => Ok(GradReq::Add),
        _ => Err(Error::invalid(format!(
            "grad_req={s} is not a valid input in simple_bind; only 'null', 'write', and 'add' \
             are supported"
        ))),
    }
}

/// # Safety
/// MXExecutorSimpleBindEx's contract, with dims of type `D`.
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn simple_bind<D: Copy + Into<i64>>(
    symbol_handle: SymbolHandle,
    dev_type: c_int,
    dev_id: c_int,
    groups: Vec<(String, Context)>,
    provided_grad_req_list_len: u32,
    provided_grad_req_names: *const *const c_char,
    provided_grad_req_types: *const *const c_char,
    num_provided_arg_shapes: u32,
    provided_arg_shape_names: *const *const c_char,
    provided_arg_shape_data: *const D,
    provided_arg_shape_idx: *const u32,
    num_provided_arg_dtypes: u32,
    provided_arg_dtype_names: *const *const c_char,
    provided_arg_dtypes: *const c_int,
    num_provided_arg_stypes: u32,
    provided_arg_stype_names: *const *const c_char,
    provided_arg_stypes: *const c_int,
    num_shared_arg_names: u32,
    shared_arg_name_list: *const *const c_char,
    shared_buffer_len: *mut c_int,
    shared_buffer_name_list: *const *const c_char,
    shared_buffer_handle_list: *mut NDArrayHandle,
    updated_shared_buffer_name_list: *mut *mut *const c_char,
    updated_shared_buffer_handle_list: *mut *mut NDArrayHandle,
    num_in_args: *mut u32,
    in_args: *mut *mut NDArrayHandle,
    arg_grads: *mut *mut NDArrayHandle,
    num_aux_states: *mut u32,
    aux_states: *mut *mut NDArrayHandle,
    shared_exec_handle: ExecutorHandle,
    out: *mut ExecutorHandle,
) -> Result<()> {
    let s = sym(symbol_handle, "symbol_handle")?;
    let ctx = ctx_of(dev_type, dev_id)?;
    let arg_names = s.input_names(InputKind::ReadOnly);
    // grad requests
    let n_req = provided_grad_req_list_len as usize;
    let reqs: Vec<(String, GradReq)> = if provided_grad_req_types.is_null() {
        Vec::new()
    } else if n_req == 0 {
        // SAFETY: API contract: one string.
        let t = unsafe { strings(provided_grad_req_types, 1, "provided_grad_req_types")? };
        let r = req_of(&t[0])?;
        arg_names.iter().map(|n| (n.clone(), r)).collect()
    } else {
        // SAFETY: API contract: `n_req` strings.
        let types = unsafe { strings(provided_grad_req_types, n_req, "provided_grad_req_types")? };
        if provided_grad_req_names.is_null() {
            if n_req != arg_names.len() {
                return Err(Error::invalid(format!(
                    "provided_grad_req_types: {n_req} requests given for {} arguments",
                    arg_names.len()
                )));
            }
            arg_names
                .iter()
                .zip(&types)
                .map(|(n, t)| Ok((n.clone(), req_of(t)?)))
                .collect::<Result<_>>()?
        } else {
            // SAFETY: API contract: `n_req` strings.
            let names =
                unsafe { strings(provided_grad_req_names, n_req, "provided_grad_req_names")? };
            names
                .into_iter()
                .zip(&types)
                .map(|(n, t)| Ok((n, req_of(t)?)))
                .collect::<Result<_>>()?
        }
    };
    // SAFETY: API contract for the shape arrays.
    let shape_list = unsafe {
        shapes(
            num_provided_arg_shapes,
            provided_arg_shape_names,
            provided_arg_shape_data,
            provided_arg_shape_idx,
        )?
    };
    let n_dt = num_provided_arg_dtypes as usize;
    let mut dtypes = Vec::with_capacity(n_dt);
    if !provided_arg_dtypes.is_null() && n_dt > 0 {
        // SAFETY: API contract: `n_dt` names and codes.
        let (names, codes) = unsafe {
            (
                strings(provided_arg_dtype_names, n_dt, "provided_arg_dtype_names")?,
                args::slice(provided_arg_dtypes, n_dt, "provided_arg_dtypes")?,
            )
        };
        for (n, &c) in names.into_iter().zip(codes) {
            dtypes.push((
                n,
                DType::from_code(c).map_err(|e| e.context("provided_arg_dtypes"))?,
            ));
        }
    }
    let n_st = num_provided_arg_stypes as usize;
    if !provided_arg_stypes.is_null() && n_st > 0 {
        // SAFETY: API contract: `n_st` names and codes.
        let (names, codes) = unsafe {
            (
                strings(provided_arg_stype_names, n_st, "provided_arg_stype_names")?,
                args::slice(provided_arg_stypes, n_st, "provided_arg_stypes")?,
            )
        };
        if let Some((n, c)) = names.iter().zip(codes).find(|&(_, &c)| c > 0) {
            return Err(Error::not_supported(format!(
                "provided_arg_stypes: argument {n} asks for storage type {c}; mxrt's executor \
                 binds dense arrays only"
            )));
        }
    }
    // SAFETY: API contract.
    let shared_names = unsafe {
        strings(
            shared_arg_name_list,
            num_shared_arg_names as usize,
            "shared_arg_name_list",
        )?
    };
    let shared_exec = if shared_exec_handle.is_null() {
        None
    } else {
        Some(exec(shared_exec_handle, "shared_exec_handle")?)
    };
    // the shared buffer (DataParallelExecutorGroup's shared_data_arrays): the arrays of the
    // arguments that are not shared parameters, and "grad of <name>" for their gradients,
    // reused when they fit and added when new, as MXNet's executor does
    // SAFETY: API contract: `shared_buffer_len` is valid for reads and writes.
    let buffer_len = unsafe { args::out(shared_buffer_len, "shared_buffer_len")? };
    let mut buffer: Vec<(String, NDArray)> = Vec::new();
    if *buffer_len > 0 {
        let n = *buffer_len as usize;
        // SAFETY: API contract: `n` names and handles.
        let (names, bufs) = unsafe {
            (
                strings(shared_buffer_name_list, n, "shared_buffer_name_list")?,
                arrays(
                    shared_buffer_handle_list,
                    n,
                    "shared_buffer_handle_list",
                    false,
                )?,
            )
        };
        for (name, a) in names.into_iter().zip(bufs) {
            buffer.push((name, a.expect("non-NULL")));
        }
    }
    let in_buffer = |name: &str| buffer.iter().find(|(n, _)| n == name).map(|(_, a)| a.clone());
    let shared_lookup = |name: &str| -> Option<(NDArray, Option<NDArray>)> {
        if !shared_names.iter().any(|n| n == name) {
            let a = in_buffer(name)?;
            let g = in_buffer(&format!("grad of {name}")).filter(|g| g.shape() == a.shape());
            return Some((a, g));
        }
        let se = shared_exec.as_ref()?;
        let se = se.0.lock();
        if let Some(i) = se.arg_names.iter().position(|n| n == name) {
            return Some((se.args[i].clone(), se.grads[i].clone()));
        }
        let i = se.aux_names.iter().position(|n| n == name)?;
        Some((se.aux[i].clone(), None))
    };
    let req_for = |name: &str| {
        reqs.iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| *r)
            .unwrap_or(GradReq::Null)
    };
    let mut e = Executor::simple_bind(&s, ctx, shape_list, dtypes, &req_for, &shared_lookup)?;
    e.set_group2ctx(groups, true)?;
    if let Some(se) = &shared_exec {
        e.share_pool_from(&se.0.lock());
    }
    if *buffer_len >= 0 {
        let mut put = |name: String, a: &NDArray| {
            // the buffer holds dense arrays only (MXNet's Python checks it)
            if a.stype() != crate::ndarray::format::StorageType::Default {
                return;
            }
            match buffer.iter_mut().find(|(n, _)| *n == name) {
                // a bigger array replaces a smaller one; one at least as big stays
                Some((_, old))
                    if old.shape().iter().product::<i64>() < a.shape().iter().product() =>
                {
                    *old = a.clone()
                }
                Some(_) => {}
                None => buffer.push((name, a.clone())),
            }
        };
        for (i, name) in e.arg_names.iter().enumerate() {
            if shared_names.iter().any(|n| n == name) {
                continue;
            }
            put(name.clone(), &e.args[i]);
            if let Some(g) = &e.grads[i] {
                put(format!("grad of {name}"), g);
            }
        }
        // SAFETY: API contract: out-parameters.
        let (out_names, out_handles) = unsafe {
            (
                args::out(
                    updated_shared_buffer_name_list,
                    "updated_shared_buffer_name_list",
                )?,
                args::out(
                    updated_shared_buffer_handle_list,
                    "updated_shared_buffer_handle_list",
                )?,
            )
        };
        *buffer_len = buffer.len() as c_int;
        with_returned(|r| {
            r.buffer_names = buffer
                .iter()
                .map(|(n, _)| CString::new(n.as_str()).unwrap_or_default())
                .collect();
            r.buffer_name_ptrs = r.buffer_names.iter().map(|c| c.as_ptr()).collect();
            r.buffer_handles = buffer.iter().map(|(_, a)| new_handle(a.clone())).collect();
            *out_names = r.buffer_name_ptrs.as_mut_ptr();
            *out_handles = r.buffer_handles.as_mut_ptr();
        });
    }
    // SAFETY: API contract: out-parameters.
    unsafe {
        return_executor(
            e,
            num_in_args,
            in_args,
            arg_grads,
            num_aux_states,
            aux_states,
            out,
        )
    }
}

macro_rules! simple_bind_fn {
    ($name:ident, $dim:ty, $doc:literal) => {
        #[doc = $doc]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            symbol_handle: SymbolHandle,
            dev_type: c_int,
            dev_id: c_int,
            num_g2c_keys: u32,
            g2c_keys: *mut *const c_char,
            g2c_dev_types: *const c_int,
            g2c_dev_ids: *const c_int,
            provided_grad_req_list_len: u32,
            provided_grad_req_names: *mut *const c_char,
            provided_grad_req_types: *mut *const c_char,
            num_provided_arg_shapes: u32,
            provided_arg_shape_names: *mut *const c_char,
            provided_arg_shape_data: *const $dim,
            provided_arg_shape_idx: *const u32,
            num_provided_arg_dtypes: u32,
            provided_arg_dtype_names: *mut *const c_char,
            provided_arg_dtypes: *const c_int,
            num_provided_arg_stypes: u32,
            provided_arg_stype_names: *mut *const c_char,
            provided_arg_stypes: *const c_int,
            num_shared_arg_names: u32,
            shared_arg_name_list: *mut *const c_char,
            shared_buffer_len: *mut c_int,
            shared_buffer_name_list: *mut *const c_char,
            shared_buffer_handle_list: *mut NDArrayHandle,
            updated_shared_buffer_name_list: *mut *mut *const c_char,
            updated_shared_buffer_handle_list: *mut *mut NDArrayHandle,
            num_in_args: *mut u32,
            in_args: *mut *mut NDArrayHandle,
            arg_grads: *mut *mut NDArrayHandle,
            num_aux_states: *mut u32,
            aux_states: *mut *mut NDArrayHandle,
            shared_exec_handle: ExecutorHandle,
            out: *mut ExecutorHandle,
        ) -> c_int {
            api_call(stringify!($name), || {
                // SAFETY: forwarded API contract.
                unsafe {
                    let groups = group2ctx(
                        num_g2c_keys,
                        g2c_keys.cast_const(),
                        g2c_dev_types,
                        g2c_dev_ids,
                    )?;
                    simple_bind(
                        symbol_handle,
                        dev_type,
                        dev_id,
                        groups,
                        provided_grad_req_list_len,
                        provided_grad_req_names.cast_const(),
                        provided_grad_req_types.cast_const(),
                        num_provided_arg_shapes,
                        provided_arg_shape_names.cast_const(),
                        provided_arg_shape_data,
                        provided_arg_shape_idx,
                        num_provided_arg_dtypes,
                        provided_arg_dtype_names.cast_const(),
                        provided_arg_dtypes,
                        num_provided_arg_stypes,
                        provided_arg_stype_names.cast_const(),
                        provided_arg_stypes,
                        num_shared_arg_names,
                        shared_arg_name_list.cast_const(),
                        shared_buffer_len,
                        shared_buffer_name_list.cast_const(),
                        shared_buffer_handle_list,
                        updated_shared_buffer_name_list,
                        updated_shared_buffer_handle_list,
                        num_in_args,
                        in_args,
                        arg_grads,
                        num_aux_states,
                        aux_states,
                        shared_exec_handle,
                        out,
                    )
                }
            })
        }
    };
}

simple_bind_fn!(
    MXExecutorSimpleBindEx,
    c_int,
    "Binds a symbol to new zero-filled arrays shaped by inference from the given shapes \
     (`simple_bind`, Module): grad requests as a single string, a list or a dict; dtypes by \
     name; parameters named in `shared_arg_name_list` taken from `shared_exec_handle`. Returns \
     the argument, gradient (NULL for request null) and auxiliary arrays as new handles."
);
simple_bind_fn!(
    MXExecutorSimpleBindEx64,
    i64,
    "[`MXExecutorSimpleBindEx`] with 64-bit dimensions."
);
simple_bind_fn!(
    MXExecutorSimpleBind,
    u32,
    "[`MXExecutorSimpleBindEx`] with unsigned 32-bit dimensions (MXNet's deprecated form)."
);

/// Frees an executor (the arrays it handed out stay valid); NULL is a no-op, as in MXNet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorFree(handle: ExecutorHandle) -> c_int {
    api_call("MXExecutorFree", || {
        if handle.is_null() {
            return Ok(());
        }
        handle::take::<CExecutor>(handle, "handle").map(drop)
    })
}

/// Runs the graph on the bound arrays; `is_train` sets training mode for its ops and records
/// the run for a following backward.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorForward(handle: ExecutorHandle, is_train: c_int) -> c_int {
    api_call("MXExecutorForward", || {
        exec(handle, "handle")?.0.lock().forward(is_train != 0)
    })
}

/// # Safety
/// `head_grads` is NULL or points to `len` handles.
unsafe fn backward(
    handle: ExecutorHandle,
    len: u32,
    head_grads: *mut NDArrayHandle,
    is_train: bool,
) -> Result<()> {
    let e = exec(handle, "handle")?;
    // SAFETY: per the contract.
    let heads = unsafe { arrays(head_grads, len as usize, "head_grads", false)? };
    let heads: Vec<NDArray> = heads.into_iter().map(|a| a.expect("non-NULL")).collect();
    e.0.lock().backward(&heads, is_train)
}

/// Computes the gradients of the last training forward into the bound gradient arrays, with
/// `head_grads` one per output (none: only when every output is a loss layer's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorBackwardEx(
    handle: ExecutorHandle,
    len: u32,
    head_grads: *mut NDArrayHandle,
    is_train: c_int,
) -> c_int {
    api_call("MXExecutorBackwardEx", || {
        // SAFETY: forwarded API contract.
        unsafe { backward(handle, len, head_grads, is_train != 0) }
    })
}

/// [`MXExecutorBackwardEx`] in training mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorBackward(
    handle: ExecutorHandle,
    len: u32,
    head_grads: *mut NDArrayHandle,
) -> c_int {
    api_call("MXExecutorBackward", || {
        // SAFETY: forwarded API contract.
        unsafe { backward(handle, len, head_grads, true) }
    })
}

/// New handles to the executor's output arrays (the next forward overwrites them in place).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorOutputs(
    handle: ExecutorHandle,
    out_size: *mut u32,
    out: *mut *mut NDArrayHandle,
) -> c_int {
    api_call("MXExecutorOutputs", || {
        let e = exec(handle, "handle")?;
        // SAFETY: API contract: out-parameters.
        let (size, out) = unsafe { (args::out(out_size, "out_size")?, args::out(out, "out")?) };
        let outs = e.0.lock().outputs.clone();
        with_returned(|r| {
            r.outputs = outs.into_iter().map(new_handle).collect();
            *size = r.outputs.len() as u32;
            *out = r.outputs.as_mut_ptr();
        });
        Ok(())
    })
}

/// The symbol's debug string followed by the memory the executor holds, in MXNet's layout
/// (Module parses the third line from the end).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorPrint(
    handle: ExecutorHandle,
    out_str: *mut *const c_char,
) -> c_int {
    api_call("MXExecutorPrint", || {
        let e = exec(handle, "handle")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_str, "out_str")? };
        let e = e.0.lock();
        // a graph the planner cannot follow (an op without a symbolic gradient) reports its
        // bound arrays instead
        let bytes = e.planned_bytes().unwrap_or_else(|_| e.bytes_allocated());
        let text = format!(
            "{}Total {} MB allocated\nTotal 11 TempSpace resource requested\n",
            e.symbol().debug_string(),
            bytes >> 20
        );
        with_returned(|r| {
            r.text = CString::new(text.replace('\0', "")).unwrap_or_default();
            *out = r.text.as_ptr();
        });
        Ok(())
    })
}

/// A C monitor callback made callable from the executor.
struct MonitorFn(
    unsafe extern "C" fn(*const c_char, NDArrayHandle, *mut c_void),
    usize,
);
// SAFETY: a plain C function pointer and the caller's opaque handle, called on the thread that
// runs the executor's forward, as in MXNet.
unsafe impl Send for MonitorFn {}
// SAFETY: as above; neither is mutated.
unsafe impl Sync for MonitorFn {}

fn set_monitor(
    handle: ExecutorHandle,
    callback: ExecutorMonitorCallback,
    callback_handle: *mut c_void,
    monitor_all: bool,
) -> Result<()> {
    let e = exec(handle, "handle")?;
    let m: Option<Monitor> = callback.map(|f| {
        let f = MonitorFn(f, callback_handle as usize);
        Arc::new(move |name: &str, _op: &str, a: &NDArray| {
            let Ok(n) = CString::new(name) else { return };
            // SAFETY: the caller's callback with a valid string and a new handle it owns.
            unsafe { (f.0)(n.as_ptr(), new_handle(a.clone()), f.1 as *mut c_void) }
        }) as Monitor
    });
    e.0.lock().set_monitor(m, monitor_all);
    Ok(())
}

/// Calls `callback(name, new array handle, callback_handle)` for every op output of later
/// forwards (`<node>_<output>`); a NULL callback removes it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorSetMonitorCallback(
    handle: ExecutorHandle,
    callback: ExecutorMonitorCallback,
    callback_handle: *mut c_void,
) -> c_int {
    api_call("MXExecutorSetMonitorCallback", || {
        set_monitor(handle, callback, callback_handle, false)
    })
}

/// [`MXExecutorSetMonitorCallback`]; with `monitor_all` also every op's inputs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorSetMonitorCallbackEX(
    handle: ExecutorHandle,
    callback: ExecutorMonitorCallback,
    callback_handle: *mut c_void,
    monitor_all: bool,
) -> c_int {
    api_call("MXExecutorSetMonitorCallbackEX", || {
        set_monitor(handle, callback, callback_handle, monitor_all)
    })
}

/// A copy of the graph the executor runs (the bound graph after common-subexpression
/// elimination, as MXNet's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXExecutorGetOptimizedSymbol(
    handle: ExecutorHandle,
    out: *mut SymbolHandle,
) -> c_int {
    api_call("MXExecutorGetOptimizedSymbol", || {
        let e = exec(handle, "handle")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let s: Symbol = e.0.lock().symbol().deep_copy();
        *out = symbol::new_handle(s);
        Ok(())
    })
}

/// # Safety
/// MXExecutorReshapeEx's contract with dims of type `D`.
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn reshape<D: Copy + Into<i64>>(
    partial_shaping: c_int,
    allow_up_sizing: c_int,
    num_provided_arg_shapes: u32,
    provided_arg_shape_names: *const *const c_char,
    provided_arg_shape_data: *const D,
    provided_arg_shape_idx: *const u32,
    num_in_args: *mut u32,
    in_args: *mut *mut NDArrayHandle,
    arg_grads: *mut *mut NDArrayHandle,
    num_aux_states: *mut u32,
    aux_states: *mut *mut NDArrayHandle,
    shared_exec: ExecutorHandle,
    out: *mut ExecutorHandle,
) -> Result<()> {
    let old = exec(shared_exec, "shared_exec")?;
    // SAFETY: API contract for the shape arrays.
    let shapes = unsafe {
        shapes(
            num_provided_arg_shapes,
            provided_arg_shape_names,
            provided_arg_shape_data,
            provided_arg_shape_idx,
        )?
    };
    let e = old
        .0
        .lock()
        .reshape(shapes, partial_shaping != 0, allow_up_sizing != 0)?;
    // SAFETY: API contract: out-parameters.
    unsafe {
        return_executor(
            e,
            num_in_args,
            in_args,
            arg_grads,
            num_aux_states,
            aux_states,
            out,
        )
    }
}

macro_rules! reshape_fn {
    ($name:ident, $dim:ty, $doc:literal) => {
        #[doc = $doc]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            partial_shaping: c_int,
            allow_up_sizing: c_int,
            dev_type: c_int,
            dev_id: c_int,
            num_map_keys: u32,
            map_keys: *mut *const c_char,
            map_dev_types: *const c_int,
            map_dev_ids: *const c_int,
            num_provided_arg_shapes: u32,
            provided_arg_shape_names: *mut *const c_char,
            provided_arg_shape_data: *const $dim,
            provided_arg_shape_idx: *const u32,
            num_in_args: *mut u32,
            in_args: *mut *mut NDArrayHandle,
            arg_grads: *mut *mut NDArrayHandle,
            num_aux_states: *mut u32,
            aux_states: *mut *mut NDArrayHandle,
            shared_exec: ExecutorHandle,
            out: *mut ExecutorHandle,
        ) -> c_int {
            let _ = (
                dev_type,
                dev_id,
                num_map_keys,
                map_keys,
                map_dev_types,
                map_dev_ids,
            );
            api_call(stringify!($name), || {
                // SAFETY: forwarded API contract.
                unsafe {
                    reshape(
                        partial_shaping,
                        allow_up_sizing,
                        num_provided_arg_shapes,
                        provided_arg_shape_names.cast_const(),
                        provided_arg_shape_data,
                        provided_arg_shape_idx,
                        num_in_args,
                        in_args,
                        arg_grads,
                        num_aux_states,
                        aux_states,
                        shared_exec,
                        out,
                    )
                }
            })
        }
    };
}

reshape_fn!(
    MXExecutorReshapeEx,
    c_int,
    "A new executor for new argument shapes that shares `shared_exec`'s arrays where the shape \
     stays (`Executor.reshape`); a changed unspecified argument needs `partial_shaping`, a \
     larger one `allow_up_sizing`. Returns arrays like [`MXExecutorSimpleBindEx`]."
);
reshape_fn!(
    MXExecutorReshape,
    u32,
    "[`MXExecutorReshapeEx`] with unsigned dimensions (MXNet's deprecated form)."
);
