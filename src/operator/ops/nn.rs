//! Neural-network elementwise and normalisation ops: `Activation`, `LeakyReLU`, `softmax`,
//! `log_softmax`, `softmin`, `clip`, `add_n`, `Dropout` and `BatchNorm` (both following the
//! invoking thread's training mode).

use crate::operator::stype::StorageRule;
use super::binary::{Add, apply_same};
use super::unary::{Math, apply, c};
use super::{Entries, axis as norm_axis, dims, inputs, same_dtype};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{
    GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val, param, param_flag, param_int,
};
use crate::operator::kernel::map::{Ptr, map1, map2};
use crate::operator::kernel::vmath;
use crate::parallel::{for_chunks_mut, for_ranges};
use half::f16;
use crate::operator::kernel::strided::{split_axes, walk};
use crate::operator::kernel::{Element, Real, bn};
use crate::operator::op::{Call, GpuKernel, Operator, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;
use crate::resource::ResourceRequest;

struct SoftRelu;
impl Math for SoftRelu {
    const COST: usize = 8;
    fn f<R: Real>(x: R) -> R {
        // log(1 + e^x), stable for large x
        if x > c(20.0) { x } else { x.exp().ln_1p() }
    }
    const F32: Option<vmath::Kernel> = Some(vmath::softrelu);
}
struct Relu;
impl Math for Relu {
    const COST: usize = 1;
    fn f<R: Real>(x: R) -> R {
        if x > R::ZERO || x.is_nan() {
            x
        } else {
            R::ZERO
        }
    }
}
struct Sigmoid;
impl Math for Sigmoid {
    const COST: usize = 8;
    fn f<R: Real>(x: R) -> R {
        R::ONE / (R::ONE + (-x).exp())
    }
    const F32: Option<vmath::Kernel> = Some(vmath::sigmoid);
}
struct Tanh;
impl Math for Tanh {
    const COST: usize = 8;
    fn f<R: Real>(x: R) -> R {
        x.tanh()
    }
    const F32: Option<vmath::Kernel> = Some(vmath::tanh);
}
struct Softsign;
impl Math for Softsign {
    const COST: usize = 2;
    fn f<R: Real>(x: R) -> R {
        x / (R::ONE + x.abs())
    }
}

fn float_only(call: &Call<'_>, d: DType) -> Result<()> {
    if matches!(d, DType::F32 | DType::F64 | DType::F16) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "operator {} supports float16, float32 and float64, not {}",
            call.name,
            d.name()
        )))
    }
}

fn activation(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let act = call.params.required(
        "act_type",
        param::choice,
        "relu, sigmoid, tanh, softrelu or softsign",
    )?;
    let dtype = x.dtype;
    let f: fn(&Tensor, &Tensor, DType) = match act.as_str() {
        "relu" => apply::<Relu>,
        "sigmoid" => apply::<Sigmoid>,
        "tanh" => apply::<Tanh>,
        "softrelu" => apply::<SoftRelu>,
        "softsign" => apply::<Softsign>,
        other => {
            return Err(Error::invalid(format!(
                "operator {}: act_type must be relu, sigmoid, tanh, softrelu or softsign, got '{other}'",
                call.name
            )));
        }
    };
    Ok(Plan::map(vec![x], move |i, o| f(&i[0], &o[0], dtype)))
}

/// Runs `f` in the compute type of a float dtype over an elementwise input/output pair.
fn float_map(
    x: &Tensor,
    y: &Tensor,
    dtype: DType,
    f32f: impl Fn(f32) -> f32 + Sync,
    f64f: impl Fn(f64) -> f64 + Sync,
) {
    let n = x.len();
    // SAFETY (all arms): both tensors hold `n` elements of `dtype`; `y` may be exactly `x`.
    match dtype {
        DType::F64 => unsafe { map1(x.ptr::<f64>(), y.ptr::<f64>(), n, 4, f64f) },
        DType::F16 => unsafe {
            map1(
                x.ptr::<half::f16>(),
                y.ptr::<half::f16>(),
                n,
                4,
                |v: half::f16| half::f16::from_f32(f32f(v.to_f32())),
            )
        },
        _ => unsafe { map1(x.ptr::<f32>(), y.ptr::<f32>(), n, 4, f32f) },
    }
}

/// How PReLU's `gamma` applies to `x`: per channel (axis 1, when it has more than one value)
/// or one value for all; with the number of elements per channel and of channels.
fn prelu_channels(
    call: &Call<'_>,
    x: &TensorDesc,
    gamma: &TensorDesc,
) -> Result<(bool, usize, usize)> {
    let per_channel = gamma.size() > 1;
    if per_channel && (x.shape.len() < 2 || gamma.size() as i64 != x.shape[1]) {
        return Err(Error::invalid(format!(
            "operator {}: gamma of shape {:?} does not match the channels of {:?}",
            call.name,
            &gamma.shape[..],
            &x.shape[..]
        )));
    }
    let inner: usize = x.shape.iter().skip(2).map(|&d| d.max(0) as usize).product();
    let ch = if per_channel { x.shape[1] as usize } else { 1 };
    Ok((per_channel, inner, ch))
}

fn leaky_relu(call: &Call<'_>) -> Result<Plan> {
    let p = call.params;
    let act = p.or(
        "act_type",
        param::choice,
        "leaky, elu, selu, gelu, prelu or rrelu",
        "leaky".into(),
    )?;
    let slope = p.or("slope", param::float, "a number", 0.25)?;
    p.or("lower_bound", param::float, "a number", 0.125)?;
    p.or("upper_bound", param::float, "a number", 0.334)?;
    if act == "prelu" {
        let ins = inputs(call, 2)?;
        same_dtype(call, 0, 1)?;
        float_only(call, ins[0].dtype)?;
        let x = ins[0].clone();
        let (per_channel, inner, ch) = prelu_channels(call, &x, &ins[1])?;
        let dtype = x.dtype;
        return Ok(Plan::new(vec![x], move |k| {
            crate::with_element!(dtype, T => {
                let (xs, gs) = (k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>());
                let o = k.outputs[0].slice_mut::<T>();
                for (i, (o, &v)) in o.iter_mut().zip(xs).enumerate() {
                    let gv = if per_channel { gs[(i / inner.max(1)) % ch] } else { gs[0] };
                    let v = v.to_f64();
                    *o = T::from_f64(if v > 0.0 { v } else { gv.to_f64() * v });
                }
            });
            Ok(())
        }));
    }
    let x = inputs(call, 1)?[0].clone();
    float_only(call, x.dtype)?;
    let dtype = x.dtype;
    let s = slope;
    let (f32f, f64f): (fn(f32, f64) -> f32, fn(f64, f64) -> f64) = match act.as_str() {
        "leaky" => (
            |v, s| if v > 0.0 { v } else { v * s as f32 },
            |v, s| if v > 0.0 { v } else { v * s },
        ),
        "elu" => (
            |v, s| if v > 0.0 { v } else { s as f32 * v.exp_m1() },
            |v, s| if v > 0.0 { v } else { s * v.exp_m1() },
        ),
        "selu" => (
            |v, _| 1.050_701 * if v > 0.0 { v } else { 1.673_263_2 * v.exp_m1() },
            |v, _| {
                1.0507009873554805
                    * if v > 0.0 {
                        v
                    } else {
                        1.6732632423543772 * v.exp_m1()
                    }
            },
        ),
        "gelu" => (
            |v, _| 0.5 * v * (1.0 + libm::erff(v / std::f32::consts::SQRT_2)),
            |v, _| 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)),
        ),
        "rrelu" => {
            // MXNet's rrelu has two outputs, the result and the slopes used (`mask`): in
            // training each element's slope is drawn from U(lower_bound, upper_bound), outside
            // training it is the mean of the bounds
            let lo = p.or("lower_bound", param::float, "a number", 0.125)?;
            let hi = p.or("upper_bound", param::float, "a number", 0.334)?;
            let random = call.training;
            let plan = Plan::new(vec![x.clone(), x], move |k| {
                let n = k.inputs[0].len();
                let slopes: Vec<f64> = if random {
                    let res = k
                        .resource
                        .ok_or_else(|| Error::invalid("LeakyReLU (rrelu) without its generator"))?;
                    let mut g = res.random()?;
                    (0..n).map(|_| lo + (hi - lo) * g.next_unit()).collect()
                } else {
                    vec![(lo + hi) / 2.0; n]
                };
                let (first, rest) = k.outputs.split_at_mut(1);
                crate::with_element!(dtype, T => {
                    let src = k.inputs[0].slice::<T>();
                    let mask = rest[0].slice_mut::<T>();
                    for (m, &s) in mask.iter_mut().zip(&slopes) {
                        *m = T::from_f64(s);
                    }
                    let mask = &*mask;
                    for ((o, v), m) in first[0].slice_mut::<T>().iter_mut().zip(src).zip(mask) {
                        let v = v.to_f64();
                        *o = T::from_f64(if v > 0.0 { v } else { v * m.to_f64() });
                    }
                });
                Ok(())
            });
            return Ok(if random { plan.with_resource(ResourceRequest::Random) } else { plan });
        }
        other => {
            return Err(Error::invalid(format!(
                "operator {}: act_type must be leaky, elu, selu, gelu, prelu or rrelu, got '{other}'",
                call.name
            )));
        }
    };
    Ok(Plan::new(vec![x], move |k| {
        float_map(
            &k.inputs[0],
            &k.outputs[0],
            dtype,
            |v| f32f(v, s),
            |v| f64f(v, s),
        );
        Ok(())
    })
    .elementwise())
}

#[derive(Clone, Copy, PartialEq)]
enum Soft {
    Max,
    LogMax,
    Min,
}

