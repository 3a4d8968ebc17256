//! Memory of ops, recycled between the threads that push ops and those that finish them (see
//! `recycler`): the blocks of ops of the common size (a C function as body, <= 3 variables:
//! [`BLOCK_BYTES`]), and the lists that hold the variables of ops with 4 to [`POOLED_VARS`], which
//! would otherwise be an allocation on the pusher and a cross-thread free on the worker per op.
//! Op memory taken from the allocator (ops of other sizes always, blocks and lists when nothing
//! recycled is at hand) is counted, so that the allocator can be asked to give a burst's memory
//! back once it has drained (`crate::allocator`).
//!
//! Each pushing thread also reserves its next op's memory one push ahead and asks the CPU to fetch
//! it for writing: recycled memory was last written by a worker's core, and the prefetch brings its
//! lines over while the caller does other work.

use super::opr::{INLINE_VARS, OpBody, OpVars, OprBlock, OprRef, SyncBody, uncounted};
use super::recycler::{Local, Recycler};
use super::var::Var;
use std::cell::{Cell, RefCell};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::sync::Arc;

/// An op of the common size: a body of three words (a C function, its parameter and its
/// deleter). Any `OprBlock<B>` of the same size and alignment shares its memory.
type CommonBlock = OprBlock<SyncBody<[usize; 3]>>;

/// Memory for one op of the common size.
///
/// Recycling reinterprets an `Arc`'s allocation as one of another type: `Arc::from_raw` accepts
/// the pointer of an `Arc<U>` as an `Arc<T>` when `U` and `T` have the same size and alignment
/// (its documented contract), because the allocation (`ArcInner`: the two counts, then the value,
/// `repr(C)`) is then laid out identically. `MaybeUninit<T>` has `T`'s size and alignment, so
/// this type is laid out as the common op itself, and [`is_common_size`] admits exactly the
/// `OprBlock<B>`s that match it: the layout follows the op type instead of being written down.
pub(crate) type BlockMemory = MaybeUninit<CommonBlock>;

/// Bytes of an op of the common size (without the reference counts).
pub(crate) const BLOCK_BYTES: usize = size_of::<BlockMemory>();

/// `Arc`'s allocation as the standard library lays it out (`ArcInner`, `repr(C)`): the strong and
/// weak counts, then the value. Only its offsets are used (to prefetch an op's memory and to count
/// it); nothing is read or written through it.
#[allow(dead_code)]
#[repr(C)]
struct ArcAllocation<T> {
    strong: std::sync::atomic::AtomicUsize,
    weak: std::sync::atomic::AtomicUsize,
    value: T,
}

/// Bytes an `Arc` allocation of an op has before the op.
const ARC_COUNTS: usize = std::mem::offset_of!(ArcAllocation<BlockMemory>, value);

const _: () = assert!(size_of::<ArcAllocation<BlockMemory>>() == ARC_COUNTS + BLOCK_BYTES);

/// Fresh op memory a thread reports to the allocator module at a time.
const FRESH_REPORT_BYTES: usize = 128 << 10;

/// Capacity of the recycled variable lists (two cache lines).
pub(crate) const POOLED_VARS: usize = 16;

type VarList = Vec<ManuallyDrop<Var>>;

thread_local! {
    /// The memory of this thread's next op, reserved and prefetched one push ahead.
    static NEXT_BLOCK: Cell<Option<Arc<BlockMemory>>> = const { Cell::new(None) };
    static BLOCKS_LOCAL: RefCell<Local<Arc<BlockMemory>>> = const { RefCell::new(Local::new()) };
    static VAR_LISTS_LOCAL: RefCell<Local<VarList>> = const { RefCell::new(Local::new()) };
    /// Bytes of op memory this thread took from the allocator and has not reported yet.
    static FRESH_UNREPORTED: Cell<usize> = const { Cell::new(0) };
}

static BLOCKS: Recycler<Arc<BlockMemory>> = Recycler::new(&BLOCKS_LOCAL);
static VAR_LISTS: Recycler<VarList> = Recycler::new(&VAR_LISTS_LOCAL);

