//! The fast path of a CachedOp call: the whole graph as one engine op.
//!
//! A call that autograd does not record (the thread does not record, or no input is in a graph),
//! with no monitor hook and no profiler recording ops, on dense host arrays, does not need each
//! node to be an op of its own. Per input signature (shapes, dtypes, device, training mode) the
//! graph is planned once ([`Compiled`]): every node's definition, parameters and output
//! descriptions, and where each value lives during a run: a graph input, a graph output (a new
//! array the caller receives) or a scratch buffer, reused by later nodes once its last reader has
//! run. Scratch buffers are kept for the next calls (with `static_alloc`, or when they are
//! small). A graph with a node that is not a plain dense kernel (one that pushes its own work,
//! writes an input, needs a resource, runs on another device or may produce sparse storage) is
//! not compiled: its calls take the per-op path.
//!
//! A call allocates the graph's outputs and pushes one engine op reading the inputs' variables and
//! writing the outputs'. On the worker, each node is planned again (the kernel is made by
//! planning) and run on the buffers, in the graph's order, with the same kernels the per-op path
//! uses, so results are identical; convolutions run on prepared weights instead, with the
//! BatchNorm and relu after them folded in ([`super::fold`]: within float32 rounding). A
//! kernel's error fails the engine op, whose outputs then carry it, as an op of the per-op path
//! would.

use super::plan::{self, PlanGraph, PlanNode};
use super::{fold, fuse};
use super::{GraphRunner, Step};
use crate::context::Context;
use crate::engine::{Engine, PushArgs, Var};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use crate::ndarray::format::StorageType;
use crate::operator::def::OpDef;
use crate::operator::imperative::run_kernel;
use crate::operator::op::{Aliasing, Call, TensorDesc};
use crate::operator::param::Params;
use crate::operator::stype::{self, StorageRule};
use crate::operator::tensor::Tensor;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::sync::Arc;

/// Where a value lives during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Loc {
    /// Graph input `i`.
    In(usize),
    /// Graph output `k` (a new array).
    Out(usize),
    /// Scratch buffer `t`.
    Tmp(usize),
}

/// One op node, planned for one signature.
pub(super) struct FastStep {
    def: &'static OpDef,
    params: Vec<(String, String)>,
    pub(super) in_descs: Vec<TensorDesc>,
    pub(super) inputs: SmallVec<[Loc; 4]>,
    /// Where each of the op's outputs (hidden ones included) goes.
    pub(super) outputs: SmallVec<[Loc; 4]>,
    pub(super) out_descs: Vec<TensorDesc>,
    /// The node's position in the graph, and its inputs' (node, output) pairs.
    pub(super) node: usize,
    pub(super) in_values: Vec<(usize, usize)>,
    /// Whether the kernel is an elementwise map that may run on slices (fusion).
    pub(super) fusable: bool,
    /// A convolution run on prepared weights, with the nodes it absorbed ([`fold`]).
    prep: Option<fold::PreparedConv>,
}

/// Scratch memory, aligned for every dtype.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

type Buffers = Vec<Vec<Block>>;

/// A graph planned for one input signature.
pub(super) struct Compiled {
    ctx: Context,
    training: bool,
    steps: Vec<FastStep>,
    /// Runs of elementwise steps that run fused (in step order).
    groups: Vec<fuse::Group>,
    /// The graph outputs' descriptions.
    out_descs: Vec<TensorDesc>,
    /// Graph outputs that are copies (of a graph input, or of an output listed earlier).
    copies: Vec<(Loc, usize)>,
    /// Graph outputs that are a graph input itself (its first occurrence among the outputs):
    /// (input, output).
    aliases: Vec<(usize, usize)>,
    /// Bytes of each scratch buffer.
    tmp_bytes: Vec<usize>,
    /// Scratch buffers of finished runs, for the next ones.
    pool: Mutex<Vec<Buffers>>,
    /// How many sets of scratch buffers `pool` keeps.
    pooled: usize,
    /// Shared scratch memory, used instead of `pool` when set.
    arena: Option<Arc<Arena>>,
    /// Whether a step runs on prepared weights (a run then reads its inputs' write counts).
    prepared: bool,
}

/// The signatures a CachedOp has seen: `None` where the graph takes the per-op path.
#[derive(Default)]
pub(super) struct SignatureCache {
    entries: Mutex<Vec<Entry>>,
    /// Scratch memory shared with other executors (MXNet's `shared_exec`): when set, plans
    /// made from now on draw their scratch buffers from it instead of keeping their own.
    arena: Mutex<Option<Arc<Arena>>>,
}

