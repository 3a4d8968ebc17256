//! Shape manipulation. Most ops here are a gather with the right strides (transpose, swapaxes,
//! flip, slicing with steps, broadcast_to, tile, repeat); reshapes are copies under a new shape;
//! concat, stack and split copy blocks.
//!
//! Gradients: a reshape's is the head gradient reshaped like the input; a permutation's the
//! inverse permutation; a broadcast's a sum back to the input's shape; concat and split are each
//! other's; the strided views (slices, tiles, repeats, diagonals) scatter the head gradient back
//! through the same view into zeros shaped like the input (`_mxrt_<op>_grad`, whose gradient is
//! the view again).

use crate::ndarray::format::StorageType;
use crate::operator::stype::{self, StorageRule};
use super::{Entries, axis as norm_axis, dims, inputs};
use crate::error::{Error, Result};
use crate::ndarray::shape::reshape_codes;
use crate::operator::def::{
    GradCtx, InferShapesFn, ParamList, PartialShape, ShapeRule, Signature, Val, param_flag,
    param_int,
};
use crate::operator::kernel::Element;
use crate::operator::kernel::strided::{broadcast_shape, contiguous_strides, gather, walk};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

/// A plan whose output `out_shape` reads input 0 at `base + Σ index·strides`.
pub fn gather_plan(x: &TensorDesc, out_shape: Vec<i64>, base: isize, strides: Vec<isize>) -> Plan {
    let dtype = x.dtype;
    let d = dims(&out_shape);
    Plan::new(vec![TensorDesc::new(&out_shape, dtype)], move |k| {
        let (xin, out) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => gather(xin.slice::<T>(), base, &strides, &d, out.slice_mut::<T>()));
        Ok(())
    })
}

/// A copy of input 0 under `shape` (same element count).
pub fn copy_plan(x: &TensorDesc, shape: Vec<i64>) -> Plan {
    let dtype = x.dtype;
    Plan::new(vec![TensorDesc::new(&shape, dtype)], move |k| {
        let (xin, out) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => out.slice_mut::<T>().copy_from_slice(xin.slice::<T>()));
        Ok(())
    })
}

fn own_strides(shape: &[i64]) -> Vec<isize> {
    contiguous_strides(&dims(shape))
}

fn reshape(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let p = call.params;
    let shape = p.or("shape", param::shape, "a shape", vec![])?;
    let reverse = p.or("reverse", param::boolean, "a boolean", false)?;
    let target = p.or("target_shape", param::shape, "a shape", vec![])?;
    p.or("keep_highest", param::boolean, "a boolean", false)?;
    let new = if !shape.is_empty() {
        reshape_codes(&x.shape, &shape, reverse)
            .map_err(|e| Error::invalid(format!("operator {}: {e}", call.name)))?
            .to_vec()
    } else if !target.is_empty() {
        target
    } else {
        return Err(Error::invalid(format!(
            "operator {}: shape is required",
            call.name
        )));
    };
    if new.iter().product::<i64>() != x.size() as i64 {
        return Err(Error::invalid(format!(
            "operator {}: cannot reshape {:?} ({} elements) to {new:?}",
            call.name,
            &x.shape[..],
            x.size()
        )));
    }
    Ok(copy_plan(x, new))
}

fn flatten(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let first = x.shape.first().copied().unwrap_or(1);
    let rest: i64 = x.shape.iter().skip(1).product();
    Ok(copy_plan(x, vec![first, rest]))
}

fn expand_dims(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let a = call.params.required("axis", param::int, "an integer")?;
    let nd = x.shape.len() as i64;
    let at = if a < 0 { a + nd + 1 } else { a };
    if at < 0 || at > nd {
        return Err(Error::invalid(format!(
            "operator {}: axis {a} is out of range for a {nd}-dimensional array",
            call.name
        )));
    }
    let mut s = x.shape.to_vec();
    s.insert(at as usize, 1);
    Ok(copy_plan(x, s))
}

fn squeeze(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let axes = call
        .params
        .optional("axis", param::shape, "an axis or a tuple of axes")?;
    let nd = x.shape.len();
    let mut drop = vec![false; nd];
    match axes {
        None => {
            for (d, &v) in drop.iter_mut().zip(&x.shape) {
                *d = v == 1;
            }
        }
        Some(axes) => {
            for a in axes {
                let a = norm_axis(call, a, nd)?;
                if x.shape[a] != 1 {
                    return Err(Error::invalid(format!(
                        "operator {}: cannot squeeze axis {a} of size {}",
                        call.name, x.shape[a]
                    )));
                }
                drop[a] = true;
            }
        }
    }
    let mut s: Vec<i64> = x
        .shape
        .iter()
        .zip(&drop)
        .filter(|(_, d)| !**d)
        .map(|(v, _)| *v)
        .collect();
    if s.is_empty() && !crate::ndarray::np_shape::current().is_on() {
        s.push(1);
    }
    Ok(copy_plan(x, s))
}

fn transpose(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let nd = x.shape.len();
    let axes = call
        .params
        .or("axes", param::shape, "a tuple of axes", vec![])?;
    let perm: Vec<usize> = if axes.is_empty() {
        (0..nd).rev().collect()
    } else {
        if axes.len() != nd {
            return Err(Error::invalid(format!(
                "operator {}: axes {axes:?} do not match a {nd}-dimensional array",
                call.name
            )));
        }
        let p = axes
            .iter()
            .map(|&a| norm_axis(call, a, nd))
            .collect::<Result<Vec<_>>>()?;
        let mut seen = vec![false; nd];
        for &a in &p {
            if std::mem::replace(&mut seen[a], true) {
                return Err(Error::invalid(format!(
                    "operator {}: axes {axes:?} repeat an axis",
                    call.name
                )));
            }
        }
        p
    };
    let st = own_strides(&x.shape);
    Ok(gather_plan(
        x,
        perm.iter().map(|&a| x.shape[a]).collect(),
        0,
        perm.iter().map(|&a| st[a]).collect(),
    ))
}

fn swapaxes(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let nd = x.shape.len();
    let a = norm_axis(
        call,
        call.params.or("dim1", param::int, "an integer", 0)?,
        nd,
    )?;
    let b = norm_axis(
        call,
        call.params.or("dim2", param::int, "an integer", 0)?,
        nd,
    )?;
    let mut perm: Vec<usize> = (0..nd).collect();
    perm.swap(a, b);
    let st = own_strides(&x.shape);
    Ok(gather_plan(
        x,
        perm.iter().map(|&i| x.shape[i]).collect(),
        0,
        perm.iter().map(|&i| st[i]).collect(),
    ))
}

