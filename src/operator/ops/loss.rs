//! Output and loss operators: `SoftmaxOutput` (alias `Softmax`), `SoftmaxActivation`, the
//! regression outputs (`LinearRegressionOutput`, `LogisticRegressionOutput`,
//! `MAERegressionOutput`), `SVMOutput`, `MakeLoss`, `softmax_cross_entropy`, `smooth_l1` and
//! `hard_sigmoid`.
//!
//! The output layers' gradients are the loss's gradient with respect to their input, computed
//! from the forward's output and the label: like MXNet's, they ignore the gradient arriving at
//! the output (unless `SoftmaxOutput`'s `out_grad` asks for it) and give the label none.

use super::nn::{as_refs, passed};
use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val};
use crate::operator::kernel::Element;
use crate::operator::kernel::map::Ptr;
use crate::operator::kernel::vmath::{self, SoftRow};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;
use crate::parallel::for_ranges;

fn float_data(call: &Call<'_>, d: DType) -> Result<()> {
    if matches!(d, DType::F32 | DType::F64 | DType::F16) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "operator {}: data must be float16, float32 or float64, not {}",
            call.name,
            d.name()
        )))
    }
}

fn read_f64(t: &Tensor) -> Vec<f64> {
    crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
}

fn write_f64(t: &mut Tensor, v: &[f64]) {
    crate::with_element!(t.dtype, T => {
        for (o, &x) in t.slice_mut::<T>().iter_mut().zip(v) {
            *o = T::from_f64(x);
        }
    })
}

/// Data viewed as `A × L × B`: a softmax runs along each (a, b) line of `L` elements.
#[derive(Clone, Copy, Debug)]
struct Lines {
    a: usize,
    l: usize,
    b: usize,
}

impl Lines {
    fn at(self, a: usize, b: usize, i: usize) -> usize {
        (a * self.l + i) * self.b + b
    }
}

/// The softmax of every line of `x` into `y`.
fn softmax_lines<T: Element>(x: &[T], y: Ptr<T>, s: Lines) {
    if T::DTYPE == DType::F32 && s.b == 1 {
        // SAFETY: `T` is f32 (its dtype says so).
        let x = unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<f32>(), x.len()) };
        let y = Ptr(y.get().cast::<f32>());
        for_ranges(s.a, s.l * 8, |a0, a1| {
            let mut scratch = Vec::new();
            for a in a0..a1 {
                // SAFETY: `y` holds A·L elements; a range of `a` writes only its own lines,
                // and ranges are disjoint.
                let out = unsafe { std::slice::from_raw_parts_mut(y.get().add(a * s.l), s.l) };
                vmath::softmax_row(SoftRow::Softmax, &x[a * s.l..][..s.l], out, 1.0, 1.0, &mut scratch);
            }
        });
        return;
    }
    for_ranges(s.a, s.l * s.b * 8, |a0, a1| {
        let mut e = vec![0f64; s.l];
        for a in a0..a1 {
            for b in 0..s.b {
                let m = (0..s.l)
                    .map(|i| x[s.at(a, b, i)].to_f64())
                    .fold(f64::NEG_INFINITY, f64::max);
                let mut sum = 0.0;
                for (i, v) in e.iter_mut().enumerate() {
                    *v = (x[s.at(a, b, i)].to_f64() - m).exp();
                    sum += *v;
                }
                for (i, v) in e.iter().enumerate() {
                    // SAFETY: `y` holds A·L·B elements; a range of `a` writes only its own
                    // lines, and ranges are disjoint.
                    unsafe { y.get().add(s.at(a, b, i)).write(T::from_f64(v / sum)) };
                }
            }
        }
    });
}

/// The forward of the softmax ops along `lines`.
fn softmax_plan(x: TensorDesc, lines: Lines) -> Plan {
    let dtype = x.dtype;
    Plan::new(vec![x], move |k| {
        crate::with_element!(dtype, T => {
            let y = Ptr(k.outputs[0].slice_mut::<T>().as_mut_ptr());
            softmax_lines(k.inputs[0].slice::<T>(), y, lines);
        });
        Ok(())
    })
}

