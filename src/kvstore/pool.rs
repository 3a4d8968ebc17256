//! A small persistent thread pool for splitting one big reduction (or broadcast) across threads,
//! as MXNet's CommCPU does with OpenMP above `MXNET_KVSTORE_BIGARRAY_BOUND`.
//!
//! [`Pool::run`] hands `ntasks` task indices to the calling thread and the pool's workers and
//! returns once every task has run. Only one job runs at a time: a caller that finds the pool busy
//! (another reduction on another engine worker) runs its tasks itself instead of waiting, so two
//! concurrent reductions never block each other.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// One published job. It lives on the stack of the thread inside [`Pool::run`], which does not
/// return before every worker that picked the job up has let go of it.
struct Job {
    task: *const (dyn Fn(usize) + Sync),
    ntasks: usize,
    next: AtomicUsize,
    panicked: AtomicBool,
}

impl Job {
    /// Runs tasks until none is left.
    fn work(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.ntasks {
                return;
            }
            // SAFETY: `task` points to the closure borrowed by `Pool::run`, which outlives every
            // use (run waits until no worker holds the job).
            let task = unsafe { &*self.task };
            if catch_unwind(AssertUnwindSafe(|| task(i))).is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Address of the current job, passed to workers under the pool's lock.
#[derive(Clone, Copy)]
struct JobPtr(*const Job);
// SAFETY: the job is only reached while `Pool::run` keeps it alive (see `Job`); its closure is Sync.
unsafe impl Send for JobPtr {}

struct State {
    job: Option<JobPtr>,
    /// Bumped for every new job so a worker takes each job at most once.
    generation: u64,
    /// Workers currently inside a job.
    active: usize,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes workers for a new job.
    work_cv: Condvar,
    /// Wakes the submitter when `active` drops to 0.
    done_cv: Condvar,
    /// Held by the submitting thread for the duration of a job.
    busy: Mutex<()>,
}

/// A pool of `threads - 1` workers (the caller is the last thread).
pub struct Pool {
    shared: Arc<Shared>,
    threads: usize,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                generation: 0,
                active: 0,
            }),
            work_cv: Condvar::new(),
            done_cv: Condvar::new(),
            busy: Mutex::new(()),
        });
        for i in 1..threads {
            let s = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("mxrt-kvreduce-{i}"))
                .spawn(move || worker(&s));
            if spawned.is_err() {
                // fewer workers only means less parallelism; the caller always takes part
                break;
            }
        }
        Pool { shared, threads }
    }

    /// The process-wide pool with `threads` threads (one pool per distinct count), capped at the
    /// machine's available parallelism: the loops are memory-bound, and threads beyond the cores
    /// only add context switches.
    pub fn global(threads: usize) -> Arc<Pool> {
        static POOLS: OnceLock<Mutex<HashMap<usize, Arc<Pool>>>> = OnceLock::new();
        static CORES: OnceLock<usize> = OnceLock::new();
        let cores =
            *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let threads = threads.min(cores).max(1);
        POOLS
            .get_or_init(Default::default)
            .lock()
            .entry(threads)
            .or_insert_with(|| Arc::new(Pool::new(threads)))
            .clone()
    }

    /// Runs `task(0..ntasks)` across the pool and the calling thread; returns when all are done.
    /// Returns false if a task panicked.
    pub fn run(&self, ntasks: usize, task: &(dyn Fn(usize) + Sync)) -> bool {
        // SAFETY: the lifetime is erased only for the duration of this call: the job is withdrawn
        // and every worker has left it before `run` returns.
        let task: &'static (dyn Fn(usize) + Sync) = unsafe { std::mem::transmute(task) };
        let job = Job {
            task,
            ntasks,
            next: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
        };
        let guard = if self.threads > 1 && ntasks > 1 {
            self.shared.busy.try_lock()
        } else {
            None
        };
        if let Some(_busy) = guard {
            {
                let mut st = self.shared.state.lock();
                st.job = Some(JobPtr(&job));
                st.generation = st.generation.wrapping_add(1);
                self.shared.work_cv.notify_all();
            }
            job.work();
            let mut st = self.shared.state.lock();
            st.job = None;
            while st.active > 0 {
                self.shared.done_cv.wait(&mut st);
            }
        } else {
            job.work();
        }
        !job.panicked.load(Ordering::Relaxed)
    }
}

fn worker(shared: &Shared) {
    let mut seen = 0u64;
    let mut st = shared.state.lock();
    loop {
        match st.job {
            Some(ptr) if st.generation != seen => {
                seen = st.generation;
                st.active += 1;
                drop(st);
                // SAFETY: the job was published and `active` counts us, so `run` keeps it alive
                // until we decrement `active` below.
                unsafe { &*ptr.0 }.work();
                st = shared.state.lock();
                st.active -= 1;
                if st.active == 0 {
                    shared.done_cv.notify_all();
                }
            }
            _ => shared.work_cv.wait(&mut st),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_on_several_threads() {
        let pool = Pool::global(3);
        let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        let threads = Mutex::new(std::collections::HashSet::new());
        assert!(pool.run(1000, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
            threads.lock().insert(std::thread::current().id());
            std::thread::yield_now();
        }));
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        assert!(!threads.lock().is_empty());
    }

    #[test]
    fn concurrent_jobs_and_panics() {
        let pool = Pool::global(2);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let sum = AtomicUsize::new(0);
                        assert!(pool.run(64, &|i| {
                            sum.fetch_add(i, Ordering::Relaxed);
                        }));
                        assert_eq!(sum.load(Ordering::Relaxed), 63 * 64 / 2);
                    }
                });
            }
        });
        assert!(!pool.run(8, &|i| assert!(i != 5, "task 5 fails")));
    }
}
