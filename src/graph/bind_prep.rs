//! What an executor prepares from a graph before it runs it.
//!
//! Creation ops with unknown dimensions in a bound graph. A node such as `zeros(shape=(0, 100))`
//! (the begin states of MXNet's unrolled RNN cells) has its unknown dimensions inferred from
//! the rest of the graph; MXNet's executor then fills an output of the inferred shape. mxrt's
//! graph runner plans each op from its parameters, so before an executor runs such a graph the
//! node's `shape` parameter is set to the inferred shape (in a copy of the graph).

use super::infer::{Known, infer_shapes};
use super::{NodeRef, Symbol, post_order};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::Result;
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use crate::operator::param;

/// The storage type a variable asks for (`__storage_type__`, set by `mx.sym.var(stype=...)`),
/// when it is a sparse one.
pub fn storage_hint(n: &NodeRef) -> Option<StorageType> {
    let code = n
        .attrs()
        .get("__storage_type__")?
        .trim()
        .parse::<i32>()
        .ok()?;
    StorageType::from_code(code).filter(|&s| s != StorageType::Default)
}

/// A zero sparse array of `stype` (int64 indices), as `simple_bind` allocates a variable that
/// asks for sparse storage; `None` where sparse arrays cannot live (GPU contexts).
pub fn sparse_zeros(
    stype: StorageType,
    shape: &[i64],
    dtype: DType,
    ctx: Context,
) -> Option<NDArray> {
    if !ctx.is_host() {
        return None;
    }
    let aux = vec![DType::I64; stype.num_aux()];
    NDArray::new_sparse(stype, shape, ctx, dtype, &aux).ok()
}

fn has_unknown_creation(sym: &Symbol) -> bool {
    post_order(&sym.outputs).iter().any(|n| {
        let d = n.data.read();
        d.op.is_some()
            && d.inputs.is_empty()
            && d.attrs
                .get("shape")
                .and_then(|s| param::shape(s))
                .is_some_and(|s| s.iter().any(|&x| x <= 0))
    })
}

fn shape_text(s: &[i64]) -> String {
    let d: Vec<String> = s.iter().map(|x| x.to_string()).collect();
    if d.len() == 1 {
        format!("({},)", d[0])
    } else {
        format!("({})", d.join(", "))
    }
}

/// A copy of `sym` whose creation nodes with unknown dimensions have the shapes inferred from
/// the bound inputs' `shapes`; `None` when the graph has no such node (or inference cannot
/// complete them).
pub fn fill_creation_shapes(sym: &Symbol, shapes: &[(String, Vec<i64>)]) -> Result<Option<Symbol>> {
    if !has_unknown_creation(sym) {
        return Ok(None);
    }
    let internals = sym.internals();
    let inferred = infer_shapes(&internals, &Known::Named(shapes.to_vec()))?;
    let mut by_node = std::collections::HashMap::new();
    for (e, s) in internals.outputs.iter().zip(&inferred.outputs) {
        if e.index == 0
            && let Some(s) = s
        {
            by_node.insert(std::sync::Arc::as_ptr(&e.node), s.clone());
        }
    }
    let copy = sym.deep_copy();
    let mut changed = false;
    for (orig, new) in post_order(&sym.outputs)
        .iter()
        .zip(post_order(&copy.outputs))
    {
        let mut d = new.data.write();
        let Some(hint) = d.attrs.get("shape").and_then(|s| param::shape(s)) else {
            continue;
        };
        if d.op.is_none() || !d.inputs.is_empty() || hint.iter().all(|&x| x > 0) {
            continue;
        }
        if let Some(s) = by_node.get(&std::sync::Arc::as_ptr(orig))
            && s.len() == hint.len()
            && s.iter().all(|&x| x > 0)
        {
            d.attrs.insert("shape".into(), shape_text(s));
            changed = true;
        }
    }
    Ok(changed.then_some(copy))
}
