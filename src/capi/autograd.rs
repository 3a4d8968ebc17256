//! Autograd in MXNet 1.9.1's C API: the per-thread recording and training modes, marking
//! variables, backward passes (into the variables' buffers, or as new arrays for
//! `autograd.grad`), gradient buffers and their fresh flags, detaching.

use super::args;
use super::error::api_call;
use super::handle;
use super::ndarray::{nd, new_handle};
use super::types::NDArrayHandle;
use crate::autograd::{self, BackwardArgs, GradReq};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use std::cell::RefCell;
use std::ffi::{c_int, c_void};

thread_local! {
    /// The gradient handles and storage types the last `MXAutogradBackwardEx` of this thread
    /// returned (valid until its next call, as in MXNet).
    static RETURNED: RefCell<(Vec<NDArrayHandle>, Vec<c_int>)> =
        const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Sets this thread's training mode (`is_training` != 0) and writes the previous one to `*prev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradSetIsTraining(is_training: c_int, prev: *mut c_int) -> c_int {
    api_call("MXAutogradSetIsTraining", || {
        // SAFETY: API contract: out-parameter.
        let prev = unsafe { args::out(prev, "prev")? };
        *prev = c_int::from(autograd::set_training(is_training != 0));
        Ok(())
    })
}

/// Whether this thread runs operators in training mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradIsTraining(curr: *mut bool) -> c_int {
    api_call("MXAutogradIsTraining", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(curr, "curr")? } = autograd::is_training();
        Ok(())
    })
}

/// Sets this thread's recording mode (`is_recording` != 0) and writes the previous one to
/// `*prev`. While recording, operators invoked on marked variables or on outputs of recorded
/// operators are recorded for a backward pass.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradSetIsRecording(is_recording: c_int, prev: *mut c_int) -> c_int {
    api_call("MXAutogradSetIsRecording", || {
        // SAFETY: API contract: out-parameter.
        let prev = unsafe { args::out(prev, "prev")? };
        *prev = c_int::from(autograd::set_recording(is_recording != 0));
        Ok(())
    })
}

/// Whether this thread records operators.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradIsRecording(curr: *mut bool) -> c_int {
    api_call("MXAutogradIsRecording", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(curr, "curr")? } = autograd::is_recording();
        Ok(())
    })
}

/// The arrays behind `n` handles at `ptr` (`arg` names them in messages).
///
/// # Safety
/// `ptr` is NULL or points to `n` handles.
unsafe fn arrays(ptr: *const NDArrayHandle, n: usize, arg: &str) -> Result<Vec<NDArray>> {
    // SAFETY: per the contract.
    let hs = unsafe { args::slice(ptr, n, arg)? };
    hs.iter()
        .enumerate()
        .map(|(i, &h)| handle::borrow_at::<NDArray>(h, arg, i).map(|a| NDArray::clone(&a)))
        .collect()
}

