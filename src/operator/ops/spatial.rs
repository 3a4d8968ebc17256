//! Spatial sampling and region operators, and the CTC loss: `GridGenerator` (affine and warp),
//! `BilinearSampler`, `SpatialTransformer` (an affine grid sampled bilinearly), `ROIPooling`,
//! `_contrib_ROIAlign`, `Correlation` and `CTCLoss`, with MXNet 1.9.1's parameters, shapes,
//! hidden outputs and gradients.
//!
//! Kernels compute in `f64`; where MXNet's CPU kernels compute in the data's float type and a
//! rounding decides an index (a `floor`, a `ceil`, a bounds test), float32 and float16 data have
//! their intermediate values rounded the way MXNet's arithmetic rounds them ([`Q`]), so bins,
//! neighbours and one-sided derivatives are MXNet's.
//!
//! Gradients are internal ops: `_mxrt_grid_generator_grad(dy)`,
//! `_mxrt_bilinear_sampler_grad(dy, data, grid)` (both inputs; `SpatialTransformer` chains it
//! with the affine grid's gradient), `_mxrt_roi_pooling_grad(dy, data, rois, maxidx)` (MXNet's
//! argmax routing), `_mxrt_roi_align_grad(dy, data, rois)` and
//! `_mxrt_correlation_grad(dy, data1, data2)`. `CTCLoss` computes its gradient in the forward
//! (its hidden `grad` output) and scales it by the loss's head gradient.

use super::nn::as_refs;
use super::{Entries, dims};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, ParamList, Signature, Val, param_flag};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param as p;
use crate::operator::tensor::Tensor;

fn bad(call: &Call<'_>, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("operator {}: {msg}", call.name))
}

fn check(call: &Call<'_>, ok: bool, msg: impl std::fmt::Display) -> Result<()> {
    if ok { Ok(()) } else { Err(bad(call, msg)) }
}

fn count(call: &Call<'_>, n: usize, names: &str) -> Result<()> {
    check(
        call,
        call.inputs.len() == n,
        format_args!("Input:[{names}] ({} inputs given)", call.inputs.len()),
    )
}

/// MXNet's real types (float32, float64, float16), one for every input.
fn real_dtype(call: &Call<'_>) -> Result<DType> {
    let d = call.inputs[0].dtype;
    for t in call.inputs {
        if t.dtype != d {
            return Err(bad(
                call,
                format_args!(
                    "Non-uniform data type in {}: {} and {}",
                    call.name,
                    d.name(),
                    t.dtype.name()
                ),
            ));
        }
    }
    if !matches!(d, DType::F32 | DType::F64 | DType::F16) {
        return Err(bad(
            call,
            format_args!(
                "only float32, float64 and float16 are supported, not {}",
                d.name()
            ),
        ));
    }
    Ok(d)
}

