//! Static memory planning of a graph: which buffer each value of a run lives in.
//!
//! A [`PlanGraph`] is a list of values (entries: their bytes, and whether they live outside the
//! plan: graph inputs, bound gradient arrays, head gradients) and of nodes in execution order,
//! each reading and writing entries. [`plan`] walks the nodes once and gives every other entry a
//! slot of a pool of buffers:
//!
//! - **in place**: an output of a node whose kernel may write over its input
//!   ([`Aliasing::Elementwise`]: elementwise unary and binary ops, activations) takes the buffer
//!   of an input of the same size and dtype when that input has no other reader left;
//! - **by liveness**: a buffer is free again after the last node reading any value placed in it
//!   has run; a new value takes the smallest free buffer at least its size (up to 16 times
//!   bigger), else the largest free smaller one (grown to its size, not smaller than a sixteenth
//!   of it), else a new buffer;
//! - values listed as the graph's outputs stay live to the end.
//!
//! This is MXNet's `MXPlanMemory` (its match range 16 and its order of choices), so the total of
//! the pool, [`MemPlan::total_bytes`], has the meaning of the `Total N MB allocated` that MXNet's
//! `MXExecutorPrint` reports: the internal values and outputs of forward (and, for a training
//! executor, backward) of one run, arguments and gradient arrays excluded.
//!
//! [`forward_backward`] builds the graph an executor plans: the forward nodes of a flattened
//! graph planned for its input descriptions, and for training the backward nodes each op's
//! gradient definition applies (through [`GradGraph`], as the autograd tape runs them), so the
//! values the backward reads stay live until it has read them.
//!
//! [`GradGraph`]: crate::operator::def::GradGraph

use super::{GraphRunner, Step};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, GradGraph, Gradient, Val};
use crate::operator::op::{Aliasing, Call, TensorDesc};
use crate::operator::param::Params;
use crate::operator::table;
use smallvec::SmallVec;
use std::collections::{BTreeSet, HashMap};

/// How much bigger (or smaller) than a value a reused buffer may be (MXNet's
/// `NNVM_EXEC_MATCH_RANGE`).
const MATCH_RANGE: usize = 16;

/// One node of a [`PlanGraph`].
#[derive(Clone, Debug, Default)]
pub struct PlanNode {
    /// Entries read, in input order.
    pub inputs: SmallVec<[usize; 4]>,
    /// Entries written, in output order.
    pub outputs: SmallVec<[usize; 4]>,
    /// Whether an output may be written over an input of the same size and dtype.
    pub inplace: bool,
}

/// Values and nodes to plan (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct PlanGraph {
    /// Bytes of each entry.
    pub bytes: Vec<usize>,
    /// Dtype code of each entry (in place needs equal dtypes).
    pub dtype: Vec<i32>,
    /// Entries that live outside the plan.
    pub external: Vec<bool>,
    pub nodes: Vec<PlanNode>,
    /// Entries kept live until the end.
    pub outputs: Vec<usize>,
}

impl PlanGraph {
    /// A new entry; returns its id.
    pub fn entry(&mut self, bytes: usize, dtype: i32, external: bool) -> usize {
        self.bytes.push(bytes);
        self.dtype.push(dtype);
        self.external.push(external);
        self.bytes.len() - 1
    }
}

/// Where each entry lives.
#[derive(Clone, Debug, Default)]
pub struct MemPlan {
    /// The pool slot of each entry; `None` for external entries.
    pub slot: Vec<Option<usize>>,
    /// Bytes of each slot.
    pub slot_bytes: Vec<usize>,
    /// Per entry, the input (position among its node's inputs) whose buffer it took in place.
    pub inplace: Vec<Option<usize>>,
}

impl MemPlan {
    /// Bytes of the pool: what running the plan allocates.
    pub fn total_bytes(&self) -> usize {
        self.slot_bytes.iter().sum()
    }
}

/// MXNet's graph allocator: free buffers ordered by size.
struct Allocator {
    bytes: Vec<usize>,
    free: BTreeSet<(usize, usize)>,
}