fn flip(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let nd = x.shape.len();
    let axes = call
        .params
        .required("axis", param::shape, "a tuple of axes")?;
    let mut st = own_strides(&x.shape);
    let mut base = 0isize;
    for a in axes {
        let a = norm_axis(call, a, nd)?;
        if x.shape[a] > 0 {
            base += (x.shape[a] - 1) as isize * st[a];
        }
        st[a] = -st[a];
    }
    Ok(gather_plan(x, x.shape.to_vec(), base, st))
}

/// Python-style begin/end/step for one axis of length `n`: `(start, length)` of the result.
pub fn slice_range(
    name: &str,
    n: i64,
    begin: Option<i64>,
    end: Option<i64>,
    step: i64,
) -> Result<(i64, i64)> {
    if step == 0 {
        return Err(Error::invalid(format!(
            "operator {name}: slice step cannot be 0"
        )));
    }
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let (start, stop) = if step > 0 {
        (
            begin.map(norm).unwrap_or(0).clamp(0, n),
            end.map(norm).unwrap_or(n).clamp(0, n),
        )
    } else {
        (
            begin.map(norm).unwrap_or(n - 1).clamp(-1, n - 1),
            end.map(norm).unwrap_or(-1).clamp(-1, n - 1),
        )
    };
    let len = if step > 0 {
        ((stop - start).max(0) + step - 1) / step
    } else {
        ((start - stop).max(0) + (-step) - 1) / (-step)
    };
    Ok((start, len))
}

/// Strides and base of `x[begin:end:step]` per axis (the remaining axes whole).
pub fn slice_view(
    call: &Call<'_>,
    shape: &[i64],
    begin: &[Option<i64>],
    end: &[Option<i64>],
    step: &[Option<i64>],
) -> Result<(Vec<i64>, isize, Vec<isize>)> {
    if begin.len() != end.len()
        || begin.len() > shape.len()
        || (!step.is_empty() && step.len() != begin.len())
    {
        return Err(Error::invalid(format!(
            "operator {}: begin {begin:?}, end {end:?} and step {step:?} do not fit shape {shape:?}",
            call.name
        )));
    }
    let st = own_strides(shape);
    let mut out = shape.to_vec();
    let mut strides = st.clone();
    let mut base = 0isize;
    for i in 0..begin.len() {
        let s = step.get(i).copied().flatten().unwrap_or(1);
        let (start, len) = slice_range(call.name, shape[i], begin[i], end[i], s)?;
        out[i] = len;
        if len > 0 {
            base += start as isize * st[i];
        }
        strides[i] = st[i] * s as isize;
    }
    Ok((out, base, strides))
}

fn begin_end_step(
    call: &Call<'_>,
) -> Result<(Vec<Option<i64>>, Vec<Option<i64>>, Vec<Option<i64>>)> {
    let p = call.params;
    Ok((
        p.required("begin", param::optional_ints, "a tuple of indices")?,
        p.required("end", param::optional_ints, "a tuple of indices")?,
        p.or("step", param::optional_ints, "a tuple of steps", vec![])?,
    ))
}

fn slice(call: &Call<'_>, xs: &[TensorDesc]) -> Result<View> {
    let x = &arrays(call, xs, 1)?[0];
    let (b, e, s) = begin_end_step(call)?;
    let (out, base, strides) = slice_view(call, &x.shape, &b, &e, &s)?;
    Ok(View::new(out, base, strides))
}

fn slice_axis(call: &Call<'_>, xs: &[TensorDesc]) -> Result<View> {
    let x = &arrays(call, xs, 1)?[0];
    let p = call.params;
    let a = norm_axis(
        call,
        p.required("axis", param::int, "an integer")?,
        x.shape.len(),
    )?;
    let begin = p.required("begin", param::int, "an integer")?;
    let end = p.optional("end", param::int, "an integer")?;
    let n = x.shape[a];
    let norm = |v: i64| if v < 0 { v + n } else { v };
    let (b, e) = (norm(begin), end.map(norm).unwrap_or(n));
    if b < 0 || e > n || b > e {
        return Err(Error::invalid(format!(
            "operator {}: slice [{begin}, {end:?}) is out of range for axis {a} of size {n}",
            call.name
        )));
    }
    let mut bs = vec![None; a + 1];
    let mut es = vec![None; a + 1];
    bs[a] = Some(b);
    es[a] = Some(e);
    let (out, base, strides) = slice_view(call, &x.shape, &bs, &es, &[])?;
    Ok(View::new(out, base, strides))
}

fn slice_like(call: &Call<'_>, xs: &[TensorDesc]) -> Result<View> {
    let ins = arrays(call, xs, 2)?;
    let (x, like) = (&ins[0], &ins[1]);
    let axes = call
        .params
        .or("axes", param::shape, "a tuple of axes", vec![])?;
    let nd = x.shape.len();
    let axes: Vec<usize> = if axes.is_empty() {
        if like.shape.len() != nd {
            return Err(Error::invalid(format!(
                "operator {}: without axes, data ({nd} dimensions) and shape_like ({}) must have the same number of dimensions",
                call.name,
                like.shape.len()
            )));
        }
        (0..nd).collect()
    } else {
        axes.iter()
            .map(|&a| norm_axis(call, a, nd))
            .collect::<Result<_>>()?
    };
    let mut end = vec![None; nd];
    for a in axes {
        let want = *like.shape.get(a).ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: shape_like has no axis {a}",
                call.name
            ))
        })?;
        if want > x.shape[a] {
            return Err(Error::invalid(format!(
                "operator {}: axis {a} of shape_like ({want}) is larger than the data's ({})",
                call.name, x.shape[a]
            )));
        }
        end[a] = Some(want);
    }
    let (out, base, strides) = slice_view(call, &x.shape, &vec![Some(0); nd], &end, &[])?;
    Ok(View::new(out, base, strides))
}

fn broadcast_to_shape(call: &Call<'_>, x: &TensorDesc, target: &[i64]) -> Result<Plan> {
    let target: Vec<i64> = if target.len() == x.shape.len() {
        target
            .iter()
            .zip(&x.shape)
            .map(|(&t, &s)| if t == 0 { s } else { t })
            .collect()
    } else {
        target.to_vec()
    };
    match broadcast_shape(&x.shape, &target) {
        Some(s) if s == target => {}
        _ => {
            return Err(Error::invalid(format!(
                "operator {}: cannot broadcast shape {:?} to {target:?}",
                call.name,
                &x.shape[..]
            )));
        }
    }
    let strides = crate::operator::kernel::strided::broadcast_strides(&x.shape, &target);
    Ok(gather_plan(x, target, 0, strides))
}

fn broadcast_to(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let target = call.params.or("shape", param::shape, "a shape", vec![])?;
    if target.len() != x.shape.len() {
        return Err(Error::invalid(format!(
            "operator {}: shape {:?} cannot be broadcast to {target:?} (the number of dimensions must match)",
            call.name,
            &x.shape[..]
        )));
    }
    broadcast_to_shape(call, x, &target)
}

