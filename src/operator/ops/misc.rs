//! Small operators of MXNet's tensor and contrib families: `khatri_rao`, `cumsum` (`_np_cumsum`),
//! `_ravel_multi_index` / `_unravel_index`, `scatter_nd`, `reset_arrays`, `all_finite`,
//! `multi_all_finite`, `amp_multicast` and `IdentityAttachKLSparseReg`.
//!
//! Gradients, as MXNet's: `cumsum`'s is the reversed cumulative sum of the head gradient
//! (`_mxrt_cumsum_grad`); `scatter_nd`'s is `gather_nd` of the head gradient (zeros for the
//! indices); `amp_multicast`'s casts each head gradient back to its input's dtype;
//! `IdentityAttachKLSparseReg`'s adds the KL sparseness penalty and updates the moving average
//! of the activations (`_mxrt_kl_sparse_reg_grad`); the ravel ops have a zero gradient;
//! `khatri_rao`, `reset_arrays` and the finiteness checks have none.

use super::conv::float_dtype;
use super::{Entries, axis as norm_axis, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{Signature, TypeRule};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Operator, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

/// A tensor's values as f64.
pub(crate) fn read(t: &Tensor) -> Vec<f64> {
    crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
}

/// Writes f64 values into a tensor of any dtype (MXNet's casts).
pub(crate) fn write(t: &mut Tensor, vals: &[f64]) {
    crate::with_element!(t.dtype, T => {
        for (o, &v) in t.slice_mut::<T>().iter_mut().zip(vals) {
            *o = T::from_f64(v);
        }
    })
}

fn prod(s: &[i64]) -> usize {
    s.iter().map(|&d| d.max(0) as usize).product()
}

// ---------------------------------------------------------------------------------------------
// khatri_rao

/// `khatri_rao(A_1, ..., A_n)`: the column-wise Kronecker product, rows of `A_1` slowest.
fn khatri_rao(call: &Call<'_>) -> Result<Plan> {
    call.params.optional("num_args", param::int, "an integer")?;
    let ins = call.inputs;
    if ins.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: num_args must be at least 1 (no input matrices)",
            call.name
        )));
    }
    let dtype = ins[0].dtype;
    let cols = ins[0].shape.get(1).copied().unwrap_or(0);
    let mut rows = Vec::new();
    for (i, m) in ins.iter().enumerate() {
        if m.shape.len() != 2 {
            return Err(Error::invalid(format!(
                "operator {}: input {i} must be a matrix, got shape {:?}",
                call.name,
                &m.shape[..]
            )));
        }
        if m.shape[1] != cols {
            return Err(Error::invalid(format!(
                "operator {}: Check failed: num_columns == attr_shape[1] ({cols} vs. {}): \
                 input {i} has {} columns, input 0 {cols}",
                call.name, m.shape[1], m.shape[1]
            )));
        }
        if m.dtype != dtype {
            return Err(Error::invalid(format!(
                "operator {}: input {i} is {}, input 0 {}",
                call.name,
                m.dtype.name(),
                dtype.name()
            )));
        }
        rows.push(m.shape[0].max(0) as usize);
    }
    float_dtype(call, dtype)?;
    let total: usize = rows.iter().product();
    let c = cols.max(0) as usize;
    Ok(Plan::new(
        vec![TensorDesc::new(&[total as i64, cols], dtype)],
        move |k| {
            let mats: Vec<Vec<f64>> = k.inputs.iter().map(read).collect();
            let mut out = vec![0f64; total * c];
            for r in 0..total {
                // the row of each input this output row combines, last input fastest
                let mut rem = r;
                let mut idx = vec![0usize; rows.len()];
                for (j, &n) in rows.iter().enumerate().rev() {
                    idx[j] = rem % n;
                    rem /= n;
                }
                for col in 0..c {
                    let mut v = 1.0;
                    for (j, m) in mats.iter().enumerate() {
                        v *= m[idx[j] * c + col];
                    }
                    out[r * c + col] = v;
                }
            }
            write(&mut k.outputs[0], &out);
            Ok(())
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// cumsum

/// The (outer, n, inner) of a cumulative sum along `axis` (None: the flattened array).
fn around(shape: &[i64], axis: Option<usize>) -> (usize, usize, usize) {
    match axis {
        None => (1, prod(shape), 1),
        Some(a) => (
            prod(&shape[..a]),
            shape[a].max(0) as usize,
            prod(&shape[a + 1..]),
        ),
    }
}

fn cumsum_axis(call: &Call<'_>, shape: &[i64]) -> Result<Option<usize>> {
    match call
        .params
        .optional("axis", param::int, "an integer or None")?
    {
        None => Ok(None),
        Some(a) => Ok(Some(norm_axis(call, a, shape.len())?)),
    }
}

/// Cumulative sums (or, `reverse`, sums from the end) along the middle index.
fn running_sum(x: &[f64], (outer, n, inner): (usize, usize, usize), reverse: bool) -> Vec<f64> {
    let mut out = vec![0f64; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = 0.0;
            for s in 0..n {
                let j = if reverse { n - 1 - s } else { s };
                let at = (o * n + j) * inner + i;
                acc += x[at];
                out[at] = acc;
            }
        }
    }
    out
}

/// `_np_cumsum(a; axis, dtype)`: the cumulative sum along `axis` (None: of the flattened array,
/// a 1-D output), in `dtype` (default the input's; bool sums to int64).
fn cumsum(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let axis = cumsum_axis(call, &x.shape)?;
    let dtype = match call
        .params
        .optional("dtype", param::dtype, "a dtype name")?
    {
        Some(d @ (DType::F16 | DType::F32 | DType::F64 | DType::I8 | DType::I32 | DType::I64)) => d,
        Some(d) => {
            return Err(Error::invalid(format!(
                "operator {}: Invalid Input: '{}', valid values are: {{'float16', 'float32', \
                 'float64', 'int32', 'int64', 'int8'}} for parameter dtype",
                call.name,
                d.name()
            )));
        }
        None if x.dtype == DType::Bool => DType::I64,
        None => x.dtype,
    };
    let out = match axis {
        None => vec![x.size() as i64],
        Some(_) => x.shape.to_vec(),
    };
    let dims = around(&x.shape, axis);
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let v = running_sum(&read(&k.inputs[0]), dims, false);
        write(&mut k.outputs[0], &v);
        Ok(())
    }))
}

