//! MXNet's `Custom` operator: operators written in a front-end language (Python's
//! `mx.operator.CustomOp` and `CustomOpProp`), registered by name and invoked as `Custom` with
//! `op_type=<name>` and the user's own parameters.
//!
//! The front end registers a *creator* per name ([`register`]). Each invoke calls it with the
//! invoke's parameters (all but `op_type`), which gives a property object ([`CustomProp`]); on
//! the calling thread the property lists the arguments, outputs and auxiliary states, infers
//! shapes, dtypes and storage, declares what its backward reads, and creates the operator
//! ([`CustomOp`]), which is the invoke's state ([`CustomState`], an [`OpState`]).
//!
//! **Running the callbacks.** The forward (and backward) is an asynchronous engine op named
//! `Custom` (`_backward_Custom`) that reads the arguments and writes the outputs and auxiliary
//! states. Its body only hands the call to a *custom-operator thread* (a pool that grows
//! whenever every thread is busy, as MXNet's does) and returns. That thread calls the front
//! end's callback with *aliases* of the arrays: the same memory under fresh engine variables.
//! The callback may therefore push operators on them, wait for them (`asnumpy()`) and call
//! other custom operators: none of that waits for the `Custom` op, which still holds the real
//! arrays' variables, and no engine worker is blocked meanwhile (an engine worker could not
//! wait at all: waits inside an op are refused). After the callback the thread pushes a
//! `CustomOperatorWait` op that writes every alias (so it runs after everything the callback
//! pushed on them) and completes the `Custom` op with the callback's error, or the first error
//! one of its pushed ops left on an alias. So the real arrays change only while the `Custom` op
//! holds them, later ops see the callback's results, and every error reaches the outputs.
//! Under NaiveEngine the same happens synchronously inside the invoke.
//!
//! **Autograd.** `Custom`'s gradient applies the internal `_mxrt_backward_Custom` op with the
//! forward's state ([`GradGraph::apply_stateful`](super::def::GradGraph::apply_stateful)): its
//! inputs are the values `declare_backward_dependency` named (output gradients, arguments,
//! outputs) and the auxiliary states, its outputs the arguments' gradients.
//!
//! **Profiling.** Ops the callback pushes are named `<op_type>::<op>` (`_backward_<op_type>::`
//! in a backward) and the callback's own time is recorded as `<op_type>::pure_python`, both in
//! the "Custom Operator" domain, as MXNet shows them.

use super::def::{Entries, GradCtx, Val};
use super::mode::ModeGuard;
use super::op::{Call, OpState, Plan, TensorDesc};
use crate::context::Context;
use crate::dtype::DType;
use crate::engine::{Completion, Engine, FnProperty, PushArgs, Var};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

/// Tags of the arrays a forward or backward callback gets (MXNet's): an argument.
pub const TAG_IN_DATA: i32 = 0;
/// An output.
pub const TAG_OUT_DATA: i32 = 1;
/// An argument's gradient (backward).
pub const TAG_IN_GRAD: i32 = 2;
/// An output's gradient (backward).
pub const TAG_OUT_GRAD: i32 = 3;
/// An auxiliary state.
pub const TAG_AUX: i32 = 4;

/// MXNet's `OpReqType` codes as the callbacks get them.
pub const REQ_NULL: i32 = 0;
pub const REQ_WRITE: i32 = 1;