fn size(shape: &[i64]) -> usize {
    shape.iter().map(|&d| d.max(0) as usize).product()
}

// ---------------------------------------------------------------------------------------------
// SoftmaxOutput

struct SoftmaxOutputParams {
    grad_scale: f64,
    ignore_label: f64,
    multi_output: bool,
    use_ignore: bool,
    preserve_shape: bool,
    normalization: String,
    out_grad: bool,
    smooth_alpha: f64,
}

fn softmax_output_params(call: &Call<'_>) -> Result<SoftmaxOutputParams> {
    let p = call.params;
    let normalization = p.or(
        "normalization",
        param::choice,
        "null, batch or valid",
        "null".into(),
    )?;
    if !matches!(normalization.as_str(), "null" | "batch" | "valid") {
        return Err(Error::invalid(format!(
            "operator {}: normalization must be null, batch or valid, got '{normalization}'",
            call.name
        )));
    }
    Ok(SoftmaxOutputParams {
        grad_scale: p.or("grad_scale", param::float, "a number", 1.0)?,
        ignore_label: p.or("ignore_label", param::float, "a number", -1.0)?,
        multi_output: p.or("multi_output", param::boolean, "a boolean", false)?,
        use_ignore: p.or("use_ignore", param::boolean, "a boolean", false)?,
        preserve_shape: p.or("preserve_shape", param::boolean, "a boolean", false)?,
        normalization,
        out_grad: p.or("out_grad", param::boolean, "a boolean", false)?,
        smooth_alpha: p.or("smooth_alpha", param::float, "a number", 0.0)?,
    })
}

/// SoftmaxOutput's lines: along axis 1 (`multi_output`), the last axis (`preserve_shape`) or
/// all but the first axis.
fn softmax_output_lines(call: &Call<'_>, p: &SoftmaxOutputParams, shape: &[i64]) -> Result<Lines> {
    let n = size(shape);
    if shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: data must have at least one dimension",
            call.name
        )));
    }
    let first = shape[0].max(0) as usize;
    Ok(if p.multi_output {
        if shape.len() < 2 {
            return Err(Error::invalid(format!(
                "operator {}: multi_output needs data of at least 2 dimensions, got {shape:?}",
                call.name
            )));
        }
        let k = shape[1].max(0) as usize;
        Lines {
            a: first,
            l: k,
            b: if first * k == 0 { 0 } else { n / (first * k) },
        }
    } else if p.preserve_shape {
        let last = shape[shape.len() - 1].max(0) as usize;
        Lines {
            a: if last == 0 { 0 } else { n / last },
            l: last,
            b: 1,
        }
    } else {
        Lines {
            a: first,
            l: if first == 0 { 0 } else { n / first },
            b: 1,
        }
    })
}

/// Checks the label against the data: one label per line (for data of more than two dimensions
/// without `multi_output`, MXNet's shape of the data without its last axis, of which the
/// gradient reads the first labels), or one probability per element.
fn check_label(call: &Call<'_>, data: &TensorDesc, label: &TensorDesc, lines: Lines) -> Result<()> {
    let last_dropped = &data.shape[..data.shape.len().saturating_sub(1)];
    if label.shape == data.shape
        || label.size() == lines.a * lines.b
        || label.shape[..] == *last_dropped
    {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "operator {}: label has shape {:?}, which does not fit data of shape {:?}",
            call.name,
            &label.shape[..],
            &data.shape[..]
        )))
    }
}

fn softmax_output(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    float_data(call, ins[0].dtype)?;
    let p = softmax_output_params(call)?;
    let lines = softmax_output_lines(call, &p, &ins[0].shape)?;
    check_label(call, &ins[0], &ins[1], lines)?;
    Ok(softmax_plan(ins[0].clone(), lines))
}