impl Allocator {
    fn request(&mut self, size: usize) -> usize {
        let hi = size.saturating_mul(MATCH_RANGE);
        // the smallest free buffer of at least `size` bytes, within the range
        if let Some(&(b, id)) = self.free.range((size, 0)..).next()
            && b <= hi
        {
            self.free.remove(&(b, id));
            return id;
        }
        // else the biggest smaller one, within the range, grown
        if let Some(&(b, id)) = self.free.range(..(size, 0)).next_back()
            && b >= size / MATCH_RANGE
        {
            self.free.remove(&(b, id));
            self.bytes[id] = size;
            return id;
        }
        self.bytes.push(size);
        self.bytes.len() - 1
    }

    fn release(&mut self, id: usize) {
        self.free.insert((self.bytes[id], id));
    }
}

/// Plans `g` (see the module documentation).
pub fn plan(g: &PlanGraph) -> MemPlan {
    let n = g.bytes.len();
    // readers of each entry, the graph's outputs counting as one more
    let mut refs = vec![0usize; n];
    for node in &g.nodes {
        for &e in &node.inputs {
            refs[e] += 1;
        }
    }
    for &e in &g.outputs {
        refs[e] += 1;
    }
    let mut slot: Vec<Option<usize>> = vec![None; n];
    let mut inplace: Vec<Option<usize>> = vec![None; n];
    let mut slot_refs: Vec<usize> = Vec::new();
    let mut alloc = Allocator {
        bytes: Vec::new(),
        free: BTreeSet::new(),
    };
    for node in &g.nodes {
        if node.inplace {
            let mut taken: SmallVec<[bool; 4]> = smallvec::smallvec![false; node.inputs.len()];
            for &out in &node.outputs {
                if g.external[out] || slot[out].is_some() || refs[out] == 0 {
                    continue;
                }
                let pick = node.inputs.iter().enumerate().position(|(i, &inp)| {
                    !taken[i]
                        && slot[inp].is_some_and(|s| slot_refs[s] == 1)
                        && g.bytes[inp] == g.bytes[out]
                        && g.dtype[inp] == g.dtype[out]
                        // an input read twice by this node keeps its buffer busy
                        && node.inputs.iter().filter(|&&x| x == inp).count() == 1
                });
                if let Some(i) = pick {
                    taken[i] = true;
                    let s = slot[node.inputs[i]].expect("picked inputs have a slot");
                    slot[out] = Some(s);
                    slot_refs[s] += refs[out];
                    inplace[out] = Some(i);
                }
            }
        }
        // the node's other outputs, biggest first
        let mut fresh: SmallVec<[usize; 4]> = node
            .outputs
            .iter()
            .copied()
            .filter(|&o| !g.external[o] && slot[o].is_none())
            .collect();
        fresh.sort_by_key(|&o| std::cmp::Reverse(g.bytes[o]));
        for o in fresh {
            let s = alloc.request(g.bytes[o]);
            if s >= slot_refs.len() {
                slot_refs.resize(s + 1, 0);
            }
            slot_refs[s] = refs[o];
            slot[o] = Some(s);
        }
        for &e in &node.inputs {
            if let Some(s) = slot[e] {
                slot_refs[s] -= 1;
                if slot_refs[s] == 0 {
                    alloc.release(s);
                }
            }
        }
        for &o in &node.outputs {
            if let Some(s) = slot[o]
                && refs[o] == 0
                && slot_refs[s] == 0
            {
                alloc.release(s);
            }
        }
    }
    MemPlan {
        slot,
        slot_bytes: alloc.bytes,
        inplace,
    }
}

fn desc_bytes(d: &TensorDesc) -> usize {
    d.size() * d.dtype.size()
}

