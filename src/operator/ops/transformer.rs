//! The contrib operators GluonNLP's transformer models call:
//!
//! - multi-head attention on MXNet's interleaved projections:
//!   `_contrib_interleaved_matmul_selfatt_qk`, `_contrib_interleaved_matmul_selfatt_valatt`,
//!   `_contrib_interleaved_matmul_encdec_qk`, `_contrib_interleaved_matmul_encdec_valatt`
//!   (strided batched GEMMs, [`crate::operator::kernel::attention`]); each has one internal
//!   gradient op `_mxrt_interleaved_*_grad` which, like MXNet's backward, has no gradient itself;
//! - `_contrib_boolean_mask` (the rows of `data` where `index` is nonzero: its output shape
//!   depends on the index's values, which the invoke reads before planning; gradient
//!   `_mxrt_boolean_mask_grad` scatters the rows back);
//! - `_contrib_index_copy` (rows of a new tensor written over an old one at given rows; both
//!   gradients are other operators);
//! - `_contrib_index_array` (every element's index, int64; zero gradient).

use super::{Entries, dims, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, TypeRule, Val};
use crate::operator::kernel::Element;
use crate::operator::kernel::attention::{View, batched, dense, slot};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

/// Which interleaved product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `(qkv) -> (batch·heads, seq, seq)`: scaled queries times keys.
    SelfQk,
    /// `(qkv, attention) -> (seq, batch, embed)`: attention times values.
    SelfValAtt,
    /// `(queries, keys_values) -> (batch·heads, q_seq, kv_seq)`.
    EncQk,
    /// `(keys_values, attention) -> (q_seq, batch, embed)`.
    EncValAtt,
}

/// The sizes of one attention product.
#[derive(Clone, Copy, Debug)]
struct Geom {
    heads: usize,
    batch: usize,
    /// Head dimension.
    dim: usize,
    /// Query and key sequence lengths.
    lq: usize,
    lk: usize,
}

impl Geom {
    fn batches(&self) -> usize {
        self.batch * self.heads
    }
    fn scale(&self) -> f64 {
        1.0 / (self.dim as f64).sqrt()
    }
}

fn bad(call: &Call<'_>, msg: String) -> Error {
    Error::invalid(format!("operator {}: {msg}", call.name))
}