/// `_mxrt_cumsum_grad(dy, a; axis)`: the sums of `dy` from the end along the axis, shaped and
/// typed like `a`. Its gradient is `cumsum` again.
fn cumsum_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (dy, x) = (&ins[0], ins[1].clone());
    let axis = cumsum_axis(call, &x.shape)?;
    if dy.size() != x.size() {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for input of shape {:?}",
            call.name,
            &dy.shape[..],
            &x.shape[..]
        )));
    }
    let dims = around(&x.shape, axis);
    Ok(Plan::new(vec![x], move |k| {
        let v = running_sum(&read(&k.inputs[0]), dims, true);
        write(&mut k.outputs[0], &v);
        Ok(())
    }))
}

// ---------------------------------------------------------------------------------------------
// ravel_multi_index / unravel_index

fn ravel_shape(call: &Call<'_>, what: &str) -> Result<Vec<i64>> {
    let shape = call
        .params
        .or("shape", param::shape, "a shape", Vec::new())?;
    if shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: Empty shape parameter for {what} operator.",
            call.name
        )));
    }
    Ok(shape)
}

/// `_ravel_multi_index(data; shape)`: columns of `data` (one row per dimension of `shape`) as
/// flat indices into an array of `shape`.
fn ravel(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let shape = ravel_shape(call, "ravel")?;
    if x.shape.len() != 2 {
        return Err(Error::invalid(format!(
            "operator {}: Input to ravel operator must be two-dimensional.",
            call.name
        )));
    }
    if x.shape[0] != shape.len() as i64 {
        return Err(Error::invalid(format!(
            "operator {}: First dimension of input of ravel operator does not match shape \
             parameter dimension.",
            call.name
        )));
    }
    let n = x.shape[1].max(0) as usize;
    Ok(Plan::new(
        vec![TensorDesc::new(&[x.shape[1]], x.dtype)],
        move |k| {
            let v = read(&k.inputs[0]);
            let out: Vec<f64> = (0..n)
                .map(|i| {
                    let mut r: i64 = 0;
                    for (j, &d) in shape.iter().enumerate() {
                        r = r.wrapping_mul(d).wrapping_add(v[j * n + i] as i64);
                    }
                    r as f64
                })
                .collect();
            write(&mut k.outputs[0], &out);
            Ok(())
        },
    ))
}