/// Scratch buffers shared by the planned runs of several executors (a BucketingModule's
/// buckets, a reshaped executor and its original), as MXNet's executors bound with a shared
/// executor draw from its memory pool: a run takes a free buffer per scratch slot (the
/// smallest big enough, else the largest, grown) and gives them back when it ends, so the
/// memory kept is that of the largest plan, not the sum over executors.
#[derive(Default)]
pub(super) struct Arena {
    free: Mutex<Vec<Vec<Block>>>,
}

impl Arena {
    /// Buffers of at least `bytes[i]` bytes each.
    fn take(&self, bytes: &[usize]) -> Buffers {
        let mut free = self.free.lock();
        bytes
            .iter()
            .map(|&b| {
                let blocks = b.div_ceil(64);
                if blocks == 0 {
                    return Vec::new();
                }
                let fit = free
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.len() >= blocks)
                    .min_by_key(|(_, v)| v.len())
                    .map(|(i, _)| i);
                let largest = || {
                    free.iter()
                        .enumerate()
                        .max_by_key(|(_, v)| v.len())
                        .map(|(i, _)| i)
                };
                match fit.or_else(largest) {
                    Some(i) => {
                        let mut v = free.swap_remove(i);
                        if v.len() < blocks {
                            v.resize(blocks, Block([0; 64]));
                        }
                        v
                    }
                    None => vec![Block([0; 64]); blocks],
                }
            })
            .collect()
    }

    fn give_back(&self, bufs: Buffers) {
        self.free
            .lock()
            .extend(bufs.into_iter().filter(|v| !v.is_empty()));
    }
}

impl SignatureCache {
    /// The arena this cache's plans draw from, made on first use.
    pub(super) fn arena(&self) -> Arc<Arena> {
        let mut arena = self.arena.lock();
        arena.get_or_insert_with(Arc::default).clone()
    }

    /// Draws scratch memory from `arena` (another executor's) from now on.
    pub(super) fn share_arena(&self, arena: Arc<Arena>) {
        *self.arena.lock() = Some(arena);
        // plans made before keep their own buffers: start over
        self.entries.lock().clear();
    }
}

struct Entry {
    descs: Vec<TensorDesc>,
    ctx: Context,
    training: bool,
    compiled: Option<Arc<Compiled>>,
}

/// At most this many signatures are kept (a CachedOp called with ever new shapes starts over).
const MAX_SIGNATURES: usize = 32;

/// At most this many sets of scratch buffers are kept per signature.
const MAX_POOLED: usize = 4;

/// Scratch buffers of at most this many bytes in all are kept between calls even without
/// `static_alloc`.
const SMALL_SCRATCH: usize = 4 << 20;

impl SignatureCache {
    /// The plan for `inputs` (dense host arrays on `ctx`), made on first sight.
    fn get(
        &self,
        runner: &GraphRunner,
        inputs: &[NDArray],
        ctx: Context,
        training: bool,
        static_alloc: bool,
    ) -> Option<Arc<Compiled>> {
        let mut entries = self.entries.lock();
        let same = |e: &Entry| {
            e.ctx == ctx
                && e.training == training
                && e.descs.len() == inputs.len()
                && e.descs
                    .iter()
                    .zip(inputs)
                    .all(|(d, a)| d.dtype == a.dtype() && d.shape[..] == *a.shape())
        };
        if let Some(e) = entries.iter().find(|e| same(e)) {
            return e.compiled.clone();
        }
        let descs: Vec<TensorDesc> = inputs
            .iter()
            .map(|a| TensorDesc::new(a.shape(), a.dtype()))
            .collect();
        let arena = self.arena.lock().clone();
        let compiled = compile(runner, &descs, ctx, training).map(|mut c| {
            c.arena = arena;
            let total: usize = c.tmp_bytes.iter().sum();
            c.pooled = if static_alloc || total <= SMALL_SCRATCH {
                MAX_POOLED
            } else {
                0
            };
            Arc::new(c)
        });
        if entries.len() >= MAX_SIGNATURES {
            entries.clear();
        }
        entries.push(Entry {
            descs,
            ctx,
            training,
            compiled: compiled.clone(),
        });
        compiled
    }
}

