//! Neural-network elementwise and normalisation ops: `Activation`, `LeakyReLU`, `softmax`,
//! `log_softmax`, `softmin`, `clip`, `add_n`, `Dropout` and `BatchNorm` (both following the
//! invoking thread's training mode).

use crate::operator::stype::StorageRule;
use super::binary::{Add, apply_same};
use super::unary::{Math, apply, c};
use super::{Entries, axis as norm_axis, dims, inputs, same_dtype};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::map::map1;
use crate::operator::kernel::strided::{split_axes, walk};
use crate::operator::kernel::{Element, Real};
use crate::operator::op::{Call, GpuKernel, Plan, TensorDesc};
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
}
struct Tanh;
impl Math for Tanh {
    const COST: usize = 8;
    fn f<R: Real>(x: R) -> R {
        x.tanh()
    }
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
    Ok(Plan::new(vec![x], move |k| {
        f(&k.inputs[0], &k.outputs[0], dtype);
        Ok(())
    })
    .elementwise())
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
        let (x, g) = (ins[0].clone(), &ins[1]);
        // gamma per channel (axis 1) or one value
        let per_channel = g.size() > 1;
        if per_channel && (x.shape.len() < 2 || g.size() as i64 != x.shape[1]) {
            return Err(Error::invalid(format!(
                "operator {}: gamma of shape {:?} does not match the channels of {:?}",
                call.name,
                &g.shape[..],
                &x.shape[..]
            )));
        }
        let inner: usize = x.shape.iter().skip(2).map(|&d| d as usize).product();
        let ch = if per_channel { x.shape[1] as usize } else { 1 };
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
            // outside training, rrelu uses the mean of its bounds as the slope
            let lo = p.or("lower_bound", param::float, "a number", 0.125)?;
            let hi = p.or("upper_bound", param::float, "a number", 0.334)?;
            let s = (lo + hi) / 2.0;
            return Ok(Plan::new(vec![x], move |k| {
                float_map(
                    &k.inputs[0],
                    &k.outputs[0],
                    dtype,
                    |v| if v > 0.0 { v } else { v * s as f32 },
                    |v| if v > 0.0 { v } else { v * s },
                );
                Ok(())
            })
            .elementwise());
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
            let n = shape[axis];
            let st = rst[0];
            let lines: usize = ks.iter().product();
            let src: Vec<f64> = crate::with_element!(dtype, T => k.inputs[0].slice::<T>().iter().map(|v| v.to_f64()).collect());
            let mut res = vec![0f64; src.len()];
            let mut buf = vec![0f64; n];
            walk(&ks, [&kst], [0], 0, lines, |_, [b]| {
                let at = |i: usize| (b + i as isize * st) as usize;
                for (i, v) in buf.iter_mut().enumerate() {
                    let x = src[at(i)] / temp;
                    *v = if kind == Soft::Min { -x } else { x };
                }
                let m = buf.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = buf.iter().map(|&v| (v - m).exp()).sum();
                for (i, &v) in buf.iter().enumerate() {
                    res[at(i)] = match kind {
                        Soft::LogMax => v - m - sum.ln(),
                        _ => (v - m).exp() / sum,
                    };
                }
            });
            crate::with_element!(out_dtype, O => {
                for (o, &v) in k.outputs[0].slice_mut::<O>().iter_mut().zip(&res) {
                    *o = O::from_f64(v);
                }
            });
            Ok(())
        },
    ))
}

fn clip(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let lo = call.params.required("a_min", param::float, "a number")?;
    let hi = call.params.required("a_max", param::float, "a number")?;
    let dtype = x.dtype;
    Ok(Plan::new(vec![x], move |k| {
        let (xi, yo) = (&k.inputs[0], &k.outputs[0]);
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
        Ok(())
    })
    .elementwise())
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
    Ok(Plan::new(vec![x], move |k| {
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
        crate::with_element!(dtype, T => {
            let (src, dst) = (k.inputs[0].slice::<T>(), k.outputs[0].slice_mut::<T>());
            for (i, (o, v)) in dst.iter_mut().zip(src).enumerate() {
                *o = T::from_f64(v.to_f64() * mask[index(i)]);
            }
        });
        Ok(())
    })
    .with_resource(ResourceRequest::Random))
}

