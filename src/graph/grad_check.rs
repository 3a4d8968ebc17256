//! The check MXNet's gradient pass makes when an executor that computes gradients is bound:
//! every op a non-zero gradient reaches must have a gradient. MXNet builds the backward graph
//! at bind and fails there ("Operator batch_take is non-differentiable ..."); mxrt records the
//! forward and differentiates at `backward`, so without this check the same graph would bind
//! and fail only later.
//!
//! Gradients start non-zero at the outputs and travel back through every op with a gradient
//! (to all its inputs but the index inputs of the indexing ops, which get none); an op whose
//! inputs' gradients are zero (`BlockGrad`, comparisons) stops them.

use super::{NodeRef, Symbol, post_order};
use crate::error::{Error, Result};
use crate::operator::def::Gradient;
use std::collections::HashSet;
use std::sync::Arc;

/// Inputs that receive no gradient from an op that has one (indices).
fn no_grad_input(op: &str, i: usize) -> bool {
    match op {
        "take" | "pick" | "gather_nd" | "scatter_nd" | "batch_take" => i == 1,
        "Embedding" | "_contrib_SparseEmbedding" => i == 0,
        _ => false,
    }
}

/// Fails, naming the op as MXNet does, when a non-zero gradient reaches an op without one.
pub fn check_differentiable(sym: &Symbol) -> Result<()> {
    let order: Vec<NodeRef> = post_order(&sym.outputs);
    let mut reached: HashSet<*const super::Node> =
        sym.outputs.iter().map(|e| Arc::as_ptr(&e.node)).collect();
    for n in order.iter().rev() {
        if !reached.contains(&Arc::as_ptr(n)) {
            continue;
        }
        let d = n.data();
        let Some(def) = d.op else {
            continue;
        };
        if d.inputs.is_empty() {
            continue;
        }
        match def.grad {
            Gradient::Zero => {}
            Gradient::None => {
                return Err(Error::invalid(format!(
                    "Operator {} is non-differentiable because it didn't register FGradient \
                     attribute.",
                    def.name
                )));
            }
            Gradient::Ops(_) => {
                for (i, e) in d.inputs.iter().enumerate() {
                    if !no_grad_input(def.name, i) {
                        reached.insert(Arc::as_ptr(&e.node));
                    }
                }
            }
        }
    }
    Ok(())
}