/// Plans the graph for inputs described by `descs`; `None` when a node is not a plain dense
/// kernel on `ctx` or planning fails (the per-op path then reports the error as it does).
fn compile(
    runner: &GraphRunner,
    descs: &[TensorDesc],
    ctx: Context,
    training: bool,
) -> Option<Compiled> {
    // graph outputs: the first occurrence of an op output is written in place
    let n = runner.steps.len();
    let mut out_of: Vec<((usize, usize), usize)> = Vec::new();
    let mut copies = Vec::new();
    let mut aliases: Vec<(usize, usize)> = Vec::new();
    for (k, &(node, o)) in runner.outputs.iter().enumerate() {
        match runner.steps[node] {
            Step::Input(i) if aliases.iter().any(|&(a, _)| a == i) => copies.push((Loc::In(i), k)),
            Step::Input(i) => aliases.push((i, k)),
            Step::Op(_) => match out_of.iter().find(|(e, _)| *e == (node, o)) {
                Some(&(_, first)) => copies.push((Loc::Out(first), k)),
                None => out_of.push(((node, o), k)),
            },
        }
    }
    let mut values: Vec<Vec<(TensorDesc, Loc)>> = Vec::with_capacity(n);
    let mut steps = Vec::new();
    // the values and nodes for the memory plan: scratch values are placed by it
    let mut pg = PlanGraph::default();
    let mut entries: Vec<Vec<usize>> = Vec::with_capacity(n);
    let mut out_descs: Vec<Option<TensorDesc>> = vec![None; runner.outputs.len()];
    let shapes: Vec<Vec<i64>> = descs.iter().map(|d| d.shape.to_vec()).collect();
    let open = runner.open_params(&shapes).ok()?;
    // convolutions on prepared weights, absorbing the BatchNorm and relu after them
    let chains = fold::chains(runner, descs, training);
    for (s, step) in runner.steps.iter().enumerate() {
        let op = match step {
            Step::Input(i) => {
                values.push(vec![(descs[*i].clone(), Loc::In(*i))]);
                let d = &descs[*i];
                entries.push(vec![pg.entry(d.size() * d.dtype.size(), d.dtype.code(), true)]);
                continue;
            }
            // read only by the chain that ends later (the chain's step is planned there)
            Step::Op(_) if chains.absorbed.contains(&s) => {
                values.push(Vec::new());
                entries.push(Vec::new());
                continue;
            }
            Step::Op(op) => op,
        };
        // a chain's step is its convolution, its output the chain's last node's
        let chain = chains.by_last.get(&s);
        let (op, src) = match chain.map(|c| (&runner.steps[c.conv], c.conv)) {
            Some((Step::Op(conv), c)) => (conv, c),
            _ => (op, s),
        };
        let def = op.def;
        let op_params = open.get(&src).unwrap_or(&op.params);
        // a custom operator's planning calls into its frontend (it creates the operator), and
        // it runs through its own launch anyway: not planned here at all
        if matches!(def.name, "Custom" | "_backward_Custom") {
            return None;
        }
        let mut in_descs = Vec::with_capacity(op.inputs.len());
        let mut in_locs = SmallVec::new();
        for &(node, o) in &op.inputs {
            let (d, l) = values[node].get(o)?;
            in_descs.push(d.clone());
            in_locs.push(*l);
        }
        let pairs = op_params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let params = Params::new(def.name, pairs).ok()?;
        let input_ctx = (!op.inputs.is_empty()).then_some(ctx);
        let plan = def
            .forward
            .plan(&Call {
                name: def.name,
                inputs: &in_descs,
                params: &params,
                given_outputs: None,
                input_ctx,
                training,
                state: None,
                input_values: None,
            })
            .ok()?;
        if params.finish().is_err() && def.declares_params() {
            return None;
        }
        let step_ctx = plan.ctx.or(input_ctx).unwrap_or(Context::cpu(0));
        if plan.launch.is_some()
            || !plan.mutates.is_empty()
            || plan.resource.is_some()
            || step_ctx != ctx
        {
            return None;
        }
        if let StorageRule::Custom(_) = def.stype {
            let p: Vec<(&str, &str)> = op
                .params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let dense = vec![StorageType::Default; in_descs.len()];
            let st = stype::output_stypes(def.stype, &p, &dense, plan.outputs.len());
            if st.iter().any(|&t| t != StorageType::Default) {
                return None;
            }
        }
        let mut out_locs: SmallVec<[Loc; 4]> = SmallVec::new();
        let mut out_entries: SmallVec<[usize; 4]> = SmallVec::new();
        for (j, d) in plan.outputs.iter().enumerate() {
            let bytes = d.size() * d.dtype.size();
            if let Some(&(_, k)) = out_of.iter().find(|(e, _)| *e == (s, j)) {
                out_descs[k] = Some(d.clone());
                out_locs.push(Loc::Out(k));
                out_entries.push(pg.entry(bytes, d.dtype.code(), true));
                continue;
            }
            // a scratch value: `Tmp` names its entry until the plan gives it a buffer
            let e = pg.entry(bytes, d.dtype.code(), false);
            out_locs.push(Loc::Tmp(e));
            out_entries.push(e);
        }
        pg.nodes.push(PlanNode {
            inputs: op.inputs.iter().map(|&(node, o)| entries[node][o]).collect(),
            outputs: out_entries.iter().copied().collect(),
            inplace: plan.aliasing == Aliasing::Elementwise,
        });
        entries.push(out_entries.to_vec());
        values.push(
            plan.outputs
                .iter()
                .cloned()
                .zip(out_locs.iter().copied())
                .collect(),
        );
        let prep = chain.and_then(|c| {
            fold::PreparedConv::new(runner, c, &in_descs, plan.outputs.first()?)
        });
        // a chain that cannot be prepared would lose its absorbed nodes
        if chain.is_some_and(|c| c.conv != s) && prep.is_none() {
            return None;
        }
        steps.push(FastStep {
            def,
            params: op_params.clone(),
            in_descs,
            inputs: in_locs,
            outputs: out_locs,
            out_descs: plan.outputs,
            node: s,
            in_values: op.inputs.clone(),
            fusable: plan.block.is_some() && prep.is_none(),
            prep,
        });
    }
    // scratch values into the planned buffers (in place where the plan says so)
    let mem = plan::plan(&pg);
    let place = |l: &mut Loc| {
        if let Loc::Tmp(e) = *l {
            *l = Loc::Tmp(mem.slot[e].expect("scratch values are planned"));
        }
    };
    for step in &mut steps {
        step.inputs.iter_mut().for_each(place);
        step.outputs.iter_mut().for_each(place);
    }
    let mut tmp_bytes = mem.slot_bytes;
    let groups = if fuse::enabled() {
        fuse::find_groups(&steps, &runner.outputs)
    } else {
        Vec::new()
    };
    // scratch buffers that only values kept in a group's block buffers were given are not needed
    let mut used = vec![false; tmp_bytes.len()];
    for (i, step) in steps.iter().enumerate() {
        // groups are in step order and disjoint: the one containing step i, if any
        let group = groups
            .get(groups.partition_point(|g| g.end() <= i))
            .filter(|g| g.first <= i);
        let locs: Vec<Loc> = match group {
            Some(g) => {
                let op = &g.ops[i - g.first];
                op.inputs
                    .iter()
                    .chain([&op.output])
                    .filter_map(|s| match s {
                        fuse::Src::Ext(l) => Some(*l),
                        fuse::Src::Slot(_) => None,
                    })
                    .collect()
            }
            None => step.inputs.iter().chain(&step.outputs).copied().collect(),
        };
        for l in locs {
            if let Loc::Tmp(t) = l {
                used[t] = true;
            }
        }
    }
    for (t, u) in used.into_iter().enumerate() {
        if !u {
            tmp_bytes[t] = 0;
        }
    }
    // graph outputs that are copies or inputs take their source's description
    for &(i, k) in &aliases {
        out_descs[k] = Some(descs[i].clone());
    }
    for &(src, k) in &copies {
        out_descs[k] = Some(match src {
            Loc::In(i) => descs[i].clone(),
            Loc::Out(first) => out_descs[first].clone()?,
            Loc::Tmp(_) => return None,
        });
    }
    let prepared = steps.iter().any(|s| s.prep.is_some());
    Some(Compiled {
        ctx,
        training,
        prepared,
        steps,
        groups,
        out_descs: out_descs.into_iter().collect::<Option<Vec<_>>>()?,
        copies,
        aliases,
        tmp_bytes,
        pool: Mutex::new(Vec::new()),
        pooled: 0,
        arena: None,
    })
}

