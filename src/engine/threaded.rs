//! Running an op's body on the calling thread (a worker, or the pusher for inline ops), shared by
//! all engine kinds, and the thread's note that it is inside an op. Completion
//! (`Inner::on_complete`, in `inner.rs`) releases the op's variables; the threaded engines track
//! dependencies through the variables' queues, NaiveEngine only bumps versions.

use super::Inner;
use super::opr::{ERROR_SET, INPUT_ERROR_HINT, OprRef, Pending, RunContext};
use super::property::FnProperty;
use crate::util::panic_text;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    /// How many op bodies are running on this thread (nested when an inline op pushes another).
    static OP_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// True while the calling thread is running an engine op's body.
pub(crate) fn inside_op() -> bool {
    OP_DEPTH.with(Cell::get) > 0
}

struct OpDepthGuard;

impl OpDepthGuard {
    fn enter() -> Self {
        OP_DEPTH.with(|d| d.set(d.get() + 1));
        OpDepthGuard
    }
}

impl Drop for OpDepthGuard {
    fn drop(&mut self) {
        OP_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// Runs a ready op on the calling thread (a worker, or the pusher for inline ops).
pub(crate) fn execute(op: OprRef) {
    let engine = op.engine();
    let mut has_error = false;
    if !engine.is_naive() && op.has_error_flag(INPUT_ERROR_HINT) {
        // MXNet's OnStart: adopt the first unreported error of an input (reads first).
        if let Some(e) = op.vars.iter().find_map(|v| v.pending_exception()) {
            *op.exception.lock() = Some(e);
            op.set_error_flag(ERROR_SET);
            has_error = true;
        }
    }
    let skip = (engine.is_shutdown() && op.prop != FnProperty::DeleteVar)
        || (has_error && op.prop != FnProperty::NoSkip && !op.wait_op);
    if skip {
        Inner::on_complete(op, None);
        return;
    }
    let rc = RunContext::new(op.ctx, false);
    let _depth = OpDepthGuard::enter();
    let profile = super::profiling::begin(&op);
    // A panicking async body drops its Completion while unwinding, which fails the op.
    let result = match catch_unwind(AssertUnwindSafe(|| op.body.run(&rc, Pending(&op)))) {
        Ok(r) => r,
        Err(_) if op.body.is_async() => None,
        Err(p) => Some(Err(format!(
            "engine operation '{}' panicked: {}",
            op.name().unwrap_or("unnamed"),
            panic_text(&*p)
        ))),
    };
    super::profiling::end(profile, &op);
    match result {
        Some(result) => Inner::on_complete(op, result.err()),
        // an async body's completion holds its own reference
        None => super::op_memory::release(op),
    }
}
