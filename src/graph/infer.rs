//! Shape and dtype inference over a graph, as MXNet's `InferShape`/`InferType` passes do it:
//! known input shapes (and the variables' `__shape__`/`__dtype__` hints) spread forward and
//! backward through the nodes until nothing changes.
//!
//! Forward, a node whose input shapes are all known gets its outputs from its operator's plan
//! (`operator::imperative::infer_outputs`: the invoke's own inference, without kernels).
//! Backward, the op's [`ShapeRule`] gives input shapes from parameters and other shapes
//! (elementwise ops share one shape; `FullyConnected` derives its weight from the data). Shapes
//! are partial: a known rank with 0 for each unknown dimension (MXNet's legacy convention), or
//! nothing. A conflict is MXNet's "Shape inconsistent" error naming the node.

use super::{InputKind, Node, NodeRef, Symbol, keyword_mismatch, op_params, post_order};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{PartialShape, ShapeRule, TypeRule};
use crate::operator::imperative::infer_outputs;
use crate::operator::op::TensorDesc;
use crate::operator::param;
use std::collections::HashMap;
use std::sync::Arc;

/// What the caller knows about the graph's inputs.
pub enum Known<T> {
    /// By input name (arguments or auxiliary states).
    Named(Vec<(String, T)>),
    /// In the order of the arguments (auxiliary states skipped).
    Positional(Vec<T>),
}

/// Inference results: one per argument, output and auxiliary state, and whether every entry of
/// the graph is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Inferred<T> {
    pub args: Vec<Option<T>>,
    pub outputs: Vec<Option<T>>,
    pub aux: Vec<Option<T>>,
    pub complete: bool,
}

/// Whether every dimension of `s` is known.
pub fn is_known(s: &PartialShape) -> bool {
    s.as_ref().is_some_and(|d| d.iter().all(|&x| x > 0))
}

fn show(s: &[i64]) -> String {
    let dims: Vec<String> = s
        .iter()
        .map(|&d| if d > 0 { d.to_string() } else { "None".into() })
        .collect();
    format!("[{}]", dims.join(","))
}

/// Merges `new` into `slot`; returns whether `slot` changed. Unknown dimensions (0) take the
/// other side's; known ones must agree.
fn merge(slot: &mut PartialShape, new: &[i64], node: &str) -> Result<bool> {
    let Some(old) = slot else {
        *slot = Some(new.to_vec());
        return Ok(true);
    };
    let conflict = || {
        Error::invalid(format!(
            "Error in operator {node}: Shape inconsistent, Provided = {}, inferred shape={}",
            show(old),
            show(new)
        ))
    };
    if old.len() != new.len() {
        return Err(conflict());
    }
    let mut merged = old.clone();
    for (m, &n) in merged.iter_mut().zip(new) {
        if *m <= 0 {
            *m = n.max(0);
        } else if n > 0 && n != *m {
            return Err(conflict());
        }
    }
    let changed = merged != *old;
    *slot = Some(merged);
    Ok(changed)
}

/// The graph's nodes with a slot per output entry.
struct Slots<T> {
    order: Vec<NodeRef>,
    index: HashMap<*const Node, usize>,
    values: Vec<Vec<Option<T>>>,
}

impl<T: Clone> Slots<T> {
    fn new(sym: &Symbol) -> Slots<T> {
        let order = post_order(&sym.outputs);
        let index = order
            .iter()
            .enumerate()
            .map(|(i, n)| (Arc::as_ptr(n), i))
            .collect();
        let values = order.iter().map(|n| vec![None; n.num_outputs()]).collect();
        Slots {
            order,
            index,
            values,
        }
    }
    fn node_index(&self, n: &NodeRef) -> usize {
        self.index[&Arc::as_ptr(n)]
    }
    fn get(&self, n: &NodeRef, out: u32) -> Option<T> {
        self.values[self.node_index(n)]
            .get(out as usize)
            .cloned()
            .flatten()
    }
    fn results(&self, sym: &Symbol, known: impl Fn(&Option<T>) -> bool) -> Inferred<T> {
        let of = |nodes: Vec<NodeRef>| -> Vec<Option<T>> {
            nodes.iter().map(|n| self.get(n, 0)).collect()
        };
        Inferred {
            args: of(sym.list_inputs(InputKind::ReadOnly)),
            outputs: sym
                .outputs
                .iter()
                .map(|e| self.get(&e.node, e.index))
                .collect(),
            aux: of(sym.list_inputs(InputKind::Auxiliary)),
            complete: self.values.iter().flatten().all(known),
        }
    }
}

