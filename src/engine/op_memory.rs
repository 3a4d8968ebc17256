//! Memory of ops of the common size, recycled between the threads that push and those that finish
//! ops.
//!
//! Nearly every op is created on a pushing thread and dropped on a worker. Left to the allocator,
//! each such free is a cross-thread free: the worker updates the allocation page's shared free
//! list and the pusher's next allocation from that page misses on the same cache line, once per
//! op. Instead, the thread that drops the last reference to an op of the common size (a C function
//! as body, <= 3 variables: [`BLOCK_BYTES`]) keeps its memory, and hands it over in batches of
//! [`BATCH`] through a small shared stack of batches: one lock round trip per batch instead of a
//! contended line per op. A pusher takes memory from what its own thread freed first, then from its
//! spare batch, then from the shared stack, and allocates only when all are empty.
//!
//! Memory stays bounded: at most [`MAX_SHARED_BATCHES`] batches wait in the shared stack, one
//! partial and one spare batch per thread; anything beyond that goes back to the allocator, and a
//! thread's batches are freed when it exits. Op memory taken from the allocator (ops of other
//! sizes always, blocks when nothing recycled is at hand: a burst of queued ops) is counted, so
//! that the allocator can be asked to give a burst's memory back once it has drained
//! (`crate::allocator`).
//!
//! Each pushing thread also reserves its next op's memory one push ahead and asks the CPU to fetch
//! it for writing: recycled memory was last written by a worker's core, and the prefetch brings its
//! lines over while the caller does other work.

use super::opr::{OpBody, OprBlock, OprRef};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::mem::MaybeUninit;
use std::sync::Arc;

/// Memory for one op of the common size: the size and alignment of `OprBlock<B>` for such bodies,
/// so `Arc::from_raw` may reinterpret it.
pub(crate) type BlockMemory = MaybeUninit<[u64; 14]>;

/// Bytes of an op of the common size (without the reference counts).
pub(crate) const BLOCK_BYTES: usize = size_of::<BlockMemory>();

/// Blocks handed between threads at a time.
const BATCH: usize = 32;

/// Most batches waiting in the shared stack (32 × 32 × 128 bytes = 128 KiB).
const MAX_SHARED_BATCHES: usize = 32;

/// Fresh op memory a thread reports to the allocator module at a time.
const FRESH_REPORT_BYTES: usize = 128 << 10;

type Batch = Vec<Arc<BlockMemory>>;

static SHARED: Mutex<Vec<Batch>> = Mutex::new(Vec::new());

thread_local! {
    /// The memory of this thread's next op, reserved and prefetched one push ahead.
    static NEXT_BLOCK: Cell<Option<Arc<BlockMemory>>> = const { Cell::new(None) };
    /// Blocks of ops this thread dropped last, not yet handed over.
    static FREED: RefCell<Batch> = const { RefCell::new(Vec::new()) };
    /// A batch taken from the shared stack, for this thread's next ops.
    static SPARE: RefCell<Batch> = const { RefCell::new(Vec::new()) };
    /// Bytes of op memory this thread took from the allocator and has not reported yet.
    static FRESH_UNREPORTED: Cell<usize> = const { Cell::new(0) };
}

fn is_common_size(size: usize, align: usize) -> bool {
    size == BLOCK_BYTES && align == align_of::<BlockMemory>()
}

/// Puts `block` behind a reference count, in recycled memory reserved ahead when its size allows.
pub(crate) fn alloc_op<B: OpBody + 'static>(block: OprBlock<B>) -> OprRef {
    if !is_common_size(size_of::<OprBlock<B>>(), align_of::<OprBlock<B>>()) {
        count_fresh(size_of::<OprBlock<B>>() + 16);
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
    let memory = take_recycled().unwrap_or_else(fresh_block);
    // the allocation starts with Arc's two counters, before the value
    let start = Arc::as_ptr(&memory).cast::<u8>().wrapping_sub(16);
    crate::util::prefetch_write(start);
    crate::util::prefetch_write(start.wrapping_add(64));
    memory
}

/// New memory from the allocator, when nothing recycled is at hand (the queued ops of a burst).
fn fresh_block() -> Arc<BlockMemory> {
    count_fresh(BLOCK_BYTES + 16);
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

fn take_recycled() -> Option<Arc<BlockMemory>> {
    if let Some(m) = FREED.try_with(|f| f.borrow_mut().pop()).ok().flatten() {
        return Some(m);
    }
    SPARE
        .try_with(|s| {
            let mut spare = s.borrow_mut();
            if spare.is_empty() {
                *spare = SHARED.lock().pop()?;
            }
            spare.pop()
        })
        .ok()
        .flatten()
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
    keep(memory);
}

fn keep(memory: Arc<BlockMemory>) {
    let full = FREED.try_with(|f| {
        let mut freed = f.borrow_mut();
        freed.push(memory);
        (freed.len() >= BATCH).then(|| std::mem::replace(&mut *freed, Vec::with_capacity(BATCH)))
    });
    if let Ok(Some(batch)) = full {
        let overflow = {
            let mut shared = SHARED.lock();
            if shared.len() < MAX_SHARED_BATCHES {
                shared.push(batch);
                None
            } else {
                Some(batch)
            }
        };
        drop(overflow); // back to the allocator, outside the lock
    }
    // on a thread being torn down `try_with` fails and `memory` goes back to the allocator
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reuses_what_it_freed_and_the_shared_stack_is_capped() {
        std::thread::spawn(|| {
            let block = Arc::new(BlockMemory::uninit());
            let addr = Arc::as_ptr(&block);
            keep(block);
            let again = take_recycled().expect("the block just freed");
            assert_eq!(Arc::as_ptr(&again), addr);
            // many more than the shared stack holds: the surplus goes back to the allocator
            for _ in 0..BATCH * (MAX_SHARED_BATCHES + 4) {
                keep(Arc::new(BlockMemory::uninit()));
            }
            assert!(SHARED.lock().len() <= MAX_SHARED_BATCHES);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn ops_in_recycled_memory_run_in_order() {
        use crate::context::Context;
        use crate::engine::{Engine, EngineConfig, EngineKind, PushArgs};
        let engine = Engine::new(EngineConfig::new(EngineKind::PerDevice));
        let var = engine.new_variable();
        // a body of three words, like a C function with its parameter and deleter
        let words = [1usize, 2, 3];
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
}
