//! Backward: gradients of recorded heads with respect to the graph's variables.

use super::node::{Entry, GradReq, Node, NodeKind, entry_of, raw_entry_of, set_entry};
use super::record;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::operator::def::{GradCtx, GradGraph, Gradient, Val};
use crate::engine::Engine;
use crate::operator::imperative::{self, Invoke, Resolved};
use crate::operator::mode::ModeGuard;
use crate::operator::op::OpState;
use crate::operator::table;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// MXNet's message for a head that is in no graph.
pub const NOT_IN_GRAPH: &str = "Cannot differentiate node because it is not in a computational \
graph. You need to set is_recording to true or use autograd.record() to save computational \
graphs for backward. If you want to differentiate the same graph twice, you need to pass \
retain_graph=True to backward.";

/// What a backward hook sees of one recorded op as its gradient runs: the node (identified by
/// its address, [`node_id`]), the gradients of its outputs, its inputs, and the gradient it
/// gave each input (`None` where none was computed).
pub struct NodeGrads<'a> {
    pub node: usize,
    pub ograds: &'a [NDArray],
    pub inputs: &'a [NDArray],
    pub igrads: &'a [Option<NDArray>],
}

/// A hook called after each op node's gradient (an executor's monitor over its backward).
pub type NodeHook = std::rc::Rc<dyn Fn(&NodeGrads<'_>)>;

thread_local! {
    static NODE_HOOK: std::cell::RefCell<Option<NodeHook>> = const { std::cell::RefCell::new(None) };
}

/// The identity of the tape node an array is an output of (what [`NodeGrads::node`] holds).
pub fn node_id(a: &NDArray) -> Option<usize> {
    entry_of(a).map(|e| Arc::as_ptr(&e.node) as usize)
}

/// Runs `f` (a backward on this thread) with `hook` called after each op node's gradient.
pub fn with_node_hook<R>(hook: NodeHook, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<NodeHook>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let old = self.0.take();
            NODE_HOOK.with(|h| *h.borrow_mut() = old);
        }
    }
    let old = NODE_HOOK.with(|h| h.borrow_mut().replace(hook));
    let _reset = Reset(old);
    f()
}

/// What a backward computes.
pub struct BackwardArgs {
    pub heads: Vec<NDArray>,
    /// One per head, `None` for ones (or empty: ones for every head).
    pub head_grads: Vec<Option<NDArray>>,
    /// Empty: write every reachable variable's gradient into its buffer (`.backward()`).
    /// Otherwise: return the gradients of these variables as new arrays (`autograd.grad`).
    pub variables: Vec<NDArray>,
    pub retain_graph: bool,
    pub create_graph: bool,
    pub is_train: bool,
}

/// The gradient graph on the tape: values are NDArrays, operators are invoked (and recorded
/// when a higher-order gradient is asked for: recording is then on).
///
/// While a gradient definition runs for a node one of whose inputs is a variable that gets
/// exactly this gradient (`defer`), its single-output ops are held back (planned, not run)
/// until an op reads their value: if the definition returns such a value for that input, its op
/// runs once, writing straight into the variable's gradient buffer, instead of into a new array
/// that is then copied there (a convolution's data, weight and bias gradients all go straight
/// into their buffers). Held-back ops never read each other's values, so they may run in any
/// order.
pub struct TapeGraph {
    /// `None`: a held-back op's output.
    vals: Vec<Option<NDArray>>,
    defer: bool,
    pending: Vec<Pending>,
}

/// An op planned and held back, and the value that stands for its output.
struct Pending {
    op: &'static str,
    inputs: Vec<NDArray>,
    params: Vec<(String, String)>,
    resolved: Resolved,
    val: u32,
}

impl Pending {
    fn invoke(&self, outputs: Option<Vec<NDArray>>) -> Invoke<'_> {
        Invoke {
            op: self.op,
            called_as: self.op,
            inputs: &self.inputs,
            params: self.params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect(),
            outputs,
            state: None,
        }
    }
}

