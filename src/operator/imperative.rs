//! Running an operator on NDArrays: MXNet's imperative invoke.
//!
//! On the calling thread: find the op's kernel, let it plan (parameters, shape and dtype
//! inference), allocate or check the outputs and decide which outputs must be staged because they
//! overlap inputs. Then one engine op, reading the inputs' variables and writing the outputs'
//! (plus any input the op mutates and the resource it uses), runs the kernel. The op is named after
//! the operator, so traces and aggregate statistics show it; a kernel's error fails the op like
//! any engine op and reaches whoever waits on its outputs.

use super::def::OpDef;
use super::op::{Aliasing, Call, KernelArgs, Plan, TensorDesc};
use super::stype::StorageRule;
use super::param::Params;
use super::table;
use super::stype;
use super::tensor::Tensor;
use crate::context::Context;
use crate::dtype::DType;
use crate::ndarray::format::StorageType;
use crate::engine::{Engine, PushArgs, Var};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::resource::{Resource, ResourceManager};
use parking_lot::Mutex;
use smallvec::SmallVec;

/// One invoke: the op by name (`called_as` is the name the caller used, for messages).
pub struct Invoke<'a> {
    pub op: &'a str,
    /// Registry names live for the whole process, so the engine op can keep this one.
    pub called_as: &'static str,
    pub inputs: &'a [NDArray],
    pub params: Vec<(&'a str, &'a str)>,
    /// The caller's outputs (`out=`), or `None` to have them allocated.
    pub outputs: Option<Vec<NDArray>>,
    /// The forward's state when a gradient op is invoked from a recorded op ([`Call::state`]).
    pub state: Option<super::op::OpState>,
}

/// Byte range of an array's data, for overlap checks (none for a sparse array: its kernel
/// tensors are private dense copies).
fn range(a: &NDArray) -> Result<(usize, usize)> {
    if a.is_sparse() {
        return Ok((0, 0));
    }
    let p = a.data_ptr()? as usize;
    Ok((p, p + a.nbytes()))
}

/// Per-array lists of one op: inline for the usual few arrays (no allocation per invoke).
type Arrays<T> = SmallVec<[T; 4]>;

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Runs the op; returns its visible outputs (the given ones, or new arrays).
pub fn invoke(call: Invoke<'_>) -> Result<Vec<NDArray>> {
    let (mut outputs, visible) = invoke_all(call)?;
    outputs.truncate(visible);
    Ok(outputs)
}

/// [`invoke`], returning the op's hidden outputs too (after the visible ones) and how many of
/// the outputs are visible.
pub fn invoke_all(call: Invoke<'_>) -> Result<(Vec<NDArray>, usize)> {
    // ops whose output shape comes from their input's data (`_cvimdecode`) run here
    if let Some(f) = super::ops::image::ndarray_function(call.op) {
        let outputs = f(&call)?;
        let n = outputs.len();
        return Ok((outputs, n));
    }
    let engine = Engine::global()?;
    let resolved = resolve(&call)?;
    let outputs = allocate(&call, &resolved)?;
    let visible = resolved.plan.num_visible();
    dispatch(engine, resolved, call.inputs, &outputs)?;
    Ok((outputs, visible))
}

/// What op `def` (called `name`) would produce from inputs described by `inputs` with
/// `params`, without allocating or running anything: graph inference runs the same planning as
/// an invoke. Returns every output's description (hidden ones included).
pub fn infer_outputs(
    def: &'static OpDef,
    name: &str,
    params: &[(String, String)],
    inputs: &[TensorDesc],
) -> Result<Vec<TensorDesc>> {
    let pairs = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let params = Params::new(name, pairs)?;
    let plan = def.forward.plan(&Call {
        name,
        inputs,
        params: &params,
        given_outputs: None,
        input_ctx: None,
        training: false,
        state: None,
        input_values: None,
    })?;
    if let Err(e) = params.finish()
        && def.declares_params()
    {
        return Err(e);
    }
    Ok(plan.outputs)
}