/// The graph of an executor's run for the given input descriptions: its forward nodes and, with
/// `grad_inputs` (which graph inputs get a gradient written into a bound array), the backward
/// nodes. Graph inputs, bound gradients and head gradients are external; the forward's outputs
/// stay live to the end.
pub fn forward_backward(
    runner: &GraphRunner,
    descs: &[TensorDesc],
    ctx: Context,
    training: bool,
    grad_inputs: Option<&[bool]>,
) -> Result<PlanGraph> {
    let mut r = Recorder {
        g: PlanGraph::default(),
        descs: Vec::new(),
        ctx,
        training,
    };
    // entries of each step's outputs
    let mut values: Vec<Vec<usize>> = Vec::with_capacity(runner.steps.len());
    for step in &runner.steps {
        match step {
            Step::Input(i) => {
                let d = descs
                    .get(*i)
                    .ok_or_else(|| Error::invalid("a graph input has no description"))?;
                values.push(vec![r.new_entry(d.clone(), true)]);
            }
            Step::Op(op) => {
                let ins: Vec<usize> = op
                    .inputs
                    .iter()
                    .map(|&(n, o)| values[n].get(o).copied())
                    .collect::<Option<_>>()
                    .ok_or_else(|| Error::invalid("a node reads a missing output"))?;
                let params: Vec<(&str, &str)> = op
                    .params
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                values.push(r.node(op.def.name, &ins, &params)?);
            }
        }
    }
    let outputs: Vec<usize> = runner.outputs.iter().map(|&(n, o)| values[n][o]).collect();
    r.g.outputs = outputs.clone();
    let Some(grad_inputs) = grad_inputs else {
        return Ok(r.g);
    };
    // which steps' values need a gradient
    let n = runner.steps.len();
    let mut needs = vec![false; n];
    for (s, step) in runner.steps.iter().enumerate() {
        needs[s] = match step {
            Step::Input(i) => grad_inputs.get(*i).copied().unwrap_or(false),
            Step::Op(op) => op.inputs.iter().any(|&(m, _)| needs[m]),
        };
    }
    // gradient parts arriving at each entry; head gradients are external
    let mut parts: HashMap<usize, Vec<usize>> = HashMap::new();
    for &e in &outputs {
        let d = r.descs[e].clone();
        let h = r.new_entry(d, true);
        parts.entry(e).or_default().push(h);
    }
    for s in (0..n).rev() {
        let Step::Op(op) = &runner.steps[s] else {
            continue;
        };
        if !needs[s] {
            continue;
        }
        let f = match op.def.grad {
            Gradient::Zero => continue,
            Gradient::None => {
                return Err(Error::invalid(format!(
                    "operator {} has no gradient",
                    op.def.name
                )));
            }
            Gradient::Ops(f) => f,
        };
        let outs = values[s].clone();
        // no gradient arrived (below `stop_gradient`): the inputs' gradients are zero, no ops
        // (MXNet's gradient pass prunes these too)
        if outs.iter().all(|o| !parts.contains_key(o)) {
            continue;
        }
        let mut ograds = Vec::with_capacity(outs.len());
        for &o in &outs {
            let g = match parts.remove(&o) {
                Some(p) => r.sum(p)?,
                None => r.node("zeros_like", &[o], &[])?[0],
            };
            ograds.push(Val(g as u32));
        }
        let ins: Vec<usize> = op.inputs.iter().map(|&(m, o)| values[m][o]).collect();
        let need: Vec<bool> = op.inputs.iter().map(|&(m, _)| needs[m]).collect();
        let in_vals: Vec<Val> = ins.iter().map(|&e| Val(e as u32)).collect();
        let out_vals: Vec<Val> = outs.iter().map(|&e| Val(e as u32)).collect();
        let dx = f(&mut GradCtx {
            graph: &mut r,
            inputs: &in_vals,
            outputs: &out_vals,
            ograds: &ograds,
            params: &op.params,
            needs: &need,
            name: op.def.name,
            training,
            state: None,
        })?;
        for ((d, &e), &nd) in dx.iter().zip(&ins).zip(&need) {
            if let (Some(d), true) = (d, nd) {
                parts.entry(e).or_default().push(d.0 as usize);
            }
        }
    }
    // each argument's gradient goes into its bound array
    for (s, step) in runner.steps.iter().enumerate() {
        if let Step::Input(i) = step
            && grad_inputs.get(*i).copied().unwrap_or(false)
            && let Some(p) = parts.remove(&values[s][0])
        {
            let g = r.sum(p)?;
            if !r.g.external[g] {
                r.g.external[g] = true;
            }
        }
    }
    Ok(r.g)
}

/// Builds a [`PlanGraph`] by planning each op for the descriptions of its inputs.
struct Recorder {
    g: PlanGraph,
    descs: Vec<TensorDesc>,
    ctx: Context,
    training: bool,
}