/// A custom operator's property object, made by its creator for one invoke's parameters.
/// Dropping it releases the front end's object (MXNet's `kCustomOpPropDelete`).
pub trait CustomProp: Send + Sync {
    fn list_arguments(&self) -> Result<Vec<String>>;
    fn list_outputs(&self) -> Result<Vec<String>>;
    fn list_auxiliary_states(&self) -> Result<Vec<String>>;
    /// `shapes` has one entry per argument, output and auxiliary state; MXNet fills the first
    /// `arguments + auxiliary states` entries with the inputs' shapes in input order and leaves
    /// the others empty. Returns the shapes of the arguments, outputs and auxiliary states, in
    /// that order.
    fn infer_shape(&self, shapes: Vec<Vec<i64>>) -> Result<Vec<Vec<i64>>>;
    /// `types` (dtype codes): the arguments', the outputs' (-1) and the auxiliary states'.
    /// Returns all of them, or `None` when the property has no dtype inference.
    fn infer_type(&self, types: Vec<i32>) -> Result<Option<Vec<i32>>>;
    /// As [`CustomProp::infer_type`] for storage types (0 dense, 1 row_sparse, 2 csr, -1
    /// unknown).
    fn infer_storage_type(&self, stypes: Vec<i32>) -> Result<Option<Vec<i32>>>;
    /// Given the ids of the output gradients, arguments and outputs, the ids the backward
    /// reads.
    fn declare_backward_dependency(
        &self,
        out_grad: &[i32],
        in_data: &[i32],
        out_data: &[i32],
    ) -> Result<Vec<i32>>;
    /// Creates the operator for inputs (arguments then auxiliary states) of these shapes and
    /// dtypes on `ctx` (`cpu(0)`).
    fn create_operator(
        &self,
        ctx: &str,
        shapes: &[Vec<i64>],
        dtypes: &[i32],
    ) -> Result<Box<dyn CustomOp>>;
}

/// A created custom operator. `arrays` are handed over to the callee, one per `tags` entry;
/// `reqs` has one request per array written (outputs, or arguments' gradients). Dropping it
/// releases the front end's object (MXNet's `kCustomOpDelete`).
pub trait CustomOp: Send + Sync {
    fn forward(
        &self,
        arrays: Vec<NDArray>,
        tags: &[i32],
        reqs: &[i32],
        is_train: bool,
    ) -> Result<()>;
    fn backward(
        &self,
        arrays: Vec<NDArray>,
        tags: &[i32],
        reqs: &[i32],
        is_train: bool,
    ) -> Result<()>;
}

/// Makes a custom operator's property object from the op type and the invoke's parameters
/// (MXNet's `CustomOpPropCreator`).
pub type Creator = Arc<dyn Fn(&str, &[(&str, &str)]) -> Result<Box<dyn CustomProp>> + Send + Sync>;

fn registry() -> &'static Mutex<HashMap<String, Creator>> {
    static REG: std::sync::OnceLock<Mutex<HashMap<String, Creator>>> = std::sync::OnceLock::new();
    REG.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Registers `creator` under `op_type`; a later registration of the same name replaces it (as
/// in MXNet). Returns whether one was replaced.
pub fn register_creator(op_type: &str, creator: Creator) -> bool {
    registry()
        .lock()
        .insert(op_type.to_owned(), creator)
        .is_some()
}

/// The creator registered under `op_type`.
pub fn creator(op_type: &str) -> Option<Creator> {
    registry().lock().get(op_type).cloned()
}

/// `name` made to live for the process (op names shown by the profiler; a few per custom op).
fn intern(name: String) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock();
    let set = names.get_or_insert_with(HashSet::new);
    if let Some(&s) = set.get(name.as_str()) {
        return s;
    }
    let s: &'static str = Box::leak(name.into_boxed_str());
    set.insert(s);
    s
}