/// softmax family along `axis`, with `temperature`; the output dtype may be widened (`dtype`).
fn softmax(call: &Call<'_>, kind: Soft) -> Result<Plan> {
    let p = call.params;
    let use_length = p.or("use_length", param::boolean, "a boolean", false)?;
    if use_length {
        return Err(Error::not_supported(format!(
            "operator {}: use_length=True is not supported yet",
            call.name
        )));
    }
    let x = inputs(call, 1)?[0].clone();
    float_only(call, x.dtype)?;
    let axis = norm_axis(
        call,
        p.or("axis", param::int, "an integer", -1)?,
        x.shape.len(),
    )?;
    let temp = p
        .optional("temperature", param::float, "a number")?
        .unwrap_or(1.0);
    let out_dtype = p
        .optional("dtype", param::dtype, "a dtype name")?
        .unwrap_or(x.dtype);
    let shape = dims(&x.shape);
    let mut mask = vec![false; shape.len()];
    mask[axis] = true;
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&x.shape, out_dtype)],
        move |k| {
            let (ks, kst, _, rst) = split_axes(&shape, &mask);
            let lines: usize = ks.iter().product();
            let mut bases = Vec::with_capacity(lines);
            walk(&ks, [&kst], [0], 0, lines, |_, [b]| bases.push(b));
            let lines = Lines { bases: &bases, n: shape[axis], stride: rst[0], kind, temp };
            if out_dtype == dtype {
                crate::with_element!(dtype, T => lines.forward::<T>(k.inputs[0].ptr::<T>(), k.outputs[0].ptr::<T>()));
            } else {
                // a wider output dtype: through f64
                let src: Vec<f64> = crate::with_element!(dtype, T => k.inputs[0].slice::<T>().iter().map(|v| v.to_f64()).collect());
                let mut res = vec![0f64; src.len()];
                lines.forward::<f64>(src.as_ptr().cast_mut(), res.as_mut_ptr());
                crate::with_element!(out_dtype, O => {
                    for (o, &v) in k.outputs[0].slice_mut::<O>().iter_mut().zip(&res) {
                        *o = O::from_f64(v);
                    }
                });
            }
            Ok(())
        },
    ))
}

fn clip(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let lo = call.params.required("a_min", param::float, "a number")?;
    let hi = call.params.required("a_max", param::float, "a number")?;
    let dtype = x.dtype;
    Ok(Plan::map(vec![x], move |i, o| {
        let (xi, yo) = (&i[0], &o[0]);
        let n = xi.len();
        match dtype {
            // SAFETY: both hold `n` f32; `yo` may be exactly `xi`.
            DType::F32 => unsafe {
                let (l, h) = (lo as f32, hi as f32);
                map1(xi.ptr::<f32>(), yo.ptr::<f32>(), n, 1, move |v: f32| {
                    if v < l {
                        l
                    } else if v > h {
                        h
                    } else {
                        v
                    }
                })
            },
            _ => crate::with_element!(dtype, T => {
                // SAFETY: as above, for `T`.
                unsafe { map1(xi.ptr::<T>(), yo.ptr::<T>(), n, 1, |v: T| {
                    let f = v.to_f64();
                    if f < lo { T::from_f64(lo) } else if f > hi { T::from_f64(hi) } else { v }
                }) }
            }),
        }
    }))
}

/// `add_n`: the sum of any number of same-shape arrays.
fn add_n(call: &Call<'_>) -> Result<Plan> {
    call.params.optional("num_args", param::int, "an integer")?;
    let ins = call.inputs;
    if ins.is_empty() {
        return Err(Error::invalid(format!("operator {}: no inputs", call.name)));
    }
    for i in 1..ins.len() {
        same_dtype(call, 0, i)?;
        if ins[i].shape != ins[0].shape {
            return Err(Error::invalid(format!(
                "operator {}: input {i} has shape {:?}, input 0 {:?}",
                call.name,
                &ins[i].shape[..],
                &ins[0].shape[..]
            )));
        }
    }
    let dtype = ins[0].dtype;
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        let out = &k.outputs[0];
        let o = out.byte_ptr();
        // the runner lets the output be exactly one input: start from that one
        let start = k.inputs.iter().position(|x| x.byte_ptr() == o);
        if start.is_none() {
            crate::operator::ops::creation::convert(&k.inputs[0], out);
        }
        let first = start.unwrap_or(0);
        for (i, x) in k.inputs.iter().enumerate() {
            if i != first {
                apply_same::<Add>(out, x, out, dtype);
            }
        }
        Ok(())
    })
    .elementwise()
    .with_gpu(GpuKernel::Sum))
}

/// `Dropout`: in training mode (or with `mode='always'`) each element is kept with probability
/// `1 - p` and scaled by `1 / (1 - p)`, else zeroed; with `axes` one draw is shared along those
/// axes. Outside training, an identity.
fn dropout(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let params = call.params;
    let p = params.or("p", param::float, "a number", 0.5)?;
    let mode = params.or("mode", param::choice, "training or always", "training".into())?;
    let axes = params.or("axes", param::shape, "a tuple of axes", vec![])?;
    params.optional("cudnn_off", param::boolean, "a boolean")?;
    if mode != "training" && mode != "always" {
        return Err(Error::invalid(format!(
            "operator {}: mode must be 'training' or 'always', got '{mode}'",
            call.name
        )));
    }
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::invalid(format!(
            "operator {}: p is {p}, a probability in [0, 1]",
            call.name
        )));
    }
    let nd = x.shape.len();
    let mut shared = vec![false; nd];
    for &a in &axes {
        shared[norm_axis(call, a, nd)?] = true;
    }
    let drop = (call.training || mode == "always") && p > 0.0;
    if !drop {
        return Ok(Plan::new(vec![x], move |k| {
            crate::operator::ops::creation::convert(&k.inputs[0], &k.outputs[0]);
            Ok(())
        })
        .elementwise());
    }
    float_only(call, x.dtype)?;
    // the mask's shape: 1 along the shared axes; element i of the output reads mask[m(i)]
    let shape: Vec<usize> = x.shape.iter().map(|&d| d.max(0) as usize).collect();
    let mask_shape: Vec<usize> = shape.iter().zip(&shared).map(|(&d, &s)| if s { 1 } else { d }).collect();
    let dtype = x.dtype;
    let keep = 1.0 - p;
    // the mask (0 or 1 / (1 - p), shaped like the draw) is a hidden second output, as MXNet's:
    // the gradient multiplies by it, so it uses the same draw
    let mask_dims: Vec<i64> = mask_shape.iter().map(|&d| d as i64).collect();
    let mask_desc = TensorDesc::new(&mask_dims, x.dtype);
    Ok(Plan::new(vec![x, mask_desc], move |k| {
        let res = k.resource.ok_or_else(|| Error::invalid("Dropout without its generator"))?;
        let mut g = res.random()?;
        let n_mask: usize = mask_shape.iter().product();
        let scale = if keep > 0.0 { 1.0 / keep } else { 0.0 };
        let mask: Vec<f64> = (0..n_mask)
            .map(|_| if g.next_unit() < keep { scale } else { 0.0 })
            .collect();
        let index = |mut i: usize| -> usize {
            // the mask index of output element i (row-major, shared axes collapsed)
            let (mut m, mut stride) = (0, 1);
            for d in (0..shape.len()).rev() {
                let c = i % shape[d].max(1);
                i /= shape[d].max(1);
                if mask_shape[d] > 1 {
                    m += c * stride;
                }
                stride *= mask_shape[d];
            }
            m
        };
        let (first, rest) = k.outputs.split_at_mut(1);
        crate::with_element!(dtype, T => {
            let (src, dst) = (k.inputs[0].slice::<T>(), first[0].slice_mut::<T>());
            for (i, (o, v)) in dst.iter_mut().zip(src).enumerate() {
                *o = T::from_f64(v.to_f64() * mask[index(i)]);
            }
            for (o, &m) in rest[0].slice_mut::<T>().iter_mut().zip(&mask) {
                *o = T::from_f64(m);
            }
        });
        Ok(())
    })
    .with_visible(1)
    .with_resource(ResourceRequest::Random))
}

/// BatchNorm: `out = (x - mean) / sqrt(var + eps) * gamma + beta` per channel of `axis`, with
/// the moving statistics outside training (or with `use_global_stats`) and the batch's own
/// (biased variance) in training mode. As in MXNet's forward pass, the moving statistics are not
/// changed (MXNet folds the batch statistics into them in the backward pass). With fix_gamma (the default) gamma is taken as 1 and, as in MXNet, the gamma
/// array is set to 1. With output_mean_var the mean and the inverse standard deviation used are
/// outputs 2 and 3, as MXNet's CPU kernel gives them.
fn batch_norm(call: &Call<'_>) -> Result<Plan> {
    batch_norm_plan(call, false)
}

/// `_mxrt_batch_norm_relu`: `relu(BatchNorm(...))` in one pass over memory, BatchNorm's inputs
/// and parameters (without `output_mean_var`). A CachedOp's recorded and training runs use it
/// for a BatchNorm whose only reader is a relu `Activation` (`graph/exec.rs`); each range of a
/// channel is rectified while it is still in the cache, with `Activation`'s relu, so the
/// result is the two ops' bit for bit, and so is the gradient (the relu gradient on the output,
/// then BatchNorm's).
fn batch_norm_relu(call: &Call<'_>) -> Result<Plan> {
    batch_norm_plan(call, true)
}

