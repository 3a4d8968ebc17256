//! A pool of worker threads fed by one queue (FIFO or priority).
//!
//! Idle workers poll the queue for a while before they park, so a steady stream of small ops never
//! pays for a thread wake-up. At most one worker per pool polls at a time; the others park at
//! once, leaving the cores to threads with work. A pusher wakes a parked worker only when no
//! worker polls, and a worker that takes an op while more are queued wakes another, so work
//! spreads across the pool without a wake-up per push. How long a worker polls, and how it parks
//! and is woken, is the engine's idle policy (`idle/`, whose README explains why no wake-up is
//! lost).

use super::idle::IdleConfig;
use super::idle::sleep::Sleep;
use super::opr::OprRef;
use super::ring::Ring;
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use std::cell::Cell;
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

/// How a pool orders its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QueueOrder {
    /// First in, first out; `push_front` jumps the queue (kDeleteVar).
    Fifo,
    /// Highest `priority` first; equal priorities in push order.
    Priority,
}

struct PrioEntry {
    priority: i32,
    seq: u64,
    op: OprRef,
}

impl PartialEq for PrioEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for PrioEntry {}
impl PartialOrd for PrioEntry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for PrioEntry {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        // max-heap: higher priority first, then the earlier push (smaller seq)
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Ops a FIFO pool's ring holds before pushes spill into its unbounded overflow queue.
const RING_CAPACITY: usize = 1024;

/// The queue of ready ops. FIFO pools use a lock-free bounded ring (pusher and worker never wait
/// on each other, nor touch each other's counters), an unbounded lock-free queue for when the
/// ring is full, and a rarely used locked side queue for ops that jump ahead (kDeleteVar).
#[allow(clippy::large_enum_variant)] // one queue per pool: size does not matter
enum TaskQueue {
    Fifo {
        ring: Ring<OprRef>,
        /// Takes pushes while the ring is full, and after that until it is drained, so the pool
        /// stays first in, first out.
        overflow: SegQueue<OprRef>,
        overflow_len: AtomicUsize,
        front: Mutex<VecDeque<OprRef>>,
        front_len: AtomicUsize,
    },
    Priority {
        heap: Mutex<(BinaryHeap<PrioEntry>, u64)>,
        len: AtomicUsize,
    },
}

impl TaskQueue {
    fn push(&self, op: OprRef, front: bool) {
        match self {
            TaskQueue::Fifo {
                front: q,
                front_len,
                ..
            } if front => {
                q.lock().push_back(op);
                front_len.fetch_add(1, Ordering::SeqCst);
            }
            TaskQueue::Fifo {
                ring,
                overflow,
                overflow_len,
                ..
            } => {
                let op = if overflow_len.load(Ordering::Relaxed) == 0 {
                    match ring.try_push(op) {
                        Ok(()) => return,
                        Err(op) => op,
                    }
                } else {
                    op
                };
                overflow_len.fetch_add(1, Ordering::SeqCst);
                overflow.push(op);
            }
            TaskQueue::Priority { heap, len } => {
                // a front push (kDeleteVar) goes ahead of everything queued
                let priority = if front { i32::MAX } else { op.priority };
                let mut h = heap.lock();
                h.1 += 1;
                let seq = h.1;
                h.0.push(PrioEntry { priority, seq, op });
                len.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    fn pop(&self) -> Option<OprRef> {
        match self {
            TaskQueue::Fifo {
                ring,
                overflow,
                overflow_len,
                front,
                front_len,
            } => {
                if front_len.load(Ordering::Relaxed) > 0
                    && let Some(op) = front.lock().pop_front()
                {
                    front_len.fetch_sub(1, Ordering::SeqCst);
                    return Some(op);
                }
                if let Some(op) = ring.pop() {
                    return Some(op);
                }
                if overflow_len.load(Ordering::Relaxed) > 0
                    && let Some(op) = overflow.pop()
                {
                    overflow_len.fetch_sub(1, Ordering::SeqCst);
                    return Some(op);
                }
                None
            }
            TaskQueue::Priority { heap, len } => {
                if len.load(Ordering::Relaxed) == 0 {
                    return None;
                }
                let op = heap.lock().0.pop().map(|e| e.op);
                if op.is_some() {
                    len.fetch_sub(1, Ordering::SeqCst);
                }
                op
            }
        }
    }
    fn is_empty(&self) -> bool {
        match self {
            TaskQueue::Fifo {
                ring,
                overflow_len,
                front_len,
                ..
            } => {
                front_len.load(Ordering::SeqCst) == 0
                    && overflow_len.load(Ordering::SeqCst) == 0
                    && ring.is_empty()
            }
            TaskQueue::Priority { len, .. } => len.load(Ordering::SeqCst) == 0,
        }
    }
}

struct PoolShared {
    queue: TaskQueue,
    /// The pool's workers plus one pushing thread outnumber the cores.
    oversubscribed: AtomicBool,
    sleep: Sleep,
    idle: IdleConfig,
    stop: AtomicBool,
}

impl PoolShared {
    fn try_pop(&self) -> Option<OprRef> {
        self.queue.pop()
    }

    /// Takes the next op, polling and then parking while the queue is empty; `None` once the
    /// pool is stopped.
    fn next(&self) -> Option<OprRef> {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(op) = self.try_pop() {
                return Some(op);
            }
            // A thread outside the pools that completes ops runs on this CPU: polling would keep it
            // off the CPU, so park at once (see `neighbour`).
            let completer_here = super::neighbour::completer_on_this_cpu();
            super::neighbour::defer_to_completer(completer_here && self.idle.sched_batch);
            if !completer_here && let Some(op) = self.poll() {
                return Some(op);
            }
            self.sleep.park(
                || !self.queue.is_empty(),
                || self.stop.load(Ordering::SeqCst),
            );
        }
    }

    /// Polls the queue with back-off for the configured time if no other worker of the pool is
    /// polling. Returns an op if one came.
    fn poll(&self) -> Option<OprRef> {
        if !self.sleep.begin_spin() {
            self.sleep.end_spin();
            return None;
        }
        let mut backoff = self.idle.poll();
        let found = loop {
            if let Some(op) = self.try_pop() {
                break Some(op);
            }
            if self.stop.load(Ordering::Relaxed) {
                break None;
            }
            if backoff.at_cap() && super::neighbour::completer_on_this_cpu() {
                super::neighbour::defer_to_completer(self.idle.sched_batch);
                break None;
            }
            if backoff.at_cap() && self.oversubscribed.load(Ordering::Relaxed) {
                // Backed off fully, and this pool's workers plus a pusher outnumber the cores:
                // let the other runnable threads have this one. A thread that yields may stay
                // away for a whole scheduler tick, so meanwhile it does not count as the pool's
                // spinner: a push wakes a parked worker (perhaps on an idle core) instead of
                // leaving its op to this one.
                self.sleep.end_spin();
                std::thread::yield_now();
                if !self.sleep.begin_spin() {
                    // another worker took over the polling: park
                    break None;
                }
                if !backoff.yielded() {
                    break None;
                }
            } else if crate::parallel::cores_busy() || !backoff.snooze() {
                // a running op's parallel loop has every core: a poll would take one from it
                break None;
            }
        };
        self.sleep.end_spin();
        found
    }
}

/// A pool of worker threads running ops with `run`.
pub(crate) struct WorkerPool {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    name: String,
    run: fn(OprRef),
}

impl WorkerPool {
    /// Starts `nthreads` workers named `name-N` that call `run` for each op.
    pub(crate) fn new(
        name: &str,
        nthreads: usize,
        order: QueueOrder,
        idle: IdleConfig,
        run: fn(OprRef),
    ) -> Self {
        let queue = match order {
            QueueOrder::Fifo => TaskQueue::Fifo {
                ring: Ring::new(RING_CAPACITY),
                overflow: SegQueue::new(),
                overflow_len: AtomicUsize::new(0),
                front: Mutex::new(VecDeque::new()),
                front_len: AtomicUsize::new(0),
            },
            QueueOrder::Priority => TaskQueue::Priority {
                heap: Mutex::new((BinaryHeap::new(), 0)),
                len: AtomicUsize::new(0),
            },
        };
        let shared = Arc::new(PoolShared {
            queue,
            oversubscribed: AtomicBool::new(false),
            sleep: Sleep::new(),
            idle,
            stop: AtomicBool::new(false),
        });
        let pool = WorkerPool {
            shared,
            threads: Mutex::new(Vec::new()),
            name: name.to_owned(),
            run,
        };
        pool.start(nthreads);
        pool
    }

    /// Spawns `nthreads` workers (after `new`, or after `stop` to restart the pool).
    pub(crate) fn start(&self, nthreads: usize) {
        self.shared.stop.store(false, Ordering::SeqCst);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.shared
            .oversubscribed
            .store(nthreads.max(1) + 1 > cores, Ordering::Relaxed);
        let mut threads = self.threads.lock();
        for i in 0..nthreads.max(1) {
            let shared = self.shared.clone();
            let run = self.run;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{}-{i}", self.name))
                    .spawn(move || worker_main(&shared, run))
                    .expect("failed to spawn an engine worker thread"),
            );
        }
    }

    /// Queues `op`; `front` puts it ahead of everything queued. On one of this pool's own
    /// workers, a FIFO op goes to the worker's hand-off slot instead when that is free (the
    /// worker runs it as soon as its current op returns).
    pub(crate) fn push(&self, op: OprRef, front: bool) {
        let s = &*self.shared;
        let own = WORKER.with(|w| std::ptr::eq(w.get(), s));
        let op = if own && !front && matches!(s.queue, TaskQueue::Fifo { .. }) {
            match NEXT.with(|n| {
                let slot = n.take();
                if slot.is_none() {
                    n.set(Some(op));
                    None
                } else {
                    n.set(slot);
                    Some(op)
                }
            }) {
                None => return,
                Some(op) => op,
            }
        } else {
            op
        };
        push_shared(s, op, front);
    }

    /// Takes the op at the head of the queue, for a waiting thread that runs it itself.
    pub(crate) fn try_take(&self) -> Option<OprRef> {
        self.shared.try_pop()
    }

    /// Stops the workers after the op each is running and joins them. Queued ops stay queued.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.sleep.wake_all();
        let current = std::thread::current().id();
        for t in self.threads.lock().drain(..) {
            if t.thread().id() != current {
                let _ = t.join();
            }
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.stop();
    }
}

thread_local! {
    /// On a worker thread: its pool, and the op its last completion made ready for that pool,
    /// which the worker runs next without a trip through the shared queue (a dependency chain
    /// then runs back to back on one worker).
    static WORKER: Cell<*const PoolShared> = const { Cell::new(std::ptr::null()) };
    static NEXT: Cell<Option<OprRef>> = const { Cell::new(None) };
}

/// True on a worker thread of any pool.
pub(crate) fn on_worker_thread() -> bool {
    WORKER.try_with(|w| !w.get().is_null()).unwrap_or(false)
}

/// Most ops a worker runs from its hand-off slot in a row before it looks at the queue again.
const MAX_DIRECT_RUNS: u32 = 64;

fn worker_main(shared: &PoolShared, run: fn(OprRef)) {
    WORKER.with(|w| w.set(shared as *const PoolShared));
    while let Some(op) = shared.next() {
        // more work queued and nobody looking for it: bring in another worker
        if !shared.queue.is_empty() && shared.sleep.should_wake() {
            shared.sleep.wake_one();
        }
        run(op);
        let mut direct = 0;
        while let Some(next) = NEXT.with(Cell::take) {
            direct += 1;
            if direct > MAX_DIRECT_RUNS || shared.stop.load(Ordering::Relaxed) {
                // let queued ops have a turn; the chain continues from the queue
                push_shared(shared, next, false);
                break;
            }
            run(next);
        }
    }
    WORKER.with(|w| w.set(std::ptr::null()));
}

fn push_shared(s: &PoolShared, op: OprRef, front: bool) {
    s.queue.push(op, front);
    s.sleep.notify();
}
