//! Normalisation layers over groups of elements: `LayerNorm`, `InstanceNorm`, `GroupNorm` and
//! `L2Normalization`, with their gradients as one fused op, `_mxrt_norm_grad`.
//!
//! Each views its data as `A × L × B` and normalises every (a, b) line of `L` elements:
//!
//! | op | A | L | B | gamma, beta index |
//! |---|---|---|---|---|
//! | LayerNorm (axis k) | dims before k | dim k | dims after k | l |
//! | InstanceNorm | N·C | spatial | 1 | a mod C |
//! | GroupNorm (G groups) | N·G | C/G · spatial | 1 | a mod G |
//! | L2Normalization instance / channel / spatial | N / N / N·C | rest / C / spatial | 1 / spatial / 1 | — |
//!
//! The standardising ops give `(x - mean) / sqrt(var + eps) * gamma + beta` (biased variance);
//! L2Normalization gives `x / sqrt(Σ x² + eps)`. Their hidden outputs are the per-line
//! statistics MXNet's have: LayerNorm's and GroupNorm's mean and standard deviation,
//! InstanceNorm's mean and variance, L2Normalization's norm.

use super::nn::{as_refs, passed};
use super::{Entries, axis as norm_axis, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{
    GradCtx, ParamList, PartialShape, ShapeRule, Signature, Val, param_flag, param_int,
};
use crate::operator::kernel::Element;
use crate::operator::kernel::map::Ptr;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::parallel::for_ranges;
use std::sync::Mutex;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Layer,
    Instance,
    Group,
    L2,
}

impl Kind {
    fn of(name: &str) -> Option<Kind> {
        Some(match name {
            "LayerNorm" | "layer" => Kind::Layer,
            "InstanceNorm" | "instance" => Kind::Instance,
            "GroupNorm" | "group" => Kind::Group,
            "L2Normalization" | "l2" => Kind::L2,
            _ => return None,
        })
    }
    fn tag(self) -> &'static str {
        match self {
            Kind::Layer => "layer",
            Kind::Instance => "instance",
            Kind::Group => "group",
            Kind::L2 => "l2",
        }
    }
}

/// Which parameter element scales an element at (a, l).
#[derive(Clone, Copy, Debug)]
enum GammaBy {
    L,
    AMod(usize),
    None,
}

/// The `A × L × B` view of the data and what the statistics and parameters look like.
#[derive(Clone, Debug)]
struct Layout {
    a: usize,
    l: usize,
    b: usize,
    gamma: GammaBy,
    /// gamma's and beta's shape (empty for L2Normalization).
    param_shape: Vec<i64>,
    /// the hidden statistics' shape.
    stat_shape: Vec<i64>,
    eps: f64,
}

impl Layout {
    fn gi(&self, a: usize, l: usize) -> usize {
        match self.gamma {
            GammaBy::L => l,
            GammaBy::AMod(m) => a % m,
            GammaBy::None => 0,
        }
    }
}

fn prod(d: &[i64]) -> usize {
    d.iter().map(|&v| v.max(0) as usize).product()
}

