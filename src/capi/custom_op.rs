//! Custom operators (MXNet 1.9.1's `MXCustomOpRegister`): the callback protocol between a front
//! end (Python's `mx.operator.register`) and the core's `Custom` operator
//! (`operator::custom`).
//!
//! A registration stores the front end's property creator. For each `Custom` invoke the core
//! calls the creator with the invoke's parameters; it fills an `MXCallbackList` with the
//! property's callbacks (`CustomOpPropCallbacks` order), and `create_operator` fills another
//! with the operator's (`CustomOpCallbacks` order). [`CProp`] and [`COp`] call them; their
//! drops call the delete callbacks, once each. A callback returning 0 has failed (Python prints
//! the exception and returns 0): the core call fails with a message naming the callback.

use super::args;
use super::error::api_call;
use super::ndarray::new_handle;
use super::operator::{CustomOpPropCreator, MXCallbackList};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::operator::custom::{self, CustomOp, CustomProp};
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::Arc;

/// MXNet's `struct MXCallbackList` as it is laid out in memory (the header keeps it opaque, so
/// that `mxrt.h` and MXNet's `c_api.h`, which defines it, can be included together).
#[repr(C)]
pub(crate) struct CallbackLayout {
    pub num_callbacks: c_int,
    pub callbacks: *mut Option<unsafe extern "C" fn() -> c_int>,
    pub contexts: *mut *mut c_void,
}

impl CallbackLayout {
    fn empty() -> Self {
        CallbackLayout {
            num_callbacks: 0,
            callbacks: std::ptr::null_mut(),
            contexts: std::ptr::null_mut(),
        }
    }
}

// `CustomOpPropCallbacks`
const PROP_DELETE: usize = 0;
const PROP_LIST_ARGUMENTS: usize = 1;
const PROP_LIST_OUTPUTS: usize = 2;
const PROP_LIST_AUXILIARY_STATES: usize = 3;
const PROP_INFER_SHAPE: usize = 4;
const PROP_DECLARE_BACKWARD_DEPENDENCY: usize = 5;
const PROP_CREATE_OPERATOR: usize = 6;
const PROP_INFER_TYPE: usize = 7;
const PROP_INFER_STORAGE_TYPE: usize = 8;
// `CustomOpCallbacks`
const OP_DELETE: usize = 0;
const OP_FORWARD: usize = 1;
const OP_BACKWARD: usize = 2;

type DelFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type ListFn = unsafe extern "C" fn(*mut *mut *mut c_char, *mut c_void) -> c_int;
type InferShapeFn = unsafe extern "C" fn(c_int, *mut c_int, *mut *mut c_int, *mut c_void) -> c_int;
type InferTypeFn = unsafe extern "C" fn(c_int, *mut c_int, *mut c_void) -> c_int;
type BwdDepFn = unsafe extern "C" fn(
    *const c_int,
    *const c_int,
    *const c_int,
    *mut c_int,
    *mut *mut c_int,
    *mut c_void,
) -> c_int;
type CreateFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    *mut *mut c_uint,
    *const c_int,
    *const c_int,
    *mut CallbackLayout,
    *mut c_void,
) -> c_int;
type FbFn = unsafe extern "C" fn(
    c_int,
    *mut *mut c_void,
    *mut c_int,
    *const c_int,
    c_int,
    *mut c_void,
) -> c_int;

/// A callback list copied out of the front end's `MXCallbackList`.
struct Callbacks {
    fns: Vec<Option<unsafe extern "C" fn() -> c_int>>,
    ctxs: Vec<*mut c_void>,
}

impl Callbacks {
    /// Copies `list` (filled by the front end).
    ///
    /// # Safety
    /// `list`'s arrays hold `num_callbacks` entries each, as MXNet's protocol requires.
    unsafe fn read(list: &CallbackLayout, what: &str) -> Result<Callbacks> {
        let n = args::count(
            i64::from(list.num_callbacks),
            &format!("{what}: num_callbacks"),
        )?;
        if n == 0 {
            return Ok(Callbacks {
                fns: Vec::new(),
                ctxs: Vec::new(),
            });
        }
        // SAFETY: per the contract.
        let (fns, ctxs) = unsafe {
            (
                args::slice(
                    list.callbacks.cast_const(),
                    n,
                    &format!("{what}: callbacks"),
                )?,
                args::slice(list.contexts.cast_const(), n, &format!("{what}: contexts"))?,
            )
        };
        Ok(Callbacks {
            fns: fns.to_vec(),
            ctxs: ctxs.to_vec(),
        })
    }

    /// Callback `i` and its context, if the list has it.
    fn get(&self, i: usize) -> Option<(unsafe extern "C" fn() -> c_int, *mut c_void)> {
        Some((self.fns.get(i).copied().flatten()?, self.ctxs[i]))
    }