fn broadcast_like(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (x, like) = (&ins[0], &ins[1]);
    let la = call
        .params
        .optional("lhs_axes", param::shape, "a tuple of axes")?;
    let ra = call
        .params
        .optional("rhs_axes", param::shape, "a tuple of axes")?;
    let target = match (la, ra) {
        (Some(la), Some(ra)) => {
            if la.len() != ra.len() {
                return Err(Error::invalid(format!(
                    "operator {}: lhs_axes and rhs_axes differ in length",
                    call.name
                )));
            }
            if la.is_empty() {
                return Err(Error::invalid(format!(
                    "operator {}: lhs_axes and rhs_axes must not be empty",
                    call.name
                )));
            }
            let mut t = x.shape.to_vec();
            for (l, r) in la.iter().zip(&ra) {
                let l = norm_axis(call, *l, x.shape.len())?;
                let r = norm_axis(call, *r, like.shape.len())?;
                t[l] = like.shape[r];
            }
            t
        }
        _ => like.shape.to_vec(),
    };
    broadcast_to_shape(call, x, &target)
}

fn broadcast_axis(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let axes = call
        .params
        .or("axis", param::shape, "a tuple of axes", vec![])?;
    let sizes = call
        .params
        .or("size", param::shape, "a tuple of sizes", vec![])?;
    if axes.len() != sizes.len() {
        return Err(Error::invalid(format!(
            "operator {}: axis and size differ in length",
            call.name
        )));
    }
    let mut t = x.shape.to_vec();
    for (a, s) in axes.iter().zip(&sizes) {
        let a = norm_axis(call, *a, x.shape.len())?;
        if x.shape[a] != 1 {
            return Err(Error::invalid(format!(
                "operator {}: axis {a} has size {}, only size-1 axes broadcast",
                call.name, x.shape[a]
            )));
        }
        t[a] = *s;
    }
    broadcast_to_shape(call, x, &t)
}

fn tile(call: &Call<'_>, xs: &[TensorDesc]) -> Result<View> {
    let x = &arrays(call, xs, 1)?[0];
    let reps = call
        .params
        .required("reps", param::shape, "a tuple of repetitions")?;
    let nd = x.shape.len().max(reps.len());
    let pad = |v: &[i64]| -> Vec<i64> {
        let mut o = vec![1; nd - v.len()];
        o.extend_from_slice(v);
        o
    };
    let (shape, reps) = (pad(&x.shape), pad(&reps));
    if reps.iter().any(|&r| r < 0) {
        return Err(Error::invalid(format!(
            "operator {}: reps must not be negative",
            call.name
        )));
    }
    // view the input as (1, d0, 1, d1, ...) broadcast to (r0, d0, r1, d1, ...)
    let st = own_strides(&shape);
    let mut view_shape = vec![];
    let mut strides = vec![];
    for i in 0..nd {
        view_shape.push(reps[i]);
        strides.push(0);
        view_shape.push(shape[i]);
        strides.push(st[i]);
    }
    let out: Vec<i64> = (0..nd).map(|i| reps[i] * shape[i]).collect();
    Ok(View { iter: view_shape, out, base: 0, strides })
}

fn repeat(call: &Call<'_>, xs: &[TensorDesc]) -> Result<View> {
    let x = &arrays(call, xs, 1)?[0];
    let r = call.params.required("repeats", param::int, "an integer")?;
    let axis = call.params.optional("axis", param::int, "an integer")?;
    if r < 0 {
        return Err(Error::invalid(format!(
            "operator {}: repeats must not be negative",
            call.name
        )));
    }
    let (shape, a) = match axis {
        None => (vec![x.size() as i64], 0),
        Some(a) => (x.shape.to_vec(), norm_axis(call, a, x.shape.len())?),
    };
    // view as (..., d_a, r, ...) with stride 0 on r
    let st = own_strides(&shape);
    let mut view_shape = shape.clone();
    view_shape.insert(a + 1, r);
    let mut strides = st.clone();
    strides.insert(a + 1, 0);
    let mut out = shape.clone();
    out[a] *= r;
    Ok(View { iter: view_shape, out, base: 0, strides })
}

/// Concat along `axis`: each input contributes a block of its axis length per outer index.
fn concat_plan(call: &Call<'_>, axis: i64, expand: bool) -> Result<Plan> {
    let ins = call.inputs;
    if ins.is_empty() {
        return Err(Error::invalid(format!("operator {}: no inputs", call.name)));
    }
    let first = &ins[0];
    let nd = first.shape.len() + usize::from(expand);
    let a = norm_axis(call, axis, nd)?;
    let shapes: Vec<Vec<i64>> = ins
        .iter()
        .map(|d| {
            let mut s = d.shape.to_vec();
            if expand {
                s.insert(a, 1);
            }
            s
        })
        .collect();
    let mut out = shapes[0].clone();
    out[a] = 0;
    for (i, (s, d)) in shapes.iter().zip(ins).enumerate() {
        let same = s.len() == nd && (0..nd).all(|j| j == a || s[j] == shapes[0][j]);
        if !same || d.dtype != first.dtype {
            return Err(Error::invalid(format!(
                "operator {}: input {i} has shape {:?} ({}), incompatible with input 0's {:?} ({}) along axis {a}",
                call.name,
                &d.shape[..],
                d.dtype.name(),
                &first.shape[..],
                first.dtype.name()
            )));
        }
        out[a] += s[a];
    }
    let outer: usize = out[..a].iter().map(|&d| d as usize).product();
    let inner: usize = out[a + 1..].iter().map(|&d| d as usize).product();
    let blocks: Vec<usize> = shapes.iter().map(|s| s[a] as usize * inner).collect();
    let row = out[a] as usize * inner;
    let dtype = first.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let (xs, o) = (k.inputs, &mut k.outputs[0]);
        crate::with_element!(dtype, T => {
            let o = o.slice_mut::<T>();
            let mut at = 0;
            for (x, &b) in xs.iter().zip(&blocks) {
                let src = x.slice::<T>();
                for r in 0..outer {
                    o[r * row + at..r * row + at + b].copy_from_slice(&src[r * b..(r + 1) * b]);
                }
                at += b;
            }
        });
        Ok(())
    }))
}

fn concat(call: &Call<'_>) -> Result<Plan> {
    call.params.optional("num_args", param::int, "an integer")?;
    let dim = call.params.or("dim", param::int, "an integer", 1)?;
    concat_plan(call, dim, false)
}

fn stack(call: &Call<'_>) -> Result<Plan> {
    call.params.optional("num_args", param::int, "an integer")?;
    let axis = call.params.or("axis", param::int, "an integer", 0)?;
    concat_plan(call, axis, true)
}