/// The layout for `kind` with the invoke's parameters (every parameter the op takes is taken
/// here, so forward and gradient share the checks).
fn layout(call: &Call<'_>, kind: Kind, shape: &[i64]) -> Result<Layout> {
    let p = call.params;
    let nd = shape.len();
    let need3 = |what: &str| -> Result<()> {
        if nd < 3 {
            return Err(Error::invalid(format!(
                "operator {}: {what} needs data of at least 3 dimensions (batch, channel, ...), got shape {:?}",
                call.name, shape
            )));
        }
        Ok(())
    };
    Ok(match kind {
        Kind::Layer => {
            let eps = p.or("eps", param::float, "a number", 1e-5)?;
            p.optional("output_mean_var", param::boolean, "a boolean")?;
            let axis = p.or("axis", param::int, "an integer", -1)?;
            if nd == 0 {
                return Err(Error::invalid(format!(
                    "operator {}: data must have at least one dimension",
                    call.name
                )));
            }
            let k = norm_axis(call, axis, nd)?;
            let mut stat = shape.to_vec();
            stat[k] = 1;
            Layout {
                a: prod(&shape[..k]),
                l: shape[k].max(0) as usize,
                b: prod(&shape[k + 1..]),
                gamma: GammaBy::L,
                param_shape: vec![shape[k]],
                stat_shape: stat,
                eps,
            }
        }
        Kind::Instance => {
            let eps = p.or("eps", param::float, "a number", 1e-3)?;
            need3("InstanceNorm")?;
            let (n, c) = (shape[0].max(0) as usize, shape[1].max(0) as usize);
            Layout {
                a: n * c,
                l: prod(&shape[2..]),
                b: 1,
                gamma: GammaBy::AMod(c.max(1)),
                param_shape: vec![shape[1]],
                stat_shape: vec![shape[0], shape[1]],
                eps,
            }
        }
        Kind::Group => {
            let eps = p.or("eps", param::float, "a number", 1e-5)?;
            p.optional("output_mean_var", param::boolean, "a boolean")?;
            let groups = p.or("num_groups", param::int, "an integer", 1)?;
            need3("GroupNorm")?;
            if groups < 1 || shape[1] % groups != 0 {
                return Err(Error::invalid(format!(
                    "operator {}: num_groups={groups} must divide the {} channels",
                    call.name, shape[1]
                )));
            }
            let g = groups as usize;
            let n = shape[0].max(0) as usize;
            let per = shape[1].max(0) as usize / g;
            Layout {
                a: n * g,
                l: per * prod(&shape[2..]),
                b: 1,
                gamma: GammaBy::AMod(g),
                param_shape: vec![groups],
                stat_shape: vec![shape[0], groups],
                eps,
            }
        }
        Kind::L2 => {
            let eps = p.or("eps", param::float, "a number", 1e-10)?;
            let mode = p.or(
                "mode",
                param::choice,
                "instance, channel or spatial",
                "instance".into(),
            )?;
            if nd == 0 {
                return Err(Error::invalid(format!(
                    "operator {}: data must have at least one dimension",
                    call.name
                )));
            }
            let n = shape[0].max(0) as usize;
            match mode.as_str() {
                "instance" => Layout {
                    a: n,
                    l: prod(&shape[1..]),
                    b: 1,
                    gamma: GammaBy::None,
                    param_shape: vec![],
                    stat_shape: vec![shape[0]],
                    eps,
                },
                "channel" => {
                    need3("mode channel")?;
                    let mut stat = shape.to_vec();
                    stat[1] = 1;
                    Layout {
                        a: n,
                        l: shape[1].max(0) as usize,
                        b: prod(&shape[2..]),
                        gamma: GammaBy::None,
                        param_shape: vec![],
                        stat_shape: stat,
                        eps,
                    }
                }
                "spatial" => {
                    need3("mode spatial")?;
                    Layout {
                        a: n * shape[1].max(0) as usize,
                        l: prod(&shape[2..]),
                        b: 1,
                        gamma: GammaBy::None,
                        param_shape: vec![],
                        stat_shape: vec![shape[0], shape[1]],
                        eps,
                    }
                }
                other => {
                    return Err(Error::invalid(format!(
                        "operator {}: mode must be instance, channel or spatial, got '{other}'",
                        call.name
                    )));
                }
            }
        }
    })
}

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

/// Checks gamma and beta (inputs 1.. of `ins`, named from `first`) against the layout.
fn check_params(call: &Call<'_>, lay: &Layout, ins: &[TensorDesc], names: &[&str]) -> Result<()> {
    for (t, name) in ins.iter().zip(names) {
        if t.shape[..] != lay.param_shape[..] {
            return Err(Error::invalid(format!(
                "operator {}: {name} has shape {:?}, expected {:?}",
                call.name,
                &t.shape[..],
                lay.param_shape
            )));
        }
    }
    Ok(())
}

fn read_f64(t: &crate::operator::tensor::Tensor) -> Vec<f64> {
    crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
}