/// `_unravel_index(data; shape)`: flat indices as one row per dimension of `shape`.
fn unravel(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let shape = ravel_shape(call, "unravel")?;
    if x.shape.len() != 1 {
        return Err(Error::invalid(format!(
            "operator {}: Input to unravel operator must be one-dimensional, got shape {:?}",
            call.name,
            &x.shape[..]
        )));
    }
    let n = x.shape[0].max(0) as usize;
    let nd = shape.len();
    Ok(Plan::new(
        vec![TensorDesc::new(&[nd as i64, x.shape[0]], x.dtype)],
        move |k| {
            let v = read(&k.inputs[0]);
            let mut out = vec![0f64; nd * n];
            for i in 0..n {
                let mut idx = v[i] as i64;
                for j in (1..nd).rev() {
                    let d = shape[j];
                    let q = if d == 0 { 0 } else { idx / d };
                    out[j * n + i] = (idx - q * d) as f64;
                    idx = q;
                }
                out[i] = idx as f64;
            }
            write(&mut k.outputs[0], &out);
            Ok(())
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// scatter_nd

/// `scatter_nd(data, indices; shape)`: zeros of `shape` with `data`'s slices written where
/// `indices` (shape `(M, Y...)`) point; `_backward_gather_nd` (`accumulate`) adds them, so
/// repeated indices sum.
fn scatter_nd(call: &Call<'_>) -> Result<Plan> {
    scatter(call, false)
}

/// MXNet's gradient of `gather_nd`: `scatter_nd` adding up repeated indices.
fn backward_gather_nd(call: &Call<'_>) -> Result<Plan> {
    scatter(call, true)
}

fn scatter(call: &Call<'_>, accumulate: bool) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (data, idx) = (&ins[0], &ins[1]);
    let oshape = call.params.required("shape", param::shape, "a shape")?;
    if idx.shape.len() < 2 {
        return Err(Error::invalid(format!(
            "operator {}: scatter_nd requires index tensor to have at least 2 dimensions",
            call.name
        )));
    }
    let m = idx.shape[0].max(0) as usize;
    if m > oshape.len() {
        return Err(Error::invalid(format!(
            "operator {}: Number of indices exceeds output dimension in operator scatter_nd",
            call.name
        )));
    }
    if m > 10 {
        return Err(Error::invalid(format!(
            "operator {}: scatter_nd supports indexing along at most 10 dimensions.",
            call.name
        )));
    }
    let mut want: Vec<i64> = idx.shape[1..].to_vec();
    want.extend_from_slice(&oshape[m..]);
    if data.shape[..] != want[..] {
        return Err(Error::invalid(format!(
            "operator {}: Invalid data, indices and output shapes: data {:?}, indices {:?}, \
             shape {:?}",
            call.name,
            &data.shape[..],
            &idx.shape[..],
            oshape
        )));
    }
    let count = prod(&idx.shape[1..]);
    let inner = prod(&oshape[m..]);
    let lead: Vec<i64> = oshape[..m].to_vec();
    Ok(Plan::new(
        vec![TensorDesc::new(&oshape, data.dtype)],
        move |k| {
            let ids = read(&k.inputs[1]);
            let vals = read(&k.inputs[0]);
            let mut out = vec![0f64; k.outputs[0].len()];
            for j in 0..count {
                let mut flat = 0usize;
                for (d, &n) in lead.iter().enumerate() {
                    let i = ids[d * count + j] as i64;
                    if i < 0 || i >= n {
                        return Err(Error::invalid(format!(
                            "scatter_nd: index {i} is out of bounds for axis {d} of size {n}"
                        )));
                    }
                    flat = flat * n as usize + i as usize;
                }
                let dst = &mut out[flat * inner..(flat + 1) * inner];
                let src = &vals[j * inner..(j + 1) * inner];
                if accumulate {
                    dst.iter_mut().zip(src).for_each(|(d, v)| *d += v);
                } else {
                    dst.copy_from_slice(src);
                }
            }
            write(&mut k.outputs[0], &out);
            Ok(())
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// reset_arrays, all_finite, multi_all_finite

/// `reset_arrays(arrays...; num_arrays)`: sets every input to zero in place; no outputs.
fn reset_arrays(call: &Call<'_>) -> Result<Plan> {
    let n = call
        .params
        .required("num_arrays", param::int, "an integer")?;
    if n != call.inputs.len() as i64 {
        return Err(Error::invalid(format!(
            "operator {}: Check failed: num_arrays == inputs ({n} vs. {}): expects {n} inputs, \
             but got {} instead",
            call.name,
            call.inputs.len(),
            call.inputs.len()
        )));
    }
    let all: Vec<usize> = (0..call.inputs.len()).collect();
    Ok(Plan::new(Vec::new(), move |k| {
        for t in k.inputs.iter() {
            let bytes = t.nbytes();
            if bytes > 0 {
                // SAFETY: the plan declares every input mutated, so this op holds each one's
                // variable for writing; `nbytes()` bytes start at its pointer, and all-zero
                // bytes are zero in every dtype.
                unsafe { std::ptr::write_bytes(t.byte_ptr(), 0, bytes) };
            }
        }
        Ok(())
    })
    .mutating(&all))
}

/// Whether every value is finite as float32 (MXNet casts to float before testing).
fn finite(t: &Tensor) -> bool {
    crate::with_element!(t.dtype, T => t.slice::<T>().iter().all(|v| v.to_f32().is_finite()))
}

/// `all_finite(data; init_output)` and `multi_all_finite(arrays...; num_arrays, init_output)`:
/// a float32 `(1,)` that is 0 when some value is infinite or NaN; with `init_output` it is set to
/// 1 first, otherwise it keeps its value where everything is finite.
fn all_finite(call: &Call<'_>, multi: bool) -> Result<Plan> {
    let ins = if multi {
        let n = call.params.or("num_arrays", param::int, "an integer", 1)?;
        if n != call.inputs.len() as i64 {
            return Err(Error::invalid(format!(
                "operator {}: expects {n} inputs (num_arrays), but got {} instead",
                call.name,
                call.inputs.len()
            )));
        }
        call.inputs
    } else {
        inputs(call, 1)?
    };
    let init = call
        .params
        .or("init_output", param::boolean, "a boolean", true)?;
    for t in ins {
        float_dtype(call, t.dtype)?;
    }
    Ok(Plan::new(
        vec![TensorDesc::new(&[1], DType::F32)],
        move |k| {
            let ok = k.inputs.iter().all(finite);
            let o = k.outputs[0].slice_mut::<f32>();
            if init {
                o[0] = 1.0;
            }
            if !ok {
                o[0] = 0.0;
            }
            Ok(())
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// amp_multicast

/// `amp_multicast(data...; num_outputs, cast_narrow)`: the float32/float16/bfloat16 inputs cast
/// to the widest (float32 if any is; else the first input's dtype) or, with `cast_narrow`, the
/// narrowest of them; other dtypes pass unchanged.
fn amp_multicast(call: &Call<'_>) -> Result<Plan> {
    let n = call
        .params
        .required("num_outputs", param::int, "an integer")?;
    let narrow = call
        .params
        .or("cast_narrow", param::boolean, "a boolean", false)?;
    let ins = call.inputs;
    if n != ins.len() as i64 || ins.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: Operator amp_multicast expects {n} inputs, but got {} instead \
             (num_outputs)",
            call.name,
            ins.len()
        )));
    }
    let types = amp_types(
        narrow,
        &ins.iter().map(|t| Some(t.dtype)).collect::<Vec<_>>(),
    );
    let outs: Vec<TensorDesc> = ins
        .iter()
        .zip(types)
        .map(|(t, d)| TensorDesc::new(&t.shape, d.unwrap_or(t.dtype)))
        .collect();
    Ok(Plan::new(outs, move |k| {
        for (x, y) in k.inputs.iter().zip(k.outputs.iter()) {
            super::creation::convert(x, y);
        }
        Ok(())
    }))
}

/// amp_multicast's output dtypes for these input dtypes (MXNet's `AMPMultiCastType`).
fn amp_types(narrow: bool, ins: &[Option<DType>]) -> Vec<Option<DType>> {
    let mut target = if narrow {
        Some(DType::F32)
    } else {
        ins.first().copied().flatten()
    };
    for t in ins.iter().flatten() {
        if !narrow && *t == DType::F32 {
            target = Some(DType::F32);
        } else if narrow && *t == DType::F16 {
            target = Some(DType::F16);
        } else if narrow && *t == DType::BF16 {
            target = Some(DType::BF16);
        }
    }
    ins.iter()
        .map(|t| match t {
            Some(DType::F32 | DType::F16 | DType::BF16) => target,
            other => *other,
        })
        .collect()
}

/// `_mxrt_amp_multicast_grad(dy_0.., x_0..)`: each `dy_i` in `x_i`'s dtype.
fn amp_multicast_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = call.inputs;
    if ins.len() % 2 != 0 {
        return Err(Error::invalid(format!(
            "operator {}: takes gradients and inputs in pairs",
            call.name
        )));
    }
    let n = ins.len() / 2;
    let outs: Vec<TensorDesc> = (0..n)
        .map(|i| TensorDesc::new(&ins[i].shape, ins[n + i].dtype))
        .collect();
    Ok(Plan::new(outs, move |k| {
        for i in 0..n {
            super::creation::convert(&k.inputs[i], &k.outputs[i]);
        }
        Ok(())
    }))
}

// ---------------------------------------------------------------------------------------------
// IdentityAttachKLSparseReg

fn kl_params(call: &Call<'_>) -> Result<(f64, f64, f64)> {
    let p = call.params;
    let target = p.or("sparseness_target", param::float, "a number", 0.1)?;
    let penalty = p.or("penalty", param::float, "a number", 0.001)?;
    let momentum = p.or("momentum", param::float, "a number", 0.9)?;
    for (name, v) in [("sparseness_target", target), ("momentum", momentum)] {
        if !(0.0..=1.0).contains(&v) {
            return Err(Error::invalid(format!(
                "operator {}: value {v} for parameter {name} exceeds bound [0,1]",
                call.name
            )));
        }
    }
    Ok((target, penalty, momentum))
}

fn kl_check(call: &Call<'_>, data: &TensorDesc, avg: &TensorDesc) -> Result<()> {
    if data.dtype != DType::F32 || avg.dtype != DType::F32 {
        return Err(Error::invalid(format!(
            "operator {}: takes float32 arrays, got {} and {}",
            call.name,
            data.dtype.name(),
            avg.dtype.name()
        )));
    }
    if data.shape.len() != 2 || avg.shape[..] != [data.shape[1]] {
        return Err(Error::invalid(format!(
            "operator {}: data must be 2-dimensional (batch, hidden) and moving_avg (hidden,); \
             got {:?} and {:?}",
            call.name,
            &data.shape[..],
            &avg.shape[..]
        )));
    }
    Ok(())
}

/// `IdentityAttachKLSparseReg(data, moving_avg)`: the data unchanged (the penalty is in the
/// gradient).
fn kl_sparse_reg(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    kl_params(call)?;
    kl_check(call, &ins[0], &ins[1])?;
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        super::creation::convert(&k.inputs[0], &k.outputs[0]);
        Ok(())
    }))
}

/// `_mxrt_kl_sparse_reg_grad(dy, data, moving_avg)`: folds the batch's mean activation into
/// `moving_avg` (`m = momentum m + (1 - momentum) mean`) and returns
/// `dy + penalty (-target / m + (1 - target) / (1 - m))`.
fn kl_sparse_reg_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (target, penalty, momentum) = kl_params(call)?;
    kl_check(call, &ins[1], &ins[2])?;
    if ins[0].shape != ins[1].shape {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for data of shape {:?}",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..]
        )));
    }
    let (rows, cols) = (
        ins[1].shape[0].max(0) as usize,
        ins[1].shape[1].max(0) as usize,
    );
    Ok(Plan::new(vec![ins[1].clone()], move |k| {
        let (dy, x) = (k.inputs[0].slice::<f32>(), k.inputs[1].slice::<f32>());
        let pm = k.inputs[2].ptr::<f32>();
        let mut m = vec![0f32; cols];
        for (c, mc) in m.iter_mut().enumerate() {
            let mut s = 0f32;
            for r in 0..rows {
                s += x[r * cols + c];
            }
            let avg = s / rows as f32;
            // SAFETY: the plan declares input 2 mutated, so this op holds moving_avg's variable
            // for writing; it has `cols` float32 elements, each read once before it is written.
            unsafe {
                let old = pm.add(c).read();
                *mc = momentum as f32 * old + (1.0 - momentum as f32) * avg;
                pm.add(c).write(*mc);
            }
        }
        let (t, p) = (target as f32, penalty as f32);
        let o = k.outputs[0].slice_mut::<f32>();
        for r in 0..rows {
            for c in 0..cols {
                let mc = m[c];
                o[r * cols + c] = dy[r * cols + c] + p * (-t / mc + (1.0 - t) / (1.0 - mc));
            }
        }
        Ok(())
    })
    .mutating(&[2]))
}

