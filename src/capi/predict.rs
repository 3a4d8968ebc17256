//! MXNet 1.9.1's C predict API (`mxnet/c_predict_api.h`): a graph's JSON and a `.params` file
//! in memory bound for inference, inputs set and outputs read as float32 values, and the
//! arrays of a list file read as float32 (`MXNDList*`). The predictor itself is
//! `crate::graph::predict::Predictor`.
//!
//! Shape arrays a function returns live in the predictor (or list) until its next call of the
//! same function, or until it is freed, as in MXNet.

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::ndarray::new_handle;
use super::types::NDArrayHandle;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::exec::Monitor;
use crate::graph::predict::{NDList, Predictor, PredictorSpec};
use crate::ndarray::NDArray;
use parking_lot::Mutex;
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::Arc;

/// A predictor (`MXPredCreate`).
pub type PredictorHandle = *mut c_void;
/// A list of arrays loaded as float32 values (`MXNDListCreate`).
pub type NDListHandle = *mut c_void;
/// Called per op output of a monitored forward: `(name, new array handle, callback_handle)`.
pub type PredMonitorCallback =
    Option<unsafe extern "C" fn(*const c_char, NDArrayHandle, *mut c_void)>;

/// What a PredictorHandle points to: the predictor and the shape its last
/// `MXPredGetOutputShape` returned.
pub(crate) struct CPredictor {
    pred: Mutex<Predictor>,
    shape: Mutex<Vec<u32>>,
}

impl Handle for CPredictor {
    const KIND: HandleKind = HandleKind::Predictor;
}

/// What an NDListHandle points to.
pub(crate) struct CNDList {
    keys: Vec<CString>,
    shapes: Vec<Vec<u32>>,
    data: Vec<Vec<f32>>,
}

impl Handle for CNDList {
    const KIND: HandleKind = HandleKind::NDList;
}

fn pred(h: PredictorHandle, arg: &str) -> Result<Arc<CPredictor>> {
    handle::borrow::<CPredictor>(h, arg)
}

fn new_pred(p: Predictor) -> PredictorHandle {
    handle::into_handle(Arc::new(CPredictor {
        pred: Mutex::new(p),
        shape: Mutex::new(Vec::new()),
    }))
}

/// The `(key, shape)` pairs of MXNet's input arrays: `indptr[i]..indptr[i + 1]` of `data` is
/// the shape of input `keys[i]`.
///
/// # Safety
/// `keys` holds `n` strings and `indptr` `n + 1` offsets into `data`, or they are NULL.
unsafe fn input_shapes(
    n: u32,
    keys: *const *const c_char,
    indptr: *const u32,
    data: *const u32,
) -> Result<Vec<(String, Vec<i64>)>> {
    let n = n as usize;
    // SAFETY: API contract: `n` keys and `n + 1` offsets.
    let (keys, indptr) = unsafe {
        (
            args::slice(keys, n, "input_keys")?,
            if n == 0 {
                &[][..]
            } else {
                args::slice(indptr, n + 1, "input_shape_indptr")?
            },
        )
    };
    let end = indptr.last().copied().unwrap_or(0) as usize;
    for (i, w) in indptr.windows(2).enumerate() {
        if w[0] > w[1] {
            return Err(Error::invalid(format!(
                "input_shape_indptr: entry {} ({}) is below entry {i} ({})",
                i + 1,
                w[1],
                w[0]
            )));
        }
    }
    // SAFETY: API contract: the offsets index `data`.
    let data = unsafe { args::slice(data, end, "input_shape_data")? };
    let mut out = Vec::with_capacity(n);
    for (i, &k) in keys.iter().enumerate() {
        // SAFETY: API contract: NUL-terminated strings.
        let key = unsafe { args::c_str_at(k, "input_keys", i)? };
        let dims = data[indptr[i] as usize..indptr[i + 1] as usize]
            .iter()
            .map(|&d| i64::from(d))
            .collect();
        out.push((key.to_owned(), dims));
    }
    Ok(out)
}

