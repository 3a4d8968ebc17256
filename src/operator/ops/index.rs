//! Indexing: slice assignment (`_slice_assign`, `_slice_assign_scalar`, what `x[a:b] = v` runs),
//! `take`, `pick`, `gather_nd`, `one_hot` and `where`.
//!
//! Gradients, as MXNet's: the gathers (`take`, `pick`, `gather_nd`) add the head gradient back
//! where they read (`_mxrt_<op>_grad`, whose gradient is the gather again), their indices get
//! none; `where` routes the head gradient to `x` or `y` by the condition; `one_hot` has a zero
//! gradient; the assignments and `_histogram` have none.

use super::shape::{slice_view, some_params};
use super::{Entries, axis as norm_axis, dims, inputs, same_dtype};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{ParamList, PartialShape, ShapeRule, param_flag, param_int};
use crate::operator::kernel::Element;
use crate::operator::kernel::map::Ptr;
use crate::operator::kernel::strided::{broadcast_strides, walk, zip3};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

/// Copies `src` into `dst` when they are different memory (same dtype and length).
fn copy_through(src: &Tensor, dst: &Tensor) {
    let bytes = src.len() * src.dtype.size();
    let (s, d) = (src.byte_ptr() as *const u8, dst.byte_ptr());
    if s != d.cast_const() && bytes > 0 {
        // SAFETY: both hold `bytes` bytes; the runner gives an elementwise plan either the same
        // memory for both (skipped above) or memory that does not overlap.
        unsafe { std::ptr::copy_nonoverlapping(s, d, bytes) };
    }
}

/// `_slice_assign(lhs, rhs)`: lhs with `lhs[begin:end:step] = rhs`; `_slice_assign_scalar`
/// assigns one value. The output is usually `lhs` itself (`out=lhs`).
fn slice_assign(call: &Call<'_>, scalar: bool) -> Result<Plan> {
    let ins = inputs(call, if scalar { 1 } else { 2 })?;
    let lhs = ins[0].clone();
    let p = call.params;
    let begin = p.required("begin", param::optional_ints, "a tuple of indices")?;
    let end = p.required("end", param::optional_ints, "a tuple of indices")?;
    let step = p.or("step", param::optional_ints, "a tuple of steps", vec![])?;
    let value = if scalar {
        p.or("scalar", param::float, "a number", 0.0)?
    } else {
        0.0
    };
    let (region, base, strides) = slice_view(call, &lhs.shape, &begin, &end, &step)?;
    if !scalar {
        same_dtype(call, 0, 1)?;
        let rhs = &ins[1];
        let fits = rhs.shape[..] == region[..]
            || crate::operator::kernel::strided::broadcast_shape(&rhs.shape, &region).as_deref()
                == Some(&region[..]);
        if !fits {
            return Err(Error::invalid(format!(
                "operator {}: cannot assign shape {:?} to a region of shape {region:?}",
                call.name,
                &rhs.shape[..]
            )));
        }
    }
    let rhs_shape = if scalar {
        vec![]
    } else {
        ins[1].shape.to_vec()
    };
    let dtype = lhs.dtype;
    let d = dims(&region);
    let count: usize = d.iter().product();
    Ok(Plan::new(vec![lhs], move |k| {
        copy_through(&k.inputs[0], &k.outputs[0]);
        let out = Ptr(k.outputs[0].byte_ptr());
        let total = k.outputs[0].len();
        crate::with_element!(dtype, T => {
            let o = Ptr(out.get().cast::<T>());
            if scalar {
                let v = T::from_f64(value);
                walk(&d, [&strides], [base], 0, count, |_, [at]| {
                    assert!((at as usize) < total);
                    // SAFETY: `at` indexes the output (checked); this op owns it.
                    unsafe { *o.get().add(at as usize) = v };
                });
            } else {
                let rhs = k.inputs[1].slice::<T>();
                let rs = broadcast_strides(&rhs_shape, &d.iter().map(|&x| x as i64).collect::<Vec<_>>());
                walk(&d, [&strides, &rs], [base, 0], 0, count, |_, [at, r]| {
                    assert!((at as usize) < total);
                    // SAFETY: as above; `rhs` does not overlap the output (else it is staged).
                    unsafe { *o.get().add(at as usize) = rhs[r as usize] };
                });
            }
        });
        Ok(())
    })
    .elementwise())
}