/// An invoke decided on the calling thread: the op's definition, its plan (output shapes and
/// dtypes, kernel), where it runs and how its storage is handled. Nothing has run yet.
pub struct Resolved {
    pub def: &'static OpDef,
    /// The name the op was called by (for messages and the engine op's name).
    pub name: &'static str,
    pub plan: Plan,
    /// The device the op runs on (its outputs' when the library allocates them).
    pub ctx: Context,
    /// The GPU kernel when an array is on a GPU.
    gpu_kernel: Option<super::op::GpuKernel>,
    /// The raw parameters and inputs' storage types, when storage decisions need them.
    storage: Option<(Vec<(String, String)>, SmallVec<[StorageType; 4]>)>,
}

/// Waits for input `i` of an op whose output shape depends on it and reads its values.
fn read_values(name: &str, inputs: &[NDArray], i: usize) -> Result<Vec<f64>> {
    let a = inputs
        .get(i)
        .ok_or_else(|| Error::invalid(format!("operator {name}: input {i} is missing")))?;
    if a.is_sparse() {
        return Err(Error::invalid(format!(
            "operator {name}: input {i} must be a dense array"
        )));
    }
    use super::kernel::Element;
    let dtype = a.dtype();
    let n: usize = a.shape().iter().map(|&d| d.max(0) as usize).product();
    crate::with_element!(dtype, T => {
        let mut v: Vec<T> = vec![T::default(); n];
        // SAFETY: `v` owns `n` initialised elements of the array's element type, so its
        // `n * size_of::<T>()` bytes are exactly the array's data; the byte view is dropped
        // before `v` is read again.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                v.as_mut_ptr().cast::<u8>(),
                n * std::mem::size_of::<T>(),
            )
        };
        a.sync_copy_to_bytes(bytes)?;
        Ok(v.iter().map(|x| x.to_f64()).collect())
    })
}

/// Step 1: finds the op's definition and plans the call (parameters, shape and dtype inference,
/// the device, the GPU kernel if an array is on a GPU).
pub fn resolve(call: &Invoke<'_>) -> Result<Resolved> {
    let name = call.called_as;
    let def = table::lookup(call.op).ok_or_else(|| {
        Error::not_supported(format!("operator {name} is not implemented by mxrt"))
    })?;
    let mut input_ctx = None;
    // why the op must run on a GPU, if it must
    let mut on_gpu: Option<String> = None;
    let mut descs = SmallVec::<[TensorDesc; 4]>::new();
    for (i, a) in call.inputs.iter().enumerate() {
        let ctx = a.ctx().ok_or_else(|| {
            Error::invalid(format!(
                "operator {name}: input {i} is a none array (no shape, no data)"
            ))
        })?;
        if !ctx.is_host() && on_gpu.is_none() {
            on_gpu = Some(format!("input {i} is on {ctx}"));
        }
        input_ctx.get_or_insert(ctx);
        descs.push(TensorDesc::new(a.shape(), a.dtype()));
    }
    let given: Option<Vec<TensorDesc>> = call.outputs.as_ref().map(|outs| {
        outs.iter()
            .map(|o| TensorDesc::new(o.shape(), o.dtype()))
            .collect()
    });
    let sparse_in = call.inputs.iter().any(NDArray::is_sparse);
    // storage decisions read the raw parameters (only ops that meet sparse storage need them)
    let storage = (sparse_in || matches!(def.stype, StorageRule::Custom(_))).then(|| {
        let stypes: SmallVec<[StorageType; 4]> = call.inputs.iter().map(NDArray::stype).collect();
        let params = call
            .params
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (params, stypes)
    });
    let params = Params::new(name, call.params.clone())?;
    let values = match def.reads_values {
        Some(i) => Some(read_values(name, call.inputs, i)?),
        None => None,
    };
    let plan = def.forward.plan(&Call {
        name,
        inputs: &descs,
        params: &params,
        given_outputs: given.as_deref(),
        input_ctx,
        training: super::mode::is_training(),
        state: call.state.as_ref(),
        input_values: values.as_deref(),
    })?;
    // MXNet parses parameters only for ops that declare some: an op without any ignores
    // whatever it is given (Gluon passes `axis` to `broadcast_maximum`). MXNet's table is read
    // only when a parameter is left over.
    if let Err(e) = params.finish()
        && def.declares_params()
    {
        return Err(e);
    }
    let ctx = plan.ctx.or(input_ctx).unwrap_or(Context::cpu(0));
    if on_gpu.is_none() && !ctx.is_host() {
        on_gpu = Some(format!("its outputs go to {ctx}"));
    }
    if let Some(outs) = &call.outputs
        && on_gpu.is_none()
        && let Some(i) = outs.iter().position(|o| o.ctx().is_some_and(|c| !c.is_host()))
    {
        on_gpu = Some(format!("output {i} is on a GPU"));
    }
    let gpu_kernel = match on_gpu {
        Some(why) => Some(plan.gpu.ok_or_else(|| {
            Error::not_supported(format!("operator {name} has no GPU kernel yet ({why})"))
        })?),
        None => None,
    };
    Ok(Resolved {
        def,
        name,
        plan,
        ctx,
        gpu_kernel,
        storage,
    })
}

