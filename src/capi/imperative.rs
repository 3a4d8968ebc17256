//! Imperative invoke (MXNet 1.9.1): running one operator on NDArrays.

use super::args;
use super::error::api_call;
use super::handle;
use super::ndarray::new_handle;
use super::operator::{AtomicSymbolCreator, op_arg};
use super::types::NDArrayHandle;
use crate::error::Result;
use crate::ndarray::NDArray;
use crate::autograd;
use crate::operator::imperative::Invoke;
use crate::operator::registry::Registry;
use std::cell::RefCell;
use std::ffi::{c_char, c_int};

thread_local! {
    /// The handles and storage types of the last invoke's allocated outputs: valid until the
    /// thread's next invoke, as in MXNet.
    static RETURNED: RefCell<(Vec<NDArrayHandle>, Vec<c_int>)> =
        const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Runs an operator on NDArrays (MXNet 1.9.1); see [`MXImperativeInvokeEx`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXImperativeInvoke(
    creator: AtomicSymbolCreator,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    num_params: c_int,
    param_keys: *mut *const c_char,
    param_vals: *mut *const c_char,
) -> c_int {
    api_call("MXImperativeInvoke", || {
        // SAFETY: forwarded API contract.
        unsafe {
            invoke(
                creator,
                num_inputs,
                inputs,
                num_outputs,
                outputs,
                num_params,
                param_keys,
                param_vals,
            )
        }
        .map(|_| ())
    })
}

/// Runs an operator on NDArrays (MXNet 1.9.1): `inputs` are its array inputs, `param_keys` and
/// `param_vals` its parameters as strings in MXNet's syntax (`(2, 3)`, `None`, `True`,
/// `float16`, `cpu(0)`). With `*num_outputs == 0` the library allocates the outputs and sets
/// `*outputs` to an array of new handles (valid until this thread's next invoke; the caller frees
/// each array); otherwise the op writes into `(*outputs)[..*num_outputs]`. `*out_stypes`
/// receives the outputs' storage types (0 dense, 1 row_sparse, 2 csr). Shapes and dtypes are checked before the call
/// returns; the computation runs in the engine. An operator MXNet lists that mxrt does not
/// implement is an error naming it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXImperativeInvokeEx(
    creator: AtomicSymbolCreator,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    num_params: c_int,
    param_keys: *mut *const c_char,
    param_vals: *mut *const c_char,
    out_stypes: *mut *const c_int,
) -> c_int {
    api_call("MXImperativeInvokeEx", || {
        // SAFETY: API contract: out-parameter.
        let out_stypes = unsafe { args::out(out_stypes, "out_stypes")? };
        // SAFETY: forwarded API contract.
        let n = unsafe {
            invoke(
                creator,
                num_inputs,
                inputs,
                num_outputs,
                outputs,
                num_params,
                param_keys,
                param_vals,
            )?
        };
        *out_stypes = RETURNED.with(|r| {
            let stypes = &r.borrow().1;
            debug_assert_eq!(stypes.len(), n);
            stypes.as_ptr()
        });
        Ok(())
    })
}

/// The shared body of the invoke functions; returns the number of outputs.
///
/// # Safety
/// The pointers follow MXImperativeInvokeEx's contract: `inputs` is NULL or points to
/// `num_inputs` handles; `num_outputs` and `outputs` are NULL or valid for reads and writes, and
/// when `*num_outputs > 0`, `*outputs` points to that many handles; `param_keys` and `param_vals`
/// are NULL or point to `num_params` pointers, each NULL or a NUL-terminated string. Everything
/// else (NULLs, counts, handles) is checked.
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn invoke(
    creator: AtomicSymbolCreator,
    num_inputs: c_int,
    inputs: *mut NDArrayHandle,
    num_outputs: *mut c_int,
    outputs: *mut *mut NDArrayHandle,
    num_params: c_int,
    param_keys: *mut *const c_char,
    param_vals: *mut *const c_char,
) -> Result<usize> {
    let id = op_arg(creator, "creator")?;
    let n_in = args::count(i64::from(num_inputs), "num_inputs")?;
    let n_params = args::count(i64::from(num_params), "num_params")?;
    // SAFETY: API contract for the arrays and out-parameters.
    let (handles, num_outputs, outputs, keys, vals) = unsafe {
        (
            args::slice(inputs.cast_const(), n_in, "inputs")?,
            args::out(num_outputs, "num_outputs")?,
            args::out(outputs, "outputs")?,
            args::slice(param_keys.cast_const(), n_params, "param_keys")?,
            args::slice(param_vals.cast_const(), n_params, "param_vals")?,
        )
    };
    let mut params = Vec::with_capacity(n_params);
    for (i, (&k, &v)) in keys.iter().zip(vals).enumerate() {
        // SAFETY: API contract: C strings.
        let (k, v) = unsafe {
            (
                args::c_str_at(k, "param_keys", i)?,
                args::c_str_at(v, "param_vals", i)?,
            )
        };
        params.push((k, v));
    }
    let arrays = handles
        .iter()
        .enumerate()
        .map(|(i, &h)| handle::borrow_at::<NDArray>(h, "inputs", i).map(|a| NDArray::clone(&a)))
        .collect::<Result<Vec<_>>>()?;
    let n_out = args::count(i64::from(*num_outputs), "*num_outputs")?;
    let given = if n_out == 0 {
        None
    } else {
        // SAFETY: API contract: with `*num_outputs > 0`, `*outputs` holds that many handles.
        let hs = unsafe { args::slice((*outputs).cast_const(), n_out, "*outputs")? };
        Some(
            hs.iter()
                .enumerate()
                .map(|(i, &h)| {
                    handle::borrow_at::<NDArray>(h, "outputs", i).map(|a| NDArray::clone(&a))
                })
                .collect::<Result<Vec<_>>>()?,
        )
    };
    let name: &'static str = &Registry::global().op(id).name;
    let allocate = given.is_none();
    let results = autograd::invoke(Invoke {
        op: name,
        called_as: name,
        inputs: &arrays,
        params,
        outputs: given,
        state: None,
    })?;
    let n = results.len();
    RETURNED.with(|r| {
        let stypes = &mut r.borrow_mut().1;
        stypes.clear();
        stypes.extend(results.iter().map(|a| a.stype().code()));
    });
    if allocate {
        RETURNED.with(|r| {
            let handles = &mut r.borrow_mut().0;
            handles.clear();
            handles.extend(results.into_iter().map(new_handle));
            *outputs = handles.as_mut_ptr();
        });
        *num_outputs = n as c_int;
    }
    Ok(n)
}