/// Start addresses of the arrays an engine op works on.
struct Ptrs(Vec<*mut u8>);

// SAFETY: the addresses are used only inside the engine op that orders access to their arrays
// (kept alive by the op's closure).
unsafe impl Send for Ptrs {}
// SAFETY: as above; the op only reads the addresses themselves.
unsafe impl Sync for Ptrs {}

/// Runs the graph on `inputs` as one engine op if this call can take the fast path (see the
/// module documentation); `None` when it must take the per-op path.
pub(super) fn try_run(
    cache: &SignatureCache,
    runner: &GraphRunner,
    inputs: &[NDArray],
    static_alloc: bool,
) -> Result<Option<Vec<NDArray>>> {
    if crate::profiler::ops_enabled() || inputs.is_empty() || inputs.iter().any(NDArray::is_sparse)
    {
        return Ok(None);
    }
    if crate::autograd::is_recording()
        && inputs
            .iter()
            .any(|a| crate::autograd::node::entry_of(a).is_some())
    {
        return Ok(None);
    }
    let Some(ctx) = inputs[0].ctx() else {
        return Ok(None);
    };
    if !ctx.is_host() || inputs.iter().any(|a| a.ctx() != Some(ctx)) {
        return Ok(None);
    }
    let training = crate::autograd::is_training();
    let Some(c) = cache.get(runner, inputs, ctx, training, static_alloc) else {
        return Ok(None);
    };
    let engine = Engine::global()?;
    // an output that is an input is that array: the op neither allocates nor writes it
    let aliased = |k: usize| c.aliases.iter().find(|&&(_, o)| o == k).map(|&(i, _)| i);
    let outputs = c
        .out_descs
        .iter()
        .enumerate()
        .map(|(k, d)| match aliased(k) {
            Some(i) => Ok(inputs[i].clone()),
            None => NDArray::new(&d.shape, ctx, d.dtype, false),
        })
        .collect::<Result<Vec<_>>>()?;
    let in_ptrs = Ptrs(
        inputs
            .iter()
            .map(NDArray::data_ptr)
            .collect::<Result<_>>()?,
    );
    let out_ptrs = Ptrs(
        outputs
            .iter()
            .map(NDArray::data_ptr)
            .collect::<Result<_>>()?,
    );
    let reads: SmallVec<[Var; 8]> = inputs.iter().filter_map(|a| a.var().cloned()).collect();
    let writes: SmallVec<[Var; 8]> = outputs
        .iter()
        .enumerate()
        .filter(|&(k, _)| aliased(k).is_none())
        .filter_map(|(_, a)| a.var().cloned())
        .collect();
    // the op keeps every array alive until it has run
    let keep: Vec<NDArray> = inputs.iter().chain(&outputs).cloned().collect();
    let compiled = c.clone();
    let args = PushArgs::new(ctx)
        .reads(&reads)
        .writes(&writes)
        .name("_CachedOp");
    let n_in = inputs.len();
    engine.push_fn(args, move |_| {
        let (_, ins, outs) = (&keep, &in_ptrs, &out_ptrs);
        // the inputs' write counts, for weights prepared from them (this op reads their
        // variables, so no write to them is in flight)
        let versions: Vec<u64> = if compiled.prepared {
            keep[..n_in]
                .iter()
                .map(|a| a.var().map_or(0, Var::version))
                .collect()
        } else {
            Vec::new()
        };
        compiled
            .run(&ins.0, &outs.0, &versions)
            .map_err(|e| e.to_string())
    })?;
    Ok(Some(outputs))
}