fn load(t: &Tensor) -> Vec<f64> {
    let d = t.dtype;
    crate::with_element!(d, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
}

fn store(t: &mut Tensor, v: &[f64]) {
    let d = t.dtype;
    crate::with_element!(d, T => {
        for (o, x) in t.slice_mut::<T>().iter_mut().zip(v) {
            *o = T::from_f64(*x);
        }
    })
}

fn zero(t: &mut Tensor) {
    let d = t.dtype;
    crate::with_element!(d, T => t.slice_mut::<T>().fill(T::zero()));
}

/// Rounding to the data's arithmetic: float32 and float16 values are rounded to their type after
/// each operation MXNet does in the data type (mshadow's `half_t` rounds every result to half).
#[derive(Clone, Copy)]
struct Q(DType);

impl Q {
    fn of(d: DType) -> Q {
        Q(d)
    }
    fn r(self, v: f64) -> f64 {
        match self.0 {
            DType::F64 => v,
            DType::F16 => half::f16::from_f64(v).to_f64(),
            _ => v as f32 as f64,
        }
    }
}

fn shape_desc(s: &[usize], d: DType) -> TensorDesc {
    let v: Vec<i64> = s.iter().map(|&x| x as i64).collect();
    TensorDesc::new(&v, d)
}

/// `target_shape` (default (0, 0)) as (h, w).
fn target_shape(call: &Call<'_>) -> Result<(i64, i64)> {
    let t = call
        .params
        .or("target_shape", p::shape, "a shape (h, w)", vec![0, 0])?;
    check(
        call,
        t.len() == 2,
        format_args!("parameter 'target_shape' must have 2 entries, got {t:?}"),
    )?;
    Ok((t[0], t[1]))
}

fn positive_target(call: &Call<'_>, (h, w): (i64, i64)) -> Result<(usize, usize)> {
    check(call, h > 0, format_args!("incorrect target_shape: {h}"))?;
    check(call, w > 0, format_args!("incorrect target_shape: {w}"))?;
    Ok((h as usize, w as usize))
}

// ---------------------------------------------------------------------------------------------
// GridGenerator

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transform {
    Affine,
    Warp,
}

fn transform(call: &Call<'_>) -> Result<Transform> {
    let t = call
        .params
        .required("transform_type", p::choice, "affine or warp")?;
    match t.as_str() {
        "affine" => Ok(Transform::Affine),
        "warp" => Ok(Transform::Warp),
        _ => Err(bad(
            call,
            format_args!("Invalid Input: '{t}', valid values are: {{'affine', 'warp'}}"),
        )),
    }
}

/// The affine destination grid: rows x, y, 1 over the h × w target, in the data's arithmetic.
fn affine_grid(h: usize, w: usize, q: Q) -> Vec<f64> {
    let n = h * w;
    let mut g = vec![0.0; 3 * n];
    let sx = q.r(2.0 / (w as f64 - 1.0));
    let sy = q.r(2.0 / (h as f64 - 1.0));
    for i in 0..n {
        g[i] = q.r(-1.0 + q.r((i % w) as f64 * sx));
        g[n + i] = q.r(-1.0 + q.r((i / w) as f64 * sy));
        g[2 * n + i] = 1.0;
    }
    g
}

/// `theta` (batch × 6) applied to the destination grid: (batch, 2, h·w).
fn affine_apply(theta: &[f64], grid: &[f64], n: usize, q: Q) -> Vec<f64> {
    let hw = grid.len() / 3;
    let mut out = vec![0.0; n * 2 * hw];
    for b in 0..n {
        for r in 0..2 {
            let t = &theta[b * 6 + r * 3..][..3];
            let o = &mut out[(b * 2 + r) * hw..][..hw];
            for i in 0..hw {
                let mut acc = q.r(t[0] * grid[i]);
                acc = q.r(acc + q.r(t[1] * grid[hw + i]));
                o[i] = q.r(acc + t[2]);
            }
        }
    }
    out
}

fn grid_generator(call: &Call<'_>) -> Result<Plan> {
    count(call, 1, "data")?;
    let kind = transform(call)?;
    let ts = target_shape(call)?;
    let d = real_dtype(call)?;
    let x = dims(&call.inputs[0].shape);
    match kind {
        Transform::Affine => {
            check(
                call,
                x.len() == 2,
                "if transform_type is affine, data is affine matrixaffine matrix should be 2D in batch-num_hidden",
            )?;
            check(call, x[1] == 6, "incorrect data shape[1], should be 6")?;
            let (h, w) = positive_target(call, ts)?;
            let n = x[0];
            let outs = vec![shape_desc(&[n, 2, h, w], d), shape_desc(&[3, h * w], d)];
            Ok(Plan::new(outs, move |k| {
                let q = Q::of(d);
                let grid = affine_grid(h, w, q);
                let out = affine_apply(&load(&k.inputs[0]), &grid, n, q);
                store(&mut k.outputs[0], &out);
                store(&mut k.outputs[1], &grid);
                Ok(())
            })
            .with_visible(1))
        }
        Transform::Warp => {
            check(
                call,
                x.len() == 4,
                "if transform_type is warp, data is optical flowoptical flow should be 4D in batch-num_hidden-y-x",
            )?;
            check(call, x[1] == 2, "incorrect data shape[1], should be 2")?;
            let (n, h, w) = (x[0], x[2], x[3]);
            let outs = vec![shape_desc(&x, d), shape_desc(&[2, h, w], d)];
            Ok(Plan::new(outs, move |k| {
                let q = Q::of(d);
                let flow = load(&k.inputs[0]);
                let (wx, wy) = (q.r((w as f64 - 1.0) / 2.0), q.r((h as f64 - 1.0) / 2.0));
                let mut out = vec![0.0; flow.len()];
                let mut dst = vec![0.0; 2 * h * w];
                for yy in 0..h {
                    for xx in 0..w {
                        dst[yy * w + xx] = xx as f64;
                        dst[h * w + yy * w + xx] = yy as f64;
                    }
                }
                for b in 0..n {
                    for c in 0..2 {
                        let s = if c == 0 { wx } else { wy };
                        for i in 0..h * w {
                            let o = (b * 2 + c) * h * w + i;
                            out[o] = q.r(q.r(q.r(flow[o] + dst[c * h * w + i]) / s) - 1.0);
                        }
                    }
                }
                store(&mut k.outputs[0], &out);
                store(&mut k.outputs[1], &dst);
                Ok(())
            })
            .with_visible(1))
        }
    }
}

/// `_mxrt_grid_generator_grad(dy)`: affine: `dy` (batch, 2, h·w in any shape) times the
/// destination grid's transpose, (batch, 6); warp: `dy` over the half extents.
fn grid_generator_backward(call: &Call<'_>) -> Result<Plan> {
    count(call, 1, "out_grad")?;
    let kind = transform(call)?;
    let ts = target_shape(call)?;
    let d = real_dtype(call)?;
    let dy = dims(&call.inputs[0].shape);
    match kind {
        Transform::Affine => {
            let (h, w) = positive_target(call, ts)?;
            let total: usize = dy.iter().product();
            check(
                call,
                total % (2 * h * w) == 0,
                "output gradient does not match target_shape",
            )?;
            let n = total / (2 * h * w);
            Ok(Plan::new(vec![shape_desc(&[n, 6], d)], move |k| {
                let q = Q::of(d);
                let grid = affine_grid(h, w, q);
                let g = load(&k.inputs[0]);
                let hw = h * w;
                let mut out = vec![0.0; n * 6];
                for row in 0..2 * n {
                    let gr = &g[row * hw..][..hw];
                    for c in 0..3 {
                        out[row * 3 + c] = gr
                            .iter()
                            .zip(&grid[c * hw..][..hw])
                            .map(|(a, b)| a * b)
                            .sum();
                    }
                }
                store(&mut k.outputs[0], &out);
                Ok(())
            }))
        }
        Transform::Warp => {
            check(
                call,
                dy.len() == 4 && dy[1] == 2,
                "incorrect data shape[1], should be 2",
            )?;
            let (n, h, w) = (dy[0], dy[2], dy[3]);
            Ok(Plan::new(vec![shape_desc(&dy, d)], move |k| {
                let g = load(&k.inputs[0]);
                let (wx, wy) = ((w as f64 - 1.0) / 2.0, (h as f64 - 1.0) / 2.0);
                let mut out = vec![0.0; g.len()];
                for b in 0..n {
                    for c in 0..2 {
                        let s = if c == 0 { wx } else { wy };
                        for i in 0..h * w {
                            let o = (b * 2 + c) * h * w + i;
                            out[o] = g[o] / s;
                        }
                    }
                }
                store(&mut k.outputs[0], &out);
                Ok(())
            }))
        }
    }
}

fn grid_generator_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params = g.params.to_vec();
    let dx = g.op("_mxrt_grid_generator_grad", &[g.dy(0)], &as_refs(&params))?;
    Ok(vec![Some(dx)])
}

// ---------------------------------------------------------------------------------------------
// BilinearSampler

/// Sampling geometry: data (n, c, ih, iw), output (oh, ow); the grid holds x then y for each
/// batch item, `oh · ow` values each.
#[derive(Clone, Copy)]
struct Sampler {
    n: usize,
    c: usize,
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    q: Q,
}

/// A source point: top-left corner, its weights, and which of the four neighbours are inside.
struct Corner {
    y: i64,
    x: i64,
    wy: f64,
    wx: f64,
}

impl Sampler {
    fn corner(&self, gx: f64, gy: f64) -> Corner {
        let q = self.q;
        let yr = q.r(q.r(q.r(gy + 1.0) * (self.ih as f64 - 1.0)) / 2.0);
        let xr = q.r(q.r(q.r(gx + 1.0) * (self.iw as f64 - 1.0)) / 2.0);
        let (y, x) = (yr.floor(), xr.floor());
        Corner {
            y: y as i64,
            x: x as i64,
            wy: q.r(1.0 - q.r(yr - y)),
            wx: q.r(1.0 - q.r(xr - x)),
        }
    }
    fn inside(&self, y: i64, x: i64) -> bool {
        y >= 0 && x >= 0 && (y as usize) < self.ih && (x as usize) < self.iw
    }

    fn forward(&self, data: &[f64], grid: &[f64]) -> Vec<f64> {
        let (ohw, ihw) = (self.oh * self.ow, self.ih * self.iw);
        let mut out = vec![0.0; self.n * self.c * ohw];
        for b in 0..self.n {
            for i in 0..ohw {
                let gi = b * 2 * ohw + i;
                let k = self.corner(grid[gi], grid[gi + ohw]);
                for ch in 0..self.c {
                    let plane = &data[(b * self.c + ch) * ihw..][..ihw];
                    let v = |dy: i64, dx: i64| {
                        let (y, x) = (k.y + dy, k.x + dx);
                        if self.inside(y, x) {
                            plane[y as usize * self.iw + x as usize]
                        } else {
                            0.0
                        }
                    };
                    out[(b * self.c + ch) * ohw + i] = v(0, 0) * k.wy * k.wx
                        + v(0, 1) * k.wy * (1.0 - k.wx)
                        + v(1, 0) * (1.0 - k.wy) * k.wx
                        + v(1, 1) * (1.0 - k.wy) * (1.0 - k.wx);
                }
            }
        }
        out
    }

