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

use parking_lot::{Condvar, Mutex};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

const SHARDS: usize = 16;

#[repr(align(128))]
#[derive(Default)]
struct Shard {
    created: AtomicU64,
    dropped: AtomicU64,
}

pub(crate) struct PendingOps {
    shards: [Shard; SHARDS],
    waiters: AtomicUsize,
    /// Drops left before the waiters should recount (see the module docs).
    countdown: AtomicI64,
    lock: Mutex<()>,
    cv: Condvar,
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
            waiters: AtomicUsize::new(0),
            countdown: AtomicI64::new(SCANNING),
            lock: Mutex::new(()),
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

    /// An op was dropped: the drop that ends the waiters' countdown wakes them.
    #[inline]
    pub(crate) fn dropped(&self) {
        self.shards[my_shard()]
            .dropped
            .fetch_add(1, Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) > 0
            && self.countdown.fetch_sub(1, Ordering::SeqCst) == 1
        {
            let _g = self.lock.lock();
            self.cv.notify_all();
        }
    }

    /// Ops created and not dropped, as of the scan (see the module docs for why it is sound).
    pub(crate) fn count(&self) -> u64 {
        let dropped: u64 = self
            .shards
            .iter()
            .map(|s| s.dropped.load(Ordering::SeqCst))
            .sum();
        let created: u64 = self
            .shards
            .iter()
            .map(|s| s.created.load(Ordering::SeqCst))
            .sum();
        created.saturating_sub(dropped)
    }

    /// Blocks until every op created before the call has been dropped.
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
        self.waiters.fetch_add(1, Ordering::SeqCst);
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
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}