/// Split along `axis` at `bounds` (section starts plus the end); squeezes the axis if asked.
fn split_plan(
    call: &Call<'_>,
    x: &TensorDesc,
    axis: i64,
    bounds: Vec<usize>,
    squeeze: bool,
) -> Result<Plan> {
    let a = norm_axis(call, axis, x.shape.len())?;
    let outer: usize = x.shape[..a].iter().map(|&d| d as usize).product();
    let inner: usize = x.shape[a + 1..].iter().map(|&d| d as usize).product();
    let row = x.shape[a] as usize * inner;
    let mut outputs = vec![];
    for w in bounds.windows(2) {
        let mut s = x.shape.to_vec();
        s[a] = (w[1] - w[0]) as i64;
        if squeeze {
            if s[a] != 1 {
                return Err(Error::invalid(format!(
                    "operator {}: squeeze_axis needs sections of size 1, got {}",
                    call.name, s[a]
                )));
            }
            s.remove(a);
        }
        outputs.push(TensorDesc::new(&s, x.dtype));
    }
    let dtype = x.dtype;
    Ok(Plan::new(outputs, move |k| {
        let (xin, outs) = (&k.inputs[0], &mut *k.outputs);
        crate::with_element!(dtype, T => {
            let src = xin.slice::<T>();
            for (o, w) in outs.iter_mut().zip(bounds.windows(2)) {
                let b = (w[1] - w[0]) * inner;
                let o = o.slice_mut::<T>();
                for r in 0..outer {
                    o[r * b..(r + 1) * b].copy_from_slice(&src[r * row + w[0] * inner..r * row + w[0] * inner + b]);
                }
            }
        });
        Ok(())
    }))
}

fn split(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let p = call.params;
    let n = p.required("num_outputs", param::int, "an integer")?;
    let axis = p.or("axis", param::int, "an integer", 1)?;
    let squeeze = p.or("squeeze_axis", param::boolean, "a boolean", false)?;
    let a = norm_axis(call, axis, x.shape.len())?;
    let len = x.shape[a];
    if n <= 0 || len % n != 0 {
        return Err(Error::invalid(format!(
            "operator {}: axis {a} of size {len} cannot be split into {n} equal parts",
            call.name
        )));
    }
    let step = (len / n) as usize;
    split_plan(
        call,
        x,
        axis,
        (0..=n as usize).map(|i| i * step).collect(),
        squeeze,
    )
}

fn split_v2(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let p = call.params;
    let indices = p.required("indices", param::shape, "a tuple of indices")?;
    let axis = p.or("axis", param::int, "an integer", 1)?;
    let squeeze = p.or("squeeze_axis", param::boolean, "a boolean", false)?;
    let sections = p.or("sections", param::int, "an integer", 0)?;
    let a = norm_axis(call, axis, x.shape.len())?;
    let len = x.shape[a] as usize;
    let bounds: Vec<usize> = if sections > 0 {
        if len % sections as usize != 0 {
            return Err(Error::invalid(format!(
                "operator {}: axis of size {len} cannot be split into {sections} equal sections",
                call.name
            )));
        }
        (0..=sections as usize)
            .map(|i| i * len / sections as usize)
            .collect()
    } else {
        let mut b: Vec<usize> = indices
            .iter()
            .map(|&i| (i.max(0) as usize).min(len))
            .collect();
        if b.first() != Some(&0) {
            b.insert(0, 0);
        }
        b.push(len);
        if b.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::invalid(format!(
                "operator {}: indices {indices:?} are not sorted",
                call.name
            )));
        }
        b
    };
    split_plan(call, x, axis, bounds, squeeze)
}

/// `SliceChannel`'s outputs from the data's known dimensions, and the data back from any
/// output's (MXNet's SliceChannelProp::InferShape): the split axis is `num_outputs` times an
/// output's, or `num_outputs` itself where `squeeze_axis` dropped it.
fn slice_channel_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins: Vec<PartialShape> = vec![None; ins.len()];
    let Some(Some(x)) = ins.first() else {
        return Ok((for_ins, Vec::new()));
    };
    let n = param_int(p, "num_outputs", 1)?.max(1);
    let squeeze = param_flag(p, "squeeze_axis", false)?;
    let rank = x.len() as i64;
    let axis = param_int(p, "axis", 1)?;
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) {
        return Ok((for_ins, Vec::new()));
    }
    let a = a as usize;
    if x[a] > 0 && x[a] % n != 0 {
        return Err(Error::invalid(format!(
            "You are trying to split the {a}-th axis of input tensor with shape {} into \
             num_outputs={n} evenly sized chunks, but this is not possible because {n} does \
             not evenly divide {}",
            fmt_shape(x),
            x[a]
        )));
    }
    let mut y = x.clone();
    y[a] = if x[a] > 0 { x[a] / n } else { 0 };
    let dropped = squeeze && (y[a] == 1 || x[a] <= 0);
    if dropped {
        y.remove(a);
    }
    // every output's known dimensions (they all have one shape)
    let mut back = vec![0; x.len()];
    for o in outs.iter().flatten() {
        let b = if dropped && o.len() + 1 == x.len() {
            let mut b = o.clone();
            b.insert(a, n);
            b
        } else if o.len() == x.len() {
            let mut b = o.clone();
            b[a] = if o[a] > 0 { o[a].saturating_mul(n) } else { 0 };
            b
        } else {
            continue;
        };
        for (k, &d) in b.iter().enumerate() {
            if d > 0 && back[k] <= 0 {
                back[k] = d;
            }
        }
    }
    if back.iter().any(|&d| d > 0) {
        for_ins[0] = Some(back);
    }
    Ok((for_ins, vec![Some(y); outs.len()]))
}

fn identity_like_rhs(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (x, like) = (&ins[0], &ins[1]);
    if x.dtype != like.dtype {
        return Err(Error::invalid(format!(
            "operator {}: lhs is {} but rhs is {} (one dtype for both)",
            call.name,
            x.dtype.name(),
            like.dtype.name()
        )));
    }
    if x.shape != like.shape {
        return Err(Error::invalid(format!(
            "operator {}: Incompatible attr in node at 1-th input: expected {}, got {}",
            call.name,
            fmt_shape(&x.shape),
            fmt_shape(&like.shape)
        )));
    }
    Ok(copy_plan(x, x.shape.to_vec()))
}

fn fmt_shape(s: &[i64]) -> String {
    let d: Vec<String> = s.iter().map(|v| v.to_string()).collect();
    format!("[{}]", d.join(","))
}