    /// The data's and the grid's gradients.
    fn backward(&self, dy: &[f64], data: &[f64], grid: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (ohw, ihw) = (self.oh * self.ow, self.ih * self.iw);
        let mut gdata = vec![0.0; data.len()];
        let mut ggrid = vec![0.0; grid.len()];
        for b in 0..self.n {
            for i in 0..ohw {
                let gi = b * 2 * ohw + i;
                let k = self.corner(grid[gi], grid[gi + ohw]);
                let (mut gy, mut gx) = (0.0, 0.0);
                for ch in 0..self.c {
                    let base = (b * self.c + ch) * ihw;
                    let g = dy[(b * self.c + ch) * ohw + i];
                    let mut vals = [0.0; 4];
                    let weights = [
                        k.wy * k.wx,
                        k.wy * (1.0 - k.wx),
                        (1.0 - k.wy) * k.wx,
                        (1.0 - k.wy) * (1.0 - k.wx),
                    ];
                    for (j, (ddy, ddx)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate()
                    {
                        let (y, x) = (k.y + ddy, k.x + ddx);
                        if self.inside(y, x) {
                            let at = base + y as usize * self.iw + x as usize;
                            gdata[at] += g * weights[j];
                            vals[j] = data[at];
                        }
                    }
                    let [tl, tr, bl, br] = vals;
                    gy -= g * (tr - br + (tl - tr - bl + br) * k.wx);
                    gx -= g * (bl - br + (tl - tr - bl + br) * k.wy);
                }
                ggrid[gi + ohw] = gy * (self.ih as f64 - 1.0) / 2.0;
                ggrid[gi] = gx * (self.iw as f64 - 1.0) / 2.0;
            }
        }
        (gdata, ggrid)
    }
}

fn sampler_inputs(call: &Call<'_>) -> Result<(Sampler, DType)> {
    count(call, 2, "data, grid")?;
    let d = real_dtype(call)?;
    let x = dims(&call.inputs[0].shape);
    let g = dims(&call.inputs[1].shape);
    check(
        call,
        x.len() == 4,
        "input data should be 4D in batch-num_filter-y-x",
    )?;
    check(
        call,
        g.len() == 4,
        "Sampler grid should be 4D in batch-2-y-x",
    )?;
    check(
        call,
        x[0] == g[0],
        format_args!(
            "Check failed: dshape[0] == lshape[0] ({} vs. {})",
            x[0], g[0]
        ),
    )?;
    check(call, g[1] == 2, "incorrect grid shape[1], should be 2")?;
    check(
        call,
        g[2] > 0,
        format_args!("incorrect grid_shape: {}", g[2]),
    )?;
    check(
        call,
        g[3] > 0,
        format_args!("incorrect grid_shape: {}", g[3]),
    )?;
    let s = Sampler {
        n: x[0],
        c: x[1],
        ih: x[2],
        iw: x[3],
        oh: g[2],
        ow: g[3],
        q: Q::of(d),
    };
    Ok((s, d))
}

fn bilinear_sampler(call: &Call<'_>) -> Result<Plan> {
    call.params.optional("cudnn_off", p::boolean, "a boolean")?;
    let (s, d) = sampler_inputs(call)?;
    let outs = vec![
        shape_desc(&[s.n, s.c, s.oh, s.ow], d),
        shape_desc(&[s.n, s.oh, s.ow, 2], d),
    ];
    Ok(Plan::new(outs, move |k| {
        let out = s.forward(&load(&k.inputs[0]), &load(&k.inputs[1]));
        store(&mut k.outputs[0], &out);
        zero(&mut k.outputs[1]);
        Ok(())
    })
    .with_visible(1))
}

/// `_mxrt_bilinear_sampler_grad(dy, data, grid)`: the data's and the grid's gradients (the
/// grid in any shape holding (batch, 2, h, w) values).
fn bilinear_sampler_backward(call: &Call<'_>) -> Result<Plan> {
    call.params.optional("cudnn_off", p::boolean, "a boolean")?;
    count(call, 3, "out_grad, data, grid")?;
    let d = real_dtype(call)?;
    let dy = dims(&call.inputs[0].shape);
    let x = dims(&call.inputs[1].shape);
    check(
        call,
        dy.len() == 4 && x.len() == 4,
        "input data should be 4D in batch-num_filter-y-x",
    )?;
    let s = Sampler {
        n: x[0],
        c: x[1],
        ih: x[2],
        iw: x[3],
        oh: dy[2],
        ow: dy[3],
        q: Q::of(d),
    };
    check(
        call,
        call.inputs[2].size() == s.n * 2 * s.oh * s.ow,
        "the grid does not match the output gradient",
    )?;
    let outs = vec![call.inputs[1].clone(), call.inputs[2].clone()];
    Ok(Plan::new(outs, move |k| {
        let (gd, gg) = s.backward(
            &load(&k.inputs[0]),
            &load(&k.inputs[1]),
            &load(&k.inputs[2]),
        );
        store(&mut k.outputs[0], &gd);
        store(&mut k.outputs[1], &gg);
        Ok(())
    }))
}

fn bilinear_sampler_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let gs = g.ops(
        "_mxrt_bilinear_sampler_grad",
        &[g.dy(0), g.x(0), g.x(1)],
        &[],
    )?;
    Ok(vec![Some(gs[0]), Some(gs[1])])
}

// ---------------------------------------------------------------------------------------------
// SpatialTransformer

fn spatial_transformer(call: &Call<'_>) -> Result<Plan> {
    count(call, 2, "data, loc")?;
    let ps = call.params;
    let ts = target_shape(call)?;
    let t = ps.required("transform_type", p::choice, "affine")?;
    check(
        call,
        t == "affine",
        format_args!("Invalid Input: '{t}', valid values are: {{'affine'}}"),
    )?;
    let s = ps.required("sampler_type", p::choice, "bilinear")?;
    check(
        call,
        s == "bilinear",
        format_args!("Invalid Input: '{s}', valid values are: {{'bilinear'}}"),
    )?;
    ps.optional("cudnn_off", p::boolean, "a boolean")?;
    let d = real_dtype(call)?;
    let x = dims(&call.inputs[0].shape);
    let l = dims(&call.inputs[1].shape);
    check(
        call,
        x.len() == 4,
        "input data should be 4D in batch-num_filter-y-x",
    )?;
    check(
        call,
        l.len() == 2,
        "locolisation paramter should be 4D in batch-num_hidden",
    )?;
    check(
        call,
        l[1] == 6,
        "incorrect locolisation network shape[1], should be 6",
    )?;
    let (h, w) = positive_target(call, ts)?;
    check(
        call,
        l[0] == x[0],
        format_args!("loc has {} rows for a batch of {}", l[0], x[0]),
    )?;
    let smp = Sampler {
        n: x[0],
        c: x[1],
        ih: x[2],
        iw: x[3],
        oh: h,
        ow: w,
        q: Q::of(d),
    };
    let outs = vec![
        shape_desc(&[x[0], x[1], h, w], d),
        shape_desc(&[3, h * w], d),
        shape_desc(&[x[0], 2, h * w], d),
    ];
    Ok(Plan::new(outs, move |k| {
        let grid = affine_grid(h, w, smp.q);
        let src = affine_apply(&load(&k.inputs[1]), &grid, smp.n, smp.q);
        let out = smp.forward(&load(&k.inputs[0]), &src);
        store(&mut k.outputs[0], &out);
        store(&mut k.outputs[1], &grid);
        store(&mut k.outputs[2], &src);
        Ok(())
    })
    .with_visible(1))
}

