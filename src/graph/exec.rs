//! Running graphs on NDArrays: the runner CachedOp (Gluon's `hybridize`) and the Executor
//! (`bind`, `simple_bind`, Module) share.
//!
//! A [`GraphRunner`] is a symbol flattened once into its post order: each op node with its
//! definition and parameters, each input entry as a (node, output) position. A run walks the
//! nodes in that order and invokes every op through [`autograd::invoke`] on the arrays the
//! earlier nodes produced, so each op is planned (shapes, dtypes, parameters checked) and pushed
//! to the engine like an imperative call, and returns before the kernels finish.
//!
//! Gradients: a run while the thread records puts every op on the autograd tape, so the
//! gradient of a graph is the tape's gradient, built from each op's definition
//! ([`crate::operator::def::Gradient`]) exactly as for imperative code. The Executor records
//! its forward against private variables bound to its gradient arrays (see [`Executor`]).

use super::infer::{Known, infer_node_shapes, infer_shapes, infer_types};
use super::{Entry, InputKind, Node, NodeRef, Symbol, entry_name, post_order};
use crate::autograd::{self, BackwardArgs, GradReq};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::operator::def::{Gradient, OpDef};
use crate::operator::imperative::{self, Invoke};
use crate::operator::mode::ModeGuard;
use crate::operator::op::TensorDesc;
use std::collections::HashMap;
use std::sync::Arc;

mod fast;
mod fold;
pub mod plan;
mod fuse;

/// Called after each op of a monitored run with `<node>_<output>` (or, for inputs, the input's
/// name), the op's name and the array.
pub type Monitor = Arc<dyn Fn(&str, &str, &NDArray) + Send + Sync>;

/// One op node of a flattened graph.
struct OpStep {
    def: &'static OpDef,
    name: String,
    params: Vec<(String, String)>,
    /// (node position, output index) per input.
    inputs: Vec<(usize, usize)>,
    /// The node's `__ctx_group__` attribute (MXNet's model parallelism).
    group: Option<String>,
    /// Names of the outputs for an executor's monitor (`<node>_<output name>`).
    out_names: Vec<String>,
    /// Names of the outputs for a CachedOp's hook: `<node>_<name>` by the op's
    /// `FListOutputNames` in MXNet, `<node>_<index>` for ops without it.
    hook_out_names: Vec<String>,
    /// Names of the inputs for a monitor that sees inputs too: `<node>_<name>` by the op's
    /// `FListInputNames` in MXNet, `<node>_input<k>` for ops without it.
    in_names: Vec<String>,
    /// The variable an input reads, if it is one (an executor reports it by its own name
    /// first).
    in_vars: Vec<Option<String>>,
}

/// Which of MXNet's naming conventions a monitored run reports with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MonitorNames {
    /// Executors (and the predict API): a variable input by its own name before
    /// `<node>_<input>`, outputs by the symbol's output names.
    Executor,
    /// A CachedOp's hook: inputs as `<node>_<input>` only, outputs by
    /// `FListOutputNames` or index.
    CachedOp,
}

enum Step {
    /// Graph input number `i` (of [`GraphRunner::inputs`]).
    Input(usize),
    Op(OpStep),
}

/// A step's part in a BatchNorm + relu pair that a run with fused pairs takes as one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PairRole {
    /// Runs `_mxrt_batch_norm_relu` instead of its BatchNorm.
    Fused,
    /// The pair's relu: its value is the fused step's output 0.
    Alias(usize),
}

/// A symbol prepared for running (see the module documentation).
pub struct GraphRunner {
    symbol: Symbol,
    steps: Vec<Step>,
    /// The graph's variables in MXNet's input order (`list_inputs()`).
    inputs: Vec<NodeRef>,
    /// Whether input `i` is written by an op (an auxiliary state).
    aux: Vec<bool>,
    /// (node position, output index) of each graph output.
    outputs: Vec<(usize, usize)>,
    /// Whether a graph output that is a graph input (its first occurrence) is the input array
    /// itself, as MXNet's CachedOp returns it; otherwise (executors) it is a copy.
    alias_inputs: bool,
    /// How a monitor names what it sees.
    monitor_names: MonitorNames,
    /// MXNet's `group2ctx`: the device of each context group, and the device of ops in none.
    /// When set, inputs may live on several devices and an op's inputs are copied to its
    /// group's device first.
    placement: Option<(Vec<(String, Context)>, Context)>,
    /// Steps of ops without inputs whose `shape` parameter leaves dimensions open (0, as
    /// `begin_state`'s `zeros(shape=(0, H))`): MXNet fills them from the graph's shape
    /// inference, so a run does the same for its inputs' shapes.
    open: Vec<usize>,
    /// The last inputs' shapes and the `shape` parameters they gave the `open` steps.
    open_cache: parking_lot::Mutex<Option<(Vec<Vec<i64>>, Arc<OpenShapes>)>>,
    /// BatchNorm + relu pairs per step (empty: none, or not looked for): see
    /// [`find_bn_relu`](Self::find_bn_relu).
    pairs: Vec<Option<PairRole>>,
}

/// Resolved `shape` parameters of a runner's open steps, by step.
type OpenShapes = HashMap<usize, Vec<(String, String)>>;

/// Whether an op node without inputs has a `shape` parameter with an open (0) dimension.
fn has_open_shape(params: &[(String, String)]) -> bool {
    params.iter().any(|(k, v)| {
        k == "shape" && crate::operator::param::shape(v).is_some_and(|s| s.contains(&0))
    })
}

fn node_key(n: &NodeRef) -> *const Node {
    Arc::as_ptr(n)
}