/// What every `MXPredCreate*` shares: the arguments as a [`PredictorSpec`].
///
/// # Safety
/// MXPredCreate's contract.
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
unsafe fn spec<'a>(
    symbol_json_str: *const c_char,
    param_bytes: *const c_void,
    param_size: c_int,
    dev_type: c_int,
    dev_id: c_int,
    num_input_nodes: u32,
    input_keys: *mut *const c_char,
    input_shape_indptr: *const u32,
    input_shape_data: *const u32,
) -> Result<PredictorSpec<'a>> {
    // SAFETY: API contract: a NUL-terminated JSON text and `param_size` readable bytes.
    let (json, params) = unsafe {
        (
            args::c_str(symbol_json_str, "symbol_json_str")?,
            args::slice(
                param_bytes.cast::<u8>(),
                args::count(param_size.into(), "param_size")?,
                "param_bytes",
            )?,
        )
    };
    let ctx = Context::from_codes(dev_type, dev_id).map_err(|e| e.context("dev_type/dev_id"))?;
    // SAFETY: forwarded contract.
    let shapes = unsafe {
        input_shapes(
            num_input_nodes,
            input_keys,
            input_shape_indptr,
            input_shape_data,
        )?
    };
    Ok(PredictorSpec {
        json,
        params,
        ctx,
        input_shapes: shapes,
        output_keys: Vec::new(),
        dtypes: Vec::new(),
    })
}

/// Loads a graph (`symbol_json_str`) and its parameters (`param_bytes`, a `.params` file in
/// memory: `arg:`/`aux:` names) and binds them on the device for the given input shapes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
pub unsafe extern "C" fn MXPredCreate(
    symbol_json_str: *const c_char,
    param_bytes: *const c_void,
    param_size: c_int,
    dev_type: c_int,
    dev_id: c_int,
    num_input_nodes: u32,
    input_keys: *mut *const c_char,
    input_shape_indptr: *const u32,
    input_shape_data: *const u32,
    out: *mut PredictorHandle,
) -> c_int {
    api_call("MXPredCreate", || {
        // SAFETY: API contract, forwarded.
        let (s, out) = unsafe {
            (
                spec(
                    symbol_json_str,
                    param_bytes,
                    param_size,
                    dev_type,
                    dev_id,
                    num_input_nodes,
                    input_keys,
                    input_shape_indptr,
                    input_shape_data,
                )?,
                args::out(out, "out")?,
            )
        };
        *out = new_pred(Predictor::create(&s)?);
        Ok(())
    })
}

/// [`MXPredCreate`] with the dtypes of arguments the parameters do not give.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
pub unsafe extern "C" fn MXPredCreateEx(
    symbol_json_str: *const c_char,
    param_bytes: *const c_void,
    param_size: c_int,
    dev_type: c_int,
    dev_id: c_int,
    num_input_nodes: u32,
    input_keys: *mut *const c_char,
    input_shape_indptr: *const u32,
    input_shape_data: *const u32,
    num_provided_arg_dtypes: u32,
    provided_arg_dtype_names: *mut *const c_char,
    provided_arg_dtypes: *const c_int,
    out: *mut PredictorHandle,
) -> c_int {
    api_call("MXPredCreateEx", || {
        let n = num_provided_arg_dtypes as usize;
        // SAFETY: API contract, forwarded; `n` names and dtype codes.
        let (mut s, names, codes, out) = unsafe {
            (
                spec(
                    symbol_json_str,
                    param_bytes,
                    param_size,
                    dev_type,
                    dev_id,
                    num_input_nodes,
                    input_keys,
                    input_shape_indptr,
                    input_shape_data,
                )?,
                args::slice(provided_arg_dtype_names, n, "provided_arg_dtype_names")?,
                args::slice(provided_arg_dtypes, n, "provided_arg_dtypes")?,
                args::out(out, "out")?,
            )
        };
        for (i, (&name, &code)) in names.iter().zip(codes).enumerate() {
            // SAFETY: API contract: NUL-terminated strings.
            let name = unsafe { args::c_str_at(name, "provided_arg_dtype_names", i)? };
            let t = DType::from_code(code)
                .map_err(|e| e.context(format!("provided_arg_dtypes[{i}]")))?;
            s.dtypes.push((name.to_owned(), t));
        }
        *out = new_pred(Predictor::create(&s)?);
        Ok(())
    })
}

