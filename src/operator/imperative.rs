//! Running an operator on NDArrays: MXNet's imperative invoke.
//!
//! On the calling thread: find the op's kernel, let it plan (parameters, shape and dtype
//! inference), allocate or check the outputs and decide which outputs must be staged because they
//! overlap inputs. Then one engine op, reading the inputs' variables and writing the outputs'
//! (plus any input the op mutates and the resource it uses), runs the kernel. The op is named after
//! the operator, so traces and aggregate statistics show it; a kernel's error fails the op like
//! any engine op and reaches whoever waits on its outputs.

use super::op::{Aliasing, Call, KernelArgs, Plan, TensorDesc};
use super::param::Params;
use super::table;
use super::tensor::Tensor;
use crate::context::Context;
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
}

/// Byte range of an array's data, for overlap checks.
fn range(a: &NDArray) -> Result<(usize, usize)> {
    let p = a.data_ptr()? as usize;
    Ok((p, p + a.nbytes()))
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

/// Runs the op; returns its outputs (the given ones, or new arrays).
pub fn invoke(call: Invoke<'_>) -> Result<Vec<NDArray>> {
    let name = call.called_as;
    let op = table::lookup(call.op).ok_or_else(|| {
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
    let params = Params::new(name, call.params)?;
    let plan = op.plan(&Call {
        name,
        inputs: &descs,
        params: &params,
        given_outputs: given.as_deref(),
        input_ctx,
    })?;
    params.finish()?;
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
    let outputs = match call.outputs {
        Some(outs) => {
            check_given(name, &plan, &outs)?;
            outs
        }
        None => plan
            .outputs
            .iter()
            .map(|d| NDArray::new(&d.shape, ctx, d.dtype, false))
            .collect::<Result<Vec<_>>>()?,
    };
    if let Some(kernel) = gpu_kernel {
        super::device::run(name, kernel, call.inputs, &outputs)?;
        return Ok(outputs);
    }
    run(name, call.inputs, &outputs, plan, ctx)?;
    Ok(outputs)
}

/// Given outputs must have the planned shapes and dtypes.
fn check_given(name: &str, plan: &Plan, outs: &[NDArray]) -> Result<()> {
    if outs.len() != plan.outputs.len() {
        return Err(Error::invalid(format!(
            "operator {name} produces {} output(s), {} given",
            plan.outputs.len(),
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
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
    staged: Vec<Staged>,
    resource: Option<Resource>,
    /// Keeps every array's memory alive until the op has run.
    _keep: Vec<NDArray>,
}

fn run(
    name: &'static str,
    inputs: &[NDArray],
    outputs: &[NDArray],
    plan: Plan,
    ctx: Context,
) -> Result<()> {
    let in_ranges = inputs.iter().map(range).collect::<Result<Vec<_>>>()?;
    let out_ranges = outputs.iter().map(range).collect::<Result<Vec<_>>>()?;
    for (j, &o) in out_ranges.iter().enumerate() {
        if out_ranges[..j].iter().any(|&p| overlaps(o, p)) {
            return Err(Error::invalid(format!(
                "operator {name}: output {j} shares memory with an earlier output"
            )));
        }
    }
    let elementwise = plan.aliasing == Aliasing::Elementwise;
    let mut staged = Vec::new();
    let mut aliased_inputs = vec![false; inputs.len()];
    let mut out_exclusive = vec![true; outputs.len()];
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
        .collect::<Result<Vec<_>>>()?;
    let out_tensors = outputs
        .iter()
        .enumerate()
        .map(|(j, o)| match staged.iter().find(|s| s.output == j) {
            Some(s) => make(&s.scratch, true),
            None => make(o, out_exclusive[j]),
        })
        .collect::<Result<Vec<_>>>()?;

    let resource = match plan.resource {
        Some(req) => Some(ResourceManager::global()?.request(ctx, req)?),
        None => None,
    };
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
    if let Some(r) = &resource {
        writes.push(r.var().clone());
    }
    let mut keep: Vec<NDArray> = Vec::with_capacity(inputs.len() + outputs.len());
    keep.extend(inputs.iter().cloned());
    keep.extend(outputs.iter().cloned());
    let job = Mutex::new(Some(Job {
        kernel: plan.kernel,
        inputs: in_tensors,
        outputs: out_tensors,
        staged,
        resource,
        _keep: keep,
    }));
    let op_name = name;
    let args = PushArgs::new(ctx).reads(&reads).writes(&writes).name(name);
    Engine::global()?.push_fn(args, move |_| {
        let Some(job) = job.lock().take() else {
            return Err(format!("operator {op_name} ran twice"));
        };
        execute(job, op_name).map_err(|e| format!("operator {op_name}: {e}"))
    })
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
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        kernel(&mut KernelArgs {
            inputs: &inputs,
            outputs: &mut outputs,
            resource: resource.as_ref(),
        })
    }));
    match ran {
        Ok(r) => r?,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            return Err(Error::invalid(format!("kernel of {name} panicked: {what}")));
        }
    }
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