/// Checks the inputs' ranks, shapes and dtype as MXNet's shape functions do; the geometry and
/// the output's shape.
fn attention_geom(call: &Call<'_>, kind: Kind) -> Result<(Geom, Vec<i64>, DType)> {
    let n = if kind == Kind::SelfQk { 1 } else { 2 };
    let ins = inputs(call, n)?;
    let heads = call.params.required("heads", param::int, "an integer")?;
    if heads < 1 {
        return Err(bad(
            call,
            format!("parameter 'heads' must be positive, got {heads}"),
        ));
    }
    let heads = heads as usize;
    let dtype = ins[0].dtype;
    for t in ins {
        if !matches!(t.dtype, DType::F32 | DType::F64) || t.dtype != dtype {
            return Err(bad(
                call,
                format!(
                    "Only FP32 is supported on CPU at the moment (mxrt also takes float64; got {})",
                    t.dtype.name()
                ),
            ));
        }
    }
    let rank3 = |i: usize, what: &str| -> Result<Vec<usize>> {
        let s = &ins[i].shape;
        if s.len() != 3 {
            return Err(bad(call, format!("{what}, currently is: {}D", s.len())));
        }
        Ok(dims(s))
    };
    let split = |embed: usize, what: &str| -> Result<usize> {
        if embed % heads != 0 {
            return Err(bad(
                call,
                format!("{what} ({embed}) is not a multiple of heads ({heads})"),
            ));
        }
        Ok(embed / heads)
    };
    let (g, out) = match kind {
        Kind::SelfQk | Kind::SelfValAtt => {
            let qkv = rank3(
                0,
                if kind == Kind::SelfQk {
                    "Input queries_keys_values should be 3D in seq_length-batch-proj_dim"
                } else {
                    "Input queries_keys_values should be 3D in seq_length-batch-3*proj_dim"
                },
            )?;
            if qkv[2] % 3 != 0 {
                return Err(bad(
                    call,
                    format!(
                        "queries_keys_values.shape[2] should be a multiple of 3, currently is {}",
                        qkv[2]
                    ),
                ));
            }
            let dim = split(
                qkv[2] / 3,
                "the projection size queries_keys_values.shape[2] / 3",
            )?;
            let g = Geom {
                heads,
                batch: qkv[1],
                dim,
                lq: qkv[0],
                lk: qkv[0],
            };
            if kind == Kind::SelfQk {
                (g, vec![g.batches(), g.lq, g.lq])
            } else {
                let att = rank3(
                    1,
                    "Input attention should be 3D in batch-seq_length-seq_length",
                )?;
                for (k, d) in [(1, att[1]), (2, att[2])] {
                    if d != qkv[0] {
                        return Err(bad(
                            call,
                            format!(
                                "queries_keys_values.shape[0] and attention.shape[{k}] should be the same, currently are {} and {d}",
                                qkv[0]
                            ),
                        ));
                    }
                }
                if att[0] != g.batches() {
                    return Err(bad(
                        call,
                        format!(
                            "attention.shape[0] should be equal to queries_keys_values.shape[1] * heads, currently are: {} and {}",
                            att[0],
                            g.batches()
                        ),
                    ));
                }
                (g, vec![g.lq, g.batch, heads * dim])
            }
        }
        Kind::EncQk => {
            let q = rank3(0, "Input queries should be 3D in seq_length-batch-proj_dim")?;
            let kv = rank3(
                1,
                "Input queries should be 3D in seq_length-batch-2*proj_dim",
            )?;
            if q[2] * 2 != kv[2] {
                return Err(bad(
                    call,
                    format!(
                        "keys_values.shape[2] should be equal to queries.shape[2] * 2, currently are: {} and {}",
                        kv[2], q[2]
                    ),
                ));
            }
            if q[1] != kv[1] {
                return Err(bad(
                    call,
                    format!(
                        "queries.shape[1] should be equal to keys_values.shape[1], currently are: {} and {}",
                        q[1], kv[1]
                    ),
                ));
            }
            let dim = split(q[2], "the projection size queries.shape[2]")?;
            let g = Geom {
                heads,
                batch: q[1],
                dim,
                lq: q[0],
                lk: kv[0],
            };
            (g, vec![g.batches(), g.lq, g.lk])
        }
        Kind::EncValAtt => {
            let kv = rank3(
                0,
                "Input keys_values should be 3D in seq_length-batch-2*proj_dim",
            )?;
            let att = rank3(
                1,
                "Input attention should be 3D in batch-seq_length-seq_length",
            )?;
            if kv[0] != att[2] {
                return Err(bad(
                    call,
                    format!(
                        "keys_values.shape[0] should be equal to attention.shape[2], currently are {} and {}",
                        kv[0], att[2]
                    ),
                ));
            }
            if kv[1] * heads != att[0] {
                return Err(bad(
                    call,
                    format!(
                        "attention.shape[0] should be equal to keys_values.shape[1] * heads, currently are: {} and {}",
                        att[0], kv[1]
                    ),
                ));
            }
            if kv[2] % 2 != 0 {
                return Err(bad(
                    call,
                    format!(
                        "keys_values.shape[2] should be a multiple of 2, currently is {}",
                        kv[2]
                    ),
                ));
            }
            let dim = split(kv[2] / 2, "the projection size keys_values.shape[2] / 2")?;
            let g = Geom {
                heads,
                batch: kv[1],
                dim,
                lq: att[1],
                lk: kv[0],
            };
            (g, vec![g.lq, g.batch, heads * dim])
        }
    };
    Ok((g, out.into_iter().map(|d| d as i64).collect(), dtype))
}

/// Queries' view: slot 0 of the interleaved projection (of three, two or one slots).
fn q_view(g: &Geom, slots: usize) -> View {
    slot(g.batch, g.heads, slots, g.dim, 0)
}

/// A `(seq, batch, heads·dim)` tensor as `batch·heads` matrices of `seq × dim`.
fn plain(g: &Geom) -> View {
    slot(g.batch, g.heads, 1, g.dim, 0)
}