    /// Callback `i`, which the protocol requires (`name` for the message).
    fn require(
        &self,
        i: usize,
        name: &str,
    ) -> Result<(unsafe extern "C" fn() -> c_int, *mut c_void)> {
        self.get(i).ok_or_else(|| {
            Error::invalid(format!(
                "the callback list has no {name} callback (entry {i} of {})",
                self.fns.len()
            ))
        })
    }

    /// Calls the delete callback at `i`, if any.
    fn delete(&self, i: usize) {
        if let Some((f, ctx)) = self.get(i) {
            // SAFETY: MXNet's protocol: the delete entries are `CustomOpDelFunc`s, called once
            // (the owner of this list calls it from its drop).
            let f: DelFn = unsafe { std::mem::transmute(f) };
            // SAFETY: the callback's contract: its own context.
            unsafe { f(ctx) };
        }
    }
}

/// A callback's result: nonzero is success.
fn ok(ret: c_int, what: &str) -> Result<()> {
    if ret == 0 {
        Err(Error::invalid(format!(
            "{what} failed: its callback returned 0 (a Python callback prints its exception)"
        )))
    } else {
        Ok(())
    }
}

/// A property object made by a registered creator.
struct CProp {
    cb: Callbacks,
}

// SAFETY: the callbacks and their contexts are the front end's, valid until the delete callback
// runs (MXNet's protocol); MXNet calls them from its own threads too, so they are thread-safe
// (Python's take the GIL).
unsafe impl Send for CProp {}
// SAFETY: as for Send: the callbacks are only called, never mutated through.
unsafe impl Sync for CProp {}

impl Drop for CProp {
    fn drop(&mut self) {
        self.cb.delete(PROP_DELETE);
    }
}

impl CProp {
    fn list(&self, i: usize, name: &str) -> Result<Vec<String>> {
        let (f, ctx) = self.cb.require(i, name)?;
        // SAFETY: MXNet's protocol: the list entries are `CustomOpListFunc`s.
        let f: ListFn = unsafe { std::mem::transmute(f) };
        let mut out: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: the callback's contract: an out-parameter for a NULL-terminated array.
        ok(unsafe { f(&mut out, ctx) }, name)?;
        if out.is_null() {
            return Err(Error::invalid(format!("{name} returned a NULL list")));
        }
        let mut names = Vec::new();
        for i in 0.. {
            // SAFETY: the callback's contract: a NULL-terminated array of C strings, valid until
            // its next call (this thread reads it now).
            let p = unsafe { *out.add(i) };
            if p.is_null() {
                break;
            }
            // SAFETY: as above: a NUL-terminated string.
            names.push(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned());
        }
        Ok(names)
    }

    /// Calls a `CustomOpInferTypeFunc`-shaped callback (dtypes, storage types) at `i`, or
    /// `None` when the list is too short to have it.
    fn infer_codes(&self, i: usize, name: &str, mut codes: Vec<i32>) -> Result<Option<Vec<i32>>> {
        let Some((f, ctx)) = self.cb.get(i) else {
            return Ok(None);
        };
        // SAFETY: MXNet's protocol: entries 7 and 8 are `CustomOpInferTypeFunc` and
        // `CustomOpInferStorageTypeFunc`, which have the same signature.
        let f: InferTypeFn = unsafe { std::mem::transmute(f) };
        // SAFETY: the callback's contract: `codes.len()` ints it may overwrite.
        ok(
            unsafe { f(codes.len() as c_int, codes.as_mut_ptr(), ctx) },
            name,
        )?;
        Ok(Some(codes))
    }
}

impl CustomProp for CProp {
    fn list_arguments(&self) -> Result<Vec<String>> {
        self.list(PROP_LIST_ARGUMENTS, "list_arguments")
    }
    fn list_outputs(&self) -> Result<Vec<String>> {
        self.list(PROP_LIST_OUTPUTS, "list_outputs")
    }
    fn list_auxiliary_states(&self) -> Result<Vec<String>> {
        self.list(PROP_LIST_AUXILIARY_STATES, "list_auxiliary_states")
    }

