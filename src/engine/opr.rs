//! Operations: what a push creates (`OprBlock`), the body it runs, the `Completion` an async body
//! must call, the `RunContext` it receives, and reusable `Operator`s.

use super::exception::ExceptionRef;
use super::property::FnProperty;
use super::signal::Signal;
use super::var::Var;
use super::{EnginePtr, Inner};
use crate::context::Context;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Variables of one op; most ops have few.
pub(crate) type VarList = SmallVec<[Var; 4]>;

/// The result of a synchronous body: `Err` carries the op's error message.
pub type OpResult = Result<(), String>;

/// Body of an asynchronous op: it must eventually consume the `Completion` (from any thread).
pub type AsyncFn = dyn Fn(&RunContext, Completion) + Send + Sync;
/// Body of a synchronous op: the op completes when it returns.
pub type SyncFn = dyn Fn(&RunContext) -> OpResult + Send + Sync;

/// What an op runs. Stored inline in its `OprBlock` (one allocation per push).
pub(crate) trait OpBody: Send + Sync {
    /// Runs the body. A synchronous body returns its result; an asynchronous one takes its
    /// completion from `pending` and returns `None`.
    fn run(&self, rc: &RunContext, pending: Pending<'_>) -> Option<OpResult>;
    /// True for asynchronous bodies (their completion is theirs to call, even on panic).
    fn is_async(&self) -> bool;
}

/// Hands an asynchronous body its completion (making one costs a reference count).
pub(crate) struct Pending<'a>(pub(crate) &'a OprRef);

impl Pending<'_> {
    pub(crate) fn completion(self) -> Completion {
        Completion::new(self.0.clone())
    }
}

/// A synchronous closure as an op body.
pub(crate) struct SyncBody<F>(pub(crate) F);

impl<F: Fn(&RunContext) -> OpResult + Send + Sync> OpBody for SyncBody<F> {
    fn run(&self, rc: &RunContext, _: Pending<'_>) -> Option<OpResult> {
        Some((self.0)(rc))
    }
    fn is_async(&self) -> bool {
        false
    }
}

/// An asynchronous closure as an op body.
pub(crate) struct AsyncBody<F>(pub(crate) F);

impl<F: Fn(&RunContext, Completion) + Send + Sync> OpBody for AsyncBody<F> {
    fn run(&self, rc: &RunContext, pending: Pending<'_>) -> Option<OpResult> {
        (self.0)(rc, pending.completion());
        None
    }
    fn is_async(&self) -> bool {
        true
    }
}

/// Passed to every body; layout is MXNet's `RunContext` (32 bytes on LP64) so the C layer can hand
/// a pointer to it straight to C functions.
#[repr(C)]
#[derive(Debug)]
pub struct RunContext {
    pub dev_type: i32,
    pub dev_id: i32,
    /// The device stream (NULL for CPU work).
    pub stream: *mut c_void,
    pub aux_stream: *mut c_void,
    /// True when the body runs as part of a bulk segment.
    pub is_bulk: bool,
}

impl RunContext {
    pub(crate) fn new(ctx: Context, is_bulk: bool) -> Self {
        RunContext {
            dev_type: ctx.dev_type.code(),
            dev_id: ctx.dev_id,
            stream: std::ptr::null_mut(),
            aux_stream: std::ptr::null_mut(),
            is_bulk,
        }
    }
}

/// One pushed operation, from push until its last reference is dropped (which is what
/// `WaitForAll` waits for, so the op's parameters are released before it returns). The body is the
/// last field, stored inline: `OprRef` is `Arc<OprBlock<dyn OpBody>>`.
///
/// The block crosses from the pushing thread to a worker with every push, so it is kept small:
/// with a C function as its body and up to three variables it fills two cache lines, reference
/// counts included. Fields only some ops need live in `cold`.
pub(crate) struct OprBlock<B: ?Sized> {
    pub(crate) engine: EnginePtr,
    /// The variables it reads (`..n_const`), then those it writes.
    pub(crate) vars: OpVars,
    pub(crate) n_const: u32,
    /// Dependencies not yet granted, plus one held by the pusher until it has queued them all.
    pub(crate) wait: AtomicU32,
    pub(crate) ctx: Context,
    pub(crate) priority: i32,
    pub(crate) prop: FnProperty,
    /// A wait-style op (MXNet's `wait=true`): runs even when its inputs carry an error.
    pub(crate) wait_op: bool,
    /// Run on whichever thread makes it ready instead of a worker pool (internal tiny ops).
    pub(crate) run_inline: bool,
    /// [`ERROR_SET`] and [`INPUT_ERROR_HINT`]: lets the hot path skip the `exception` lock and
    /// the variables' error slots.
    pub(crate) error_flags: AtomicU8,
    /// The error this op carries: adopted from an input when it starts, or its own failure.
    pub(crate) exception: Mutex<Option<ExceptionRef>>,
    /// The profiler name and NaiveEngine's completion signal, when the op has either.
    pub(crate) cold: Option<Box<OpCold>>,
    pub(crate) body: ManuallyDrop<B>,
}

