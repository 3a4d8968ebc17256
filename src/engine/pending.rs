//! The count of ops created and not yet dropped, without a shared counter on the hot path.
//!
//! A single counter would be incremented by the pushing thread and decremented by a worker for
//! every op, bouncing one cache line between cores. Instead each thread adds to its own shard of
//! two monotonic counters: `created` when it creates an op, `dropped` when it drops one. A waiter
//! reads every `dropped` first and then every `created`: every drop it counted belongs to an op
//! whose creation it also counted, so equal sums mean every op created before the scan began has
//! been dropped.
//!
//! A waiter that has to sleep sets `countdown` to the number of ops it saw pending; while anyone
//! waits, each drop decrements it, and the drop that takes it to zero wakes the waiters, who
//! recount. So a waiter sleeps through the drops that cannot end its wait instead of waking for
//! every one (on a busy machine those wake-ups cost more than the ops). The countdown may reach
//! zero early (drops during the scan are counted twice), never late: an early wake-up only
//! recounts. With only a few ops pending (`FEW`) the countdown is 1: the waiter recounts
//! after every drop, which keeps short waits short.
//!
//! A drop learns whether anyone waits from the increment itself: while a waiter is registered,
//! the top bit of every shard's `dropped` word ([`WAITING`]) is set, and the `fetch_add` returns
//! it. So a drop touches nothing after its increment unless someone waits. That matters because
//! the increment is what lets a dropping engine free this struct: once `wait_zero` sees the count
//! reach zero, `Engine::drop` goes on to free the engine, and the dropping thread (a thread outside
//! the engine's pools completing an async op, say) must not touch it afterwards. A drop that saw
//! `WAITING` does touch it (the countdown, the lock, the condition variable), so it counts itself
//! in `woke` when it is done, as its last touch; and the waiter that clears `WAITING` (the last
//! to leave) first waits until every drop that saw it has done so (see `lower`). A waiter that
//! returns has therefore seen every such drop finish, and one that only spins (no `WAITING`)
//! races only with drops that touch nothing after their increment.

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

const SHARDS: usize = 16;

/// The top bit of each shard's `dropped` word: set while a waiter is registered (see the module
/// docs). The count is the other 63 bits.
const WAITING: u64 = 1 << 63;

#[repr(align(128))]
#[derive(Default)]
struct Shard {
    created: AtomicU64,
    /// Ops dropped, plus [`WAITING`].
    dropped: AtomicU64,
}

pub(crate) struct PendingOps {
    shards: [Shard; SHARDS],
    /// Drops left before the waiters should recount (see the module docs).
    countdown: AtomicI64,
    /// Drops that saw [`WAITING`] and have finished touching this struct.
    woke: AtomicU64,
    lock: Mutex<Waiters>,
    cv: Condvar,
}

/// The registered waiters' bookkeeping, under `PendingOps::lock`.
#[derive(Default)]
struct Waiters {
    count: usize,
    /// Each shard's drop count when [`WAITING`] was last set on it.
    raised_at: [u64; SHARDS],
    /// Drops that ever saw [`WAITING`] (counted when it is cleared), which `woke` must reach
    /// before the waiter that cleared it returns.
    saw_waiting: u64,
}

/// `countdown` while a waiter scans: far from zero, so no drop wakes anyone meanwhile.
const SCANNING: i64 = 1 << 62;

/// Up to this many pending ops a waiter recounts after every drop.
const FEW: u64 = 64;

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn my_shard() -> usize {
    MY_SHARD.with(|s| {
        if s.get() == usize::MAX {
            s.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
        }
        s.get()
    })
}

impl PendingOps {
    pub(crate) fn new() -> Self {
        PendingOps {
            shards: Default::default(),
            countdown: AtomicI64::new(SCANNING),
            woke: AtomicU64::new(0),
            lock: Mutex::new(Waiters::default()),
            cv: Condvar::new(),
        }
    }

    /// An op was created.
    #[inline]
    pub(crate) fn created(&self) {
        self.shards[my_shard()]
            .created
            .fetch_add(1, Ordering::SeqCst);
    }

