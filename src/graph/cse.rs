//! Common-subexpression elimination, as MXNet's `EliminateCommonExpr` pass does it before an
//! executor runs a graph (`MXNET_ELIMINATE_COMMON_EXPR`, on unless set to 0).
//!
//! Two op nodes that read the same entries, apply the same op with the same attributes and
//! neither write an input nor draw random numbers (or keep state) compute the same values: the
//! second is dropped and its readers read the first. Rounds repeat until no pair is left, so
//! chains of equal nodes collapse. A graph output that then appears twice gets a `_copy` node
//! (named `<node>_<k>_copy`), so each output stays an array of its own.

use super::{Entry, Node, NodeData, NodeRef, Symbol, post_order};
use crate::error::Result;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Whether the pass is on: `MXNET_ELIMINATE_COMMON_EXPR` unset or anything but a false value.
pub fn enabled() -> bool {
    match std::env::var("MXNET_ELIMINATE_COMMON_EXPR") {
        Ok(v) => {
            let v = v.trim();
            !(v == "0" || v.eq_ignore_ascii_case("false"))
        }
        Err(_) => true,
    }
}

/// The graph an executor runs: `sym` with common subexpressions eliminated when the pass is
/// on, `sym` itself otherwise.
pub fn for_executor(sym: &Symbol) -> Result<Symbol> {
    if enabled() {
        eliminate_common_expr(sym)
    } else {
        Ok(sym.clone())
    }
}

/// Ops whose results are not a function of their inputs and attributes alone: random
/// sampling (and the ops that draw random numbers, like `Dropout`), and ops that keep state
/// between calls (MXNet's `FCreateOpState` and random-resource ops).
fn random_or_stateful(op: &str) -> bool {
    let lower = op.to_ascii_lowercase();
    lower.contains("random")
        || lower.starts_with("_sample")
        || lower.starts_with("sample_")
        || lower.contains("shuffle")
        || lower.contains("dropout")
        || matches!(
            op,
            "RNN" | "Custom" | "_CachedOp" | "_contrib_SyncBatchNorm"
        )
}

/// Whether node `n` may be merged with an equal node.
fn mergeable(n: &NodeData, node: &NodeRef) -> bool {
    let Some(def) = n.op else {
        return false;
    };
    if n.inputs.is_empty() || !def.graph.mutates.is_empty() || random_or_stateful(def.name) {
        return false;
    }
    // LeakyReLU draws random slopes in its rrelu form
    if def.name == "LeakyReLU"
        && n.attrs
            .get("act_type")
            .is_some_and(|t| t.trim_matches(['\'', '"']) == "rrelu")
    {
        return false;
    }
    node.signature().is_ok_and(|s| s.mutates.is_empty())
}

fn key(e: &Entry) -> (*const Node, u32) {
    (Arc::as_ptr(&e.node), e.index)
}

/// The pairs (kept, dropped) of equal nodes of one round.
fn common_nodes(sym: &Symbol) -> Vec<(NodeRef, NodeRef)> {
    let mut groups: BTreeMap<Vec<(usize, u32)>, Vec<NodeRef>> = BTreeMap::new();
    for n in post_order(&sym.outputs) {
        let d = n.data.read();
        if d.inputs.is_empty() {
            continue;
        }
        let k = d
            .inputs
            .iter()
            .map(|e| (key(e).0 as usize, e.index))
            .collect();
        drop(d);
        groups.entry(k).or_default().push(n);
    }
    let mut pairs = Vec::new();
    for group in groups.values().filter(|g| g.len() > 1) {
        let mut dropped: HashSet<usize> = HashSet::new();
        for i in 0..group.len() {
            if dropped.contains(&i) {
                continue;
            }
            let a = group[i].data();
            if !mergeable(&a, &group[i]) {
                continue;
            }
            for (j, other) in group.iter().enumerate().skip(i + 1) {
                if dropped.contains(&j) {
                    continue;
                }
                let b = other.data();
                let same_op = matches!((a.op, b.op), (Some(x), Some(y)) if std::ptr::eq(x, y));
                if same_op && a.attrs == b.attrs {
                    dropped.insert(j);
                    pairs.push((group[i].clone(), other.clone()));
                }
            }
        }
    }
    pairs
}

/// Points every reader of a dropped node (inputs, control dependencies, graph outputs) at the
/// node kept for it; the kept node takes the dropped one's control dependencies. A kept node
/// is never dropped in the same round (each node is in one group, by its inputs).
fn replace(sym: &mut Symbol, pairs: &[(NodeRef, NodeRef)]) {
    let map: HashMap<*const Node, &NodeRef> =
        pairs.iter().map(|(k, d)| (Arc::as_ptr(d), k)).collect();
    let order = post_order(&sym.outputs);
    for n in &order {
        let mut d = n.data.write();
        for e in d.inputs.iter_mut() {
            if let Some(k) = map.get(&Arc::as_ptr(&e.node)) {
                e.node = (*k).clone();
            }
        }
        for c in d.control_deps.iter_mut() {
            if let Some(k) = map.get(&Arc::as_ptr(c)) {
                *c = (*k).clone();
            }
        }
    }
    for (kept, dropped) in pairs {
        let deps = dropped.data.read().control_deps.clone();
        kept.data.write().control_deps.extend(deps);
    }
    for e in sym.outputs.iter_mut() {
        if let Some(k) = map.get(&Arc::as_ptr(&e.node)) {
            e.node = (*k).clone();
        }
    }
}

/// `sym` with its common subexpressions eliminated (a new graph; `sym` is unchanged).
pub fn eliminate_common_expr(sym: &Symbol) -> Result<Symbol> {
    let mut out = sym.deep_copy();
    loop {
        let pairs = common_nodes(&out);
        if pairs.is_empty() {
            break;
        }
        replace(&mut out, &pairs);
    }
    // an output entry seen before becomes a copy of it
    let copy = Symbol::op_def("_copy")?;
    let mut seen: HashMap<(*const Node, u32), usize> = HashMap::new();
    for i in 0..out.outputs.len() {
        let e = out.outputs[i].clone();
        match seen.get_mut(&key(&e)) {
            None => {
                seen.insert(key(&e), 0);
            }
            Some(count) => {
                let name = format!("{}_{count}_copy", e.node.name());
                *count += 1;
                let node = Node::new(NodeData {
                    op: Some(copy),
                    name,
                    attrs: BTreeMap::new(),
                    inputs: vec![e],
                    control_deps: Vec::new(),
                    version: 0,
                });
                out.outputs[i] = Entry {
                    node,
                    index: 0,
                    version: 0,
                };
            }
        }
    }
    Ok(out)
}