impl TapeGraph {
    fn new() -> TapeGraph {
        TapeGraph { vals: Vec::new(), defer: false, pending: Vec::new() }
    }
    fn val(&mut self, a: NDArray) -> Val {
        self.vals.push(Some(a));
        Val(self.vals.len() as u32 - 1)
    }
    fn get(&mut self, v: Val) -> Result<&NDArray> {
        if self.vals[v.0 as usize].is_none() {
            self.flush()?;
        }
        Ok(self.vals[v.0 as usize].as_ref().expect("a flushed value is set"))
    }
    /// Runs the held-back ops, in the order they were planned, each into a new array.
    fn flush(&mut self) -> Result<()> {
        for p in std::mem::take(&mut self.pending) {
            let call = p.invoke(None);
            let mut outs = imperative::allocate(&call, &p.resolved)?;
            imperative::dispatch(Engine::global()?, p.resolved, &p.inputs, &outs)?;
            self.vals[p.val as usize] = Some(outs.swap_remove(0));
        }
        Ok(())
    }
    /// If `v` is a held-back op's output and that output has `buffer`'s shape, dtype and
    /// device, runs the op into `buffer` and returns true.
    fn finish_into(&mut self, v: Val, buffer: &NDArray) -> Result<bool> {
        let at = self.pending.iter().position(|p| {
            let d = &p.resolved.plan.outputs[0];
            p.val == v.0
                && d.shape[..] == *buffer.shape()
                && d.dtype == buffer.dtype()
                && buffer.ctx() == Some(p.resolved.ctx)
        });
        let Some(at) = at else {
            return Ok(false);
        };
        let p = self.pending.remove(at);
        match imperative::invoke(p.invoke(Some(vec![buffer.clone()]))) {
            Ok(_) => {
                self.vals[p.val as usize] = Some(buffer.clone());
                Ok(true)
            }
            // the op refuses the buffer: it runs as it would have
            Err(_) => {
                self.pending.insert(at, p);
                self.flush()?;
                Ok(false)
            }
        }
    }
    fn run(&mut self, op: &'static str, inputs: &[&NDArray], params: &[(&str, &str)]) -> Result<Vec<NDArray>> {
        self.run_with(op, inputs, params, None)
    }
    fn run_with(
        &mut self,
        op: &'static str,
        inputs: &[&NDArray],
        params: &[(&str, &str)],
        state: Option<OpState>,
    ) -> Result<Vec<NDArray>> {
        let inputs: Vec<NDArray> = inputs.iter().map(|a| (*a).clone()).collect();
        record::invoke(Invoke {
            op,
            called_as: op,
            inputs: &inputs,
            params: params.to_vec(),
            outputs: None,
            state,
        })
    }
    fn inputs(&mut self, inputs: &[Val]) -> Result<Vec<NDArray>> {
        // an op reading a held-back value: the held-back ops run first (a held-back op's inputs
        // are thus never held back themselves)
        if inputs.iter().any(|v| self.vals[v.0 as usize].is_none()) {
            self.flush()?;
        }
        inputs.iter().map(|&v| self.get(v).cloned()).collect()
    }
}

impl GradGraph for TapeGraph {
    fn apply(&mut self, op: &'static str, inputs: &[Val], params: &[(&str, &str)]) -> Result<Vec<Val>> {
        let ins = self.inputs(inputs)?;
        if self.defer && !ins.iter().any(NDArray::is_sparse) {
            let call = Invoke { op, called_as: op, inputs: &ins, params: params.to_vec(), outputs: None, state: None };
            let resolved = imperative::resolve(&call)?;
            if resolved.plan.outputs.len() == 1 && resolved.plan.launch.is_none() {
                self.vals.push(None);
                let val = self.vals.len() as u32 - 1;
                self.pending.push(Pending {
                    op,
                    params: params.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                    inputs: ins,
                    resolved,
                    val,
                });
                return Ok(vec![Val(val)]);
            }
            let mut outs = imperative::allocate(&call, &resolved)?;
            let visible = resolved.plan.num_visible();
            imperative::dispatch(Engine::global()?, resolved, &ins, &outs)?;
            outs.truncate(visible);
            return Ok(outs.into_iter().map(|a| self.val(a)).collect());
        }
        let refs: Vec<&NDArray> = ins.iter().collect();
        let outs = self.run(op, &refs, params)?;
        Ok(outs.into_iter().map(|a| self.val(a)).collect())
    }

    fn apply_stateful(
        &mut self,
        op: &'static str,
        inputs: &[Val],
        params: &[(&str, &str)],
        state: &OpState,
    ) -> Result<Vec<Val>> {
        let ins = self.inputs(inputs)?;
        let refs: Vec<&NDArray> = ins.iter().collect();
        let outs = self.run_with(op, &refs, params, Some(state.clone()))?;
        Ok(outs.into_iter().map(|a| self.val(a)).collect())
    }
}

