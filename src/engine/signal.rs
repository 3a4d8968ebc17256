//! A one-shot event one thread waits on and another sets. The waiter spins briefly before it
//! parks: waking a parked thread costs tens of microseconds, far more than most engine ops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;

pub(crate) struct Signal {
    done: AtomicBool,
    waiter: Thread,
}

/// Spin iterations before parking (each is a `spin_loop` hint; a yield every 1024).
pub(crate) const SPIN_ITERATIONS: u32 = 4096;

impl Signal {
    /// A signal the calling thread will wait on.
    pub(crate) fn for_current_thread() -> Self {
        Signal {
            done: AtomicBool::new(false),
            waiter: std::thread::current(),
        }
    }

    pub(crate) fn set(&self) {
        let waiter = self.waiter.clone();
        self.done.store(true, Ordering::Release);
        waiter.unpark();
    }

    pub(crate) fn is_set(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Blocks the thread that created the signal until `set` is called.
    pub(crate) fn wait(&self) {
        if spin_until(|| self.is_set()) {
            return;
        }
        while !self.is_set() {
            std::thread::park();
        }
    }
}

/// Spins until `cond` holds or the spin budget is spent; returns whether it holds.
#[inline]
pub(crate) fn spin_until(mut cond: impl FnMut() -> bool) -> bool {
    for i in 0..SPIN_ITERATIONS {
        if cond() {
            return true;
        }
        if i % 1024 == 1023 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    cond()
}