fn reshape_like(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (x, like) = (&ins[0], &ins[1]);
    let p = call.params;
    let lb = p.optional("lhs_begin", param::int, "an integer")?;
    let le = p.optional("lhs_end", param::int, "an integer")?;
    let rb = p.optional("rhs_begin", param::int, "an integer")?;
    let re = p.optional("rhs_end", param::int, "an integer")?;
    let range = |b: Option<i64>, e: Option<i64>, n: usize| {
        let n = n as i64;
        let norm = |v: i64| if v < 0 { v + n } else { v };
        (
            b.map(norm).unwrap_or(0).clamp(0, n) as usize,
            e.map(norm).unwrap_or(n).clamp(0, n) as usize,
        )
    };
    let (l0, l1) = range(lb, le, x.shape.len());
    let (r0, r1) = range(rb, re, like.shape.len());
    let mut new = x.shape[..l0].to_vec();
    new.extend_from_slice(&like.shape[r0..r1]);
    new.extend_from_slice(&x.shape[l1..]);
    if new.iter().product::<i64>() != x.size() as i64 {
        return Err(Error::invalid(format!(
            "operator {}: cannot reshape {:?} to {new:?}",
            call.name,
            &x.shape[..]
        )));
    }
    Ok(copy_plan(x, new))
}

/// A gather whose iteration shape `iter` (with `strides` into the input) is finer than the
/// output's shape `out_shape` (same element count, both row-major).
fn gather_plan_as(
    x: &TensorDesc,
    iter: Vec<i64>,
    out_shape: Vec<i64>,
    base: isize,
    strides: Vec<isize>,
) -> Plan {
    let dtype = x.dtype;
    let d = dims(&iter);
    Plan::new(vec![TensorDesc::new(&out_shape, dtype)], move |k| {
        let (xin, out) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => gather(xin.slice::<T>(), base, &strides, &d, out.slice_mut::<T>()));
        Ok(())
    })
}

/// The 4-D (N, C, H, W) input and the block size of depth_to_space/space_to_depth.
fn block_input<'a>(call: &'a Call<'_>) -> Result<(&'a TensorDesc, i64, [i64; 4])> {
    let x = &inputs(call, 1)?[0];
    let b = call.params.required("block_size", param::int, "an integer")?;
    if x.shape.len() != 4 {
        return Err(Error::invalid(format!(
            "operator {}: the input must be 4-dimensional (N, C, H, W), got shape {:?}",
            call.name,
            &x.shape[..]
        )));
    }
    if b <= 0 {
        return Err(Error::invalid(format!(
            "operator {}: block_size must be positive, got {b}",
            call.name
        )));
    }
    Ok((x, b, [x.shape[0], x.shape[1], x.shape[2], x.shape[3]]))
}

/// (N, C, H, W) -> (N, C/b², H·b, W·b): out[n, c, h·b+i, w·b+j] = in[n, (i·b+j)·C/b² + c, h, w].
fn depth_to_space(call: &Call<'_>) -> Result<Plan> {
    let (x, b, [n, c, h, w]) = block_input(call)?;
    if c % (b * b) != 0 {
        return Err(Error::invalid(format!(
            "operator {}: the channels ({c}) must be a multiple of block_size² ({})",
            call.name,
            b * b
        )));
    }
    let c2 = c / (b * b);
    let st = own_strides(&x.shape);
    let (bs, c2s) = (b as isize, c2 as isize);
    Ok(gather_plan_as(
        x,
        vec![n, c2, h, b, w, b],
        vec![n, c2, h * b, w * b],
        0,
        vec![st[0], st[1], st[2], bs * c2s * st[1], st[3], c2s * st[1]],
    ))
}

/// (N, C, H, W) -> (N, C·b², H/b, W/b): out[n, (i·b+j)·C + c, h, w] = in[n, c, h·b+i, w·b+j].
fn space_to_depth(call: &Call<'_>) -> Result<Plan> {
    let (x, b, [n, c, h, w]) = block_input(call)?;
    if h % b != 0 || w % b != 0 {
        return Err(Error::invalid(format!(
            "operator {}: height ({h}) and width ({w}) must be multiples of block_size ({b})",
            call.name
        )));
    }
    let st = own_strides(&x.shape);
    let bs = b as isize;
    Ok(gather_plan_as(
        x,
        vec![n, b, b, c, h / b, w / b],
        vec![n, c * b * b, h / b, w / b],
        0,
        vec![st[0], st[2], st[3], st[1], bs * st[2], bs * st[3]],
    ))
}

/// diag's parameters: `(k, axis1, axis2)`.
fn diag_params(call: &Call<'_>) -> Result<(i64, i64, i64)> {
    let p = call.params;
    Ok((
        p.or("k", param::int, "an integer", 0)?,
        p.or("axis1", param::int, "an integer", 0)?,
        p.or("axis2", param::int, "an integer", 1)?,
    ))
}

/// For a 1-D input of `len` elements: the side of diag's square matrix and the position in it
/// of the input's first element (the matrix row-major); the input's elements follow at steps of
/// `side + 1`.
fn diag_square(len: i64, k: i64) -> (i64, isize) {
    let m = len + k.abs();
    let (row0, col0) = ((-k).max(0), k.max(0));
    (m, (row0 * m + col0) as isize)
}

/// The k-th diagonal over (axis1, axis2) of an array of two or more dimensions, as a view: the
/// other axes in order, then the diagonal.
fn diag_view(call: &Call<'_>, x: &TensorDesc, k: i64, a1: i64, a2: i64) -> Result<View> {
    let nd = x.shape.len();
    let (a1, a2) = (norm_axis(call, a1, nd)?, norm_axis(call, a2, nd)?);
    if a1 == a2 {
        return Err(Error::invalid(format!(
            "operator {}: axis1 and axis2 are both {a1}; they must differ",
            call.name
        )));
    }
    let (s1, s2) = (x.shape[a1], x.shape[a2]);
    if k > s2 || k < -s1 {
        return Err(Error::invalid(format!(
            "operator {}: k={k} is out of range for the axes of lengths {s1} and {s2} (it must be \
             between {} and {s2})",
            call.name, -s1
        )));
    }
    let len = if k >= 0 { s1.min(s2 - k) } else { (s1 + k).min(s2) }.max(0);
    let st = own_strides(&x.shape);
    let mut out_shape = Vec::with_capacity(nd - 1);
    let mut strides = Vec::with_capacity(nd - 1);
    for a in 0..nd {
        if a != a1 && a != a2 {
            out_shape.push(x.shape[a]);
            strides.push(st[a]);
        }
    }
    out_shape.push(len);
    strides.push(st[a1] + st[a2]);
    let base = if len == 0 {
        0
    } else if k >= 0 {
        k as isize * st[a2]
    } else {
        (-k) as isize * st[a1]
    };
    Ok(View::new(out_shape, base, strides))
}

