//! Embeddings: `Embedding` and `_contrib_SparseEmbedding` (rows of a weight matrix picked by
//! index), with their weight gradient `_mxrt_embedding_grad`, row_sparse when `sparse_grad` asks
//! for it (always for `_contrib_SparseEmbedding`), as MXNet's backward gives it.

use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::format::StorageType;
use crate::operator::def::{ParamList, PartialShape, ShapeRule, Signature, TypeRule, param};
use crate::operator::kernel::Element;
use crate::operator::kernel::map::Ptr;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::stype::{self, StorageRule};
use crate::parallel::for_ranges;

/// The parameters both embedding ops take.
struct EmbedParams {
    input_dim: i64,
    output_dim: i64,
    dtype: DType,
}

fn embed_params(call: &Call<'_>) -> Result<EmbedParams> {
    let p = call.params;
    let input_dim = p.required("input_dim", param::int, "an integer")?;
    let output_dim = p.required("output_dim", param::int, "an integer")?;
    let dtype = p.or("dtype", param::dtype, "a dtype name", DType::F32)?;
    p.optional("sparse_grad", param::boolean, "a boolean")?;
    p.optional("deterministic", param::boolean, "a boolean")?;
    for (key, v) in [("input_dim", input_dim), ("output_dim", output_dim)] {
        if v < 1 {
            return Err(Error::invalid(format!(
                "operator {}: parameter '{key}' must be positive, got {v}",
                call.name
            )));
        }
    }
    Ok(EmbedParams {
        input_dim,
        output_dim,
        dtype,
    })
}

/// Index `v` clipped to `0..n` (MXNet's embedding clips out-of-range indices).
fn clip_index(v: f64, n: usize) -> usize {
    if v.is_nan() || v < 0.0 {
        0
    } else {
        (v as usize).min(n - 1)
    }
}

fn indices(t: &crate::operator::tensor::Tensor, n: usize) -> Vec<usize> {
    crate::with_element!(t.dtype, I => t.slice::<I>().iter().map(|v| clip_index(v.to_f64(), n)).collect())
}

/// `Embedding(data, weight)`: `out[i..., :] = weight[clip(data[i...]), :]`.
fn embedding(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let p = embed_params(call)?;
    let (data, weight) = (&ins[0], &ins[1]);
    if weight.shape[..] != [p.input_dim, p.output_dim] {
        return Err(Error::invalid(format!(
            "operator {}: weight has shape {:?}, expected ({}, {}) from input_dim and output_dim",
            call.name,
            &weight.shape[..],
            p.input_dim,
            p.output_dim
        )));
    }
    let _ = p.dtype; // the weight's dtype decides (MXNet's type inference prefers it)
    let dtype = weight.dtype;
    let mut shape = data.shape.to_vec();
    shape.push(p.output_dim);
    let (rows, width) = (p.input_dim as usize, p.output_dim as usize);
    Ok(Plan::new(vec![TensorDesc::new(&shape, dtype)], move |k| {
        let idx = indices(&k.inputs[0], rows);
        crate::with_element!(dtype, T => {
            let w = k.inputs[1].slice::<T>();
            let out = Ptr(k.outputs[0].slice_mut::<T>().as_mut_ptr());
            for_ranges(idx.len(), width, |a, b| {
                for (i, &r) in idx[a..b].iter().enumerate() {
                    let dst = (a + i) * width;
                    // SAFETY: the output holds `idx.len() * width` elements; this range writes
                    // rows a..b only, and ranges are disjoint.
                    let o = unsafe { std::slice::from_raw_parts_mut(out.get().add(dst), width) };
                    o.copy_from_slice(&w[r * width..(r + 1) * width]);
                }
            });
        });
        Ok(())
    }))
}