fn spatial_transformer_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let ts = g.param("target_shape").unwrap_or("(0, 0)").to_string();
    let gs = g.ops(
        "_mxrt_bilinear_sampler_grad",
        &[g.dy(0), g.x(0), g.y(2)],
        &[],
    )?;
    let dloc = g.op(
        "_mxrt_grid_generator_grad",
        &[gs[1]],
        &[("transform_type", "affine"), ("target_shape", ts.as_str())],
    )?;
    Ok(vec![Some(gs[0]), Some(dloc)])
}

// ---------------------------------------------------------------------------------------------
// ROIPooling and ROIAlign

struct RoiParams {
    ph: usize,
    pw: usize,
    scale: f64,
}

fn roi_params(call: &Call<'_>) -> Result<RoiParams> {
    let ps = call.params;
    let size = ps.required("pooled_size", p::shape, "a shape (h, w)")?;
    check(
        call,
        size.len() == 2,
        format_args!("pooled_size: Shape size mismatch with expected ndim 2, got {size:?}"),
    )?;
    check(
        call,
        size.iter().all(|&v| v > 0),
        format_args!(
            "Invalid Parameter format for pooled_size expect Shape with non-zero entries, got {size:?}"
        ),
    )?;
    let scale = ps.required("spatial_scale", p::float, "a number in [0, 1]")?;
    check(
        call,
        (0.0..=1.0).contains(&scale),
        format_args!("value {scale} for Parameter spatial_scale should be in range [0, 1]"),
    )?;
    Ok(RoiParams {
        ph: size[0] as usize,
        pw: size[1] as usize,
        scale: scale as f32 as f64,
    })
}

/// Data (4-D) and rois ((num_rois, 5)) shapes, checked.
fn roi_inputs(call: &Call<'_>, ins: &[TensorDesc]) -> Result<(Vec<usize>, usize, DType)> {
    let x = dims(&ins[0].shape);
    let r = dims(&ins[1].shape);
    check(call, x.len() == 4, "data should be a 4D tensor")?;
    check(
        call,
        r.len() == 2 && r[1] == 5,
        "bbox should be a 2D tensor of shape [batch, 5]",
    )?;
    let d = ins[0].dtype;
    check(
        call,
        ins[1].dtype == d,
        format_args!(
            "Check failed: dtype == (*in_type)[1] ({} vs. {})",
            d.name(),
            ins[1].dtype.name()
        ),
    )?;
    check(
        call,
        matches!(d, DType::F32 | DType::F64 | DType::F16),
        format_args!(
            "only float32, float64 and float16 are supported, not {}",
            d.name()
        ),
    )?;
    Ok((x, r[0], d))
}

