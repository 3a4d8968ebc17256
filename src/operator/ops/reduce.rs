//! Reductions (`sum`, `mean`, `prod`, `nansum`, `nanprod`, `max`, `min`, `norm`), index
//! reductions (`argmax`, `argmin`, `argmax_channel`, `pick` lives in `index.rs`) and ordering
//! (`sort`, `argsort`, `topk`). Floats accumulate in f64.

use super::{Entries, axis as norm_axis, dims, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::kernel::strided::{kept_middle, extreme_kept_middle, reduce, split_axes, sum_kept_middle, walk};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::def::{GradCtx, Signature, Val, param};
use crate::operator::param;
use crate::parallel::for_chunks_mut;
use super::nn::{as_refs, passed};

/// Which axes a reduction folds, from `axis` (an int, a tuple or None = all) and `exclude`.
fn reduced_axes(call: &Call<'_>, ndim: usize) -> Result<Vec<bool>> {
    let axes = call
        .params
        .optional("axis", param::shape, "an axis or a tuple of axes")?;
    let exclude = call
        .params
        .or("exclude", param::boolean, "a boolean", false)?;
    let mut mask = vec![axes.is_none(); ndim];
    if let Some(axes) = axes {
        if axes.is_empty() {
            mask = vec![true; ndim];
        }
        for a in axes {
            let a = norm_axis(call, a, ndim)?;
            if mask[a] && !exclude {
                return Err(Error::invalid(format!(
                    "operator {}: axis {a} given twice",
                    call.name
                )));
            }
            mask[a] = true;
        }
        if exclude {
            mask.iter_mut().for_each(|m| *m = !*m);
        }
    }
    Ok(mask)
}

/// The output shape of folding `mask`'s axes. Folding every axis leaves shape `(1,)`, as MXNet's
/// legacy ops do, unless numpy shape semantics are on (then `()`).
fn folded_shape(shape: &[i64], mask: &[bool], keepdims: bool) -> Vec<i64> {
    let mut out = vec![];
    for (d, &m) in shape.iter().zip(mask) {
        if !m {
            out.push(*d);
        } else if keepdims {
            out.push(1);
        }
    }
    scalar_as_one(out)
}

fn scalar_as_one(mut shape: Vec<i64>) -> Vec<i64> {
    if shape.is_empty() && !crate::ndarray::np_shape::current().is_on() {
        shape.push(1);
    }
    shape
}

#[derive(Clone, Copy)]
enum Fold {
    Sum,
    Mean,
    Prod,
    NanSum,
    NanProd,
    Max,
    Min,
    Norm1,
    Norm2,
}

fn plan_fold(call: &Call<'_>, fold: Fold) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let mask = reduced_axes(call, x.shape.len())?;
    let keepdims = call
        .params
        .or("keepdims", param::boolean, "a boolean", false)?;
    let mut out_dtype = x.dtype;
    let mut fold = fold;
    if matches!(fold, Fold::Norm2) {
        let ord = call.params.or("ord", param::int, "1 or 2", 2)?;
        fold = match ord {
            1 => Fold::Norm1,
            2 => Fold::Norm2,
            o => {
                return Err(Error::invalid(format!(
                    "operator {}: ord must be 1 or 2, got {o}",
                    call.name
                )));
            }
        };
        if let Some(d) = call
            .params
            .optional("out_dtype", param::dtype, "a dtype name")?
        {
            out_dtype = d;
        }
    }
    if matches!(fold, Fold::Max | Fold::Min)
        && x.size() == 0
        && mask.iter().zip(&x.shape).any(|(&m, &d)| m && d == 0)
    {
        return Err(Error::invalid(format!(
            "operator {}: cannot reduce an empty axis without an identity",
            call.name
        )));
    }
    let out_shape = folded_shape(&x.shape, &mask, keepdims);
    let shape = dims(&x.shape);
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out_shape, out_dtype)],
        move |k| {
            let (xin, out) = (&k.inputs[0], &mut k.outputs[0]);
            let mut acc = vec![0f64; out.len()];
            crate::with_element!(dtype, T => {
                let src = xin.slice::<T>();
                if matches!(fold, Fold::Sum | Fold::Mean)
                    && let Some((a, kk, b)) = kept_middle(&shape, &mask)
                {
                    // one vectorised pass per kept index (a bias gradient, column sums)
                    sum_kept_middle(src, a, kk, b, &mut acc);
                    if matches!(fold, Fold::Mean) {
                        acc.iter_mut().for_each(|v| *v /= (a * b) as f64);
                    }
                    write_f64(out, &acc);
                    return Ok(());
                }
                if matches!(fold, Fold::Max | Fold::Min)
                    && let Some((a, kk, b)) = kept_middle(&shape, &mask)
                {
                    extreme_kept_middle(src, a, kk, b, matches!(fold, Fold::Max), &mut acc);
                    write_f64(out, &acc);
                    return Ok(());
                }
                let (init, f): (f64, fn(f64, f64) -> f64) = match fold {
                    Fold::Sum | Fold::Mean => (0.0, |a, x| a + x),
                    Fold::Prod => (1.0, |a, x| a * x),
                    Fold::NanSum => (0.0, |a, x| if x.is_nan() { a } else { a + x }),
                    Fold::NanProd => (1.0, |a, x| if x.is_nan() { a } else { a * x }),
                    Fold::Max => (f64::NEG_INFINITY, |a, x| if x > a || x.is_nan() { x } else { a }),
                    Fold::Min => (f64::INFINITY, |a, x| if x < a || x.is_nan() { x } else { a }),
                    Fold::Norm1 => (0.0, |a, x| a + x.abs()),
                    Fold::Norm2 => (0.0, |a, x| a + x * x),
                };
                reduce(src, &shape, &mask, &mut acc, init, |a, x: T, _| f(a, x.to_f64()), |a, n| match fold {
                    Fold::Mean => a / n as f64,
                    Fold::Norm2 => a.sqrt(),
                    _ => a,
                });
            });
            write_f64(out, &acc);
            Ok(())
        },
    ))
}