    /// An op was dropped. Unless a waiter is registered, the increment is the last access to
    /// `self`: it may let a dropping engine free it.
    #[inline]
    pub(crate) fn dropped(&self) {
        let before = self.shards[my_shard()]
            .dropped
            .fetch_add(1, Ordering::SeqCst);
        if before & WAITING != 0 {
            self.count_down();
        }
    }

    /// A drop while a waiter is registered: the drop that ends the waiters' countdown wakes them.
    /// The waiters stay (and so does `self`) until this has counted itself in `woke`.
    #[cold]
    #[inline(never)]
    fn count_down(&self) {
        #[cfg(test)]
        super::test_hooks::reached(super::test_hooks::Point::AfterDropCounted);
        if self.countdown.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
        // the last access to `self` (see `lower`)
        self.woke.fetch_add(1, Ordering::Release);
    }

    /// Ops created and not dropped, as of the scan (see the module docs for why it is sound).
    pub(crate) fn count(&self) -> u64 {
        let dropped: u64 = self
            .shards
            .iter()
            .map(|s| s.dropped.load(Ordering::SeqCst) & !WAITING)
            .sum();
        let created: u64 = self
            .shards
            .iter()
            .map(|s| s.created.load(Ordering::SeqCst))
            .sum();
        created.saturating_sub(dropped)
    }

    /// Blocks until every op created before the call has been dropped, and every drop that
    /// touched `self` after counting itself has finished doing so.
    ///
    /// Spins first only when few ops are pending: with more, the wait lasts at least as long as
    /// their bodies, and a spinning waiter would take a core from the workers running them (a
    /// pushing thread that has the other core to itself otherwise spins on it for milliseconds,
    /// its yields returning at once, while the workers share one core).
    pub(crate) fn wait_zero(&self) {
        let pending = self.count();
        if pending == 0 || (pending <= FEW && super::signal::spin_until(|| self.count() == 0)) {
            return;
        }
        let mut g = self.lock.lock();
        if g.count == 0 {
            self.raise(&mut g);
        }
        g.count += 1;
        loop {
            // waiters hold `lock` here, so one of them at a time resets the countdown
            self.countdown.store(SCANNING, Ordering::SeqCst);
            let pending = self.count();
            if pending == 0 {
                break;
            }
            // with few ops pending, recount at the next drop (keeps short waits short)
            let pending = if pending > FEW {
                i64::try_from(pending).unwrap_or(SCANNING / 2)
            } else {
                1
            };
            let left = self
                .countdown
                .fetch_sub(SCANNING - pending, Ordering::SeqCst);
            if left - (SCANNING - pending) <= 0 {
                continue; // every op seen pending was dropped during the scan
            }
            // the timeout is a safety net only: the countdown cannot end late
            self.cv.wait_for(&mut g, Duration::from_millis(5));
        }
        g.count -= 1;
        if g.count == 0 {
            let saw_waiting = self.lower(&mut g);
            drop(g);
            // Not under `lock`: a drop that saw WAITING may need it to notify. The wait is short:
            // such a drop has already counted itself and only has the few steps of `count_down`
            // left.
            let mut backoff = super::idle::SIGNAL_SPIN.backoff();
            while self.woke.load(Ordering::Acquire) < saw_waiting {
                if !backoff.snooze() {
                    std::thread::yield_now();
                }
            }
        }
    }

    /// The first waiter registers: every drop from now on sees [`WAITING`].
    fn raise(&self, w: &mut Waiters) {
        for (shard, at) in self.shards.iter().zip(&mut w.raised_at) {
            *at = shard.dropped.fetch_or(WAITING, Ordering::SeqCst) & !WAITING;
        }
    }

    /// The last waiter leaves: clears [`WAITING`] and returns how many drops ever saw it, which
    /// `woke` must reach before the waiter may return (a drop's increment and its `fetch_and`
    /// here are ordered on the shard's word, so the count is exact).
    fn lower(&self, w: &mut Waiters) -> u64 {
        for (shard, at) in self.shards.iter().zip(&w.raised_at) {
            let now = shard.dropped.fetch_and(!WAITING, Ordering::SeqCst) & !WAITING;
            w.saw_waiting += now - at;
        }
        w.saw_waiting
    }
}
