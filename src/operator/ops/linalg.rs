//! Matrix products: `dot`, `batch_dot` and `FullyConnected`, on the GEMM kernel.

use crate::ndarray::format::StorageType;
use crate::operator::stype::{self, StorageRule};
use super::{Entries, inputs, same_dtype};
use crate::error::{Error, Result};
use crate::operator::kernel::gemm::{Operand, matmul};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

fn transposes(call: &Call<'_>) -> Result<(bool, bool)> {
    let p = call.params;
    let ta = p.or("transpose_a", param::boolean, "a boolean", false)?;
    let tb = p.or("transpose_b", param::boolean, "a boolean", false)?;
    if let Some(s) = p.optional("forward_stype", param::choice, "a storage type")?
        && s != "default"
    {
        return Err(Error::not_supported(format!(
            "operator {}: forward_stype '{s}' (sparse storage) is not supported",
            call.name
        )));
    }
    Ok((ta, tb))
}

/// `dot(a, b)`: `a` flattened to 2-D over all axes but its last (first, transposed), `b` over all
/// but its first (last, transposed); 1-D · 1-D is an inner product.
fn dot(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    same_dtype(call, 0, 1)?;
    let (ta, tb) = transposes(call)?;
    let (a, b) = (&ins[0], &ins[1]);
    if a.shape.is_empty() || b.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: operands must have at least one dimension",
            call.name
        )));
    }
    let split = |s: &[i64], lead: bool| -> (i64, i64, Vec<i64>) {
        // (kept dims product, contracted dim, kept dims)
        if lead {
            (s[1..].iter().product(), s[0], s[1..].to_vec())
        } else {
            (
                s[..s.len() - 1].iter().product(),
                s[s.len() - 1],
                s[..s.len() - 1].to_vec(),
            )
        }
    };
    let (m, ka, mut out) = split(&a.shape, ta);
    let (n, kb, rest) = split(&b.shape, !tb);
    if ka != kb {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} do not align for dot (transpose_a={ta}, transpose_b={tb})",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    out.extend(rest);
    if out.is_empty() {
        out.push(1);
    }
    let (m, n, k) = (m as usize, n as usize, ka as usize);
    let dtype = a.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, dtype)],
        move |kargs| {
            crate::with_element!(dtype, T => {
                let (x, y) = (kargs.inputs[0].slice::<T>(), kargs.inputs[1].slice::<T>());
                matmul(m, n, k, Operand { data: x, transposed: ta }, Operand { data: y, transposed: tb },
                    kargs.outputs[0].slice_mut::<T>(), false);
            });
            Ok(())
        },
    ))
}

fn batch_dot(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    same_dtype(call, 0, 1)?;
    let (ta, tb) = transposes(call)?;
    let (a, b) = (&ins[0], &ins[1]);
    if a.shape.len() < 3
        || a.shape.len() != b.shape.len()
        || a.shape[..a.shape.len() - 2] != b.shape[..b.shape.len() - 2]
    {
        return Err(Error::invalid(format!(
            "operator {}: batch_dot needs arrays of at least 3 dimensions with equal batch dimensions, got {:?} and {:?}",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    let nd = a.shape.len();
    let (ar, ac) = (a.shape[nd - 2], a.shape[nd - 1]);
    let (br, bc) = (b.shape[nd - 2], b.shape[nd - 1]);
    let (m, ka) = if ta { (ac, ar) } else { (ar, ac) };
    let (kb, n) = if tb { (bc, br) } else { (br, bc) };
    if ka != kb {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} do not align for batch_dot",
            call.name,
            &a.shape[..],
            &b.shape[..]
        )));
    }
    let batch: usize = a.shape[..nd - 2].iter().map(|&d| d as usize).product();
    let mut out = a.shape[..nd - 2].to_vec();
    out.extend([m, n]);
    let (m, n, k) = (m as usize, n as usize, ka as usize);
    let dtype = a.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, dtype)],
        move |kargs| {
            crate::with_element!(dtype, T => {
                let (x, y) = (kargs.inputs[0].slice::<T>(), kargs.inputs[1].slice::<T>());
                let o = kargs.outputs[0].slice_mut::<T>();
                for i in 0..batch {
                    matmul(m, n, k,
                        Operand { data: &x[i * m * k..(i + 1) * m * k], transposed: ta },
                        Operand { data: &y[i * k * n..(i + 1) * k * n], transposed: tb },
                        &mut o[i * m * n..(i + 1) * m * n], false);
                }
            });
            Ok(())
        },
    ))
}

/// `FullyConnected(data, weight[, bias])`: `data · weightᵀ + bias`, data flattened to 2-D
/// (`flatten=True`) or applied over its last axis.
fn fully_connected(call: &Call<'_>) -> Result<Plan> {
    let p = call.params;
    let hidden = p.required("num_hidden", param::int, "an integer")?;
    let no_bias = p.or("no_bias", param::boolean, "a boolean", false)?;
    let flatten = p.or("flatten", param::boolean, "a boolean", true)?;
    let ins = inputs(call, if no_bias { 2 } else { 3 })?;
    for i in 1..ins.len() {
        same_dtype(call, 0, i)?;
    }
    let (x, w) = (&ins[0], &ins[1]);
    if x.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: data must have at least one dimension",
            call.name
        )));
    }
    let (rows, k, mut out) = if flatten {
        let k: i64 = x.shape[1..].iter().product();
        (x.shape[0], k, vec![x.shape[0]])
    } else {
        let k = x.shape[x.shape.len() - 1];
        (
            x.shape[..x.shape.len() - 1].iter().product(),
            k,
            x.shape[..x.shape.len() - 1].to_vec(),
        )
    };
    out.push(hidden);
    if w.shape[..] != [hidden, k] {
        return Err(Error::invalid(format!(
            "operator {}: weight has shape {:?}, expected {:?}",
            call.name,
            &w.shape[..],
            [hidden, k]
        )));
    }
    if !no_bias && ins[2].shape[..] != [hidden] {
        return Err(Error::invalid(format!(
            "operator {}: bias has shape {:?}, expected [{hidden}]",
            call.name,
            &ins[2].shape[..]
        )));
    }
    let (m, n, k) = (rows as usize, hidden as usize, k as usize);
    let dtype = x.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, dtype)],
        move |kargs| {
            crate::with_element!(dtype, T => {
                let o = kargs.outputs[0].slice_mut::<T>();
                let accumulate = !no_bias;
                if !no_bias {
                    let b = kargs.inputs[2].slice::<T>();
                    for r in 0..m {
                        o[r * n..(r + 1) * n].copy_from_slice(b);
                    }
                }
                matmul(m, n, k,
                    Operand { data: kargs.inputs[0].slice::<T>(), transposed: false },
                    Operand { data: kargs.inputs[1].slice::<T>(), transposed: true },
                    o, accumulate);
            });
            Ok(())
        },
    ))
}

pub(crate) fn register(t: &mut Entries) {
    // dot(csr.T, dense) is row_sparse, as in MXNet
    t.push(("dot", &dot)).stype(StorageRule::Custom(|p, ins| {
        if ins.first() == Some(&StorageType::Csr)
            && stype::truthy(stype::param(p, "transpose_a"))
            && ins.get(1) == Some(&StorageType::Default)
        {
            StorageType::RowSparse
        } else {
            StorageType::Default
        }
    }));
    t.push(("batch_dot", &batch_dot));
    t.push(("FullyConnected", &fully_connected));
}