/// Reads index values as integers, applying `mode` (clip, wrap, raise) for an axis of `n`.
fn index_of(v: f64, n: usize, mode: &str) -> std::result::Result<usize, String> {
    let i = v as i64;
    let n = n as i64;
    match mode {
        "wrap" => Ok(i.rem_euclid(n.max(1)) as usize),
        "raise" => {
            if (0..n).contains(&i) || (-n..0).contains(&i) {
                Ok(i.rem_euclid(n) as usize)
            } else {
                Err(format!(
                    "index {i} is out of bounds for an axis of size {n}"
                ))
            }
        }
        _ => Ok(i.clamp(0, (n - 1).max(0)) as usize),
    }
}

fn mode(call: &Call<'_>, default: &str) -> Result<String> {
    let m = call
        .params
        .or("mode", param::choice, "clip, wrap or raise", default.into())?;
    match m.as_str() {
        "clip" | "wrap" | "raise" => Ok(m),
        _ => Err(Error::invalid(format!(
            "operator {}: mode must be clip, wrap or raise, got '{m}'",
            call.name
        ))),
    }
}

/// The indices of `t` (any dtype) as positions on an axis of `n`, per `mode`.
fn read_indices(t: &Tensor, n: usize, mode: &str) -> Result<Vec<usize>> {
    crate::with_element!(t.dtype, I => {
        t.slice::<I>().iter().map(|v| index_of(v.to_f64(), n, mode)).collect::<std::result::Result<_, _>>()
    })
    .map_err(Error::invalid)
}

/// The values of an index array (any dtype) as numbers.
fn index_values(t: &Tensor) -> Vec<f64> {
    crate::with_element!(t.dtype, I => t.slice::<I>().iter().map(|v| v.to_f64()).collect())
}

/// A shape seen around one axis: the product of the axes before it, its length and the product
/// of the axes after it.
#[derive(Clone, Copy)]
struct AroundAxis {
    outer: usize,
    n: usize,
    inner: usize,
}

impl AroundAxis {
    fn new(shape: &[i64], axis: usize) -> AroundAxis {
        let product = |s: &[i64]| s.iter().map(|&d| d as usize).product();
        AroundAxis {
            outer: product(&shape[..axis]),
            n: shape[axis] as usize,
            inner: product(&shape[axis + 1..]),
        }
    }

    /// The slices `take` copies, `inner` elements each, given its `indices` on the axis: the
    /// offset of each in take's output and the offset of the slice of the input it reads.
    fn taken(self, indices: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
        let AroundAxis { outer, n, inner } = self;
        let m = indices.len();
        (0..outer).flat_map(move |r| {
            indices
                .iter()
                .enumerate()
                .map(move |(j, &i)| ((r * m + j) * inner, (r * n + i) * inner))
        })
    }

    /// The elements `pick` reads, given one index per output element: each output position
    /// with the input position it reads.
    fn picked(self, indices: &[usize]) -> impl Iterator<Item = (usize, usize)> + '_ {
        let AroundAxis { outer, n, inner } = self;
        (0..outer).flat_map(move |r| {
            (0..inner).map(move |c| {
                let j = r * inner + c;
                (j, (r * n + indices[j]) * inner + c)
            })
        })
    }
}

/// take's axis (normalised), mode and output shape for data `a` and indices `idx`.
fn take_geometry(
    call: &Call<'_>,
    a: &TensorDesc,
    idx: &TensorDesc,
) -> Result<(usize, String, Vec<i64>)> {
    let axis = norm_axis(
        call,
        call.params.or("axis", param::int, "an integer", 0)?,
        a.shape.len(),
    )?;
    let mode = mode(call, "clip")?;
    let mut out = a.shape[..axis].to_vec();
    out.extend_from_slice(&idx.shape);
    out.extend_from_slice(&a.shape[axis + 1..]);
    Ok((axis, mode, out))
}

fn take(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (a, idx) = (&ins[0], &ins[1]);
    let (axis, mode, out) = take_geometry(call, a, idx)?;
    let around = AroundAxis::new(&a.shape, axis);
    if around.n == 0 && idx.size() > 0 {
        return Err(Error::invalid(format!(
            "operator {}: cannot take from an empty axis",
            call.name
        )));
    }
    let (dtype, inner) = (a.dtype, around.inner);
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let indices = read_indices(&k.inputs[1], around.n, &mode)?;
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let o = k.outputs[0].slice_mut::<T>();
            for (dst, s) in around.taken(&indices) {
                o[dst..dst + inner].copy_from_slice(&src[s..s + inner]);
            }
        });
        Ok(())
    }))
}