/// Puts the caller's values on the variables they name (MXNet's `MatchArguments`).
fn place_known<T: Clone>(
    sym: &Symbol,
    slots: &mut Slots<T>,
    known: &Known<T>,
    what: &str,
) -> Result<Vec<bool>> {
    let mut given = vec![false; slots.order.len()];
    match known {
        Known::Positional(values) => {
            let args = sym.list_inputs(InputKind::ReadOnly);
            if values.len() > args.len() {
                return Err(Error::invalid(format!(
                    "{what}: {} values given for {} arguments",
                    values.len(),
                    args.len()
                )));
            }
            for (n, v) in args.iter().zip(values) {
                let i = slots.node_index(n);
                slots.values[i][0] = Some(v.clone());
                given[i] = true;
            }
        }
        Known::Named(pairs) => {
            let inputs = sym.list_inputs(InputKind::All);
            let mut matched = 0;
            for (name, v) in pairs {
                let mut hit = false;
                for n in inputs.iter().filter(|n| n.name() == *name) {
                    let i = slots.node_index(n);
                    slots.values[i][0] = Some(v.clone());
                    given[i] = true;
                    hit = true;
                }
                matched += usize::from(hit);
            }
            if matched != pairs.len() {
                let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
                let names: Vec<String> = inputs.iter().map(|n| n.name()).collect();
                return Err(keyword_mismatch(what, &keys, &names));
            }
        }
    }
    Ok(given)
}

/// Shapes of every argument, output and auxiliary state from the `known` input shapes
/// (unknown dimensions as 0). Fails on inconsistent shapes, naming the node.
pub fn infer_shapes(sym: &Symbol, known: &Known<Vec<i64>>) -> Result<Inferred<Vec<i64>>> {
    Ok(shape_slots(sym, known)?.results(sym, is_known))
}

/// The inferred shapes of every node's outputs, the nodes in `post_order(&sym.outputs)` order
/// (the order a graph runner walks): for ops whose own parameters leave dimensions open
/// (`zeros(shape=(0, 100))`), which take them from the graph.
pub fn infer_node_shapes(sym: &Symbol, known: &Known<Vec<i64>>) -> Result<Vec<Vec<PartialShape>>> {
    Ok(shape_slots(sym, known)?.values)
}

fn shape_slots(sym: &Symbol, known: &Known<Vec<i64>>) -> Result<Slots<Vec<i64>>> {
    // dtypes for the plans: what type inference gives from the hints alone, float32 otherwise
    let dtypes = infer_types_slots(sym, &Known::Named(Vec::new())).ok();
    let mut slots: Slots<Vec<i64>> = Slots::new(sym);
    let given = place_known(sym, &mut slots, known, "InferShape")?;
    for (i, n) in slots.order.clone().iter().enumerate() {
        if !given[i]
            && n.is_variable()
            && let Some(hint) = n.attrs().get("__shape__")
            && let Some(s) = param::shape(hint)
        {
            slots.values[i][0] = Some(s.iter().map(|&d| d.max(0)).collect());
        }
    }
    let dtype_of = |n: &NodeRef, out: u32| {
        dtypes
            .as_ref()
            .and_then(|t| t.get(n, out))
            .unwrap_or(DType::F32)
    };
    let mut planned = vec![false; slots.order.len()];
    let n_nodes = slots.order.len();
    for _round in 0..n_nodes + 2 {
        let mut changed = false;
        let order = slots.order.clone();
        for pass in 0..2 {
            let it: Box<dyn Iterator<Item = &NodeRef>> = if pass == 0 {
                Box::new(order.iter())
            } else {
                Box::new(order.iter().rev())
            };
            for n in it {
                changed |= shape_step(n, &mut slots, &mut planned, &dtype_of)?;
            }
        }
        if !changed {
            break;
        }
    }
    // MXNet rereads a variable's `__shape__` hint on every pass while its shape is not
    // complete, so dimensions filled into a hint that stays partial do not last
    for (i, n) in slots.order.clone().iter().enumerate() {
        if !given[i]
            && n.is_variable()
            && !is_known(&slots.values[i][0])
            && let Some(hint) = n.attrs().get("__shape__")
            && let Some(s) = param::shape(hint)
        {
            slots.values[i][0] = Some(s.iter().map(|&d| d.max(0)).collect());
        }
    }
    Ok(slots)
}