/// [`MXPredCreate`] whose outputs are the first outputs of the nodes named by `output_keys`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
pub unsafe extern "C" fn MXPredCreatePartialOut(
    symbol_json_str: *const c_char,
    param_bytes: *const c_void,
    param_size: c_int,
    dev_type: c_int,
    dev_id: c_int,
    num_input_nodes: u32,
    input_keys: *mut *const c_char,
    input_shape_indptr: *const u32,
    input_shape_data: *const u32,
    num_output_nodes: u32,
    output_keys: *mut *const c_char,
    out: *mut PredictorHandle,
) -> c_int {
    api_call("MXPredCreatePartialOut", || {
        let n = num_output_nodes as usize;
        // SAFETY: API contract, forwarded; `n` output keys.
        let (mut s, keys, out) = unsafe {
            (
                spec(
                    symbol_json_str,
                    param_bytes,
                    param_size,
                    dev_type,
                    dev_id,
                    num_input_nodes,
                    input_keys,
                    input_shape_indptr,
                    input_shape_data,
                )?,
                args::slice(output_keys, n, "output_keys")?,
                args::out(out, "out")?,
            )
        };
        for (i, &k) in keys.iter().enumerate() {
            // SAFETY: API contract: NUL-terminated strings.
            s.output_keys
                .push(unsafe { args::c_str_at(k, "output_keys", i)? }.to_owned());
        }
        *out = new_pred(Predictor::create(&s)?);
        Ok(())
    })
}

/// `num_threads` predictors sharing one copy of the parameters, each with input and output
/// arrays of its own, into `out[0..num_threads]`. mxrt does not need MXNet's NaiveEngine for
/// them: each handle may run on its own thread with any engine.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // MXNet's parameter list
pub unsafe extern "C" fn MXPredCreateMultiThread(
    symbol_json_str: *const c_char,
    param_bytes: *const c_void,
    param_size: c_int,
    dev_type: c_int,
    dev_id: c_int,
    num_input_nodes: u32,
    input_keys: *mut *const c_char,
    input_shape_indptr: *const u32,
    input_shape_data: *const u32,
    num_threads: c_int,
    out: *mut PredictorHandle,
) -> c_int {
    api_call("MXPredCreateMultiThread", || {
        let n = args::count(num_threads.into(), "num_threads")?;
        if n == 0 {
            return Err(Error::invalid("num_threads must be at least 1, got 0"));
        }
        // SAFETY: API contract, forwarded; `out` holds `num_threads` handles.
        let (s, out) = unsafe {
            (
                spec(
                    symbol_json_str,
                    param_bytes,
                    param_size,
                    dev_type,
                    dev_id,
                    num_input_nodes,
                    input_keys,
                    input_shape_indptr,
                    input_shape_data,
                )?,
                args::slice_mut(out, n, "out")?,
            )
        };
        let preds = Predictor::create_many(&s, n)?;
        for (o, p) in out.iter_mut().zip(preds) {
            *o = new_pred(p);
        }
        Ok(())
    })
}

/// A new predictor for new input shapes that shares `handle`'s parameters.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredReshape(
    num_input_nodes: u32,
    input_keys: *mut *const c_char,
    input_shape_indptr: *const u32,
    input_shape_data: *const u32,
    handle: PredictorHandle,
    out: *mut PredictorHandle,
) -> c_int {
    api_call("MXPredReshape", || {
        let p = pred(handle, "handle")?;
        // SAFETY: API contract, forwarded.
        let (shapes, out) = unsafe {
            (
                input_shapes(
                    num_input_nodes,
                    input_keys,
                    input_shape_indptr,
                    input_shape_data,
                )?,
                args::out(out, "out")?,
            )
        };
        let new = p.pred.lock().reshape(&shapes)?;
        *out = new_pred(new);
        Ok(())
    })
}