/// pick's axis (normalised), mode and output shape for data `x`.
fn pick_geometry(call: &Call<'_>, x: &TensorDesc) -> Result<(usize, String, Vec<i64>)> {
    let p = call.params;
    let axis = p.optional("axis", param::int, "an integer")?.unwrap_or(-1);
    let keepdims = p.or("keepdims", param::boolean, "a boolean", false)?;
    let mode = mode(call, "clip")?;
    let a = norm_axis(call, axis, x.shape.len())?;
    let mut out = x.shape.to_vec();
    if keepdims {
        out[a] = 1;
    } else {
        out.remove(a);
    }
    Ok((a, mode, out))
}

/// `pick`'s output and index shapes from the data's alone, unknown dimensions included
/// (MXNet's PickOpShape): the data without the axis (kept as 1 with `keepdims`); the index is
/// shaped like the output, or with the axis as 1 when it has the data's rank.
fn pick_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let mut for_ins: Vec<PartialShape> = vec![None; ins.len()];
    let Some(Some(x)) = ins.first() else {
        return Ok((for_ins, Vec::new()));
    };
    let rank = x.len() as i64;
    let axis = param_int(p, "axis", -1)?;
    let a = if axis < 0 { axis + rank } else { axis };
    if rank == 0 || !(0..rank).contains(&a) {
        return Ok((for_ins, Vec::new()));
    }
    let a = a as usize;
    let mut kept = x.clone();
    kept[a] = 1;
    let mut dropped = x.clone();
    dropped.remove(a);
    let out = if param_flag(p, "keepdims", false)? { kept.clone() } else { dropped.clone() };
    if let Some(Some(idx)) = ins.get(1) {
        for_ins[1] = Some(if idx.len() == x.len() { kept } else { dropped });
    }
    Ok((for_ins, vec![Some(out)]))
}

fn pick(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (x, idx) = (&ins[0], &ins[1]);
    let (a, mode, out) = pick_geometry(call, x)?;
    if idx.size() != out.iter().product::<i64>() as usize {
        return Err(Error::invalid(format!(
            "operator {}: index shape {:?} does not match the output shape {out:?}",
            call.name,
            &idx.shape[..]
        )));
    }
    let around = AroundAxis::new(&x.shape, a);
    let dtype = x.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let indices = read_indices(&k.inputs[1], around.n, &mode)?;
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let o = k.outputs[0].slice_mut::<T>();
            for (j, s) in around.picked(&indices) {
                o[j] = src[s];
            }
        });
        Ok(())
    }))
}

/// How gather_nd's indices (shape `(M, ...)`) address an array: its leading `M` axes, the
/// number of index tuples, the elements each tuple selects, and the shape of what they select.
struct NdIndex {
    lead: Vec<usize>,
    count: usize,
    inner: usize,
    selected: Vec<i64>,
}

impl NdIndex {
    fn new(call: &Call<'_>, idx: &TensorDesc, shape: &[i64]) -> Result<NdIndex> {
        let m = *idx.shape.first().ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: indices must have at least one dimension",
                call.name
            ))
        })? as usize;
        if m > shape.len() {
            return Err(Error::invalid(format!(
                "operator {}: indices address {m} dimensions of a {}-dimensional array",
                call.name,
                shape.len()
            )));
        }
        let mut selected = idx.shape[1..].to_vec();
        selected.extend_from_slice(&shape[m..]);
        Ok(NdIndex {
            lead: dims(&shape[..m]),
            count: idx.shape[1..].iter().map(|&d| d as usize).product(),
            inner: shape[m..].iter().map(|&d| d as usize).product(),
            selected,
        })
    }

    /// The row-major position, over the leading axes, of each index tuple of `ids` (laid out
    /// axis-major, `count` tuples); negative indices count from the end.
    fn positions(&self, ids: &[f64]) -> Result<Vec<usize>> {
        (0..self.count)
            .map(|j| {
                let mut flat = 0usize;
                for (d, &n) in self.lead.iter().enumerate() {
                    let i = ids[d * self.count + j] as i64;
                    let i = if i < 0 { i + n as i64 } else { i };
                    if i < 0 || i as usize >= n {
                        return Err(Error::invalid(format!(
                            "index {i} is out of bounds for axis {d} of size {n}"
                        )));
                    }
                    flat = flat * n + i as usize;
                }
                Ok(flat)
            })
            .collect()
    }
}

