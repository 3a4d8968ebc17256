//! Completing GPU work without blocking the thread that queued it.
//!
//! MXNet's GPU workers wait for their stream after every op. Here a worker queues the op's
//! work, records an event behind it and hands the event to its device's completion thread,
//! which waits for the events in order and completes each op; the worker meanwhile takes its
//! next op. The engine still starts an op only after the ops it depends on have completed, so
//! ordering is as with a synchronous wait. `MXRT_GPU_COMPLETION=sync` restores the synchronous
//! wait on the worker (MXNet's way; `bench/gpu_completion.sh` compares the two).

use super::driver::{self, cuda_error};
use crate::error::Result;
use cudarc::driver::{CudaContext, result, sys};
use parking_lot::Mutex;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// What runs when the device has finished an op's work (or failed it).
pub type Done = Box<dyn FnOnce(Result<()>) + Send>;

/// Whether ops complete from the completion threads (the default) or by waiting on the worker.
pub(crate) fn by_events() -> bool {
    static MODE: OnceLock<bool> = OnceLock::new();
    *MODE.get_or_init(|| !matches!(std::env::var("MXRT_GPU_COMPLETION").as_deref(), Ok("sync")))
}

/// A recorded event and what to run once it has completed.
struct Job {
    event: Event,
    what: &'static str,
    done: Done,
}

/// An event handle. Driver handles are usable from any thread with their context bound.
struct Event(sys::CUevent);
// SAFETY: see above; each event is owned by one job or by the free list at a time.
unsafe impl Send for Event {}

/// A device's completion thread and its spare events.
struct Device {
    jobs: Mutex<Sender<Job>>,
    spare: Arc<Mutex<Vec<Event>>>,
}

static DEVICES: Mutex<Vec<(i32, Arc<Device>)>> = Mutex::new(Vec::new());

fn device(dev: i32, ctx: &Arc<CudaContext>) -> Arc<Device> {
    let mut devices = DEVICES.lock();
    if let Some((_, d)) = devices.iter().find(|(d, _)| *d == dev) {
        return d.clone();
    }
    let (tx, rx) = channel::<Job>();
    let spare = Arc::new(Mutex::new(Vec::new()));
    let (ctx, back) = (ctx.clone(), spare.clone());
    std::thread::Builder::new()
        .name(format!("mxrt-gpu{dev}-done"))
        .spawn(move || {
            let bound = ctx.bind_to_thread();
            while let Some(job) = next_job(&rx) {
                let r = match &bound {
                    // SAFETY: the event was recorded on a stream of this context and is owned
                    // by this job until it goes back to the free list below.
                    Ok(()) => unsafe { result::event::synchronize(job.event.0) }
                        .map_err(|e| cuda_error(dev, job.what, e)),
                    Err(e) => Err(cuda_error(dev, "binding its context", *e)),
                };
                back.lock().push(job.event);
                (job.done)(r);
            }
        })
        .expect("spawning a GPU completion thread");
    let d = Arc::new(Device {
        jobs: Mutex::new(tx),
        spare,
    });
    devices.push((dev, d.clone()));
    d
}

/// How long a completion thread polls for its next job before it sleeps. In a chain of
/// dependent GPU ops the next job arrives a few microseconds after the previous one completed
/// (the engine dispatches the successor, whose worker queues it and records its event); a thread
/// already asleep would add a wake-up to every link of the chain.
const POLL_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// The next job, polling for `POLL_BEFORE_SLEEP` before blocking; `None` once every sender is
/// gone.
fn next_job(rx: &Receiver<Job>) -> Option<Job> {
    let start = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if start.elapsed() < POLL_BEFORE_SLEEP => {
                std::hint::spin_loop()
            }
            Err(TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

/// Records an event behind the work queued on `stream` (of gpu(`dev`), whose context is bound
/// to this thread) and runs `done` from the device's completion thread once it has completed.
/// If the event cannot be recorded, waits for the stream here instead.
pub(crate) fn complete_later(dev: i32, stream: sys::CUstream, what: &'static str, done: Done) {
    if cfg!(feature = "test-drop-stream-sync") {
        return done(Ok(()));
    }
    let ctx = match driver::context(i64::from(dev)) {
        Ok(c) => c,
        Err(e) => return done(Err(e)),
    };
    let d = device(dev, &ctx);
    let spare = d.spare.lock().pop();
    let event = match spare {
        Some(e) => Ok(e),
        None => result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).map(Event),
    };
    // SAFETY: `stream` is this thread's live stream on the bound context; `e` is an event of it.
    let recorded = event.and_then(|e| unsafe { result::event::record(e.0, stream) }.map(|()| e));
    match recorded {
        Ok(event) => {
            let job = Job { event, what, done };
            if let Err(lost) = d.jobs.lock().send(job) {
                // the completion thread is gone (process exit): wait here
                let job = lost.0;
                // SAFETY: as above.
                let r = unsafe { result::event::synchronize(job.event.0) }
                    .map_err(|e| cuda_error(dev, what, e));
                (job.done)(r);
            }
        }
        Err(e) => {
            // SAFETY: as above.
            let _ = unsafe { result::stream::synchronize(stream) };
            done(Err(cuda_error(dev, what, e)))
        }
    }
}