/// The variables of one op as stored in it (reads then writes): copies of the pusher's references
/// that count nothing and are never dropped. A variable keeps itself alive while ops are queued
/// on it (see `var.rs`), and the pusher's own reference covers the op until then.
pub(crate) type OpVars = SmallVec<[ManuallyDrop<Var>; INLINE_VARS]>;

/// Variables an op stores inline (more go to a list, see `op_memory::op_vars`).
pub(crate) const INLINE_VARS: usize = 3;

/// A copy of `v` that counts no reference and is never dropped (see [`OpVars`]).
///
/// # Safety
/// The copy is a pointer to `v`'s variable that does not keep it alive: the caller must not use
/// it (nor a slice of such copies, [`uncounted_slice`]) once the variable may have been freed,
/// that is, after every counted reference is gone and no op holds the variable busy.
pub(crate) unsafe fn uncounted(v: &Var) -> ManuallyDrop<Var> {
    // SAFETY: a bitwise copy of the `Arc` without taking a reference; `ManuallyDrop` keeps it from
    // ever giving one back. The caller keeps the variable alive while the copy is used.
    ManuallyDrop::new(unsafe { std::ptr::read(v) })
}

/// Uncounted copies seen as variables.
pub(crate) fn uncounted_slice(vars: &[ManuallyDrop<Var>]) -> &[Var] {
    // SAFETY: `ManuallyDrop<T>` is `repr(transparent)` over `T`, so the slices have the same
    // layout; a shared slice cannot drop its elements.
    unsafe { std::slice::from_raw_parts(vars.as_ptr().cast::<Var>(), vars.len()) }
}

/// `OprBlock::error_flags`: `exception` was set.
pub(crate) const ERROR_SET: u8 = 1;
/// `OprBlock::error_flags`: a variable granted this op an access while it carried an error. Only
/// then does the op look for an error on its inputs when it starts (sparing a trip to each
/// variable's cache line). A variable's error changes only when a write to it completes, which
/// cannot happen between granting this op an access and this op's completion.
pub(crate) const INPUT_ERROR_HINT: u8 = 2;

impl<B: ?Sized> OprBlock<B> {
    pub(crate) fn has_error_flag(&self, flag: u8) -> bool {
        self.error_flags.load(Ordering::Acquire) & flag != 0
    }
    pub(crate) fn set_error_flag(&self, flag: u8) {
        self.error_flags.fetch_or(flag, Ordering::AcqRel);
    }
}

/// Parts of an op that most pushes leave empty.
pub(crate) struct OpCold {
    /// Name for the profiler (kept only while the profiler records ops).
    pub(crate) name: Option<Arc<str>>,
    /// NaiveEngine: the pusher waits on this for the op to complete.
    pub(crate) done: Option<Arc<Signal>>,
}

impl<B: ?Sized> OprBlock<B> {
    fn all_vars(&self) -> &[Var] {
        uncounted_slice(&self.vars)
    }
    pub(crate) fn const_vars(&self) -> &[Var] {
        &self.all_vars()[..self.n_const as usize]
    }
    pub(crate) fn mutable_vars(&self) -> &[Var] {
        &self.all_vars()[self.n_const as usize..]
    }
    pub(crate) fn name(&self) -> Option<&str> {
        self.cold.as_ref().and_then(|c| c.name.as_deref())
    }
    pub(crate) fn done_signal(&self) -> Option<&Arc<Signal>> {
        self.cold.as_ref().and_then(|c| c.done.as_ref())
    }
}

pub(crate) type OprRef = Arc<OprBlock<dyn OpBody>>;

/// An op waiting in a variable's queue. It counts no reference: a pushed op that waits for
/// grants is owned by its `wait` count, and the grant that brings the count to zero takes the
/// ownership back (see [`QueuedOp::grant`]). So granting costs one atomic operation on the op,
/// not two, and queueing none.
pub(crate) struct QueuedOp(NonNull<OprBlock<dyn OpBody>>);

// SAFETY: a `QueuedOp` only points to an `OprBlock`, which is `Send + Sync` (its body is); the
// op outlives it (see `grant`).
unsafe impl Send for QueuedOp {}
// SAFETY: as above.
unsafe impl Sync for QueuedOp {}

/// An op's address with its lowest bit set: a queue entry for a write (see `QueueEntry`). An op
/// lives in an `Arc`, after its two `usize` counts, so its address is a multiple of 8 and the bit
/// is otherwise always clear.
const WRITE_BIT: usize = 1;

impl super::var_queue::QueueEntry for QueuedOp {
    fn pack(self, write: bool) -> Self {
        // `map_addr` keeps the pointer's provenance and its vtable
        QueuedOp(self.0.map_addr(|a| a | (usize::from(write) * WRITE_BIT)))
    }
    fn writes(&self) -> bool {
        self.0.addr().get() & WRITE_BIT != 0
    }
    fn unpack(self) -> Self {
        QueuedOp(self.0.map_addr(|a| {
            std::num::NonZeroUsize::new(a.get() & !WRITE_BIT).expect("a block's address is >= 8")
        }))
    }
}