fn gather_nd(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (x, idx) = (&ins[0], &ins[1]);
    let nd = NdIndex::new(call, idx, &x.shape)?;
    let dtype = x.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&nd.selected, dtype)], move |k| {
        let positions = nd.positions(&index_values(&k.inputs[1]))?;
        let inner = nd.inner;
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let o = k.outputs[0].slice_mut::<T>();
            for (j, &flat) in positions.iter().enumerate() {
                o[j * inner..(j + 1) * inner].copy_from_slice(&src[flat * inner..(flat + 1) * inner]);
            }
        });
        Ok(())
    }))
}

/// `_scatter_set_nd(lhs, rhs, indices, shape)`: a copy of `lhs` with the elements `gather_nd`
/// would read at `indices` replaced by `rhs` (what `x[idx_arrays] = v` runs, with `out=x`).
fn scatter_set_nd(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (lhs, rhs, idx) = (&ins[0], &ins[1], &ins[2]);
    let shape = call.params.required("shape", param::shape, "a shape")?;
    if shape[..] != lhs.shape[..] {
        return Err(Error::invalid(format!(
            "operator {}: shape {shape:?} differs from lhs's shape {:?}",
            call.name,
            &lhs.shape[..]
        )));
    }
    same_dtype(call, 0, 1)?;
    let nd = NdIndex::new(call, idx, &lhs.shape)?;
    if rhs.shape[..] != nd.selected[..] {
        return Err(Error::invalid(format!(
            "operator {}: rhs has shape {:?}, the indices select {:?}",
            call.name,
            &rhs.shape[..],
            nd.selected
        )));
    }
    let dtype = lhs.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&lhs.shape, dtype)], move |k| {
        let positions = nd.positions(&index_values(&k.inputs[2]))?;
        let inner = nd.inner;
        crate::with_element!(dtype, T => {
            let (base, vals) = (k.inputs[0].slice::<T>(), k.inputs[1].slice::<T>());
            let o = k.outputs[0].slice_mut::<T>();
            o.copy_from_slice(base);
            for (j, &flat) in positions.iter().enumerate() {
                o[flat * inner..(flat + 1) * inner].copy_from_slice(&vals[j * inner..(j + 1) * inner]);
            }
        });
        Ok(())
    }))
}

fn one_hot(call: &Call<'_>) -> Result<Plan> {
    let idx = &inputs(call, 1)?[0];
    let p = call.params;
    let depth = p.required("depth", param::int, "an integer")?;
    let on = p.or("on_value", param::float, "a number", 1.0)?;
    let off = p.or("off_value", param::float, "a number", 0.0)?;
    let dtype = p.or("dtype", param::dtype, "a dtype name", DType::F32)?;
    if depth < 0 {
        return Err(Error::invalid(format!(
            "operator {}: depth must not be negative",
            call.name
        )));
    }
    let mut out = idx.shape.to_vec();
    out.push(depth);
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let ids = index_values(&k.inputs[0]);
        crate::with_element!(dtype, T => {
            let o = k.outputs[0].slice_mut::<T>();
            o.fill(T::from_f64(off));
            let d = depth as usize;
            for (j, &i) in ids.iter().enumerate() {
                let i = i as i64;
                if (0..depth).contains(&i) {
                    o[j * d + i as usize] = T::from_f64(on);
                }
            }
        });
        Ok(())
    }))
}