impl Compiled {
    /// Runs every node on the buffers (inside the engine op).
    fn run(&self, ins: &[*mut u8], outs: &[*mut u8], versions: &[u64]) -> Result<()> {
        if let Some(arena) = &self.arena {
            let mut bufs = arena.take(&self.tmp_bytes);
            let result = self.run_steps(ins, outs, versions, &mut bufs);
            arena.give_back(bufs);
            return result;
        }
        let mut bufs = self.pool.lock().pop().unwrap_or_else(|| {
            self.tmp_bytes
                .iter()
                .map(|&b| vec![Block([0; 64]); b.div_ceil(64)])
                .collect()
        });
        let result = self.run_steps(ins, outs, versions, &mut bufs);
        let mut pool = self.pool.lock();
        if pool.len() < self.pooled {
            pool.push(bufs);
        }
        result
    }

    /// Plans a step again (planning makes its kernel).
    fn plan_step(&self, step: &FastStep) -> Result<crate::operator::op::Plan> {
        let name = step.def.name;
        let pairs = step
            .params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let fail = |e: Error| Error::invalid(format!("operator {name}: {e}"));
        let params = Params::new(name, pairs).map_err(fail)?;
        step.def
            .forward
            .plan(&Call {
                name,
                inputs: &step.in_descs,
                params: &params,
                given_outputs: None,
                input_ctx: (!step.inputs.is_empty()).then_some(self.ctx),
                training: self.training,
                state: None,
                input_values: None,
            })
            .map_err(fail)
    }

