//! Communication between the pushed/pulled arrays and a key's buffers, as engine ops: the
//! reduction ("KVStoreReduce", sum of N arrays straight into a target) and the broadcast of a
//! stored value to pull outputs ("KVStoreBroadcast"). Both are `CpuPrioritized` ops, so the
//! caller's priority orders them in the engine's CPU priority pool.

use super::reduce::{self, ReduceConfig};
use crate::context::Context;
use crate::engine::{Engine, FnProperty, PushArgs, Var};
use crate::error::{Error, Result};
use crate::ndarray::NDArray;
use smallvec::SmallVec;

/// Where reductions and broadcasts run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommKind {
    /// MXNet's CommCPU: merge buffers in pinned host memory.
    Cpu,
    /// MXNet's CommDevice: merge buffers where the pushed values live. Without GPUs every value
    /// is in host memory and this reduces exactly like [`CommKind::Cpu`].
    Device,
}

impl CommKind {
    /// The context of a key's merge buffer for values on `values_ctx`.
    pub fn merge_ctx(self, values_ctx: Context) -> Context {
        match self {
            CommKind::Cpu => Context::cpu_pinned(0),
            CommKind::Device => values_ctx,
        }
    }
}

use crate::util::SendPtr;

/// The data pointer of a host array, checked for alignment (views keep element alignment, but
/// foreign memory need not). GPU arrays never reach here: they are staged or copied first.
fn host_ptr(a: &NDArray, what: &str) -> Result<*mut u8> {
    match a.ctx() {
        Some(ctx) if ctx.is_host() => {}
        Some(ctx) => {
            return Err(Error::not_supported(format!(
                "{what} is on {ctx}: the host reduction cannot read GPU memory"
            )));
        }
        None => {
            return Err(Error::invalid(format!(
                "{what} is a none array (no shape, no data)"
            )));
        }
    }
    let p = a.data_ptr()?;
    if !(p as usize).is_multiple_of(a.dtype().size()) {
        return Err(Error::invalid(format!(
            "{what}: data at {p:p} is not aligned for {}",
            a.dtype().name()
        )));
    }
    Ok(p)
}

/// The host data pointers of some arrays and their distinct engine variables.
struct HostArrays {
    ptrs: SmallVec<[SendPtr; 8]>,
    vars: SmallVec<[Var; 8]>,
}

impl HostArrays {
    /// `what` names array `i` in errors as "`what` i".
    fn of(arrays: &[&NDArray], what: &str) -> Result<Self> {
        let mut ptrs = SmallVec::new();
        let mut vars: SmallVec<[Var; 8]> = SmallVec::new();
        for (i, a) in arrays.iter().enumerate() {
            ptrs.push(SendPtr(host_ptr(a, &format!("{what} {i}"))?));
            let v = a.var().expect("checked by host_ptr");
            if !vars.iter().any(|x| x.same_as(v)) {
                vars.push(v.clone());
            }
        }
        Ok(HostArrays { ptrs, vars })
    }
}

/// Pushes `body` as a `CpuPrioritized` op named `name` that reads `reads` and writes `writes`;
/// the op holds `arrays` and `one` until it has run, so their memory outlives `body`.
fn push_holding(
    name: &str,
    reads: &[Var],
    writes: &[Var],
    priority: i32,
    (arrays, one): (&[&NDArray], &NDArray),
    body: impl Fn() + Send + Sync + 'static,
) -> Result<()> {
    let keep: SmallVec<[NDArray; 8]> = arrays
        .iter()
        .map(|&a| a.clone())
        .chain([one.clone()])
        .collect();
    let args = PushArgs::new(Context::cpu(0))
        .reads(reads)
        .writes(writes)
        .prop(FnProperty::CpuPrioritized)
        .priority(priority)
        .name(name);
    Engine::global()?.push_fn(args, move |_| {
        let _alive = &keep;
        body();
        Ok(())
    })
}

/// Where an input of a reduction into memory of `target` must first be copied, if anywhere:
/// GPU inputs of a host target go to page-locked memory (MXNet's CommCPU), inputs of a GPU target
/// that are elsewhere go to that GPU (CommDevice).
fn staging_ctx(input: Context, target: Context) -> Option<Context> {
    match (input.is_host(), target.is_host()) {
        (false, true) => Some(Context::cpu_pinned(0)),
        (_, false) if input != target => Some(target),
        _ => None,
    }
}