/// `where(cond, x, y)`: `cond` has x's shape, or is 1-D over x's first axis.
fn where_op(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (c, x, y) = (&ins[0], &ins[1], &ins[2]);
    same_dtype(call, 1, 2)?;
    if x.shape != y.shape {
        return Err(Error::invalid(format!(
            "operator {}: x and y shapes differ: {:?} and {:?}",
            call.name,
            &x.shape[..],
            &y.shape[..]
        )));
    }
    let cs: Vec<isize> = if c.shape == x.shape {
        crate::operator::kernel::strided::contiguous_strides(&dims(&c.shape))
    } else if c.shape.len() == 1 && x.shape.first() == c.shape.first() {
        let mut s = vec![0isize; x.shape.len()];
        s[0] = 1;
        s
    } else {
        return Err(Error::invalid(format!(
            "operator {}: condition shape {:?} must equal x's {:?} or be its first axis",
            call.name,
            &c.shape[..],
            &x.shape[..]
        )));
    };
    let own = crate::operator::kernel::strided::contiguous_strides(&dims(&x.shape));
    let (dtype, ctype) = (x.dtype, c.dtype);
    let d = dims(&x.shape);
    Ok(Plan::new(vec![x.clone()], move |k| {
        crate::with_element!(dtype, T => {
            let cond: Vec<bool> = crate::with_element!(ctype, C => k.inputs[0].slice::<C>().iter().map(|v| v.to_f64() != 0.0).collect());
            let (xs, ys) = (k.inputs[1].slice::<T>(), k.inputs[2].slice::<T>());
            zip3((&cond[..], &cs), (xs, &own), (ys, &own), &d, k.outputs[0].slice_mut::<T>(), |c, a, b| if c { a } else { b });
        });
        Ok(())
    }))
}

/// `_histogram` (`nd.histogram`): counts (int64) of the data in `bin_cnt` equal bins over
/// `range`, or in the bins whose bounds the second input gives (sorted), and the bounds (in the
/// data's dtype). A value is in bin i when bounds[i] <= x < bounds[i+1]; the last bin includes
/// its upper bound; values outside are not counted.
fn histogram(call: &Call<'_>) -> Result<Plan> {
    let ins = call.inputs;
    let p = call.params;
    let cnt = p.optional("bin_cnt", param::int, "an integer")?;
    let range = p.optional("range", param::floats, "a (min, max) pair")?;
    let x = match ins.len() {
        1 | 2 => &ins[0],
        n => {
            return Err(Error::invalid(format!(
                "operator {} takes 1 or 2 inputs (data, bins), {n} given",
                call.name
            )));
        }
    };
    let dtype = x.dtype;
    match (ins.len(), cnt, range) {
        (2, _, _) => {
            let b = &ins[1];
            if b.shape.len() != 1 || b.shape[0] < 2 {
                return Err(Error::invalid(format!(
                    "operator {}: bins must be a 1-D array of at least 2 bounds, got shape {:?}",
                    call.name,
                    &b.shape[..]
                )));
            }
            same_dtype(call, 0, 1)?;
            let nb = b.shape[0];
            Ok(Plan::new(
                vec![TensorDesc::new(&[nb - 1], DType::I64), TensorDesc::new(&[nb], dtype)],
                move |k| {
                    crate::with_element!(dtype, T => {
                        let bounds: Vec<f64> = k.inputs[1].slice::<T>().iter().map(|v| v.to_f64()).collect();
                        let mut counts = vec![0i64; bounds.len() - 1];
                        let last = bounds[bounds.len() - 1];
                        for v in k.inputs[0].slice::<T>() {
                            let v = v.to_f64();
                            if v < bounds[0] || v > last || v.is_nan() {
                                continue;
                            }
                            let i = bounds.partition_point(|&b| b <= v).saturating_sub(1);
                            let nbins = counts.len();
                            counts[i.min(nbins - 1)] += 1;
                        }
                        k.outputs[0].slice_mut::<i64>().copy_from_slice(&counts);
                        let edges = k.inputs[1].slice::<T>().to_vec();
                        k.outputs[1].slice_mut::<T>().copy_from_slice(&edges);
                    });
                    Ok(())
                },
            ))
        }
        (1, Some(n), Some(r)) => {
            if n <= 0 {
                return Err(Error::invalid(format!(
                    "operator {}: bin_cnt must be positive, got {n}",
                    call.name
                )));
            }
            let [lo, hi] = r[..] else {
                return Err(Error::invalid(format!(
                    "operator {}: range must be a (min, max) pair, got {r:?}",
                    call.name
                )));
            };
            if lo.partial_cmp(&hi) != Some(std::cmp::Ordering::Less) {
                return Err(Error::invalid(format!(
                    "operator {}: range ({lo}, {hi}) must have min < max",
                    call.name
                )));
            }
            let nb = n as usize;
            Ok(Plan::new(
                vec![TensorDesc::new(&[n], DType::I64), TensorDesc::new(&[n + 1], dtype)],
                move |k| {
                    let mut counts = vec![0i64; nb];
                    // as MXNet: the bin of a value and the bounds are computed in float32, in
                    // float64 for float64 data
                    let wide = dtype == DType::F64;
                    let (lo32, hi32) = (lo as f32, hi as f32);
                    crate::with_element!(dtype, T => {
                        for v in k.inputs[0].slice::<T>() {
                            let bin = if wide {
                                let v = v.to_f64();
                                (v >= lo && v <= hi).then(|| ((v - lo) / (hi - lo) * nb as f64) as usize)
                            } else {
                                let v = v.to_f64() as f32;
                                (v >= lo32 && v <= hi32)
                                    .then(|| ((v - lo32) / (hi32 - lo32) * nb as f32) as usize)
                            };
                            if let Some(i) = bin {
                                counts[i.min(nb - 1)] += 1;
                            }
                        }
                        for (i, e) in k.outputs[1].slice_mut::<T>().iter_mut().enumerate() {
                            *e = if wide {
                                T::from_f64(lo + i as f64 * (hi - lo) / nb as f64)
                            } else {
                                T::from_f64((lo32 + i as f32 * (hi32 - lo32) / nb as f32) as f64)
                            };
                        }
                    });
                    k.outputs[0].slice_mut::<i64>().copy_from_slice(&counts);
                    Ok(())
                },
            ))
        }
        _ => Err(Error::invalid(format!(
            "operator {}: give either a bins array, or bin_cnt and range",
            call.name
        ))),
    }
}