fn batch_norm_plan(call: &Call<'_>, relu: bool) -> Result<Plan> {
    let ins = inputs(call, 5)?;
    let x = ins[0].clone();
    float_only(call, x.dtype)?;
    let p = call.params;
    let eps = p.or("eps", param::float, "a number", 1e-3)?;
    p.or("momentum", param::float, "a number", 0.9)?;
    let fix_gamma = p.or("fix_gamma", param::boolean, "a boolean", true)?;
    let global = p.or("use_global_stats", param::boolean, "a boolean", false)?;
    let batch_stats = call.training && !global;
    let mean_var = p.or("output_mean_var", param::boolean, "a boolean", false)?;
    if relu && mean_var {
        return Err(Error::invalid(format!("operator {}: output_mean_var is not supported", call.name)));
    }
    p.or("cudnn_off", param::boolean, "a boolean", false)?;
    p.optional("min_calib_range", param::float, "a number")?;
    p.optional("max_calib_range", param::float, "a number")?;
    let nd = x.shape.len();
    if nd < 1 {
        return Err(Error::invalid(format!(
            "operator {}: data must have at least one dimension",
            call.name
        )));
    }
    let axis = norm_axis(call, p.or("axis", param::int, "an integer", 1)?, nd)?;
    let ch = x.shape[axis];
    for (i, name) in [(1, "gamma"), (2, "beta"), (3, "moving_mean"), (4, "moving_var")] {
        if ins[i].shape[..] != [ch] {
            return Err(Error::invalid(format!(
                "operator {}: {name} has shape {:?}, expected ({ch},) for {ch} channels on axis {axis}",
                call.name,
                &ins[i].shape[..]
            )));
        }
        let want = if x.dtype == DType::F16 { DType::F32 } else { x.dtype };
        if ins[i].dtype != want {
            return Err(Error::invalid(format!(
                "operator {}: {name} is {}, but {} data needs {} parameters",
                call.name,
                ins[i].dtype.name(),
                x.dtype.name(),
                want.name()
            )));
        }
    }
    let inner: usize = x.shape[axis + 1..].iter().product::<i64>().max(0) as usize;
    let c = ch.max(0) as usize;
    let outer = if inner == 0 || c == 0 { 0 } else { x.size() / (inner * c) };
    let (dtype, pdt) = (x.dtype, ins[1].dtype);
    let mut outs = vec![TensorDesc::new(&x.shape, dtype)];
    // the mean and inverse standard deviation used: BatchNorm's hidden outputs (visible with
    // output_mean_var), which a monitor reports as MXNet's does; the fused form has none
    let stats = !relu;
    if stats {
        outs.push(TensorDesc::new(&[ch], pdt));
        outs.push(TensorDesc::new(&[ch], pdt));
    }
    Ok(Plan::new(outs, move |k| {
        let param = |i: usize| -> Vec<f64> {
            let t = &k.inputs[i];
            crate::with_element!(t.dtype, T => {
                let p = t.ptr::<T>();
                // SAFETY: input i holds `len()` elements of its dtype; gamma (mutated, so not
                // offered as a slice) is only written after these reads.
                (0..t.len()).map(|j| unsafe { p.add(j).read() }.to_f64()).collect()
            })
        };
        let (gamma, beta) = (param(1), param(2));
        let (moving_mean, moving_var) = (param(3), param(4));
        let shape = BnShape { outer, c, inner };
        let bp = BnParams { batch: batch_stats, eps, fix_gamma, gamma: &gamma, mean: &moving_mean, var: &moving_var };
        let (mean, invstd): (Vec<f64>, Vec<f64>) = if dtype == DType::F32 {
            let src = k.inputs[0].slice::<f32>();
            let dst = Ptr(k.outputs[0].slice_mut::<f32>().as_mut_ptr());
            bn_forward_f32(src, dst, shape, &bp, &beta, relu)
        } else { crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let dst = Ptr(k.outputs[0].slice_mut::<T>().as_mut_ptr());
            bn_forward::<T>(src, dst, shape, &bp, &beta, relu)
        }) };
        if fix_gamma {
            // as MXNet does: a fixed gamma is 1, and the gamma array is set to 1 too
            let g = &k.inputs[1];
            crate::with_element!(pdt, P => {
                let p = g.ptr::<P>();
                for i in 0..g.len() {
                    // SAFETY: the plan declares input 1 mutated, so the engine op holds gamma's
                    // variable for writing; it has `len()` elements of `pdt`, and every parameter
                    // was copied out above, so no read of it follows.
                    unsafe { p.add(i).write(P::from_f64(1.0)) };
                }
            });
        }
        if stats {
            crate::with_element!(pdt, P => {
                for (o, &v) in k.outputs[1].slice_mut::<P>().iter_mut().zip(&mean) {
                    *o = P::from_f64(v);
                }
                for (o, &v) in k.outputs[2].slice_mut::<P>().iter_mut().zip(&invstd) {
                    *o = P::from_f64(v);
                }
            });
        }
        Ok(())
    })
    .mutating(if fix_gamma { &[1] } else { &[] })
    .with_visible(if mean_var { 3 } else { 1 }))
}

/// `BatchNorm_v1(data, gamma, beta, moving_mean, moving_var)`: BatchNorm's math on axis 1 of
/// 2-D or 4-D float32 data with v1's parameters (`eps`, `momentum`, `fix_gamma`,
/// `use_global_stats`, `output_mean_var`); its mean and var outputs (hidden unless
/// `output_mean_var`) are the statistics used, the variance itself where BatchNorm gives the
/// inverse standard deviation.
fn batch_norm_v1(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 5)?;
    if ins.iter().any(|t| t.dtype != DType::F32) {
        return Err(Error::invalid(format!(
            "operator {}: takes float32 arrays only (data is {})",
            call.name,
            ins[0].dtype.name()
        )));
    }
    if !matches!(ins[0].shape.len(), 2 | 4) {
        return Err(Error::invalid(format!(
            "operator {}: data must be 2-D or 4-D, got shape {:?}",
            call.name,
            &ins[0].shape[..]
        )));
    }
    let p = call.params;
    let eps = p.or("eps", param::float, "a number", 1e-3)?;
    let momentum = p.or("momentum", param::float, "a number", 0.9)?;
    let fix_gamma = p.or("fix_gamma", param::boolean, "a boolean", true)?;
    let global = p.or("use_global_stats", param::boolean, "a boolean", false)?;
    let mean_var = p.or("output_mean_var", param::boolean, "a boolean", false)?;
    let (e, m) = (eps.to_string(), momentum.to_string());
    let b = |v: bool| if v { "True" } else { "False" };
    let pairs = vec![
        ("eps", e.as_str()),
        ("momentum", m.as_str()),
        ("fix_gamma", b(fix_gamma)),
        ("use_global_stats", b(global)),
        ("output_mean_var", "True"),
    ];
    let params = param::Params::new(call.name, pairs)?;
    let inner = Call { params: &params, given_outputs: None, ..*call };
    let mut plan = batch_norm(&inner)?;
    let kernel = std::mem::replace(&mut plan.kernel, Box::new(|_| Ok(())));
    plan.kernel = Box::new(move |k| {
        kernel(k)?;
        // the inverse standard deviation BatchNorm gives, as the variance
        for v in k.outputs[2].slice_mut::<f32>() {
            *v = (1.0 / (*v as f64 * *v as f64) - eps) as f32;
        }
        Ok(())
    });
    Ok(plan.with_visible(if mean_var { 3 } else { 1 }))
}