impl GraphRunner {
    /// Flattens `symbol`; every op must be one mxrt implements (graphs hold no others).
    pub fn new(symbol: &Symbol) -> Result<GraphRunner> {
        if symbol.outputs.is_empty() {
            return Err(Error::invalid("the graph has no outputs"));
        }
        let order = post_order(&symbol.outputs);
        let inputs = symbol.list_inputs(InputKind::All);
        let aux_nodes: Vec<*const Node> = symbol
            .list_inputs(InputKind::Auxiliary)
            .iter()
            .map(node_key)
            .collect();
        let input_pos: HashMap<*const Node, usize> = inputs
            .iter()
            .enumerate()
            .map(|(i, n)| (node_key(n), i))
            .collect();
        let pos: HashMap<*const Node, usize> = order
            .iter()
            .enumerate()
            .map(|(i, n)| (node_key(n), i))
            .collect();
        let mut steps = Vec::with_capacity(order.len());
        for n in &order {
            let d = n.data();
            match d.op {
                None => steps.push(Step::Input(input_pos[&node_key(n)])),
                Some(def) => {
                    let sig = n.signature()?;
                    let mut ins = Vec::with_capacity(d.inputs.len());
                    let io_names = crate::operator::registry::IoNames::global();
                    let listed_inputs = io_names.lists_inputs(def.name);
                    let mut in_names = Vec::with_capacity(d.inputs.len());
                    let mut in_vars = Vec::with_capacity(d.inputs.len());
                    for (k, e) in d.inputs.iter().enumerate() {
                        let src = pos[&node_key(&e.node)];
                        if e.index as usize >= visible_outputs(&e.node)? {
                            return Err(Error::invalid(format!(
                                "node {}: input {k} reads hidden output {} of node {}, which \
                                 mxrt's graph runner does not keep",
                                d.name,
                                e.index,
                                e.node.name()
                            )));
                        }
                        ins.push((src, e.index as usize));
                        let arg = if listed_inputs {
                            sig.inputs
                                .as_ref()
                                .and_then(|v| v.get(k).cloned())
                                .unwrap_or_else(|| format!("arg{k}"))
                        } else {
                            format!("input{k}")
                        };
                        in_names.push(format!("{}_{arg}", d.name));
                        in_vars.push(e.node.is_variable().then(|| e.node.name()));
                    }
                    // every output, hidden ones included: a monitor reports them all
                    let out_names = sig
                        .outputs
                        .iter()
                        .map(|o| format!("{}_{o}", d.name))
                        .collect();
                    let listed_outputs = io_names.lists_outputs(def.name);
                    let hook_out_names = sig
                        .outputs
                        .iter()
                        .enumerate()
                        .map(|(i, o)| {
                            if listed_outputs {
                                format!("{}_{o}", d.name)
                            } else {
                                format!("{}_{i}", d.name)
                            }
                        })
                        .collect();
                    steps.push(Step::Op(OpStep {
                        def,
                        name: d.name.clone(),
                        params: super::op_params(&d.attrs),
                        inputs: ins,
                        out_names,
                        hook_out_names,
                        in_names,
                        in_vars,
                        group: d.attrs.get("__ctx_group__").cloned(),
                    }));
                }
            }
        }
        let outputs = symbol
            .outputs
            .iter()
            .map(|e| (pos[&node_key(&e.node)], e.index as usize))
            .collect();
        let aux = inputs
            .iter()
            .map(|n| aux_nodes.contains(&node_key(n)))
            .collect();
        let open = steps
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                Step::Op(op) if op.inputs.is_empty() && has_open_shape(&op.params) => Some(i),
                _ => None,
            })
            .collect();
        Ok(GraphRunner {
            symbol: symbol.clone(),
            steps,
            inputs,
            aux,
            outputs,
            alias_inputs: false,
            monitor_names: MonitorNames::Executor,
            placement: None,
            open,
            open_cache: parking_lot::Mutex::new(None),
            pairs: Vec::new(),
        })
    }

    /// Finds the BatchNorm nodes (without `output_mean_var`, outside any context group) whose
    /// output is read by one relu `Activation` and nothing else (no other node, not a graph
    /// output): [`run_pairs_fused`](Self::run_pairs_fused) runs each such pair as one
    /// `_mxrt_batch_norm_relu`, one pass over memory instead of two, with the same values and
    /// gradients. Returns how many pairs it found.
    pub fn find_bn_relu(&mut self) -> usize {
        let n = self.steps.len();
        let mut readers: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut pinned = vec![false; n];
        for (j, s) in self.steps.iter().enumerate() {
            if let Step::Op(op) = s {
                for &(p, o) in &op.inputs {
                    if o == 0 {
                        readers[p].push(j);
                    } else {
                        pinned[p] = true;
                    }
                }
            }
        }
        for &(p, _) in &self.outputs {
            pinned[p] = true;
        }
        let flag_off = |params: &[(String, String)], key: &str| {
            crate::operator::def::param(params, key)
                .is_none_or(|v| matches!(v.trim(), "0" | "False" | "false"))
        };
        let mut pairs = vec![None; n];
        let mut found = 0;
        for i in 0..n {
            let Step::Op(bn) = &self.steps[i] else { continue };
            if bn.def.name != "BatchNorm"
                || pinned[i]
                || readers[i].len() != 1
                || bn.group.is_some()
                || bn.inputs.len() != 5
                || !flag_off(&bn.params, "output_mean_var")
            {
                continue;
            }
            let j = readers[i][0];
            let Step::Op(act) = &self.steps[j] else { continue };
            if act.def.name == "Activation"
                && act.group.is_none()
                && act.inputs.len() == 1
                && crate::operator::def::param(&act.params, "act_type")
                    .map(str::trim)
                    == Some("relu")
            {
                pairs[i] = Some(PairRole::Fused);
                pairs[j] = Some(PairRole::Alias(i));
                found += 1;
            }
        }
        self.pairs = if found > 0 { pairs } else { Vec::new() };
        found
    }

    /// Whether [`run_pairs_fused`](Self::run_pairs_fused) differs from [`run`](Self::run).
    pub fn has_pairs(&self) -> bool {
        !self.pairs.is_empty() && self.placement.is_none()
    }

    /// [`run`](Self::run) without a monitor, each pair [`find_bn_relu`](Self::find_bn_relu)
    /// found run as one op.
    pub fn run_pairs_fused(&self, inputs: &[NDArray]) -> Result<Vec<NDArray>> {
        self.check_inputs(inputs)?;
        let mut values: Vec<Vec<NDArray>> = Vec::with_capacity(self.steps.len());
        self.run_steps_inner(inputs, &mut values, self.steps.len(), None, self.has_pairs())?;
        self.collect_outputs(&values)
    }

    /// The parameters of the open steps (see [`GraphRunner::open`]) for inputs of shapes
    /// `shapes` (in input order): each `shape` with its open dimensions from the graph's shape
    /// inference. Steps inference leaves open keep their parameters.
    fn open_params(&self, shapes: &[Vec<i64>]) -> Result<Arc<OpenShapes>> {
        if self.open.is_empty() {
            return Ok(Arc::default());
        }
        let mut cache = self.open_cache.lock();
        if let Some((k, v)) = cache.as_ref()
            && k.as_slice() == shapes
        {
            return Ok(v.clone());
        }
        let known = self
            .inputs
            .iter()
            .zip(shapes)
            .map(|(n, s)| (n.name(), s.clone()))
            .collect();
        let nodes = infer_node_shapes(&self.symbol, &Known::Named(known))?;
        let mut resolved = OpenShapes::new();
        for &i in &self.open {
            let Step::Op(op) = &self.steps[i] else {
                continue;
            };
            let Some(Some(shape)) = nodes.get(i).and_then(|o| o.first()) else {
                continue;
            };
            if shape.iter().any(|&d| d <= 0) {
                continue;
            }
            let dims: Vec<String> = shape.iter().map(i64::to_string).collect();
            let text = format!("({})", dims.join(", "));
            let params = op
                .params
                .iter()
                .map(|(k, v)| (k.clone(), if k == "shape" { text.clone() } else { v.clone() }))
                .collect();
            resolved.insert(i, params);
        }
        let resolved = Arc::new(resolved);
        *cache = Some((shapes.to_vec(), resolved.clone()));
        Ok(resolved)
    }

    pub fn symbol(&self) -> &Symbol {
        &self.symbol
    }
    /// The graph's inputs' names in input order.
    pub fn input_names(&self) -> Vec<String> {
        self.inputs.iter().map(|n| n.name()).collect()
    }
    pub fn num_inputs(&self) -> usize {
        self.inputs.len()
    }
    pub fn num_outputs(&self) -> usize {
        self.outputs.len()
    }
    /// Whether input `i` is an auxiliary state.
    pub fn is_aux(&self, i: usize) -> bool {
        self.aux[i]
    }
    /// Number of op nodes.
    pub fn num_ops(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Op(_)))
            .count()
    }

    /// Runs the graph on `inputs` (in input order) and returns its outputs, new arrays. Ops
    /// are recorded when this thread records and an input is in a graph; they run in training
    /// mode when this thread is in it. An output that is a graph input, or that appears twice,
    /// is copied so that every output is an array of its own.
    pub fn run(
        &self,
        inputs: &[NDArray],
        monitor: Option<(&Monitor, bool)>,
    ) -> Result<Vec<NDArray>> {
        self.check_inputs(inputs)?;
        // the arrays each node produced; freed after their last reader would be a refinement
        let mut values: Vec<Vec<NDArray>> = Vec::with_capacity(self.steps.len());
        self.run_steps(inputs, &mut values, self.steps.len(), monitor)?;
        self.collect_outputs(&values)
    }

    /// Places the ops by MXNet's `group2ctx`: an op whose `__ctx_group__` is in `groups` runs
    /// on that device, any other on `default`; inputs on other devices are copied (a recorded
    /// `_copyto`, so gradients flow back across devices).
    pub fn set_placement(&mut self, groups: Vec<(String, Context)>, default: Context) {
        self.placement = Some((groups, default));
    }

    fn op_ctx(&self, op: &OpStep) -> Option<Context> {
        let (groups, default) = self.placement.as_ref()?;
        if op.inputs.is_empty() {
            return None;
        }
        let g = op.group.as_deref();
        Some(
            groups
                .iter()
                .find(|(n, _)| Some(n.as_str()) == g)
                .map_or(*default, |&(_, c)| c),
        )
    }

    /// The device input `i` belongs on under the placement: its own group's, else that of the
    /// first op reading it with a group, else the default; `None` without a placement.
    pub fn input_ctx(&self, i: usize) -> Option<Context> {
        let (groups, default) = self.placement.as_ref()?;
        let ctx_of = |g: &str| groups.iter().find(|(n, _)| n == g).map(|&(_, c)| c);
        if let Some(c) = self.inputs[i]
            .attrs()
            .get("__ctx_group__")
            .and_then(|g| ctx_of(g))
        {
            return Some(c);
        }
        let pos = self
            .steps
            .iter()
            .position(|s| matches!(s, Step::Input(k) if *k == i))?;
        for s in &self.steps {
            if let Step::Op(op) = s
                && op.inputs.iter().any(|&(n, _)| n == pos)
                && let Some(c) = op.group.as_deref().and_then(ctx_of)
            {
                return Some(c);
            }
        }
        Some(*default)
    }

    /// Checks that `inputs` are one array per graph input, all on one device.
    pub fn check_inputs(&self, inputs: &[NDArray]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::invalid(format!(
                "the graph has {} inputs ({}), {} were given",
                self.inputs.len(),
                self.input_names().join(", "),
                inputs.len()
            )));
        }
        let ctx0 = inputs.first().and_then(NDArray::ctx);
        for (i, a) in inputs.iter().enumerate() {
            let Some(ctx) = a.ctx() else {
                return Err(Error::invalid(format!(
                    "input {i} ({}) is a none array",
                    self.inputs[i].name()
                )));
            };
            if Some(ctx) != ctx0 && self.placement.is_none() {
                return Err(Error::invalid(format!(
                    "CachedOp requires all inputs to live on the same context. But {} is on {} \
                     while {} is on {ctx}",
                    self.inputs[0].name(),
                    ctx0.map(|c| c.to_string()).unwrap_or_default(),
                    self.inputs[i].name()
                )));
            }
        }
        Ok(())
    }

    /// Number of nodes (variables and ops) a run walks: MXNet's `num_forward_nodes`, the
    /// steps of a partial forward.
    pub fn num_steps(&self) -> usize {
        self.steps.len()
    }

    /// Runs the nodes from `values.len()` up to (not including) `until`, pushing each node's
    /// arrays onto `values` (a partial forward runs one node per call).
    pub fn run_steps(
        &self,
        inputs: &[NDArray],
        values: &mut Vec<Vec<NDArray>>,
        until: usize,
        monitor: Option<(&Monitor, bool)>,
    ) -> Result<()> {
        self.run_steps_inner(inputs, values, until, monitor, false)
    }

    /// [`run_steps`](Self::run_steps), with the BatchNorm + relu pairs fused when `fused`.
    fn run_steps_inner(
        &self,
        inputs: &[NDArray],
        values: &mut Vec<Vec<NDArray>>,
        until: usize,
        monitor: Option<(&Monitor, bool)>,
        fused: bool,
    ) -> Result<()> {
        let until = until.min(self.steps.len());
        let shapes: Vec<Vec<i64>> = if self.open.is_empty() {
            Vec::new()
        } else {
            inputs.iter().map(|a| a.shape().to_vec()).collect()
        };
        let open = self.open_params(&shapes)?;
        while values.len() < until {
            let role = if fused { self.pairs[values.len()] } else { None };
            if let Some(PairRole::Alias(i)) = role {
                let y = values[i][0].clone();
                values.push(vec![y]);
                continue;
            }
            match &self.steps[values.len()] {
                Step::Input(i) => values.push(vec![inputs[*i].clone()]),
                Step::Op(op) => {
                    let mut args: Vec<NDArray> = op
                        .inputs
                        .iter()
                        .map(|&(n, o)| values[n][o].clone())
                        .collect();
                    if let Some(ctx) = self.op_ctx(op) {
                        for a in args.iter_mut().filter(|a| a.ctx() != Some(ctx)) {
                            *a = copy_to_ctx(a, ctx)?;
                        }
                    }
                    let params: Vec<(&str, &str)> = open
                        .get(&values.len())
                        .unwrap_or(&op.params)
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    let name = if role == Some(PairRole::Fused) {
                        "_mxrt_batch_norm_relu"
                    } else {
                        op.def.name
                    };
                    let (mut outs, visible) = autograd::invoke_all(Invoke {
                        op: name,
                        called_as: name,
                        inputs: &args,
                        params,
                        outputs: None,
                        state: None,
                    })
                    .map_err(|e| e.context(format!("node {} ({})", op.name, op.def.name)))?;
                    if let Some((m, all)) = monitor {
                        let executor = self.monitor_names == MonitorNames::Executor;
                        if all {
                            for ((name, var), a) in op.in_names.iter().zip(&op.in_vars).zip(&args) {
                                if let Some(var) = var.as_ref().filter(|_| executor) {
                                    m(var, op.def.name, a);
                                }
                                m(name, op.def.name, a);
                            }
                        }
                        let names = if executor { &op.out_names } else { &op.hook_out_names };
                        // hidden outputs too (a training Dropout's mask)
                        for (name, a) in names.iter().zip(&outs) {
                            m(name, op.def.name, a);
                        }
                    }
                    outs.truncate(visible);
                    values.push(outs);
                }
            }
        }
        Ok(())
    }

    /// The graph's outputs from the arrays of a complete run (see [`run`](Self::run)).
    pub fn collect_outputs(&self, values: &[Vec<NDArray>]) -> Result<Vec<NDArray>> {
        if values.len() < self.steps.len() {
            return Err(Error::invalid(format!(
                "the graph has run {} of its {} nodes",
                values.len(),
                self.steps.len()
            )));
        }
        let mut result: Vec<NDArray> = Vec::with_capacity(self.outputs.len());
        for (k, &(n, o)) in self.outputs.iter().enumerate() {
            let a = values[n].get(o).cloned().ok_or_else(|| {
                Error::invalid(format!("graph output {k} names a missing output {o}"))
            })?;
            let repeated = self.outputs[..k].contains(&(n, o));
            let input = matches!(self.steps[n], Step::Input(_));
            if input && !repeated && self.alias_inputs {
                result.push(a);
            } else if input || repeated {
                result.push(copy(&a)?);
            } else {
                result.push(a);
            }
        }
        Ok(result)
    }
}

