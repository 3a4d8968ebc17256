//! The state machine of one variable: the FIFO of pending reads and writes, independent of what
//! an "op" is (the engine stores `QueuedOp`s, the loom model plain indices).
//!
//! Rules: adjacent reads run together; a write waits until every earlier read and write has
//! finished; reads queued behind a write wait for it. Invariant: whenever reads run and ops are
//! queued, the queue's front is a write.

use std::collections::VecDeque;

/// What a variable's queue holds: an op together with whether it writes, packed into one value
/// (the engine's queued ops are pointers, whose lowest bit is free), so that an entry is as small
/// as the op alone: a queued op has one entry per variable, and pushing far ahead of the workers
/// queues them by the thousand.
pub(crate) trait QueueEntry: Sized {
    /// `self` marked as a write (`true`) or a read.
    fn pack(self, write: bool) -> Self;
    /// Whether a packed entry is a write.
    fn writes(&self) -> bool;
    /// The op of a packed entry, unmarked.
    fn unpack(self) -> Self;
}

/// Entries a drained queue keeps allocated; a larger buffer, grown by a backlog, is freed once the
/// backlog has drained (a burst of a million pushes must not pin its peak memory).
const KEEP_CAPACITY: usize = 256;

#[derive(Debug)]
pub(crate) struct VarQueue<T> {
    /// Ops not granted yet, in push order, with whether each writes. Allocated the first time an
    /// op has to wait and kept afterwards; boxed so that a variable's whole state, reference
    /// counts included, fits one cache line.
    #[allow(clippy::box_collection)] // deliberate: see above
    queue: Option<Box<VecDeque<T>>>,
    /// Reads granted and not finished.
    running_reads: u32,
    /// A write is granted and not finished.
    write_granted: bool,
    /// Number of completed writes.
    version: u64,
}

impl<T> Default for VarQueue<T> {
    fn default() -> Self {
        VarQueue {
            queue: None,
            running_reads: 0,
            write_granted: false,
            version: 0,
        }
    }
}

impl<T: QueueEntry> VarQueue<T> {
    fn is_queue_empty(&self) -> bool {
        self.queue.as_ref().is_none_or(|q| q.is_empty())
    }

    fn enqueue(&mut self, op: T, write: bool) {
        self.queue.get_or_insert_default().push_back(op.pack(write));
    }

    /// The first queued op, if it writes (`Some(true)`) or reads (`Some(false)`).
    fn front_writes(&self) -> Option<bool> {
        self.queue.as_ref().and_then(|q| q.front()).map(T::writes)
    }

    fn pop_front(&mut self) -> T {
        let q = self.queue.as_mut().expect("front checked");
        let op = q.pop_front().expect("front checked").unpack();
        if q.is_empty() && q.capacity() > KEEP_CAPACITY {
            // a backlog drained: give its memory back rather than hold the peak for good
            self.queue = None;
        }
        op
    }

    /// Queues a read; true if it is granted at once (then `op` is not kept).
    pub(crate) fn append_read(&mut self, op: impl FnOnce() -> T) -> bool {
        if !self.write_granted && self.is_queue_empty() {
            self.running_reads += 1;
            true
        } else {
            self.enqueue(op(), false);
            false
        }
    }

    /// Queues a write; true if it is granted at once.
    pub(crate) fn append_write(&mut self, op: impl FnOnce() -> T) -> bool {
        if !self.write_granted && self.running_reads == 0 && self.is_queue_empty() {
            self.write_granted = true;
            true
        } else {
            self.enqueue(op(), true);
            false
        }
    }

    /// Grants a read or write at once if it would not have to wait; never queues.
    pub(crate) fn try_grant_now(&mut self, write: bool) -> bool {
        if self.write_granted || !self.is_queue_empty() || (write && self.running_reads > 0) {
            return false;
        }
        if write {
            self.write_granted = true;
        } else {
            self.running_reads += 1;
        }
        true
    }

    /// A granted read finished; the next write may be granted (pushed to `ready`).
    pub(crate) fn complete_read(&mut self, ready: &mut impl Extend<T>) {
        debug_assert!(self.running_reads > 0);
        self.running_reads -= 1;
        if self.running_reads == 0 && self.front_writes() == Some(true) {
            let op = self.pop_front();
            self.write_granted = true;
            ready.extend(Some(op));
        }
    }