/// `diag`: the k-th diagonal of the sub-arrays over (axis1, axis2) as the last axis, or for a
/// 1-D input the square matrix with the input on its k-th diagonal.
fn diag(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let (k, a1, a2) = diag_params(call)?;
    match x.shape.len() {
        0 => Err(Error::invalid(format!(
            "operator {}: the input must have at least one dimension",
            call.name
        ))),
        1 => {
            let (m, at) = diag_square(x.shape[0], k);
            let step = m as usize + 1;
            let dtype = x.dtype;
            Ok(Plan::new(vec![TensorDesc::new(&[m, m], dtype)], move |kc| {
                let (xin, out) = (&kc.inputs[0], &mut kc.outputs[0]);
                crate::with_element!(dtype, T => {
                    let (src, dst) = (xin.slice::<T>(), out.slice_mut::<T>());
                    dst.fill(T::zero());
                    for (i, v) in src.iter().enumerate() {
                        dst[at as usize + i * step] = *v;
                    }
                });
                Ok(())
            }))
        }
        _ => Ok(diag_view(call, x, k, a1, a2)?.gather(x)),
    }
}

/// `_mxrt_diag_grad(dy, x)`: diag's gradient, shaped like `x`: for a 1-D `x` the k-th diagonal
/// of `dy`; otherwise zeros with `dy` on the diagonal. Its own gradient is `diag` again.
fn diag_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (dy, x) = (&ins[0], &ins[1]);
    let (k, a1, a2) = diag_params(call)?;
    if x.shape.len() != 1 {
        return view_grad(call, |c, xs| diag_view(c, &xs[0], k, a1, a2));
    }
    let (m, at) = diag_square(x.shape[0], k);
    if dy.shape[..] != [m, m] {
        return Err(Error::invalid(format!(
            "operator {}: the gradient has shape {:?}, diag's output {:?}",
            call.name,
            &dy.shape[..],
            [m, m]
        )));
    }
    Ok(gather_plan(dy, x.shape.to_vec(), at, vec![m as isize + 1]))
}

/// A strided view of an array: iterating over `iter` (row-major) reads the array at
/// `base + Σ index·strides`; the result has shape `out`, as many elements as `iter`. Slices,
/// tiles, repeats and diagonals are views; their gradients scatter back through the same view.
pub struct View {
    pub iter: Vec<i64>,
    pub out: Vec<i64>,
    pub base: isize,
    pub strides: Vec<isize>,
}

impl View {
    /// A view iterated in its own shape.
    pub fn new(out: Vec<i64>, base: isize, strides: Vec<isize>) -> View {
        View { iter: out.clone(), out, base, strides }
    }

    /// The plan that reads the view of `x`.
    pub fn gather(self, x: &TensorDesc) -> Plan {
        gather_plan_as(x, self.iter, self.out, self.base, self.strides)
    }
}

/// How a view op sees its array inputs (its first input is the one it reads): the view.
pub type ViewFn = fn(&Call<'_>, &[TensorDesc]) -> Result<View>;

/// Checks the count of `xs`, the array inputs of a view op (its own or, in its gradient op,
/// those after the gradient).
fn arrays<'a>(call: &Call<'_>, xs: &'a [TensorDesc], n: usize) -> Result<&'a [TensorDesc]> {
    if xs.len() != n {
        return Err(Error::invalid(format!(
            "operator {} takes {n} input(s), {} given",
            call.name,
            xs.len()
        )));
    }
    Ok(xs)
}

/// A view op's forward: the view of its first input.
fn view_forward(call: &Call<'_>, f: ViewFn) -> Result<Plan> {
    let v = f(call, call.inputs)?;
    Ok(v.gather(&call.inputs[0]))
}

/// A view op's gradient op, `_mxrt_<op>_grad(dy, inputs...)` with the forward's parameters:
/// zeros shaped like the forward's first input, with `dy` added back through the forward's view
/// (an element the view read several times sums its gradients).
fn view_grad(
    call: &Call<'_>,
    f: impl Fn(&Call<'_>, &[TensorDesc]) -> Result<View>,
) -> Result<Plan> {
    let ins = call.inputs;
    if ins.len() < 2 {
        return Err(Error::invalid(format!(
            "operator {} takes the gradient and the forward's inputs, {} input(s) given",
            call.name,
            ins.len()
        )));
    }
    let (dy, x) = (&ins[0], &ins[1]);
    let v = f(call, &ins[1..])?;
    if dy.shape[..] != v.out[..] {
        return Err(Error::invalid(format!(
            "operator {}: the gradient has shape {:?}, the forward's output {:?}",
            call.name,
            &dy.shape[..],
            &v.out[..]
        )));
    }
    let dtype = dy.dtype;
    let iter = dims(&v.iter);
    let (base, strides) = (v.base, v.strides);
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        let (g, out) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => {
            scatter_add(g.slice::<T>(), base, &strides, &iter, out.slice_mut::<T>())
        });
        Ok(())
    }))
}

/// `out = 0`, then `out[base + Σ index·strides] += src[k]` over `src` iterated in `iter`'s
/// shape (summed in f64).
fn scatter_add<T: Element>(
    src: &[T],
    base: isize,
    strides: &[isize],
    iter: &[usize],
    out: &mut [T],
) {
    let mut acc = vec![0f64; out.len()];
    walk(iter, [strides], [base], 0, src.len(), |k, [o]| acc[o as usize] += src[k].to_f64());
    for (o, a) in out.iter_mut().zip(acc) {
        *o = T::from_f64(a);
    }
}

/// The forward's parameters as given, for a gradient op that takes them all.
pub(crate) fn all_params<'a>(g: &GradCtx<'a>) -> Vec<(&'a str, &'a str)> {
    g.params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The forward's parameters among `keys`, as given.
pub(crate) fn some_params<'a>(g: &GradCtx<'a>, keys: &[&str]) -> Vec<(&'a str, &'a str)> {
    g.params
        .iter()
        .filter(|(k, _)| keys.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// The gradient of an op whose output has its input's elements (reshapes): `dy` in `x`'s shape.
fn reshape_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    Ok(vec![Some(g.op("reshape_like", &[g.dy(0), g.x(0)], &[])?)])
}

/// Registers view op `$name` (`$f`: its [`ViewFn`]) and its gradient op `_mxrt_<name>_grad`,
/// each the other's gradient; the forward's inputs after the first (a "like" input) get none.
macro_rules! view_op {
    ($t:ident, $name:literal, $f:expr) => {{
        const GRAD: &str = concat!("_mxrt_", $name, "_grad");
        $t.def(GRAD, &|c: &Call<'_>| view_grad(c, $f)).grad(|g| {
            let p = all_params(g);
            let mut ins = vec![g.dy(0)];
            ins.extend_from_slice(&g.inputs[2..]);
            let dd = g.op($name, &ins, &p)?;
            let mut dx = vec![Some(dd)];
            dx.resize(g.inputs.len(), None);
            Ok(dx)
        });
        $t.def($name, &|c: &Call<'_>| view_forward(c, $f)).grad(|g| {
            let p = all_params(g);
            let mut ins = vec![g.dy(0)];
            ins.extend_from_slice(g.inputs);
            let dx = g.op(GRAD, &ins, &p)?;
            let mut dxs = vec![Some(dx)];
            dxs.resize(g.inputs.len(), None);
            Ok(dxs)
        })
    }};
}