pub(crate) fn register(t: &mut Entries) {
    // BatchNorm_v1 is BatchNorm with the older parameter set: one graph definition
    let forms: [(&'static str, &'static dyn Operator); 2] =
        [("BatchNorm", &batch_norm), ("BatchNorm_v1", &batch_norm_v1)];
    for form in forms {
        t.push(form)
            .grad(batch_norm_grad)
            .signature(|p| {
                let visible = if param_flag(p, "output_mean_var", false)? { 3 } else { 1 };
                Ok(Signature::simple(&["data", "gamma", "beta", "moving_mean", "moving_var"])
                    .named_outputs(&["output", "mean", "var"], visible)
                    .mutating(&[3, 4]))
            })
            .shape_rule(ShapeRule::Rule(batch_norm_shapes))
            .input_var_attr(|i| match i {
                3 => Some(("__init__", "[\"zero\", {}]")),
                4 => Some(("__init__", "[\"one\", {}]")),
                _ => None,
            });
    }
    t.push(("Activation", &activation))
        .grad(activation_grad)
        .shape_rule(ShapeRule::Same);
    t.push(("LeakyReLU", &leaky_relu))
        .grad(leaky_relu_grad)
        .signature(|p| {
            Ok(match param(p, "act_type").unwrap_or("leaky") {
                "prelu" => Signature::simple(&["data", "gamma"]),
                "rrelu" => Signature::simple(&["data"]).named_outputs(&["output", "mask"], 1),
                _ => Signature::simple(&["data"]),
            })
        })
        .shape_rule(ShapeRule::Rule(|p, ins, _| {
            // prelu's gamma has one slope per channel (axis 1)
            let mut out = vec![None; ins.len()];
            if ins.len() == 2
                && param(p, "act_type") == Some("prelu")
                && let Some(x) = &ins[0]
                && x.len() >= 2
            {
                out[1] = Some(vec![x[1]]);
            }
            Ok((out, Vec::new()))
        }));
    t.push(("softmax", &|c: &Call<'_>| softmax(c, Soft::Max)))
        .grad(softmax_grad)
        .signature(|p| {
            Ok(if param_flag(p, "use_length", false)? {
                Signature::simple(&["data", "length"])
            } else {
                Signature::simple(&["data"])
            })
        });
    t.push(("log_softmax", &|c: &Call<'_>| softmax(c, Soft::LogMax)))
        .grad(softmax_grad)
        .shape_rule(ShapeRule::Same);
    t.push(("softmin", &|c: &Call<'_>| softmax(c, Soft::Min)))
        .grad(softmax_grad)
        .shape_rule(ShapeRule::Same);
    t.push(("clip", &clip))
        .shape_rule(ShapeRule::Same)
        .stype(StorageRule::ZeroPreserving)
        .grad(|g| {
            let p = passed(g, &["a_min", "a_max"]);
            let dx = g.op("_mxrt_clip_grad", &[g.dy(0), g.x(0)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        });
    t.push(("add_n", &add_n))
        .stype(StorageRule::SameStorage)
        .shape_rule(ShapeRule::Same)
        .grad(|g| Ok((0..g.inputs.len()).map(|_| Some(g.dy(0))).collect()));
    t.push(("Dropout", &dropout))
        .grad(dropout_grad)
        .signature(|_| Ok(Signature::simple(&["data"]).named_outputs(&["output", "mask"], 1)))
        // the output and its (hidden) mask have the data's shape
        .shape_rule(ShapeRule::Rule(|_, ins, outs| {
            let known = ins.first().cloned().flatten().or_else(|| outs.first().cloned().flatten());
            Ok((vec![known.clone()], vec![known.clone(), known]))
        }));

    t.def("_mxrt_activation_grad", &activation_backward).grad(activation_backward_grad);
    t.def("_mxrt_leaky_grad", &leaky_backward).grad(leaky_backward_grad);
    t.def("_mxrt_prelu_grad", &prelu_backward).grad(prelu_backward_grad);
    t.def("_mxrt_softmax_grad", &softmax_backward).grad(softmax_backward_grad);
    t.def("_mxrt_clip_grad", &clip_backward).grad(|g| {
        let p = passed(g, &["a_min", "a_max"]);
        let d = g.op("_mxrt_clip_grad", &[g.dy(0), g.x(1)], &as_refs(&p))?;
        Ok(vec![Some(d), None])
    });
    t.def("_mxrt_batch_norm_grad", &batch_norm_backward);
    t.def("_mxrt_batch_norm_relu", &batch_norm_relu).grad(batch_norm_relu_grad);
}

/// BatchNorm in graph inference: gamma, beta, the moving statistics and the (hidden) mean and
/// variance outputs have one value per channel of `axis`.
fn batch_norm_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let Some(x) = ins.first().cloned().flatten() else {
        return Ok((vec![None; ins.len()], Vec::new()));
    };
    let nd = x.len() as i64;
    let axis = param_int(p, "axis", 1)?;
    let a = if axis < 0 { axis + nd } else { axis };
    if a < 0 || a >= nd {
        return Err(Error::invalid(format!(
            "axis {axis} is out of range for data of {nd} dimensions"
        )));
    }
    let ch = Some(vec![x[a as usize]]);
    let mut for_ins = vec![ch.clone(); ins.len()];
    for_ins[0] = None;
    Ok((for_ins, vec![None, ch.clone(), ch]))
}

// ---------------------------------------------------------------------------------------------
// Gradients. Each forward's gradient is one fused pass (an internal `_mxrt_*` op below) where
// composing ops would take several; the internal ops are themselves differentiable (composed of
// ops) where that is reasonable, so second-order gradients work.

/// A parameter of the forward as an owned string (`default` when absent).
fn owned(g: &GradCtx<'_>, key: &str, default: &str) -> String {
    g.param_set(key).unwrap_or(default).to_string()
}

/// `out[i] = f(a[i], b[i])` over three tensors of one dtype: float32 and float16 compute in
/// f32, float64 in f64, other dtypes through f64 (`out` may be exactly `a` or `b`).
fn zip_float(
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
    dtype: DType,
    cost: usize,
    f32f: impl Fn(f32, f32) -> f32 + Sync,
    f64f: impl Fn(f64, f64) -> f64 + Sync,
) {
    let n = out.len();
    // SAFETY (all arms): the three tensors hold `n` elements of `dtype` (planned with one shape
    // and dtype); the plan is elementwise, so `out` may be exactly an input, which `map2` allows.
    match dtype {
        DType::F32 => unsafe { map2(a.ptr::<f32>(), b.ptr::<f32>(), out.ptr::<f32>(), n, cost, f32f) },
        DType::F64 => unsafe { map2(a.ptr::<f64>(), b.ptr::<f64>(), out.ptr::<f64>(), n, cost, f64f) },
        DType::F16 => unsafe {
            map2(a.ptr::<f16>(), b.ptr::<f16>(), out.ptr::<f16>(), n, cost, |x: f16, y: f16| {
                f16::from_f32(f32f(x.to_f32(), y.to_f32()))
            })
        },
        other => crate::with_element!(other, T => unsafe {
            map2(a.ptr::<T>(), b.ptr::<T>(), out.ptr::<T>(), n, cost, |x: T, y: T| {
                T::from_f64(f64f(x.to_f64(), y.to_f64()))
            })
        }),
    }
}

/// An elementwise plan over two inputs of `x`'s shape and dtype: [`zip_float`] of them, into an
/// output that may be either input.
fn zip_plan(
    x: TensorDesc,
    cost: usize,
    f32f: impl Fn(f32, f32) -> f32 + Send + Sync + 'static,
    f64f: impl Fn(f64, f64) -> f64 + Send + Sync + 'static,
) -> Plan {
    let dtype = x.dtype;
    Plan::new(vec![x], move |k| {
        zip_float(
            &k.inputs[0],
            &k.inputs[1],
            &k.outputs[0],
            dtype,
            cost,
            f32f,
            f64f,
        );
        Ok(())
    })
    .elementwise()
}

/// [`zip_float`] with a third input.
#[allow(clippy::too_many_arguments)]
fn zip3_float(
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    out: &Tensor,
    dtype: DType,
    cost: usize,
    f32f: impl Fn(f32, f32, f32) -> f32 + Sync,
    f64f: impl Fn(f64, f64, f64) -> f64 + Sync,
) {
    fn go<T: Element>(a: &Tensor, b: &Tensor, c: &Tensor, out: &Tensor, cost: usize, f: impl Fn(T, T, T) -> T + Sync) {
        let n = out.len();
        let (a, b, c, o) = (Ptr(a.ptr::<T>()), Ptr(b.ptr::<T>()), Ptr(c.ptr::<T>()), Ptr(out.ptr::<T>()));
        for_ranges(n, cost, |s, e| {
            for i in s..e {
                // SAFETY: the four tensors hold `n` elements of `T` (one planned shape and dtype);
                // element `i` of every input is read before element `i` of the output (which may
                // be exactly an input) is written; ranges given to threads are disjoint.
                unsafe { *o.get().add(i) = f(*a.get().add(i), *b.get().add(i), *c.get().add(i)) }
            }
        });
    }
    match dtype {
        DType::F32 => go::<f32>(a, b, c, out, cost, f32f),
        DType::F64 => go::<f64>(a, b, c, out, cost, f64f),
        DType::F16 => go::<f16>(a, b, c, out, cost, |x: f16, y: f16, z: f16| {
            f16::from_f32(f32f(x.to_f32(), y.to_f32(), z.to_f32()))
        }),
        other => crate::with_element!(other, T => go::<T>(a, b, c, out, cost, |x: T, y: T, z: T| {
            T::from_f64(f64f(x.to_f64(), y.to_f64(), z.to_f64()))
        })),
    }
}

/// Checks that an elementwise gradient op's inputs have one shape and dtype.
fn same_inputs(call: &Call<'_>, n: usize) -> Result<TensorDesc> {
    let ins = inputs(call, n)?;
    for i in 1..n {
        same_dtype(call, 0, i)?;
        if ins[i].shape != ins[0].shape {
            return Err(Error::invalid(format!(
                "operator {}: input {i} has shape {:?}, input 0 {:?}",
                call.name,
                &ins[i].shape[..],
                &ins[0].shape[..]
            )));
        }
    }
    Ok(ins[0].clone())
}

/// `Activation`'s derivative, in terms of the value its gradient reads: the output for relu,
/// sigmoid, tanh and softrelu, the input for softsign (as MXNet's `_backward_Activation`).
#[derive(Clone, Copy)]
enum Act {
    Relu,
    Sigmoid,
    Tanh,
    SoftRelu,
    SoftSign,
}

impl Act {
    fn parse(call: &Call<'_>) -> Result<Act> {
        let act = call.params.required(
            "act_type",
            param::choice,
            "relu, sigmoid, tanh, softrelu or softsign",
        )?;
        Ok(match act.as_str() {
            "relu" => Act::Relu,
            "sigmoid" => Act::Sigmoid,
            "tanh" => Act::Tanh,
            "softrelu" => Act::SoftRelu,
            "softsign" => Act::SoftSign,
            other => {
                return Err(Error::invalid(format!(
                    "operator {}: act_type must be relu, sigmoid, tanh, softrelu or softsign, got '{other}'",
                    call.name
                )));
            }
        })
    }

    #[inline(always)]
    fn d<R: Real>(self, v: R) -> R {
        match self {
            Act::Relu => {
                if v > R::ZERO {
                    R::ONE
                } else {
                    R::ZERO
                }
            }
            Act::Sigmoid => v * (R::ONE - v),
            Act::Tanh => R::ONE - v * v,
            // y = ln(1 + e^x): dy/dx = 1 - e^-y
            Act::SoftRelu => -(-v).exp_m1(),
            Act::SoftSign => {
                let a = R::ONE + v.abs();
                R::ONE / (a * a)
            }
        }
    }
}

/// `_mxrt_activation_grad(dy, v)`: `dy * f'(v)` in one pass (`v` as [`Act`] says).
fn activation_backward(call: &Call<'_>) -> Result<Plan> {
    let x = same_inputs(call, 2)?;
    let act = Act::parse(call)?;
    Ok(zip_plan(
        x,
        4,
        move |g: f32, v: f32| g * act.d(v),
        move |g: f64, v: f64| g * act.d(v),
    ))
}

fn activation_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let act = owned(g, "act_type", "relu");
    let v = if act == "softsign" { g.x(0) } else { g.y(0) };
    let dx = g.op("_mxrt_activation_grad", &[g.dy(0), v], &[("act_type", &act)])?;
    Ok(vec![Some(dx)])
}

/// The gradient of `_mxrt_activation_grad(dy, v) = dy * f'(v)`: `go * f'(v)` for `dy` (the op
/// itself) and `go * dy * f''(v)` for `v`, with `f''` composed of differentiable ops.
fn activation_backward_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let act = owned(g, "act_type", "relu");
    let (dy, v, go) = (g.x(0), g.x(1), g.dy(0));
    let ddy = if g.needs(0) {
        Some(g.op("_mxrt_activation_grad", &[go, v], &[("act_type", &act)])?)
    } else {
        None
    };
    let h = if !g.needs(1) {
        None
    } else {
        match act.as_str() {
            // sigmoid: f' = y (1 - y), d/dy = 1 - 2y
            "sigmoid" => {
                let t = g.scale(v, -2.0)?;
                Some(g.shift(t, 1.0)?)
            }
            // tanh: f' = 1 - y², d/dy = -2y
            "tanh" => Some(g.scale(v, -2.0)?),
            // softrelu: f' = 1 - e^-y, d/dy = e^-y
            "softrelu" => {
                let n = g.neg(v)?;
                Some(g.op("exp", &[n], &[])?)
            }
            // softsign: f' = (1 + |x|)^-2, d/dx = -2 sign(x) (1 + |x|)^-3
            "softsign" => {
                let a = g.op("abs", &[v], &[])?;
                let a = g.shift(a, 1.0)?;
                let p = g.op("_power_scalar", &[a], &[("scalar", "-3")])?;
                let s = g.op("sign", &[v], &[])?;
                let t = g.mul(s, p)?;
                Some(g.scale(t, -2.0)?)
            }
            // relu: f' is piecewise constant
            _ => None,
        }
    };
    Ok(vec![ddy, times_both(g, go, dy, h)?])
}

/// `go * dy * h` where there is an `h`: the input's part of a second-order gradient whose first
/// derivative's own derivative is `h`.
fn times_both(g: &mut GradCtx<'_>, go: Val, dy: Val, h: Option<Val>) -> Result<Option<Val>> {
    match h {
        Some(h) => {
            let t = g.mul(go, dy)?;
            Ok(Some(g.mul(t, h)?))
        }
        None => Ok(None),
    }
}

const SELU_LAMBDA: f64 = 1.0507009873554805;
const SELU_ALPHA: f64 = 1.6732632423543772;

/// `LeakyReLU`'s derivative in terms of its input (MXNet reads the output for leaky, elu and
/// selu; the input gives the same values for positive slopes, and the right ones otherwise).
#[derive(Clone, Copy)]
enum LeakyD {
    Leaky(f64),
    Elu(f64),
    Selu,
    Gelu,
}

impl LeakyD {
    #[inline(always)]
    fn d<R: Real>(self, x: R) -> R {
        let pos = x > R::ZERO;
        match self {
            LeakyD::Leaky(s) => {
                if pos {
                    R::ONE
                } else {
                    c(s)
                }
            }
            LeakyD::Elu(s) => {
                if pos {
                    R::ONE
                } else {
                    c::<R>(s) * x.exp()
                }
            }
            LeakyD::Selu => {
                if pos {
                    c(SELU_LAMBDA)
                } else {
                    c::<R>(SELU_LAMBDA * SELU_ALPHA) * x.exp()
                }
            }
            // x Φ(x): Φ(x) + x φ(x)
            LeakyD::Gelu => {
                let phi = (x * x * c(-0.5)).exp() * c(1.0 / (2.0 * std::f64::consts::PI).sqrt());
                c::<R>(0.5) * (R::ONE + (x * c(std::f64::consts::FRAC_1_SQRT_2)).erf()) + x * phi
            }
        }
    }
}

/// `_mxrt_leaky_grad(dy, x[, mask])`: `dy * f'(x)` for LeakyReLU's leaky, elu, selu, gelu and
/// rrelu (whose slopes are the forward's `mask` output, the third input).
fn leaky_backward(call: &Call<'_>) -> Result<Plan> {
    let p = call.params;
    let act = p.or("act_type", param::choice, "leaky, elu, selu, gelu or rrelu", "leaky".into())?;
    let slope = p.or("slope", param::float, "a number", 0.25)?;
    p.or("lower_bound", param::float, "a number", 0.125)?;
    p.or("upper_bound", param::float, "a number", 0.334)?;
    if act == "rrelu" {
        let x = same_inputs(call, 3)?;
        let dtype = x.dtype;
        return Ok(Plan::new(vec![x], move |k| {
            zip3_float(&k.inputs[0], &k.inputs[1], &k.inputs[2], &k.outputs[0], dtype, 1,
                |g: f32, x: f32, m: f32| if x > 0.0 { g } else { g * m },
                |g: f64, x: f64, m: f64| if x > 0.0 { g } else { g * m });
            Ok(())
        })
        .elementwise());
    }
    let x = same_inputs(call, 2)?;
    let d = match act.as_str() {
        "leaky" => LeakyD::Leaky(slope),
        "elu" => LeakyD::Elu(slope),
        "selu" => LeakyD::Selu,
        "gelu" => LeakyD::Gelu,
        other => {
            return Err(Error::invalid(format!(
                "operator {}: act_type must be leaky, elu, selu, gelu or rrelu, got '{other}'",
                call.name
            )));
        }
    };
    Ok(zip_plan(
        x,
        8,
        move |g: f32, x: f32| g * d.d(x),
        move |g: f64, x: f64| g * d.d(x),
    ))
}

fn leaky_relu_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let act = owned(g, "act_type", "leaky");
    match act.as_str() {
        "prelu" => {
            let outs = g.ops("_mxrt_prelu_grad", &[g.dy(0), g.x(0), g.x(1)], &[])?;
            Ok(vec![Some(outs[0]), Some(outs[1])])
        }
        // the slopes are the second output, drawn in training and the bounds' mean otherwise
        "rrelu" => {
            let p = passed(g, &["act_type"]);
            let dx = g.op("_mxrt_leaky_grad", &[g.dy(0), g.x(0), g.y(1)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        }
        _ => {
            let p = passed(g, &["act_type", "slope"]);
            let dx = g.op("_mxrt_leaky_grad", &[g.dy(0), g.x(0)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        }
    }
}

/// The gradient of `_mxrt_leaky_grad(dy, x[, mask]) = dy * f'(x)`: the op itself for `dy`,
/// `go * dy * f''(x)` (composed of ops) for `x`; the slopes of rrelu get none.
fn leaky_backward_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let act = owned(g, "act_type", "leaky");
    let (dy, x, go) = (g.x(0), g.x(1), g.dy(0));
    let params: Vec<(String, String)> = g.params.to_vec();
    let p: Vec<(&str, &str)> = params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let ddy = if g.needs(0) {
        let mut ins = vec![go, x];
        if g.inputs.len() > 2 {
            ins.push(g.x(2));
        }
        Some(g.op("_mxrt_leaky_grad", &ins, &p)?)
    } else {
        None
    };
    let h = if !g.needs(1) {
        None
    } else {
        match act.as_str() {
            // elu: f'' = slope e^x below 0; selu: λα e^x below 0
            "elu" | "selu" => {
                let k = if act == "elu" { g.float("slope", 0.25)? } else { SELU_LAMBDA * SELU_ALPHA };
                let below = g.op("_lesser_equal_scalar", &[x], &[("scalar", "0")])?;
                let e = g.op("exp", &[x], &[])?;
                let t = g.mul(below, e)?;
                Some(g.scale(t, k)?)
            }
            // gelu: f'' = φ(x) (2 - x²)
            "gelu" => {
                let sq = g.op("square", &[x], &[])?;
                let e = g.scale(sq, -0.5)?;
                let e = g.op("exp", &[e], &[])?;
                let e = g.scale(e, 1.0 / (2.0 * std::f64::consts::PI).sqrt())?;
                let two = g.op("_rminus_scalar", &[sq], &[("scalar", "2")])?;
                Some(g.mul(e, two)?)
            }
            _ => None,
        }
    };
    let mut out = vec![ddy, times_both(g, go, dy, h)?];
    if g.inputs.len() > 2 {
        out.push(None);
    }
    Ok(out)
}

/// `_mxrt_prelu_grad(dy, x, gamma)`: `(dy * (x > 0 ? 1 : gamma), Σ dy * min(x, 0))`, gamma per
/// channel (axis 1) or one value, summed over the other axes.
fn prelu_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    same_dtype(call, 0, 1)?;
    same_dtype(call, 0, 2)?;
    if ins[0].shape != ins[1].shape {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for data of shape {:?}",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..]
        )));
    }
    let (x, gm) = (ins[1].clone(), ins[2].clone());
    let (per_channel, inner, ch) = prelu_channels(call, &x, &gm)?;
    let dtype = x.dtype;
    Ok(Plan::new(vec![x, gm], move |k| {
        crate::with_element!(dtype, T => {
            let (dy, xs, gs) = (k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>(), k.inputs[2].slice::<T>());
            let mut dg = vec![0f64; gs.len()];
            let (first, rest) = k.outputs.split_at_mut(1);
            for (i, ((o, &d), &v)) in first[0].slice_mut::<T>().iter_mut().zip(dy).zip(xs).enumerate() {
                let j = if per_channel { (i / inner.max(1)) % ch } else { 0 };
                let (d, v) = (d.to_f64(), v.to_f64());
                if v > 0.0 {
                    *o = T::from_f64(d);
                } else {
                    *o = T::from_f64(d * gs[j].to_f64());
                    dg[j] += d * v;
                }
            }
            for (o, &v) in rest[0].slice_mut::<T>().iter_mut().zip(&dg) {
                *o = T::from_f64(v);
            }
        });
        Ok(())
    }))
}

/// The gradient of `_mxrt_prelu_grad(dy, x, γ) = (dy·s, Σ dy·min(x, 0))`, s = (x > 0 ? 1 : γ),
/// with incoming `(gdx, gdγ)`: `gdx·s + gdγ·min(x, 0)` for dy, `gdγ·dy·[x ≤ 0]` for x and
/// `Σ gdx·dy·[x ≤ 0]` for γ. Products and sums per channel are the op itself read at x = -1
/// (there `s` is γ and `min(x, 0)` is -1).
fn prelu_backward_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let (dy, x, gamma, gdx, gdg) = (g.x(0), g.x(1), g.x(2), g.dy(0), g.dy(1));
    let ones = g.ones_like(x)?;
    let minus = g.neg(ones)?;
    let below = g.op("_lesser_equal_scalar", &[x], &[("scalar", "0")])?;
    // v·γ per channel
    let per_channel = |g: &mut GradCtx<'_>, v: Val, k: Val| -> Result<Val> {
        Ok(g.ops("_mxrt_prelu_grad", &[v, minus, k], &[])?[0])
    };
    let mut out = vec![None, None, None];
    if g.needs(0) {
        let a = g.ops("_mxrt_prelu_grad", &[gdx, x, gamma], &[])?[0];
        let neg = g.op("_minimum_scalar", &[x], &[("scalar", "0")])?;
        let b = per_channel(g, neg, gdg)?;
        out[0] = Some(g.add(a, b)?);
    }
    if g.needs(1) {
        let t = g.mul(dy, below)?;
        out[1] = Some(per_channel(g, t, gdg)?);
    }
    if g.needs(2) {
        let t = g.mul(gdx, dy)?;
        let t = g.mul(t, below)?;
        // Σ t·min(-1, 0) = -Σ t
        let s = g.ops("_mxrt_prelu_grad", &[t, minus, gamma], &[])?[1];
        out[2] = Some(g.neg(s)?);
    }
    Ok(out)
}

/// The forward's softmax kind and parameters as the gradient op takes them.
fn soft_params(g: &GradCtx<'_>) -> Vec<(String, String)> {
    let kind = match g.name {
        "log_softmax" => "log_softmax",
        "softmin" => "softmin",
        _ => "softmax",
    };
    let mut p: Vec<(String, String)> = vec![("kind".into(), kind.into())];
    for key in ["axis", "temperature"] {
        if let Some(v) = g.param(key) {
            p.push((key.into(), v.into()));
        }
    }
    p
}

/// Parameters as `GradCtx::op` takes them.
pub(super) fn as_refs(p: &[(String, String)]) -> Vec<(&str, &str)> {
    p.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The forward's parameters among `keys`, owned (so ops can be applied while they are held).
pub(super) fn passed(g: &GradCtx<'_>, keys: &[&str]) -> Vec<(String, String)> {
    g.params.iter().filter(|(k, _)| keys.contains(&k.as_str())).cloned().collect()
}

fn softmax_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let p = soft_params(g);
    let mut ins = vec![g.dy(0), g.y(0)];
    // with `dtype` the output is wider than the input: the gradient takes the input's dtype
    if g.param_set("dtype").is_some() {
        ins.push(g.x(0));
    }
    let dx = g.op("_mxrt_softmax_grad", &ins, &as_refs(&p))?;
    Ok(vec![Some(dx)])
}

/// `_mxrt_softmax_grad(dy, y[, like])` along `axis` with `temperature` T:
/// - softmax: `y * (dy - Σ dy·y) / T`; softmin: the same negated;
/// - log_softmax: `(dy - e^y · Σ dy) / T`.
///
/// The result has `like`'s dtype when given (else `dy`'s).
fn softmax_backward(call: &Call<'_>) -> Result<Plan> {
    let p = call.params;
    let n_in = call.inputs.len();
    if !(2..=3).contains(&n_in) {
        return Err(Error::invalid(format!(
            "operator {} takes 2 or 3 inputs, {n_in} given",
            call.name
        )));
    }
    let ins = call.inputs;
    if ins[0].shape != ins[1].shape || (n_in == 3 && ins[2].shape != ins[0].shape) {
        return Err(Error::invalid(format!(
            "operator {}: inputs have different shapes",
            call.name
        )));
    }
    let kind = match p.or("kind", param::choice, "softmax, log_softmax or softmin", "softmax".into())?.as_str() {
        "softmax" => Soft::Max,
        "log_softmax" => Soft::LogMax,
        "softmin" => Soft::Min,
        other => {
            return Err(Error::invalid(format!(
                "operator {}: kind must be softmax, log_softmax or softmin, got '{other}'",
                call.name
            )));
        }
    };
    let x = ins[0].clone();
    let axis = norm_axis(call, p.or("axis", param::int, "an integer", -1)?, x.shape.len())?;
    let temp = p.optional("temperature", param::float, "a number")?.unwrap_or(1.0);
    let out_dtype = if n_in == 3 { ins[2].dtype } else { x.dtype };
    let (gdt, ydt) = (x.dtype, ins[1].dtype);
    let shape = dims(&x.shape);
    let mut mask = vec![false; shape.len()];
    mask[axis] = true;
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, out_dtype)], move |k| {
        let (ks, kst, _, rst) = split_axes(&shape, &mask);
        let n = shape[axis];
        let st = rst[0];
        let lines: usize = ks.iter().product();
        let mut bases = Vec::with_capacity(lines);
        walk(&ks, [&kst], [0], 0, lines, |_, [b]| bases.push(b));
        let lines = Lines { bases: &bases, n, stride: st, kind, temp };
        if gdt == ydt && gdt == out_dtype && matches!(gdt, DType::F32 | DType::F64 | DType::F16) {
            crate::with_element!(gdt, T => lines.run::<T>(k.inputs[0].ptr::<T>(), k.inputs[1].ptr::<T>(), k.outputs[0].ptr::<T>()));
        } else {
            // mixed dtypes: through f64 copies
            let read = |t: &Tensor| -> Vec<f64> {
                crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
            };
            let (dy, y) = (read(&k.inputs[0]), read(&k.inputs[1]));
            let mut out = vec![0f64; dy.len()];
            lines.run::<f64>(dy.as_ptr().cast_mut(), y.as_ptr().cast_mut(), out.as_mut_ptr());
            crate::with_element!(out_dtype, O => {
                for (o, &v) in k.outputs[0].slice_mut::<O>().iter_mut().zip(&out) {
                    *o = O::from_f64(v);
                }
            });
        }
        Ok(())
    }))
}

