//! The process's one pool of threads for parallel loops inside a piece of work: operator kernels
//! split their index range over it as MXNet's kernels do with OpenMP, the KVStore splits big
//! reductions and broadcasts over it as MXNet's CommCPU does (`MXNET_KVSTORE_REDUCTION_NTHREADS`
//! threads), and kParallelRandom fills its streams' chunks on it.
//!
//! rayon provides the pool (work stealing; a pool thread that waits helps). Its size is
//! `MXNET_OMP_MAX_THREADS`, else `OMP_NUM_THREADS`, else the number of cores. The GEMM kernels run
//! on the same pool, so a matrix product, elementwise work and a reduction never oversubscribe the
//! cores beyond one pool plus the engine's workers. Small ranges run on the calling thread with no
//! hand-off.
//!
//! Low in the layers: it uses no other module of mxrt, so every module may use it.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Below this many elements of work a kernel runs on one thread: a hand-off costs a few
/// microseconds, which is about what 32 K elements of simple arithmetic take. (1 K under Miri,
/// so that kernels split their work on the small arrays its tests can afford.)
pub const MIN_PARALLEL_ELEMS: usize = if cfg!(miri) { 1 << 10 } else { 1 << 15 };

fn env_threads(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
}

/// The machine's cores (available parallelism), read once.
pub fn cores() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Threads an op may use: the pool's size.
pub fn max_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        env_threads("MXNET_OMP_MAX_THREADS")
            .or_else(|| env_threads("OMP_NUM_THREADS"))
            .unwrap_or_else(cores)
    })
}

fn build_pool(threads: usize, name: &'static str) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .expect("the intra-op thread pool starts")
}

/// The pool, made on first use.
pub fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| build_pool(max_threads(), "mxrt-omp"))
}

/// A pool with at least `helpers` threads: the shared [`pool`] when it is big enough (always, unless
/// `MXNET_OMP_MAX_THREADS`/`OMP_NUM_THREADS` made it smaller than a caller's explicit thread count
/// such as `MXNET_KVSTORE_REDUCTION_NTHREADS`), else one made for that count and kept.
fn pool_with(helpers: usize) -> &'static rayon::ThreadPool {
    let shared = pool();
    if shared.current_num_threads() >= helpers {
        return shared;
    }
    static EXTRA: OnceLock<Mutex<HashMap<usize, &'static rayon::ThreadPool>>> = OnceLock::new();
    let mut extra = EXTRA
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    // a handful of distinct counts at most (one per configured thread count), kept for the
    // process's life as the shared pool is
    extra
        .entry(helpers)
        .or_insert_with(|| Box::leak(Box::new(build_pool(helpers, "mxrt-par"))))
}

/// How many pieces `n` items of `cost` each split into: one per thread, but none with less
/// than half the threshold's work, so a few costly items (channels, planes, rows) split as
/// well as many cheap ones.
fn parts(n: usize, cost: usize, threads: usize) -> usize {
    let work = n.saturating_mul(cost.max(1));
    threads.min(n).min(work / (MIN_PARALLEL_ELEMS / 2)).max(1)
}

thread_local! {
    /// Set while this thread runs work that is already one part of a split ([`serial`]).
    static SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the parallel loops it calls ([`for_ranges`], [`for_chunks_mut`]) kept on this
/// thread: for work that is itself one part of a split over the pool (a fused kernel's blocks).
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _reset = Reset(SERIAL.with(|s| s.replace(true)));
    f()
}

fn in_serial() -> bool {
    SERIAL.with(std::cell::Cell::get)
}

/// Threads that parallel loops have asked for and not yet given back: each loop split over the
/// pool counts its parts from start to end (whether or not a pool thread has picked them up).
static ENGAGED: AtomicUsize = AtomicUsize::new(0);

/// One loop's parts, counted in [`ENGAGED`] while it runs (also when a part panics).
struct Engaged(usize);

