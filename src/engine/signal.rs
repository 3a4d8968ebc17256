//! A one-shot event one thread waits on and another sets. The waiter spins briefly before it
//! parks ([`idle::SIGNAL_SPIN`](super::idle::SIGNAL_SPIN)): waking a parked thread costs tens of
//! microseconds, far more than most engine ops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;

use super::idle::{SIGNAL_SPIN, SIGNAL_YIELD_EVERY};

pub(crate) struct Signal {
    done: AtomicBool,
    waiter: Thread,
}

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

const _: () = assert!(
    SIGNAL_SPIN.first.as_nanos() == SIGNAL_SPIN.cap.as_nanos(),
    "spin_until counts SIGNAL_SPIN's steps as equal"
);

/// Spins until `cond` holds or [`SIGNAL_SPIN`] is spent, yielding every
/// [`SIGNAL_YIELD_EVERY`] of spinning; returns whether it holds. It stops early while parallel
/// loops have every core ([`crate::parallel::cores_busy`]): what it waits for is then at least
/// a loop's length away, and the spinning would slow that loop.
#[inline]
pub(crate) fn spin_until(mut cond: impl FnMut() -> bool) -> bool {
    use super::idle::backoff::hints_in;
    let mut backoff = SIGNAL_SPIN.backoff();
    // SIGNAL_SPIN's steps all last `first`: count them instead of converting each to hints
    let steps_per_yield = (hints_in(SIGNAL_YIELD_EVERY) / hints_in(SIGNAL_SPIN.first)).max(1);
    let mut steps = 0u32;
    while !cond() {
        if crate::parallel::cores_busy() || !backoff.snooze() {
            return cond();
        }
        steps += 1;
        if steps == steps_per_yield {
            steps = 0;
            std::thread::yield_now();
        }
    }
    true
}