fn attention(call: &Call<'_>, kind: Kind) -> Result<Plan> {
    let (g, out, dtype) = attention_geom(call, kind)?;
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let (ins, o) = (k.inputs, &mut k.outputs[0]);
        with_real!(dtype, T => {
            let a = ins[0].slice::<T>();
            let o = o.slice_mut::<T>();
            let scale = g.scale() as T;
            let bh = g.batches();
            match kind {
                Kind::SelfQk => batched(
                    bh, (g.lq, g.lq, g.dim), scale,
                    (a, slot(g.batch, g.heads, 3, g.dim, 0)),
                    (a, slot(g.batch, g.heads, 3, g.dim, 1).t()),
                    (o, dense(g.lq, g.lq)), false),
                Kind::SelfValAtt => batched(
                    bh, (g.lq, g.dim, g.lk), 1.0,
                    (ins[1].slice::<T>(), dense(g.lq, g.lk)),
                    (a, slot(g.batch, g.heads, 3, g.dim, 2)),
                    (o, plain(&g)), false),
                Kind::EncQk => batched(
                    bh, (g.lq, g.lk, g.dim), scale,
                    (a, q_view(&g, 1)),
                    (ins[1].slice::<T>(), slot(g.batch, g.heads, 2, g.dim, 0).t()),
                    (o, dense(g.lq, g.lk)), false),
                Kind::EncValAtt => batched(
                    bh, (g.lq, g.dim, g.lk), 1.0,
                    (ins[1].slice::<T>(), dense(g.lq, g.lk)),
                    (a, slot(g.batch, g.heads, 2, g.dim, 1)),
                    (o, plain(&g)), false),
            }
        });
        Ok(())
    }))
}

/// `_mxrt_interleaved_*_grad(forward inputs..., d_output)`: the gradients of the forward's
/// inputs (the projection slots a product does not read get zeros).
fn attention_grad(call: &Call<'_>, kind: Kind) -> Result<Plan> {
    let nf = if kind == Kind::SelfQk { 1 } else { 2 };
    let ins = inputs(call, nf + 1)?;
    let fwd = Call {
        inputs: &ins[..nf],
        ..*call
    };
    let (g, out, dtype) = attention_geom(&fwd, kind)?;
    if dims(&ins[nf].shape) != dims(&out) || ins[nf].dtype != dtype {
        return Err(bad(
            call,
            format!(
                "the output gradient has shape {:?}, the forward's output {:?}",
                &ins[nf].shape[..],
                out
            ),
        ));
    }
    let outs: Vec<TensorDesc> = ins[..nf].to_vec();
    Ok(Plan::new(outs, move |k| {
        let ins = k.inputs;
        with_real!(dtype, T => {
            let scale = g.scale() as T;
            let bh = g.batches();
            let dy = ins[nf].slice::<T>();
            let (first, rest) = k.outputs.split_at_mut(1);
            let d0 = first[0].slice_mut::<T>();
            match kind {
                Kind::SelfQk => {
                    let qkv = ins[0].slice::<T>();
                    d0.fill(0.0);
                    let (q, kk) = (slot(g.batch, g.heads, 3, g.dim, 0), slot(g.batch, g.heads, 3, g.dim, 1));
                    batched(bh, (g.lq, g.dim, g.lq), scale,
                        (dy, dense(g.lq, g.lq)), (qkv, kk), (&mut *d0, q), false);
                    batched(bh, (g.lq, g.dim, g.lq), scale,
                        (dy, dense(g.lq, g.lq).t()), (qkv, q), (d0, kk), false);
                }
                Kind::SelfValAtt => {
                    let (qkv, att) = (ins[0].slice::<T>(), ins[1].slice::<T>());
                    let datt = rest[0].slice_mut::<T>();
                    d0.fill(0.0);
                    let v = slot(g.batch, g.heads, 3, g.dim, 2);
                    batched(bh, (g.lk, g.dim, g.lq), 1.0,
                        (att, dense(g.lq, g.lk).t()), (dy, plain(&g)), (d0, v), false);
                    batched(bh, (g.lq, g.lk, g.dim), 1.0,
                        (dy, plain(&g)), (qkv, v.t()), (datt, dense(g.lq, g.lk)), false);
                }
                Kind::EncQk => {
                    let (q, kv) = (ins[0].slice::<T>(), ins[1].slice::<T>());
                    let dkv = rest[0].slice_mut::<T>();
                    let kk = slot(g.batch, g.heads, 2, g.dim, 0);
                    batched(bh, (g.lq, g.dim, g.lk), scale,
                        (dy, dense(g.lq, g.lk)), (kv, kk), (d0, q_view(&g, 1)), false);
                    dkv.fill(0.0);
                    batched(bh, (g.lk, g.dim, g.lq), scale,
                        (dy, dense(g.lq, g.lk).t()), (q, q_view(&g, 1)), (dkv, kk), false);
                }
                Kind::EncValAtt => {
                    let (kv, att) = (ins[0].slice::<T>(), ins[1].slice::<T>());
                    let datt = rest[0].slice_mut::<T>();
                    d0.fill(0.0);
                    let v = slot(g.batch, g.heads, 2, g.dim, 1);
                    batched(bh, (g.lk, g.dim, g.lq), 1.0,
                        (att, dense(g.lq, g.lk).t()), (dy, plain(&g)), (d0, v), false);
                    batched(bh, (g.lq, g.lk, g.dim), 1.0,
                        (dy, plain(&g)), (kv, v.t()), (datt, dense(g.lq, g.lk)), false);
                }
            }
        });
        Ok(())
    }))
}