/// Writes f64 results into a tensor of any dtype.
fn write_f64(out: &mut crate::operator::tensor::Tensor, vals: &[f64]) {
    crate::with_element!(out.dtype, O => {
        for (o, &v) in out.slice_mut::<O>().iter_mut().zip(vals) {
            *o = O::from_f64(v);
        }
    })
}

/// `argmax`/`argmin` over one axis (or the flattened array when `axis` is None), as indices in
/// the input's dtype; `argmax_channel` is argmax over the last axis.
fn plan_arg(call: &Call<'_>, max: bool, channel: bool) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let (ax, keepdims) = if channel {
        (Some(-1), false)
    } else {
        (
            call.params.optional("axis", param::int, "an integer")?,
            call.params
                .or("keepdims", param::boolean, "a boolean", false)?,
        )
    };
    let nd = x.shape.len();
    let (shape, mask, out_shape) = match ax {
        None => {
            let out = scalar_as_one(if keepdims { vec![1; nd] } else { vec![] });
            (vec![x.size()], vec![true], out)
        }
        Some(a) => {
            let a = norm_axis(call, a, nd)?;
            let mut mask = vec![false; nd];
            mask[a] = true;
            (
                dims(&x.shape),
                mask.clone(),
                folded_shape(&x.shape, &mask, keepdims),
            )
        }
    };
    if x.size() == 0 {
        return Err(Error::invalid(format!(
            "operator {}: cannot take the arg{} of an empty array",
            call.name,
            if max { "max" } else { "min" }
        )));
    }
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out_shape, dtype)],
        move |k| {
            let (xin, out) = (&k.inputs[0], &mut k.outputs[0]);
            crate::with_element!(dtype, T => {
                let init = (if max { f64::NEG_INFINITY } else { f64::INFINITY }, usize::MAX);
                reduce(xin.slice::<T>(), &shape, &mask, out.slice_mut::<T>(), init,
                    |(best, at): (f64, usize), v: T, i| {
                        let v = v.to_f64();
                        let better = at == usize::MAX
                            || (!best.is_nan() && (v.is_nan() || if max { v > best } else { v < best }));
                        if better { (v, i) } else { (best, at) }
                    },
                    |(_, at), _| T::from_f64(at as f64));
            });
            Ok(())
        },
    ))
}