    fn infer_shape(&self, shapes: Vec<Vec<i64>>) -> Result<Vec<Vec<i64>>> {
        let (f, ctx) = self.cb.require(PROP_INFER_SHAPE, "infer_shape")?;
        // SAFETY: MXNet's protocol: entry 4 is a `CustomOpInferShapeFunc`.
        let f: InferShapeFn = unsafe { std::mem::transmute(f) };
        let mut bufs: Vec<Vec<c_int>> = shapes
            .iter()
            .map(|s| s.iter().map(|&d| d as c_int).collect())
            .collect();
        let mut ndims: Vec<c_int> = shapes.iter().map(|s| s.len() as c_int).collect();
        let mut ptrs: Vec<*mut c_int> = bufs
            .iter_mut()
            .map(|b| {
                if b.is_empty() {
                    std::ptr::null_mut()
                } else {
                    b.as_mut_ptr()
                }
            })
            .collect();
        // SAFETY: the callback's contract: `n` dims and `n` shape pointers, which it replaces
        // with its own arrays (valid until its next call; read below on this thread).
        let ret = unsafe {
            f(
                ptrs.len() as c_int,
                ndims.as_mut_ptr(),
                ptrs.as_mut_ptr(),
                ctx,
            )
        };
        ok(ret, "infer_shape")?;
        let mut out = Vec::with_capacity(ptrs.len());
        for (i, (&p, &n)) in ptrs.iter().zip(&ndims).enumerate() {
            let n = usize::try_from(n).map_err(|_| {
                Error::invalid(format!("infer_shape returned {n} dimensions for entry {i}"))
            })?;
            if n == 0 {
                out.push(Vec::new());
                continue;
            }
            // SAFETY: the callback's contract: entry `i` points at `n` ints.
            let dims =
                unsafe { args::slice(p.cast_const(), n, &format!("infer_shape: shape {i}"))? };
            out.push(dims.iter().map(|&d| i64::from(d)).collect());
        }
        Ok(out)
    }

    fn infer_type(&self, types: Vec<i32>) -> Result<Option<Vec<i32>>> {
        self.infer_codes(PROP_INFER_TYPE, "infer_type", types)
    }

    fn infer_storage_type(&self, stypes: Vec<i32>) -> Result<Option<Vec<i32>>> {
        self.infer_codes(PROP_INFER_STORAGE_TYPE, "infer_storage_type", stypes)
    }

    fn declare_backward_dependency(
        &self,
        out_grad: &[i32],
        in_data: &[i32],
        out_data: &[i32],
    ) -> Result<Vec<i32>> {
        let (f, ctx) = self.cb.require(
            PROP_DECLARE_BACKWARD_DEPENDENCY,
            "declare_backward_dependency",
        )?;
        // SAFETY: MXNet's protocol: entry 5 is a `CustomOpBwdDepFunc`.
        let f: BwdDepFn = unsafe { std::mem::transmute(f) };
        let mut num: c_int = 0;
        let mut deps: *mut c_int = std::ptr::null_mut();
        // SAFETY: the callback's contract: the three id arrays (as many as the property lists
        // outputs, arguments, outputs) and two out-parameters.
        let ret = unsafe {
            f(
                out_grad.as_ptr(),
                in_data.as_ptr(),
                out_data.as_ptr(),
                &mut num,
                &mut deps,
                ctx,
            )
        };
        ok(ret, "declare_backward_dependency")?;
        let n = args::count(i64::from(num), "declare_backward_dependency: num_deps")?;
        if n == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the callback's contract: `num` ids at `deps`, valid until its next call.
        Ok(
            unsafe { args::slice(deps.cast_const(), n, "declare_backward_dependency: deps")? }
                .to_vec(),
        )
    }

    fn create_operator(
        &self,
        ctx_name: &str,
        shapes: &[Vec<i64>],
        dtypes: &[i32],
    ) -> Result<Box<dyn CustomOp>> {
        let (f, ctx) = self.cb.require(PROP_CREATE_OPERATOR, "create_operator")?;
        // SAFETY: MXNet's protocol: entry 6 is a `CustomOpCreateFunc`.
        let f: CreateFn = unsafe { std::mem::transmute(f) };
        let name = CString::new(ctx_name).map_err(|_| Error::invalid("context name has a NUL"))?;
        let mut bufs: Vec<Vec<c_uint>> = shapes
            .iter()
            .map(|s| s.iter().map(|&d| d as c_uint).collect())
            .collect();
        let mut ptrs: Vec<*mut c_uint> = bufs.iter_mut().map(|b| b.as_mut_ptr()).collect();
        let ndims: Vec<c_int> = shapes.iter().map(|s| s.len() as c_int).collect();
        let mut list = CallbackLayout::empty();
        // SAFETY: the callback's contract: `n` shapes with their dims and dtypes, and the list
        // it fills.
        let ret = unsafe {
            f(
                name.as_ptr(),
                ptrs.len() as c_int,
                ptrs.as_mut_ptr(),
                ndims.as_ptr(),
                dtypes.as_ptr(),
                &mut list,
                ctx,
            )
        };
        // SAFETY: a list the callback filled (or left empty) under MXNet's protocol.
        let cb = unsafe { Callbacks::read(&list, "create_operator's callback list")? };
        let op = COp { cb };
        ok(ret, "create_operator")?;
        op.cb.require(OP_FORWARD, "forward")?;
        op.cb.require(OP_BACKWARD, "backward")?;
        Ok(Box::new(op))
    }
}