/// Step 2: the outputs: the caller's, checked against the plan, or new arrays of the planned
/// shapes, dtypes and storage types. Hidden outputs (after the visible ones) are always new
/// arrays.
pub fn allocate(call: &Invoke<'_>, r: &Resolved) -> Result<Vec<NDArray>> {
    let outputs = match &call.outputs {
        Some(outs) => {
            check_given(r.name, &r.plan, outs)?;
            let mut all = outs.clone();
            for d in &r.plan.outputs[all.len()..] {
                all.push(NDArray::new(&d.shape, r.ctx, d.dtype, false)?);
            }
            all
        }
        None => {
            let stypes = match &r.storage {
                Some((p, ins)) => {
                    let p: Vec<(&str, &str)> =
                        p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    stype::output_stypes(r.def.stype, &p, ins, r.plan.outputs.len())
                }
                None => {
                    return r
                        .plan
                        .outputs
                        .iter()
                        .map(|d| NDArray::new(&d.shape, r.ctx, d.dtype, false))
                        .collect();
                }
            };
            r.plan
                .outputs
                .iter()
                .zip(stypes)
                .map(|(d, st)| match st {
                    StorageType::Default => NDArray::new(&d.shape, r.ctx, d.dtype, false),
                    st => NDArray::new_sparse(
                        st,
                        &d.shape,
                        r.ctx,
                        d.dtype,
                        &vec![DType::I64; st.num_aux()],
                    ),
                })
                .collect::<Result<Vec<_>>>()?
        }
    };
    let sparse = call.inputs.iter().chain(&outputs).any(NDArray::is_sparse);
    if sparse && r.gpu_kernel.is_some() {
        return Err(Error::not_supported(format!(
            "operator {}: sparse arrays live on CPU contexts and cannot meet GPU arrays",
            r.name
        )));
    }
    Ok(outputs)
}

/// Step 3: pushes the planned kernel to `engine` as one op reading the inputs and writing the
/// outputs (and mutated inputs): the core the imperative runner, the autograd tape and a graph
/// executor share.
pub fn dispatch(
    engine: &Engine,
    mut r: Resolved,
    inputs: &[NDArray],
    outputs: &[NDArray],
) -> Result<()> {
    if let Some(launch) = r.plan.launch.take() {
        return launch(engine, inputs, outputs, r.ctx);
    }
    // inside a custom operator's callback the op is shown as `<op_type>::<op>`, as in MXNet
    r.name = super::custom::display_name(r.name);
    let lazy_rows = r.storage.as_ref().is_some_and(|(p, ins)| {
        let p: Vec<(&str, &str)> = p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        stype::lazy_update_rows(r.def.stype, &p, ins)
    });
    if let Some(kernel) = r.gpu_kernel {
        return super::device::run(r.name, kernel, inputs, outputs);
    }
    let sparse = inputs.iter().chain(outputs).any(NDArray::is_sparse);
    if sparse {
        run_with_sparse(engine, r.name, inputs, outputs, r.plan, r.ctx, lazy_rows)
    } else {
        run(engine, r.name, inputs, outputs, r.plan, r.ctx)
    }
}