/// `_mxrt_take_grad(dy, indices, a)` with take's parameters: zeros shaped like `a`, plus each
/// slice of `dy` added to the slice of `a` its index took (clipped or wrapped as the forward
/// did: a repeated index sums). Its own gradient is `take` again.
fn take_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (dy, idx, a) = (&ins[0], &ins[1], &ins[2]);
    let (axis, mode, want) = take_geometry(call, a, idx)?;
    grad_shape_check(call, dy, &want)?;
    let around = AroundAxis::new(&a.shape, axis);
    let (dtype, inner) = (dy.dtype, around.inner);
    Ok(Plan::new(vec![TensorDesc::new(&a.shape, dtype)], move |k| {
        let indices = read_indices(&k.inputs[1], around.n, &mode)?;
        crate::with_element!(dtype, T => {
            let g = k.inputs[0].slice::<T>();
            let mut acc = vec![0f64; k.outputs[0].len()];
            for (src, dst) in around.taken(&indices) {
                for c in 0..inner {
                    acc[dst + c] += g[src + c].to_f64();
                }
            }
            store(&acc, k.outputs[0].slice_mut::<T>());
        });
        Ok(())
    }))
}

/// `_mxrt_pick_grad(dy, index, data)` with pick's parameters: zeros shaped like `data` with
/// each element of `dy` at the position its index picked. Its own gradient is `pick` again.
fn pick_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (dy, idx, x) = (&ins[0], &ins[1], &ins[2]);
    let (a, mode, want) = pick_geometry(call, x)?;
    grad_shape_check(call, dy, &want)?;
    if idx.size() != dy.size() {
        return Err(Error::invalid(format!(
            "operator {}: index shape {:?} does not match the gradient's {:?}",
            call.name,
            &idx.shape[..],
            &dy.shape[..]
        )));
    }
    let around = AroundAxis::new(&x.shape, a);
    let dtype = dy.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        let indices = read_indices(&k.inputs[1], around.n, &mode)?;
        crate::with_element!(dtype, T => {
            let g = k.inputs[0].slice::<T>();
            let o = k.outputs[0].slice_mut::<T>();
            o.fill(T::zero());
            for (j, d) in around.picked(&indices) {
                o[d] = g[j];
            }
        });
        Ok(())
    }))
}

/// `_mxrt_gather_nd_grad(dy, indices, data)`: zeros shaped like `data`, plus each slice of `dy`
/// added where gather_nd read it (a repeated index tuple sums). Its own gradient is
/// `gather_nd` again.
fn gather_nd_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (dy, idx, x) = (&ins[0], &ins[1], &ins[2]);
    let nd = NdIndex::new(call, idx, &x.shape)?;
    grad_shape_check(call, dy, &nd.selected)?;
    let dtype = dy.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        let positions = nd.positions(&index_values(&k.inputs[1]))?;
        let inner = nd.inner;
        crate::with_element!(dtype, T => {
            let g = k.inputs[0].slice::<T>();
            let mut acc = vec![0f64; k.outputs[0].len()];
            for (j, &flat) in positions.iter().enumerate() {
                for c in 0..inner {
                    acc[flat * inner + c] += g[j * inner + c].to_f64();
                }
            }
            store(&acc, k.outputs[0].slice_mut::<T>());
        });
        Ok(())
    }))
}

