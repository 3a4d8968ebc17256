//! A thread waiting for every op to finish (`wait_for_all`) runs queued CPU ops itself, as long
//! as that pays.
//!
//! A program that pushes a batch of ops and then waits for all of them leaves its core to the
//! workers, but the kernel does not always hand it over. On a 2-core machine it often puts both
//! workers of a 2-worker pool on one core while the pushing thread has the other, and a worker
//! that keeps yielding there counts as cache-hot, so it is not moved: the core the waiter leaves
//! stays idle for several scheduler ticks (docs/performance.md has the trace). So the waiter takes ops from the normal CPU pools'
//! queues and runs them, as a worker would, until the queues stay empty for a moment or nothing
//! is pending; then it sleeps as before. (TBB's `task_group::wait` works the same way; MXNet's
//! WaitForAll only sleeps.)
//!
//! It stops helping when the ops it runs are short: ops of a few hundred nanoseconds gain nothing
//! from another core, and lose to their variables' cache lines moving between the waiter and the
//! workers (a waiter that always helps slows every workload of small ops).
//!
//! It does not take an op while parallel loops have work on every core
//! ([`crate::parallel::cores_busy`]): a worker's op already splits over all of them, and a second
//! op run beside it would only make both wait for cores.
//!
//! An op run here runs as on a worker: its errors, its profiling and the refusal to wait inside
//! an op are the same, and pushes from its body are not bulked into the waiting thread's segment.
//! `MXRT_ENGINE_WAIT_HELPS=0` keeps every op on the engine's own threads.

use super::executor::Executor;
use super::pending::PendingOps;
use std::time::Instant;

/// Short ops the waiter runs before it judges whether helping pays.
const SAMPLE_OPS: u64 = 4;

/// An op shorter than this is short: about twice what handing an op and its variables' lines
/// between two cores costs on the 2-core VM measured. The waiter stops helping once more than
/// half the ops it ran were short (a count, not a mean, so that one op preempted for a whole
/// scheduler tick does not keep it helping with thousands of short ones).
const SHORT_OP_NS: u64 = 2_000;

/// Runs queued CPU ops on the calling thread while any are pending and helping pays. Returns true
/// if nothing is pending any more, false if the caller still has to wait (it stopped helping).
pub(crate) fn help_drain(executor: &dyn Executor, pending: &PendingOps) -> bool {
    let _bulk = super::bulk::suspend();
    let (mut ran, mut short) = (0u64, 0u64);
    // polls of empty queues back off for a while before the waiter gives up and sleeps
    let mut backoff = super::idle::HELP_SPIN.backoff();
    loop {
        if (short >= SAMPLE_OPS && 2 * short > ran) || crate::parallel::cores_busy() {
            return false;
        }
        if let Some(op) = executor.take_cpu_op() {
            let start = Instant::now();
            super::threaded::execute(op);
            ran += 1;
            short += u64::from(start.elapsed().as_nanos() < u128::from(SHORT_OP_NS));
            backoff.reset();
            continue;
        }
        if pending.count() == 0 {
            return true;
        }
        if !backoff.snooze() {
            return false;
        }
    }
}