/// `_mxrt_embedding_grad(dy, data, weight)`: the weight's gradient, `dw[r] = Σ dy[i]` over the
/// positions `i` whose (clipped) index is `r`.
fn embedding_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    call.params
        .optional("sparse_grad", param::boolean, "a boolean")?;
    let (dy, data, weight) = (&ins[0], &ins[1], &ins[2]);
    let (rows, width) = (
        weight.shape.first().copied().unwrap_or(0).max(0) as usize,
        weight.shape.get(1).copied().unwrap_or(0).max(0) as usize,
    );
    if weight.shape.len() != 2 || dy.size() != data.size() * width || rows == 0 {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for indices {:?} into a {:?} weight",
            call.name,
            &dy.shape[..],
            &data.shape[..],
            &weight.shape[..]
        )));
    }
    let dtype = weight.dtype;
    let gdt = dy.dtype;
    Ok(Plan::new(vec![weight.clone()], move |k| {
        let idx = indices(&k.inputs[1], rows);
        let (start, order) = by_row(&idx, rows);
        let (inp, outs) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => {
            let dw = Ptr(outs.slice_mut::<T>().as_mut_ptr());
            // float32 sums where the gradient has the weight's float type, as MXNet's kernel
            // does; each sum rounds to the weight's dtype at every step, in position order
            let f32_sums = gdt == dtype && matches!(dtype, DType::F32 | DType::F16 | DType::BF16);
            crate::with_element!(gdt, G => {
                let g = inp.slice::<G>();
                // each destination row is one task's: rows no index picks are zeroed, a picked
                // row starts from its first gradient row and adds the others
                for_ranges(rows, width, |a, b| {
                    for r in a..b {
                        // SAFETY: the output holds `rows * width` elements; this range writes
                        // rows a..b only, and ranges are disjoint.
                        let dst = unsafe { std::slice::from_raw_parts_mut(dw.get().add(r * width), width) };
                        let picked = &order[start[r]..start[r + 1]];
                        let Some((&first, rest)) = picked.split_first() else {
                            dst.fill(T::zero());
                            continue;
                        };
                        let src = |i: usize| &g[i * width..(i + 1) * width];
                        if f32_sums {
                            dst.iter_mut().zip(src(first)).for_each(|(a, v)| *a = T::from_f32(v.to_f32()));
                            for &i in rest {
                                for (a, v) in dst.iter_mut().zip(src(i)) {
                                    *a = T::from_f32(a.to_f32() + v.to_f32());
                                }
                            }
                        } else {
                            dst.iter_mut().zip(src(first)).for_each(|(a, v)| *a = T::from_f64(v.to_f64()));
                            for &i in rest {
                                for (a, v) in dst.iter_mut().zip(src(i)) {
                                    *a = T::from_f64(a.to_f64() + v.to_f64());
                                }
                            }
                        }
                    }
                });
            });
        });
        Ok(())
    }))
}

/// The positions of `idx` grouped by the row they pick (a counting sort): those picking row
/// `r` are `order[start[r]..start[r + 1]]`, in increasing order.
fn by_row(idx: &[usize], rows: usize) -> (Vec<usize>, Vec<usize>) {
    let mut start = vec![0usize; rows + 1];
    for &r in idx {
        start[r + 1] += 1;
    }
    for r in 0..rows {
        start[r + 1] += start[r];
    }
    let mut next = start.clone();
    let mut order = vec![0usize; idx.len()];
    for (i, &r) in idx.iter().enumerate() {
        order[next[r]] = i;
        next[r] += 1;
    }
    (start, order)
}

/// The weight's shape from the parameters (Gluon's deferred initialisation infers it so).
fn embedding_shapes(
    p: &ParamList,
    ins: &[PartialShape],
    _outs: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let dim = |key: &str| -> Result<Option<i64>> {
        param(p, key)
            .map(|v| {
                param::int(v)
                    .ok_or_else(|| Error::invalid(format!("parameter {key}={v} is not an integer")))
            })
            .transpose()
    };
    let mut for_ins = vec![None; ins.len()];
    if let (Some(i), Some(o)) = (dim("input_dim")?, dim("output_dim")?)
        && for_ins.len() == 2
    {
        for_ins[1] = Some(vec![i, o]);
    }
    Ok((for_ins, Vec::new()))
}

pub(crate) fn register(t: &mut Entries) {
    for name in ["Embedding", "_contrib_SparseEmbedding"] {
        t.def(name, &embedding)
            .grad(|g| {
                let sparse = g.name == "_contrib_SparseEmbedding" || g.flag("sparse_grad", false);
                let p = [("sparse_grad", if sparse { "True" } else { "False" })];
                let dw = if g.needs(1) {
                    Some(g.op("_mxrt_embedding_grad", &[g.dy(0), g.x(0), g.x(1)], &p)?)
                } else {
                    None
                };
                // MXNet computes no gradient for the indices
                Ok(vec![None, dw])
            })
            .signature(|_| Ok(Signature::simple(&["data", "weight"])))
            .shape_rule(ShapeRule::Rule(embedding_shapes))
            .dtype_rule(TypeRule::Fixed(|p| {
                param(p, "dtype")
                    .and_then(param::dtype)
                    .or(Some(DType::F32))
            }));
    }
    t.def("_mxrt_embedding_grad", &embedding_backward)
        .stype(StorageRule::Custom(|p, _| {
            if stype::truthy(stype::param(p, "sparse_grad")) {
                StorageType::RowSparse
            } else {
                StorageType::Default
            }
        }));
}