/// The nodes reachable from `heads`, inputs before the ops that read them.
fn topo_order(heads: &[Entry]) -> Result<Vec<Arc<Node>>> {
    let mut seen: HashMap<usize, ()> = HashMap::new();
    let mut order = Vec::new();
    // (node, whether its inputs were pushed)
    let mut stack: Vec<(Arc<Node>, bool)> = heads.iter().rev().map(|e| (e.node.clone(), false)).collect();
    while let Some((node, expanded)) = stack.pop() {
        let key = Arc::as_ptr(&node) as usize;
        if expanded {
            order.push(node);
            continue;
        }
        if seen.insert(key, ()).is_some() {
            continue;
        }
        stack.push((node.clone(), true));
        if let NodeKind::Op(rec) = &node.kind {
            let rec = rec.lock();
            let Some(rec) = rec.as_ref() else {
                return Err(Error::invalid(
                    "Cannot differentiate through a graph that an earlier backward freed (it \
                     shares nodes with a graph that was differentiated without \
                     retain_graph=True): pass retain_graph=True to the first backward",
                ));
            };
            for e in rec.inputs.iter().rev().flatten() {
                if !seen.contains_key(&(Arc::as_ptr(&e.node) as usize)) {
                    stack.push((e.node.clone(), false));
                }
            }
        }
    }
    Ok(order)
}

/// Runs a backward pass; in the variables form returns the variables' gradients.
pub fn backward(args: BackwardArgs) -> Result<Vec<NDArray>> {
    // the heads' entries
    let mut heads = Vec::with_capacity(args.heads.len());
    for h in &args.heads {
        match entry_of(h) {
            Some(e) => heads.push(e),
            None => {
                return Err(Error::invalid(
                    if raw_entry_of(h).is_some() {
                        format!(
                            "{NOT_IN_GRAPH} (this array's graph was freed by an earlier backward)"
                        )
                    } else {
                        NOT_IN_GRAPH.to_string()
                    },
                ));
            }
        }
    }
    if !args.head_grads.is_empty() && args.head_grads.len() != heads.len() {
        return Err(Error::invalid(format!(
            "{} head gradients given for {} heads",
            args.head_grads.len(),
            heads.len()
        )));
    }
    for (i, (h, g)) in args.heads.iter().zip(&args.head_grads).enumerate() {
        if let Some(g) = g
            && g.shape() != h.shape()
        {
            return Err(Error::invalid(format!(
                "head gradient {i} has shape {:?}, its head {:?}",
                g.shape(),
                h.shape()
            )));
        }
    }
    let grad_mode = !args.variables.is_empty();
    let mut targets: Vec<Entry> = Vec::new();
    for (i, v) in args.variables.iter().enumerate() {
        match entry_of(v) {
            Some(e) if e.node.as_variable().is_some_and(|v| v.req != GradReq::Null) => {
                targets.push(e)
            }
            _ => {
                return Err(Error::invalid(format!(
                    "Cannot differentiate with respect to the {}-th variable because it does \
                     not require gradient.",
                    i + 1
                )));
            }
        }
    }
    let order = topo_order(&heads)?;
    let target_keys: HashMap<usize, usize> = targets
        .iter()
        .enumerate()
        .map(|(i, e)| (Arc::as_ptr(&e.node) as usize, i))
        .collect();
    // which nodes lead to a variable that gets a gradient
    let mut needs: HashMap<usize, bool> = HashMap::new();
    for node in &order {
        let key = Arc::as_ptr(node) as usize;
        let need = match &node.kind {
            NodeKind::Variable(v) => {
                if grad_mode {
                    target_keys.contains_key(&key)
                } else {
                    v.req != GradReq::Null
                }
            }
            NodeKind::Op(rec) => rec.lock().as_ref().is_some_and(|r| {
                r.inputs
                    .iter()
                    .flatten()
                    .any(|e| needs.get(&(Arc::as_ptr(&e.node) as usize)) == Some(&true))
            }),
        };
        needs.insert(key, need);
    }
    if grad_mode {
        for (i, t) in targets.iter().enumerate() {
            if !needs.contains_key(&(Arc::as_ptr(&t.node) as usize)) {
                return Err(Error::invalid(format!(
                    "Cannot differentiate with respect to the {}-th variable because it is \
                     unreachable from the outputs.",
                    i + 1
                )));
            }
        }
    } else if !order
        .iter()
        .any(|n| n.as_variable().is_some() && needs[&(Arc::as_ptr(n) as usize)])
    {
        return Err(Error::invalid(
            "There are no inputs in computation graph that require gradients.",
        ));
    }

    let _modes = ModeGuard::set(args.is_train, args.create_graph);
    let mut tape = TapeGraph::new();
    // gradient contributions per (node, output)
    let mut grads: HashMap<(usize, u32), Vec<NDArray>> = HashMap::new();
    for (i, (e, h)) in heads.iter().zip(&args.heads).enumerate() {
        let g = match args.head_grads.get(i).cloned().flatten() {
            Some(g) => g,
            None => tape.run("ones_like", &[h], &[])?.remove(0),
        };
        grads.entry(e.key()).or_default().push(g);
    }
    let direct = if grad_mode || args.create_graph {
        Direct::default()
    } else {
        Direct::find(&order, &needs, &heads, &args.head_grads)
    };
    let result =
        run_backward(&args, &order, &needs, &direct, &mut tape, &mut grads, &targets, grad_mode);
    if !args.retain_graph {
        for node in &order {
            node.free();
        }
    }
    result
}

