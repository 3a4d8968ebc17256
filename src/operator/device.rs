//! Running an op's [`GpuKernel`] on GPU arrays: as one engine op on the device, like every other
//! use of the arrays, with the work done by the driver on the worker's stream.

use super::op::{GpuBinary, GpuKernel};
use crate::context::Context;
use crate::engine::{FnProperty, PushArgs, Var};
use crate::error::{Error, Result};
use crate::gpu::{self, BinaryOp, Endpoint, Rounding};
use crate::ndarray::{NDArray, gpu_op};
use crate::util::SendPtr;

/// Runs `kernel` of operator `name` with `inputs` into `outputs` (already shaped and typed by
/// the plan).
pub(super) fn run(
    name: &str,
    kernel: GpuKernel,
    inputs: &[NDArray],
    outputs: &[NDArray],
) -> Result<()> {
    match kernel {
        GpuKernel::Copy => outputs[0].copy_from(&inputs[0], 0, FnProperty::Normal),
        GpuKernel::Fill(value) => outputs.iter().try_for_each(|o| fill(o, value)),
        GpuKernel::Sum => {
            let inputs: Vec<&NDArray> = inputs.iter().collect();
            sum_on_gpu(
                name,
                &inputs,
                &outputs[0],
                0,
                FnProperty::Normal,
                Rounding::EachAdd,
            )
        }
        GpuKernel::Binary(op) => {
            let op = match op {
                GpuBinary::Sub => BinaryOp::Sub,
                GpuBinary::Mul => BinaryOp::Mul,
            };
            binary_on_gpu(name, op, &inputs[0], &inputs[1], &outputs[0])
        }
    }
}

/// Checks that every array is on `out`'s GPU, has a kernel for its dtype and does not partly
/// overlap the output; returns the GPU, the inputs' addresses and the variables to read.
fn gpu_operands(
    name: &str,
    inputs: &[&NDArray],
    out: &NDArray,
) -> Result<(Context, Vec<u64>, Vec<Var>)> {
    let Some(ctx) = out.ctx() else {
        return Err(Error::invalid(format!(
            "operator {name}: the output is a none array"
        )));
    };
    if let Some((i, c)) = inputs
        .iter()
        .enumerate()
        .find_map(|(i, a)| a.ctx().filter(|&c| c != ctx).map(|c| (i, c)))
    {
        return Err(Error::invalid(format!(
            "operator {name}: every array must be on {ctx} (input {i} is on {c}); copy it there first"
        )));
    }
    let dtype = out.dtype();
    if !gpu::can_sum(dtype) {
        return Err(Error::not_supported(format!(
            "operator {name} has no GPU kernel for {} yet",
            dtype.name()
        )));
    }
    let out_ptr = out.data_ptr()?;
    let mut addrs = Vec::with_capacity(inputs.len());
    let mut reads: Vec<Var> = Vec::with_capacity(inputs.len());
    for (i, a) in inputs.iter().enumerate() {
        let p = a.data_ptr()?;
        if a.shares_memory_with(out) && p != out_ptr {
            return Err(Error::invalid(format!(
                "operator {name}: input {i} partly overlaps the output"
            )));
        }
        addrs.push(p as usize as u64);
        let var = a
            .var()
            .expect("inputs have a context, so they are not none");
        if !a.shares_memory_with(out) && !reads.iter().any(|v| v.same_as(var)) {
            reads.push(var.clone());
        }
    }
    Ok((ctx, addrs, reads))
}

