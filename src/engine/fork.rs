//! Fork safety, as MXNet does it: before `fork()` the process-wide engine waits until it is idle
//! and stops its worker threads (so no worker holds a lock the child would inherit locked); after
//! it, the parent restarts them and the child starts fresh ones (`MXNET_MP_WORKER_NTHREADS`, default
//! 1, per CPU pool), so both can keep using mxrt.

use super::{Engine, GLOBAL};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

static REGISTER: Once = Once::new();
/// Set when `prepare` stopped the workers (it does not when fork is called from inside an op).
static STOPPED: AtomicBool = AtomicBool::new(false);

/// Installs the fork handlers once per process.
pub(crate) fn register() {
    REGISTER.call_once(|| {
        // SAFETY: the handlers are plain `extern "C"` functions that never unwind.
        unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    });
}

fn global() -> Option<&'static Engine> {
    GLOBAL.get().and_then(|r| r.as_ref().ok())
}

extern "C" fn prepare() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(engine) = global() {
            if super::threaded::inside_op() {
                return; // waiting here would deadlock; the child gets no workers restarted
            }
            engine.stop_workers();
            STOPPED.store(true, Ordering::SeqCst);
        }
    }));
}

fn restart(in_child: bool) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if STOPPED.swap(false, Ordering::SeqCst)
            && let Some(engine) = global()
        {
            let n = if in_child { Some(mp_workers()) } else { None };
            engine.start_workers(n);
        }
    }));
}

extern "C" fn parent() {
    restart(false);
}

extern "C" fn child() {
    restart(true);
}

/// Worker threads per CPU pool in a forked child (`MXNET_MP_WORKER_NTHREADS`, default 1).
fn mp_workers() -> usize {
    super::config::env_count("MXNET_MP_WORKER_NTHREADS")
        .ok()
        .flatten()
        .unwrap_or(1)
}