/// How many outputs a node's symbol shows.
fn visible_outputs(n: &NodeRef) -> Result<usize> {
    Ok(if n.is_variable() {
        1
    } else {
        n.signature()?.outputs.len()
    })
}

/// A copy of `a` (recorded like any op when it must be).
fn copy(a: &NDArray) -> Result<NDArray> {
    let mut out = autograd::invoke(Invoke {
        op: "_copy",
        called_as: "_copy",
        inputs: std::slice::from_ref(a),
        params: Vec::new(),
        outputs: None,
        state: None,
    })?;
    Ok(out.remove(0))
}

/// Copies `src` into `dst` without recording.
pub fn copy_into(src: &NDArray, dst: &NDArray) -> Result<()> {
    imperative::invoke(Invoke {
        op: "_copyto",
        called_as: "_copyto",
        inputs: std::slice::from_ref(src),
        params: Vec::new(),
        outputs: Some(vec![dst.clone()]),
        state: None,
    })?;
    Ok(())
}

/// A view of `old`'s memory with `shape` when it holds enough elements of the dtype (MXNet's
/// reshaped executors share memory with the original), a new zero-filled array otherwise.
pub fn view_or_new(old: &NDArray, shape: &[i64], dtype: DType, ctx: Context) -> Result<NDArray> {
    let n: i64 = shape.iter().product();
    if old.dtype() == dtype && n >= 0 && n as usize <= old.size() {
        old.reshape(shape)
    } else {
        zeros(shape, dtype, ctx)
    }
}