/// One node's inference; returns whether any shape changed.
fn shape_step(
    n: &NodeRef,
    slots: &mut Slots<Vec<i64>>,
    planned: &mut [bool],
    dtype_of: &dyn Fn(&NodeRef, u32) -> DType,
) -> Result<bool> {
    let d = n.data();
    let Some(def) = d.op else {
        return Ok(false);
    };
    let me = slots.node_index(n);
    let params = op_params(&d.attrs);
    let mut changed = false;
    let ins: Vec<PartialShape> = d
        .inputs
        .iter()
        .map(|e| slots.get(&e.node, e.index))
        .collect();
    let outs: Vec<PartialShape> = slots.values[me].clone();
    let proposals: Vec<(usize, Vec<i64>)> = match def.graph.shape {
        ShapeRule::Forward => Vec::new(),
        ShapeRule::Same => {
            let mut unified: PartialShape = None;
            let sides = ins
                .iter()
                .map(|s| ("input", s))
                .enumerate()
                .chain(outs.iter().map(|s| ("output", s)).enumerate());
            for (i, (side, s)) in sides {
                if let Some(s) = s {
                    let expected = unified.clone();
                    merge(&mut unified, s, &d.name).map_err(|_| {
                        Error::invalid(format!(
                            "Error in operator {0}: Incompatible attr in node {0} at {i}-th \
                             {side}: expected {1}, got {2}",
                            d.name,
                            show(expected.as_deref().unwrap_or(&[])),
                            show(s)
                        ))
                    })?;
                }
            }
            let mut p: Vec<(usize, Vec<i64>)> = Vec::new();
            if let Some(u) = unified {
                for i in 0..ins.len() {
                    p.push((i, u.clone()));
                }
                for o in 0..outs.len() {
                    changed |= merge(&mut slots.values[me][o], &u, &d.name)?;
                }
            }
            p
        }
        ShapeRule::Rule(f) => {
            let (for_ins, for_outs) = f(&params, &ins, &outs)
                .map_err(|e| e.context(format!("Error in operator {}", d.name)))?;
            for (o, s) in for_outs.into_iter().enumerate() {
                if let (Some(s), Some(slot)) = (s, slots.values[me].get_mut(o)) {
                    changed |= merge(slot, &s, &d.name)?;
                }
            }
            for_ins
                .into_iter()
                .enumerate()
                .filter_map(|(i, s)| s.map(|s| (i, s)))
                .collect()
        }
    };
    for (i, s) in proposals {
        if let Some(e) = d.inputs.get(i) {
            let k = slots.node_index(&e.node);
            changed |= merge(&mut slots.values[k][e.index as usize], &s, &d.name)?;
        }
    }
    if !planned[me] {
        let ins: Vec<PartialShape> = d
            .inputs
            .iter()
            .map(|e| slots.get(&e.node, e.index))
            .collect();
        if ins.iter().all(is_known) {
            let descs: Vec<TensorDesc> = d
                .inputs
                .iter()
                .zip(&ins)
                .map(|(e, s)| {
                    TensorDesc::new(s.as_deref().unwrap_or(&[]), dtype_of(&e.node, e.index))
                })
                .collect();
            let outs = infer_outputs(def, def.name, &params, &descs).map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("Error in operator {}: {}", d.name, e.message()),
                )
            })?;
            for (o, desc) in outs.iter().enumerate() {
                if let Some(slot) = slots.values[me].get_mut(o) {
                    changed |= merge(slot, &desc.shape, &d.name)?;
                }
            }
            planned[me] = true;
        } else if ins.iter().all(Option::is_some) && slots.values[me].iter().any(|s| !is_known(s)) {
            let dtypes: Vec<DType> = d
                .inputs
                .iter()
                .map(|e| dtype_of(&e.node, e.index))
                .collect();
            for (o, s) in partial_outputs(def, &params, &ins, &dtypes)
                .into_iter()
                .enumerate()
            {
                if let (Some(s), Some(slot)) = (s, slots.values[me].get_mut(o)) {
                    changed |= merge(slot, &s, &d.name)?;
                }
            }
        }
    }
    Ok(changed)
}