fn selfatt_qk(call: &Call<'_>) -> Result<Plan> {
    attention(call, Kind::SelfQk)
}
fn selfatt_valatt(call: &Call<'_>) -> Result<Plan> {
    attention(call, Kind::SelfValAtt)
}
fn encdec_qk(call: &Call<'_>) -> Result<Plan> {
    attention(call, Kind::EncQk)
}
fn encdec_valatt(call: &Call<'_>) -> Result<Plan> {
    attention(call, Kind::EncValAtt)
}
fn selfatt_qk_grad(call: &Call<'_>) -> Result<Plan> {
    attention_grad(call, Kind::SelfQk)
}
fn selfatt_valatt_grad(call: &Call<'_>) -> Result<Plan> {
    attention_grad(call, Kind::SelfValAtt)
}
fn encdec_qk_grad(call: &Call<'_>) -> Result<Plan> {
    attention_grad(call, Kind::EncQk)
}
fn encdec_valatt_grad(call: &Call<'_>) -> Result<Plan> {
    attention_grad(call, Kind::EncValAtt)
}

/// The gradient of an attention product: its internal gradient op on the forward's inputs and
/// the output gradient.
fn grad_via(g: &mut GradCtx<'_>, op: &'static str) -> Result<Vec<Option<Val>>> {
    let mut ins: Vec<Val> = g.inputs.to_vec();
    ins.push(g.dy(0));
    let p = g.pass(&["heads"]);
    let grads = g.ops(op, &ins, &p)?;
    Ok(grads.into_iter().map(Some).collect())
}

/// The row count of `data` (or of `index`, its first dimension), checked against an index
/// vector of `len` entries.
fn rows_of(call: &Call<'_>, shape: &[i64], len: i64, what: &str) -> Result<()> {
    if shape.first().copied() != Some(len) {
        return Err(bad(
            call,
            format!(
                "{what} has shape {:?} but the index has {len} entries",
                shape
            ),
        ));
    }
    Ok(())
}

/// `_contrib_boolean_mask(data, index; axis=0)`: the rows `i` of `data` where `index[i]` is
/// nonzero, in order. The invoke reads the index's values before planning
/// ([`Call::input_values`]).
fn boolean_mask(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let axis = call.params.or("axis", param::int, "an integer", 0)?;
    if axis != 0 {
        return Err(bad(
            call,
            format!("Check failed: axis == 0 ({axis} vs. 0) : Not supported yet"),
        ));
    }
    let (data, index) = (&ins[0], &ins[1]);
    if data.shape.is_empty() {
        return Err(bad(call, "data must have at least one dimension".into()));
    }
    if index.shape.len() != 1 {
        return Err(bad(
            call,
            format!("the index must be 1-D, got shape {:?}", &index.shape[..]),
        ));
    }
    rows_of(call, &data.shape, index.shape[0], "data")?;
    let values = call.input_values.ok_or_else(|| {
        Error::not_supported(format!(
            "operator {}: its output shape depends on the index's values, which mxrt reads only \
             when the operator is invoked on NDArrays (not inside a symbolic graph)",
            call.name
        ))
    })?;
    let rows: Vec<usize> = values
        .iter()
        .enumerate()
        .filter(|(_, v)| **v != 0.0)
        .map(|(i, _)| i)
        .collect();
    let mut shape = data.shape.to_vec();
    shape[0] = rows.len() as i64;
    let row: usize = dims(&data.shape[1..]).iter().product();
    let dtype = data.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&shape, dtype)], move |k| {
        crate::with_element!(dtype, T => {
            let x = k.inputs[0].slice::<T>();
            let o = k.outputs[0].slice_mut::<T>();
            for (j, &r) in rows.iter().enumerate() {
                o[j * row..(j + 1) * row].copy_from_slice(&x[r * row..(r + 1) * row]);
            }
        });
        Ok(())
    }))
}