/// A copy of `a` on `ctx` (recorded like any op when it must be).
fn copy_to_ctx(a: &NDArray, ctx: Context) -> Result<NDArray> {
    let out = NDArray::new(a.shape(), ctx, a.dtype(), false)?;
    autograd::invoke(Invoke {
        op: "_copyto",
        called_as: "_copyto",
        inputs: std::slice::from_ref(a),
        params: Vec::new(),
        outputs: Some(vec![out.clone()]),
        state: None,
    })?;
    Ok(out)
}

/// A new zero-filled array.
pub fn zeros(shape: &[i64], dtype: DType, ctx: Context) -> Result<NDArray> {
    let a = NDArray::new(shape, ctx, dtype, false)?;
    if a.size() > 0 {
        let dt = dtype.name();
        let sh = shape_str(shape);
        imperative::invoke(Invoke {
            op: "_zeros",
            called_as: "_zeros",
            inputs: &[],
            params: vec![("shape", &sh), ("dtype", dt)],
            outputs: Some(vec![a.clone()]),
            state: None,
        })?;
    }
    Ok(a)
}

fn shape_str(s: &[i64]) -> String {
    let dims: Vec<String> = s.iter().map(|d| d.to_string()).collect();
    if dims.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(","))
    }
}

// ---------------------------------------------------------------------------------------------
// CachedOp

/// The flags Gluon passes to `MXCreateCachedOpEx` (MXNet's `CachedOpConfig`).
#[derive(Clone, Debug, Default)]
pub struct CachedOpFlags {
    pub static_alloc: bool,
    pub static_shape: bool,
    pub inline_limit: u32,
    pub forward_bulk_size: Option<u32>,
    pub backward_bulk_size: Option<u32>,
    pub data_indices: Vec<usize>,
    pub param_indices: Vec<usize>,
}

fn flag_bool(key: &str, v: &str) -> Result<bool> {
    crate::operator::param::boolean(v.trim())
        .ok_or_else(|| Error::invalid(format!("CachedOp flag {key}={v} is not a boolean")))
}

fn flag_uint(key: &str, v: &str) -> Result<u32> {
    v.trim().parse().map_err(|_| {
        Error::invalid(format!(
            "CachedOp flag {key}={v} is not an unsigned integer"
        ))
    })
}

fn flag_indices(key: &str, v: &str) -> Result<Vec<usize>> {
    let body = v
        .trim()
        .trim_start_matches(['[', '('])
        .trim_end_matches([']', ')']);
    body.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_end_matches('L').parse::<usize>().map_err(|_| {
                Error::invalid(format!(
                    "CachedOp flag {key}={v} is not a tuple of unsigned integers"
                ))
            })
        })
        .collect()
}

impl CachedOpFlags {
    /// Parses the flags as strings; unknown keys are an error, as in MXNet.
    pub fn parse(pairs: &[(&str, &str)]) -> Result<CachedOpFlags> {
        let mut f = CachedOpFlags {
            inline_limit: 2,
            ..Default::default()
        };
        for &(k, v) in pairs {
            match k {
                "static_alloc" => f.static_alloc = flag_bool(k, v)?,
                "static_shape" => f.static_shape = flag_bool(k, v)?,
                "inline_limit" => f.inline_limit = flag_uint(k, v)?,
                "forward_bulk_size" => f.forward_bulk_size = Some(flag_uint(k, v)?),
                "backward_bulk_size" => f.backward_bulk_size = Some(flag_uint(k, v)?),
                "data_indices" => f.data_indices = flag_indices(k, v)?,
                "param_indices" => f.param_indices = flag_indices(k, v)?,
                "is_dynamic" => {
                    flag_bool(k, v)?;
                }
                "subgraph" => {}
                _ => {
                    return Err(Error::invalid(format!(
                        "Cannot find argument '{k}', Possible Arguments: static_alloc, \
                         static_shape, inline_limit, forward_bulk_size, backward_bulk_size, \
                         data_indices, param_indices, subgraph, is_dynamic"
                    )));
                }
            }
        }
        if f.static_shape && !f.static_alloc {
            return Err(Error::invalid(
                "static_alloc must be True when static_shape is True",
            ));
        }
        Ok(f)
    }
}

/// MXNet's CachedOp: a graph called like one operator (Gluon's hybridized blocks,
/// `SymbolBlock`). Every call runs the graph's ops through the imperative path; while the
/// thread records they go on the tape one by one, so gradients are the ops' own.
pub struct CachedOp {
    runner: GraphRunner,
    pub flags: CachedOpFlags,
    hook: parking_lot::Mutex<Option<(Monitor, bool)>>,
    /// The fast path's plans, per input signature ([`fast`]).
    signatures: fast::SignatureCache,
}

impl CachedOp {
    /// Prepares `symbol`'s graph; common subexpressions are merged first, as MXNet's CachedOp
    /// does when it is created (`MXNET_ELIMINATE_COMMON_EXPR`, on unless 0).
    pub fn new(symbol: &Symbol, flags: CachedOpFlags) -> Result<CachedOp> {
        let graph = super::cse::for_executor(symbol)?;
        let mut runner = GraphRunner::new(&graph)?;
        runner.alias_inputs = true;
        runner.monitor_names = MonitorNames::CachedOp;
        if fuse::enabled() {
            runner.find_bn_relu();
        }
        for (what, list) in [
            ("data_indices", &flags.data_indices),
            ("param_indices", &flags.param_indices),
        ] {
            if let Some(&i) = list.iter().find(|&&i| i >= runner.num_inputs()) {
                return Err(Error::invalid(format!(
                    "CachedOp flag {what}: index {i} is out of range for {} inputs",
                    runner.num_inputs()
                )));
            }
        }
        Ok(CachedOp {
            runner,
            flags,
            hook: parking_lot::Mutex::new(None),
            signatures: fast::SignatureCache::default(),
        })
    }
    pub fn num_inputs(&self) -> usize {
        self.runner.num_inputs()
    }
    pub fn num_outputs(&self) -> usize {
        self.runner.num_outputs()
    }
    pub fn symbol(&self) -> &Symbol {
        self.runner.symbol()
    }

    /// Calls `m` for every op output (and input with `all`) of later invokes; `None` removes it.
    pub fn set_hook(&self, m: Option<Monitor>, all: bool) {
        *self.hook.lock() = m.map(|m| (m, all));
    }