thread_local! {
    /// The custom operator whose callback this thread runs (`<op_type>` or
    /// `_backward_<op_type>`), for the names of the ops it pushes.
    static SCOPE: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// The name an op pushed by this thread is shown under: `<scope>::<name>` inside a custom
/// operator's callback, `name` elsewhere.
pub fn display_name(name: &'static str) -> &'static str {
    match SCOPE.with(Cell::get) {
        None => name,
        Some(scope) => intern(format!("{scope}::{name}")),
    }
}

/// Sets this thread's scope and restores the previous one when dropped.
struct ScopeGuard(Option<&'static str>);

impl ScopeGuard {
    fn enter(scope: &'static str) -> ScopeGuard {
        ScopeGuard(SCOPE.with(|s| s.replace(Some(scope))))
    }
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        SCOPE.with(|s| s.set(self.0));
    }
}

/// What one `Custom` invoke created: the property, the operator and what its backward needs.
/// The autograd tape keeps it with the recorded op; dropping the last reference releases the
/// front end's objects.
pub struct CustomState {
    op_type: String,
    num_args: usize,
    num_outs: usize,
    num_auxs: usize,
    /// What the backward reads, as ids: output gradients `0..outs`, arguments
    /// `outs..outs + args`, outputs after them.
    bwd_idx: Vec<usize>,
    /// The forward's inputs (arguments, then auxiliary states).
    in_descs: Vec<TensorDesc>,
    /// Names for the profiler: `<op_type>` and `_backward_<op_type>`.
    fwd_scope: &'static str,
    bwd_scope: &'static str,
    // the operator goes before the property that made it
    op: Box<dyn CustomOp>,
    _prop: Box<dyn CustomProp>,
}

impl CustomState {
    /// The registered name of the operator.
    pub fn op_type(&self) -> &str {
        &self.op_type
    }
}

/// Registers `Custom` and its backward op.
pub fn register(t: &mut Entries) {
    t.def("Custom", &plan_custom).grad(custom_grad);
    t.def("_mxrt_backward_Custom", &plan_backward);
}

fn names(list: &[String]) -> String {
    list.join(", ")
}

/// Plans a `Custom` invoke: everything the property decides, on the calling thread.
fn plan_custom(call: &Call<'_>) -> Result<Plan> {
    let pairs = call.params.take_all();
    let op_type = pairs
        .iter()
        .find(|(k, _)| *k == "op_type")
        .map(|(_, v)| v.trim_matches(|c| c == '\'' || c == '"').to_string())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            Error::invalid("operator Custom: Required argument `op_type` is missing.")
        })?;
    let kwargs: Vec<(&str, &str)> = pairs.into_iter().filter(|(k, _)| *k != "op_type").collect();
    let creator = creator(&op_type).ok_or_else(|| {
        Error::invalid(format!(
            "operator Custom: Cannot find custom operator {op_type} (register it with \
             mx.operator.register, MXCustomOpRegister)"
        ))
    })?;
    let ctx_err = |e: Error| {
        Error::new(
            e.kind(),
            format!("custom operator {op_type}: {}", e.message()),
        )
    };
    let prop = creator(&op_type, &kwargs).map_err(ctx_err)?;
    let args = prop.list_arguments().map_err(ctx_err)?;
    let outs = prop.list_outputs().map_err(ctx_err)?;
    let auxs = prop.list_auxiliary_states().map_err(ctx_err)?;
    let (n_args, n_outs, n_auxs) = (args.len(), outs.len(), auxs.len());
    if call.inputs.len() != n_args + n_auxs {
        return Err(Error::invalid(format!(
            "custom operator {op_type} takes {n_args} argument(s) [{}] and {n_auxs} auxiliary \
             state(s) [{}], {} input(s) given",
            names(&args),
            names(&auxs),
            call.inputs.len()
        )));
    }
    if n_outs == 0 {
        return Err(Error::invalid(format!(
            "custom operator {op_type}: list_outputs returned no output"
        )));
    }
    // backward dependencies: ids as MXNet numbers them
    let out_grad: Vec<i32> = (0..n_outs as i32).collect();
    let in_data: Vec<i32> = (n_outs as i32..(n_outs + n_args) as i32).collect();
    let out_data: Vec<i32> = ((n_outs + n_args) as i32..(2 * n_outs + n_args) as i32).collect();
    let deps = prop
        .declare_backward_dependency(&out_grad, &in_data, &out_data)
        .map_err(ctx_err)?;
    let bwd_idx = deps
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .ok()
                .filter(|&d| d < 2 * n_outs + n_args)
                .ok_or_else(|| {
                    Error::invalid(format!(
                        "custom operator {op_type}: declare_backward_dependency returned id {d}, \
                         not one of the {} ids it was given",
                        2 * n_outs + n_args
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;

    // shapes: the inputs' in the first entries (as MXNet passes them), the rest unknown
    let total = n_args + n_outs + n_auxs;
    let mut shapes = vec![Vec::new(); total];
    for (s, d) in shapes.iter_mut().zip(call.inputs) {
        *s = d.shape.to_vec();
    }
    let shapes = prop.infer_shape(shapes).map_err(ctx_err)?;
    if shapes.len() != total {
        return Err(Error::invalid(format!(
            "custom operator {op_type}: infer_shape returned {} shapes, expected {total}",
            shapes.len()
        )));
    }
    let input_pos = |i: usize| if i < n_args { i } else { i + n_outs };
    for (i, d) in call.inputs.iter().enumerate() {
        let got = &shapes[input_pos(i)];
        if got[..] != d.shape[..] {
            return Err(Error::invalid(format!(
                "custom operator {op_type}: infer_shape returned shape {got:?} for input {i}, \
                 which has shape {:?}",
                &d.shape[..]
            )));
        }
    }
    for (j, s) in shapes[n_args..n_args + n_outs].iter().enumerate() {
        if let Some(&bad) = s.iter().find(|&&x| x < 0) {
            return Err(Error::invalid(format!(
                "custom operator {op_type}: infer_shape returned shape {s:?} for output {j} \
                 (dimension {bad})"
            )));
        }
    }

    // dtypes
    let mut types = vec![-1; total];
    for (i, d) in call.inputs.iter().enumerate() {
        types[input_pos(i)] = d.dtype.code();
    }
    let out_types: Vec<DType> = match prop.infer_type(types).map_err(ctx_err)? {
        Some(t) => {
            if t.len() != total {
                return Err(Error::invalid(format!(
                    "custom operator {op_type}: infer_type returned {} types, expected {total}",
                    t.len()
                )));
            }
            for (i, d) in call.inputs.iter().enumerate() {
                if t[input_pos(i)] != d.dtype.code() {
                    return Err(Error::invalid(format!(
                        "custom operator {op_type}: infer_type returned dtype code {} for input \
                         {i}, which is {}",
                        t[input_pos(i)],
                        d.dtype.name()
                    )));
                }
            }
            t[n_args..n_args + n_outs]
                .iter()
                .enumerate()
                .map(|(j, &c)| {
                    DType::from_code(c).map_err(|_| {
                        Error::invalid(format!(
                            "custom operator {op_type}: infer_type returned dtype code {c} for \
                             output {j}"
                        ))
                    })
                })
                .collect::<Result<_>>()?
        }
        // no dtype inference: every input and output has one dtype (MXNet's default)
        None => {
            let first = call.inputs.first().map(|d| d.dtype).ok_or_else(|| {
                Error::invalid(format!(
                    "custom operator {op_type} has no inputs and no infer_type: the outputs' \
                     dtypes are unknown"
                ))
            })?;
            if let Some((i, d)) = call
                .inputs
                .iter()
                .enumerate()
                .find(|(_, d)| d.dtype != first)
            {
                return Err(Error::invalid(format!(
                    "custom operator {op_type}: input {i} is {}, input 0 is {} (without \
                     infer_type all inputs have one dtype)",
                    d.dtype.name(),
                    first.name()
                )));
            }
            vec![first; n_outs]
        }
    };

    // storage: mxrt's custom operators take and give dense arrays
    let mut stypes = vec![0; total];
    for s in &mut stypes[n_args..n_args + n_outs] {
        *s = -1;
    }
    if let Some(st) = prop.infer_storage_type(stypes).map_err(ctx_err)?
        && let Some(j) = st.iter().position(|&s| s != 0)
    {
        return Err(Error::not_supported(format!(
            "custom operator {op_type}: infer_storage_type asks for storage type {} at position \
             {j}; mxrt's custom operators work on dense arrays only",
            st[j]
        )));
    }

    let ctx = call.input_ctx.unwrap_or(Context::cpu(0));
    let in_shapes: Vec<Vec<i64>> = call.inputs.iter().map(|d| d.shape.to_vec()).collect();
    let in_types: Vec<i32> = call.inputs.iter().map(|d| d.dtype.code()).collect();
    let op = prop
        .create_operator(&ctx.to_string(), &in_shapes, &in_types)
        .map_err(ctx_err)?;
    let outputs: Vec<TensorDesc> = shapes[n_args..n_args + n_outs]
        .iter()
        .zip(out_types)
        .map(|(s, t)| TensorDesc::new(s, t))
        .collect();
    let state = Arc::new(CustomState {
        fwd_scope: intern(op_type.clone()),
        bwd_scope: intern(format!("_backward_{op_type}")),
        op_type,
        num_args: n_args,
        num_outs: n_outs,
        num_auxs: n_auxs,
        bwd_idx,
        in_descs: call.inputs.to_vec(),
        op,
        _prop: prop,
    });
    let is_train = call.training;
    let mut plan = Plan::new(outputs, |_| {
        Err(Error::invalid("operator Custom runs through its launch"))
    })
    .mutating(&(n_args..n_args + n_auxs).collect::<Vec<_>>());
    plan.state = Some(state.clone() as OpState);
    plan.launch = Some(Box::new(move |engine, inputs, outputs, ctx| {
        launch_forward(engine, state, inputs, outputs, ctx, is_train)
    }));
    Ok(plan)
}

/// `Custom`'s gradient: `_mxrt_backward_Custom` on what the backward declared it reads and the
/// auxiliary states, with the forward's state. Auxiliary states get no gradient.
fn custom_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    let any = g
        .state
        .cloned()
        .ok_or_else(|| Error::invalid("the recorded Custom op kept no state"))?;
    let st = any
        .clone()
        .downcast::<CustomState>()
        .map_err(|_| Error::invalid("the recorded Custom op kept a state of another op"))?;
    let (n_args, n_outs) = (st.num_args, st.num_outs);
    let mut grads = vec![None; n_args + st.num_auxs];
    if !(0..n_args).any(|i| g.needs(i)) {
        return Ok(grads);
    }
    let mut inputs = Vec::with_capacity(st.bwd_idx.len() + st.num_auxs);
    for &d in &st.bwd_idx {
        inputs.push(if d < n_outs {
            g.dy(d)
        } else if d < n_outs + n_args {
            g.x(d - n_outs)
        } else {
            g.y(d - n_outs - n_args)
        });
    }
    for j in 0..st.num_auxs {
        inputs.push(g.x(n_args + j));
    }
    let reqs: Vec<&str> = (0..n_args)
        .map(|i| if g.needs(i) { "1" } else { "0" })
        .collect();
    let reqs = reqs.join(",");
    let outs =
        g.graph
            .apply_stateful("_mxrt_backward_Custom", &inputs, &[("reqs", &reqs)], &any)?;
    for (i, o) in outs.into_iter().enumerate().take(n_args) {
        if g.needs(i) {
            grads[i] = Some(o);
        }
    }
    Ok(grads)
}

/// Plans the backward: the arguments' gradients, computed by the operator's backward callback.
fn plan_backward(call: &Call<'_>) -> Result<Plan> {
    let st = call
        .state
        .cloned()
        .and_then(|s| s.downcast::<CustomState>().ok())
        .ok_or_else(|| {
            Error::invalid(format!(
                "operator {} is the gradient of a Custom op and needs its state",
                call.name
            ))
        })?;
    let reqs: Vec<i32> = match call.params.raw("reqs") {
        Some(s) => s
            .split(',')
            .map(|r| {
                r.trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|r| matches!(r, 0 | 1 | 3))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::invalid(format!("operator {}: bad reqs '{s}'", call.name)))?,
        None => vec![REQ_WRITE; st.num_args],
    };
    if reqs.len() != st.num_args {
        return Err(Error::invalid(format!(
            "operator {}: {} requests for {} arguments",
            call.name,
            reqs.len(),
            st.num_args
        )));
    }
    let n_in = st.bwd_idx.len() + st.num_auxs;
    if call.inputs.len() != n_in {
        return Err(Error::invalid(format!(
            "operator {} takes {n_in} inputs, {} given",
            call.name,
            call.inputs.len()
        )));
    }
    let outputs = st.in_descs[..st.num_args].to_vec();
    let is_train = call.training;
    let mut plan = Plan::new(outputs, |_| {
        Err(Error::invalid(
            "operator _backward_Custom runs through its launch",
        ))
    });
    plan.launch = Some(Box::new(move |engine, inputs, outputs, ctx| {
        launch_backward(engine, st, inputs, outputs, ctx, &reqs, is_train)
    }));
    Ok(plan)
}

/// The same memory as `a` under a fresh engine variable, keeping `a`'s memory alive.
fn alias(a: &NDArray, what: &str, op_type: &str) -> Result<NDArray> {
    if a.is_sparse() {
        return Err(Error::not_supported(format!(
            "custom operator {op_type}: {what} is a {} array; mxrt's custom operators work on \
             dense arrays only",
            a.stype().name()
        )));
    }
    let ctx = a.ctx().ok_or_else(|| {
        Error::invalid(format!("custom operator {op_type}: {what} is a none array"))
    })?;
    if !ctx.is_host() {
        return Err(Error::not_supported(format!(
            "custom operator {op_type}: {what} is on {ctx}; mxrt runs custom operators on CPU \
             arrays only"
        )));
    }
    let ptr = a.data_ptr()?;
    let keep = a.clone();
    // SAFETY: `ptr` is the start of `a`'s live data of the same shape and dtype, on a host
    // context; the release closure owns a clone of `a`, which keeps that memory alive until the
    // alias and every op queued on its variable are gone.
    unsafe { NDArray::from_foreign(ptr, a.shape(), a.dtype(), ctx, Box::new(move || drop(keep))) }
}

fn vars(arrays: &[NDArray]) -> Vec<Var> {
    arrays.iter().filter_map(|a| a.var().cloned()).collect()
}

/// Pushes the forward: the callback gets the arguments, the outputs and the auxiliary states.
fn launch_forward(
    engine: &Engine,
    st: Arc<CustomState>,
    inputs: &[NDArray],
    outputs: &[NDArray],
    ctx: Context,
    is_train: bool,
) -> Result<()> {
    let (args, auxs) = inputs.split_at(st.num_args);
    let mut arrays = Vec::with_capacity(inputs.len() + outputs.len());
    let mut tags = Vec::with_capacity(arrays.capacity());
    for (i, a) in args.iter().enumerate() {
        arrays.push(alias(a, &format!("input {i}"), &st.op_type)?);
        tags.push(TAG_IN_DATA);
    }
    for (j, o) in outputs.iter().enumerate() {
        arrays.push(alias(o, &format!("output {j}"), &st.op_type)?);
        tags.push(TAG_OUT_DATA);
    }
    for (j, a) in auxs.iter().enumerate() {
        arrays.push(alias(a, &format!("auxiliary state {j}"), &st.op_type)?);
        tags.push(TAG_AUX);
    }
    let reads = vars(args);
    let mut writes = vars(outputs);
    writes.extend(vars(auxs));
    let job = Job {
        reqs: vec![REQ_WRITE; st.num_outs],
        state: st,
        arrays,
        tags,
        is_train,
        backward: false,
        ctx,
    };
    push_job(engine, "Custom", &reads, &writes, job)
}

/// Pushes the backward: `inputs` are the declared dependencies then the auxiliary states,
/// `outputs` the arguments' gradients.
fn launch_backward(
    engine: &Engine,
    st: Arc<CustomState>,
    inputs: &[NDArray],
    outputs: &[NDArray],
    ctx: Context,
    reqs: &[i32],
    is_train: bool,
) -> Result<()> {
    let (deps, auxs) = inputs.split_at(st.bwd_idx.len());
    let (n_args, n_outs) = (st.num_args, st.num_outs);
    // output gradients, arguments, outputs: the declared ones, none arrays for the others
    let mut front = vec![NDArray::none(); 2 * n_outs + n_args];
    for (a, &d) in deps.iter().zip(&st.bwd_idx) {
        front[d] = alias(a, &format!("backward dependency {d}"), &st.op_type)?;
    }
    let mut tags: Vec<i32> = std::iter::repeat_n(TAG_OUT_GRAD, n_outs)
        .chain(std::iter::repeat_n(TAG_IN_DATA, n_args))
        .chain(std::iter::repeat_n(TAG_OUT_DATA, n_outs))
        .collect();
    let mut arrays = front;
    for (i, g) in outputs.iter().enumerate() {
        arrays.push(alias(g, &format!("gradient of input {i}"), &st.op_type)?);
        tags.push(TAG_IN_GRAD);
    }
    for (j, a) in auxs.iter().enumerate() {
        arrays.push(alias(a, &format!("auxiliary state {j}"), &st.op_type)?);
        tags.push(TAG_AUX);
    }
    let reads = vars(deps);
    let mut writes = vars(outputs);
    writes.extend(vars(auxs));
    let job = Job {
        state: st,
        arrays,
        tags,
        reqs: reqs.to_vec(),
        is_train,
        backward: true,
        ctx,
    };
    push_job(engine, "_backward_Custom", &reads, &writes, job)
}

/// One forward or backward callback to run on a custom-operator thread.
struct Job {
    state: Arc<CustomState>,
    arrays: Vec<NDArray>,
    tags: Vec<i32>,
    reqs: Vec<i32>,
    is_train: bool,
    backward: bool,
    ctx: Context,
}

/// Pushes the asynchronous engine op whose body hands `job` to a custom-operator thread.
fn push_job(
    engine: &Engine,
    name: &'static str,
    reads: &[Var],
    writes: &[Var],
    job: Job,
) -> Result<()> {
    let ctx = job.ctx;
    // A job the op never runs (it is skipped when an input carries an error) is dropped with
    // the op's body, before the engine counts the op out of `WaitForAll`: its state is then
    // released on that engine thread, and a wait for all ops has seen it released.
    let job = Mutex::new(Some(job));
    let args = PushArgs::new(ctx)
        .reads(reads)
        .writes(writes)
        .prop(FnProperty::Async)
        .name(name);
    engine.push_async_fn(args, move |_, done| match job.lock().take() {
        Some(job) => threads::submit(Box::new(move || job.run(done))),
        None => done.fail(format!("operator {name} ran twice")),
    })
}

impl Job {
    /// Runs the callback on this (custom-operator) thread, then pushes the wait op that
    /// completes the engine op `done` once everything the callback pushed has run.
    fn run(self, done: Completion) {
        let Job {
            state,
            arrays,
            tags,
            reqs,
            is_train,
            backward,
            ctx,
        } = self;
        let keep = arrays.clone();
        let (scope, what) = if backward {
            (state.bwd_scope, "backward")
        } else {
            (state.fwd_scope, "forward")
        };
        let result = {
            // MXNet runs the callbacks without recording, in the invoke's training mode
            let _modes = ModeGuard::set(is_train, false);
            let _scope = ScopeGuard::enter(scope);
            let _prof = crate::profiler::CustomCallbackScope::begin(scope);
            let call = std::panic::AssertUnwindSafe(|| {
                if backward {
                    state.op.backward(arrays, &tags, &reqs, is_train)
                } else {
                    state.op.forward(arrays, &tags, &reqs, is_train)
                }
            });
            std::panic::catch_unwind(call)
                .unwrap_or_else(|_| Err(Error::invalid(format!("the {what} callback panicked"))))
        };
        let result = result
            .map_err(|e| format!("custom operator {}: {what}: {}", state.op_type, e.message()));
        // the front end's objects are released here, off the engine's threads, when this was
        // the last reference
        drop(state);
        let wait_vars = vars(&keep);
        let done = Mutex::new(Some((done, result)));
        let body = move |_: &crate::engine::RunContext| {
            let Some((done, mut result)) = done.lock().take() else {
                return Ok(());
            };
            // the first error an op of the callback left on an array (each reported here once)
            for a in &keep {
                if let Some(msg) = a.var().and_then(Var::take_error)
                    && result.is_ok()
                {
                    result = Err(msg);
                }
            }
            done.finish(result);
            Ok(())
        };
        let pushed = Engine::global().and_then(|engine| {
            let args = PushArgs::new(ctx)
                .writes(&wait_vars)
                .wait(true)
                .name("CustomOperatorWait");
            engine.push_fn(args, body)
        });
        // a failed push drops the body, whose completion then fails the op
        let _ = pushed;
    }
}

/// The custom-operator threads: a pool that runs each job on an idle thread or a new one, so a
/// callback that waits (for its own ops, or for another custom operator's) never keeps another
/// job from running. Threads stay for the process; a forked child starts with none.
mod threads {
    use super::{Condvar, Mutex, VecDeque};

    pub(super) type Task = Box<dyn FnOnce() + Send>;

    struct Pool {
        queue: VecDeque<Task>,
        idle: usize,
        pid: u32,
    }

    static POOL: Mutex<Pool> = Mutex::new(Pool {
        queue: VecDeque::new(),
        idle: 0,
        pid: 0,
    });
    static WAKE: Condvar = Condvar::new();

    /// Runs `task` on a custom-operator thread.
    pub(super) fn submit(task: Task) {
        let mut p = POOL.lock();
        let pid = std::process::id();
        if p.pid != pid {
            // a forked child has none of its parent's threads
            p.pid = pid;
            p.idle = 0;
        }
        p.queue.push_back(task);
        if p.queue.len() > p.idle {
            let spawned = std::thread::Builder::new()
                .name("mxrt-custom-op".into())
                .spawn(worker);
            if spawned.is_err() && p.idle == 0 {
                // no thread to run it: dropping the task fails its op
                p.queue.pop_back();
                return;
            }
        }
        WAKE.notify_one();
    }

    fn worker() {
        let mut p = POOL.lock();
        loop {
            if let Some(task) = p.queue.pop_front() {
                drop(p);
                task();
                p = POOL.lock();
                continue;
            }
            p.idle += 1;
            WAKE.wait(&mut p);
            p.idle -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_carry_the_scope_only_inside_it() {
        assert_eq!(display_name("_plus_scalar"), "_plus_scalar");
        {
            let _s = ScopeGuard::enter("MyAdd");
            assert_eq!(display_name("_plus_scalar"), "MyAdd::_plus_scalar");
            let a = display_name("_zeros");
            assert!(std::ptr::eq(a, display_name("_zeros")), "interned once");
        }
        assert_eq!(display_name("_zeros"), "_zeros");
    }

    #[test]
    fn the_pool_runs_jobs_that_wait_for_each_other() {
        // two jobs where the first waits for the second: a fixed pool of one would hang
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        threads::submit(Box::new(move || {
            rx.recv().unwrap();
            done_tx.send(()).unwrap();
        }));
        threads::submit(Box::new(move || tx.send(()).unwrap()));
        done_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the waiting job finished");
    }
}