/// The gradient of `SliceChannel`/`_split_v2`: the outputs' gradients joined along the axis
/// (stacked where the outputs dropped it).
fn split_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let axis = g.param_set("axis").unwrap_or("1").to_owned();
    let n = g.ograds.len().to_string();
    let dys = g.ograds.to_vec();
    let dx = if g.flag("squeeze_axis", false) {
        g.op("stack", &dys, &[("num_args", &n), ("axis", &axis)])?
    } else {
        g.op("Concat", &dys, &[("num_args", &n), ("dim", &axis)])?
    };
    Ok(vec![Some(dx)])
}

/// `_mxrt_Concat_grad(dy, x0, x1, ...)`: `dy` split along Concat's axis into pieces shaped like
/// the inputs.
fn concat_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = call.inputs;
    call.params.optional("num_args", param::int, "an integer")?;
    let dim = call.params.or("dim", param::int, "an integer", 1)?;
    let Some((dy, xs)) = ins.split_first() else {
        return Err(Error::invalid(format!("operator {}: no inputs", call.name)));
    };
    let a = norm_axis(call, dim, dy.shape.len())?;
    let mut bounds = vec![0usize];
    for (i, x) in xs.iter().enumerate() {
        let fits = x.shape.len() == dy.shape.len()
            && (0..x.shape.len()).all(|j| j == a || x.shape[j] == dy.shape[j]);
        if !fits {
            return Err(Error::invalid(format!(
                "operator {}: input {i} has shape {:?}, not a part of the gradient's {:?} along \
                 axis {a}",
                call.name,
                &x.shape[..],
                &dy.shape[..]
            )));
        }
        bounds.push(bounds[i] + x.shape[a] as usize);
    }
    if bounds[xs.len()] as i64 != dy.shape[a] {
        return Err(Error::invalid(format!(
            "operator {}: the inputs' lengths along axis {a} do not add up to the gradient's {}",
            call.name, dy.shape[a]
        )));
    }
    split_plan(call, dy, a as i64, bounds, false)
}

pub(crate) fn register(t: &mut Entries) {
    // each is the other's gradient
    t.push(("depth_to_space", &depth_to_space)).grad(|g| {
        let p = some_params(g, &["block_size"]);
        Ok(vec![Some(g.op("space_to_depth", &[g.dy(0)], &p)?)])
    });
    t.push(("space_to_depth", &space_to_depth)).grad(|g| {
        let p = some_params(g, &["block_size"]);
        Ok(vec![Some(g.op("depth_to_space", &[g.dy(0)], &p)?)])
    });
    t.push(("diag", &diag)).grad(|g| {
        let p = all_params(g);
        Ok(vec![Some(g.op("_mxrt_diag_grad", &[g.dy(0), g.x(0)], &p)?)])
    });
    t.def("_mxrt_diag_grad", &diag_grad).grad(|g| {
        let p = all_params(g);
        Ok(vec![Some(g.op("diag", &[g.dy(0)], &p)?), None])
    });
    t.push(("Reshape", &reshape))
        .grad(reshape_grad)
        .shape_rule(ShapeRule::Rule(reshape_input_shape));
    t.push(("Flatten", &flatten)).grad(reshape_grad);
    t.push(("expand_dims", &expand_dims)).grad(reshape_grad);
    t.push(("squeeze", &squeeze)).grad(reshape_grad);
    t.push(("reshape_like", &reshape_like)).grad(|g| {
        let dx = g.op("reshape_like", &[g.dy(0), g.x(0)], &[])?;
        Ok(vec![Some(dx), None])
    });
    t.push(("transpose", &transpose)).grad(|g| {
        // the inverse permutation (the reversal is its own inverse)
        let axes = g.param_set("axes").map(param::shape).unwrap_or(Some(vec![]));
        let axes = axes.ok_or_else(|| Error::invalid("transpose: axes is not a tuple of axes"))?;
        let n = axes.len() as i64;
        let mut inv = vec![0i64; axes.len()];
        for (i, &a) in axes.iter().enumerate() {
            let a = if a < 0 { a + n } else { a };
            if !(0..n).contains(&a) {
                return Err(Error::invalid(format!("transpose: axis {a} is out of range")));
            }
            inv[a as usize] = i as i64;
        }
        let inv = format!("{inv:?}").replace('[', "(").replace(']', ")");
        let p: Vec<(&str, &str)> = if axes.is_empty() { vec![] } else { vec![("axes", &inv)] };
        Ok(vec![Some(g.op("transpose", &[g.dy(0)], &p)?)])
    });
    t.push(("SwapAxis", &swapaxes)).grad(|g| {
        let p = all_params(g);
        Ok(vec![Some(g.op("SwapAxis", &[g.dy(0)], &p)?)])
    });
    t.push(("reverse", &flip)).grad(|g| {
        let p = all_params(g);
        Ok(vec![Some(g.op("reverse", &[g.dy(0)], &p)?)])
    });
    // rows of a csr array are a csr array (without steps), as in MXNet
    view_op!(t, "slice", slice).stype(StorageRule::Custom(|p, ins| {
        let unit_step = stype::param(p, "step")
            .is_none_or(|v| matches!(v.trim(), "()" | "[]" | "(1,)" | "(None,)"));
        if ins.first() == Some(&StorageType::Csr) && unit_step {
            StorageType::Csr
        } else {
            StorageType::Default
        }
    }));
    view_op!(t, "slice_axis", slice_axis);
    view_op!(t, "slice_like", slice_like);
    view_op!(t, "tile", tile);
    view_op!(t, "repeat", repeat);
    // summed back over the broadcast axes; the "like" input gets none
    t.push(("broadcast_to", &broadcast_to))
        .grad(|g| Ok(vec![Some(g.sum_to(g.dy(0), g.x(0))?)]));
    t.push(("broadcast_like", &broadcast_like))
        .grad(|g| Ok(vec![Some(g.sum_to(g.dy(0), g.x(0))?), None]));
    t.push(("broadcast_axis", &broadcast_axis))
        .grad(|g| Ok(vec![Some(g.sum_to(g.dy(0), g.x(0))?)]));
    // `_rnn_param_concat` (Gluon's RNN layers join their weights with it) is Concat with its
    // own graph shape rule
    for (name, rule) in [
        ("Concat", concat_shapes as InferShapesFn),
        ("_rnn_param_concat", rnn_param_concat_shapes),
    ] {
        t.push((name, &concat))
            .grad(|g| {
            let p = some_params(g, &["dim"]);
            let mut ins = vec![g.dy(0)];
            ins.extend_from_slice(g.inputs);
            let parts = g.ops("_mxrt_Concat_grad", &ins, &p)?;
            Ok(parts.into_iter().map(Some).collect())
        })
            .shape_rule(ShapeRule::Rule(rule));
    }
    t.def("_mxrt_Concat_grad", &concat_grad).grad(|g| {
        let dim = g.param_set("dim").unwrap_or("1").to_owned();
        let n = g.ograds.len().to_string();
        let dys = g.ograds.to_vec();
        let dd = g.op("Concat", &dys, &[("num_args", &n), ("dim", &dim)])?;
        let mut dx = vec![Some(dd)];
        dx.resize(g.inputs.len(), None);
        Ok(dx)
    });
    t.push(("stack", &stack)).grad(|g| {
        let axis = g.param_set("axis").unwrap_or("0").to_owned();
        let n = g.inputs.len().to_string();
        let parts = g.ops(
            "SliceChannel",
            &[g.dy(0)],
            &[("num_outputs", &n), ("axis", &axis), ("squeeze_axis", "1")],
        )?;
        Ok(parts.into_iter().map(Some).collect())
    });
    t.push(("SliceChannel", &split))
        .grad(split_grad)
        .signature(|p| {
            let n = param_int(p, "num_outputs", 1)?;
            if n < 1 {
                return Err(Error::invalid(format!("num_outputs must be positive, got {n}")));
            }
            Ok(Signature::simple(&["data"]).with_outputs(n as usize))
        })
        .shape_rule(ShapeRule::Rule(slice_channel_shapes));
    // the lhs unchanged, shaped like the rhs (a shape constraint for graph inference)
    t.push(("_identity_with_attr_like_rhs", &identity_like_rhs))
        .grad(|g| Ok(vec![Some(g.op("_copy", &[g.dy(0)], &[])?), None]))
        .shape_rule(ShapeRule::Same);
    t.push(("_split_v2", &split_v2)).grad(split_grad);
}