    /// Runs the graph; with `outputs` given, writes the results into them (MXNet's `out=`).
    pub fn invoke(&self, inputs: &[NDArray], outputs: Option<&[NDArray]>) -> Result<Vec<NDArray>> {
        if inputs.len() != self.num_inputs() {
            return Err(Error::invalid(format!(
                "CachedOp requires {} inputs but got {}",
                self.num_inputs(),
                inputs.len()
            )));
        }
        if let Some(outs) = outputs
            && outs.len() != self.num_outputs()
        {
            return Err(Error::invalid(format!(
                "CachedOp expects {} outputs, but {} was given.",
                self.num_outputs(),
                outs.len()
            )));
        }
        let hook = self.hook.lock().clone();
        // without a monitor, an unrecorded call of plain dense kernels is one engine op
        let fast = match hook {
            None => fast::try_run(&self.signatures, &self.runner, inputs, self.flags.static_alloc)?,
            Some(_) => None,
        };
        let results = match fast {
            Some(r) => r,
            // recorded or training calls: BatchNorm + relu pairs as one op each
            None if hook.is_none() && self.runner.has_pairs() => {
                self.runner.run_pairs_fused(inputs)?
            }
            None => self
                .runner
                .run(inputs, hook.as_ref().map(|(m, all)| (m, *all)))?,
        };
        match outputs {
            None => Ok(results),
            Some(outs) => {
                for (r, o) in results.iter().zip(outs) {
                    autograd::invoke(Invoke {
                        op: "_copyto",
                        called_as: "_copyto",
                        inputs: std::slice::from_ref(r),
                        params: Vec::new(),
                        outputs: Some(vec![o.clone()]),
                        state: None,
                    })?;
                }
                Ok(outs.to_vec())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Executor

/// How an argument's gradient is written (MXNet's `OpReqType` codes 0 null, 1 write, 3 add).
pub type Req = GradReq;

/// The ops whose gradient ignores the head gradient (MXNet's loss layers): a backward without
/// head gradients is allowed when every output is one of them.
const LOSS_OPS: [&str; 7] = [
    "SoftmaxOutput",
    "LinearRegressionOutput",
    "LogisticRegressionOutput",
    "MAERegressionOutput",
    "SVMOutput",
    "MakeLoss",
    "make_loss",
];

/// MXNet's executor: a graph bound to argument, gradient and auxiliary arrays.
///
/// Forward runs the graph on the bound arrays; in training mode with gradients requested it
/// records the run against fresh autograd variables that alias the bound arguments (so the
/// caller's arrays keep their own autograd state) and whose gradient buffers alias the bound
/// gradient arrays with each argument's request. Backward is the autograd backward of the
/// recorded outputs with the head gradients given, which writes or adds into the gradient
/// arrays. Results are copied into the executor's own output arrays, which keep their identity
/// across forwards as MXNet's do.
pub struct Executor {
    runner: GraphRunner,
    pub ctx: Context,
    pub arg_names: Vec<String>,
    pub aux_names: Vec<String>,
    pub args: Vec<NDArray>,
    pub grads: Vec<Option<NDArray>>,
    pub reqs: Vec<GradReq>,
    pub aux: Vec<NDArray>,
    /// Position of each graph input among args (`Ok`) or aux (`Err`).
    input_map: Vec<std::result::Result<usize, usize>>,
    pub outputs: Vec<NDArray>,
    /// The last training forward's recorded outputs.
    heads: Vec<NDArray>,
    monitor: Option<(Monitor, bool)>,
    /// The node arrays of a partial forward in progress.
    partial: Vec<Vec<NDArray>>,
    /// With a monitor, the last training forward's recorded op nodes (their tape identity) and
    /// their steps: the backward reports each one's gradient as MXNet's backward nodes.
    tape_steps: HashMap<usize, usize>,
    /// The planned runs of forwards without gradients ([`fast`]).
    signatures: fast::SignatureCache,
}

impl Executor {
    /// Binds `symbol` to arrays in `list_arguments()` / `list_auxiliary_states()` order.
    pub fn bind(
        symbol: &Symbol,
        ctx: Context,
        args: Vec<NDArray>,
        grads: Vec<Option<NDArray>>,
        reqs: Vec<GradReq>,
        aux: Vec<NDArray>,
    ) -> Result<Executor> {
        let symbol = &super::cse::for_executor(symbol)?;
        let arg_names = symbol.input_names(InputKind::ReadOnly);
        let aux_names = symbol.input_names(InputKind::Auxiliary);
        if args.len() != arg_names.len() {
            return Err(Error::invalid(format!(
                "in_args: {} arrays given for {} arguments ({})",
                args.len(),
                arg_names.len(),
                arg_names.join(", ")
            )));
        }
        if aux.len() != aux_names.len() {
            return Err(Error::invalid(format!(
                "aux_states: {} arrays given for {} auxiliary states ({})",
                aux.len(),
                aux_names.len(),
                aux_names.join(", ")
            )));
        }
        if grads.len() != args.len() || reqs.len() != args.len() {
            return Err(Error::invalid(
                "one gradient array and request per argument needed",
            ));
        }
        for (i, a) in args.iter().enumerate() {
            if a.is_none() {
                return Err(Error::invalid(format!(
                    "in_args[{i}] ({}) is a none array",
                    arg_names[i]
                )));
            }
            if let Some(g) = &grads[i]
                && reqs[i] != GradReq::Null
                && g.shape() != a.shape()
            {
                return Err(Error::invalid(format!(
                    "arg_grad_store[{i}] ({}): shape {:?} does not match the argument's {:?}",
                    arg_names[i],
                    g.shape(),
                    a.shape()
                )));
            }
        }
        // every bound shape and dtype must be consistent with the graph
        let mut shapes: Vec<(String, Vec<i64>)> = Vec::new();
        let mut dtypes: Vec<(String, DType)> = Vec::new();
        for (n, a) in arg_names
            .iter()
            .zip(&args)
            .chain(aux_names.iter().zip(&aux))
        {
            shapes.push((n.clone(), a.shape().to_vec()));
            dtypes.push((n.clone(), a.dtype()));
        }
        let inferred = match infer_shapes(symbol, &Known::Named(shapes.clone())) {
            Ok(i) => i,
            Err(e) => {
                // name the first array whose shape the ones before it contradict
                for k in 1..=shapes.len() {
                    if infer_shapes(symbol, &Known::Named(shapes[..k].to_vec())).is_err() {
                        let (n, s) = &shapes[k - 1];
                        return Err(e.context(format!("the array bound to {n} (shape {s:?})")));
                    }
                }
                return Err(e);
            }
        };
        for (what, names, arrays, got) in [
            ("argument", &arg_names, &args, &inferred.args),
            ("auxiliary state", &aux_names, &aux, &inferred.aux),
        ] {
            for ((n, a), s) in names.iter().zip(arrays.iter()).zip(got) {
                if let Some(s) = s
                    && s.as_slice() != a.shape()
                {
                    return Err(Error::invalid(format!(
                        "{what} {n}: bound array has shape {:?}, the graph infers {s:?}",
                        a.shape()
                    )));
                }
            }
        }
        infer_types(symbol, &Known::Named(dtypes))?;
        Self::assemble(
            symbol,
            ctx,
            arg_names,
            aux_names,
            args,
            grads,
            reqs,
            aux,
            &[],
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        symbol: &Symbol,
        ctx: Context,
        arg_names: Vec<String>,
        aux_names: Vec<String>,
        args: Vec<NDArray>,
        grads: Vec<Option<NDArray>>,
        reqs: Vec<GradReq>,
        aux: Vec<NDArray>,
        share: &[NDArray],
    ) -> Result<Executor> {
        if reqs.iter().any(|r| *r != GradReq::Null) {
            super::grad_check::check_differentiable(symbol)?;
        }
        let bound: Vec<(String, Vec<i64>)> = arg_names
            .iter()
            .zip(&args)
            .chain(aux_names.iter().zip(&aux))
            .map(|(n, a)| (n.clone(), a.shape().to_vec()))
            .collect();
        let filled = super::bind_prep::fill_creation_shapes(symbol, &bound)?;
        let symbol = filled.as_ref().unwrap_or(symbol);
        let runner = GraphRunner::new(symbol)?;
        let (mut ai, mut xi) = (0, 0);
        let mut input_map = Vec::with_capacity(runner.num_inputs());
        for i in 0..runner.num_inputs() {
            if runner.is_aux(i) {
                input_map.push(Err(xi));
                xi += 1;
            } else {
                input_map.push(Ok(ai));
                ai += 1;
            }
        }
        // outputs: shaped by inference from the bound arrays
        let shapes: Vec<(String, Vec<i64>)> = arg_names
            .iter()
            .zip(&args)
            .chain(aux_names.iter().zip(&aux))
            .map(|(n, a)| (n.clone(), a.shape().to_vec()))
            .collect();
        let dtypes: Vec<(String, DType)> = arg_names
            .iter()
            .zip(&args)
            .chain(aux_names.iter().zip(&aux))
            .map(|(n, a)| (n.clone(), a.dtype()))
            .collect();
        let s = infer_shapes(symbol, &Known::Named(shapes))?;
        let t = infer_types(symbol, &Known::Named(dtypes))?;
        let names = symbol.list_outputs();
        let mut outputs = Vec::with_capacity(s.outputs.len());
        for (k, (sh, dt)) in s.outputs.iter().zip(&t.outputs).enumerate() {
            let sh = sh
                .clone()
                .filter(|v| v.iter().all(|&d| d >= 0))
                .ok_or_else(|| {
                    Error::invalid(format!("cannot infer the shape of output {}", names[k]))
                })?;
            let dt = dt.unwrap_or(DType::F32);
            outputs.push(match share.get(k) {
                Some(old) => view_or_new(old, &sh, dt, ctx)?,
                None => zeros(&sh, dt, ctx)?,
            });
        }
        Ok(Executor {
            runner,
            ctx,
            arg_names,
            aux_names,
            args,
            grads,
            reqs,
            aux,
            input_map,
            outputs,
            heads: Vec::new(),
            monitor: None,
            partial: Vec::new(),
            tape_steps: HashMap::new(),
            signatures: fast::SignatureCache::default(),
        })
    }

    /// Allocates zero-filled arrays from inferred shapes (`simple_bind`): `shapes` and
    /// `dtypes` by input name; arrays named in `shared` are taken from there (Module's
    /// parameters shared with another executor).
    pub fn simple_bind(
        symbol: &Symbol,
        ctx: Context,
        shapes: Vec<(String, Vec<i64>)>,
        dtypes: Vec<(String, DType)>,
        reqs: &dyn Fn(&str) -> GradReq,
        shared: &dyn Fn(&str) -> Option<(NDArray, Option<NDArray>)>,
    ) -> Result<Executor> {
        let symbol = &super::cse::for_executor(symbol)?;
        let arg_names = symbol.input_names(InputKind::ReadOnly);
        let aux_names = symbol.input_names(InputKind::Auxiliary);
        let arg_nodes = symbol.list_inputs(InputKind::ReadOnly);
        let s = infer_shapes(symbol, &Known::Named(shapes))?;
        let t = infer_types(symbol, &Known::Named(dtypes))?;
        let shape_of = |what: &str, n: &str, s: &Option<Vec<i64>>| -> Result<Vec<i64>> {
            s.clone()
                .filter(|v| v.iter().all(|&d| d > 0) || v.is_empty())
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "simple_bind: the shape of {what} {n} cannot be inferred"
                    ))
                })
        };
        let mut args = Vec::new();
        let mut grads = Vec::new();
        let mut req_list = Vec::new();
        for (i, n) in arg_names.iter().enumerate() {
            let shape = shape_of("argument", n, &s.args[i])?;
            let dt = t.args[i].unwrap_or(DType::F32);
            let req = reqs(n);
            if let Some((a, g)) = shared(n)
                && a.shape() == shape.as_slice()
                && a.dtype() == dt
            {
                let g = match (req, g) {
                    (GradReq::Null, _) => None,
                    (_, Some(g)) => Some(g),
                    (_, None) => Some(zeros(&shape, dt, ctx)?),
                };
                args.push(a);
                grads.push(g);
                req_list.push(req);
                continue;
            }
            let hinted = super::bind_prep::storage_hint(&arg_nodes[i])
                .and_then(|st| super::bind_prep::sparse_zeros(st, &shape, dt, ctx));
            args.push(match hinted {
                Some(a) => a,
                None => zeros(&shape, dt, ctx)?,
            });
            grads.push(if req == GradReq::Null {
                None
            } else {
                Some(zeros(&shape, dt, ctx)?)
            });
            req_list.push(req);
        }
        let mut aux = Vec::new();
        for (i, n) in aux_names.iter().enumerate() {
            let shape = shape_of("auxiliary state", n, &s.aux[i])?;
            let dt = t.aux[i].unwrap_or(DType::F32);
            match shared(n) {
                Some((a, _)) if a.shape() == shape.as_slice() => aux.push(a),
                _ => aux.push(zeros(&shape, dt, ctx)?),
            }
        }
        Self::assemble(
            symbol,
            ctx,
            arg_names,
            aux_names,
            args,
            grads,
            req_list,
            aux,
            &[],
        )
    }

    pub fn symbol(&self) -> &Symbol {
        self.runner.symbol()
    }

    /// MXNet's `group2ctx` (model parallelism over devices): ops of a `ctx_group` run on its
    /// device, others on the executor's. With `allocate` (simple_bind), the arrays made for
    /// the arguments, gradients and auxiliary states move to the device their variable belongs
    /// on (its group's, or that of the first op reading it); bound arrays stay as given.
    pub fn set_group2ctx(&mut self, groups: Vec<(String, Context)>, allocate: bool) -> Result<()> {
        if groups.is_empty() {
            return Ok(());
        }
        self.runner.set_placement(groups, self.ctx);
        if !allocate {
            return Ok(());
        }
        for (i, m) in self.input_map.clone().into_iter().enumerate() {
            let Some(ctx) = self.runner.input_ctx(i) else {
                continue;
            };
            let moved = |a: &NDArray| -> Result<NDArray> {
                if a.ctx() == Some(ctx) {
                    Ok(a.clone())
                } else {
                    zeros(a.shape(), a.dtype(), ctx)
                }
            };
            match m {
                Ok(k) => {
                    self.args[k] = moved(&self.args[k])?;
                    if let Some(g) = &self.grads[k] {
                        self.grads[k] = Some(moved(g)?);
                    }
                }
                Err(k) => self.aux[k] = moved(&self.aux[k])?,
            }
        }
        Ok(())
    }

    /// Draws the planned forwards' scratch memory from `other`'s pool (MXNet's `shared_exec`:
    /// a BucketingModule's buckets, a reshaped executor), so executors that run one after
    /// another keep the memory of the largest plan rather than one set each.
    pub fn share_pool_from(&mut self, other: &Executor) {
        self.signatures.share_arena(other.signatures.arena());
    }

    pub fn set_monitor(&mut self, m: Option<Monitor>, all: bool) {
        self.monitor = m.map(|m| (m, all));
    }

    /// Takes `other`'s monitor (a reshaped executor keeps its original's).
    pub fn copy_monitor_from(&mut self, other: &Executor) {
        self.monitor = other.monitor.clone();
    }

    /// Bytes of the memory plan of one run ([`plan`]): internal values and outputs of the
    /// forward and, when gradients are bound, of the backward; bound arrays are not counted.
    /// This is what `MXExecutorPrint` reports as `Total N MB allocated`, with MXNet's meaning.
    pub fn planned_bytes(&self) -> Result<usize> {
        let descs: Vec<TensorDesc> = self
            .input_map
            .iter()
            .map(|m| {
                let a = match *m {
                    Ok(i) => &self.args[i],
                    Err(i) => &self.aux[i],
                };
                TensorDesc::new(a.shape(), a.dtype())
            })
            .collect();
        let grad_inputs: Vec<bool> = self
            .input_map
            .iter()
            .map(|m| match *m {
                Ok(i) => self.reqs[i] != GradReq::Null && self.grads[i].is_some(),
                Err(_) => false,
            })
            .collect();
        let training = grad_inputs.contains(&true);
        let graph = |grads: Option<&[bool]>| {
            plan::forward_backward(&self.runner, &descs, self.ctx, training, grads)
        };
        // an op whose gradient the planner cannot follow (one that needs its forward's state)
        // leaves the forward's plan
        let g = match graph(training.then_some(&grad_inputs[..])) {
            Ok(g) => g,
            Err(_) if training => graph(None)?,
            Err(e) => return Err(e),
        };
        Ok(plan::plan(&g).total_bytes())
    }

    /// Bytes of the bound and output arrays.
    pub fn bytes_allocated(&self) -> usize {
        let grads = self
            .grads
            .iter()
            .flatten()
            .map(NDArray::nbytes)
            .sum::<usize>();
        self.args
            .iter()
            .chain(&self.aux)
            .chain(&self.outputs)
            .map(NDArray::nbytes)
            .sum::<usize>()
            + grads
    }

    /// Runs the graph (`is_train`: training mode for its ops); with gradients bound, records it
    /// for `backward`.
    pub fn forward(&mut self, is_train: bool) -> Result<()> {
        // recorded whenever gradients are bound: MXNet allows a backward after a forward with
        // is_train=False too
        let wants_grad = self
            .reqs
            .iter()
            .zip(&self.grads)
            .any(|(r, g)| *r != GradReq::Null && g.is_some());
        let inputs: Vec<NDArray> = self
            .input_map
            .iter()
            .map(|m| match *m {
                Ok(i) => self.args[i].detach(),
                Err(i) => self.aux[i].detach(),
            })
            .collect();
        self.heads.clear();
        let results = {
            let _modes = ModeGuard::set(is_train, wants_grad);
            if wants_grad {
                let mut vars = Vec::new();
                let mut reqs = Vec::new();
                let mut bufs = Vec::new();
                for (k, m) in self.input_map.iter().enumerate() {
                    if let Ok(i) = *m
                        && self.reqs[i] != GradReq::Null
                        && let Some(g) = &self.grads[i]
                    {
                        vars.push(inputs[k].clone());
                        reqs.push(self.reqs[i]);
                        bufs.push(g.detach());
                    }
                }
                autograd::mark_variables(&vars, &reqs, &bufs)?;
            }
            // without gradients or a monitor, the planned run: one engine op whose scratch
            // buffers are kept across forwards (static allocation)
            let planned = match (&self.monitor, wants_grad, &self.runner.placement) {
                (None, false, None) => {
                    fast::try_run(&self.signatures, &self.runner, &inputs, true)?
                }
                _ => None,
            };
            self.tape_steps.clear();
            match planned {
                Some(r) => r,
                None if self.monitor.is_some() && wants_grad => {
                    // keep the nodes' arrays to know the recorded nodes for the backward
                    let monitor = self.monitor.as_ref().map(|(m, all)| (m, *all));
                    self.runner.check_inputs(&inputs)?;
                    let mut values = Vec::with_capacity(self.runner.num_steps());
                    let n = self.runner.num_steps();
                    self.runner.run_steps(&inputs, &mut values, n, monitor)?;
                    for (s, outs) in values.iter().enumerate() {
                        if matches!(self.runner.steps[s], Step::Op(_))
                            && let Some(id) = outs.first().and_then(autograd::backward::node_id)
                        {
                            self.tape_steps.insert(id, s);
                        }
                    }
                    self.runner.collect_outputs(&values)?
                }
                None => {
                    let monitor = self.monitor.as_ref().map(|(m, all)| (m, *all));
                    self.runner.run(&inputs, monitor)?
                }
            }
        };
        for (r, o) in results.iter().zip(&self.outputs) {
            copy_into(r, o)?;
        }
        if wants_grad {
            self.heads = results;
        }
        Ok(())
    }

    /// Runs node `step` of the graph's post order (MXNet's `PartialForward`: variables count
    /// as nodes) and returns how many nodes are left; the last step fills the output arrays.
    /// Steps run in order: a step past the ones run so far runs those before it first, and
    /// step 0 (or a step already run) starts over. A step past the last is 0 left, nothing run.
    pub fn partial_forward(&mut self, is_train: bool, step: usize) -> Result<usize> {
        let n = self.runner.num_steps();
        if step >= n {
            return Ok(0);
        }
        if step < self.partial.len() {
            self.partial.clear();
        }
        let inputs: Vec<NDArray> = self
            .input_map
            .iter()
            .map(|m| match *m {
                Ok(i) => self.args[i].detach(),
                Err(i) => self.aux[i].detach(),
            })
            .collect();
        let ran = (|| {
            if self.partial.is_empty() {
                self.runner.check_inputs(&inputs)?;
            }
            let _modes = ModeGuard::set(is_train, false);
            let monitor = self.monitor.as_ref().map(|(m, all)| (m, *all));
            self.runner
                .run_steps(&inputs, &mut self.partial, step + 1, monitor)?;
            if step + 1 == n {
                let results = self.runner.collect_outputs(&self.partial)?;
                for (r, o) in results.iter().zip(&self.outputs) {
                    copy_into(r, o)?;
                }
                self.partial.clear();
            }
            Ok(())
        })();
        if ran.is_err() {
            self.partial.clear();
        }
        ran.map(|()| n - step - 1)
    }

    /// Gradients of the last training forward into the gradient arrays; `head_grads` one per
    /// output, or none (only when every output is a loss layer's).
    pub fn backward(&mut self, head_grads: &[NDArray], is_train: bool) -> Result<()> {
        if self.heads.is_empty() {
            if self
                .grads
                .iter()
                .zip(&self.reqs)
                .all(|(g, r)| g.is_none() || *r == GradReq::Null)
            {
                return Ok(());
            }
            return Err(Error::invalid("backward needs a forward before it"));
        }
        if !head_grads.is_empty() && head_grads.len() != self.heads.len() {
            return Err(Error::invalid(format!(
                "head_grads: {} arrays given for {} outputs",
                head_grads.len(),
                self.heads.len()
            )));
        }
        if head_grads.is_empty() {
            for e in &self.runner.symbol.outputs {
                let no_head = e.node.op().is_some_and(|d| {
                    LOSS_OPS.contains(&d.name) || matches!(d.grad, Gradient::Zero)
                });
                if !no_head {
                    return Err(Error::invalid(
                        "Because the last operator is not Loss function, head_gradient is \
                         required when calling backward. If you are attempting to minimize the \
                         output as an objective, please modify your network and pass it through \
                         the make_loss symbol.",
                    ));
                }
            }
        }
        for (i, (h, g)) in self.heads.iter().zip(head_grads).enumerate() {
            if h.shape() != g.shape() {
                return Err(Error::invalid(format!(
                    "head_grads[{i}]: shape {:?} does not match output {:?}",
                    g.shape(),
                    h.shape()
                )));
            }
        }
        let args = BackwardArgs {
            heads: self.heads.clone(),
            head_grads: head_grads.iter().map(|g| Some(g.detach())).collect(),
            variables: Vec::new(),
            retain_graph: true,
            create_graph: false,
            is_train,
        };
        match &self.monitor {
            Some((m, all)) if !self.tape_steps.is_empty() => {
                let hook = self.backward_monitor(m.clone(), *all);
                autograd::backward::with_node_hook(hook, || autograd::backward(args))?;
            }
            _ => {
                autograd::backward(args)?;
            }
        }
        Ok(())
    }

    /// The hook that reports a monitored backward as MXNet's executor does: per op node, in
    /// the backward's order, the gradients it gives its (non-auxiliary) inputs as
    /// `<node>_backward_output<i>` (`<node>_backward_output` when there is one; zeros where
    /// none is computed) and, with `all`, its inputs first: the output gradients and the
    /// forward's inputs as `<node>_backward_input<k>`, a variable's own name before it.
    fn backward_monitor(&self, m: Monitor, all: bool) -> autograd::backward::NodeHook {
        struct Names {
            op: &'static str,
            /// Per forward input: reported (not an auxiliary state), its variable's name.
            ins: Vec<(bool, Option<String>)>,
            base: String,
        }
        let mut names: HashMap<usize, Names> = HashMap::new();
        for (&id, &s) in &self.tape_steps {
            let Step::Op(op) = &self.runner.steps[s] else {
                continue;
            };
            let ins = op
                .inputs
                .iter()
                .map(|&(n, _)| match self.runner.steps[n] {
                    Step::Input(i) => (!self.runner.aux[i], Some(self.runner.inputs[i].name())),
                    Step::Op(_) => (true, None),
                })
                .collect();
            names.insert(
                id,
                Names {
                    op: op.def.name,
                    ins,
                    base: format!("{}_backward", op.name),
                },
            );
        }
        std::rc::Rc::new(move |g: &autograd::backward::NodeGrads<'_>| {
            let Some(n) = names.get(&g.node) else {
                return;
            };
            if all {
                let mut k = 0;
                for a in g.ograds {
                    m(&format!("{}_input{k}", n.base), n.op, a);
                    k += 1;
                }
                for (a, (_, var)) in g.inputs.iter().zip(&n.ins) {
                    if let Some(v) = var {
                        m(v, n.op, a);
                    }
                    m(&format!("{}_input{k}", n.base), n.op, a);
                    k += 1;
                }
            }
            let shown = n.ins.iter().filter(|(r, _)| *r).count();
            let mut k = 0;
            for (i, (r, _)) in n.ins.iter().enumerate() {
                if !*r {
                    continue;
                }
                let name = if shown == 1 {
                    format!("{}_output", n.base)
                } else {
                    format!("{}_output{k}", n.base)
                };
                k += 1;
                let a = match (g.igrads.get(i).cloned().flatten(), g.inputs.get(i)) {
                    (Some(a), _) => a,
                    (None, Some(x)) => {
                        let ctx = x.ctx().unwrap_or(Context::cpu(0));
                        match zeros(x.shape(), x.dtype(), ctx) {
                            Ok(z) => z,
                            Err(_) => continue,
                        }
                    }
                    (None, None) => continue,
                };
                m(&name, n.op, &a);
            }
        })
    }