/// SoftmaxOutput's gradient scale against class labels: `grad_scale` over the normalisation's
/// count (and the spatial size for `multi_output`).
fn output_grad_scale(p: &SoftmaxOutputParams, label: &[f64], lines: Lines) -> f64 {
    let ignore = p.ignore_label as i64;
    let labels = label.len();
    let valid = || {
        let bad = label.iter().filter(|&&v| v as i64 == ignore).count();
        (labels - bad).max(1)
    };
    let count = match p.normalization.as_str() {
        "batch" if p.multi_output => lines.a,
        "batch" => labels,
        "valid" => valid(),
        _ => 1,
    };
    let spatial = if p.multi_output && p.normalization != "valid" {
        lines.b
    } else {
        1
    };
    p.grad_scale / (spatial.max(1) * count.max(1)) as f64
}

/// `_mxrt_softmax_output_grad(y, label)` with SoftmaxOutput's parameters: MXNet's
/// SoftmaxOutput backward. With `out_grad` MXNet 1.9.1 multiplies by the output itself (its
/// backward node is not given the head gradient), and so does this.
fn softmax_output_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let p = softmax_output_params(call)?;
    let y = ins[0].clone();
    let lines = softmax_output_lines(call, &p, &y.shape)?;
    check_label(call, &y, &ins[1], lines)?;
    let prob = ins[1].shape == y.shape;
    let fast = y.dtype == DType::F32 && !prob && lines.b == 1 && (p.multi_output || p.smooth_alpha == 0.0);
    Ok(Plan::new(vec![y], move |k| {
        if fast {
            // float32 rows against class labels: one pass, rows split over the pool
            let label = read_f64(&k.inputs[1]);
            let scale = output_grad_scale(&p, &label, lines);
            let ignore = p.ignore_label as i64;
            let ys = k.inputs[0].slice::<f32>();
            let out = Ptr(k.outputs[0].slice_mut::<f32>().as_mut_ptr());
            let (l, out_grad) = (lines.l, p.out_grad);
            for_ranges(lines.a, l * 4, |a0, a1| {
                for a in a0..a1 {
                    let kk = label[a] as i64;
                    let row = &ys[a * l..][..l];
                    // SAFETY: the output holds A·L elements; a range writes only its own rows.
                    let o = unsafe { std::slice::from_raw_parts_mut(out.get().add(a * l), l) };
                    if p.use_ignore && kk == ignore {
                        o.fill(0.0);
                        continue;
                    }
                    for (o, &v) in o.iter_mut().zip(row) {
                        let g = v as f64 * scale;
                        *o = if out_grad { (g * v as f64) as f32 } else { g as f32 };
                    }
                    if kk >= 0 && (kk as usize) < l {
                        let (v, i) = (row[kk as usize] as f64, kk as usize);
                        let g = (v - 1.0) * scale;
                        o[i] = if out_grad { (g * v) as f32 } else { g as f32 };
                    }
                }
            });
            return Ok(());
        }
        let (ys, label) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let mut g = vec![0f64; ys.len()];
        let Lines {
            a: na,
            l: nl,
            b: nb,
        } = lines;
        let ignore = p.ignore_label as i64;
        let mut scale = p.grad_scale;
        if prob {
            for (i, v) in g.iter_mut().enumerate() {
                *v = ys[i] - label[i];
            }
        } else {
            for a in 0..na {
                for b in 0..nb {
                    let kk = label[a * nb + b] as i64;
                    let skip = p.use_ignore && kk == ignore;
                    let smooth = !p.multi_output && p.smooth_alpha != 0.0;
                    for i in 0..nl {
                        let idx = lines.at(a, b, i);
                        let hit = kk == i as i64;
                        g[idx] = if skip {
                            0.0
                        } else if smooth {
                            let t = if hit {
                                1.0 - p.smooth_alpha
                            } else {
                                p.smooth_alpha / (nl as f64 - 1.0)
                            };
                            ys[idx] - t
                        } else {
                            ys[idx] - if hit { 1.0 } else { 0.0 }
                        };
                    }
                }
            }
            scale = output_grad_scale(&p, &label, lines);
        }
        for (i, v) in g.iter_mut().enumerate() {
            *v *= scale;
            if p.out_grad {
                *v *= ys[i];
            }
        }
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

const SOFTMAX_OUTPUT_KEYS: &[&str] = &[
    "grad_scale",
    "ignore_label",
    "multi_output",
    "use_ignore",
    "preserve_shape",
    "normalization",
    "out_grad",
    "smooth_alpha",
];

fn softmax_output_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let p = passed(g, SOFTMAX_OUTPUT_KEYS);
    let dx = g.op("_mxrt_softmax_output_grad", &[g.y(0), g.x(1)], &as_refs(&p))?;
    Ok(vec![Some(dx), None])
}

/// The label's shape from the data's: one label per line (per element of the first axis
/// without multi_output).
fn softmax_output_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins = vec![None; ins.len()];
    if let Some(x) = ins.first().cloned().flatten()
        && ins.len() == 2
        && ins[1].is_none()
    {
        let flag = |k: &str| crate::operator::def::param_flag(p, k, false);
        for_ins[1] = if flag("multi_output")? && x.len() >= 2 {
            let rest: i64 = x[2..].iter().product();
            Some(vec![x[0], rest])
        } else {
            Some(x[..x.len().saturating_sub(1)].to_vec())
        };
    }
    Ok((for_ins, Vec::new()))
}

// ---------------------------------------------------------------------------------------------
// SoftmaxActivation

fn activation_lines(call: &Call<'_>, shape: &[i64]) -> Result<Lines> {
    let mode = call.params.or(
        "mode",
        param::choice,
        "instance or channel",
        "instance".into(),
    )?;
    let n = size(shape);
    let first = shape.first().map_or(1, |&d| d.max(0) as usize);
    match mode.as_str() {
        // MXNet's instance mode views the data as 2-D (all but the last axis, the last axis)
        "instance" => {
            let last = shape.last().map_or(1, |&d| d.max(0) as usize);
            Ok(Lines {
                a: if last == 0 { 0 } else { n / last },
                l: last,
                b: 1,
            })
        }
        "channel" if shape.len() >= 2 => {
            let c = shape[1].max(0) as usize;
            Ok(Lines {
                a: first,
                l: c,
                b: if first * c == 0 { 0 } else { n / (first * c) },
            })
        }
        "channel" => Err(Error::invalid(format!(
            "operator {}: mode channel needs data of at least 2 dimensions, got {shape:?}",
            call.name
        ))),
        other => Err(Error::invalid(format!(
            "operator {}: mode must be instance or channel, got '{other}'",
            call.name
        ))),
    }
}

fn softmax_activation(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    float_data(call, x.dtype)?;
    let lines = activation_lines(call, &x.shape)?;
    Ok(softmax_plan(x, lines))
}

/// `_mxrt_softmax_act_grad(dy, y)` with `mode`: `y · (dy - Σ dy·y)` along each line.
fn softmax_activation_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let y = ins[1].clone();
    if ins[0].shape != y.shape {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for output of shape {:?}",
            call.name,
            &ins[0].shape[..],
            &y.shape[..]
        )));
    }
    let lines = activation_lines(call, &y.shape)?;
    Ok(Plan::new(vec![y], move |k| {
        let (dy, ys) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let mut g = vec![0f64; ys.len()];
        for a in 0..lines.a {
            for b in 0..lines.b {
                let dot: f64 = (0..lines.l)
                    .map(|i| dy[lines.at(a, b, i)] * ys[lines.at(a, b, i)])
                    .sum();
                for i in 0..lines.l {
                    let idx = lines.at(a, b, i);
                    g[idx] = ys[idx] * (dy[idx] - dot);
                }
            }
        }
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

// ---------------------------------------------------------------------------------------------
// Regression outputs, SVMOutput, MakeLoss

#[derive(Clone, Copy, PartialEq, Eq)]
enum Regression {
    Linear,
    Logistic,
    Mae,
}

fn regression_kind(name: &str) -> Regression {
    match name {
        "LogisticRegressionOutput" | "logistic" => Regression::Logistic,
        "MAERegressionOutput" | "mae" => Regression::Mae,
        _ => Regression::Linear,
    }
}

fn check_same_size(call: &Call<'_>, data: &TensorDesc, label: &TensorDesc) -> Result<()> {
    if data.size() != label.size() {
        return Err(Error::invalid(format!(
            "operator {}: label has shape {:?}, data {:?}: they must have as many elements",
            call.name,
            &label.shape[..],
            &data.shape[..]
        )));
    }
    Ok(())
}

fn regression_output(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    float_data(call, ins[0].dtype)?;
    call.params
        .or("grad_scale", param::float, "a number", 1.0)?;
    check_same_size(call, &ins[0], &ins[1])?;
    let logistic = regression_kind(call.name) == Regression::Logistic;
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        let mut v = read_f64(&k.inputs[0]);
        if logistic {
            v.iter_mut().for_each(|x| *x = 1.0 / (1.0 + (-*x).exp()));
        }
        write_f64(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// `_mxrt_regression_grad(y, label)` with `kind` (linear, logistic, mae) and `grad_scale`:
/// `(y - label)` (`sign(y - label)` for mae) `· grad_scale / (label elements per row)`.
fn regression_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let kind = regression_kind(&call.params.required(
        "kind",
        param::choice,
        "a regression kind",
    )?);
    let scale = call
        .params
        .or("grad_scale", param::float, "a number", 1.0)?;
    check_same_size(call, &ins[0], &ins[1])?;
    let rows = ins[1].shape.first().map_or(1, |&d| d.max(1) as usize);
    let per_row = (ins[1].size() / rows).max(1) as f64;
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        let (y, label) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let g: Vec<f64> = y
            .iter()
            .zip(&label)
            .map(|(&o, &t)| {
                let d = o - t;
                let d = if kind == Regression::Mae {
                    if d > 0.0 {
                        1.0
                    } else if d < 0.0 {
                        -1.0
                    } else {
                        0.0
                    }
                } else {
                    d
                };
                d * scale / per_row
            })
            .collect();
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

fn svm_output(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    float_data(call, ins[0].dtype)?;
    let p = call.params;
    p.or("margin", param::float, "a number", 1.0)?;
    p.or("regularization_coefficient", param::float, "a number", 1.0)?;
    p.or("use_linear", param::boolean, "a boolean", false)?;
    let x = ins[0].clone();
    let rows = x.shape.first().map_or(1, |&d| d.max(0) as usize);
    if ins[1].size() != rows {
        return Err(Error::invalid(format!(
            "operator {}: label has shape {:?}, expected one label per row of data {:?}",
            call.name,
            &ins[1].shape[..],
            &x.shape[..]
        )));
    }
    Ok(Plan::new(vec![x], |k| {
        let v = read_f64(&k.inputs[0]);
        write_f64(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// `_mxrt_svm_grad(y, label)`: MXNet's L1-SVM (`use_linear`) or L2-SVM gradient.
fn svm_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let p = call.params;
    let margin = p.or("margin", param::float, "a number", 1.0)?;
    let reg = p.or("regularization_coefficient", param::float, "a number", 1.0)?;
    let linear = p.or("use_linear", param::boolean, "a boolean", false)?;
    let y = ins[0].clone();
    let rows = y.shape.first().map_or(1, |&d| d.max(0) as usize);
    let width = if rows == 0 { 0 } else { y.size() / rows };
    Ok(Plan::new(vec![y], move |k| {
        let (ys, label) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let mut g = vec![0f64; ys.len()];
        for r in 0..rows {
            let kk = label[r] as i64;
            for x in 0..width {
                let s = ys[r * width + x];
                g[r * width + x] = match (linear, kk == x as i64) {
                    (true, true) => -((margin > s) as u8 as f64) * reg,
                    (true, false) => ((margin > -s) as u8 as f64) * reg,
                    (false, true) => -reg * if margin > s { 2.0 * (margin - s) } else { 0.0 },
                    (false, false) => {
                        -reg * if margin > -s {
                            -2.0 * (margin + s)
                        } else {
                            0.0
                        }
                    }
                };
            }
        }
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

fn make_loss_params(call: &Call<'_>) -> Result<(f64, f64, String)> {
    let p = call.params;
    let scale = p.or("grad_scale", param::float, "a number", 1.0)?;
    let thresh = p.or("valid_thresh", param::float, "a number", 0.0)?;
    let norm = p.or(
        "normalization",
        param::choice,
        "null, batch or valid",
        "null".into(),
    )?;
    if !matches!(norm.as_str(), "null" | "batch" | "valid") {
        return Err(Error::invalid(format!(
            "operator {}: normalization must be null, batch or valid, got '{norm}'",
            call.name
        )));
    }
    Ok((scale, thresh, norm))
}

fn make_loss(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    make_loss_params(call)?;
    Ok(Plan::new(vec![x], |k| {
        crate::operator::ops::creation::convert(&k.inputs[0], &k.outputs[0]);
        Ok(())
    }))
}

/// `_mxrt_make_loss_grad(x)`: `grad_scale`, divided by the batch size (`batch`) or by the
/// number of elements above `valid_thresh` (at least 1; `valid`).
fn make_loss_backward(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let (scale, thresh, norm) = make_loss_params(call)?;
    let rows = x.shape.first().map_or(1, |&d| d.max(1) as usize);
    Ok(Plan::new(vec![x], move |k| {
        let v = read_f64(&k.inputs[0]);
        let div = match norm.as_str() {
            "batch" => rows as f64,
            "valid" => v.iter().filter(|&&e| thresh < e).count().max(1) as f64,
            _ => 1.0,
        };
        write_f64(&mut k.outputs[0], &vec![scale / div; v.len()]);
        Ok(())
    }))
}

// ---------------------------------------------------------------------------------------------
// softmax_cross_entropy, smooth_l1, hard_sigmoid

fn ce_check(call: &Call<'_>, data: &TensorDesc, label: &TensorDesc) -> Result<(usize, usize)> {
    if data.shape.len() != 2 || label.shape.len() != 1 || label.shape[0] != data.shape[0] {
        return Err(Error::invalid(format!(
            "operator {}: data must be 2-dimensional and label 1-dimensional with as many rows, got {:?} and {:?}",
            call.name,
            &data.shape[..],
            &label.shape[..]
        )));
    }
    Ok((data.shape[0].max(0) as usize, data.shape[1].max(0) as usize))
}

fn softmax_cross_entropy(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    float_data(call, ins[0].dtype)?;
    let (n, c) = ce_check(call, &ins[0], &ins[1])?;
    Ok(Plan::new(
        vec![TensorDesc::new(&[1], ins[0].dtype)],
        move |k| {
            if k.inputs[0].dtype == DType::F32 {
                // float32 rows through the vectorised log_softmax, the loss summed in float64
                let label = read_f64(&k.inputs[1]);
                let x = k.inputs[0].slice::<f32>();
                let mut row = vec![0f32; c];
                let mut scratch = Vec::new();
                let mut loss = 0.0;
                for r in 0..n {
                    vmath::softmax_row(SoftRow::LogSoftmax, &x[r * c..][..c], &mut row, 1.0, 1.0, &mut scratch);
                    let kk = (label[r] as i64).clamp(0, c as i64 - 1) as usize;
                    loss -= row[kk] as f64;
                }
                write_f64(&mut k.outputs[0], &[loss]);
                return Ok(());
            }
            let (x, label) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
            let mut loss = 0.0;
            for r in 0..n {
                let row = &x[r * c..(r + 1) * c];
                let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
                let kk = (label[r] as i64).clamp(0, c as i64 - 1) as usize;
                loss += lse - row[kk];
            }
            write_f64(&mut k.outputs[0], &[loss]);
            Ok(())
        },
    ))
}

/// `_mxrt_softmax_ce_grad(dy, data, label)`: `(softmax(data) - onehot(label)) · dy`.
fn softmax_ce_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (n, c) = ce_check(call, &ins[1], &ins[2])?;
    let f32_data = ins[1].dtype == DType::F32;
    Ok(Plan::new(vec![ins[1].clone()], move |k| {
        let dy = read_f64(&k.inputs[0])[0];
        if f32_data {
            // float32 rows through the vectorised softmax, split over the pool
            let label = read_f64(&k.inputs[2]);
            let x = k.inputs[1].slice::<f32>();
            let out = Ptr(k.outputs[0].slice_mut::<f32>().as_mut_ptr());
            for_ranges(n, c * 8, |r0, r1| {
                let mut scratch = Vec::new();
                for r in r0..r1 {
                    // SAFETY: the output holds n·c elements; a range writes only its own rows.
                    let o = unsafe { std::slice::from_raw_parts_mut(out.get().add(r * c), c) };
                    vmath::softmax_row(SoftRow::Softmax, &x[r * c..][..c], o, 1.0, 1.0, &mut scratch);
                    let kk = label[r] as i64;
                    for (j, v) in o.iter_mut().enumerate() {
                        let hit = if kk == j as i64 { 1.0 } else { 0.0 };
                        *v = ((*v as f64 - hit) * dy) as f32;
                    }
                }
            });
            return Ok(());
        }
        let (x, label) = (read_f64(&k.inputs[1]), read_f64(&k.inputs[2]));
        let mut g = vec![0f64; x.len()];
        for r in 0..n {
            let row = &x[r * c..(r + 1) * c];
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - m).exp()).sum();
            let kk = label[r] as i64;
            for j in 0..c {
                let hit = if kk == j as i64 { 1.0 } else { 0.0 };
                g[r * c + j] = ((row[j] - m).exp() / sum - hit) * dy;
            }
        }
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

fn smooth_l1_value(x: f64, sigma: f64) -> f64 {
    let s2 = sigma * sigma;
    let t = 1.0 / s2;
    if x > t {
        x - 0.5 * t
    } else if x < -t {
        -x - 0.5 * t
    } else {
        0.5 * x * x * s2
    }
}

fn smooth_l1_slope(x: f64, sigma: f64) -> f64 {
    let s2 = sigma * sigma;
    let t = 1.0 / s2;
    if x > t {
        1.0
    } else if x < -t {
        -1.0
    } else {
        s2 * x
    }
}

fn hard_sigmoid_params(call: &Call<'_>) -> Result<(f64, f64)> {
    Ok((
        call.params.or("alpha", param::float, "a number", 0.2)?,
        call.params.or("beta", param::float, "a number", 0.5)?,
    ))
}

/// A unary float op: `smooth_l1` (`scalar` is sigma) or `hard_sigmoid` (`alpha`, `beta`).
fn unary_loss(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    float_data(call, x.dtype)?;
    let f: Box<dyn Fn(f64) -> f64 + Send> = if call.name == "smooth_l1" {
        let sigma = call.params.or("scalar", param::float, "a number", 1.0)?;
        Box::new(move |v| smooth_l1_value(v, sigma))
    } else {
        let (alpha, beta) = hard_sigmoid_params(call)?;
        Box::new(move |v| (alpha * v + beta).clamp(0.0, 1.0))
    };
    Ok(Plan::new(vec![x], move |k| {
        let v: Vec<f64> = read_f64(&k.inputs[0]).into_iter().map(&f).collect();
        write_f64(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// `_mxrt_unary_loss_grad(dy, x)` with `kind` (smooth_l1 with `scalar`, hard_sigmoid with
/// `alpha`, `beta`): `dy · f'(x)`.
fn unary_loss_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let kind = call
        .params
        .required("kind", param::choice, "smooth_l1 or hard_sigmoid")?;
    let f: Box<dyn Fn(f64) -> f64 + Send> = if kind == "smooth_l1" {
        let sigma = call.params.or("scalar", param::float, "a number", 1.0)?;
        Box::new(move |v| smooth_l1_slope(v, sigma))
    } else {
        let (alpha, beta) = hard_sigmoid_params(call)?;
        Box::new(move |v| {
            let o = alpha * v + beta;
            if o > 0.0 && o < 1.0 { alpha } else { 0.0 }
        })
    };
    Ok(Plan::new(vec![ins[1].clone()], move |k| {
        let (dy, x) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let g: Vec<f64> = dy.iter().zip(&x).map(|(d, &v)| d * f(v)).collect();
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

fn data_label(_: &ParamList) -> Result<Signature> {
    Ok(Signature::simple(&["data", "label"]))
}

/// The label has the data's shape (regression outputs).
fn label_like_data(
    _: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins = vec![None; ins.len()];
    if ins.len() == 2 && ins[1].is_none() {
        for_ins[1] = ins[0].clone();
    }
    Ok((for_ins, Vec::new()))
}

/// One label per row (SVMOutput).
fn label_per_row(
    _: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins = vec![None; ins.len()];
    if ins.len() == 2
        && ins[1].is_none()
        && let Some(x) = &ins[0]
        && !x.is_empty()
    {
        for_ins[1] = Some(vec![x[0]]);
    }
    Ok((for_ins, Vec::new()))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("SoftmaxOutput", &softmax_output)
        .grad(softmax_output_grad)
        .signature(data_label)
        .shape_rule(ShapeRule::Rule(softmax_output_shapes));
    t.def("SoftmaxActivation", &softmax_activation)
        .shape_rule(ShapeRule::Same)
        .grad(|g| {
            let p = passed(g, &["mode"]);
            let dx = g.op("_mxrt_softmax_act_grad", &[g.dy(0), g.y(0)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        });
    for name in [
        "LinearRegressionOutput",
        "LogisticRegressionOutput",
        "MAERegressionOutput",
    ] {
        t.def(name, &regression_output)
            .signature(data_label)
            .shape_rule(ShapeRule::Rule(label_like_data))
            .grad(|g| {
                let kind = match regression_kind(g.name) {
                    Regression::Linear => "linear",
                    Regression::Logistic => "logistic",
                    Regression::Mae => "mae",
                };
                let mut p = passed(g, &["grad_scale"]);
                p.push(("kind".into(), kind.into()));
                let dx = g.op("_mxrt_regression_grad", &[g.y(0), g.x(1)], &as_refs(&p))?;
                Ok(vec![Some(dx), None])
            });
    }
    t.def("SVMOutput", &svm_output)
        .signature(data_label)
        .shape_rule(ShapeRule::Rule(label_per_row))
        .grad(|g| {
            let p = passed(g, &["margin", "regularization_coefficient", "use_linear"]);
            let dx = g.op("_mxrt_svm_grad", &[g.y(0), g.x(1)], &as_refs(&p))?;
            Ok(vec![Some(dx), None])
        });
    t.def("MakeLoss", &make_loss)
        .shape_rule(ShapeRule::Same)
        .grad(|g| {
            let p = passed(g, &["grad_scale", "valid_thresh", "normalization"]);
            let dx = g.op("_mxrt_make_loss_grad", &[g.x(0)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        });
    t.def("softmax_cross_entropy", &softmax_cross_entropy)
        .signature(data_label)
        .grad(|g| {
            let dx = g.op("_mxrt_softmax_ce_grad", &[g.dy(0), g.x(0), g.x(1)], &[])?;
            Ok(vec![Some(dx), None])
        });
    t.def("smooth_l1", &unary_loss)
        .shape_rule(ShapeRule::Same)
        .grad(|g| {
            let mut p = passed(g, &["scalar"]);
            p.push(("kind".into(), "smooth_l1".into()));
            let dx = g.op("_mxrt_unary_loss_grad", &[g.dy(0), g.x(0)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        });
    t.def("hard_sigmoid", &unary_loss)
        .shape_rule(ShapeRule::Same)
        .grad(|g| {
            let mut p = passed(g, &["alpha", "beta"]);
            p.push(("kind".into(), "hard_sigmoid".into()));
            let dx = g.op("_mxrt_unary_loss_grad", &[g.dy(0), g.x(0)], &as_refs(&p))?;
            Ok(vec![Some(dx)])
        });

    t.def("_mxrt_softmax_output_grad", &softmax_output_backward);
    t.def("_mxrt_softmax_act_grad", &softmax_activation_backward);
    t.def("_mxrt_regression_grad", &regression_backward);
    t.def("_mxrt_svm_grad", &svm_backward);
    t.def("_mxrt_make_loss_grad", &make_loss_backward);
    t.def("_mxrt_softmax_ce_grad", &softmax_ce_backward);
    t.def("_mxrt_unary_loss_grad", &unary_loss_backward);
}