/// Stand-ins for unknown dimensions: primes unlikely to be real sizes, small enough that a
/// plan on them describes modest arrays.
const MARKERS: [i64; 24] = [
    101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179, 181, 191, 193,
    197, 199, 211, 223, 227,
];

/// The output shapes an op's plan gives for inputs of known rank with some unknown
/// dimensions (MXNet's partial shape inference, e.g. `dot` of a `(0, 3, 4)` and a `(4, 5)` is
/// `(0, 3, 5)`): the plan runs twice with every unknown dimension replaced by a different
/// stand-in each time; an output dimension is known where both runs agree. An op whose plan
/// refuses the stand-ins (its inputs must match where one is unknown) gives nothing.
fn partial_outputs(
    def: &'static crate::operator::def::OpDef,
    params: &[(String, String)],
    ins: &[PartialShape],
    dtypes: &[DType],
) -> Vec<PartialShape> {
    let unknown: usize = ins.iter().flatten().flatten().filter(|&&x| x <= 0).count();
    let free: Vec<i64> = MARKERS
        .iter()
        .copied()
        .filter(|m| !ins.iter().flatten().flatten().any(|x| x == m))
        .collect();
    // a custom operator's plan calls into its frontend: planned on known shapes only
    if unknown == 0 || free.len() < 2 * unknown || def.name.contains("Custom") {
        return Vec::new();
    }
    let run = |markers: &[i64]| -> Option<Vec<Vec<i64>>> {
        let mut next = markers.iter();
        let descs: Vec<TensorDesc> = ins
            .iter()
            .zip(dtypes)
            .map(|(s, &t)| {
                let dims: Vec<i64> = s
                    .iter()
                    .flatten()
                    .map(|&x| if x > 0 { x } else { *next.next().unwrap_or(&1) })
                    .collect();
                TensorDesc::new(&dims, t)
            })
            .collect();
        // the stand-in shapes are ones the op's plan never saw in a real call: a plan that
        // panics on them gives nothing rather than failing the inference
        let plan = || infer_outputs(def, def.name, params, &descs);
        let outs = std::panic::catch_unwind(std::panic::AssertUnwindSafe(plan))
            .ok()?
            .ok()?;
        Some(outs.into_iter().map(|d| d.shape.to_vec()).collect())
    };
    let (Some(a), Some(b)) = (run(&free[..unknown]), run(&free[unknown..2 * unknown])) else {
        return Vec::new();
    };
    a.into_iter()
        .zip(b)
        .map(|(x, y)| {
            (x.len() == y.len()).then(|| {
                x.iter()
                    .zip(&y)
                    .map(|(&p, &q)| if p == q { p } else { 0 })
                    .collect()
            })
        })
        .collect()
}

/// Dtypes of every argument, output and auxiliary state from the `known` input dtypes.
pub fn infer_types(sym: &Symbol, known: &Known<DType>) -> Result<Inferred<DType>> {
    let slots = infer_types_slots(sym, known)?;
    Ok(slots.results(sym, Option::is_some))
}

fn infer_types_slots(sym: &Symbol, known: &Known<DType>) -> Result<Slots<DType>> {
    let mut slots: Slots<DType> = Slots::new(sym);
    let given = place_known(sym, &mut slots, known, "InferType")?;
    for (i, n) in slots.order.clone().iter().enumerate() {
        if !given[i]
            && n.is_variable()
            && let Some(hint) = n.attrs().get("__dtype__")
            && let Ok(code) = hint.trim().parse::<i32>()
            && let Ok(t) = DType::from_code(code)
        {
            slots.values[i][0] = Some(t);
        }
    }
    let order = slots.order.clone();
    for _round in 0..order.len() + 2 {
        let mut changed = false;
        for pass in 0..2 {
            let it: Box<dyn Iterator<Item = &NodeRef>> = if pass == 0 {
                Box::new(order.iter())
            } else {
                Box::new(order.iter().rev())
            };
            for n in it {
                changed |= type_step(n, &mut slots)?;
            }
        }
        if !changed {
            break;
        }
    }
    Ok(slots)
}