/// The lines of a softmax gradient: where they start, their length and stride.
struct Lines<'a> {
    bases: &'a [isize],
    n: usize,
    stride: isize,
    kind: Soft,
    temp: f64,
}

impl Lines<'_> {
    /// Calls `f(line buffers)` for every line (in parallel when large), with the line's
    /// elements of each array in `ins` copied to f64 buffers, and writes back the buffer `f`
    /// fills as `out`'s line.
    fn each<T: Element, const N: usize>(&self, ins: [*mut T; N], out: *mut T, f: impl Fn(&[Vec<f64>; N], &mut [f64]) + Sync) {
        let ins = ins.map(Ptr);
        let out = Ptr(out);
        let (n, st) = (self.n, self.stride);
        for_ranges(self.bases.len(), n.max(1) * 8, |s, e| {
            let mut bufs: [Vec<f64>; N] = std::array::from_fn(|_| vec![0f64; n]);
            let mut res = vec![0f64; n];
            for &b in &self.bases[s..e] {
                for (buf, p) in bufs.iter_mut().zip(&ins) {
                    if st == 1 {
                        // SAFETY: a line of `n` contiguous elements of the planned shape, which
                        // every buffer holds; inputs are only read.
                        let line = unsafe { std::slice::from_raw_parts(p.get().add(b as usize), n) };
                        for (v, x) in buf.iter_mut().zip(line) {
                            *v = x.to_f64();
                        }
                    } else {
                        for (i, v) in buf.iter_mut().enumerate() {
                            // SAFETY: as above, element `i` of the strided line.
                            *v = unsafe { *p.get().offset(b + i as isize * st) }.to_f64();
                        }
                    }
                }
                f(&bufs, &mut res);
                if st == 1 {
                    // SAFETY: the output holds the planned shape and is exclusive (the plan is
                    // staged); lines are disjoint, so threads write disjoint elements.
                    let line = unsafe { std::slice::from_raw_parts_mut(out.get().add(b as usize), n) };
                    for (o, &v) in line.iter_mut().zip(&res) {
                        *o = T::from_f64(v);
                    }
                } else {
                    for (i, &v) in res.iter().enumerate() {
                        // SAFETY: as above, element `i` of the strided line.
                        unsafe { *out.get().offset(b + i as isize * st) = T::from_f64(v) };
                    }
                }
            }
        });
    }

    /// Calls `f(line of a, line of b, line of out)` for every line of contiguous float32
    /// arrays, lines split over the pool.
    fn each_f32(&self, a: *mut f32, b: *mut f32, out: *mut f32, f: impl Fn(&[f32], &[f32], &mut [f32], &mut Vec<f32>) + Sync) {
        let (a, b, out) = (Ptr(a), Ptr(b), Ptr(out));
        let n = self.n;
        for_ranges(self.bases.len(), n.max(1) * 8, |s, e| {
            let mut scratch = Vec::new();
            for &base in &self.bases[s..e] {
                let base = base as usize;
                // SAFETY: every array holds the planned shape, whose line at `base` has `n`
                // contiguous elements; inputs are only read; the output is exclusive (the plan
                // is staged) and lines are disjoint, so threads write disjoint elements. `b` is
                // `a` or another input, never the output.
                let (la, lb, lo) = unsafe {
                    (
                        std::slice::from_raw_parts(a.get().add(base), n),
                        std::slice::from_raw_parts(b.get().add(base), n),
                        std::slice::from_raw_parts_mut(out.get().add(base), n),
                    )
                };
                f(la, lb, lo, &mut scratch);
            }
        });
    }

    /// softmax, log_softmax or softmin of every line of `x` into `out`.
    fn forward<T: Element>(&self, x: *mut T, out: *mut T) {
        let (kind, temp) = (self.kind, self.temp);
        if T::DTYPE == DType::F32 && self.stride == 1 {
            let (row, sign) = match kind {
                Soft::LogMax => (vmath::SoftRow::LogSoftmax, 1.0),
                Soft::Max => (vmath::SoftRow::Softmax, 1.0),
                Soft::Min => (vmath::SoftRow::Softmax, -1.0),
            };
            let t = temp as f32;
            let x = x.cast::<f32>();
            self.each_f32(x, x, out.cast(), |x, _, y, scratch| vmath::softmax_row(row, x, y, sign, t, scratch));
            return;
        }
        self.each([x], out, |[x], res| {
            for (r, &v) in res.iter_mut().zip(x) {
                *r = if kind == Soft::Min { -v / temp } else { v / temp };
            }
            let m = res.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            if kind == Soft::LogMax {
                let log_sum = res.iter().map(|&v| (v - m).exp()).sum::<f64>().ln();
                res.iter_mut().for_each(|r| *r = *r - m - log_sum);
            } else {
                let mut sum = 0.0;
                for r in res.iter_mut() {
                    *r = (*r - m).exp();
                    sum += *r;
                }
                res.iter_mut().for_each(|r| *r /= sum);
            }
        });
    }

    /// The gradient of every line from `dy` and `y` into `out`.
    fn run<T: Element>(&self, dy: *mut T, y: *mut T, out: *mut T) {
        let kind = self.kind;
        let scale = if kind == Soft::Min { -1.0 / self.temp } else { 1.0 / self.temp };
        if T::DTYPE == DType::F32 && self.stride == 1 {
            let row = if kind == Soft::LogMax { vmath::SoftRow::LogSoftmax } else { vmath::SoftRow::Softmax };
            self.each_f32(dy.cast(), y.cast(), out.cast(), |dy, y, o, _| vmath::softmax_grad_row(row, dy, y, o, scale));
            return;
        }
        self.each([dy, y], out, |[dy, y], res| {
            let sum: f64 = match kind {
                Soft::LogMax => dy.iter().sum(),
                _ => dy.iter().zip(y).map(|(g, v)| g * v).sum(),
            };
            for ((r, &g), &v) in res.iter_mut().zip(dy).zip(y) {
                *r = match kind {
                    Soft::LogMax => (g - v.exp() * sum) * scale,
                    _ => v * (g - sum) * scale,
                };
            }
        });
    }
}