/// One line's statistics: (centre, scale) with `y = (x - centre) / scale` — the mean and
/// `sqrt(var + eps)` (or, for L2, 0 and `sqrt(Σx² + eps)`), plus the variance.
fn line_stats<T: Element>(x: &[T], base: usize, lay: &Layout, kind: Kind) -> (f64, f64, f64) {
    let (l, b) = (lay.l, lay.b);
    let at = |i: usize| x[base + i * b].to_f64();
    if kind == Kind::L2 {
        let ss: f64 = (0..l).map(|i| at(i) * at(i)).sum();
        return (0.0, (ss + lay.eps).sqrt(), ss);
    }
    let n = l.max(1) as f64;
    let mean = (0..l).map(at).sum::<f64>() / n;
    let var = (0..l).map(|i| (at(i) - mean).powi(2)).sum::<f64>() / n;
    (mean, (var + lay.eps).sqrt(), var)
}

fn norm_forward(call: &Call<'_>) -> Result<Plan> {
    let kind = Kind::of(call.name).expect("registered under a norm name");
    let n_in = if kind == Kind::L2 { 1 } else { 3 };
    let ins = inputs(call, n_in)?;
    let x = ins[0].clone();
    float_data(call, x.dtype)?;
    let lay = layout(call, kind, &x.shape)?;
    if kind != Kind::L2 {
        check_params(call, &lay, &ins[1..], &["gamma", "beta"])?;
    }
    let dtype = x.dtype;
    let stat = TensorDesc::new(&lay.stat_shape, dtype);
    let outs = if kind == Kind::L2 {
        vec![x.clone(), stat]
    } else {
        vec![x.clone(), stat.clone(), stat]
    };
    let mean_var = matches!(kind, Kind::Layer | Kind::Group)
        && call
            .params
            .or("output_mean_var", param::boolean, "a boolean", false)?;
    let visible = if mean_var { 3 } else { 1 };
    Ok(Plan::new(outs, move |k| {
        let (gamma, beta) = if kind == Kind::L2 {
            (Vec::new(), Vec::new())
        } else {
            (read_f64(&k.inputs[1]), read_f64(&k.inputs[2]))
        };
        let lines = lay.a * lay.b;
        let mut s1 = vec![0f64; lines];
        let mut s2 = vec![0f64; lines];
        let (p1, p2) = (Ptr(s1.as_mut_ptr()), Ptr(s2.as_mut_ptr()));
        crate::with_element!(dtype, T => {
            let xs = k.inputs[0].slice::<T>();
            let y = Ptr(k.outputs[0].slice_mut::<T>().as_mut_ptr());
            let (l, b) = (lay.l, lay.b);
            for_ranges(lay.a, l * b * 6, |a0, a1| {
                for a in a0..a1 {
                    for bb in 0..b {
                        let base = a * l * b + bb;
                        let (centre, scale, var) = line_stats(xs, base, &lay, kind);
                        for i in 0..l {
                            let idx = base + i * b;
                            let xh = (xs[idx].to_f64() - centre) / scale;
                            let v = if kind == Kind::L2 {
                                xh
                            } else {
                                let g = lay.gi(a, i);
                                xh * gamma[g] + beta[g]
                            };
                            // SAFETY: `y` holds A·L·B elements; a range of `a` writes only
                            // its own lines, and ranges are disjoint.
                            unsafe { y.get().add(idx).write(T::from_f64(v)) };
                        }
                        let (v1, v2) = match kind {
                            Kind::L2 => (scale, 0.0),
                            Kind::Instance => (centre, var),
                            _ => (centre, scale),
                        };
                        // SAFETY: one slot per line, written by the line's range only.
                        unsafe {
                            p1.get().add(a * b + bb).write(v1);
                            p2.get().add(a * b + bb).write(v2);
                        }
                    }
                }
            });
            for (o, v) in k.outputs[1].slice_mut::<T>().iter_mut().zip(&s1) {
                *o = T::from_f64(*v);
            }
            if kind != Kind::L2 {
                for (o, v) in k.outputs[2].slice_mut::<T>().iter_mut().zip(&s2) {
                    *o = T::from_f64(*v);
                }
            }
        });
        Ok(())
    })
    .with_visible(visible))
}