/// What `topk` returns.
#[derive(Clone, Copy, PartialEq)]
enum Ret {
    Values,
    Indices,
    Both,
    Mask,
}

/// `sort`, `argsort` and `topk`: order each line along `axis` (stable; NaN last ascending).
fn plan_order(call: &Call<'_>, kind: &str) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let p = call.params;
    // absent means the last axis; an explicit None means the flattened array
    let axis = match p.raw("axis").map(str::trim) {
        None => Some(-1),
        Some("None") => None,
        Some(v) => Some(param::int(v).ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: parameter 'axis' must be an integer or None, got '{v}'",
                call.name
            ))
        })?),
    };
    let ascend_default = kind != "topk";
    let ascend = p.or("is_ascend", param::boolean, "a boolean", ascend_default)?;
    let (ret, k_count, idx_dtype) = match kind {
        "sort" => (Ret::Values, None, x.dtype),
        "argsort" => (
            Ret::Indices,
            None,
            p.or("dtype", param::dtype, "a dtype name", DType::F32)?,
        ),
        _ => {
            let ret = match p
                .or(
                    "ret_typ",
                    param::choice,
                    "value, indices, both or mask",
                    "indices".into(),
                )?
                .as_str()
            {
                "value" => Ret::Values,
                "indices" => Ret::Indices,
                "both" => Ret::Both,
                "mask" => Ret::Mask,
                other => {
                    return Err(Error::invalid(format!(
                        "operator {}: ret_typ must be value, indices, both or mask, got '{other}'",
                        call.name
                    )));
                }
            };
            let k = p.or("k", param::int, "an integer", 1)?;
            (
                ret,
                Some(k),
                p.or("dtype", param::dtype, "a dtype name", DType::F32)?,
            )
        }
    };
    // axis None: the flattened array
    let (shape, ax) = match axis {
        None => (vec![x.size() as i64], 0),
        Some(a) => (x.shape.to_vec(), norm_axis(call, a, x.shape.len())?),
    };
    let len = shape.get(ax).copied().unwrap_or(1).max(0) as usize;
    let k = match k_count {
        None => len,
        Some(k) if k <= 0 => len,
        Some(k) if k as usize > len => {
            return Err(Error::invalid(format!(
                "operator {}: k ({k}) is larger than the axis ({len})",
                call.name
            )));
        }
        Some(k) => k as usize,
    };
    let mut out_shape = shape.clone();
    if !out_shape.is_empty() {
        out_shape[ax] = k as i64;
    }
    let dtype = x.dtype;
    let mut outputs = vec![];
    match ret {
        Ret::Values => outputs.push(TensorDesc::new(&out_shape, dtype)),
        Ret::Indices => outputs.push(TensorDesc::new(&out_shape, idx_dtype)),
        Ret::Both => {
            outputs.push(TensorDesc::new(&out_shape, dtype));
            outputs.push(TensorDesc::new(&out_shape, idx_dtype));
        }
        Ret::Mask => outputs.push(TensorDesc::new(&x.shape, dtype)),
    }
    let in_dims = dims(&shape);
    let mut mask = vec![false; in_dims.len()];
    if !mask.is_empty() {
        mask[ax] = true;
    }
    Ok(Plan::new(outputs, move |kargs| {
        let (ks, kst, _, rst) = split_axes(&in_dims, &mask);
        let astride = rst.first().copied().unwrap_or(1);
        let out_dims: Vec<usize> = {
            let mut d = in_dims.clone();
            if !d.is_empty() {
                d[ax] = k;
            }
            d
        };
        let (oks, okst, _, orst) = split_axes(&out_dims, &mask);
        let ostride = orst.first().copied().unwrap_or(1);
        let lines: usize = ks.iter().product();
        crate::with_element!(dtype, T => {
            let src = kargs.inputs[0].slice::<T>();
            let mut order: Vec<(f64, usize)> = Vec::with_capacity(len);
            let mut bases = Vec::with_capacity(lines);
            walk(&ks, [&kst], [0], 0, lines, |_, [b]| bases.push(b));
            let mut obases = Vec::with_capacity(lines);
            walk(&oks, [&okst], [0], 0, lines, |_, [b]| obases.push(b));
            let (first, rest) = kargs.outputs.split_at_mut(1);
            for (line, &b) in bases.iter().enumerate() {
                order.clear();
                order.extend((0..len).map(|i| (src[(b + i as isize * astride) as usize].to_f64(), i)));
                order.sort_by(|a, b| {
                    let c = a.0.partial_cmp(&b.0).unwrap_or_else(|| a.0.is_nan().cmp(&b.0.is_nan()));
                    if ascend { c } else { c.reverse() }
                });
                let ob = obases[line];
                match ret {
                    Ret::Mask => {
                        let o = first[0].slice_mut::<T>();
                        for i in 0..len {
                            o[(b + i as isize * astride) as usize] = T::zero();
                        }
                        for &(_, i) in &order[..k] {
                            o[(b + i as isize * astride) as usize] = T::one();
                        }
                    }
                    _ => {
                        for (j, &(v, i)) in order[..k].iter().enumerate() {
                            let at = (ob + j as isize * ostride) as usize;
                            match ret {
                                Ret::Values => first[0].slice_mut::<T>()[at] = T::from_f64(v),
                                Ret::Indices => write_index(&mut first[0], at, i),
                                _ => {
                                    first[0].slice_mut::<T>()[at] = T::from_f64(v);
                                    write_index(&mut rest[0], at, i);
                                }
                            }
                        }
                    }
                }
            }
        });
        Ok(())
    }))
}