    /// The arguments' names with their shapes, for `reshape`.
    pub fn arg_shapes(&self) -> Vec<(String, Vec<i64>)> {
        self.arg_names
            .iter()
            .zip(&self.args)
            .map(|(n, a)| (n.clone(), a.shape().to_vec()))
            .collect()
    }

    /// A new executor for new input shapes sharing this one's arrays where shapes stay
    /// (MXNet's `Reshape`).
    pub fn reshape(
        &self,
        shapes: Vec<(String, Vec<i64>)>,
        partial_shaping: bool,
        allow_up_sizing: bool,
    ) -> Result<Executor> {
        let sym = self.symbol();
        let given: Vec<&String> = shapes.iter().map(|(n, _)| n).collect();
        let s = infer_shapes(sym, &Known::Named(shapes.clone()))?;
        let mut args = Vec::new();
        let mut grads = Vec::new();
        for (i, n) in self.arg_names.iter().enumerate() {
            let old = &self.args[i];
            let new = s.args[i].clone().ok_or_else(|| {
                Error::invalid(format!(
                    "reshape: the shape of argument {n} cannot be inferred"
                ))
            })?;
            if new.as_slice() == old.shape() {
                args.push(old.clone());
                grads.push(self.grads[i].clone());
                continue;
            }
            if !given.contains(&n) && !partial_shaping {
                return Err(Error::invalid(format!(
                    "Shape of unspecifie arg: {n} changed. This can cause the new executor to \
                     not share parameters with the old one. Please check for error in network.\
                     If this is intended, set partial_shaping=True to suppress this warning."
                )));
            }
            let new_size: i64 = new.iter().product();
            if new_size as usize > old.size() && !allow_up_sizing {
                return Err(Error::invalid(format!(
                    "New shape of arg: {n} is larger than original.First making a big executor \
                     and then down sizing it is more efficient than the reverse.If you really \
                     want to up size, set allow_up_sizing=True to enable allocation of new \
                     arrays."
                )));
            }
            args.push(view_or_new(old, &new, old.dtype(), self.ctx)?);
            grads.push(match &self.grads[i] {
                Some(g) => Some(view_or_new(g, &new, old.dtype(), self.ctx)?),
                None => None,
            });
        }
        let mut aux = Vec::new();
        for (i, n) in self.aux_names.iter().enumerate() {
            let old = &self.aux[i];
            let new = s.aux[i].clone().ok_or_else(|| {
                Error::invalid(format!(
                    "reshape: the shape of auxiliary state {n} cannot be inferred"
                ))
            })?;
            if new.as_slice() == old.shape() {
                aux.push(old.clone());
            } else {
                aux.push(view_or_new(old, &new, old.dtype(), self.ctx)?);
            }
        }
        let mut e = Self::assemble(
            sym,
            self.ctx,
            self.arg_names.clone(),
            self.aux_names.clone(),
            args,
            grads,
            self.reqs.clone(),
            aux,
            &self.outputs,
        )?;
        e.monitor = self.monitor.clone();
        e.share_pool_from(self);
        Ok(e)
    }
}

