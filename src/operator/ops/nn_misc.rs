//! Small building blocks of models: `_contrib_div_sqrt_dim` (scaled dot-product attention's
//! `x / sqrt(d)`), `_contrib_arange_like`, `batch_take` and `moments` (mean and variance along
//! axes, with the fused gradient `_mxrt_moments_grad`) and `LRN` (local response normalisation
//! across channels, gradient `_mxrt_lrn_grad`).

use super::{Entries, axis as norm_axis, inputs};
use crate::error::{Error, Result};
use crate::operator::def::{ShapeRule, Signature};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

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

/// `_contrib_div_sqrt_dim(data)`: `data / sqrt(data.shape[-1])`.
fn div_sqrt_dim(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let d = x.shape.last().copied().unwrap_or(1).max(0) as f64;
    let s = 1.0 / d.sqrt();
    Ok(Plan::new(vec![x], move |k| {
        let v: Vec<f64> = read_f64(&k.inputs[0]).into_iter().map(|e| e * s).collect();
        write_f64(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// `_contrib_arange_like(data)`: `start + step · ⌊i / repeat⌋`, shaped like the data or, with
/// `axis`, as long as that axis.
fn arange_like(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let p = call.params;
    let start = p.or("start", param::float, "a number", 0.0)?;
    let step = p.or("step", param::float, "a number", 1.0)?;
    let repeat = p.or("repeat", param::int, "an integer", 1)?;
    p.optional("ctx", |s| Some(s.to_string()), "a context")?;
    let axis = p.optional("axis", param::int, "an integer")?;
    if repeat < 1 {
        return Err(Error::invalid(format!(
            "operator {}: parameter 'repeat' must be positive, got {repeat}",
            call.name
        )));
    }
    let shape = match axis {
        Some(a) => vec![x.shape[norm_axis(call, a, x.shape.len())?]],
        None => x.shape.to_vec(),
    };
    let out = TensorDesc::new(&shape, x.dtype);
    let n = out.size();
    Ok(Plan::new(vec![out], move |k| {
        let v: Vec<f64> = (0..n)
            .map(|i| start + step * (i / repeat as usize) as f64)
            .collect();
        write_f64(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// `batch_take(a, indices)`: `out[i] = a[i, clip(indices[i])]` over `a` viewed as
/// `a.shape[0] × rest`.
fn batch_take(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (a, idx) = (&ins[0], &ins[1]);
    if a.shape.len() < 2 {
        return Err(Error::invalid(format!(
            "operator {}: data must have at least 2 dimensions, got {:?}",
            call.name,
            &a.shape[..]
        )));
    }
    let rows = a.shape[0].max(0) as usize;
    let m = if rows == 0 { 0 } else { a.size() / rows };
    let last = a.shape[a.shape.len() - 1].max(1) as usize;
    if idx.size() != a.size() / last {
        return Err(Error::invalid(format!(
            "operator {}: indices has shape {:?}; it must have as many elements as data {:?} without its last axis",
            call.name,
            &idx.shape[..],
            &a.shape[..]
        )));
    }
    let out = TensorDesc::new(&idx.shape, a.dtype);
    Ok(Plan::new(vec![out], move |k| {
        let (av, iv) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let v: Vec<f64> = iv
            .iter()
            .enumerate()
            .map(|(i, &j)| {
                let j = (j as i64).clamp(0, m as i64 - 1) as usize;
                av.get(i * m + j).copied().unwrap_or(0.0)
            })
            .collect();
        write_f64(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// Which axes `moments` reduces (`axes` must name them, as in MXNet).
fn reduced_axes(call: &Call<'_>, nd: usize) -> Result<Vec<bool>> {
    let axes = call
        .params
        .optional("axes", param::shape, "a tuple of axes")?;
    match axes {
        Some(list) if !list.is_empty() => {
            let mut m = vec![false; nd];
            for a in list {
                m[norm_axis(call, a, nd)?] = true;
            }
            Ok(m)
        }
        _ => Err(Error::invalid(format!(
            "operator {}: parameter 'axes' is required: empty axes is not supported (pass all axes for global moments)",
            call.name
        ))),
    }
}

/// The reduced shape and, for every element of `shape`, its reduced index.
fn reduction(shape: &[i64], mask: &[bool], keepdims: bool) -> (Vec<i64>, Vec<usize>) {
    let out: Vec<i64> = shape
        .iter()
        .zip(mask)
        .filter_map(|(&d, &m)| match (m, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    let n: usize = dims.iter().product();
    let mut idx = vec![0usize; n];
    let mut coord = vec![0usize; dims.len()];
    for slot in idx.iter_mut() {
        let mut r = 0;
        for (d, &c) in coord.iter().enumerate() {
            if !mask[d] {
                r = r * dims[d] + c;
            }
        }
        *slot = r;
        for d in (0..dims.len()).rev() {
            coord[d] += 1;
            if coord[d] < dims[d] {
                break;
            }
            coord[d] = 0;
        }
    }
    (out, idx)
}

struct Moments {
    out_shape: Vec<i64>,
    index: Vec<usize>,
    count: f64,
}

fn moments_geometry(call: &Call<'_>, x: &TensorDesc) -> Result<Moments> {
    let keepdims = call
        .params
        .or("keepdims", param::boolean, "a boolean", false)?;
    let mask = reduced_axes(call, x.shape.len())?;
    let (out_shape, index) = reduction(&x.shape, &mask, keepdims);
    let out_n: usize = out_shape.iter().map(|&d| d.max(0) as usize).product();
    let count = if out_n == 0 {
        1.0
    } else {
        (x.size() / out_n).max(1) as f64
    };
    Ok(Moments {
        out_shape,
        index,
        count,
    })
}

fn mean_var(x: &[f64], g: &Moments, n_out: usize) -> (Vec<f64>, Vec<f64>) {
    let mut mean = vec![0f64; n_out];
    for (v, &r) in x.iter().zip(&g.index) {
        mean[r] += v;
    }
    mean.iter_mut().for_each(|m| *m /= g.count);
    let mut var = vec![0f64; n_out];
    for (v, &r) in x.iter().zip(&g.index) {
        var[r] += (v - mean[r]).powi(2);
    }
    var.iter_mut().for_each(|m| *m /= g.count);
    (mean, var)
}

/// `moments(data)`: the mean and the (biased) variance along `axes`.
fn moments(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let g = moments_geometry(call, &x)?;
    let out = TensorDesc::new(&g.out_shape, x.dtype);
    let n_out = out.size();
    Ok(Plan::new(vec![out.clone(), out], move |k| {
        let (mean, var) = mean_var(&read_f64(&k.inputs[0]), &g, n_out);
        write_f64(&mut k.outputs[0], &mean);
        write_f64(&mut k.outputs[1], &var);
        Ok(())
    }))
}

/// `_mxrt_moments_grad(dmean, dvar, data)`: `dmean / n + dvar · 2 (x - mean) / n`.
fn moments_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let x = ins[2].clone();
    let g = moments_geometry(call, &x)?;
    let n_out: usize = g.out_shape.iter().map(|&d| d.max(0) as usize).product();
    if ins[0].size() != n_out || ins[1].size() != n_out {
        return Err(Error::invalid(format!(
            "operator {}: gradients {:?} and {:?} for moments of shape {:?}",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..],
            g.out_shape
        )));
    }
    Ok(Plan::new(vec![x], move |k| {
        let (dm, dv, xs) = (
            read_f64(&k.inputs[0]),
            read_f64(&k.inputs[1]),
            read_f64(&k.inputs[2]),
        );
        let (mean, _) = mean_var(&xs, &g, n_out);
        let out: Vec<f64> = xs
            .iter()
            .zip(&g.index)
            .map(|(&v, &r)| (dm[r] + dv[r] * 2.0 * (v - mean[r])) / g.count)
            .collect();
        write_f64(&mut k.outputs[0], &out);
        Ok(())
    }))
}

/// LRN's parameters and geometry: `N × C × rest` data, window of `nsize` channels.
#[derive(Clone, Copy)]
struct Lrn {
    alpha: f64,
    beta: f64,
    knorm: f64,
    nsize: usize,
    n: usize,
    c: usize,
    rest: usize,
}

fn lrn_params(call: &Call<'_>, x: &TensorDesc) -> Result<Lrn> {
    let p = call.params;
    let alpha = p.or("alpha", param::float, "a number", 1e-4)?;
    let beta = p.or("beta", param::float, "a number", 0.75)?;
    let knorm = p.or("knorm", param::float, "a number", 2.0)?;
    let nsize = p.required("nsize", param::int, "an integer")?;
    if nsize < 1 {
        return Err(Error::invalid(format!(
            "operator {}: parameter 'nsize' must be positive, got {nsize}",
            call.name
        )));
    }
    if x.shape.len() != 4 {
        return Err(Error::invalid(format!(
            "operator {}: data must be 4-dimensional (batch, channel, height, width), got {:?}",
            call.name,
            &x.shape[..]
        )));
    }
    let (n, c) = (x.shape[0].max(0) as usize, x.shape[1].max(0) as usize);
    Ok(Lrn {
        alpha,
        beta,
        knorm,
        nsize: nsize as usize,
        n,
        c,
        rest: x.shape[2..].iter().map(|&d| d.max(0) as usize).product(),
    })
}

impl Lrn {
    /// The channels of `c`'s window: `(nsize - 1) / 2` on each side (an even `nsize` sums one
    /// channel fewer than it names, as MXNet's CPU kernel does, still scaling by `alpha / nsize`).
    fn window(&self, c: usize) -> std::ops::Range<usize> {
        let h = (self.nsize - 1) / 2;
        c.saturating_sub(h)..(c + h + 1).min(self.c)
    }
    /// `knorm + alpha / nsize · Σ_window x²` for every element.
    fn norms(&self, x: &[f64]) -> Vec<f64> {
        let mut s = vec![0f64; x.len()];
        let sa = self.alpha / self.nsize as f64;
        for b in 0..self.n {
            for c in 0..self.c {
                for r in 0..self.rest {
                    let sum: f64 = self
                        .window(c)
                        .map(|j| x[(b * self.c + j) * self.rest + r].powi(2))
                        .sum();
                    s[(b * self.c + c) * self.rest + r] = self.knorm + sa * sum;
                }
            }
        }
        s
    }
}

/// `LRN(data)`: `x · norm^-beta` with `norm = knorm + alpha / nsize · Σ x²` over a window of
/// `nsize` channels; `norm` is a hidden output, as in MXNet.
fn lrn(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let l = lrn_params(call, &x)?;
    Ok(Plan::new(vec![x.clone(), x], move |k| {
        let xs = read_f64(&k.inputs[0]);
        let norm = l.norms(&xs);
        let out: Vec<f64> = xs
            .iter()
            .zip(&norm)
            .map(|(v, s)| v * s.powf(-l.beta))
            .collect();
        write_f64(&mut k.outputs[0], &out);
        write_f64(&mut k.outputs[1], &norm);
        Ok(())
    })
    .with_visible(1))
}

/// `_mxrt_lrn_grad(dy, data)`: `dy · norm^-beta - 2 beta alpha / nsize · x · Σ dy · x ·
/// norm^(-beta-1)` over x's window (windows are symmetric).
fn lrn_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let x = ins[1].clone();
    let l = lrn_params(call, &x)?;
    if ins[0].shape != x.shape {
        return Err(Error::invalid(format!(
            "operator {}: gradient {:?} for data {:?}",
            call.name,
            &ins[0].shape[..],
            &x.shape[..]
        )));
    }
    Ok(Plan::new(vec![x], move |k| {
        let (dy, xs) = (read_f64(&k.inputs[0]), read_f64(&k.inputs[1]));
        let norm = l.norms(&xs);
        let t: Vec<f64> = (0..xs.len())
            .map(|i| dy[i] * xs[i] * norm[i].powf(-l.beta - 1.0))
            .collect();
        let sa = l.alpha / l.nsize as f64;
        let mut g = vec![0f64; xs.len()];
        for b in 0..l.n {
            for c in 0..l.c {
                for r in 0..l.rest {
                    let i = (b * l.c + c) * l.rest + r;
                    let pooled: f64 = l.window(c).map(|j| t[(b * l.c + j) * l.rest + r]).sum();
                    g[i] = dy[i] * norm[i].powf(-l.beta) - 2.0 * l.beta * sa * xs[i] * pooled;
                }
            }
        }
        write_f64(&mut k.outputs[0], &g);
        Ok(())
    }))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("LRN", &lrn)
        .signature(|_| Ok(Signature::simple(&["data"]).named_outputs(&["output", "tmp_norm"], 1)))
        .grad(|g| {
            let p = super::nn::passed(g, &["alpha", "beta", "knorm", "nsize"]);
            let dx = g.op(
                "_mxrt_lrn_grad",
                &[g.dy(0), g.x(0)],
                &super::nn::as_refs(&p),
            )?;
            Ok(vec![Some(dx)])
        });
    t.def("_mxrt_lrn_grad", &lrn_backward);
    t.def("_contrib_div_sqrt_dim", &div_sqrt_dim)
        .shape_rule(ShapeRule::Same)
        .grad(|g| {
            let dx = g.op("_contrib_div_sqrt_dim", &[g.dy(0)], &[])?;
            Ok(vec![Some(dx)])
        });
    t.def("_contrib_arange_like", &arange_like);
    t.def("batch_take", &batch_take);
    t.def("moments", &moments)
        .signature(|_| Ok(Signature::simple(&["data"]).with_outputs(2)))
        .grad(|g| {
            let p = super::nn::passed(g, &["axes", "keepdims"]);
            let dx = g.op(
                "_mxrt_moments_grad",
                &[g.dy(0), g.dy(1), g.x(0)],
                &super::nn::as_refs(&p),
            )?;
            Ok(vec![Some(dx)])
        });
    t.def("_mxrt_moments_grad", &moments_backward);
}