fn write_index(t: &mut crate::operator::tensor::Tensor, at: usize, i: usize) {
    crate::with_element!(t.dtype, I => t.slice_mut::<I>()[at] = I::from_f64(i as f64));
}

/// `_contrib_allclose(a, b)`: a uint8 scalar, 1 when every pair satisfies
/// `|a - b| <= atol + rtol * |b|` (NaNs equal when `equal_nan`).
fn allclose(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let p = call.params;
    let rtol = p.or("rtol", param::float, "a number", 1e-5)?;
    let atol = p.or("atol", param::float, "a number", 1e-8)?;
    let equal_nan = p.or("equal_nan", param::boolean, "a boolean", true)?;
    super::same_dtype(call, 0, 1)?;
    if ins[0].shape != ins[1].shape {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} differ",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..]
        )));
    }
    let dtype = ins[0].dtype;
    // MXNet computes in the input's type with float tolerances.
    let (rtol, atol) = (rtol as f32 as f64, atol as f32 as f64);
    Ok(Plan::new(vec![TensorDesc::new(&[], DType::U8)], move |k| {
        let close = crate::with_element!(dtype, T => {
            let (a, b) = (k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>());
            a.iter().zip(b).all(|(&x, &y)| {
                let (x, y) = (x.to_f64(), y.to_f64());
                if x.is_nan() || y.is_nan() {
                    equal_nan && x.is_nan() == y.is_nan()
                } else {
                    x == y || (x - y).abs() <= atol + rtol * y.abs()
                }
            })
        });
        k.outputs[0].slice_mut::<u8>()[0] = close as u8;
        Ok(())
    }))
}

