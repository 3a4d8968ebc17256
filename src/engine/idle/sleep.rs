//! How a pool's idle workers sleep and how pushes wake them (see `README.md` here for the
//! protocol and why no wake-up is lost).

use crossbeam_utils::CachePadded;

#[cfg(loom)]
use loom::sync::{
    Condvar, Mutex, MutexGuard,
    atomic::{AtomicUsize, Ordering, fence},
};
// parking_lot's condition variable skips the futex call when nobody waits, and its mutex is a
// byte; workers that defer to a completing thread park and are woken for every few ops.
#[cfg(not(loom))]
use parking_lot::{Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering, fence};

/// The same calls on parking_lot and on loom's std-like types (which report poisoning).
#[cfg(not(loom))]
fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock()
}
#[cfg(not(loom))]
fn wait<'a>(cv: &Condvar, mut guard: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
    cv.wait(&mut guard);
    guard
}
#[cfg(loom)]
fn lock(m: &Mutex<()>) -> MutexGuard<'_, ()> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
#[cfg(loom)]
fn wait<'a>(cv: &Condvar, guard: MutexGuard<'a, ()>) -> MutexGuard<'a, ()> {
    cv.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// The counters and the parking place of one pool's workers.
pub(crate) struct Sleep {
    /// Workers polling the queue (at most one at a time polls for long). Changes whenever the
    /// queue runs dry, so it has a cache line of its own: pushers read it only when `sleepers`
    /// is non-zero.
    spinners: CachePadded<AtomicUsize>,
    /// Workers parked or about to park. Read by every push; written only when a worker parks or
    /// wakes, so in a steady stream of ops its line stays shared instead of bouncing.
    sleepers: CachePadded<AtomicUsize>,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Sleep {
    pub(crate) fn new() -> Self {
        Sleep {
            spinners: CachePadded::new(AtomicUsize::new(0)),
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Registers the caller as a spinner; true if it is the only one (it should poll), false if
    /// another worker already polls (the caller should [`end_spin`](Self::end_spin) and park).
    pub(crate) fn begin_spin(&self) -> bool {
        self.spinners.fetch_add(1, Ordering::SeqCst) == 0
    }

    /// Unregisters a spinner.
    pub(crate) fn end_spin(&self) {
        self.spinners.fetch_sub(1, Ordering::SeqCst);
    }

    /// Called by a worker after its queue was found empty and before it parks. Parks unless
    /// `has_work` (which must read the queue after the caller is registered as a sleeper) or
    /// `stopping` holds, and returns when woken (or at once).
    pub(crate) fn park(&self, has_work: impl Fn() -> bool, stopping: impl Fn() -> bool) {
        let guard = lock(&self.lock);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // pairs with the fence in `notify`: a push either sees this sleeper, or is seen here
        fence(Ordering::SeqCst);
        if !has_work() && !stopping() {
            drop(wait(&self.cv, guard));
        } else {
            drop(guard);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Called after an op was made visible in the queue: wakes a parked worker if one is parked
    /// and nobody polls.
    #[inline]
    pub(crate) fn notify(&self) {
        // pairs with the fence in `park`
        fence(Ordering::SeqCst);
        // `sleepers` first: while no worker is parked that is all a push reads
        if self.should_wake() {
            self.wake_one();
        }
    }

    /// True if a worker is parked and none polls: queued work would otherwise wait.
    #[inline]
    pub(crate) fn should_wake(&self) -> bool {
        self.sleepers.load(Ordering::SeqCst) > 0 && self.spinners.load(Ordering::SeqCst) == 0
    }

    pub(crate) fn wake_one(&self) {
        let _guard = lock(&self.lock);
        self.cv.notify_one();
    }

    /// Wakes every parked worker (the pool stops).
    pub(crate) fn wake_all(&self) {
        let _guard = lock(&self.lock);
        self.cv.notify_all();
    }
}

/// Model check (loom) of the protocol: a pusher that queues items and notifies, workers that
/// poll once, then park. Every interleaving ends with every item taken: a lost wake-up leaves a
/// worker parked with an item queued, which loom reports as a deadlock. Run with `make loom`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::Sleep;
    use loom::sync::Arc;
    use loom::sync::atomic::{AtomicUsize, Ordering};

    struct Pool {
        sleep: Sleep,
        queued: AtomicUsize,
        taken: AtomicUsize,
        /// Items to take in all.
        want: usize,
    }

    impl Pool {
        fn try_take(&self) -> bool {
            let mut n = self.queued.load(Ordering::SeqCst);
            while n > 0 {
                match self
                    .queued
                    .compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst)
                {
                    Ok(_) => {
                        if self.taken.fetch_add(1, Ordering::SeqCst) + 1 == self.want {
                            // all taken: end the others' waits, as a stopping pool does
                            self.sleep.wake_all();
                        }
                        return true;
                    }
                    Err(now) => n = now,
                }
            }
            false
        }

        /// A worker: takes items until the workers have taken `want` between them, polling once
        /// as the spinner before parking, as the pools do.
        fn work(&self) {
            while self.taken.load(Ordering::SeqCst) < self.want {
                if self.try_take() {
                    // more queued and nobody looking: bring in another worker (as worker_main)
                    if self.queued.load(Ordering::SeqCst) > 0 && self.sleep.should_wake() {
                        self.sleep.wake_one();
                    }
                    continue;
                }
                if self.sleep.begin_spin() {
                    let found = self.try_take();
                    self.sleep.end_spin();
                    if found {
                        continue;
                    }
                } else {
                    self.sleep.end_spin();
                }
                self.sleep.park(
                    || self.queued.load(Ordering::SeqCst) > 0,
                    || self.taken.load(Ordering::SeqCst) >= self.want,
                );
            }
        }
    }

    fn run(workers: usize, items: usize) {
        // Bounded preemptions keep the search to seconds; lost wake-ups need only one or two.
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(move || {
            let pool = Arc::new(Pool {
                sleep: Sleep::new(),
                queued: AtomicUsize::new(0),
                taken: AtomicUsize::new(0),
                want: items,
            });
            let threads: Vec<_> = (0..workers)
                .map(|_| {
                    let p = pool.clone();
                    loom::thread::spawn(move || p.work())
                })
                .collect();
            for _ in 0..items {
                pool.queued.fetch_add(1, Ordering::SeqCst);
                pool.sleep.notify();
            }
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(pool.taken.load(Ordering::SeqCst), items);
        });
    }

    #[test]
    fn loom_sleep_one_worker_two_pushes() {
        run(1, 2);
    }

    #[test]
    fn loom_sleep_two_workers_one_push() {
        run(2, 1);
    }
}
