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
use super::ring::Ring;
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering, fence};
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
    /// Workers polling the queue. Changes whenever the queue runs dry, so it has a cache line of
    /// its own: pushers read it only when `sleepers` is non-zero.
    spinners: CachePadded<AtomicUsize>,
    /// Workers parked (or about to). Read by every push; written only when a worker parks or
    /// wakes, so in a steady stream of ops its line stays shared instead of bouncing.
    sleepers: CachePadded<AtomicUsize>,
    park_lock: Mutex<()>,
    park_cv: Condvar,
    stop: AtomicBool,
}

/// Spin budget of an idle worker before it parks: `MXRT_ENGINE_SPIN` iterations (default 16384,
/// roughly 50 µs; 0 parks at once), read when the first pool starts.
static MAX_POLL_DELAY: AtomicU32 = AtomicU32::new(128);

fn worker_spin_iterations() -> u32 {
    static SPIN: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        if let Some(d) = std::env::var("MXRT_ENGINE_POLL_DELAY")
            .ok()
            .and_then(|v| v.trim().parse().ok())
        {
            MAX_POLL_DELAY.store(d, Ordering::Relaxed);
        }
        std::env::var("MXRT_ENGINE_SPIN")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1 << 14)
    })
}

impl PoolShared {
    fn try_pop(&self) -> Option<OprRef> {
        self.queue.pop()
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
            // A thread outside the pools that completes ops runs on this CPU: polling would keep it
            // off the CPU, so park at once, and let it finish its completions before this worker
            // runs again (see `neighbour`).
            let completer_here = super::neighbour::completer_on_this_cpu();
            super::neighbour::defer_to_completer(completer_here);
            if !completer_here && self.spinners.fetch_add(1, Ordering::SeqCst) == 0 {
                // Poll with exponential backoff: quick to notice the next op, yet the queue's cache
                // line is not pulled away from the pusher on every push.
                let mut found = None;
                let (budget, mut spent, mut delay) = (worker_spin_iterations(), 0u32, 1u32);
                while spent < budget {
                    if let Some(op) = self.try_pop() {
                        found = Some(op);
                        break;
                    }
                    if self.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let cap = MAX_POLL_DELAY.load(Ordering::Relaxed);
                    if delay >= cap && super::neighbour::completer_on_this_cpu() {
                        super::neighbour::defer_to_completer(true);
                        break;
                    }
                    if delay >= cap && self.oversubscribed.load(Ordering::Relaxed) {
                        // Backed off fully, and this pool's workers plus a pusher outnumber the
                        // cores: let the other runnable threads have this one. A thread that
                        // yields may stay away for a whole scheduler tick (4 ms), so meanwhile it
                        // does not count as the pool's spinner: a push wakes a parked worker
                        // (perhaps on an idle core) instead of leaving its op to this one.
                        self.spinners.fetch_sub(1, Ordering::SeqCst);
                        std::thread::yield_now();
                        if self.spinners.fetch_add(1, Ordering::SeqCst) != 0 {
                            // another worker took over the polling: park
                            break;
                        }
                    } else {
                        for _ in 0..delay {
                            std::hint::spin_loop();
                        }
                    }
                    spent += delay;
                    delay = (delay * 2).min(cap);
                }
                self.spinners.fetch_sub(1, Ordering::SeqCst);
                if found.is_some() {
                    return found;
                }
            } else if !completer_here {
                self.spinners.fetch_sub(1, Ordering::SeqCst);
            }
            let mut guard = self.park_lock.lock();
            self.sleepers.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.queue.is_empty() && !self.stop.load(Ordering::SeqCst) {
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
    name: String,
    run: fn(OprRef),
}

impl WorkerPool {
    /// Starts `nthreads` workers named `name-N` that call `run` for each op.
    pub(crate) fn new(name: &str, nthreads: usize, order: QueueOrder, run: fn(OprRef)) -> Self {
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
            spinners: CachePadded::new(AtomicUsize::new(0)),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            park_lock: Mutex::new(()),
            park_cv: Condvar::new(),
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
        if !shared.queue.is_empty()
            && shared.sleepers.load(Ordering::SeqCst) > 0
            && shared.spinners.load(Ordering::SeqCst) == 0
        {
            shared.wake_one();
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
    // pairs with the worker's fence between registering as a sleeper and re-checking
    fence(Ordering::SeqCst);
    // `sleepers` first: while no worker is parked that is all a push reads
    if s.sleepers.load(Ordering::SeqCst) > 0 && s.spinners.load(Ordering::SeqCst) == 0 {
        s.wake_one();
    }
}