/// An operator made by a property's `create_operator`.
struct COp {
    cb: Callbacks,
}

// SAFETY: as for CProp.
unsafe impl Send for COp {}
// SAFETY: as for CProp.
unsafe impl Sync for COp {}

impl Drop for COp {
    fn drop(&mut self) {
        self.cb.delete(OP_DELETE);
    }
}

impl COp {
    fn call(
        &self,
        i: usize,
        name: &str,
        arrays: Vec<NDArray>,
        tags: &[i32],
        reqs: &[i32],
        is_train: bool,
    ) -> Result<()> {
        let (f, ctx) = self.cb.require(i, name)?;
        // SAFETY: MXNet's protocol: entries 1 and 2 are `CustomOpFBFunc`s.
        let f: FbFn = unsafe { std::mem::transmute(f) };
        // new handles, owned by the callee (the front end frees them), as in MXNet
        let mut ptrs: Vec<*mut c_void> = arrays.into_iter().map(new_handle).collect();
        let mut tags = tags.to_vec();
        // SAFETY: the callback's contract: `n` handles and tags, one request per written array.
        let ret = unsafe {
            f(
                ptrs.len() as c_int,
                ptrs.as_mut_ptr(),
                tags.as_mut_ptr(),
                reqs.as_ptr(),
                c_int::from(is_train),
                ctx,
            )
        };
        ok(ret, name)
    }
}

impl CustomOp for COp {
    fn forward(
        &self,
        arrays: Vec<NDArray>,
        tags: &[i32],
        reqs: &[i32],
        is_train: bool,
    ) -> Result<()> {
        self.call(OP_FORWARD, "forward", arrays, tags, reqs, is_train)
    }
    fn backward(
        &self,
        arrays: Vec<NDArray>,
        tags: &[i32],
        reqs: &[i32],
        is_train: bool,
    ) -> Result<()> {
        self.call(OP_BACKWARD, "backward", arrays, tags, reqs, is_train)
    }
}

/// The registered creator, as the core calls it.
type CreatorFn = unsafe extern "C" fn(
    *const c_char,
    c_int,
    *mut *const c_char,
    *mut *const c_char,
    *mut MXCallbackList,
) -> c_int;

fn make_prop(
    creator: CreatorFn,
    op_type: &str,
    kwargs: &[(&str, &str)],
) -> Result<Box<dyn CustomProp>> {
    let cstr = |s: &str, what: &str| {
        CString::new(s).map_err(|_| Error::invalid(format!("{what} '{s}' contains a NUL byte")))
    };
    let name = cstr(op_type, "op_type")?;
    let keys = kwargs
        .iter()
        .map(|(k, _)| cstr(k, "parameter"))
        .collect::<Result<Vec<_>>>()?;
    let vals = kwargs
        .iter()
        .map(|(_, v)| cstr(v, "parameter value"))
        .collect::<Result<Vec<_>>>()?;
    let mut kp: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let mut vp: Vec<*const c_char> = vals.iter().map(|v| v.as_ptr()).collect();
    let mut list = CallbackLayout::empty();
    // SAFETY: the creator's contract (MXNet's `CustomOpPropCreator`): the op type, `n` keys and
    // values, and the list it fills.
    let ret = unsafe {
        creator(
            name.as_ptr(),
            kp.len() as c_int,
            kp.as_mut_ptr(),
            vp.as_mut_ptr(),
            (&mut list as *mut CallbackLayout).cast(),
        )
    };
    // SAFETY: a list the creator filled (or left empty) under MXNet's protocol.
    let cb = unsafe { Callbacks::read(&list, "the creator's callback list")? };
    // from here the property's delete callback runs exactly once, when `prop` drops
    let prop = CProp { cb };
    ok(ret, "the property creator")?;
    Ok(Box::new(prop))
}

/// Registers a custom operator's property creator under `op_type` (MXNet 1.9.1;
/// `mx.operator.register`). Each `Custom` invoke with `op_type=<name>` calls the creator with
/// the invoke's other parameters; a later registration of the same name replaces it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCustomOpRegister(
    op_type: *const c_char,
    creator: CustomOpPropCreator,
) -> c_int {
    api_call("MXCustomOpRegister", || {
        // SAFETY: API contract: a C string.
        let name = unsafe { args::c_str(op_type, "op_type")? };
        if name.is_empty() {
            return Err(Error::invalid("op_type is empty"));
        }
        let creator: CreatorFn = creator.ok_or_else(|| Error::invalid("creator is NULL"))?;
        custom::register_creator(
            name,
            Arc::new(move |op_type: &str, kwargs: &[(&str, &str)]| {
                make_prop(creator, op_type, kwargs)
            }),
        );
        Ok(())
    })
}