impl Engaged {
    fn new(threads: usize) -> Engaged {
        ENGAGED.fetch_add(threads, Ordering::Relaxed);
        Engaged(threads)
    }
}

impl Drop for Engaged {
    fn drop(&mut self) {
        ENGAGED.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// True while parallel loops have work on every core. A thread that would spin waiting for
/// something to do (an idle engine worker, a thread in `WaitForAll`) sleeps instead then: its
/// spinning would take a core from a loop's part, and the loop's end comes no sooner than its
/// slowest part.
pub fn cores_busy() -> bool {
    ENGAGED.load(Ordering::Relaxed) >= cores()
}

/// Runs `f(0)` on the calling thread and `f(1)` .. `f(parts - 1)` on the pool, and returns when
/// all have run (a part's panic is re-raised here).
pub fn for_parts(parts: usize, f: impl Fn(usize) + Sync) {
    if parts <= 1 {
        if parts == 1 {
            f(0);
        }
        return;
    }
    let _engaged = Engaged::new(parts);
    // the calling (engine worker) thread computes the first part itself instead of waiting for
    // a pool thread to pick the whole scope up
    pool().in_place_scope(|s| {
        for p in 1..parts {
            let f = &f;
            s.spawn(move |_| f(p));
        }
        f(0);
    });
}

/// Runs `f` inside the pool for work that splits itself over `threads` of its threads (rayon's
/// parallel iterators, the gemm crate), counted as engaging them.
pub fn install<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    let _engaged = Engaged::new(threads);
    pool().install(f)
}

/// Calls `f(start, end)` over disjoint ranges covering `0..n`, in parallel when `n` elements of
/// work are worth it (`cost` scales the threshold: 1 for a simple map, more for costly ones).
pub fn for_ranges(n: usize, cost: usize, f: impl Fn(usize, usize) + Sync) {
    let threads = max_threads();
    if threads <= 1 || n.saturating_mul(cost.max(1)) < MIN_PARALLEL_ELEMS || in_serial() {
        f(0, n);
        return;
    }
    let parts = parts(n, cost, threads);
    let step = n.div_ceil(parts);
    for_parts(parts, |p| {
        let (start, end) = (p * step, ((p + 1) * step).min(n));
        if start < end {
            f(start, end);
        }
    });
}

/// Calls `f(start, chunk)` over disjoint chunks of `out` (`start` is the chunk's first index),
/// in parallel when large enough.
pub fn for_chunks_mut<T: Send>(out: &mut [T], cost: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    let n = out.len();
    let threads = max_threads();
    if threads <= 1 || n.saturating_mul(cost.max(1)) < MIN_PARALLEL_ELEMS || in_serial() {
        f(0, out);
        return;
    }
    let parts = parts(n, cost, threads);
    let step = n.div_ceil(parts);
    install(parts, || {
        out.par_chunks_mut(step)
            .enumerate()
            .for_each(|(i, c)| f(i * step, c))
    });
}

/// One call of [`for_tasks`] as its helpers see it. It is shared (`Arc`) with the helper jobs,
/// which may start after the call has returned: they then find it closed and leave without
/// touching `task`.
struct Job {
    /// The caller's closure, its lifetime erased: dereferenced only by a helper counted in
    /// `gate.active`, and the caller does not return before that count is back to 0 with the
    /// gate closed.
    task: *const (dyn Fn(usize) + Sync),
    ntasks: usize,
    next: AtomicUsize,
    gate: Mutex<Gate>,
    left: std::sync::Condvar,
}

#[derive(Default)]
struct Gate {
    /// Set by the caller once it has run out of tasks: no helper enters after that.
    closed: bool,
    /// Helpers inside the job.
    active: usize,
    /// The first panic of a helper's task, re-raised on the caller.
    panic: Option<Box<dyn Any + Send>>,
}

// SAFETY: `task` is a `Sync` closure, so calling it from several threads at once is allowed; the
// raw pointer is only dereferenced while the caller keeps the closure alive (see `Job::task`).
unsafe impl Send for Job {}
// SAFETY: as above; the other fields are atomics and a mutex.
unsafe impl Sync for Job {}

impl Job {
    /// Runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.ntasks {
                return;
            }
            // SAFETY: the caller of `for_tasks` keeps the closure alive until every thread that
            // may call this (itself, and helpers counted in `active`) is done (`Job::task`).
            let task = unsafe { &*self.task };
            task(i);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A helper's run: enters unless the caller has closed the job, works, leaves.
    fn help(&self) {
        {
            let mut g = self.lock();
            if g.closed {
                return;
            }
            g.active += 1;
        }
        let result = catch_unwind(AssertUnwindSafe(|| self.work()));
        let mut g = self.lock();
        if let Err(p) = result {
            // later tasks are skipped: the call fails anyway
            self.next.store(self.ntasks, Ordering::Relaxed);
            g.panic.get_or_insert(p);
        }
        g.active -= 1;
        if g.active == 0 {
            self.left.notify_all();
        }
    }
}