impl QueuedOp {
    /// Points at `op`, which is about to wait for this access.
    ///
    /// # Safety
    /// `op` was created to wait for this access: its `wait` count holds one for it until
    /// [`grant`](Self::grant) counts it down, the reference its pusher holds goes to that count
    /// once every access is queued (`Inner::submit`), and no other `QueuedOp` stands for the same
    /// access. `grant` relies on all three to take that reference back exactly once, and
    /// [`block`](Self::block) on the count keeping the op alive until then.
    pub(crate) unsafe fn of(op: &OprRef) -> Self {
        // `Arc::as_ptr` keeps the provenance of the whole allocation, which `grant` needs to
        // rebuild the `Arc`
        let ptr = Arc::as_ptr(op).cast_mut();
        // SAFETY: an `Arc`'s pointer is never null.
        QueuedOp(unsafe { NonNull::new_unchecked(ptr) })
    }

    /// The op, while it waits.
    fn block(&self) -> &OprBlock<dyn OpBody> {
        // SAFETY: an op cannot run, let alone finish, before every access it waits for has been
        // granted; until this one is, the op's `wait` count keeps the op alive (`of`'s contract).
        unsafe { self.0.as_ref() }
    }

    /// Notes that the granting variable carries an error (see [`INPUT_ERROR_HINT`]).
    pub(crate) fn hint_input_error(&self) {
        self.block().set_error_flag(INPUT_ERROR_HINT);
    }

    /// Grants the access: counts down the op's pending grants and returns the op, owned, if this
    /// was the last one (the op is then ready to run). After an earlier grant the op may run and
    /// be freed at any time, so this consumes the `QueuedOp`.
    pub(crate) fn grant(self) -> Option<OprRef> {
        if self.block().wait.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: the pointer came from `Arc::as_ptr` (`of`); per `of`'s contract the pusher
            // left its reference to the wait count when grants were still pending
            // (`Inner::submit`), and the grant that ends the wait, this one, takes it back,
            // exactly once (`self` is consumed and no other `QueuedOp` stands for this access).
            Some(unsafe { Arc::from_raw(self.0.as_ptr()) })
        } else {
            None
        }
    }
}

impl<B: ?Sized> OprBlock<B> {
    pub(crate) fn engine(&self) -> &Inner {
        // SAFETY: an engine outlives every op it created: dropping an Engine waits until its
        // pending-op count is zero, and each OprBlock holds one count until it is dropped.
        unsafe { self.engine.get() }
    }
}

impl<B: ?Sized> Drop for OprBlock<B> {
    fn drop(&mut self) {
        // SAFETY: the body is dropped exactly once, here; nothing reads it afterwards.
        unsafe { ManuallyDrop::drop(&mut self.body) };
        super::op_memory::recycle_vars(&mut self.vars);
        self.engine().op_released();
    }
}

/// Completes an asynchronous op. Consuming it is the only way to complete, so an op cannot be
/// completed twice from Rust. Dropping it without calling `done`/`fail` fails the op, so a body
/// that forgets (or panics) never leaves waiters hanging.
pub struct Completion {
    op: Option<OprRef>,
}

impl Completion {
    pub(crate) fn new(op: OprRef) -> Self {
        Completion { op: Some(op) }
    }
    /// The op succeeded.
    pub fn done(self) {
        self.finish(Ok(()))
    }
    /// The op failed with `message`; its outputs carry the error to later ops and waits.
    pub fn fail(self, message: impl Into<String>) {
        self.finish(Err(message.into()))
    }
    pub fn finish(mut self, result: OpResult) {
        if let Some(op) = self.op.take() {
            if !super::pool::on_worker_thread() {
                super::neighbour::note_completion();
            }
            Inner::on_complete(op, result.err());
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            let what = op.name().unwrap_or("unnamed");
            let msg = if std::thread::panicking() {
                format!("engine operation '{what}' panicked")
            } else {
                format!("engine operation '{what}' finished without calling its completion")
            };
            Inner::on_complete(op, Some(msg));
        }
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Completion")
    }
}

/// A reusable operator (`NewOperator`): the body and variables are fixed, each push runs it once.
pub struct Operator {
    pub(crate) engine_id: u64,
    pub(crate) body: Arc<AsyncFn>,
    pub(crate) const_vars: VarList,
    pub(crate) mutable_vars: VarList,
    pub(crate) prop: FnProperty,
    pub(crate) name: Option<Arc<str>>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("name", &self.name)
            .field("const_vars", &self.const_vars.len())
            .field("mutable_vars", &self.mutable_vars.len())
            .field("prop", &self.prop)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_with_a_c_body_fills_two_cache_lines() {
        // a C function, its parameter and its deleter; plus Arc's two counts
        let block = size_of::<OprBlock<SyncBody<[usize; 3]>>>();
        assert!(block + 16 <= 128, "OprBlock grew to {block} bytes");
        // such ops use the memory reserved ahead
        assert_eq!(block, super::super::op_memory::BLOCK_BYTES);
    }
}