/// Sums gradient contributions (one array: itself).
fn sum(tape: &mut TapeGraph, mut parts: Vec<NDArray>) -> Result<NDArray> {
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    let n = parts.len().to_string();
    let refs: Vec<&NDArray> = parts.iter().collect();
    Ok(tape.run("add_n", &refs, &[("num_args", &n)])?.remove(0))
}

#[allow(clippy::too_many_arguments)]
fn run_backward(
    args: &BackwardArgs,
    order: &[Arc<Node>],
    needs: &HashMap<usize, bool>,
    direct: &Direct,
    tape: &mut TapeGraph,
    grads: &mut HashMap<(usize, u32), Vec<NDArray>>,
    targets: &[Entry],
    grad_mode: bool,
) -> Result<Vec<NDArray>> {
    let mut results: Vec<Option<NDArray>> = vec![None; targets.len()];
    // variables whose buffer already holds their gradient (written by their one contribution)
    let mut written: Vec<usize> = Vec::new();
    for node in order.iter().rev() {
        let key = Arc::as_ptr(node) as usize;
        if !needs[&key] {
            continue;
        }
        match &node.kind {
            NodeKind::Op(rec) => {
                let guard = rec.lock();
                let rec = guard.as_ref().expect("a walked node is live until the walk ends");
                let n_out = rec.saved_outputs.len();
                let parts: Vec<Option<Vec<NDArray>>> =
                    (0..n_out).map(|i| grads.remove(&(key, i as u32))).collect();
                if parts.iter().all(Option::is_none) {
                    continue;
                }
                if let Some(custom) = rec.custom.clone() {
                    let mut ograds = Vec::with_capacity(n_out);
                    for (i, p) in parts.into_iter().enumerate() {
                        ograds.push(match p {
                            Some(p) => sum(tape, p)?,
                            None => tape.run("zeros_like", &[&rec.saved_outputs[i]], &[])?.remove(0),
                        });
                    }
                    let mut igrads = Vec::with_capacity(rec.saved_inputs.len());
                    for a in &rec.saved_inputs {
                        igrads.push(tape.run("zeros_like", &[a], &[])?.remove(0));
                    }
                    let reqs = vec![GradReq::Write; igrads.len()];
                    let in_entries = rec.inputs.clone();
                    drop(guard);
                    // the callback issues its own ops; it runs without recording
                    {
                        let _off = ModeGuard::set(args.is_train, false);
                        custom.backward(ograds, igrads.clone(), &reqs, args.is_train)?;
                    }
                    for (g, e) in igrads.into_iter().zip(&in_entries) {
                        if let Some(e) = e
                            && needs[&(Arc::as_ptr(&e.node) as usize)]
                        {
                            grads.entry(e.key()).or_default().push(g);
                        }
                    }
                    if !args.retain_graph {
                        node.free();
                    }
                    continue;
                }
                let def = table::lookup(rec.op).ok_or_else(|| {
                    Error::invalid(format!("operator {} has no definition", rec.op))
                })?;
                let f = match def.grad {
                    Gradient::Zero => continue,
                    Gradient::None => {
                        return Err(Error::invalid(format!(
                            "Operator {} is non-differentiable because it didn't register \
                             FGradient attribute.",
                            rec.called_as
                        )));
                    }
                    Gradient::Ops(f) => f,
                };
                tape.vals.clear();
                // the buffers this node's gradient may go straight into, per input
                let into: Vec<Option<&NDArray>> = rec
                    .inputs
                    .iter()
                    .map(|e| e.as_ref().and_then(|e| direct.single(Arc::as_ptr(&e.node) as usize)))
                    .collect();
                tape.defer = into.iter().any(Option::is_some);
                // With create_graph the gradient's ops are recorded: the forward's values they
                // read must then stand in the graph where the forward's did (its inputs' entries,
                // its own outputs), so the recorded gradient depends on them. These are
                // short-lived copies, so the node never holds an entry of itself.
                let attach = |a: &NDArray, e: Option<Entry>| {
                    let a = a.detach();
                    if args.create_graph {
                        set_entry(&a, e);
                    }
                    a
                };
                let inputs: Vec<Val> = rec
                    .saved_inputs
                    .iter()
                    .zip(&rec.inputs)
                    .map(|(a, e)| tape.val(attach(a, e.clone())))
                    .collect();
                let outputs: Vec<Val> = rec
                    .saved_outputs
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        let e = Entry { node: node.clone(), index: i as u32 };
                        tape.val(attach(a, Some(e)))
                    })
                    .collect();
                let mut ograds = Vec::with_capacity(n_out);
                for (i, p) in parts.into_iter().enumerate() {
                    let g = match p {
                        Some(p) => sum(tape, p)?,
                        None => tape.run("zeros_like", &[&rec.saved_outputs[i]], &[])?.remove(0),
                    };
                    ograds.push(tape.val(g));
                }
                let need: Vec<bool> = rec
                    .inputs
                    .iter()
                    .map(|e| e.as_ref().is_some_and(|e| needs[&(Arc::as_ptr(&e.node) as usize)]))
                    .collect();
                let params = rec.params.clone();
                let state = rec.state.clone();
                let training = rec.training;
                let in_entries = rec.inputs.clone();
                let (called_as, op) = (rec.called_as, rec.op);
                drop(guard);
                let dx = {
                    let mut ctx = GradCtx {
                        graph: tape,
                        inputs: &inputs,
                        outputs: &outputs,
                        ograds: &ograds,
                        params: &params,
                        needs: &need,
                        name: op,
                        training,
                        state: state.as_ref(),
                    };
                    let wrap = |e: Error| {
                        Error::invalid(format!("gradient of operator {called_as}: {}", e.message()))
                    };
                    let mut dx = f(&mut ctx).map_err(wrap)?;
                    // the held-back op writes into a buffer if its value is that input's gradient
                    for (i, d) in dx.iter_mut().enumerate() {
                        if let (Some(d), Some(Some(buffer))) = (d, into.get(i))
                            && need.get(i) == Some(&true)
                            && tape.finish_into(*d, buffer).map_err(wrap)?
                        {
                            let e = in_entries[i].as_ref().expect("a buffer belongs to an entry");
                            written.push(Arc::as_ptr(&e.node) as usize);
                        }
                    }
                    tape.flush().map_err(wrap)?;
                    tape.defer = false;
                    dx
                };
                if dx.len() != in_entries.len() {
                    return Err(Error::invalid(format!(
                        "gradient of operator {called_as}: {} input gradients for {} inputs",
                        dx.len(),
                        in_entries.len()
                    )));
                }
                if let Some(hook) = NODE_HOOK.with(|h| h.borrow().clone()) {
                    let og = ograds.iter().map(|&v| tape.get(v).cloned()).collect::<Result<Vec<_>>>()?;
                    let ins = inputs.iter().map(|&v| tape.get(v).cloned()).collect::<Result<Vec<_>>>()?;
                    let mut ig = Vec::with_capacity(dx.len());
                    for d in &dx {
                        ig.push(match d {
                            Some(d) => Some(tape.get(*d)?.clone()),
                            None => None,
                        });
                    }
                    hook(&NodeGrads { node: key, ograds: &og, inputs: &ins, igrads: &ig });
                }
                for ((d, e), &n) in dx.into_iter().zip(&in_entries).zip(&need) {
                    if let (Some(d), Some(e), true) = (d, e, n) {
                        let a = tape.get(d)?.clone();
                        grads.entry(e.key()).or_default().push(a);
                    }
                }
                if !args.retain_graph {
                    node.free();
                }
            }
            NodeKind::Variable(var) => {
                if written.contains(&key) {
                    grads.remove(&(key, 0));
                    var.fresh.store(true, Ordering::Release);
                    continue;
                }
                let parts = grads.remove(&(key, 0));
                // several contributions: summed straight into the buffer where that is safe
                if let Some(p) = &parts
                    && p.len() > 1
                    && direct.contains(key)
                    && sum_into(p, &var.grad).is_ok()
                {
                    var.fresh.store(true, Ordering::Release);
                    continue;
                }
                let g = match parts {
                    Some(p) => sum(tape, p)?,
                    None => tape.run("zeros_like", &[&var.grad], &[])?.remove(0),
                };
                if grad_mode {
                    if let Some(i) = targets.iter().position(|t| Arc::as_ptr(&t.node) as usize == key) {
                        // a new array, never one the caller gave as a head gradient
                        results[i] = Some(tape.run("_copy", &[&g], &[])?.remove(0));
                    }
                    continue;
                }
                write_grad(tape, var, g, args.create_graph)?;
                var.fresh.store(true, Ordering::Release);
            }
        }
    }
    Ok(results.into_iter().map(|r| r.expect("every target was reached")).collect())
}