/// ROIPooling's forward: outputs and argmax indices (flat into the data, -1 for none).
fn roi_pool_forward(
    x: &[usize],
    p: &RoiParams,
    data: &[f64],
    rois: &[f64],
    q: Q,
) -> (Vec<f64>, Vec<f64>) {
    let (n, c, h, w) = (x[0], x[1], x[2], x[3]);
    let nr = rois.len() / 5;
    let per = c * p.ph * p.pw;
    let mut out = vec![-(f32::MAX as f64); nr * per];
    let mut arg = vec![-1.0; nr * per];
    for r in 0..nr {
        let roi = &rois[r * 5..][..5];
        let sw = q.r(roi[1] * p.scale).round() as i64;
        let sh = q.r(roi[2] * p.scale).round() as i64;
        let ew = q.r(roi[3] * p.scale).round() as i64;
        let eh = q.r(roi[4] * p.scale).round() as i64;
        let b = roi[0] as i64;
        let invalid = b < 0 || b >= n as i64;
        let rh = (eh - sh + 1).max(1);
        let rw = (ew - sw + 1).max(1);
        let bh = q.r(rh as f64 / p.ph as f64);
        let bw = q.r(rw as f64 / p.pw as f64);
        for ch in 0..c {
            for py in 0..p.ph {
                for px in 0..p.pw {
                    let hs = q.r(py as f64 * bh).floor() as i64;
                    let ws = q.r(px as f64 * bw).floor() as i64;
                    let he = q.r((py + 1) as f64 * bh).ceil() as i64;
                    let we = q.r((px + 1) as f64 * bw).ceil() as i64;
                    let hs = (hs + sh).clamp(0, h as i64) as usize;
                    let he = (he + sh).clamp(0, h as i64) as usize;
                    let ws = (ws + sw).clamp(0, w as i64) as usize;
                    let we = (we + sw).clamp(0, w as i64) as usize;
                    let o = ((r * c + ch) * p.ph + py) * p.pw + px;
                    if he <= hs || we <= ws || invalid {
                        out[o] = 0.0;
                        arg[o] = -1.0;
                        continue;
                    }
                    let base = (b as usize * c + ch) * h * w;
                    for yy in hs..he {
                        for xx in ws..we {
                            let at = base + yy * w + xx;
                            if data[at] > out[o] {
                                out[o] = data[at];
                                arg[o] = at as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    (out, arg)
}

fn roi_pooling(call: &Call<'_>) -> Result<Plan> {
    count(call, 2, "data, rois")?;
    let prm = roi_params(call)?;
    let (x, nr, d) = roi_inputs(call, call.inputs)?;
    let shape = [nr, x[1], prm.ph, prm.pw];
    let outs = vec![shape_desc(&shape, d), shape_desc(&shape, d)];
    Ok(Plan::new(outs, move |k| {
        let (out, arg) =
            roi_pool_forward(&x, &prm, &load(&k.inputs[0]), &load(&k.inputs[1]), Q::of(d));
        store(&mut k.outputs[0], &out);
        store(&mut k.outputs[1], &arg);
        Ok(())
    })
    .with_visible(1))
}

/// `_mxrt_roi_pooling_grad(dy, data, rois, maxidx)`: each output's gradient added at its argmax;
/// zeros for the rois.
fn roi_pooling_backward(call: &Call<'_>) -> Result<Plan> {
    count(call, 4, "out_grad, data, rois, maxidx")?;
    roi_params(call)?;
    roi_inputs(call, &call.inputs[1..3])?;
    check(
        call,
        call.inputs[0].size() == call.inputs[3].size(),
        "the output gradient does not match the argmax indices",
    )?;
    let outs = vec![call.inputs[1].clone(), call.inputs[2].clone()];
    Ok(Plan::new(outs, move |k| {
        let dy = load(&k.inputs[0]);
        let arg = load(&k.inputs[3]);
        let mut dx = vec![0.0; k.inputs[1].len()];
        for (g, &a) in dy.iter().zip(&arg) {
            if a >= 0.0 && (a as usize) < dx.len() {
                dx[a as usize] += g;
            }
        }
        store(&mut k.outputs[0], &dx);
        zero(&mut k.outputs[1]);
        Ok(())
    }))
}

fn roi_pooling_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params = g.params.to_vec();
    let gs = g.ops(
        "_mxrt_roi_pooling_grad",
        &[g.dy(0), g.x(0), g.x(1), g.y(1)],
        &as_refs(&params),
    )?;
    Ok(vec![Some(gs[0]), Some(gs[1])])
}

struct AlignParams {
    roi: RoiParams,
    sample_ratio: i64,
    position_sensitive: bool,
    aligned: bool,
}

fn align_params(call: &Call<'_>) -> Result<AlignParams> {
    let roi = roi_params(call)?;
    let ps = call.params;
    Ok(AlignParams {
        roi,
        sample_ratio: ps.or("sample_ratio", p::int, "an integer", -1)?,
        position_sensitive: ps.or("position_sensitive", p::boolean, "a boolean", false)?,
        aligned: ps.or("aligned", p::boolean, "a boolean", false)?,
    })
}

/// ROIAlign's geometry for data `x` and `nr` rois: output channels.
fn align_channels(call: &Call<'_>, a: &AlignParams, x: &[usize]) -> Result<usize> {
    if a.position_sensitive {
        let cells = a.roi.ph * a.roi.pw;
        check(
            call,
            x[1] % cells == 0,
            "Input channels should be divided by pooled_size[0]*pooled_size[1]when position_sensitive is true.",
        )?;
        Ok(x[1] / cells)
    } else {
        Ok(x[1])
    }
}

/// The sampling points of ROIAlign for one roi: for every output cell, its samples'
/// (four flat positions, four weights), and the sample count. `None` when the roi is skipped.
#[allow(clippy::type_complexity)]
fn align_samples(
    a: &AlignParams,
    h: usize,
    w: usize,
    roi: &[f64],
    q: Q,
) -> Result<(Vec<Vec<([usize; 4], [f64; 4])>>, f64)> {
    let (ph, pw) = (a.roi.ph, a.roi.pw);
    let off = if a.aligned { 0.5 } else { 0.0 };
    let sw = q.r(q.r(roi[1] * a.roi.scale) - off);
    let sh = q.r(q.r(roi[2] * a.roi.scale) - off);
    let ew = q.r(q.r(roi[3] * a.roi.scale) - off);
    let eh = q.r(q.r(roi[4] * a.roi.scale) - off);
    let mut rw = q.r(ew - sw);
    let mut rh = q.r(eh - sh);
    if a.aligned {
        if !(rw > 0.0 && rh > 0.0) {
            return Err(Error::invalid(format!(
                "operator _contrib_ROIAlign: Check failed: roi_width > 0. and roi_height > 0. ({rw} and {rh})"
            )));
        }
    } else {
        rw = rw.max(1.0);
        rh = rh.max(1.0);
    }
    let bh = q.r(rh / ph as f64);
    let bw = q.r(rw / pw as f64);
    let gh = if a.sample_ratio > 0 {
        a.sample_ratio
    } else {
        q.r(rh / ph as f64).ceil() as i64
    };
    let gw = if a.sample_ratio > 0 {
        a.sample_ratio
    } else {
        q.r(rw / pw as f64).ceil() as i64
    };
    let (gh, gw) = (gh.max(0) as usize, gw.max(0) as usize);
    let mut cells = Vec::with_capacity(ph * pw);
    for py in 0..ph {
        for px in 0..pw {
            let mut samples = Vec::with_capacity(gh * gw);
            for iy in 0..gh {
                let yy = q
                    .r(q.r(sh + q.r(py as f64 * bh))
                        + q.r(q.r((iy as f64 + 0.5) * bh) / gh as f64));
                for ix in 0..gw {
                    let xx = q.r(q.r(sw + q.r(px as f64 * bw))
                        + q.r(q.r((ix as f64 + 0.5) * bw) / gw as f64));
                    let (mut y, mut x) = (yy, xx);
                    // An empty plane has no pixel to sample: the cell stays zero.
                    if h == 0 || w == 0 || y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
                        continue;
                    }
                    y = y.max(0.0);
                    x = x.max(0.0);
                    let (mut yl, mut xl) = (y as usize, x as usize);
                    let (yh, xh);
                    if yl >= h - 1 {
                        yl = h - 1;
                        yh = yl;
                        y = yl as f64;
                    } else {
                        yh = yl + 1;
                    }
                    if xl >= w - 1 {
                        xl = w - 1;
                        xh = xl;
                        x = xl as f64;
                    } else {
                        xh = xl + 1;
                    }
                    let ly = q.r(y - yl as f64);
                    let lx = q.r(x - xl as f64);
                    let (hy, hx) = (1.0 - ly, 1.0 - lx);
                    samples.push((
                        [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh],
                        [hy * hx, hy * lx, ly * hx, ly * lx],
                    ));
                }
            }
            cells.push(samples);
        }
    }
    Ok((cells, (gh * gw) as f64))
}

/// The data plane an output channel `c` of cell `cell` reads.
fn align_plane(a: &AlignParams, b: usize, c: usize, cell: usize, cin: usize) -> usize {
    if a.position_sensitive {
        b * cin + c * a.roi.ph * a.roi.pw + cell
    } else {
        b * cin + c
    }
}

fn roi_align(call: &Call<'_>) -> Result<Plan> {
    count(call, 2, "data, rois")?;
    let a = align_params(call)?;
    let (x, nr, d) = roi_inputs(call, call.inputs)?;
    let c = align_channels(call, &a, &x)?;
    let outs = vec![shape_desc(&[nr, c, a.roi.ph, a.roi.pw], d)];
    Ok(Plan::new(outs, move |k| {
        let q = Q::of(d);
        let data = load(&k.inputs[0]);
        let rois = load(&k.inputs[1]);
        let (h, w) = (x[2], x[3]);
        let cells = a.roi.ph * a.roi.pw;
        let mut out = vec![0.0; nr * c * cells];
        for r in 0..nr {
            let roi = &rois[r * 5..][..5];
            if roi[0] < 0.0 {
                continue;
            }
            let b = roi[0] as usize;
            if b >= x[0] {
                continue;
            }
            let (samples, n) = align_samples(&a, h, w, roi, q)?;
            for ch in 0..c {
                for (cell, ss) in samples.iter().enumerate() {
                    let plane = &data[align_plane(&a, b, ch, cell, x[1]) * h * w..][..h * w];
                    let mut v = 0.0;
                    for (pos, wt) in ss {
                        for j in 0..4 {
                            v += wt[j] * plane[pos[j]];
                        }
                    }
                    out[(r * c + ch) * cells + cell] = v / n;
                }
            }
        }
        store(&mut k.outputs[0], &out);
        Ok(())
    }))
}

/// `_mxrt_roi_align_grad(dy, data, rois)`: the data's gradient; zeros for the rois.
fn roi_align_backward(call: &Call<'_>) -> Result<Plan> {
    count(call, 3, "out_grad, data, rois")?;
    let a = align_params(call)?;
    let (x, nr, d) = roi_inputs(call, &call.inputs[1..3])?;
    let c = align_channels(call, &a, &x)?;
    let outs = vec![call.inputs[1].clone(), call.inputs[2].clone()];
    Ok(Plan::new(outs, move |k| {
        let q = Q::of(d);
        let dy = load(&k.inputs[0]);
        let rois = load(&k.inputs[2]);
        let (h, w) = (x[2], x[3]);
        let cells = a.roi.ph * a.roi.pw;
        let mut dx = vec![0.0; k.inputs[1].len()];
        for r in 0..nr {
            let roi = &rois[r * 5..][..5];
            if roi[0] < 0.0 || roi[0] as usize >= x[0] {
                continue;
            }
            let b = roi[0] as usize;
            let (samples, n) = align_samples(&a, h, w, roi, q)?;
            for ch in 0..c {
                for (cell, ss) in samples.iter().enumerate() {
                    let base = align_plane(&a, b, ch, cell, x[1]) * h * w;
                    let g = dy[(r * c + ch) * cells + cell];
                    for (pos, wt) in ss {
                        for j in 0..4 {
                            dx[base + pos[j]] += g * wt[j] / n;
                        }
                    }
                }
            }
        }
        store(&mut k.outputs[0], &dx);
        zero(&mut k.outputs[1]);
        Ok(())
    }))
}

fn roi_align_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params = g.params.to_vec();
    let gs = g.ops(
        "_mxrt_roi_align_grad",
        &[g.dy(0), g.x(0), g.x(1)],
        &as_refs(&params),
    )?;
    Ok(vec![Some(gs[0]), Some(gs[1])])
}

// ---------------------------------------------------------------------------------------------
// Correlation

#[derive(Clone, Copy)]
struct Corr {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    pad: usize,
    kernel: usize,
    md: usize,
    s1: usize,
    s2: usize,
    radius: usize,
    grid: usize,
    th: usize,
    tw: usize,
    multiply: bool,
}

impl Corr {
    fn channels(&self) -> usize {
        self.grid * self.grid
    }
    /// Data value at padded position (y, x) of plane (b, ch), 0 in the padding.
    fn at(&self, d: &[f64], b: usize, ch: usize, y: usize, x: usize) -> Option<usize> {
        if y < self.pad || x < self.pad || y >= self.h + self.pad || x >= self.w + self.pad {
            return None;
        }
        Some(((b * self.c + ch) * self.h + y - self.pad) * self.w + x - self.pad)
            .filter(|&i| i < d.len())
    }
    /// For each output element: (b, top channel, i, j) and the window origins (y1, x1, y2, x2).
    fn each(&self, mut f: impl FnMut(usize, usize, usize, usize, usize, usize)) {
        for b in 0..self.n {
            for tc in 0..self.channels() {
                let s2o = ((tc % self.grid) as i64 - self.radius as i64) * self.s2 as i64;
                let s2p = ((tc / self.grid) as i64 - self.radius as i64) * self.s2 as i64;
                for i in 0..self.th {
                    for j in 0..self.tw {
                        let x1 = j * self.s1 + self.md;
                        let y1 = i * self.s1 + self.md;
                        let x2 = (x1 as i64 + s2o) as usize;
                        let y2 = (y1 as i64 + s2p) as usize;
                        let o = ((b * self.channels() + tc) * self.th + i) * self.tw + j;
                        f(o, b, y1, x1, y2, x2);
                    }
                }
            }
        }
    }
}

fn correlation_geometry(call: &Call<'_>, ins: &[TensorDesc]) -> Result<(Corr, DType)> {
    let ps = call.params;
    let uint = |key: &str, default: i64| -> Result<usize> {
        let v = ps.or(key, p::int, "a non-negative integer", default)?;
        check(
            call,
            v >= 0,
            format_args!("parameter '{key}' must be a non-negative integer, got {v}"),
        )?;
        Ok(v as usize)
    };
    let kernel = uint("kernel_size", 1)?;
    let md = uint("max_displacement", 1)?;
    let s1 = uint("stride1", 1)?;
    let s2 = uint("stride2", 1)?;
    let pad = uint("pad_size", 0)?;
    let multiply = ps.or("is_multiply", p::boolean, "a boolean", true)?;
    let a = dims(&ins[0].shape);
    let b = dims(&ins[1].shape);
    check(
        call,
        a.len() == 4 && b.len() == 4,
        "data should be a 4D tensor",
    )?;
    check(
        call,
        a == b,
        format_args!("data1 and data2 must have one shape, got {a:?} and {b:?}"),
    )?;
    let d = ins[0].dtype;
    check(
        call,
        ins[1].dtype == d,
        format_args!("data1 is {} but data2 is {}", d.name(), ins[1].dtype.name()),
    )?;
    check(
        call,
        matches!(d, DType::F32 | DType::F64 | DType::F16),
        format_args!(
            "only float32, float64 and float16 are supported, not {}",
            d.name()
        ),
    )?;
    check(call, kernel % 2 != 0, "kernel size should be odd number")?;
    check(call, s1 > 0, "parameter 'stride1' must be positive")?;
    check(call, s2 > 0, "parameter 'stride2' must be positive")?;
    let radius_k = (kernel - 1) / 2;
    let border = (md + radius_k) as i64;
    let (ph, pw) = ((a[2] + 2 * pad) as i64, (a[3] + 2 * pad) as i64);
    let tw = ((pw - 2 * border) as f32 / s1 as f32).ceil();
    let th = ((ph - 2 * border) as f32 / s1 as f32).ceil();
    let fit = "Correlation cannot be done with current settings.Neighborhood and kernel don't fit in blob";
    check(call, tw >= 1.0, fit)?;
    check(call, th >= 1.0, fit)?;
    let radius = md / s2;
    Ok((
        Corr {
            n: a[0],
            c: a[1],
            h: a[2],
            w: a[3],
            pad,
            kernel,
            md,
            s1,
            s2,
            radius,
            grid: 2 * radius + 1,
            th: th as usize,
            tw: tw as usize,
            multiply,
        },
        d,
    ))
}

fn correlation(call: &Call<'_>) -> Result<Plan> {
    count(call, 2, "data1, data2")?;
    let (g, d) = correlation_geometry(call, call.inputs)?;
    let (ph, pw) = (g.h + 2 * g.pad, g.w + 2 * g.pad);
    let outs = vec![
        shape_desc(&[g.n, g.channels(), g.th, g.tw], d),
        shape_desc(&[g.n, ph, pw, g.c], d),
        shape_desc(&[g.n, ph, pw, g.c], d),
    ];
    Ok(Plan::new(outs, move |k| {
        let a = load(&k.inputs[0]);
        let b = load(&k.inputs[1]);
        let sum = (g.kernel * g.kernel * g.c) as f64;
        let mut out = vec![0.0; g.n * g.channels() * g.th * g.tw];
        g.each(|o, bi, y1, x1, y2, x2| {
            let mut acc = 0.0;
            for hh in 0..g.kernel {
                for ww in 0..g.kernel {
                    for ch in 0..g.c {
                        let v1 = g.at(&a, bi, ch, y1 + hh, x1 + ww).map_or(0.0, |i| a[i]);
                        let v2 = g.at(&b, bi, ch, y2 + hh, x2 + ww).map_or(0.0, |i| b[i]);
                        acc += if g.multiply { v1 * v2 } else { (v1 - v2).abs() };
                    }
                }
            }
            out[o] = acc / sum;
        });
        store(&mut k.outputs[0], &out);
        for (t, src) in [(1, &a), (2, &b)] {
            let mut padded = vec![0.0; g.n * ph * pw * g.c];
            for bi in 0..g.n {
                for ch in 0..g.c {
                    for y in 0..g.h {
                        for x in 0..g.w {
                            padded[((bi * ph + y + g.pad) * pw + x + g.pad) * g.c + ch] =
                                src[((bi * g.c + ch) * g.h + y) * g.w + x];
                        }
                    }
                }
            }
            store(&mut k.outputs[t], &padded);
        }
        Ok(())
    })
    .with_visible(1))
}

/// `_mxrt_correlation_grad(dy, data1, data2)`: both inputs' gradients.
fn correlation_backward(call: &Call<'_>) -> Result<Plan> {
    count(call, 3, "out_grad, data1, data2")?;
    let (g, _) = correlation_geometry(call, &call.inputs[1..])?;
    let outs = vec![call.inputs[1].clone(), call.inputs[2].clone()];
    Ok(Plan::new(outs, move |k| {
        let dy = load(&k.inputs[0]);
        let a = load(&k.inputs[1]);
        let b = load(&k.inputs[2]);
        let sum = (g.kernel * g.kernel * g.c) as f64;
        let mut da = vec![0.0; a.len()];
        let mut db = vec![0.0; b.len()];
        g.each(|o, bi, y1, x1, y2, x2| {
            let gv = dy[o];
            for hh in 0..g.kernel {
                for ww in 0..g.kernel {
                    for ch in 0..g.c {
                        let i1 = g.at(&a, bi, ch, y1 + hh, x1 + ww);
                        let i2 = g.at(&b, bi, ch, y2 + hh, x2 + ww);
                        let v1 = i1.map_or(0.0, |i| a[i]);
                        let v2 = i2.map_or(0.0, |i| b[i]);
                        if g.multiply {
                            if let Some(i) = i1 {
                                da[i] += gv * v2 / sum;
                            }
                            if let Some(i) = i2 {
                                db[i] += gv * v1 / sum;
                            }
                        } else {
                            let sign = if v1 >= v2 { 1.0 } else { -1.0 };
                            if let Some(i) = i1 {
                                da[i] += gv * sign / sum;
                            }
                            if let Some(i) = i2 {
                                db[i] -= gv * sign / sum;
                            }
                        }
                    }
                }
            }
        });
        store(&mut k.outputs[0], &da);
        store(&mut k.outputs[1], &db);
        Ok(())
    }))
}

fn correlation_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let params = g.params.to_vec();
    let gs = g.ops(
        "_mxrt_correlation_grad",
        &[g.dy(0), g.x(0), g.x(1)],
        &as_refs(&params),
    )?;
    Ok(vec![Some(gs[0]), Some(gs[1])])
}

// ---------------------------------------------------------------------------------------------
// CTCLoss

struct CtcParams {
    data_lengths: bool,
    label_lengths: bool,
    blank_last: bool,
}

fn ctc_params(call: &Call<'_>) -> Result<CtcParams> {
    let ps = call.params;
    let blank = ps.or("blank_label", p::choice, "first or last", "first".into())?;
    let blank_last = match blank.as_str() {
        "first" => false,
        "last" => true,
        _ => {
            return Err(bad(
                call,
                format_args!("Invalid Input: '{blank}', valid values are: {{'first', 'last'}}"),
            ));
        }
    };
    Ok(CtcParams {
        data_lengths: ps.or("use_data_lengths", p::boolean, "a boolean", false)?,
        label_lengths: ps.or("use_label_lengths", p::boolean, "a boolean", false)?,
        blank_last,
    })
}

fn log_add(a: f64, b: f64) -> f64 {
    if a == f64::NEG_INFINITY {
        return b;
    }
    if b == f64::NEG_INFINITY {
        return a;
    }
    let m = a.max(b);
    m + ((a - m).exp() + (b - m).exp()).ln()
}

/// One sequence's loss and its gradient with respect to the activations: `probs` (t × a
/// softmax outputs, rows of stride `stride`), the labels without blanks.
fn ctc_one(probs: &[Vec<f64>], labels: &[usize], blank: usize, a: usize) -> (f64, Vec<Vec<f64>>) {
    let t = probs.len();
    let l = labels.len();
    let repeats = labels.windows(2).filter(|w| w[0] == w[1]).count();
    if l + repeats > t {
        return (0.0, vec![vec![0.0; a]; t]);
    }
    let s = 2 * l + 1;
    let lab: Vec<usize> = (0..s)
        .map(|i| if i % 2 == 0 { blank } else { labels[i / 2] })
        .collect();
    let ninf = f64::NEG_INFINITY;
    let lp: Vec<Vec<f64>> = probs
        .iter()
        .map(|r| r.iter().map(|v| v.ln()).collect())
        .collect();
    let mut alpha = vec![vec![ninf; s]; t];
    alpha[0][0] = lp[0][lab[0]];
    if s > 1 {
        alpha[0][1] = lp[0][lab[1]];
    }
    for ti in 1..t {
        for si in 0..s {
            let mut v = alpha[ti - 1][si];
            if si >= 1 {
                v = log_add(v, alpha[ti - 1][si - 1]);
            }
            if si >= 2 && lab[si] != blank && lab[si] != lab[si - 2] {
                v = log_add(v, alpha[ti - 1][si - 2]);
            }
            alpha[ti][si] = if v == ninf { ninf } else { v + lp[ti][lab[si]] };
        }
    }
    let mut beta = vec![vec![ninf; s]; t];
    beta[t - 1][s - 1] = lp[t - 1][lab[s - 1]];
    if s > 1 {
        beta[t - 1][s - 2] = lp[t - 1][lab[s - 2]];
    }
    for ti in (0..t - 1).rev() {
        for si in 0..s {
            let mut v = beta[ti + 1][si];
            if si + 1 < s {
                v = log_add(v, beta[ti + 1][si + 1]);
            }
            if si + 2 < s && lab[si] != blank && lab[si] != lab[si + 2] {
                v = log_add(v, beta[ti + 1][si + 2]);
            }
            beta[ti][si] = if v == ninf { ninf } else { v + lp[ti][lab[si]] };
        }
    }
    let mut ll = alpha[t - 1][s - 1];
    if s > 1 {
        ll = log_add(ll, alpha[t - 1][s - 2]);
    }
    let mut grad = vec![vec![0.0; a]; t];
    for ti in 0..t {
        let mut occ = vec![ninf; a];
        for si in 0..s {
            occ[lab[si]] = log_add(occ[lab[si]], alpha[ti][si] + beta[ti][si]);
        }
        for k in 0..a {
            let pk = probs[ti][k];
            grad[ti][k] = if occ[k] == ninf || pk == 0.0 {
                pk
            } else {
                pk - (occ[k] - lp[ti][k] - ll).exp()
            };
        }
    }
    (-ll, grad)
}

fn ctc_loss(call: &Call<'_>) -> Result<Plan> {
    let cp = ctc_params(call)?;
    let want = 2 + cp.data_lengths as usize + cp.label_lengths as usize;
    check(
        call,
        call.inputs.len() == want,
        format_args!("{want} inputs expected, {} given", call.inputs.len()),
    )?;
    let x = dims(&call.inputs[0].shape);
    let lb = dims(&call.inputs[1].shape);
    check(
        call,
        x.len() == 3,
        "The number of dimensions of data array must be 3.",
    )?;
    check(
        call,
        lb.len() == 2,
        "The number of dimensions of labels array must be 2.",
    )?;
    check(
        call,
        x[1] == lb[0],
        "The batch size for the labels and data arrays must be the same.",
    )?;
    let mut next = 2;
    if cp.data_lengths {
        let dl = dims(&call.inputs[next].shape);
        check(call, dl.len() == 1, "Data length array must be a vector.")?;
        check(
            call,
            dl[0] == x[1],
            "The batch size for the data and data lengths must be the same.",
        )?;
        next += 1;
    }
    if cp.label_lengths {
        let ll = dims(&call.inputs[next].shape);
        check(call, ll.len() == 1, "Label length array must be a vector.")?;
        check(
            call,
            ll[0] == lb[0],
            "The batch size for the labels and label lengths must be the same.",
        )?;
    }
    check(
        call,
        x[0] >= lb[1],
        "The max number of labels cannot exceed the maximum sequence length of the data.",
    )?;
    let d = call.inputs[0].dtype;
    check(
        call,
        matches!(d, DType::F32 | DType::F64 | DType::F16),
        format_args!(
            "only float32, float64 and float16 are supported, not {}",
            d.name()
        ),
    )?;
    let (tmax, n, a) = (x[0], x[1], x[2]);
    let lmax = lb[1];
    let name = call.name.to_string();
    let outs = vec![shape_desc(&[n], d), shape_desc(&x, d)];
    Ok(Plan::new(outs, move |k| {
        let data = load(&k.inputs[0]);
        let labels = load(&k.inputs[1]);
        let mut next = 2;
        let dlen: Vec<usize> = if cp.data_lengths {
            next += 1;
            load(&k.inputs[2])
                .iter()
                .map(|&v| v.max(0.0) as usize)
                .collect()
        } else {
            vec![tmax; n]
        };
        let llen: Option<Vec<i64>> = cp
            .label_lengths
            .then(|| load(&k.inputs[next]).iter().map(|&v| v as i64).collect());
        let blank = if cp.blank_last { a - 1 } else { 0 };
        let pad = if cp.blank_last { -1.0 } else { 0.0 };
        let mut loss = vec![0.0; n];
        let mut grad = vec![0.0; data.len()];
        for b in 0..n {
            let row = &labels[b * lmax..][..lmax];
            let len = match &llen {
                Some(v) => v[b].clamp(0, lmax as i64) as usize,
                None => row.iter().position(|&v| v == pad).unwrap_or(lmax),
            };
            let mut seq = Vec::with_capacity(len);
            for &v in &row[..len] {
                let c = v as i64;
                if c < 0 || c as usize >= a {
                    return Err(Error::invalid(format!(
                        "operator {name}: label {c} of sequence {b} is outside the alphabet of {a}"
                    )));
                }
                seq.push(c as usize);
            }
            let t = dlen[b].min(tmax);
            if t == 0 {
                continue;
            }
            let probs: Vec<Vec<f64>> = (0..t)
                .map(|ti| {
                    let r = &data[(ti * n + b) * a..][..a];
                    let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = r.iter().map(|v| (v - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    e.iter().map(|v| v / z).collect()
                })
                .collect();
            let (l, g) = ctc_one(&probs, &seq, blank, a);
            loss[b] = l;
            for (ti, gr) in g.iter().enumerate() {
                grad[(ti * n + b) * a..][..a].copy_from_slice(gr);
            }
        }
        store(&mut k.outputs[0], &loss);
        store(&mut k.outputs[1], &grad);
        Ok(())
    })
    .with_visible(1))
}

fn ctc_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let dy = g.op("Reshape", &[g.dy(0)], &[("shape", "(1, -1, 1)")])?;
    let dx = g.op("broadcast_mul", &[g.y(1), dy], &[])?;
    let mut out = vec![Some(dx)];
    for i in 1..g.inputs.len() {
        out.push(Some(g.zeros_like(g.x(i))?));
    }
    Ok(out)
}

fn ctc_signature(ps: &ParamList) -> Result<Signature> {
    let mut ins = vec!["data", "label"];
    if param_flag(ps, "use_data_lengths", false)? {
        ins.push("data_lengths");
    }
    if param_flag(ps, "use_label_lengths", false)? {
        ins.push("label_lengths");
    }
    // MXNet registers the names under a misspelt attribute: its outputs get the default names
    Ok(Signature::simple(&ins).named_outputs(&["output0", "output1"], 1))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("GridGenerator", &grid_generator)
        .grad(grid_generator_grad)
        .signature(|_| Ok(Signature::simple(&["data"]).named_outputs(&["output", "grid_dst"], 1)));
    t.def("_mxrt_grid_generator_grad", &grid_generator_backward);
    t.def("BilinearSampler", &bilinear_sampler)
        .grad(bilinear_sampler_grad)
        .signature(|_| {
            Ok(Signature::simple(&["data", "grid"]).named_outputs(&["output", "tmp"], 1))
        });
    t.def("_mxrt_bilinear_sampler_grad", &bilinear_sampler_backward);
    t.def("SpatialTransformer", &spatial_transformer)
        .grad(spatial_transformer_grad)
        .signature(|_| {
            Ok(Signature::simple(&["data", "loc"])
                .named_outputs(&["output", "grid_dst", "grid_src"], 1))
        });
    t.def("ROIPooling", &roi_pooling)
        .grad(roi_pooling_grad)
        .signature(|_| {
            Ok(Signature::simple(&["data", "rois"]).named_outputs(&["output", "maxidx"], 1))
        });
    t.def("_mxrt_roi_pooling_grad", &roi_pooling_backward);
    t.def("_contrib_ROIAlign", &roi_align)
        .grad(roi_align_grad)
        .signature(|_| Ok(Signature::simple(&["data", "rois"])));
    t.def("_mxrt_roi_align_grad", &roi_align_backward);
    t.def("Correlation", &correlation)
        .grad(correlation_grad)
        .signature(|_| {
            Ok(
                Signature::simple(&["data1", "data2"])
                    .named_outputs(&["output", "tmp1", "tmp2"], 1),
            )
        });
    t.def("_mxrt_correlation_grad", &correlation_backward);
    t.def("CTCLoss", &ctc_loss)
        .grad(ctc_grad)
        .signature(ctc_signature);
}