/// Concat in graph inference, as MXNet's: every input and the output agree outside the
/// concatenated axis; the output's extent along it is the inputs' sum once every input of known
/// rank has it known (inputs of unknown rank are not counted, as in MXNet).
fn concat_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    concat_shapes_of(p, ins, outs, false)
}

/// `_rnn_param_concat` (MXNet's `RNNParamConcatShape`): an input of no known shape leaves the
/// output unknown, and a single input of unknown extent gets it from the output (Gluon's RNN
/// layers defer their first weights' input width).
fn rnn_param_concat_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    concat_shapes_of(p, ins, outs, true)
}

fn concat_shapes_of(
    p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
    rnn_params: bool,
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let dim = param_int(p, "dim", 1)?;
    let mut common: Option<Vec<i64>> = None;
    let mut size = 0;
    let mut unknown = false;
    let axis_of = |s: &[i64]| -> Result<usize> {
        let n = s.len() as i64;
        let a = if dim < 0 { dim + n } else { dim };
        if a < 0 || a >= n {
            return Err(Error::invalid(format!("dim {dim} is out of range for {n} dimensions")));
        }
        Ok(a as usize)
    };
    let mut unify = |mut s: Vec<i64>, axis: usize| -> Result<()> {
        s[axis] = 0;
        match &mut common {
            None => common = Some(s),
            Some(c) => {
                if c.len() != s.len() {
                    return Err(Error::invalid(format!(
                        "Shape inconsistent, Provided = {c:?}, inferred shape={s:?}"
                    )));
                }
                for (x, y) in c.iter_mut().zip(&s) {
                    if *x == 0 {
                        *x = *y;
                    } else if *y != 0 && x != y {
                        return Err(Error::invalid(format!(
                            "Shape inconsistent, Provided = {c:?}, inferred shape={s:?}"
                        )));
                    }
                }
            }
        }
        Ok(())
    };
    // inputs whose extent along the axis is unknown (an input with no shape at all counts)
    let mut missing = Vec::new();
    for (i, s) in ins.iter().enumerate() {
        let Some(s) = s else {
            if rnn_params {
                missing.push(i);
            }
            continue;
        };
        let axis = axis_of(s)?;
        if s[axis] <= 0 {
            missing.push(i);
        }
        size += s[axis].max(0);
        unify(s.clone(), axis)?;
    }
    unknown |= !missing.is_empty();
    let out_extent = match outs.first().cloned().flatten() {
        Some(s) => {
            let axis = axis_of(&s)?;
            let e = s[axis];
            unify(s, axis)?;
            e
        }
        None => 0,
    };
    let Some(mut shape) = common else {
        return Ok((vec![None; ins.len()], Vec::new()));
    };
    let mut for_ins = vec![Some(shape.clone()); ins.len()];
    // one or two inputs of unknown extent (a bidirectional layer's two input weights): the
    // output's extent less the others', shared equally, as MXNet's RNNParamConcatShape
    if matches!(missing.len(), 1 | 2) && rnn_params && out_extent > size {
        let axis = axis_of(&shape)?;
        let mut s = shape.clone();
        s[axis] = (out_extent - size) / missing.len() as i64;
        for &i in &missing {
            for_ins[i] = Some(s.clone());
        }
    }
    if !unknown {
        let axis = axis_of(&shape)?;
        shape[axis] = size;
        return Ok((for_ins, vec![Some(shape)]));
    }
    Ok((for_ins, Vec::new()))
}

/// Reshape backward in graph inference (MXNet's `ReshapeShape`): data with exactly one unknown
/// dimension gets it from a known output's size (Gluon's RNN layers reshape weights whose input
/// width is deferred).
fn reshape_input_shape(
    _p: &ParamList,
    ins: &[PartialShape],
    outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins = vec![None; ins.len()];
    let (Some(Some(x)), Some(Some(y))) = (ins.first(), outs.first()) else {
        return Ok((for_ins, Vec::new()));
    };
    let unknown: Vec<usize> = (0..x.len()).filter(|&i| x[i] <= 0).collect();
    if y.iter().any(|&d| d <= 0) || unknown.len() != 1 {
        return Ok((for_ins, Vec::new()));
    }
    let known: i64 = x.iter().filter(|&&d| d > 0).product();
    let total: i64 = y.iter().product();
    if known > 0 && total % known == 0 {
        let mut s = x.clone();
        s[unknown[0]] = total / known;
        for_ins[0] = Some(s);
    }
    Ok((for_ins, Vec::new()))
}