/// The shape of output `index`: `*shape_data` points to `*shape_ndim` dimensions owned by the
/// predictor (valid until its next `MXPredGetOutputShape` or its free).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredGetOutputShape(
    handle: PredictorHandle,
    index: u32,
    shape_data: *mut *mut u32,
    shape_ndim: *mut u32,
) -> c_int {
    api_call("MXPredGetOutputShape", || {
        let p = pred(handle, "handle")?;
        // SAFETY: API contract: out-parameters.
        let (data, ndim) = unsafe {
            (
                args::out(shape_data, "shape_data")?,
                args::out(shape_ndim, "shape_ndim")?,
            )
        };
        let dims: Vec<u32> = p
            .pred
            .lock()
            .output_shape(index as usize)?
            .iter()
            .map(|&d| d as u32)
            .collect();
        let mut buf = p.shape.lock();
        *buf = dims;
        *ndim = buf.len() as u32;
        *data = buf.as_mut_ptr();
        Ok(())
    })
}

/// The dtype code of output `out_index` into `*out_dtype` (MXNet 1.9.1 writes
/// `out_dtype[out_index]`, past a single int for any index but 0; mxrt writes `*out_dtype`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredGetOutputType(
    handle: PredictorHandle,
    out_index: u32,
    out_dtype: *mut c_int,
) -> c_int {
    api_call("MXPredGetOutputType", || {
        let p = pred(handle, "handle")?;
        // SAFETY: API contract: out-parameter.
        let out = unsafe { args::out(out_dtype, "out_dtype")? };
        *out = p.pred.lock().output_dtype(out_index as usize)?.code();
        Ok(())
    })
}

/// Copies `size` float32 values into the argument named `key` (an input, or any parameter).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredSetInput(
    handle: PredictorHandle,
    key: *const c_char,
    data: *const f32,
    size: u32,
) -> c_int {
    api_call("MXPredSetInput", || {
        let p = pred(handle, "handle")?;
        // SAFETY: API contract: a NUL-terminated key and `size` readable floats.
        let (key, data) = unsafe {
            (
                args::c_str(key, "key")?,
                args::slice(data, size as usize, "data")?,
            )
        };
        p.pred.lock().set_input(key, data)
    })
}

/// Runs the graph on the inputs set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredForward(handle: PredictorHandle) -> c_int {
    api_call("MXPredForward", || {
        pred(handle, "handle")?.pred.lock().forward()
    })
}

/// Runs node `step` of the graph (variables count as nodes, as in MXNet);
/// `*step_left` = the nodes after it. The last step fills the outputs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredPartialForward(
    handle: PredictorHandle,
    step: c_int,
    step_left: *mut c_int,
) -> c_int {
    api_call("MXPredPartialForward", || {
        let p = pred(handle, "handle")?;
        let step = args::count(step.into(), "step")?;
        // SAFETY: API contract: out-parameter.
        let left = unsafe { args::out(step_left, "step_left")? };
        *left = p.pred.lock().partial_forward(step)? as c_int;
        Ok(())
    })
}

/// Copies output `index` as float32 values into `data`, which holds exactly `size` of them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredGetOutput(
    handle: PredictorHandle,
    index: u32,
    data: *mut f32,
    size: u32,
) -> c_int {
    api_call("MXPredGetOutput", || {
        let p = pred(handle, "handle")?;
        // SAFETY: API contract: `size` writable floats.
        let data = unsafe { args::slice_mut(data, size as usize, "data")? };
        p.pred.lock().get_output(index as usize, data)
    })
}

/// A C monitor callback made callable from the predictor's runs.
struct PredMonitor(
    unsafe extern "C" fn(*const c_char, NDArrayHandle, *mut c_void),
    usize,
);
// SAFETY: a plain C function pointer and the caller's opaque handle, called on the thread that
// runs the forward, as in MXNet.
unsafe impl Send for PredMonitor {}
// SAFETY: as above; neither is mutated.
unsafe impl Sync for PredMonitor {}