fn is_common_size(size: usize, align: usize) -> bool {
    size == BLOCK_BYTES && align == align_of::<BlockMemory>()
}

/// Puts `block` behind a reference count, in recycled memory reserved ahead when its size allows.
pub(crate) fn alloc_op<B: OpBody + 'static>(block: OprBlock<B>) -> OprRef {
    if !is_common_size(size_of::<OprBlock<B>>(), align_of::<OprBlock<B>>()) {
        count_fresh(size_of::<OprBlock<B>>() + ARC_COUNTS);
        return Arc::new(block);
    }
    let reserved = NEXT_BLOCK.try_with(|n| n.replace(Some(reserve_block())));
    match reserved.ok().flatten() {
        Some(memory) => {
            // SAFETY: `Arc::from_raw` may take the pointer of an `Arc<U>` as `Arc<T>` when U and T
            // have the same size and alignment, checked above; the memory is uninitialised either
            // way.
            let uninit: Arc<MaybeUninit<OprBlock<B>>> =
                unsafe { Arc::from_raw(Arc::into_raw(memory).cast()) };
            // Written through a raw pointer: `Arc::get_mut` would check uniqueness with an atomic
            // read-modify-write, a full barrier that waits for the block's lines to arrive.
            let slot = Arc::as_ptr(&uninit).cast_mut();
            // SAFETY: reserved memory has no other reference (it came from `Arc::new`, or from
            // `release`/`keep`, which only keep the last reference), so nothing else can read or
            // write it; `MaybeUninit::write` does not read the old bytes.
            unsafe { (*slot).write(block) };
            // SAFETY: fully initialised by the write above.
            unsafe { uninit.assume_init() }
        }
        None => Arc::new(block),
    }
}

/// Memory for the calling thread's next op, with its two cache lines being fetched for writing.
fn reserve_block() -> Arc<BlockMemory> {
    let memory = BLOCKS.take().unwrap_or_else(fresh_block);
    // the allocation starts with Arc's two counters, before the value
    let start = Arc::as_ptr(&memory).cast::<u8>().wrapping_sub(ARC_COUNTS);
    crate::util::prefetch_write(start);
    crate::util::prefetch_write(start.wrapping_add(64));
    memory
}

/// New memory from the allocator, when nothing recycled is at hand (the queued ops of a burst).
fn fresh_block() -> Arc<BlockMemory> {
    count_fresh(BLOCK_BYTES + ARC_COUNTS);
    Arc::new(BlockMemory::uninit())
}

/// Counts op memory taken from the allocator, reported to [`crate::allocator`] in batches so
/// that a wait after a burst gives the burst's memory back.
fn count_fresh(bytes: usize) {
    let _ = FRESH_UNREPORTED.try_with(|n| {
        let total = n.get() + bytes;
        if total < FRESH_REPORT_BYTES {
            n.set(total);
        } else {
            n.set(0);
            crate::allocator::note_fresh_op_memory(total);
        }
    });
}

/// The variables of an op reading `const_vars` and writing `mutable_vars`, as the op stores them
/// (uncounted, see `opr::OpVars`): inline up to [`INLINE_VARS`], in a recycled list up to
/// [`POOLED_VARS`], in a list of their own beyond.
///
/// # Safety
/// The list's variables are [`uncounted`] copies: the caller keeps each variable alive while the
/// list is used (an op's pusher until the op is queued on them, then the variables themselves).
pub(crate) unsafe fn op_vars(const_vars: &[Var], mutable_vars: &[Var]) -> OpVars {
    // SAFETY: passed on to the caller (see above).
    let all = const_vars
        .iter()
        .chain(mutable_vars)
        .map(|v| unsafe { uncounted(v) });
    let n = const_vars.len() + mutable_vars.len();
    if n <= INLINE_VARS || n > POOLED_VARS {
        return all.collect();
    }
    let mut list = VAR_LISTS.take().unwrap_or_else(|| {
        count_fresh(POOLED_VARS * size_of::<Var>());
        Vec::with_capacity(POOLED_VARS)
    });
    list.extend(all);
    OpVars::from_vec(list)
}