/// Runs an op some of whose arrays are sparse: its kernel gets dense copies of them (made in
/// the engine op, so after the writes pushed before), and sparse outputs and mutated inputs take
/// the dense results back in their storage. With `lazy_rows` (a lazy optimizer update with a
/// row_sparse gradient, input 1) only the gradient's stored rows of the written arrays change.
fn run_with_sparse(
    engine: &Engine,
    name: &'static str,
    inputs: &[NDArray],
    outputs: &[NDArray],
    plan: Plan,
    ctx: Context,
    lazy_rows: bool,
) -> Result<()> {
    let dense_copy = |a: &NDArray| -> Result<NDArray> {
        if a.is_sparse() {
            NDArray::new(a.shape(), Context::cpu(0), a.dtype(), false)
        } else {
            Ok(a.clone())
        }
    };
    let d_in = inputs.iter().map(dense_copy).collect::<Result<Vec<_>>>()?;
    let d_out = outputs.iter().map(dense_copy).collect::<Result<Vec<_>>>()?;
    // the arrays whose engine variables order the op: the real ones
    let mut reads: SmallVec<[Var; 8]> = SmallVec::new();
    let mut writes: SmallVec<[Var; 8]> = SmallVec::new();
    for (i, a) in inputs.iter().enumerate() {
        let v = a.var().expect("inputs were checked not to be none").clone();
        if plan.mutates.contains(&i) { writes.push(v) } else { reads.push(v) }
    }
    for o in outputs {
        writes.push(o.var().expect("outputs are not none").clone());
    }
    let mutates = plan.mutates.clone();
    let (real_in, real_out) = (inputs.to_vec(), outputs.to_vec());
    let (dense_in, dense_out) = (d_in.clone(), d_out.clone());
    // the kernel runs as the dense op's would, on the dense arrays, inside this op
    let job = prepare(name, &d_in, &d_out, plan, ctx)?;
    if let Some(r) = &job.resource {
        writes.push(r.var().clone());
    }
    let job = Mutex::new(Some(job));
    let args = PushArgs::new(ctx).reads(&reads).writes(&writes).name(name);
    engine.push_fn(args, move |_| {
        let Some(job) = job.lock().take() else {
            return Err(format!("operator {name} ran twice"));
        };
        let run = || -> Result<()> {
            // SAFETY (all `*_in_op` calls): this op reads every input's variable and writes every
            // output's and mutated input's; the dense copies are private to it.
            for (a, d) in real_in.iter().zip(&dense_in) {
                if a.is_sparse() {
                    // SAFETY: this op holds the arrays' variables (see the comment above the loop).
                    unsafe { d.write_dense_in_op(&a.read_dense_in_op()?)? };
                }
            }
            // lazy updates: the written arrays' current contents, to restore the other rows
            let keep_rows = if lazy_rows {
                let grad = real_in[1].sparse_cell().expect("a row_sparse gradient");
                let rows = grad.value.lock().aux[0].clone();
                let mut before = Vec::new();
                for (j, o) in real_out.iter().enumerate() {
                    // SAFETY: this op holds the arrays' variables (see the comment above the loop).
                    before.push((Target::Output(j), unsafe { o.read_dense_in_op()? }));
                }
                for &m in &mutates {
                    // SAFETY: this op holds the arrays' variables (see the comment above the loop).
                    before.push((Target::Input(m), unsafe { real_in[m].read_dense_in_op()? }));
                }
                Some((rows, before))
            } else {
                None
            };
            execute(job, name)?;
            if let Some((rows, before)) = keep_rows {
                for (t, old) in before {
                    let d = match t {
                        Target::Output(j) => &dense_out[j],
                        Target::Input(m) => &dense_in[m],
                    };
                    // SAFETY: this op holds the arrays' variables (see the comment above the loop).
                    unsafe { restore_rows_except(d, &old, &rows)? };
                }
            }
            for (a, d) in real_out.iter().zip(&dense_out) {
                if a.is_sparse() {
                    // SAFETY: this op holds the arrays' variables (see the comment above the loop).
                    unsafe { a.write_dense_in_op(&d.read_dense_in_op()?)? };
                }
            }
            for &m in &mutates {
                if real_in[m].is_sparse() {
                    // SAFETY: this op holds the arrays' variables (see the comment above the loop).
                    unsafe { real_in[m].write_dense_in_op(&dense_in[m].read_dense_in_op()?)? };
                }
            }
            Ok(())
        };
        run().map_err(|e| format!("operator {name}: {e}"))
    })
}

/// An array a lazy update writes.
#[derive(Clone, Copy)]
enum Target {
    Output(usize),
    Input(usize),
}

