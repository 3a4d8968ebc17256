//! The engine's hook for the profiler: when op recording is off, each op costs one relaxed atomic
//! load here. The profiler switches recording on and installs its sink; the engine does not depend
//! on the profiler. Times come from [`crate::clock`], the profiler's clock too.

use super::opr::{OpBody, OprBlock};
use crate::clock::now_us;
use crate::context::Context;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Receives (op name, device, start and end in [`crate::clock::now_us`] µs) for each op run while
/// recording is on; called on the thread that ran the op.
pub type OpSink = fn(name: &str, ctx: Context, start_us: u64, end_us: u64);

static RECORDING: AtomicBool = AtomicBool::new(false);
static SINK: OnceLock<OpSink> = OnceLock::new();

/// Installs the sink (once per process) and switches recording on or off.
pub fn set_op_recording(sink: OpSink, on: bool) {
    let _ = SINK.set(sink);
    RECORDING.store(on, Ordering::Release);
}

/// True while ops are recorded (so pushes keep op names).
#[inline]
pub(crate) fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

#[inline]
pub(crate) fn begin(op: &OprBlock<dyn OpBody>) -> Option<u64> {
    if recording() && op.name().is_some() {
        Some(now_us())
    } else {
        None
    }
}

#[inline]
pub(crate) fn end(start: Option<u64>, op: &OprBlock<dyn OpBody>) {
    if let (Some(start), Some(sink), Some(name)) = (start, SINK.get(), op.name()) {
        sink(name, op.ctx, start, now_us());
    }
}