/// Closes the job and waits for the helpers inside it; runs when the caller's own share ends,
/// also by a panic, so that no helper can use the closure after `for_tasks` has left.
struct CloseOnExit<'a>(&'a Job);

impl Drop for CloseOnExit<'_> {
    fn drop(&mut self) {
        let job = self.0;
        let mut g = job.lock();
        g.closed = true;
        while g.active > 0 {
            g = job.left.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Runs `task(i)` for every `i` in `0..ntasks`, on the calling thread and up to `threads - 1`
/// threads of the pool (`threads` is capped at the machine's cores), and returns when every task
/// has run. Tasks are handed out one at a time in index order. A pool thread that is busy with
/// other work when the call starts simply does not help: the caller never waits for a helper
/// that has not started, only for helpers inside a task. A task's panic is re-raised on the
/// caller once no task runs any more (tasks not yet started are then skipped).
pub fn for_tasks(ntasks: usize, threads: usize, task: impl Fn(usize) + Sync) {
    let threads = threads.min(ntasks).min(cores());
    if threads <= 1 {
        (0..ntasks).for_each(task);
        return;
    }
    let task: &(dyn Fn(usize) + Sync) = &task;
    // SAFETY: only the lifetime is erased, for the duration of this call: `CloseOnExit` below
    // keeps this frame (and the closure) alive until no helper is inside the job, and helpers
    // that start later find the job closed and never dereference the pointer.
    let task: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(task) };
    let job = Arc::new(Job {
        task,
        ntasks,
        next: AtomicUsize::new(0),
        gate: Mutex::new(Gate::default()),
        left: std::sync::Condvar::new(),
    });
    let pool = pool_with(threads - 1);
    let _engaged = Engaged::new(threads);
    for _ in 1..threads {
        let job = job.clone();
        pool.spawn(move || job.help());
    }
    {
        let _close = CloseOnExit(&job);
        job.work();
    }
    let panic = job.lock().panic.take();
    if let Some(p) = panic {
        resume_unwind(p);
    }
}

/// Calls `f(i, &mut items[i])` for every item, as [`for_tasks`] hands out indices (each item to
/// exactly one call).
pub fn for_each_mut<T: Send>(items: &mut [T], threads: usize, f: impl Fn(usize, &mut T) + Sync) {
    struct Base<T>(*mut T);
    // SAFETY: the pointer gives each task exclusive access to a different `T` (below), which may
    // move between threads because `T: Send`.
    unsafe impl<T: Send> Sync for Base<T> {}
    let n = items.len();
    let base = Base(items.as_mut_ptr());
    let base = &base;
    for_tasks(n, threads, move |i| {
        // SAFETY: `i < n` and every index is handed to exactly one task, so the `&mut` borrows
        // are disjoint; `items` is borrowed mutably for the whole call, which outlives the tasks.
        f(i, unsafe { &mut *base.0.add(i) })
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Smaller sizes under Miri, which interprets every access.
    const BIG: usize = if cfg!(miri) { 4 * MIN_PARALLEL_ELEMS + 7 } else { 1 << 20 };

    #[test]
    fn ranges_cover_every_index_once() {
        for n in [0, 1, 1000, MIN_PARALLEL_ELEMS + 7, BIG] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for_ranges(n, 1, |a, b| {
                for h in &hits[a..b] {
                    h.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "n = {n}"
            );
        }
    }

    #[test]
    fn chunks_cover_every_index_once() {
        let mut v = vec![0usize; BIG];
        for_chunks_mut(&mut v, 1, |start, c| {
            for (k, x) in c.iter_mut().enumerate() {
                *x += start + k;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i));
    }

    #[test]
    fn every_task_runs_once() {
        let n = if cfg!(miri) { 50 } else { 1000 };
        for threads in [1, 2, 3, 8] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for_tasks(n, threads, |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
                std::thread::yield_now();
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "{threads} threads"
            );
        }
        for_tasks(0, 4, |_| panic!("no task"));
    }

    #[test]
    fn concurrent_calls_and_panics() {
        let (callers, rounds) = if cfg!(miri) { (2, 3) } else { (4, 50) };
        std::thread::scope(|s| {
            for _ in 0..callers {
                s.spawn(|| {
                    for _ in 0..rounds {
                        let sum = AtomicUsize::new(0);
                        for_tasks(64, 2, |i| {
                            sum.fetch_add(i, Ordering::Relaxed);
                        });
                        assert_eq!(sum.load(Ordering::Relaxed), 63 * 64 / 2);
                    }
                });
            }
        });
        let r = catch_unwind(AssertUnwindSafe(|| {
            for_tasks(8, 2, |i| assert!(i != 5, "task 5 fails"))
        }));
        let msg = r.expect_err("the panic reaches the caller");
        assert_eq!(msg.downcast_ref::<&str>(), Some(&"task 5 fails"));
    }

    #[test]
    fn each_item_once_and_exclusively() {
        let mut v: Vec<Vec<u32>> = (0..37).map(|i| vec![i; 3]).collect();
        for_each_mut(&mut v, 3, |i, x| {
            assert_eq!(x[0] as usize, i);
            x.iter_mut().for_each(|e| *e += 1);
        });
        assert!(v.iter().enumerate().all(|(i, x)| x == &vec![i as u32 + 1; 3]));
    }

    #[test]
    fn loops_count_their_threads_while_they_run() {
        // other tests' loops may run at the same time: only what this loop adds is certain
        let n = cores().max(2);
        let busy = AtomicUsize::new(0);
        for_parts(n, |_| {
            busy.fetch_add(usize::from(cores_busy()), Ordering::Relaxed);
        });
        assert_eq!(
            busy.load(Ordering::Relaxed),
            n,
            "every part sees the cores taken"
        );
        // a loop that fails gives its threads back: counted with a size no other test's loops
        // come near, so that what they add meanwhile cannot hide a count left behind
        const HUGE: usize = 1 << 40;
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _engaged = Engaged::new(HUGE);
            assert!(cores_busy() && ENGAGED.load(Ordering::Relaxed) >= HUGE);
            panic!("the loop fails");
        }));
        assert!(r.is_err());
        assert!(ENGAGED.load(Ordering::Relaxed) < HUGE);
        let r = catch_unwind(AssertUnwindSafe(|| {
            for_parts(n, |p| assert!(p != 1, "part 1 fails"));
        }));
        assert!(r.is_err(), "a part's panic reaches the caller");
    }

    #[test]
    fn explicit_thread_counts_get_a_pool_big_enough() {
        assert!(pool_with(1).current_num_threads() >= 1);
        let big = max_threads() + 2;
        assert!(pool_with(big).current_num_threads() >= big);
        assert!(std::ptr::eq(pool_with(big), pool_with(big)));
    }
}