impl Recorder {
    fn new_entry(&mut self, d: TensorDesc, external: bool) -> usize {
        let e = self.g.entry(desc_bytes(&d), d.dtype.code(), external);
        self.descs.push(d);
        e
    }

    /// Adds a node for `op` on `inputs`; returns all its outputs' entries.
    fn node(&mut self, op: &str, inputs: &[usize], params: &[(&str, &str)]) -> Result<Vec<usize>> {
        let def = table::lookup(op)
            .ok_or_else(|| Error::invalid(format!("operator {op} has no definition")))?;
        let in_descs: Vec<TensorDesc> = inputs.iter().map(|&e| self.descs[e].clone()).collect();
        let p = Params::new(def.name, params.to_vec())?;
        let plan = def.forward.plan(&Call {
            name: def.name,
            inputs: &in_descs,
            params: &p,
            given_outputs: None,
            input_ctx: (!inputs.is_empty()).then_some(self.ctx),
            training: self.training,
            state: None,
            input_values: None,
        })?;
        let outs: Vec<usize> = plan
            .outputs
            .iter()
            .map(|d| self.new_entry(d.clone(), false))
            .collect();
        self.g.nodes.push(PlanNode {
            inputs: inputs.iter().copied().collect(),
            outputs: outs.iter().copied().collect(),
            inplace: plan.aliasing == Aliasing::Elementwise,
        });
        Ok(outs)
    }

    /// The sum of gradient parts (one part is itself).
    fn sum(&mut self, p: Vec<usize>) -> Result<usize> {
        if p.len() == 1 {
            return Ok(p[0]);
        }
        let n = p.len().to_string();
        Ok(self.node("add_n", &p, &[("num_args", &n)])?[0])
    }
}

impl GradGraph for Recorder {
    fn apply(
        &mut self,
        op: &'static str,
        inputs: &[Val],
        params: &[(&str, &str)],
    ) -> Result<Vec<Val>> {
        let ins: Vec<usize> = inputs.iter().map(|v| v.0 as usize).collect();
        let outs = self.node(op, &ins, params)?;
        Ok(outs.into_iter().map(|e| Val(e as u32)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(inplace: bool) -> PlanGraph {
        // x -> a -> b -> c (output), 400 bytes each
        let mut g = PlanGraph::default();
        let x = g.entry(400, 0, true);
        let a = g.entry(400, 0, false);
        let b = g.entry(400, 0, false);
        let c = g.entry(400, 0, false);
        for (i, o) in [(x, a), (a, b), (b, c)] {
            g.nodes.push(PlanNode {
                inputs: [i].into_iter().collect(),
                outputs: [o].into_iter().collect(),
                inplace,
            });
        }
        g.outputs = vec![c];
        g
    }

    #[test]
    fn liveness_shares_and_in_place_reuses() {
        // a and b are live together, c reuses a's buffer
        let p = plan(&chain(false));
        assert_eq!(p.total_bytes(), 800);
        assert_eq!(p.slot[1], p.slot[3]);
        // every value in one buffer
        let p = plan(&chain(true));
        assert_eq!(p.total_bytes(), 400);
        assert_eq!(p.inplace[2], Some(0));
    }

    #[test]
    fn sizes_match_within_the_range() {
        let mut g = PlanGraph::default();
        let x = g.entry(4, 0, true);
        let big = g.entry(6400, 0, false);
        let small = g.entry(40, 0, false);
        let mid = g.entry(800, 0, false);
        g.nodes.push(PlanNode {
            inputs: [x].into_iter().collect(),
            outputs: [big].into_iter().collect(),
            inplace: false,
        });
        g.nodes.push(PlanNode {
            inputs: [big].into_iter().collect(),
            outputs: [small].into_iter().collect(),
            inplace: false,
        });
        g.nodes.push(PlanNode {
            inputs: [small].into_iter().collect(),
            outputs: [mid].into_iter().collect(),
            inplace: false,
        });
        g.outputs = vec![mid];
        let p = plan(&g);
        // 40 bytes cannot take the 6400-byte buffer (more than 16 times bigger); 800 can
        assert_ne!(p.slot[small], p.slot[big]);
        assert_eq!(p.slot[mid], p.slot[big]);
        assert_eq!(p.total_bytes(), 6440);
    }
}