/// Checks that a gradient op's incoming gradient has the forward output's shape.
fn grad_shape_check(call: &Call<'_>, dy: &TensorDesc, want: &[i64]) -> Result<()> {
    if dy.shape[..] != *want {
        return Err(Error::invalid(format!(
            "operator {}: the gradient has shape {:?}, the forward's output {want:?}",
            call.name,
            &dy.shape[..]
        )));
    }
    Ok(())
}

/// Writes sums kept in f64 into an output of any dtype.
fn store<T: Element>(acc: &[f64], out: &mut [T]) {
    for (o, &a) in out.iter_mut().zip(acc) {
        *o = T::from_f64(a);
    }
}

pub(crate) fn register(t: &mut Entries) {
    // no gradients in MXNet: the histogram, and the assignments `x[...] = v` runs
    t.push(("_histogram", &histogram));
    t.push(("_slice_assign", &|c: &Call<'_>| slice_assign(c, false)));
    t.push(("_slice_assign_scalar", &|c: &Call<'_>| {
        slice_assign(c, true)
    }));
    t.push(("_scatter_set_nd", &scatter_set_nd));
    // indices get no gradient
    // rows of a csr array taken along axis 0 are a csr array, as in MXNet
    t.push(("take", &take))
        .stype(crate::operator::stype::StorageRule::Custom(|p, ins| {
            let axis0 = crate::operator::stype::param(p, "axis").is_none_or(|a| a.trim() == "0");
            if ins.first() == Some(&crate::ndarray::format::StorageType::Csr) && axis0 {
                crate::ndarray::format::StorageType::Csr
            } else {
                crate::ndarray::format::StorageType::Default
            }
        }))
        .grad(|g| {
        let p = some_params(g, &["axis", "mode"]);
        let dx = g.op("_mxrt_take_grad", &[g.dy(0), g.x(1), g.x(0)], &p)?;
        Ok(vec![Some(dx), None])
    });
    t.def("_mxrt_take_grad", &take_grad).grad(|g| {
        let p = some_params(g, &["axis", "mode"]);
        Ok(vec![Some(g.op("take", &[g.dy(0), g.x(1)], &p)?), None, None])
    });
    t.push(("pick", &pick))
        .grad(|g| {
            let p = some_params(g, &["axis", "keepdims", "mode"]);
            let dx = g.op("_mxrt_pick_grad", &[g.dy(0), g.x(1), g.x(0)], &p)?;
            Ok(vec![Some(dx), None])
        })
        .shape_rule(ShapeRule::Rule(pick_shapes));
    t.def("_mxrt_pick_grad", &pick_grad).grad(|g| {
        let p = some_params(g, &["axis", "keepdims", "mode"]);
        Ok(vec![Some(g.op("pick", &[g.dy(0), g.x(1)], &p)?), None, None])
    });
    t.push(("gather_nd", &gather_nd)).grad(|g| {
        let dx = g.op("_mxrt_gather_nd_grad", &[g.dy(0), g.x(1), g.x(0)], &[])?;
        Ok(vec![Some(dx), None])
    });
    t.def("_mxrt_gather_nd_grad", &gather_nd_grad).grad(|g| {
        Ok(vec![Some(g.op("gather_nd", &[g.dy(0), g.x(1)], &[])?), None, None])
    });
    // the output's dtype is the `dtype` parameter's (float32 by default), whatever the indices'
    t.push(("one_hot", &one_hot))
        .zero_grad()
        .dtype_rule(crate::operator::def::TypeRule::Fixed(|p| {
            Some(
                crate::operator::def::param(p, "dtype")
                    .and_then(param::dtype)
                    .unwrap_or(DType::F32),
            )
        }));
    // x's gradient where the condition holds, y's elsewhere; the condition gets none
    t.push(("where", &where_op)).grad(|g| {
        let zero = g.zeros_like(g.dy(0))?;
        let dx = if g.needs(1) {
            Some(g.op("where", &[g.x(0), g.dy(0), zero], &[])?)
        } else {
            None
        };
        let dy = if g.needs(2) {
            Some(g.op("where", &[g.x(0), zero, g.dy(0)], &[])?)
        } else {
            None
        };
        Ok(vec![None, dx, dy])
    });
}