/// The gradient of `_mxrt_softmax_grad(dy, y)`, composed of ops (s, t: sums along the axis):
/// - softmax/softmin (`o = ±y (dy - s) / T`, s = Σ dy·y): the op itself for `dy` (it is
///   symmetric in `dy`), `±(go (dy - s) - dy Σ go·y) / T` for `y`;
/// - log_softmax (`o = (dy - e^y Σ dy) / T`): `(go - Σ go·e^y) / T` for `dy`,
///   `-go e^y Σ dy / T` for `y`.
fn softmax_backward_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params: Vec<(String, String)> = g.params.to_vec();
    let kind = owned(g, "kind", "softmax");
    let axis = owned(g, "axis", "-1");
    let temp = g.float("temperature", 1.0)?;
    let (dy, y, go) = (g.x(0), g.x(1), g.dy(0));
    let sum_p = [("axis", axis.as_str()), ("keepdims", "True")];
    let mut out = vec![None; g.inputs.len()];
    if kind == "log_softmax" {
        let e = g.op("exp", &[y], &[])?;
        let ge = g.mul(go, e)?;
        if g.needs(0) {
            let u = g.op("sum", &[ge], &sum_p)?;
            let d = g.op("broadcast_sub", &[go, u], &[])?;
            out[0] = Some(g.scale(d, 1.0 / temp)?);
        }
        if g.needs(1) {
            let s = g.op("sum", &[dy], &sum_p)?;
            let d = g.op("broadcast_mul", &[ge, s], &[])?;
            out[1] = Some(g.scale(d, -1.0 / temp)?);
        }
        return Ok(out);
    }
    let sign = if kind == "softmin" { -1.0 } else { 1.0 };
    if g.needs(0) {
        // the op's matrix is symmetric: its transpose is itself, with dy's dtype
        let mut ins = vec![go, y];
        if g.inputs.len() > 2 {
            ins.push(dy);
        }
        out[0] = Some(g.op("_mxrt_softmax_grad", &ins, &as_refs(&params))?);
    }
    if g.needs(1) {
        let dyy = g.mul(dy, y)?;
        let s = g.op("sum", &[dyy], &sum_p)?;
        let goy = g.mul(go, y)?;
        let t = g.op("sum", &[goy], &sum_p)?;
        let a = g.op("broadcast_sub", &[dy, s], &[])?;
        let a = g.mul(go, a)?;
        let b = g.op("broadcast_mul", &[dy, t], &[])?;
        let d = g.sub(a, b)?;
        out[1] = Some(g.scale(d, sign / temp)?);
    }
    Ok(out)
}