/// Pushes `target = inputs[0] + inputs[1] + ...` (in that order). All arrays must have the
/// target's shape and dtype, and no input may share memory with the target. One input is a plain
/// copy. Inputs on other devices are copied next to the target first; a GPU target is summed
/// on its GPU (float16 rounded once, as the host reduction does).
pub fn reduce_into(
    target: &NDArray,
    inputs: &[&NDArray],
    cfg: &ReduceConfig,
    priority: i32,
) -> Result<()> {
    assert!(!inputs.is_empty(), "reduce_into of no inputs");
    if inputs.iter().any(|a| a.shares_memory_with(target)) {
        return Err(Error::internal(
            "KVStoreReduce: an input shares memory with the target",
        ));
    }
    if inputs.len() == 1 {
        return target.copy_from(inputs[0], priority, FnProperty::CpuPrioritized);
    }
    let Some(target_ctx) = target.ctx() else {
        return Err(Error::invalid("the reduction target is a none array"));
    };
    let mut staged: SmallVec<[NDArray; 8]> = SmallVec::new();
    let mut at: SmallVec<[Option<usize>; 8]> = SmallVec::new();
    for a in inputs {
        match a.ctx().and_then(|c| staging_ctx(c, target_ctx)) {
            Some(ctx) => {
                let s = NDArray::new(a.shape(), ctx, a.dtype(), false)?;
                s.copy_from(a, priority, FnProperty::CpuPrioritized)?;
                at.push(Some(staged.len()));
                staged.push(s);
            }
            None => at.push(None),
        }
    }
    let local: SmallVec<[&NDArray; 8]> = inputs
        .iter()
        .zip(&at)
        .map(|(&a, s)| s.map_or(a, |i| &staged[i]))
        .collect();
    let inputs = &local[..];
    if !target_ctx.is_host() {
        return crate::operator::device::sum_on_gpu(
            "KVStoreReduce",
            inputs,
            target,
            priority,
            FnProperty::Normal,
            crate::gpu::Rounding::Once,
        );
    }
    let len = target.size();
    if len == 0 {
        return Ok(());
    }
    let out = SendPtr(host_ptr(target, "the reduction target")?);
    let HostArrays {
        ptrs: ins,
        vars: reads,
    } = HostArrays::of(inputs, "pushed value")?;
    let writes = [target.var().expect("checked by host_ptr").clone()];
    let (dtype, cfg) = (target.dtype(), *cfg);
    let held = (inputs, target);
    push_holding(
        "KVStoreReduce",
        &reads,
        &writes,
        priority,
        held,
        move || {
            let ptrs: SmallVec<[*const u8; 8]> = ins.iter().map(|p| p.get() as *const u8).collect();
            // SAFETY: the op holds every array, so the memory is live; each pointer covers `len`
            // aligned elements of `dtype` (same shape and dtype as the target, checked by the
            // caller); the target shares no memory with an input; the engine gives this op write
            // access to the target and read access to the inputs.
            unsafe { reduce::reduce(dtype, out.get(), &ptrs, len, &cfg) };
        },
    )
}

/// Pushes copies of `src` into every output (same shape and dtype as `src`). Outputs that are
/// distinct memory are written by one op, split across threads for big arrays; outputs sharing
/// memory with `src` or with each other fall back to one copy op each.
pub fn broadcast(
    src: &NDArray,
    outs: &[&NDArray],
    cfg: &ReduceConfig,
    priority: i32,
) -> Result<()> {
    let disjoint = outs.iter().enumerate().all(|(i, o)| {
        !o.shares_memory_with(src) && !outs[..i].iter().any(|p| p.shares_memory_with(o))
    });
    let on_host = |a: &NDArray| a.ctx().is_some_and(Context::is_host);
    // copies to or from GPUs are one copy op each (on the devices' copy workers)
    if !disjoint || outs.len() == 1 || !on_host(src) || !outs.iter().all(|o| on_host(o)) {
        for o in outs {
            o.copy_from(src, priority, FnProperty::CpuPrioritized)?;
        }
        return Ok(());
    }
    let bytes = src.nbytes();
    if bytes == 0 || outs.is_empty() {
        return Ok(());
    }
    let from = SendPtr(host_ptr(src, "the stored value")?);
    let HostArrays {
        ptrs: dsts,
        vars: writes,
    } = HostArrays::of(outs, "pull output")?;
    let reads = [src.var().expect("checked by host_ptr").clone()];
    let (len, cfg) = (src.size(), *cfg);
    let held = (outs, src);
    push_holding(
        "KVStoreBroadcast",
        &reads,
        &writes,
        priority,
        held,
        move || {
            let ptrs: SmallVec<[*mut u8; 8]> = dsts.iter().map(|p| p.get()).collect();
            // SAFETY: the op holds every array; each covers `bytes` bytes; outputs share no memory
            // with each other or the source (checked above); the engine gives this op read access to
            // the source and write access to every output.
            unsafe { reduce::broadcast(from.get(), &ptrs, bytes, len, &cfg) };
        },
    )
}
