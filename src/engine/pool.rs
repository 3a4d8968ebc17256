//! A pool of worker threads fed by one queue (FIFO or priority).
//!
//! Idle workers spin on the queue for a short while before they park, so a steady stream of small
//! ops never pays for a thread wake-up. At most one worker per pool spins at a time; the others park
//! at once, leaving the cores to threads with work. A pusher wakes a parked worker only when no
//! worker is spinning, and a worker that takes an op while more are queued wakes another, so work
//! spreads across the pool without a wake-up per push.
//!
//! Lost wake-ups are impossible: a worker registers as sleeping (under `park_lock`) and then
//! re-checks the queue; a pusher publishes the op and then reads the spinner and sleeper counts.
//! All four accesses are SeqCst, so one of the two sides always sees the other.

use super::opr::OprRef;
use parking_lot::{Condvar, Mutex};
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

enum TaskQueue {
    Fifo(VecDeque<OprRef>),
    Priority {
        heap: BinaryHeap<PrioEntry>,
        seq: u64,
    },
}

impl TaskQueue {
    fn push(&mut self, op: OprRef, front: bool) {
        match self {
            TaskQueue::Fifo(q) if front => q.push_front(op),
            TaskQueue::Fifo(q) => q.push_back(op),
            TaskQueue::Priority { heap, seq } => {
                // a front push (kDeleteVar) goes ahead of everything queued
                let priority = if front { i32::MAX } else { op.priority };
                *seq += 1;
                heap.push(PrioEntry {
                    priority,
                    seq: *seq,
                    op,
                });
            }
        }
    }
    fn pop(&mut self) -> Option<OprRef> {
        match self {
            TaskQueue::Fifo(q) => q.pop_front(),
            TaskQueue::Priority { heap, .. } => heap.pop().map(|e| e.op),
        }
    }
}

struct PoolShared {
    queue: Mutex<TaskQueue>,
    len: AtomicUsize,
    spinners: AtomicUsize,
    sleepers: AtomicUsize,
    park_lock: Mutex<()>,
    park_cv: Condvar,
    stop: AtomicBool,
}

/// Spin budget of an idle worker before it parks.
const WORKER_SPIN_ITERATIONS: u32 = 1 << 14;

impl PoolShared {
    fn try_pop(&self) -> Option<OprRef> {
        if self.len.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let op = self.queue.lock().pop();
        if op.is_some() {
            self.len.fetch_sub(1, Ordering::SeqCst);
        }
        op
    }

    fn wake_one(&self) {
        let _guard = self.park_lock.lock();
        self.park_cv.notify_one();
    }

    /// Takes the next op, spinning and then parking while the queue is empty; `None` once the
    /// pool is stopped.
    fn next(&self) -> Option<OprRef> {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return None;
            }
            if let Some(op) = self.try_pop() {
                return Some(op);
            }
            if self.spinners.fetch_add(1, Ordering::SeqCst) == 0 {
                let mut found = None;
                for i in 0..WORKER_SPIN_ITERATIONS {
                    if let Some(op) = self.try_pop() {
                        found = Some(op);
                        break;
                    }
                    if self.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    if i % 1024 == 1023 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                self.spinners.fetch_sub(1, Ordering::SeqCst);
                if found.is_some() {
                    return found;
                }
            } else {
                self.spinners.fetch_sub(1, Ordering::SeqCst);
            }
            let mut guard = self.park_lock.lock();
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            if self.len.load(Ordering::SeqCst) == 0 && !self.stop.load(Ordering::SeqCst) {
                self.park_cv.wait(&mut guard);
            }
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A pool of worker threads running ops with `run`.
pub(crate) struct WorkerPool {
    shared: Arc<PoolShared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl WorkerPool {
    /// Starts `nthreads` workers named `name-N` that call `run` for each op.
    pub(crate) fn new(name: &str, nthreads: usize, order: QueueOrder, run: fn(OprRef)) -> Self {
        let queue = match order {
            QueueOrder::Fifo => TaskQueue::Fifo(VecDeque::with_capacity(256)),
            QueueOrder::Priority => TaskQueue::Priority {
                heap: BinaryHeap::new(),
                seq: 0,
            },
        };
        let shared = Arc::new(PoolShared {
            queue: Mutex::new(queue),
            len: AtomicUsize::new(0),
            spinners: AtomicUsize::new(0),
            sleepers: AtomicUsize::new(0),
            park_lock: Mutex::new(()),
            park_cv: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let threads = (0..nthreads.max(1))
            .map(|i| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || worker_main(&shared, run))
                    .expect("failed to spawn an engine worker thread")
            })
            .collect();
        WorkerPool {
            shared,
            threads: Mutex::new(threads),
        }
    }

    /// Queues `op`; `front` puts it ahead of everything queued.
    pub(crate) fn push(&self, op: OprRef, front: bool) {
        let s = &*self.shared;
        s.queue.lock().push(op, front);
        s.len.fetch_add(1, Ordering::SeqCst);
        if s.spinners.load(Ordering::SeqCst) == 0 && s.sleepers.load(Ordering::SeqCst) > 0 {
            s.wake_one();
        }
    }

    /// Stops the workers after the op each is running and joins them. Queued ops stay queued.
    pub(crate) fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.park_lock.lock();
            self.shared.park_cv.notify_all();
        }
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

fn worker_main(shared: &PoolShared, run: fn(OprRef)) {
    while let Some(op) = shared.next() {
        // more work queued and nobody looking for it: bring in another worker
        if shared.len.load(Ordering::SeqCst) > 0
            && shared.spinners.load(Ordering::SeqCst) == 0
            && shared.sleepers.load(Ordering::SeqCst) > 0
        {
            shared.wake_one();
        }
        run(op);
    }
}