/// Puts back every row of `d` (a dense host array) that `rows` does not list, from `old` (its
/// contents before the kernel).
///
/// # Safety
/// The caller holds write access to `d`.
unsafe fn restore_rows_except(d: &NDArray, old: &[u8], rows: &[i64]) -> Result<()> {
    let n = d.shape().first().copied().unwrap_or(0).max(0) as usize;
    if n == 0 || old.is_empty() {
        return Ok(());
    }
    let width = old.len() / n;
    // SAFETY: per the contract; a host array of `old.len()` bytes.
    let mut now = unsafe { d.read_dense_in_op()? };
    let mut keep = vec![false; n];
    for &r in rows {
        if let Some(k) = keep.get_mut(r as usize) {
            *k = true;
        }
    }
    for (r, &k) in keep.iter().enumerate() {
        if !k {
            now[r * width..(r + 1) * width].copy_from_slice(&old[r * width..(r + 1) * width]);
        }
    }
    // SAFETY: per the contract.
    unsafe { d.write_dense_in_op(&now) }
}

/// Given outputs must have the planned shapes and dtypes (one per visible output).
fn check_given(name: &str, plan: &Plan, outs: &[NDArray]) -> Result<()> {
    if outs.len() != plan.num_visible() {
        return Err(Error::invalid(format!(
            "operator {name} produces {} output(s), {} given",
            plan.num_visible(),
            outs.len()
        )));
    }
    for (i, (o, want)) in outs.iter().zip(&plan.outputs).enumerate() {
        if o.is_none() {
            return Err(Error::invalid(format!(
                "operator {name}: output {i} is a none array"
            )));
        }
        if o.shape() != &want.shape[..] {
            return Err(Error::invalid(format!(
                "operator {name}: output {i} has shape {:?}, the result has shape {:?}",
                o.shape(),
                &want.shape[..]
            )));
        }
        if o.dtype() != want.dtype {
            return Err(Error::invalid(format!(
                "operator {name}: output {i} has dtype {}, the result has dtype {}",
                o.dtype().name(),
                want.dtype.name()
            )));
        }
    }
    Ok(())
}

/// An output computed into scratch memory and copied to the real output after the kernel.
struct Staged {
    output: usize,
    scratch: NDArray,
}

/// Everything the engine op owns.
struct Job {
    kernel: super::op::Kernel,
    inputs: Arrays<Tensor>,
    outputs: Arrays<Tensor>,
    staged: Vec<Staged>,
    resource: Option<Resource>,
    /// Keeps every array's memory alive until the op has run.
    _keep: SmallVec<[NDArray; 6]>,
}

fn run(
    engine: &Engine,
    name: &'static str,
    inputs: &[NDArray],
    outputs: &[NDArray],
    plan: Plan,
    ctx: Context,
) -> Result<()> {
    let mut reads: SmallVec<[Var; 8]> = SmallVec::new();
    let mut writes: SmallVec<[Var; 8]> = SmallVec::new();
    for (i, a) in inputs.iter().enumerate() {
        let v = a.var().expect("inputs were checked not to be none").clone();
        if plan.mutates.contains(&i) {
            writes.push(v);
        } else {
            reads.push(v);
        }
    }
    for o in outputs {
        writes.push(o.var().expect("outputs are not none").clone());
    }
    let job = prepare(name, inputs, outputs, plan, ctx)?;
    if let Some(r) = &job.resource {
        writes.push(r.var().clone());
    }
    let job = Mutex::new(Some(job));
    let op_name = name;
    let args = PushArgs::new(ctx).reads(&reads).writes(&writes).name(name);
    engine.push_fn(args, move |_| {
        let Some(job) = job.lock().take() else {
            return Err(format!("operator {op_name} ran twice"));
        };
        execute(job, op_name).map_err(|e| format!("operator {op_name}: {e}"))
    })
}