/// Marks `var_handles[i]` as a variable whose gradient a backward writes (`reqs_array[i]` = 1)
/// or adds (3) into `grad_handles[i]`, or does not compute (0). An array already in a graph
/// becomes a new leaf.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradMarkVariables(
    num_var: u32,
    var_handles: *mut NDArrayHandle,
    reqs_array: *mut u32,
    grad_handles: *mut NDArrayHandle,
) -> c_int {
    api_call("MXAutogradMarkVariables", || {
        let n = num_var as usize;
        // SAFETY: API contract: `num_var` handles and requests each.
        let (vars, reqs, grads) = unsafe {
            (
                arrays(var_handles.cast_const(), n, "var_handles")?,
                args::slice(reqs_array.cast_const(), n, "reqs_array")?,
                arrays(grad_handles.cast_const(), n, "grad_handles")?,
            )
        };
        let reqs = reqs
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                GradReq::from_code(r).ok_or_else(|| {
                    Error::invalid(format!(
                        "reqs_array[{i}] = {r} is not a gradient request (0 null, 1 write, 3 add)"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        autograd::mark_variables(&vars, &reqs, &grads)
    })
}

/// `MXAutogradBackward(n, outs, NULL, 0)`: gradients of the heads into the variables' buffers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradComputeGradient(
    num_output: u32,
    output_handles: *mut NDArrayHandle,
) -> c_int {
    api_call("MXAutogradComputeGradient", || {
        // SAFETY: forwarded API contract.
        unsafe { backward(num_output, output_handles, std::ptr::null_mut(), 0) }
    })
}

/// A backward pass in training mode without creating a graph; see [`MXAutogradBackwardEx`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradBackward(
    num_output: u32,
    output_handles: *mut NDArrayHandle,
    ograd_handles: *mut NDArrayHandle,
    retain_graph: c_int,
) -> c_int {
    api_call("MXAutogradBackward", || {
        // SAFETY: forwarded API contract.
        unsafe { backward(num_output, output_handles, ograd_handles, retain_graph) }
    })
}

/// The body of MXAutogradBackward and MXAutogradComputeGradient: gradients into the variables'
/// buffers, in training mode, without creating a graph.
///
/// # Safety
/// The pointers follow `MXAutogradBackward`'s contract.
unsafe fn backward(
    num_output: u32,
    output_handles: *mut NDArrayHandle,
    ograd_handles: *mut NDArrayHandle,
    retain_graph: c_int,
) -> Result<()> {
    // SAFETY: the caller's contract.
    let (heads, head_grads) = unsafe { heads(num_output, output_handles, ograd_handles)? };
    autograd::backward(BackwardArgs {
        heads,
        head_grads,
        variables: Vec::new(),
        retain_graph: retain_graph != 0,
        create_graph: false,
        is_train: true,
    })?;
    Ok(())
}

/// A backward pass from the heads `output_handles[0..num_output)`, with head gradients
/// `ograd_handles` (NULL, or NULL entries: ones). With `num_variables == 0` every reachable
/// variable's gradient goes into its buffer per its request and its fresh flag is set;
/// otherwise `*grad_handles` receives new arrays holding the gradients of `var_handles` (and
/// `*grad_stypes` their storage types; both valid until this thread's next call). Without
/// `retain_graph` the graph is freed. `create_graph` records the backward itself, so the
/// gradients can be differentiated again; `is_train` is the training mode the gradient
/// operators see.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradBackwardEx(
    num_output: u32,
    output_handles: *mut NDArrayHandle,
    ograd_handles: *mut NDArrayHandle,
    num_variables: u32,
    var_handles: *mut NDArrayHandle,
    retain_graph: c_int,
    create_graph: c_int,
    is_train: c_int,
    grad_handles: *mut *mut NDArrayHandle,
    grad_stypes: *mut *mut c_int,
) -> c_int {
    api_call("MXAutogradBackwardEx", || {
        // SAFETY: API contract for the heads and their gradients.
        let (heads, head_grads) = unsafe { heads(num_output, output_handles, ograd_handles)? };
        let nv = num_variables as usize;
        let variables = if nv == 0 {
            Vec::new()
        } else {
            // SAFETY: API contract: `num_variables` handles.
            unsafe { arrays(var_handles.cast_const(), nv, "var_handles")? }
        };
        if nv > 0 && (grad_handles.is_null() || grad_stypes.is_null()) {
            return Err(Error::invalid(
                "grad_handles and grad_stypes must not be NULL when num_variables > 0",
            ));
        }
        let grads = autograd::backward(BackwardArgs {
            heads,
            head_grads,
            variables,
            retain_graph: retain_graph != 0,
            create_graph: create_graph != 0,
            is_train: is_train != 0,
        })?;
        if nv > 0 {
            RETURNED.with(|r| {
                let (handles, stypes) = &mut *r.borrow_mut();
                stypes.clear();
                stypes.extend(grads.iter().map(|g| g.stype().code()));
                handles.clear();
                handles.extend(grads.into_iter().map(new_handle));
                // SAFETY: API contract: out-parameters (checked non-NULL above).
                unsafe {
                    *grad_handles = handles.as_mut_ptr();
                    *grad_stypes = stypes.as_mut_ptr();
                }
            });
        }
        Ok(())
    })
}

/// The heads of a backward pass and their gradients (none when `ograd_handles` is NULL; a NULL
/// entry is a gradient of ones).
///
/// # Safety
/// `output_handles` is NULL or points to `num_output` handles; `ograd_handles` is NULL or
/// points to `num_output` handles, each of which may be NULL.
unsafe fn heads(
    num_output: u32,
    output_handles: *mut NDArrayHandle,
    ograd_handles: *mut NDArrayHandle,
) -> Result<(Vec<NDArray>, Vec<Option<NDArray>>)> {
    let n = num_output as usize;
    if n == 0 {
        return Err(Error::invalid("num_output is 0: no heads to differentiate"));
    }
    // SAFETY: per the contract: `num_output` head handles.
    let heads = unsafe { arrays(output_handles.cast_const(), n, "output_handles")? };
    let head_grads = if ograd_handles.is_null() {
        Vec::new()
    } else {
        // SAFETY: per the contract: `num_output` head-gradient handles, each may be NULL.
        let hs = unsafe { args::slice(ograd_handles.cast_const(), n, "ograd_handles")? };
        hs.iter()
            .enumerate()
            .map(|(i, &h)| {
                if h.is_null() {
                    Ok(None)
                } else {
                    handle::borrow_at::<NDArray>(h, "ograd_handles", i)
                        .map(|a| Some(NDArray::clone(&a)))
                }
            })
            .collect::<Result<Vec<_>>>()?
    };
    Ok((heads, head_grads))
}

/// `*out` = a new symbol of the recorded graph that computes the array (`autograd.get_symbol`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradGetSymbol(handle: NDArrayHandle, out: *mut *mut c_void) -> c_int {
    api_call("MXAutogradGetSymbol", || {
        let a = nd(handle, "handle")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let s = crate::graph::tape::recorded_symbol(&a).map_err(|e| e.context("handle"))?;
        *out = super::symbol::new_handle(s);
        Ok(())
    })
}