/// `_mxrt_norm_grad(dy, x[, gamma])` with `kind` and the forward's parameters: the gradients of
/// data, gamma and beta (data only for `l2`). With `w = dy·gamma` and `x̂` the normalised data,
/// `dx = (w - mean(w) - x̂·mean(w·x̂)) / sqrt(var + eps)`, `dgamma = Σ dy·x̂`, `dbeta = Σ dy`;
/// for L2 (`y = x / n`), `dx = (dy - y·Σ dy·y) / n`.
fn norm_backward(call: &Call<'_>) -> Result<Plan> {
    let kind_s = call
        .params
        .required("kind", param::choice, "layer, instance, group or l2")?;
    let kind = Kind::of(&kind_s).ok_or_else(|| {
        Error::invalid(format!("operator {}: unknown kind '{kind_s}'", call.name))
    })?;
    let n_in = if kind == Kind::L2 { 2 } else { 3 };
    let ins = inputs(call, n_in)?;
    let x = ins[1].clone();
    float_data(call, x.dtype)?;
    if ins[0].shape != x.shape || ins[0].dtype != x.dtype {
        return Err(Error::invalid(format!(
            "operator {}: gradient {:?} {} for data {:?} {}",
            call.name,
            &ins[0].shape[..],
            ins[0].dtype.name(),
            &x.shape[..],
            x.dtype.name()
        )));
    }
    let lay = layout(call, kind, &x.shape)?;
    let mut outs = vec![x.clone()];
    if kind != Kind::L2 {
        check_params(call, &lay, &ins[2..], &["gamma"])?;
        outs.push(ins[2].clone());
        outs.push(ins[2].clone());
    }
    let dtype = x.dtype;
    let pdt = if kind == Kind::L2 {
        dtype
    } else {
        ins[2].dtype
    };
    Ok(Plan::new(outs, move |k| {
        let gamma = if kind == Kind::L2 {
            Vec::new()
        } else {
            read_f64(&k.inputs[2])
        };
        let np = gamma.len();
        let sums = Mutex::new((vec![0f64; np], vec![0f64; np]));
        crate::with_element!(dtype, T => {
            let dy = k.inputs[0].slice::<T>();
            let xs = k.inputs[1].slice::<T>();
            let dx = Ptr(k.outputs[0].slice_mut::<T>().as_mut_ptr());
            let (l, b) = (lay.l, lay.b);
            let n = l.max(1) as f64;
            for_ranges(lay.a, l * b * 10, |a0, a1| {
                let (mut dg, mut db) = (vec![0f64; np], vec![0f64; np]);
                for a in a0..a1 {
                    for bb in 0..b {
                        let base = a * l * b + bb;
                        let (centre, scale, _) = line_stats(xs, base, &lay, kind);
                        let at = |i: usize| base + i * b;
                        let xh = |i: usize| (xs[at(i)].to_f64() - centre) / scale;
                        let w = |i: usize| {
                            let d = dy[at(i)].to_f64();
                            if kind == Kind::L2 { d } else { d * gamma[lay.gi(a, i)] }
                        };
                        let (mut mw, mut mwx) = (0.0, 0.0);
                        for i in 0..l {
                            let (wi, xi) = (w(i), xh(i));
                            mw += wi;
                            mwx += wi * xi;
                            if kind != Kind::L2 {
                                let d = dy[at(i)].to_f64();
                                let g = lay.gi(a, i);
                                dg[g] += d * xi;
                                db[g] += d;
                            }
                        }
                        let (mw, mwx) = if kind == Kind::L2 { (0.0, mwx) } else { (mw / n, mwx / n) };
                        for i in 0..l {
                            let v = (w(i) - mw - xh(i) * mwx) / scale;
                            // SAFETY: `dx` holds A·L·B elements; a range of `a` writes only
                            // its own lines, and ranges are disjoint.
                            unsafe { dx.get().add(at(i)).write(T::from_f64(v)) };
                        }
                    }
                }
                if np > 0 {
                    let mut s = sums.lock().unwrap_or_else(|e| e.into_inner());
                    for j in 0..np {
                        s.0[j] += dg[j];
                        s.1[j] += db[j];
                    }
                }
            });
        });
        if kind != Kind::L2 {
            let (dg, db) = sums.into_inner().unwrap_or_else(|e| e.into_inner());
            let (o1, o2) = k.outputs[1..].split_at_mut(1);
            crate::with_element!(pdt, P => {
                for (o, v) in o1[0].slice_mut::<P>().iter_mut().zip(&dg) {
                    *o = P::from_f64(*v);
                }
                for (o, v) in o2[0].slice_mut::<P>().iter_mut().zip(&db) {
                    *o = P::from_f64(*v);
                }
            });
        }
        Ok(())
    }))
}