/// Pushes `out = a op b` as an engine op on `out`'s GPU.
fn binary_on_gpu(name: &str, op: BinaryOp, a: &NDArray, b: &NDArray, out: &NDArray) -> Result<()> {
    let (ctx, addrs, reads) = gpu_operands(name, &[a, b], out)?;
    let writes = [out.var().expect("checked by gpu_operands").clone()];
    let (dtype, n, dev) = (out.dtype(), out.size(), ctx.dev_id);
    let out_addr = out.data_ptr()? as usize as u64;
    let keep = [a.clone(), b.clone(), out.clone()];
    let args = PushArgs::new(ctx)
        .reads(&reads)
        .writes(&writes)
        .name("elementwise");
    gpu_op::push(args, move |finish| {
        let _ = &keep;
        // SAFETY: the three addresses are `n` elements of `dtype` in arrays `keep` holds until the
        // op completes; the op reads the inputs and has exclusive access to the output until then.
        unsafe { gpu::binary(dev, op, dtype, out_addr, addrs[0], addrs[1], n, finish) }
    })
}

/// Pushes `out = inputs[0] + inputs[1] + ...` as an engine op on `out`'s GPU; every array must be
/// on that GPU. `name` names the operator in errors (the KVStore's device reduction uses it too).
pub(crate) fn sum_on_gpu(
    name: &str,
    inputs: &[&NDArray],
    out: &NDArray,
    priority: i32,
    prop: FnProperty,
    rounding: Rounding,
) -> Result<()> {
    let (ctx, addrs, reads) = gpu_operands(name, inputs, out)?;
    let out_var = out.var().expect("checked by gpu_operands");
    let dtype = out.dtype();
    let out_ptr = out.data_ptr()?;
    let n = out.size();
    let keep: Vec<NDArray> = inputs.iter().copied().chain([out]).cloned().collect();
    let writes = [out_var.clone()];
    let dev = ctx.dev_id;
    let args = PushArgs::new(ctx)
        .reads(&reads)
        .writes(&writes)
        .priority(priority)
        .prop(prop)
        .name("sum");
    let out_addr = out_ptr as usize as u64;
    gpu_op::push(args, move |finish| {
        let _ = &keep;
        // SAFETY: every address is `n` elements of `dtype` in an array `keep` holds until the op
        // completes; the op reads the inputs and has exclusive access to the output until then.
        unsafe { gpu::sum(dev, dtype, out_addr, &addrs, n, rounding, finish) }
    })
}

/// The bytes of one element of `out`'s dtype equal to `value`, or `None` when they are all 0.
fn fill_pattern(out: &NDArray, value: f64) -> Option<Vec<u8>> {
    crate::with_element!(out.dtype(), T => {
        let v = <T as crate::operator::kernel::Element>::from_f64(value);
        // SAFETY: `T` is a plain number type; viewing one value as its bytes is sound.
        let one = unsafe {
            std::slice::from_raw_parts((&v as *const T).cast::<u8>(), std::mem::size_of::<T>())
        };
        if one.iter().all(|&b| b == 0) {
            None
        } else {
            Some(one.to_vec())
        }
    })
}

/// Sets every element of `out` to `value`: a device memset for zero bytes, otherwise the fill
/// kernel of the element's width.
fn fill(out: &NDArray, value: f64) -> Result<()> {
    let (Some(ctx), Some(var)) = (out.ctx(), out.var()) else {
        return Err(Error::invalid("cannot fill a none array"));
    };
    let n = out.nbytes();
    if n == 0 {
        return Ok(());
    }
    let pattern = fill_pattern(out, value);
    let width = out.dtype().size();
    let count = out.size();
    let dst = SendPtr(out.data_ptr()?);
    let keep = out.clone();
    let writes = [var.clone()];
    let args = PushArgs::new(ctx).writes(&writes).name("fill");
    gpu_op::push(args, move |finish| {
        let _ = &keep;
        let to = Endpoint::of(ctx, dst.get());
        // SAFETY: the op holds write access to `keep`'s `n` bytes (`count` elements) at `dst`
        // until it completes.
        unsafe {
            match &pattern {
                None => gpu::fill_bytes(to, 0, n, finish),
                Some(bytes) => gpu::fill(
                    ctx.dev_id,
                    dst.get() as usize as u64,
                    &bytes[..width],
                    count,
                    finish,
                ),
            }
        }
    })
}
