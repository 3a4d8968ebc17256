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

/// Spins until `cond` holds or [`SIGNAL_SPIN`] is spent, yielding every
/// [`SIGNAL_YIELD_EVERY`] of spinning; returns whether it holds.
#[inline]
pub(crate) fn spin_until(mut cond: impl FnMut() -> bool) -> bool {
    let mut backoff = SIGNAL_SPIN.backoff();
    let yield_every = super::idle::backoff::hints_in(SIGNAL_YIELD_EVERY);
    let mut since_yield = 0u32;
    while !cond() {
        if !backoff.snooze() {
            return cond();
        }
        since_yield += super::idle::backoff::hints_in(SIGNAL_SPIN.first);
        if since_yield >= yield_every {
            since_yield = 0;
            std::thread::yield_now();
        }
    }
    true
}