/// `add_n` of `parts` into `buffer`.
fn sum_into(parts: &[NDArray], buffer: &NDArray) -> Result<()> {
    let n = parts.len().to_string();
    imperative::invoke(Invoke {
        op: "add_n",
        called_as: "add_n",
        inputs: parts,
        params: vec![("num_args", &n)],
        outputs: Some(vec![buffer.clone()]),
        state: None,
    })?;
    Ok(())
}

/// The variables whose gradients may be computed straight into their buffers (`write`
/// requests, dense buffers, no higher-order graph, no `autograd.grad` results), with how many
/// gradient contributions each receives. A buffer that an array of the graph or a head gradient
/// shares memory with is left out: ops pushed later in the walk may still read it.
#[derive(Default)]
struct Direct {
    /// variable node -> (its buffer, contributions)
    vars: HashMap<usize, (NDArray, u32)>,
}

/// The identity of an array's memory (its chunk's engine variable).
fn memory_of(a: &NDArray) -> Option<usize> {
    a.var().map(|v| v as *const _ as usize)
}

impl Direct {
    fn find(
        order: &[Arc<Node>],
        needs: &HashMap<usize, bool>,
        heads: &[Entry],
        head_grads: &[Option<NDArray>],
    ) -> Direct {
        let mut vars: HashMap<usize, (NDArray, u32)> = order
            .iter()
            .filter_map(|n| {
                let v = n.as_variable()?;
                (v.req == GradReq::Write && !v.grad.is_sparse() && !v.grad.is_none())
                    .then(|| (Arc::as_ptr(n) as usize, (v.grad.clone(), 0)))
            })
            .collect();
        if vars.is_empty() {
            return Direct::default();
        }
        // buffers other arrays of the backward pass share memory with
        let mut shared: Vec<usize> = head_grads.iter().flatten().filter_map(memory_of).collect();
        for h in heads {
            if let Some(v) = vars.get_mut(&(Arc::as_ptr(&h.node) as usize)) {
                v.1 += 1;
            }
        }
        for node in order {
            let NodeKind::Op(rec) = &node.kind else { continue };
            let rec = rec.lock();
            let Some(rec) = rec.as_ref() else { continue };
            shared.extend(rec.saved_inputs.iter().chain(&rec.saved_outputs).filter_map(memory_of));
            if needs.get(&(Arc::as_ptr(node) as usize)) == Some(&true) {
                for e in rec.inputs.iter().flatten() {
                    if let Some(v) = vars.get_mut(&(Arc::as_ptr(&e.node) as usize)) {
                        v.1 += 1;
                    }
                }
            }
        }
        shared.sort_unstable();
        vars.retain(|_, (buffer, _)| {
            memory_of(buffer).is_some_and(|m| shared.binary_search(&m).is_err())
        });
        Direct { vars }
    }