/// `*out` = a new handle sharing the gradient buffer of a marked variable, or NULL when the
/// array is not one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetGrad(handle: NDArrayHandle, out: *mut NDArrayHandle) -> c_int {
    api_call("MXNDArrayGetGrad", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        let a = nd(handle, "handle")?;
        *out = match autograd::grad_of(&a) {
            Some(g) => new_handle(g),
            None => std::ptr::null_mut(),
        };
        Ok(())
    })
}

/// `*out` = a new handle to the same data without autograd entry (`x.detach()`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayDetach(handle: NDArrayHandle, out: *mut NDArrayHandle) -> c_int {
    api_call("MXNDArrayDetach", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        *out = new_handle(nd(handle, "handle")?.detach());
        Ok(())
    })
}

/// Sets a marked variable's fresh-gradient flag (what `Trainer.step` checks and clears); -1 for
/// an array that is not a marked variable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArraySetGradState(handle: NDArrayHandle, state: c_int) -> c_int {
    api_call("MXNDArraySetGradState", || {
        autograd::set_grad_state(&*nd(handle, "handle")?, state != 0)
    })
}

/// A marked variable's fresh-gradient flag (0 for other arrays).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDArrayGetGradState(handle: NDArrayHandle, out: *mut c_int) -> c_int {
    api_call("MXNDArrayGetGradState", || {
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out, "out")? };
        *out = c_int::from(autograd::grad_state(&*nd(handle, "handle")?));
        Ok(())
    })
}

/// `CustomFunctionBwdFunc`: output gradients then input gradients in `ptrs`, their requests,
/// training mode, state; nonzero is success.
type BackwardFn =
    unsafe extern "C" fn(c_int, c_int, *mut *mut c_void, *const c_int, c_int, *mut c_void) -> c_int;
/// `CustomFunctionDelFunc`.
type DeleteFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// A custom function's callbacks (`autograd.Function`).
struct CFunction {
    backward: BackwardFn,
    backward_state: *mut c_void,
    delete: Option<(DeleteFn, *mut c_void)>,
}