/// The entries of an index tensor as numbers.
fn index_values(t: &crate::operator::tensor::Tensor) -> Vec<f64> {
    crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
}

/// `_mxrt_boolean_mask_grad(d_output, index, data)`: `d_output`'s rows written back at the
/// rows the mask kept, zeros elsewhere; shaped like `data`.
fn boolean_mask_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (dy, index, data) = (&ins[0], &ins[1], &ins[2]);
    if index.shape.len() != 1 || data.shape.is_empty() {
        return Err(bad(
            call,
            "the index must be 1-D and data at least 1-D".into(),
        ));
    }
    rows_of(call, &data.shape, index.shape[0], "data")?;
    if dy.shape.len() != data.shape.len()
        || dy.shape[1..] != data.shape[1..]
        || dy.dtype != data.dtype
    {
        return Err(bad(
            call,
            format!(
                "the output gradient has shape {:?}, data {:?}",
                &dy.shape[..],
                &data.shape[..]
            ),
        ));
    }
    let row: usize = dims(&data.shape[1..]).iter().product();
    let kept = dy.shape[0].max(0) as usize;
    let dtype = data.dtype;
    let name = call.name.to_string();
    Ok(Plan::new(vec![data.clone()], move |k| {
        let idx = index_values(&k.inputs[1]);
        let rows: Vec<usize> = (0..idx.len()).filter(|&i| idx[i] != 0.0).collect();
        if rows.len() != kept {
            return Err(Error::invalid(format!(
                "operator {name}: the index keeps {} rows but the output gradient has {kept}",
                rows.len()
            )));
        }
        crate::with_element!(dtype, T => {
            let d = k.inputs[0].slice::<T>();
            let o = k.outputs[0].slice_mut::<T>();
            o.fill(T::zero());
            for (j, &r) in rows.iter().enumerate() {
                o[r * row..(r + 1) * row].copy_from_slice(&d[j * row..(j + 1) * row]);
            }
        });
        Ok(())
    }))
}

/// `_contrib_index_copy(old_tensor, index_vector, new_tensor)`: a copy of `old_tensor` whose
/// rows `index_vector[i]` are `new_tensor[i]`.
fn index_copy(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (old, index, new) = (&ins[0], &ins[1], &ins[2]);
    if index.shape.len() != 1 {
        return Err(bad(
            call,
            format!("index_vector must be 1-D, got shape {:?}", &index.shape[..]),
        ));
    }
    if old.shape.is_empty()
        || old.shape.len() != new.shape.len()
        || old.shape[1..] != new.shape[1..]
    {
        return Err(bad(
            call,
            format!(
                "new_tensor's shape {:?} must be old_tensor's {:?} but for the first dimension",
                &new.shape[..],
                &old.shape[..]
            ),
        ));
    }
    if new.shape[0] > old.shape[0] {
        return Err(bad(
            call,
            format!(
                "new_tensor has {} rows, more than old_tensor's {}",
                new.shape[0], old.shape[0]
            ),
        ));
    }
    rows_of(call, &new.shape, index.shape[0], "new_tensor")?;
    if new.dtype != old.dtype {
        return Err(bad(
            call,
            format!(
                "new_tensor is {} but old_tensor is {}",
                new.dtype.name(),
                old.dtype.name()
            ),
        ));
    }
    let row: usize = dims(&old.shape[1..]).iter().product();
    let nrows = old.shape[0];
    let dtype = old.dtype;
    let name = call.name.to_string();
    Ok(Plan::new(vec![old.clone()], move |k| {
        let idx = index_values(&k.inputs[1]);
        let mut rows = Vec::with_capacity(idx.len());
        for v in idx {
            let r = v as i64;
            if !(0..nrows).contains(&r) {
                return Err(Error::invalid(format!(
                    "operator {name}: index {v} is out of range for {nrows} rows"
                )));
            }
            rows.push(r as usize);
        }
        crate::with_element!(dtype, T => {
            let o = k.outputs[0].slice_mut::<T>();
            o.copy_from_slice(k.inputs[0].slice::<T>());
            let n = k.inputs[2].slice::<T>();
            for (i, &r) in rows.iter().enumerate() {
                o[r * row..(r + 1) * row].copy_from_slice(&n[i * row..(i + 1) * row]);
            }
        });
        Ok(())
    }))
}