/// Calls `callback(name, new array handle, callback_handle)` for every op output of later
/// forwards (with `monitor_all`, every op input too); a NULL callback removes it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredSetMonitorCallback(
    handle: PredictorHandle,
    callback: PredMonitorCallback,
    callback_handle: *mut c_void,
    monitor_all: bool,
) -> c_int {
    api_call("MXPredSetMonitorCallback", || {
        let p = pred(handle, "handle")?;
        let m: Option<Monitor> = callback.map(|f| {
            let f = PredMonitor(f, callback_handle as usize);
            Arc::new(move |name: &str, _op: &str, a: &NDArray| {
                let Ok(n) = CString::new(name) else { return };
                // SAFETY: the caller's callback with a valid string and a new handle it owns.
                unsafe { (f.0)(n.as_ptr(), new_handle(a.clone()), f.1 as *mut c_void) }
            }) as Monitor
        });
        p.pred.lock().set_monitor(m, monitor_all);
        Ok(())
    })
}

/// Frees a predictor (NULL is a no-op); predictors sharing its parameters keep them.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXPredFree(handle: PredictorHandle) -> c_int {
    api_call("MXPredFree", || {
        if handle.is_null() {
            return Ok(());
        }
        handle::take::<CPredictor>(handle, "handle").map(drop)
    })
}

/// Loads an array list file held in memory (`nd_file_size` bytes) as float32 values;
/// `*out_length` = the number of arrays.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDListCreate(
    nd_file_bytes: *const c_char,
    nd_file_size: c_int,
    out: *mut NDListHandle,
    out_length: *mut u32,
) -> c_int {
    api_call("MXNDListCreate", || {
        let n = args::count(nd_file_size.into(), "nd_file_size")?;
        // SAFETY: API contract: `nd_file_size` readable bytes and two out-parameters.
        let (bytes, out, len) = unsafe {
            (
                args::slice(nd_file_bytes.cast::<u8>(), n, "nd_file_bytes")?,
                args::out(out, "out")?,
                args::out(out_length, "out_length")?,
            )
        };
        let l = NDList::load(bytes).map_err(|e| e.context("nd_file_bytes"))?;
        let keys = l
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| {
                CString::new(k.as_str()).map_err(|_| {
                    Error::invalid(format!("nd_file_bytes: name {i} holds a NUL byte"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let shapes = l
            .shapes
            .iter()
            .map(|s| s.iter().map(|&d| d as u32).collect())
            .collect();
        *len = keys.len() as u32;
        *out = handle::into_handle(Arc::new(CNDList {
            keys,
            shapes,
            data: l.data,
        }));
        Ok(())
    })
}

/// Array `index` of a list: its name (empty when the file has none), its float32 values and
/// its shape, all owned by the list until it is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDListGet(
    handle: NDListHandle,
    index: u32,
    out_key: *mut *const c_char,
    out_data: *mut *const f32,
    out_shape: *mut *const u32,
    out_ndim: *mut u32,
) -> c_int {
    api_call("MXNDListGet", || {
        let l = handle::borrow::<CNDList>(handle, "handle")?;
        // SAFETY: API contract: out-parameters.
        let (key, data, shape, ndim) = unsafe {
            (
                args::out(out_key, "out_key")?,
                args::out(out_data, "out_data")?,
                args::out(out_shape, "out_shape")?,
                args::out(out_ndim, "out_ndim")?,
            )
        };
        let i = index as usize;
        if i >= l.keys.len() {
            return Err(Error::invalid(format!(
                "index: Index out of range: {index} of a list of {} arrays",
                l.keys.len()
            )));
        }
        // the pointers stay valid while the table holds the list (until MXNDListFree)
        *key = l.keys[i].as_ptr();
        *data = l.data[i].as_ptr();
        *shape = l.shapes[i].as_ptr();
        *ndim = l.shapes[i].len() as u32;
        Ok(())
    })
}

/// Frees a list (NULL is a no-op).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXNDListFree(handle: NDListHandle) -> c_int {
    api_call("MXNDListFree", || {
        if handle.is_null() {
            return Ok(());
        }
        handle::take::<CNDList>(handle, "handle").map(drop)
    })
}