    /// A granted write finished: bump the version and grant the reads behind it, or the next write.
    pub(crate) fn complete_write(&mut self, ready: &mut impl Extend<T>) {
        debug_assert!(self.write_granted);
        self.version += 1;
        self.write_granted = false;
        while let Some(write) = self.front_writes() {
            if write {
                if self.running_reads == 0 {
                    let op = self.pop_front();
                    self.write_granted = true;
                    ready.extend(Some(op));
                }
                break;
            }
            let op = self.pop_front();
            self.running_reads += 1;
            ready.extend(Some(op));
        }
    }

    /// Nothing is running or queued.
    pub(crate) fn is_idle(&self) -> bool {
        !self.write_granted && self.running_reads == 0 && self.is_queue_empty()
    }

    /// A write is running or queued.
    pub(crate) fn has_pending_write(&self) -> bool {
        self.write_granted || self.queue.as_ref().is_some_and(|q| q.iter().any(T::writes))
    }

    /// Number of completed writes.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Counts a write that ran without queueing (NaiveEngine).
    pub(crate) fn bump_version(&mut self) {
        self.version += 1;
    }
}

/// Small integers as queue entries (the unit tests' and the loom model's ops): shifted left by
/// one, the flag in the freed bit.
#[cfg(test)]
macro_rules! int_entries {
    ($($t:ty),*) => {$(
        impl QueueEntry for $t {
            fn pack(self, write: bool) -> Self {
                self << 1 | <$t>::from(write)
            }
            fn writes(&self) -> bool {
                self & 1 == 1
            }
            fn unpack(self) -> Self {
                self >> 1
            }
        }
    )*};
}
#[cfg(test)]
int_entries!(u32, usize);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_share_writes_wait_in_order() {
        let mut q = VarQueue::default();
        let mut ready: Vec<u32> = Vec::new();
        assert!(q.append_read(|| 0));
        assert!(q.append_read(|| 1));
        assert!(!q.append_write(|| 2));
        assert!(!q.append_read(|| 3), "a read behind a queued write waits");
        q.complete_read(&mut ready);
        assert!(ready.is_empty());
        q.complete_read(&mut ready);
        assert_eq!(ready, [2]);
        q.complete_write(&mut ready);
        assert_eq!(ready, [2, 3]);
        assert_eq!(q.version(), 1);
        assert!(!q.try_grant_now(true));
        assert!(q.try_grant_now(false));
    }

    #[test]
    fn a_drained_backlog_frees_its_buffer_and_a_small_queue_keeps_it() {
        let mut q = VarQueue::default();
        let mut ready: Vec<u32> = Vec::new();
        for (n, kept) in [(KEEP_CAPACITY as u32 * 4, false), (8, true)] {
            assert!(q.append_write(|| 0));
            for i in 1..=n {
                assert!(!q.append_write(|| i));
            }
            for _ in 0..=n {
                q.complete_write(&mut ready);
            }
            assert!(q.is_idle());
            assert_eq!(q.queue.is_some(), kept, "{n} queued writes drained");
        }
        assert_eq!(
            ready.len(),
            KEEP_CAPACITY * 4 + 8,
            "every queued write was granted"
        );
        assert_eq!(q.version(), KEEP_CAPACITY as u64 * 4 + 1 + 9);
    }
}

/// Model check (loom) of the variables' queues together with the engine's grant counting: ops on
/// two variables pushed from two threads are each run exactly once, only when every access they
/// need is granted, never while a conflicting access runs, and one thread's writes run in its push
/// order. Run with `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_` (`make loom`).
#[cfg(all(test, loom))]
mod loom_model {
    use super::VarQueue;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::{Arc, Mutex};

    /// One op: its accesses as (variable, writes) and the engine's count of pending grants.
    struct Op {
        deps: Vec<(usize, bool)>,
        wait: AtomicUsize,
        runs: AtomicUsize,
    }

    struct World {
        /// The engine's lock for pushes of ops with several variables.
        push_lock: Mutex<()>,
        vars: Vec<Mutex<VarQueue<usize>>>,
        ops: Vec<Op>,
        /// Per variable: running readers, or usize::MAX while a writer runs.
        active: Vec<Mutex<usize>>,
        /// Order in which writes to each variable ran.
        log: Vec<Mutex<Vec<usize>>>,
    }