    fn run_steps(
        &self,
        ins: &[*mut u8],
        outs: &[*mut u8],
        versions: &[u64],
        bufs: &mut Buffers,
    ) -> Result<()> {
        let tmp: Vec<*mut u8> = bufs
            .iter_mut()
            .map(|b| b.as_mut_ptr().cast::<u8>())
            .collect();
        let addr = |l: Loc, bytes: usize| -> *mut u8 {
            if bytes == 0 {
                return std::ptr::null_mut();
            }
            match l {
                Loc::In(i) => ins[i],
                Loc::Out(k) => outs[k],
                Loc::Tmp(t) => tmp[t],
            }
        };
        let nbytes = |d: &TensorDesc| d.size() * d.dtype.size();
        let mut groups = self.groups.iter().peekable();
        let mut next = 0;
        while next < self.steps.len() {
            if let Some(g) = groups.next_if(|g| g.first == next) {
                let mut kernels = Vec::with_capacity(g.ops.len());
                for step in &self.steps[g.first..g.end()] {
                    let plan = self.plan_step(step)?;
                    kernels.push(plan.block.ok_or_else(|| {
                        Error::invalid(format!("operator {}: not an elementwise map", step.def.name))
                    })?);
                }
                // SAFETY: the group's locations are the run's inputs, outputs and scratch
                // buffers, live and sized for their values (as for the unfused steps below), and
                // the group was planned on the same step list.
                unsafe { g.run(&kernels, |l| addr(l, 1)) };
                next = g.end();
                continue;
            }
            let step = &self.steps[next];
            next += 1;
            if let Some(prep) = &step.prep {
                let (xd, yd) = (&step.in_descs[0], &step.out_descs[0]);
                let (xp, yp) = (
                    addr(step.inputs[0], nbytes(xd)),
                    addr(step.outputs[0], nbytes(yd)),
                );
                if xd.size() > 0 && yd.size() > 0 {
                    // SAFETY: as for the kernels below: the data and the output are a live
                    // float32 value and buffer of their described sizes, distinct (a
                    // convolution is never planned in place), accessed only by this op.
                    let (x, y) = unsafe {
                        (
                            std::slice::from_raw_parts(xp.cast::<f32>(), xd.size()),
                            std::slice::from_raw_parts_mut(yp.cast::<f32>(), yd.size()),
                        )
                    };
                    prep.run(ins, versions, x, y);
                }
                continue;
            }
            let name = step.def.name;
            let fail = |e: Error| Error::invalid(format!("operator {name}: {e}"));
            let plan = self.plan_step(step)?;
            // SAFETY (both maps): each address is a live array or scratch buffer of at least the
            // described bytes (inputs and outputs kept alive by the engine op, scratch buffers by
            // `bufs`), aligned for its dtype; the engine op reads the inputs' variables and writes
            // the outputs', and scratch buffers are private to it. An output never overlaps
            // another tensor of the same kernel except in place: the plan gives each live value
            // its own buffer and graph outputs are new arrays; an output it placed in its
            // input's buffer (only for kernels whose aliasing is elementwise, same size and
            // dtype) is an exact alias, and both tensors are then marked non-exclusive.
            let inputs: SmallVec<[Tensor; 4]> = step
                .inputs
                .iter()
                .zip(&step.in_descs)
                .map(|(&l, d)| {
                    let own = !step.outputs.contains(&l);
                    unsafe { Tensor::new(addr(l, nbytes(d)), &d.shape, d.dtype, own) }
                })
                .collect();
            let mut outputs: SmallVec<[Tensor; 4]> = step
                .outputs
                .iter()
                .zip(&step.out_descs)
                .map(|(&l, d)| {
                    let own = !step.inputs.contains(&l);
                    unsafe { Tensor::new(addr(l, nbytes(d)), &d.shape, d.dtype, own) }
                })
                .collect();
            run_kernel(plan.kernel, &inputs, &mut outputs, None, name).map_err(fail)?;
        }
        for &(src, k) in &self.copies {
            let n = nbytes(&self.out_descs[k]);
            if n > 0 {
                // SAFETY: the source (a graph input or an earlier graph output) and the
                // destination (a new graph output) are distinct live arrays of `n` bytes that this
                // engine op reads and writes.
                unsafe { std::ptr::copy_nonoverlapping(addr(src, n), outs[k], n) };
            }
        }
        Ok(())
    }
}