pub(crate) fn register(t: &mut Entries) {
    // no gradient in MXNet
    t.def("khatri_rao", &khatri_rao);
    t.def("_np_cumsum", &cumsum)
        .dtype_rule(TypeRule::Outputs(|p, ins| {
            let given = crate::operator::def::param(p, "dtype").and_then(param::dtype);
            vec![given.or(
                ins.first().copied().flatten().map(
                    |d| {
                        if d == DType::Bool { DType::I64 } else { d }
                    },
                ),
            )]
        }))
        .grad(|g| {
            let p = g.pass(&["axis"]);
            Ok(vec![Some(g.op(
                "_mxrt_cumsum_grad",
                &[g.dy(0), g.x(0)],
                &p,
            )?)])
        });
    t.def("_mxrt_cumsum_grad", &cumsum_grad).grad(|g| {
        let p = g.pass(&["axis"]);
        Ok(vec![Some(g.op("_np_cumsum", &[g.dy(0)], &p)?), None])
    });
    t.def("_ravel_multi_index", &ravel).zero_grad();
    t.def("_unravel_index", &unravel).zero_grad();
    // `_backward_gather_nd` is `scatter_nd` adding up repeated indices
    let forms: [(&'static str, &'static dyn Operator); 2] = [
        ("scatter_nd", &scatter_nd),
        ("_backward_gather_nd", &backward_gather_nd),
    ];
    for (name, forward) in forms {
        t.def(name, forward)
            .dtype_rule(TypeRule::Outputs(|_, ins| {
                vec![ins.first().copied().flatten()]
            }))
            .grad(|g| {
                let d = g.op("gather_nd", &[g.dy(0), g.x(1)], &[])?;
                let di = if g.needs(1) {
                    Some(g.zeros_like(g.x(1))?)
                } else {
                    None
                };
                Ok(vec![Some(d), di])
            });
    }
    t.def("reset_arrays", &reset_arrays)
        .dtype_rule(TypeRule::Outputs(|_, _| Vec::new()))
        .signature(|p| {
            let n = crate::operator::def::param_int(p, "num_arrays", 0)?.max(0) as usize;
            let names: Vec<String> = (0..n).map(|i| format!("arg{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            Ok(Signature::simple(&refs)
                .named_outputs(&[], 0)
                .mutating(&(0..n).collect::<Vec<_>>()))
        });
    t.def("all_finite", &|c: &Call<'_>| all_finite(c, false))
        .signature(|_| Ok(Signature::simple(&["data"])))
        .dtype_rule(TypeRule::Fixed(|_| Some(DType::F32)));
    t.def("multi_all_finite", &|c: &Call<'_>| all_finite(c, true))
        .signature(|p| {
            let n = crate::operator::def::param_int(p, "num_arrays", 1)?.max(0) as usize;
            let names: Vec<String> = (0..n).map(|i| format!("array_{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            Ok(Signature::simple(&refs))
        })
        .dtype_rule(TypeRule::Fixed(|_| Some(DType::F32)));
    t.def("amp_multicast", &amp_multicast)
        .signature(|p| {
            let n = crate::operator::def::param_int(p, "num_outputs", 1)?.max(0) as usize;
            let names: Vec<String> = (0..n).map(|i| format!("data_{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            Ok(Signature::simple(&refs).with_outputs(n))
        })
        .dtype_rule(TypeRule::Outputs(|p, ins| {
            let narrow = crate::operator::def::param_flag(p, "cast_narrow", false).unwrap_or(false);
            amp_types(narrow, ins)
        }))
        .grad(|g| {
            let n = g.inputs.len();
            let mut ins: Vec<_> = g.ograds.to_vec();
            ins.extend_from_slice(g.inputs);
            let d = g.ops("_mxrt_amp_multicast_grad", &ins, &[])?;
            Ok(d.into_iter().take(n).map(Some).collect())
        });
    t.def("_mxrt_amp_multicast_grad", &amp_multicast_grad);
    t.def("IdentityAttachKLSparseReg", &kl_sparse_reg)
        .signature(|_| Ok(Signature::simple(&["data", "moving_avg"]).mutating(&[1])))
        .shape_rule(crate::operator::def::ShapeRule::Rule(|_, ins, _| {
            let avg = ins
                .first()
                .cloned()
                .flatten()
                .and_then(|x| x.get(1).map(|&d| vec![d]));
            Ok((vec![None, avg], Vec::new()))
        }))
        .grad(|g| {
            let p = g.pass(&["sparseness_target", "penalty", "momentum"]);
            let d = g.op("_mxrt_kl_sparse_reg_grad", &[g.dy(0), g.x(0), g.x(1)], &p)?;
            Ok(vec![Some(d), None])
        });
    t.def("_mxrt_kl_sparse_reg_grad", &kl_sparse_reg_grad);
}