/// Everything an op's kernel needs, ready to run: tensors over the arrays (or scratch copies of
/// outputs that overlap inputs) and the resource.
fn prepare(
    name: &'static str,
    inputs: &[NDArray],
    outputs: &[NDArray],
    plan: Plan,
    ctx: Context,
) -> Result<Job> {
    let in_ranges = inputs.iter().map(range).collect::<Result<Arrays<_>>>()?;
    let out_ranges = outputs.iter().map(range).collect::<Result<Arrays<_>>>()?;
    for (j, &o) in out_ranges.iter().enumerate() {
        if out_ranges[..j].iter().any(|&p| overlaps(o, p)) {
            return Err(Error::invalid(format!(
                "operator {name}: output {j} shares memory with an earlier output"
            )));
        }
    }
    let elementwise = plan.aliasing == Aliasing::Elementwise;
    let mut staged = Vec::new();
    let mut aliased_inputs: Arrays<bool> = smallvec::smallvec![false; inputs.len()];
    let mut out_exclusive: Arrays<bool> = smallvec::smallvec![true; outputs.len()];
    for (j, &o) in out_ranges.iter().enumerate() {
        for (i, &r) in in_ranges.iter().enumerate() {
            if !overlaps(o, r) {
                continue;
            }
            if elementwise && o == r && outputs[j].dtype() == inputs[i].dtype() {
                aliased_inputs[i] = true;
                out_exclusive[j] = false;
            } else if !staged.iter().any(|s: &Staged| s.output == j) {
                let d = &plan.outputs[j];
                staged.push(Staged {
                    output: j,
                    scratch: NDArray::new(&d.shape, ctx, d.dtype, false)?,
                });
            }
        }
    }
    for &m in &plan.mutates {
        aliased_inputs[m] = true;
    }
    let make = |a: &NDArray, exclusive: bool| -> Result<Tensor> {
        // SAFETY: the pointer is the array's live data (kept alive by `_keep`), aligned for its
        // dtype; the engine op below reads every input's variable and writes every output's and
        // mutated input's, so nothing outside the op touches them while it runs; `exclusive` is
        // set only when no other tensor of this op overlaps the array (overlapping outputs are
        // replaced by scratch arrays, exact aliases are marked non-exclusive).
        Ok(unsafe { Tensor::new(a.data_ptr()?, a.shape(), a.dtype(), exclusive) })
    };
    let in_tensors = inputs
        .iter()
        .zip(&aliased_inputs)
        .map(|(a, &alias)| make(a, !alias))
        .collect::<Result<Arrays<_>>>()?;
    let out_tensors = outputs
        .iter()
        .enumerate()
        .map(|(j, o)| match staged.iter().find(|s| s.output == j) {
            Some(s) => make(&s.scratch, true),
            None => make(o, out_exclusive[j]),
        })
        .collect::<Result<Arrays<_>>>()?;

    let resource = match plan.resource {
        Some(req) => Some(ResourceManager::global()?.request(ctx, req)?),
        None => None,
    };
    let _ = name;
    let mut keep: SmallVec<[NDArray; 6]> = SmallVec::with_capacity(inputs.len() + outputs.len());
    keep.extend(inputs.iter().cloned());
    keep.extend(outputs.iter().cloned());
    Ok(Job {
        kernel: plan.kernel,
        inputs: in_tensors,
        outputs: out_tensors,
        staged,
        resource,
        _keep: keep,
    })
}

/// Runs a planned kernel on tensors (inside the engine op that orders their memory), catching a
/// panic as an error naming the op.
pub(crate) fn run_kernel(
    kernel: super::op::Kernel,
    inputs: &[Tensor],
    outputs: &mut [Tensor],
    resource: Option<&Resource>,
    name: &str,
) -> Result<()> {
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        kernel(&mut KernelArgs {
            inputs,
            outputs,
            resource,
        })
    }));
    match ran {
        Ok(r) => r,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(Error::invalid(format!("kernel of {name} panicked: {what}")))
        }
    }
}

/// Runs a job's kernel (catching a panic as an error) and copies staged outputs back.
fn execute(job: Job, name: &str) -> Result<()> {
    let Job {
        kernel,
        inputs,
        mut outputs,
        staged,
        resource,
        _keep,
    } = job;
    run_kernel(kernel, &inputs, &mut outputs, resource.as_ref(), name)?;
    let first_output = _keep.len() - outputs.len();
    for s in &staged {
        let dst = &_keep[first_output + s.output];
        let n = dst.nbytes();
        if n > 0 {
            let (from, to) = (s.scratch.data_ptr()?, dst.data_ptr()?);
            // SAFETY: both are live arrays of `n` bytes (same planned shape and dtype); the scratch
            // array is private to this op and the destination is an output this op writes.
            unsafe { std::ptr::copy_nonoverlapping(from, to, n) };
        }
    }
    Ok(())
}