/// The name of a graph entry (`<node>_<output>`), re-exported for callers of this module.
pub fn output_name(e: &Entry) -> String {
    entry_name(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(v: &[f32]) -> NDArray {
        let a = NDArray::new(&[v.len() as i64], Context::cpu(0), DType::F32, false).unwrap();
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
        a.sync_copy_from_bytes(&bytes).unwrap();
        a
    }

    fn values(a: &NDArray) -> Vec<f32> {
        let mut bytes = vec![0u8; a.nbytes()];
        a.sync_copy_to_bytes(&mut bytes).unwrap();
        bytes
            .chunks(4)
            .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// `exp(a) * b` built as the Python package builds it.
    fn graph() -> Symbol {
        let mut e = Symbol::atomic(Symbol::op_def("exp").unwrap(), &[]).unwrap();
        e.compose("e", &[Symbol::variable("a")], &[]).unwrap();
        let mut m = Symbol::atomic(Symbol::op_def("elemwise_mul").unwrap(), &[]).unwrap();
        m.compose("m", &[e, Symbol::variable("b")], &[]).unwrap();
        m
    }

    #[test]
    fn runner_and_executor_match_a_serial_computation() {
        let (av, bv) = ([0.5f32, -1.0, 2.0], [3.0f32, 0.25, -1.5]);
        let op = CachedOp::new(
            &graph(),
            CachedOpFlags::parse(&[("static_alloc", "True")]).unwrap(),
        )
        .unwrap();
        let out = op.invoke(&[array(&av), array(&bv)], None).unwrap();
        let want: Vec<f32> = av.iter().zip(&bv).map(|(a, b)| a.exp() * b).collect();
        for (g, w) in values(&out[0]).iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1.0), "{g} vs {w}");
        }
        let Err(e) = op.invoke(&[array(&av)], None) else {
            panic!("a call with one input of two ran")
        };
        assert!(e.message().contains("requires 2 inputs but got 1"), "{e}");

        let (ga, gb) = (array(&[0.0; 3]), array(&[1.0; 3]));
        let mut ex = Executor::bind(
            &graph(),
            Context::cpu(0),
            vec![array(&av), array(&bv)],
            vec![Some(ga.clone()), Some(gb.clone())],
            vec![GradReq::Write, GradReq::Add],
            Vec::new(),
        )
        .unwrap();
        ex.forward(true).unwrap();
        ex.backward(&[array(&[1.0; 3])], true).unwrap();
        for i in 0..3 {
            let da = av[i].exp() * bv[i];
            let db = 1.0 + av[i].exp();
            assert!((values(&ga)[i] - da).abs() < 1e-5 * da.abs().max(1.0));
            assert!((values(&gb)[i] - db).abs() < 1e-5 * db.abs().max(1.0));
        }
        // no head gradient for an output that is not a loss
        let e = ex.backward(&[], true).unwrap_err();
        assert!(e.message().contains("head_gradient is required"), "{e}");
    }

    #[test]
    fn flags_are_checked() {
        assert!(CachedOpFlags::parse(&[("static_shape", "True")]).is_err());
        assert!(CachedOpFlags::parse(&[("bogus", "1")]).is_err());
        let f = CachedOpFlags::parse(&[("data_indices", "[0, 2]"), ("inline_limit", "3")]).unwrap();
        assert_eq!(f.data_indices, vec![0, 2]);
        assert_eq!(f.inline_limit, 3);
    }
}