// SAFETY: the callbacks and their states are the caller's, valid until the delete callback
// runs (the API contract of MXCustomFunctionRecord); MXNet calls them from its worker threads
// too, so the caller's code is thread-safe (Python's callbacks take the GIL).
unsafe impl Send for CFunction {}
// SAFETY: as for Send: the callbacks are only called, never mutated through.
unsafe impl Sync for CFunction {}

impl autograd::CustomBackward for CFunction {
    fn backward(
        &self,
        ograds: Vec<NDArray>,
        igrads: Vec<NDArray>,
        reqs: &[GradReq],
        is_train: bool,
    ) -> Result<()> {
        let (n_o, n_i) = (ograds.len(), igrads.len());
        // new handles owned by the callee, as in MXNet
        let mut ptrs: Vec<*mut c_void> = ograds.into_iter().chain(igrads).map(new_handle).collect();
        let reqs: Vec<c_int> = reqs.iter().map(|r| r.code() as c_int).collect();
        // SAFETY: the callback's contract: `n_o + n_i` handles and `n_i` requests, its state.
        let ok = unsafe {
            (self.backward)(
                n_o as c_int,
                n_i as c_int,
                ptrs.as_mut_ptr(),
                reqs.as_ptr(),
                c_int::from(is_train),
                self.backward_state,
            )
        };
        if ok == 0 {
            return Err(Error::invalid(
                "the backward of a custom function (autograd.Function) failed: its callback \
                 returned 0 (a Python exception is printed above)",
            ));
        }
        Ok(())
    }
}

impl Drop for CFunction {
    fn drop(&mut self) {
        if let Some((delete, state)) = self.delete {
            // SAFETY: the delete callback's contract: called once, with its state.
            unsafe { delete(state) };
        }
    }
}

/// Records a custom function (`autograd.Function`): `outputs` were computed from `inputs` with
/// recording paused; a backward reaching them calls `callbacks[0]` (kCustomFunctionBackward)
/// with new handles to the output gradients and to input-gradient arrays it fills, and
/// `callbacks[1]` (kCustomFunctionDelete) runs when the record is released. Recording must be on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXCustomFunctionRecord(
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: c_int,
    outputs: *mut NDArrayHandle,
    callbacks: *mut super::operator::MXCallbackList,
) -> c_int {
    api_call("MXCustomFunctionRecord", || {
        let n_in = args::count(i64::from(num_inputs), "num_inputs")?;
        let n_out = args::count(i64::from(num_outputs), "num_outputs")?;
        // SAFETY: API contract: the handle arrays and the callback list.
        let (ins, outs, list) = unsafe {
            (
                arrays(inputs.cast_const(), n_in, "inputs")?,
                arrays(outputs.cast_const(), n_out, "outputs")?,
                args::reference(callbacks.cast::<super::custom_op::CallbackLayout>().cast_const(), "callbacks")?,
            )
        };
        if list.num_callbacks < 1 || list.callbacks.is_null() || list.contexts.is_null() {
            return Err(Error::invalid(
                "callbacks must list at least the backward callback, with its context",
            ));
        }
        let n = list.num_callbacks as usize;
        // SAFETY: API contract: `num_callbacks` callbacks and contexts.
        let (fns, ctxs) = unsafe {
            (
                args::slice(list.callbacks.cast_const(), n, "callbacks->callbacks")?,
                args::slice(list.contexts.cast_const(), n, "callbacks->contexts")?,
            )
        };
        let backward = fns[0].ok_or_else(|| Error::invalid("the backward callback is NULL"))?;
        // SAFETY: MXNet's protocol: callback 0 has the CustomFunctionBwdFunc signature.
        let backward: BackwardFn = unsafe { std::mem::transmute(backward) };
        let delete = match fns.get(1).copied().flatten() {
            // SAFETY: MXNet's protocol: callback 1 has the CustomFunctionDelFunc signature.
            Some(d) => Some((unsafe { std::mem::transmute::<_, DeleteFn>(d) }, ctxs[1])),
            None => None,
        };
        let f = CFunction {
            backward,
            backward_state: ctxs[0],
            delete,
        };
        // a refused record drops `f`, whose delete callback then releases the caller's state
        autograd::record_custom(&ins, &outs, std::sync::Arc::new(f))
    })
}