/// `_mxrt_clip_grad(dy, x)`: `dy` where `a_min <= x <= a_max`, else 0.
fn clip_backward(call: &Call<'_>) -> Result<Plan> {
    let x = same_inputs(call, 2)?;
    let lo = call.params.required("a_min", param::float, "a number")?;
    let hi = call.params.required("a_max", param::float, "a number")?;
    let (l32, h32) = (lo as f32, hi as f32);
    Ok(zip_plan(
        x,
        1,
        move |g: f32, v: f32| if v >= l32 && v <= h32 { g } else { 0.0 },
        move |g: f64, v: f64| if v >= lo && v <= hi { g } else { 0.0 },
    ))
}

/// Dropout's gradient: `dy` times the forward's mask (its hidden output) where it dropped, else
/// `dy` itself.
fn dropout_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let p = g.float("p", 0.5)?;
    let always = g.param_set("mode") == Some("always");
    let dropped = (g.training || always) && p > 0.0 && g.outputs.len() > 1;
    let dx = if dropped {
        g.op("broadcast_mul", &[g.dy(0), g.y(1)], &[])?
    } else {
        g.dy(0)
    };
    Ok(vec![Some(dx)])
}

/// Data laid out as `outer × c × inner` (c channels).
#[derive(Clone, Copy)]
struct BnShape {
    outer: usize,
    c: usize,
    inner: usize,
}

/// What the BatchNorm gradient kernel needs besides the arrays.
struct BnParams<'a> {
    batch: bool,
    eps: f64,
    fix_gamma: bool,
    gamma: &'a [f64],
    mean: &'a [f64],
    var: &'a [f64],
}

/// One channel's statistics in the BatchNorm gradient.
#[derive(Clone, Copy, Default)]
struct BnStats {
    mean: f64,
    /// The biased batch variance (batch statistics only).
    var: f64,
    invstd: f64,
    sum_dy: f64,
    /// Σ (x - mean)·dy.
    dotp: f64,
}

/// The elements of one channel: `each(g)` calls `g` with each contiguous run of them.
type Each<'a> = &'a dyn Fn(&mut dyn FnMut(std::ops::Range<usize>));

/// Calls `f(j, each)` for every channel `j` (in parallel when large), where `each` walks the
/// channel's elements; collects the results.
fn per_channel<R: Copy + Default + Send>(s: BnShape, cost: usize, f: impl Fn(usize, Each<'_>) -> R + Sync) -> Vec<R> {
    let BnShape { outer, c, inner } = s;
    let mut out = vec![R::default(); c];
    for_chunks_mut(&mut out, outer * inner * cost, |start, chunk| {
        for (off, r) in chunk.iter_mut().enumerate() {
            let j = start + off;
            let each = |g: &mut dyn FnMut(std::ops::Range<usize>)| {
                for o in 0..outer {
                    let base = (o * c + j) * inner;
                    g(base..base + inner);
                }
            };
            *r = f(j, &each);
        }
    });
    out
}

/// `(Σ f(a[i], b[i])[0], Σ f(a[i], b[i])[1])` over `a` (`b` as long, or empty when `f` ignores
/// it), in four independent lanes per sum: a loop the compiler vectorises.
#[inline(always)]
fn lane_sums<T: Copy + Default>(a: &[T], b: &[T], f: impl Fn(T, T) -> [f64; 2]) -> [f64; 2] {
    let at = |i: usize| (a[i], b.get(i).copied().unwrap_or_default());
    let (mut l0, mut l1) = ([0.0f64; 4], [0.0f64; 4]);
    let full = a.len() / 4 * 4;
    if b.is_empty() {
        for c in a[..full].chunks_exact(4) {
            for j in 0..4 {
                let [u, v] = f(c[j], T::default());
                l0[j] += u;
                l1[j] += v;
            }
        }
    } else {
        for (c, d) in a[..full].chunks_exact(4).zip(b[..full].chunks_exact(4)) {
            for j in 0..4 {
                let [u, v] = f(c[j], d[j]);
                l0[j] += u;
                l1[j] += v;
            }
        }
    }
    let (mut s0, mut s1) = ((l0[0] + l0[1]) + (l0[2] + l0[3]), (l1[0] + l1[1]) + (l1[2] + l1[3]));
    for i in full..a.len() {
        let (u, v) = at(i);
        let [p, q] = f(u, v);
        s0 += p;
        s1 += q;
    }
    [s0, s1]
}

/// One channel's mean, biased variance and inverse standard deviation from the batch (`batch`)
/// or the moving statistics.
fn bn_stats<T: Element>(x: &[T], j: usize, n: f64, p: &BnParams<'_>, each: Each<'_>) -> (f64, f64, f64) {
    if !p.batch {
        return (p.mean[j], p.var[j], 1.0 / (p.var[j] + p.eps).sqrt());
    }
    let mut sum = 0.0;
    each(&mut |r| sum += lane_sums(&x[r], &x[..0], |v, _| [v.to_f64(), 0.0])[0]);
    let mean = sum / n;
    let mut sq = 0.0;
    each(&mut |r| sq += lane_sums(&x[r], &x[..0], |v, _| [(v.to_f64() - mean).powi(2), 0.0])[0]);
    let var = sq / n;
    let invstd = if sq == 0.0 && p.eps == 0.0 { 0.0 } else { 1.0 / (var + p.eps).sqrt() };
    (mean, var, invstd)
}

/// BatchNorm's output into `y`, channels in parallel; returns each channel's mean and inverse
/// standard deviation.
fn bn_forward<T: Element>(x: &[T], y: Ptr<T>, s: BnShape, p: &BnParams<'_>, beta: &[f64], relu: bool) -> (Vec<f64>, Vec<f64>) {
    let n = (s.outer * s.inner).max(1) as f64;
    let stats = per_channel(s, 4, |j, each| {
        let (mean, _, invstd) = bn_stats(x, j, n, p, each);
        let scale = invstd * if p.fix_gamma { 1.0 } else { p.gamma[j] };
        each(&mut |r| {
            // SAFETY: `y` holds the `outer·c·inner` elements of the data; each channel writes
            // only its own elements, and a channel goes to one thread.
            let out = unsafe { std::slice::from_raw_parts_mut(y.get().add(r.start), r.len()) };
            for (o, v) in out.iter_mut().zip(&x[r]) {
                *o = T::from_f64((v.to_f64() - mean) * scale + beta[j]);
            }
            if relu {
                // Activation's relu: positive values and NaN kept, the rest +0
                for o in out.iter_mut() {
                    let v = o.to_f64();
                    if !(v > 0.0 || v.is_nan()) {
                        *o = T::from_f64(0.0);
                    }
                }
            }
        });
        (mean, invstd)
    });
    stats.into_iter().unzip()
}

/// BatchNorm's data gradient into `dx`, channels in parallel; returns each channel's statistics.
/// Training (`batch`): `dx = (dy - mean(dy) - (x - mean)·Σ(x - mean)·dy·invstd²/n)·invstd·γ`;
/// otherwise `dx = dy·invstd·γ` with the moving statistics.
fn bn_backward<T: Element>(dy: &[T], x: &[T], dx: Ptr<T>, s: BnShape, p: &BnParams<'_>) -> Vec<BnStats> {
    let n = (s.outer * s.inner).max(1) as f64;
    per_channel(s, 6, |j, each| {
        let (mean, var, invstd) = bn_stats(x, j, n, p, each);
        let (mut sum_dy, mut dotp) = (0.0, 0.0);
        each(&mut |r| {
            let [s, p] = lane_sums(&dy[r.clone()], &x[r], |d, v| {
                let d = d.to_f64();
                [d, (v.to_f64() - mean) * d]
            });
            sum_dy += s;
            dotp += p;
        });
        let iw = invstd * if p.fix_gamma { 1.0 } else { p.gamma[j] };
        let kk = dotp * invstd * invstd / n;
        let mean_dy = sum_dy / n;
        each(&mut |r| {
            // SAFETY: `dx` holds the `outer·c·inner` elements of the data; each channel writes
            // only its own elements, and a channel goes to one thread.
            let out = unsafe { std::slice::from_raw_parts_mut(dx.get().add(r.start), r.len()) };
            for ((o, d), v) in out.iter_mut().zip(&dy[r.clone()]).zip(&x[r]) {
                let d = d.to_f64();
                let g = if p.batch { (d - mean_dy - (v.to_f64() - mean) * kk) * iw } else { d * iw };
                *o = T::from_f64(g);
            }
        });
        BnStats { mean, var, invstd, sum_dy, dotp }
    })
}

/// A channel's mean, biased variance and inverse standard deviation from its sums `Σx` and
/// `Σx²` over `n` elements (batch statistics), or the moving statistics.
fn bn_moments(sx: f64, sxx: f64, j: usize, n: f64, p: &BnParams<'_>) -> (f64, f64, f64) {
    if !p.batch {
        return (p.mean[j], p.var[j], 1.0 / (p.var[j] + p.eps).sqrt());
    }
    let mean = sx / n;
    let var = (sxx / n - mean * mean).max(0.0);
    let invstd = if var == 0.0 && p.eps == 0.0 { 0.0 } else { 1.0 / (var + p.eps).sqrt() };
    (mean, var, invstd)
}

/// [`bn_forward`] for float32 data: one pass for the statistics (f64 sums of exact squares),
/// one for the output, both vectorised ([`bn`]).
fn bn_forward_f32(x: &[f32], y: Ptr<f32>, s: BnShape, p: &BnParams<'_>, beta: &[f64], relu: bool) -> (Vec<f64>, Vec<f64>) {
    let n = (s.outer * s.inner).max(1) as f64;
    let stats = per_channel(s, 2, |j, each| {
        let mut t = [0.0f64; 2];
        if p.batch {
            each(&mut |r| {
                let q = bn::sums(&x[r]);
                t[0] += q[0];
                t[1] += q[1];
            });
        }
        let (mean, _, invstd) = bn_moments(t[0], t[1], j, n, p);
        let scale = invstd * if p.fix_gamma { 1.0 } else { p.gamma[j] };
        each(&mut |r| {
            // SAFETY: `y` holds the `outer·c·inner` elements of the data; each channel writes
            // only its own elements, and a channel goes to one thread.
            let out = unsafe { std::slice::from_raw_parts_mut(y.get().add(r.start), r.len()) };
            bn::affine(&x[r], out, bn::split(mean), scale as f32, beta[j] as f32);
            if relu {
                // Activation's relu on the range just written (still in the cache)
                for o in out.iter_mut() {
                    *o = Relu::f(*o);
                }
            }
        });
        (mean, invstd)
    });
    stats.into_iter().unzip()
}

/// [`bn_backward`] for float32 data: one pass for the sums (`Σx`, `Σx²`, `Σdy`, `Σx·dy` in
/// f64), one for the data gradient, both vectorised ([`bn`]).
fn bn_backward_f32(dy: &[f32], x: &[f32], dx: Ptr<f32>, s: BnShape, p: &BnParams<'_>) -> Vec<BnStats> {
    let n = (s.outer * s.inner).max(1) as f64;
    per_channel(s, 3, |j, each| {
        let mut t = [0.0f64; 4];
        each(&mut |r| {
            let q = bn::sums4(&x[r.clone()], &dy[r]);
            for (a, b) in t.iter_mut().zip(q) {
                *a += b;
            }
        });
        let (mean, var, invstd) = bn_moments(t[0], t[1], j, n, p);
        let (sum_dy, dotp) = (t[2], t[3] - mean * t[2]);
        let iw = invstd * if p.fix_gamma { 1.0 } else { p.gamma[j] };
        let kk = dotp * invstd * invstd / n;
        let mean_dy = sum_dy / n;
        each(&mut |r| {
            // SAFETY: `dx` holds the `outer·c·inner` elements of the data; each channel writes
            // only its own elements, and a channel goes to one thread.
            let out = unsafe { std::slice::from_raw_parts_mut(dx.get().add(r.start), r.len()) };
            if p.batch {
                let (a, b, c) = (iw, -kk * iw, -mean_dy * iw);
                bn::data_grad(&dy[r.clone()], &x[r], out, bn::split(mean), a as f32, b as f32, c as f32);
            } else {
                bn::affine(&dy[r], out, [0.0; 2], iw as f32, 0.0);
            }
        });
        BnStats { mean, var, invstd, sum_dy, dotp }
    })
}

/// BatchNorm's gradient: data, gamma (zero with fix_gamma) and beta from one pass of
/// `_mxrt_batch_norm_grad`, which also folds the batch statistics into the moving ones when the
/// forward used them, as MXNet's backward does; the moving statistics get no gradient.
fn batch_norm_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let dy = g.dy(0);
    batch_norm_grad_of(g, dy)
}