pub(crate) fn register(t: &mut Entries) {
    // MXNet registers no gradient for allclose or argmax_channel; argmax and argmin have zero
    t.push(("_contrib_allclose", &allclose));
    t.push(("sum", &|c: &Call<'_>| plan_fold(c, Fold::Sum))).grad(fold_grad);
    t.push(("mean", &|c: &Call<'_>| plan_fold(c, Fold::Mean))).grad(fold_grad);
    t.push(("prod", &|c: &Call<'_>| plan_fold(c, Fold::Prod))).grad(fold_grad);
    t.push(("nansum", &|c: &Call<'_>| plan_fold(c, Fold::NanSum))).grad(fold_grad);
    t.push(("nanprod", &|c: &Call<'_>| plan_fold(c, Fold::NanProd))).grad(fold_grad);
    t.push(("max", &|c: &Call<'_>| plan_fold(c, Fold::Max))).grad(fold_grad);
    t.push(("min", &|c: &Call<'_>| plan_fold(c, Fold::Min))).grad(fold_grad);
    t.push(("norm", &|c: &Call<'_>| plan_fold(c, Fold::Norm2))).grad(fold_grad);
    t.push(("argmax", &|c: &Call<'_>| plan_arg(c, true, false))).zero_grad();
    t.push(("argmin", &|c: &Call<'_>| plan_arg(c, false, false))).zero_grad();
    t.push(("argmax_channel", &|c: &Call<'_>| plan_arg(c, true, true)));
    t.push(("sort", &|c: &Call<'_>| plan_order(c, "sort"))).grad(order_grad);
    t.push(("argsort", &|c: &Call<'_>| plan_order(c, "argsort"))).zero_grad();
    t.push(("topk", &|c: &Call<'_>| plan_order(c, "topk")))
        .grad(order_grad)
        .signature(|p| {
            let n = if param(p, "ret_typ") == Some("both") { 2 } else { 1 };
            Ok(Signature::simple(&["data"]).with_outputs(n))
        });

    t.def("_mxrt_unreduce", &unreduce).grad(|g| {
        let p = passed(g, &["axis", "exclude", "keepdims"]);
        let op = if g.flag("mean", false) { "mean" } else { "sum" };
        let d = g.op(op, &[g.dy(0)], &as_refs(&p))?;
        Ok(vec![Some(d), None])
    });
    t.def("_mxrt_scatter_axis", &|c: &Call<'_>| along_axis(c, true)).grad(|g| {
        let p = passed(g, &["axis"]);
        let d = g.op("_mxrt_gather_axis", &[g.dy(0), g.x(1)], &as_refs(&p))?;
        Ok(vec![Some(d), None, None])
    });
    t.def("_mxrt_gather_axis", &|c: &Call<'_>| along_axis(c, false)).grad(|g| {
        let p = passed(g, &["axis"]);
        let d = g.op("_mxrt_scatter_axis", &[g.dy(0), g.x(1), g.x(0)], &as_refs(&p))?;
        Ok(vec![Some(d), None])
    });
}

/// The gradients of the reductions, with `U` = `_mxrt_unreduce` (the result's gradient
/// broadcast back over the reduced axes), as MXNet's backward kernels compute them:
/// sum `U(dy)`, mean `U(dy) / n`, nansum `U(dy)` where x is not NaN, prod `U(dy·y) / x`,
/// nanprod the same and 0 at NaNs, max and min `U(dy)` wherever x equals the result (every tie
/// gets it), norm `U(dy / y)·x` (ord 2) or `U(dy)·sign(x)` (ord 1).
fn fold_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let mut p = passed(g, &["axis", "exclude", "keepdims"]);
    let (x, y, dy) = (g.x(0), g.y(0), g.dy(0));
    let name = g.name;
    if name == "mean" {
        p.push(("mean".into(), "True".into()));
    }
    let p = as_refs(&p);
    let dx = match name {
        "sum" | "mean" => g.op("_mxrt_unreduce", &[dy, x], &p)?,
        "nansum" => {
            let u = g.op("_mxrt_unreduce", &[dy, x], &p)?;
            let m = g.op("_equal", &[x, x], &[])?;
            g.mul(u, m)?
        }
        "prod" | "nanprod" => {
            let t = g.mul(dy, y)?;
            let u = g.op("_mxrt_unreduce", &[t, x], &p)?;
            let d = g.div(u, x)?;
            if name == "nanprod" {
                let m = g.op("_equal", &[x, x], &[])?;
                let z = g.zeros_like(x)?;
                g.op("where", &[m, d, z], &[])?
            } else {
                d
            }
        }
        "max" | "min" => {
            let u = g.op("_mxrt_unreduce", &[dy, x], &p)?;
            let yb = g.op("_mxrt_unreduce", &[y, x], &p)?;
            let m = g.op("_equal", &[x, yb], &[])?;
            g.mul(u, m)?
        }
        _ => {
            // norm
            if g.float("ord", 2.0)? == 1.0 {
                let u = g.op("_mxrt_unreduce", &[dy, x], &p)?;
                let s = g.op("sign", &[x], &[])?;
                g.mul(u, s)?
            } else {
                let r = g.div(dy, y)?;
                let u = g.op("_mxrt_unreduce", &[r, x], &p)?;
                g.mul(u, x)?
            }
        }
    };
    Ok(vec![Some(dx)])
}

/// `sort` and `topk`'s gradient: the values' gradient goes back to the positions they came
/// from (the indices output of `topk(ret_typ='both')`, else the same ordering recomputed, which
/// is stable and so the forward's); indices and masks have zero gradient, as in MXNet.
fn order_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let sort = g.name == "sort";
    let ret = if sort { "value".to_string() } else { g.param_set("ret_typ").unwrap_or("indices").to_string() };
    if ret != "value" && ret != "both" {
        return Ok(vec![None]);
    }
    let axis = passed(g, &["axis"]);
    let idx = if ret == "both" {
        g.y(1)
    } else {
        let mut p = axis.clone();
        let ascend = g.param("is_ascend").map(str::to_string);
        p.push(("is_ascend".into(), ascend.unwrap_or_else(|| if sort { "True".into() } else { "False".into() })));
        p.push(("k".into(), if sort { "0".into() } else { g.param("k").unwrap_or("1").to_string() }));
        p.push(("ret_typ".into(), "indices".into()));
        p.push(("dtype".into(), "int64".into()));
        g.op("topk", &[g.x(0)], &as_refs(&p))?
    };
    let dx = g.op("_mxrt_scatter_axis", &[g.dy(0), idx, g.x(0)], &as_refs(&axis))?;
    Ok(vec![Some(dx)])
}

/// `_mxrt_unreduce(dy, x)`: `dy`, the result of a reduction of `x` with the reduction's
/// `axis`, `exclude` and `keepdims`, broadcast back to `x`'s shape in `x`'s dtype; with `mean`
/// divided by the number of elements each result folded.
fn unreduce(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (dy, x) = (&ins[0], &ins[1]);
    let mask = reduced_axes(call, x.shape.len())?;
    call.params.or("keepdims", param::boolean, "a boolean", false)?;
    let mean = call.params.or("mean", param::boolean, "a boolean", false)?;
    let shape = dims(&x.shape);
    let kept: Vec<usize> = shape.iter().zip(&mask).filter(|(_, m)| !**m).map(|(&d, _)| d).collect();
    let kept_strides = crate::operator::kernel::strided::contiguous_strides(&kept);
    if dy.size() != kept.iter().product::<usize>() {
        return Err(Error::invalid(format!(
            "operator {}: a reduction of shape {:?} has {} elements, not {}",
            call.name,
            &x.shape[..],
            kept.iter().product::<usize>(),
            dy.size()
        )));
    }
    let mut strides = vec![0isize; shape.len()];
    let mut j = 0;
    for (d, &m) in mask.iter().enumerate() {
        if !m {
            strides[d] = kept_strides[j];
            j += 1;
        }
    }
    let count: usize = shape.iter().zip(&mask).filter(|(_, m)| **m).map(|(&d, _)| d).product();
    let scale = if mean { 1.0 / count.max(1) as f64 } else { 1.0 };
    let (ddt, dtype) = (dy.dtype, x.dtype);
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        let out = &mut k.outputs[0];
        if ddt == dtype {
            crate::with_element!(dtype, T => {
                let src = k.inputs[0].slice::<T>();
                for_chunks_mut(out.slice_mut::<T>(), 1, |start, chunk| {
                    walk(&shape, [&strides], [0], start, chunk.len(), |i, [o]| {
                        let v = src[o as usize];
                        chunk[i - start] = if mean { T::from_f64(v.to_f64() * scale) } else { v };
                    });
                });
            });
        } else {
            let src: Vec<f64> = crate::with_element!(ddt, T => k.inputs[0].slice::<T>().iter().map(|v| v.to_f64()).collect());
            crate::with_element!(dtype, T => {
                for_chunks_mut(out.slice_mut::<T>(), 1, |start, chunk| {
                    walk(&shape, [&strides], [0], start, chunk.len(), |i, [o]| {
                        chunk[i - start] = T::from_f64(src[o as usize] * scale);
                    });
                });
            });
        }
        Ok(())
    }))
}

/// `_mxrt_scatter_axis(v, idx, like)` (`scatter`) and `_mxrt_gather_axis(v, idx)`: along
/// `axis` (absent: the last; None: the flattened array), positions given by `idx`:
/// scatter adds `v[.., j, ..]` at `out[.., idx[.., j, ..], ..]` in zeros shaped like `like`;
/// gather reads `out[.., j, ..] = v[.., idx[.., j, ..], ..]`. Each is the other's gradient.
fn along_axis(call: &Call<'_>, scatter: bool) -> Result<Plan> {
    let ins = inputs(call, if scatter { 3 } else { 2 })?;
    let (v, idx) = (&ins[0], &ins[1]);
    // the full array: scatter's result, gather's source
    let full = if scatter { &ins[2] } else { &ins[0] };
    let axis = match call.params.raw("axis").map(str::trim) {
        None => Some(-1),
        Some("None") => None,
        Some(a) => Some(param::int(a).ok_or_else(|| {
            Error::invalid(format!("operator {}: axis must be an integer or None, got '{a}'", call.name))
        })?),
    };
    let (fshape, ishape) = match axis {
        None => (vec![full.size()], vec![idx.size()]),
        Some(_) => (dims(&full.shape), dims(&idx.shape)),
    };
    let ax = match axis {
        None => 0,
        Some(a) => norm_axis(call, a, fshape.len())?,
    };
    let fits = fshape.len() == ishape.len()
        && (0..fshape.len()).all(|d| if d == ax { ishape[d] <= fshape[d] } else { ishape[d] == fshape[d] });
    if !fits || (scatter && v.shape != idx.shape) {
        return Err(Error::invalid(format!(
            "operator {}: indices of shape {:?} do not fit an array of shape {:?} along axis {ax}",
            call.name,
            &idx.shape[..],
            &full.shape[..]
        )));
    }
    if scatter && v.dtype != full.dtype {
        return Err(Error::invalid(format!(
            "operator {}: values are {}, the result {}",
            call.name,
            v.dtype.name(),
            full.dtype.name()
        )));
    }
    let out = if scatter { full.clone() } else { TensorDesc::new(&idx.shape, v.dtype) };
    let (dtype, idt) = (v.dtype, idx.dtype);
    let mut mask = vec![false; fshape.len()];
    mask[ax] = true;
    let len = fshape[ax];
    Ok(Plan::new(vec![out], move |k| {
        let (ks, fst, _, frs) = split_axes(&fshape, &mask);
        let (_, ist, _, irs) = split_axes(&ishape, &mask);
        let (fa, ia) = (frs[0], irs[0]);
        let n = ishape[ax];
        let lines: usize = ks.iter().product();
        let index: Vec<i64> = crate::with_element!(idt, I => k.inputs[1].slice::<I>().iter().map(|v| v.to_f64() as i64).collect());
        if let Some(bad) = index.iter().find(|&&i| i < 0 || i as usize >= len) {
            return Err(Error::invalid(format!("index {bad} is out of range for an axis of {len}")));
        }
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let out = k.outputs[0].slice_mut::<T>();
            if scatter {
                out.fill(T::zero());
            }
            walk(&ks, [&fst, &ist], [0, 0], 0, lines, |_, [fb, ib]| {
                for j in 0..n {
                    let at = (ib + j as isize * ia) as usize;
                    let f = (fb + index[at] as isize * fa) as usize;
                    if scatter {
                        out[f] = T::from_f64(out[f].to_f64() + src[at].to_f64());
                    } else {
                        out[at] = src[f];
                    }
                }
            });
        });
        Ok(())
    }))
}