/// BatchNorm: `out = (x - mean) / sqrt(var + eps) * gamma + beta` per channel of `axis`, with
/// the moving statistics outside training (or with `use_global_stats`) and the batch's own
/// (biased variance) in training mode. As in MXNet's forward pass, the moving statistics are not
/// changed (MXNet folds the batch statistics into them in the backward pass). With fix_gamma (the default) gamma is taken as 1 and, as in MXNet, the gamma
/// array is set to 1. With output_mean_var the mean and the inverse standard deviation used are
/// outputs 2 and 3, as MXNet's CPU kernel gives them.
fn batch_norm(call: &Call<'_>) -> Result<Plan> {
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
    let inner: usize = x.shape[axis + 1..].iter().product::<i64>() as usize;
    let c = ch as usize;
    let (dtype, pdt) = (x.dtype, ins[1].dtype);
    let mut outs = vec![TensorDesc::new(&x.shape, dtype)];
    if mean_var {
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
        let (mean, invstd): (Vec<f64>, Vec<f64>) = if batch_stats {
            crate::with_element!(dtype, T => {
                let src = k.inputs[0].slice::<T>();
                let (mut sum, mut count) = (vec![0.0f64; c], vec![0usize; c]);
                for (i, v) in src.iter().enumerate() {
                    let j = if inner == 0 { 0 } else { (i / inner) % c };
                    sum[j] += v.to_f64();
                    count[j] += 1;
                }
                let mean: Vec<f64> = (0..c).map(|j| sum[j] / count[j].max(1) as f64).collect();
                let mut sq = vec![0.0f64; c];
                for (i, v) in src.iter().enumerate() {
                    let j = if inner == 0 { 0 } else { (i / inner) % c };
                    sq[j] += (v.to_f64() - mean[j]).powi(2);
                }
                let invstd = (0..c)
                    .map(|j| {
                        if sq[j] == 0.0 && eps == 0.0 {
                            0.0
                        } else {
                            1.0 / (sq[j] / count[j].max(1) as f64 + eps).sqrt()
                        }
                    })
                    .collect();
                (mean, invstd)
            })
        } else {
            let var = param(4);
            (param(3), var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect())
        };
        let scale: Vec<f64> = (0..c)
            .map(|j| if fix_gamma { 1.0 } else { gamma[j] } * invstd[j])
            .collect();
        crate::with_element!(dtype, T => {
            let (src, dst) = (k.inputs[0].slice::<T>(), k.outputs[0].slice_mut::<T>());
            for (i, (o, v)) in dst.iter_mut().zip(src).enumerate() {
                let j = if inner == 0 { 0 } else { (i / inner) % c };
                *o = T::from_f64((v.to_f64() - mean[j]) * scale[j] + beta[j]);
            }
        });
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
        if mean_var {
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
    .mutating(if fix_gamma { &[1] } else { &[] }))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("BatchNorm", &batch_norm));
    t.push(("Activation", &activation));
    t.push(("LeakyReLU", &leaky_relu));
    t.push(("softmax", &|c: &Call<'_>| softmax(c, Soft::Max)));
    t.push(("log_softmax", &|c: &Call<'_>| softmax(c, Soft::LogMax)));
    t.push(("softmin", &|c: &Call<'_>| softmax(c, Soft::Min)));
    t.push(("clip", &clip)).stype(StorageRule::ZeroPreserving);
    t.push(("add_n", &add_n)).stype(StorageRule::SameStorage);
    t.push(("Dropout", &dropout));
}