/// `_mxrt_batch_norm_relu`'s gradient: relu's on the output, then BatchNorm's.
fn batch_norm_relu_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let d = g.op("_mxrt_activation_grad", &[g.dy(0), g.y(0)], &[("act_type", "relu")])?;
    batch_norm_grad_of(g, d)
}

/// BatchNorm's gradient for the output gradient `dy`.
fn batch_norm_grad_of(g: &mut GradCtx<'_>, dy: Val) -> Result<Vec<Option<Val>>> {
    let global = g.flag("use_global_stats", false);
    let batch = if g.training && !global { "True" } else { "False" };
    let mut p = passed(g, &["eps", "momentum", "fix_gamma", "axis"]);
    p.push(("batch_stats".into(), batch.into()));
    let ins = [dy, g.x(0), g.x(1), g.x(3), g.x(4)];
    let outs = g.ops("_mxrt_batch_norm_grad", &ins, &as_refs(&p))?;
    let fix_gamma = g.flag("fix_gamma", true);
    Ok(vec![
        Some(outs[0]),
        if fix_gamma { None } else { Some(outs[1]) },
        Some(outs[2]),
        None,
        None,
    ])
}

/// `_mxrt_batch_norm_grad(dy, x, gamma, moving_mean, moving_var)`: BatchNorm's gradients of
/// data, gamma and beta. With `batch_stats` (training without use_global_stats) the statistics
/// are the batch's (recomputed from `x` as the forward computed them) and the moving statistics
/// are updated in place, `moving = moving * momentum + batch * (1 - momentum)`, as MXNet's
/// backward does; otherwise the moving statistics are the constants the forward used.
fn batch_norm_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 5)?;
    let p = call.params;
    let eps = p.or("eps", param::float, "a number", 1e-3)?;
    let momentum = p.or("momentum", param::float, "a number", 0.9)?;
    let fix_gamma = p.or("fix_gamma", param::boolean, "a boolean", true)?;
    let batch = p.or("batch_stats", param::boolean, "a boolean", true)?;
    let x = ins[1].clone();
    same_dtype(call, 0, 1)?;
    if ins[0].shape != x.shape || x.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for data of shape {:?}",
            call.name,
            &ins[0].shape[..],
            &x.shape[..]
        )));
    }
    let axis = norm_axis(call, p.or("axis", param::int, "an integer", 1)?, x.shape.len())?;
    let ch = x.shape[axis];
    for i in 2..5 {
        if ins[i].shape[..] != [ch] || ins[i].dtype != ins[2].dtype {
            return Err(Error::invalid(format!(
                "operator {}: input {i} has shape {:?} and dtype {}, expected ({ch},) {}",
                call.name,
                &ins[i].shape[..],
                ins[i].dtype.name(),
                ins[2].dtype.name()
            )));
        }
    }
    let inner: usize = x.shape[axis + 1..].iter().product::<i64>().max(0) as usize;
    let c = ch.max(0) as usize;
    let (dtype, pdt) = (x.dtype, ins[2].dtype);
    let outs = vec![
        TensorDesc::new(&x.shape, dtype),
        TensorDesc::new(&[ch], pdt),
        TensorDesc::new(&[ch], pdt),
    ];
    let outer = if inner == 0 || c == 0 { 0 } else { x.size() / (inner * c) };
    let plan = Plan::new(outs, move |k| {
        // inputs 3 and 4 may be written (mutated), so they are read through pointers
        let param = |i: usize| -> Vec<f64> {
            let t = &k.inputs[i];
            crate::with_element!(t.dtype, P => {
                let p = t.ptr::<P>();
                // SAFETY: input i holds `len()` elements of its dtype; the moving statistics are
                // written only after these reads, by this kernel.
                (0..t.len()).map(|j| unsafe { p.add(j).read() }.to_f64()).collect()
            })
        };
        let gamma = param(2);
        let (moving_mean, moving_var) = (param(3), param(4));
        let shape = BnShape { outer, c, inner };
        let bp = BnParams { batch, eps, fix_gamma, gamma: &gamma, mean: &moving_mean, var: &moving_var };
        let stats = if dtype == DType::F32 {
            let (dy, xs) = (k.inputs[0].slice::<f32>(), k.inputs[1].slice::<f32>());
            let dx = Ptr(k.outputs[0].slice_mut::<f32>().as_mut_ptr());
            bn_backward_f32(dy, xs, dx, shape, &bp)
        } else { crate::with_element!(dtype, T => {
            let (dy, xs) = (k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>());
            let dx = Ptr(k.outputs[0].slice_mut::<T>().as_mut_ptr());
            bn_backward::<T>(dy, xs, dx, shape, &bp)
        }) };
        let rest = &mut k.outputs[1..];
        crate::with_element!(pdt, P => {
            let (dg, db) = rest.split_at_mut(1);
            for (o, s) in dg[0].slice_mut::<P>().iter_mut().zip(&stats) {
                *o = P::from_f64(if fix_gamma { 0.0 } else { s.dotp * s.invstd });
            }
            for (o, s) in db[0].slice_mut::<P>().iter_mut().zip(&stats) {
                *o = P::from_f64(s.sum_dy);
            }
            if batch {
                // the moving statistics take the batch's
                let (pm, pv) = (k.inputs[3].ptr::<P>(), k.inputs[4].ptr::<P>());
                for (j, s) in stats.iter().enumerate() {
                    // SAFETY: the plan declares inputs 3 and 4 mutated, so this op holds their
                    // variables for writing; each has `c` elements of `pdt`.
                    unsafe {
                        pm.add(j).write(P::from_f64(moving_mean[j] * momentum + s.mean * (1.0 - momentum)));
                        pv.add(j).write(P::from_f64(moving_var[j] * momentum + s.var * (1.0 - momentum)));
                    }
                }
            }
        });
        Ok(())
    });
    Ok(if batch { plan.mutating(&[3, 4]) } else { plan })
}