/// Keeps the list an op stored its variables in, if it is a recycled one (the op is being
/// dropped; the variables are uncounted copies, so there is nothing else to drop).
pub(crate) fn recycle_vars(vars: &mut OpVars) {
    if vars.spilled() && vars.capacity() == POOLED_VARS {
        let mut list = std::mem::take(vars).into_vec();
        list.clear();
        VAR_LISTS.keep(list);
    }
}

/// Drops a reference to an op; when it is the last one and the op has the common size, its memory
/// is kept for a later op instead of going back to the allocator.
pub(crate) fn release(mut op: OprRef) {
    let Some(block) = Arc::get_mut(&mut op) else {
        return; // another reference remains
    };
    if !is_common_size(size_of_val(block), align_of_val(block)) {
        return;
    }
    let value: *mut OprBlock<dyn OpBody> = block;
    // SAFETY: this is the only reference (`get_mut` succeeded), so nothing else can observe the
    // value; it is dropped exactly once, here, and `op`'s own drop is skipped by `into_raw` below.
    unsafe { std::ptr::drop_in_place(value) };
    let raw = Arc::into_raw(op).cast::<BlockMemory>();
    // SAFETY: the allocation holds a value of BlockMemory's size and alignment (checked above),
    // so it is a valid `ArcInner<BlockMemory>` with one strong reference; the dropped value's
    // bytes are left uninitialised, which `MaybeUninit` allows.
    let memory = unsafe { Arc::from_raw(raw) };
    BLOCKS.keep(memory);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_in_recycled_memory_run_in_order() {
        use crate::context::Context;
        use crate::engine::{Engine, EngineConfig, EngineKind, PushArgs};
        let engine = Engine::new(EngineConfig::new(EngineKind::PerDevice));
        let var = engine.new_variable();
        // a body of three words, like a C function with its parameter and deleter
        let words = [1usize, 2, 3];
        use crate::engine::recycler::BATCH;
        for _ in 0..10 * BATCH {
            let args = PushArgs::new(Context::cpu(0)).writes(std::slice::from_ref(&var));
            engine
                .push_fn(args, move |_| {
                    assert_eq!(words.iter().sum::<usize>(), 6);
                    Ok(())
                })
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        assert_eq!(var.version(), 10 * BATCH as u64);
    }

    #[test]
    fn ops_with_many_variables_keep_them_in_recycled_lists() {
        use crate::context::Context;
        use crate::engine::{Engine, EngineConfig, EngineKind, PushArgs};
        let engine = Engine::new(EngineConfig::with_workers(EngineKind::PerDevice, 2));
        let vars: Vec<Var> = (0..50).map(|_| engine.new_variable()).collect();
        // 4..=16 variables in recycled lists, 17 and more in lists of their own; each op writes
        // its last variable
        for round in 0..200 {
            let n = 4 + round % 30;
            let (reads, writes) = vars[round % 10..round % 10 + n].split_at(n - 1);
            let args = PushArgs::new(Context::cpu(0)).reads(reads).writes(writes);
            engine.push_fn(args, |_| Ok(())).unwrap();
        }
        engine.wait_for_all().unwrap();
        let writes: u64 = vars.iter().map(Var::version).sum();
        assert_eq!(writes, 200);
        // a list comes back empty with its full capacity, and is taken again
        // SAFETY: `vars` outlives the list, which is only inspected.
        let mut v = unsafe { op_vars(&vars[..5], &vars[5..6]) };
        assert_eq!((v.len(), v.capacity()), (6, POOLED_VARS));
        recycle_vars(&mut v);
        assert!(v.is_empty() && !v.spilled());
        let again = VAR_LISTS.take().expect("the list just kept");
        assert_eq!((again.len(), again.capacity()), (0, POOLED_VARS));
    }
}