    /// The buffer of variable `key` if its gradient is one contribution.
    fn single(&self, key: usize) -> Option<&NDArray> {
        self.vars.get(&key).filter(|v| v.1 == 1).map(|v| &v.0)
    }

    fn contains(&self, key: usize) -> bool {
        self.vars.contains_key(&key)
    }
}

/// Writes a variable's gradient into its buffer per its request.
fn write_grad(tape: &mut TapeGraph, var: &super::node::Variable, g: NDArray, create_graph: bool) -> Result<()> {
    match var.req {
        GradReq::Null => Ok(()),
        GradReq::Write => {
            if create_graph {
                // the buffer takes the gradient's place in the graph
                set_entry(&var.grad, None);
            }
            record::invoke(Invoke {
                op: "_copyto",
                called_as: "_copyto",
                inputs: std::slice::from_ref(&g),
                params: vec![],
                outputs: Some(vec![var.grad.clone()]),
                state: None,
            })?;
            Ok(())
        }
        GradReq::Add => {
            let _off = ModeGuard::set(crate::operator::mode::is_training(), false);
            let _ = tape;
            crate::operator::imperative::invoke(Invoke {
                op: "elemwise_add",
                called_as: "elemwise_add",
                inputs: &[var.grad.clone(), g],
                params: vec![],
                outputs: Some(vec![var.grad.clone()]),
                state: None,
            })?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autograd::{mark_variables, set_recording};
    use crate::context::Context;
    use crate::dtype::DType;

    fn arr(v: &[f32]) -> NDArray {
        let a = NDArray::new(&[v.len() as i64], Context::cpu(0), DType::F32, false).unwrap();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        a.sync_copy_from_bytes(&bytes).unwrap();
        a
    }

    fn op(name: &'static str, inputs: &[NDArray]) -> NDArray {
        record::invoke(Invoke {
            op: name,
            called_as: name,
            inputs,
            params: vec![],
            outputs: None,
            state: None,
        })
        .unwrap()
        .remove(0)
    }

    /// Which variables the pass may write straight into, for `heads` recorded from `vars`.
    fn plan(heads: &[NDArray], head_grads: &[Option<NDArray>], vars: &[NDArray]) -> Vec<Option<u32>> {
        let entries: Vec<Entry> = heads.iter().map(|h| entry_of(h).unwrap()).collect();
        let order = topo_order(&entries).unwrap();
        let needs = order.iter().map(|n| (Arc::as_ptr(n) as usize, true)).collect();
        let d = Direct::find(&order, &needs, &entries, head_grads);
        vars.iter()
            .map(|v| {
                let key = Arc::as_ptr(&entry_of(v).unwrap().node) as usize;
                d.vars.get(&key).map(|v| v.1)
            })
            .collect()
    }

    #[test]
    fn gradient_buffers_written_directly_only_where_nothing_reads_them() {
        let was = set_recording(true);
        let (x, w, c) = (arr(&[1.0, 2.0]), arr(&[3.0, 4.0]), arr(&[5.0, 6.0]));
        let (gx, gw, gc) = (arr(&[0.0; 2]), arr(&[0.0; 2]), arr(&[0.0; 2]));
        mark_variables(
            &[x.clone(), w.clone(), c.clone()],
            &[GradReq::Write, GradReq::Write, GradReq::Add],
            &[gx.clone(), gw.clone(), gc.clone()],
        )
        .unwrap();
        // x once, w twice (w * w), c asks to add: x single, w two contributions, c never
        let y = op("elemwise_add", &[op("exp", &[x.clone()]), op("elemwise_mul", &[w.clone(), w.clone()])]);
        let y = op("elemwise_add", &[y, c.clone()]);
        assert_eq!(plan(&[y.clone()], &[], &[x.clone(), w.clone(), c.clone()]), [Some(1), Some(2), None]);
        // the head gradient is x's buffer: x is left out
        assert_eq!(
            plan(&[y.clone()], &[Some(gx.clone())], &[x.clone(), w.clone()]),
            [None, Some(2)]
        );
        // w's buffer is an input of the graph: w is left out
        let z = op("elemwise_mul", &[op("exp", &[x.clone()]), gw.clone()]);
        let z = op("elemwise_add", &[z, w.clone()]);
        assert_eq!(plan(&[z], &[], &[x.clone(), w.clone()]), [Some(1), None]);
        set_recording(was);
    }
}
