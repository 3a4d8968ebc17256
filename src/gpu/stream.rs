//! One stream per device for every thread that runs GPU work.
//!
//! MXNet gives each GPU worker thread its own stream; here any thread that runs GPU work (an
//! engine worker of the device, or a caller of a synchronous copy) gets one per device on first
//! use, kept until the thread ends. [`run`] binds the device's context, queues the work and
//! waits for the stream, so the work is complete, and its buffers free to reuse, when it returns.

use super::completion::{self, Done};
use super::driver::{self, cuda_error};
use crate::error::Result;
use cudarc::driver::{CudaContext, DriverError, result, sys};
use std::cell::RefCell;
use std::sync::Arc;

/// The streams this thread made, destroyed when it ends.
#[derive(Default)]
struct ThreadStreams {
    streams: Vec<(i32, sys::CUstream, Arc<CudaContext>)>,
}

impl Drop for ThreadStreams {
    fn drop(&mut self) {
        for (_, stream, ctx) in self.streams.drain(..) {
            if ctx.bind_to_thread().is_ok() {
                // SAFETY: the stream was made by this thread's `stream_for` and no work of it is
                // pending (`run` waits for all of it).
                let _ = unsafe { result::stream::destroy(stream) };
            }
        }
    }
}

thread_local! {
    static STREAMS: RefCell<ThreadStreams> = RefCell::new(ThreadStreams::default());
}

/// This thread's stream on gpu(`dev`), whose context is bound to the thread.
fn stream_for(dev: i32, ctx: &Arc<CudaContext>) -> std::result::Result<sys::CUstream, DriverError> {
    STREAMS.with(|s| {
        let mut s = s.borrow_mut();
        if let Some((_, stream, _)) = s.streams.iter().find(|(d, ..)| *d == dev) {
            return Ok(*stream);
        }
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)?;
        s.streams.push((dev, stream, ctx.clone()));
        Ok(stream)
    })
}

/// Runs `work` on this thread's stream of gpu(`dev`) and waits until the stream has finished
/// it. `what` names the work in errors. Also waits when `work` fails after queueing part of
/// its work, so no queued work outlives the buffers it uses.
pub(crate) fn run<R>(
    dev: i32,
    what: &str,
    work: impl FnOnce(sys::CUstream) -> std::result::Result<R, DriverError>,
) -> Result<R> {
    let ctx = driver::context(i64::from(dev))?;
    ctx.bind_to_thread()
        .map_err(|e| cuda_error(dev, "binding its context", e))?;
    let stream = stream_for(dev, &ctx).map_err(|e| cuda_error(dev, "creating a stream", e))?;
    let out = work(stream).map_err(|e| cuda_error(dev, what, e));
    let synced = if cfg!(feature = "test-drop-stream-sync") {
        Ok(())
    } else {
        // SAFETY: `stream` is this thread's live stream on the bound context.
        unsafe { result::stream::synchronize(stream) }.map_err(|e| cuda_error(dev, what, e))
    };
    let out = out?;
    synced?;
    Ok(out)
}

/// When the caller learns that queued GPU work has finished.
pub enum Finish {
    /// The call returns when the device is done (and reports its errors).
    Here,
    /// The call returns once the work is queued; the function runs when the device is done
    /// (from the device's completion thread, or at once if queueing failed) with the outcome.
    Then(Done),
}

/// Reports `outcome` of work done on the calling thread as `finish` says.
pub(crate) fn finish_now(outcome: Result<()>, finish: Finish) -> Result<()> {
    match finish {
        Finish::Here => outcome,
        Finish::Then(done) => {
            done(outcome);
            Ok(())
        }
    }
}

/// [`run`] for work without a result, finishing as `finish` says. With [`Finish::Then`] the
/// return value is always `Ok`: the outcome goes to the function.
pub(crate) fn run_finish(
    dev: i32,
    what: &'static str,
    work: impl FnOnce(sys::CUstream) -> std::result::Result<(), DriverError>,
    finish: Finish,
) -> Result<()> {
    let done = match finish {
        Finish::Here => return run(dev, what, work),
        Finish::Then(done) if !completion::by_events() => {
            done(run(dev, what, work));
            return Ok(());
        }
        Finish::Then(done) => done,
    };
    let queued = (|| {
        let ctx = driver::context(i64::from(dev))?;
        ctx.bind_to_thread()
            .map_err(|e| cuda_error(dev, "binding its context", e))?;
        let stream = stream_for(dev, &ctx).map_err(|e| cuda_error(dev, "creating a stream", e))?;
        let r = work(stream);
        Ok((stream, r))
    })();
    match queued {
        Err(e) => done(Err(e)),
        Ok((stream, Err(e))) => {
            // SAFETY: `stream` is this thread's live stream; part of the work may be queued.
            let _ = unsafe { result::stream::synchronize(stream) };
            done(Err(cuda_error(dev, what, e)))
        }
        Ok((stream, Ok(()))) => completion::complete_later(dev, stream, what, done),
    }
    Ok(())
}

/// Makes gpu(`dev`)'s context current on the calling thread, as MXNet's GPU workers do before
/// each op, so C code run by an op on that device can use the driver. Failures are left to the
/// op's own driver calls to report.
pub fn bind_thread(dev: i32) {
    if let Ok(ctx) = driver::context(i64::from(dev)) {
        let _ = ctx.bind_to_thread();
    }
}