fn set_type(slot: &mut Option<DType>, t: DType, node: &str) -> Result<bool> {
    match slot {
        None => {
            *slot = Some(t);
            Ok(true)
        }
        Some(old) if *old == t => Ok(false),
        Some(old) => Err(Error::invalid(format!(
            "Error in operator {node}: Type inconsistent, Provided = {}, inferred type = {}",
            old.name(),
            t.name()
        ))),
    }
}

/// The inputs of an op whose dtype is not unified with its other inputs and outputs (indices),
/// and the dtype they must have, if fixed.
fn index_inputs(op: &str) -> (&'static [usize], Option<DType>) {
    match op {
        "batch_take" => (&[1], Some(DType::I32)),
        "take" | "pick" | "gather_nd" | "scatter_nd" => (&[1], None),
        "Embedding" | "_contrib_SparseEmbedding" => (&[0], None),
        _ => (&[], None),
    }
}

fn type_step(n: &NodeRef, slots: &mut Slots<DType>) -> Result<bool> {
    let d = n.data();
    let Some(def) = d.op else {
        return Ok(false);
    };
    let me = slots.node_index(n);
    let params = op_params(&d.attrs);
    let mut changed = false;
    if d.inputs.is_empty() {
        // creation ops: the plan knows their dtype from the parameters alone
        if slots.values[me].iter().any(Option::is_none)
            && let Ok(outs) = infer_outputs(def, def.name, &params, &[])
        {
            for (o, desc) in outs.iter().enumerate() {
                if let Some(slot) = slots.values[me].get_mut(o) {
                    changed |= set_type(slot, desc.dtype, &d.name)?;
                }
            }
        }
        return Ok(changed);
    }
    // index inputs of the indexing ops keep a dtype of their own (MXNet's TakeOpType,
    // PickOpType, BatchTakeOpType, EmbeddingOpType...): they take no part in unification, and
    // batch_take's index is int32
    let (free, fixed) = index_inputs(def.name);
    for &k in free {
        if let (Some(t), Some(e)) = (fixed, d.inputs.get(k)) {
            let s = slots.node_index(&e.node);
            changed |= set_type(&mut slots.values[s][e.index as usize], t, &d.name)?;
        }
    }
    match def.graph.dtype {
        TypeRule::Same => {
            let mut unified = None;
            let same = |k: &usize| !free.contains(k);
            for (_, e) in d.inputs.iter().enumerate().filter(|(k, _)| same(k)) {
                if let Some(t) = slots.get(&e.node, e.index) {
                    set_type(&mut unified, t, &d.name)?;
                }
            }
            for t in slots.values[me].iter().flatten() {
                set_type(&mut unified, *t, &d.name)?;
            }
            if let Some(t) = unified {
                for (_, e) in d.inputs.iter().enumerate().filter(|(k, _)| same(k)) {
                    let k = slots.node_index(&e.node);
                    changed |= set_type(&mut slots.values[k][e.index as usize], t, &d.name)?;
                }
                for o in 0..slots.values[me].len() {
                    changed |= set_type(&mut slots.values[me][o], t, &d.name)?;
                }
            }
        }
        TypeRule::Fixed(f) => {
            if let Some(t) = f(&params) {
                for o in 0..slots.values[me].len() {
                    changed |= set_type(&mut slots.values[me][o], t, &d.name)?;
                }
            }
        }
        TypeRule::Outputs(f) => {
            let ins: Vec<Option<DType>> =
                d.inputs.iter().map(|e| slots.get(&e.node, e.index)).collect();
            for (o, t) in f(&params, &ins).into_iter().enumerate() {
                if let (Some(t), Some(slot)) = (t, slots.values[me].get_mut(o)) {
                    changed |= set_type(slot, t, &d.name)?;
                }
            }
        }
    }
    Ok(changed)
}