    impl World {
        /// The engine's `submit` (`var::append_all`): an op with several variables holds the
        /// push lock while it queues each access in turn (each under its variable's lock); then
        /// the pusher's extra count is released.
        fn push(&self, i: usize) {
            let op = &self.ops[i];
            let push = (op.deps.len() > 1).then(|| self.push_lock.lock().unwrap());
            let mut granted = 0;
            for &(v, w) in &op.deps {
                let mut q = self.vars[v].lock().unwrap();
                granted += usize::from(if w {
                    q.append_write(|| i)
                } else {
                    q.append_read(|| i)
                });
            }
            drop(push);
            if op.wait.fetch_sub(granted + 1, Ordering::AcqRel) == granted + 1 {
                self.run(i);
            }
        }

        /// Run the op, then the engine's `on_complete`: release its accesses and run what became
        /// ready (inline, as a worker would pick it up).
        fn run(&self, i: usize) {
            let op = &self.ops[i];
            assert_eq!(
                op.runs.fetch_add(1, Ordering::SeqCst),
                0,
                "op {i} ran twice"
            );
            for &(v, w) in &op.deps {
                let mut a = self.active[v].lock().unwrap();
                if w {
                    assert_eq!(*a, 0, "write {i} overlaps another access to var {v}");
                    *a = usize::MAX;
                    self.log[v].lock().unwrap().push(i);
                } else {
                    assert_ne!(*a, usize::MAX, "read {i} overlaps a write to var {v}");
                    *a += 1;
                }
            }
            for &(v, w) in &op.deps {
                let mut a = self.active[v].lock().unwrap();
                *a = if w { 0 } else { *a - 1 };
            }
            let mut ready = Vec::new();
            for &(v, w) in &op.deps {
                let mut q = self.vars[v].lock().unwrap();
                if w {
                    q.complete_write(&mut ready)
                } else {
                    q.complete_read(&mut ready)
                }
            }
            for r in ready {
                if self.ops[r].wait.fetch_sub(1, Ordering::AcqRel) == 1 {
                    self.run(r);
                }
            }
        }
    }

    fn check(deps: Vec<Vec<(usize, bool)>>, threads: Vec<Vec<usize>>) {
        loom::model(move || {
            let world = Arc::new(World {
                push_lock: Mutex::new(()),
                vars: (0..2).map(|_| Mutex::new(VarQueue::default())).collect(),
                ops: deps
                    .iter()
                    .map(|d| Op {
                        deps: d.clone(),
                        wait: AtomicUsize::new(d.len() + 1),
                        runs: AtomicUsize::new(0),
                    })
                    .collect(),
                active: (0..2).map(|_| Mutex::new(0)).collect(),
                log: (0..2).map(|_| Mutex::new(Vec::new())).collect(),
            });
            let handles: Vec<_> = threads
                .clone()
                .into_iter()
                .map(|ops| {
                    let w = world.clone();
                    loom::thread::spawn(move || ops.into_iter().for_each(|i| w.push(i)))
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
            for (i, op) in world.ops.iter().enumerate() {
                assert_eq!(
                    op.runs.load(Ordering::SeqCst),
                    1,
                    "op {i} did not run exactly once"
                );
            }
            // writes pushed by one thread to one variable run in that thread's order
            for v in 0..2 {
                let log = world.log[v].lock().unwrap();
                for t in &threads {
                    let mine: Vec<usize> = log.iter().copied().filter(|i| t.contains(i)).collect();
                    let pushed: Vec<usize> = t
                        .iter()
                        .copied()
                        .filter(|&i| deps[i].contains(&(v, true)))
                        .collect();
                    assert_eq!(mine, pushed, "var {v}: writes out of push order");
                }
            }
        });
    }

    #[test]
    fn loom_write_read_write_across_two_vars() {
        // thread A: op0 writes v0 + reads v1, op2 writes v0; thread B: op1 reads v0 + writes v1
        check(
            vec![
                vec![(0, true), (1, false)],
                vec![(0, false), (1, true)],
                vec![(0, true)],
            ],
            vec![vec![0, 2], vec![1]],
        );
    }

    #[test]
    fn loom_two_writers_listing_their_variables_in_opposite_orders() {
        // without the push lock each can queue first on the variable it lists first: a cycle
        check(
            vec![vec![(0, true), (1, true)], vec![(1, true), (0, true)]],
            vec![vec![0], vec![1]],
        );
    }

    #[test]
    fn loom_reads_then_write_on_one_var() {
        check(
            vec![vec![(0, false)], vec![(0, false)], vec![(0, true)]],
            vec![vec![0, 2], vec![1]],
        );
    }
}