fn norm_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let kind = Kind::of(g.name).expect("registered under a norm name");
    let mut p = passed(g, &["axis", "eps", "num_groups", "mode"]);
    p.push(("kind".into(), kind.tag().into()));
    if kind == Kind::L2 {
        let dx = g.op("_mxrt_norm_grad", &[g.dy(0), g.x(0)], &as_refs(&p))?;
        return Ok(vec![Some(dx)]);
    }
    let outs = g.ops("_mxrt_norm_grad", &[g.dy(0), g.x(0), g.x(1)], &as_refs(&p))?;
    Ok(vec![Some(outs[0]), Some(outs[1]), Some(outs[2])])
}

/// gamma's and beta's shapes from the data's, and the hidden statistics'.
fn norm_shapes(
    kind: Kind,
    p: &ParamList,
    ins: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins = vec![None; ins.len()];
    let Some(x) = ins.first().cloned().flatten() else {
        return Ok((for_ins, Vec::new()));
    };
    let nd = x.len() as i64;
    let ch = match kind {
        Kind::Layer => {
            let axis = param_int(p, "axis", -1)?;
            let a = if axis < 0 { axis + nd } else { axis };
            if a < 0 || a >= nd {
                return Err(Error::invalid(format!(
                    "axis {axis} is out of range for data of {nd} dimensions"
                )));
            }
            x[a as usize]
        }
        Kind::Instance if nd >= 2 => x[1],
        Kind::Group => param_int(p, "num_groups", 1)?,
        _ => return Ok((for_ins, Vec::new())),
    };
    for s in for_ins.iter_mut().skip(1) {
        *s = Some(vec![ch]);
    }
    Ok((for_ins, Vec::new()))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("LayerNorm", &norm_forward)
        .grad(norm_grad)
        .signature(mean_std_signature)
        .shape_rule(ShapeRule::Rule(|p, ins, _| {
            norm_shapes(Kind::Layer, p, ins)
        }));
    t.def("GroupNorm", &norm_forward)
        .grad(norm_grad)
        .signature(mean_std_signature)
        .shape_rule(ShapeRule::Rule(|p, ins, _| {
            norm_shapes(Kind::Group, p, ins)
        }));
    t.def("InstanceNorm", &norm_forward)
        .grad(norm_grad)
        .signature(|_| {
            Ok(Signature::simple(&["data", "gamma", "beta"])
                .named_outputs(&["output", "mean", "var"], 1))
        })
        .shape_rule(ShapeRule::Rule(|p, ins, _| {
            norm_shapes(Kind::Instance, p, ins)
        }));
    t.def("L2Normalization", &norm_forward)
        .grad(norm_grad)
        .signature(|_| Ok(Signature::simple(&["data"]).named_outputs(&["output", "norm"], 1)));
    t.def("_mxrt_norm_grad", &norm_backward);
}

fn mean_std_signature(p: &ParamList) -> Result<Signature> {
    let visible = if param_flag(p, "output_mean_var", false)? {
        3
    } else {
        1
    };
    Ok(Signature::simple(&["data", "gamma", "beta"])
        .named_outputs(&["output", "mean", "std"], visible))
}