/// `_contrib_index_array(data; axes)`: `out[i..., j]` is the index of element `i...` along
/// axis `axes[j]` (every axis without `axes`), int64.
fn index_array(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 1)?;
    let shape = dims(&ins[0].shape);
    let nd = shape.len();
    let axes: Vec<usize> = match call
        .params
        .optional("axes", param::shape, "a tuple of axes")?
    {
        Some(a) => {
            if nd == 0 && !a.is_empty() {
                return Err(bad(call, "axes given for a 0-dimensional array".into()));
            }
            a.iter()
                .map(|&x| x.rem_euclid(nd.max(1) as i64) as usize)
                .collect()
        }
        None => (0..nd).collect(),
    };
    let mut out: Vec<i64> = ins[0].shape.to_vec();
    out.push(axes.len() as i64);
    Ok(Plan::new(
        vec![TensorDesc::new(&out, DType::I64)],
        move |k| {
            let o = k.outputs[0].slice_mut::<i64>();
            let total: usize = shape.iter().product();
            let na = axes.len();
            let mut idx = vec![0usize; nd];
            for e in 0..total {
                for (j, &a) in axes.iter().enumerate() {
                    o[e * na + j] = idx[a] as i64;
                }
                for d in (0..nd).rev() {
                    idx[d] += 1;
                    if idx[d] < shape[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
            Ok(())
        },
    ))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("_contrib_interleaved_matmul_selfatt_qk", &selfatt_qk)
        .grad(|g| grad_via(g, "_mxrt_interleaved_selfatt_qk_grad"));
    t.def(
        "_contrib_interleaved_matmul_selfatt_valatt",
        &selfatt_valatt,
    )
    .grad(|g| grad_via(g, "_mxrt_interleaved_selfatt_valatt_grad"));
    t.def("_contrib_interleaved_matmul_encdec_qk", &encdec_qk)
        .grad(|g| grad_via(g, "_mxrt_interleaved_encdec_qk_grad"));
    t.def("_contrib_interleaved_matmul_encdec_valatt", &encdec_valatt)
        .grad(|g| grad_via(g, "_mxrt_interleaved_encdec_valatt_grad"));
    t.def("_mxrt_interleaved_selfatt_qk_grad", &selfatt_qk_grad);
    t.def(
        "_mxrt_interleaved_selfatt_valatt_grad",
        &selfatt_valatt_grad,
    );
    t.def("_mxrt_interleaved_encdec_qk_grad", &encdec_qk_grad);
    t.def("_mxrt_interleaved_encdec_valatt_grad", &encdec_valatt_grad);

    t.def("_contrib_boolean_mask", &boolean_mask)
        .reads_values(1)
        .grad(|g| {
            let dx = g.op("_mxrt_boolean_mask_grad", &[g.dy(0), g.x(1), g.x(0)], &[])?;
            Ok(vec![Some(dx), None])
        });
    t.def("_mxrt_boolean_mask_grad", &boolean_mask_grad)
        .grad(|g| {
            let p = g.pass(&["axis"]);
            let d = g.op("_contrib_boolean_mask", &[g.dy(0), g.x(1)], &p)?;
            Ok(vec![Some(d), None, None])
        });
    // the old tensor's gradient is the output's with the overwritten rows zeroed; the new
    // tensor's is the output's at those rows
    t.def("_contrib_index_copy", &index_copy).grad(|g| {
        let d_old = if g.needs(0) {
            let zero = g.zeros_like(g.x(2))?;
            Some(g.op("_contrib_index_copy", &[g.dy(0), g.x(1), zero], &[])?)
        } else {
            None
        };
        let d_new = if g.needs(2) {
            Some(g.op("take", &[g.dy(0), g.x(1)], &[("axis", "0")])?)
        } else {
            None
        };
        Ok(vec![d_old, None, d_new])
    });
    t.def("_contrib_index_array", &index_array)
        .zero_grad()
        .dtype_rule(TypeRule::Fixed(|_| Some(DType::I64)));
}
