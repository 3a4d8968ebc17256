//! A bounded multi-producer multi-consumer FIFO ring: the fast path of a worker pool's queue.
//!
//! Each slot carries a stamp saying which position it is ready for: `pos` when free for the push
//! at `pos`, `pos + 1` once that push has written it, `pos + capacity` once it has been popped
//! (free for the push one lap later). Producers claim positions on `tail`, consumers on `head`,
//! each on its own cache line; neither side reads the other's counter. That matters on the
//! engine's hot path: a worker polling an empty queue only reads the slot the next push will
//! write (a line that has to travel to it anyway), instead of the pusher's tail counter, which it
//! would otherwise pull away from the pusher on every poll.
//!
//! `try_push` fails when the ring is full; the pool then queues elsewhere. "Empty" means the
//! slot at the head is not written yet: a push that has claimed its position but not finished is
//! not seen, which is what the pools' sleep protocol needs (the pusher checks for sleepers after
//! its push is visible).

use crossbeam_utils::CachePadded;
use std::mem::MaybeUninit;

#[cfg(loom)]
use loom::{
    cell::UnsafeCell,
    sync::atomic::{AtomicUsize, Ordering},
};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicUsize, Ordering};

/// std's `UnsafeCell` with the access style of loom's, so the model below checks the same code.
#[cfg(not(loom))]
struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }
    fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

struct Slot<T> {
    stamp: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

pub(crate) struct Ring<T> {
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
    slots: Box<[Slot<T>]>,
}

// SAFETY: values move between threads through the ring (T: Send); a slot's value is only touched
// by the one thread that claimed its position, as the stamps order it.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for Ring<T> {}

/// `a - b` as a signed distance between positions (they wrap around `usize`).
fn distance(a: usize, b: usize) -> isize {
    a.wrapping_sub(b) as isize
}

impl<T> Ring<T> {
    /// A ring of `capacity` slots (a power of two).
    pub(crate) fn new(capacity: usize) -> Self {
        assert!(
            capacity.is_power_of_two(),
            "ring capacity must be a power of two"
        );
        Ring {
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
            slots: (0..capacity)
                .map(|i| Slot {
                    stamp: AtomicUsize::new(i),
                    value: UnsafeCell::new(MaybeUninit::uninit()),
                })
                .collect(),
        }
    }

    fn slot(&self, pos: usize) -> &Slot<T> {
        &self.slots[pos & (self.slots.len() - 1)]
    }

    /// Appends `value`, or gives it back when the ring is full.
    pub(crate) fn try_push(&self, value: T) -> Result<(), T> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(pos);
            let stamp = slot.stamp.load(Ordering::Acquire);
            match distance(stamp, pos) {
                0 => match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: winning the claim on `pos` makes this thread the slot's only
                        // user until it publishes the stamp below; the stamp said it is free.
                        slot.value.with_mut(|v| unsafe { (*v).write(value) });
                        slot.stamp.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(now) => pos = now,
                },
                // the slot still holds the value pushed one lap ago: full
                d if d < 0 => return Err(value),
                // another producer took `pos`: catch up
                _ => pos = self.tail.load(Ordering::Relaxed),
            }
        }
    }

    /// Takes the oldest value, if the slot at the head has been written.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(pos);
            let stamp = slot.stamp.load(Ordering::Acquire);
            match distance(stamp, pos.wrapping_add(1)) {
                0 => match self.head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the stamp says a push wrote this slot, and winning the claim on
                        // `pos` makes this thread the only one to read it before it is freed below.
                        let value = slot.value.with_mut(|v| unsafe { (*v).assume_init_read() });
                        let next_lap = pos.wrapping_add(self.slots.len());
                        slot.stamp.store(next_lap, Ordering::Release);
                        return Some(value);
                    }
                    Err(now) => pos = now,
                },
                // not written yet: empty (or a push still in progress)
                d if d < 0 => return None,
                // another consumer took `pos`: catch up
                _ => pos = self.head.load(Ordering::Relaxed),
            }
        }
    }

    /// True if the slot at the head has not been written (see the module docs).
    pub(crate) fn is_empty(&self) -> bool {
        let pos = self.head.load(Ordering::SeqCst);
        self.slot(pos).stamp.load(Ordering::SeqCst) != pos.wrapping_add(1)
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        while self.pop().is_some() {}
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Ring;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn fifo_full_and_wraparound() {
        let r = Ring::new(4);
        assert!(r.is_empty());
        for lap in 0..3 {
            for i in 0..4 {
                r.try_push(lap * 10 + i).unwrap();
            }
            assert_eq!(r.try_push(99), Err(99), "full");
            for i in 0..4 {
                assert_eq!(r.pop(), Some(lap * 10 + i));
            }
            assert_eq!(r.pop(), None);
            assert!(r.is_empty());
        }
    }

    #[test]
    fn values_left_in_the_ring_are_dropped() {
        let v = Arc::new(());
        let r = Ring::new(8);
        for _ in 0..5 {
            r.try_push(v.clone()).unwrap();
        }
        drop(r);
        assert_eq!(Arc::strong_count(&v), 1);
    }

    #[test]
    fn many_producers_and_consumers_pass_each_value_once_in_each_producers_order() {
        const PRODUCERS: usize = 3;
        // Miri interprets every spin of the consumers: a hundredth of the values still wraps the
        // 64-slot ring many times.
        const PER: usize = if cfg!(miri) { 200 } else { 20_000 };
        let r = Arc::new(Ring::new(64));
        let done = Arc::new(AtomicUsize::new(0));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 0..PER {
                        let mut v = (p, i);
                        while let Err(back) = r.try_push(v) {
                            v = back;
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (r, done) = (r.clone(), done.clone());
                std::thread::spawn(move || {
                    let mut last = [None::<usize>; PRODUCERS];
                    let mut got = Vec::new();
                    while done.load(Ordering::Relaxed) < PRODUCERS * PER {
                        match r.pop() {
                            Some((p, i)) => {
                                // one consumer sees each producer's values in push order
                                assert!(last[p].is_none_or(|l| l < i), "producer {p} out of order");
                                last[p] = Some(i);
                                got.push((p, i));
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                            None => std::hint::spin_loop(),
                        }
                    }
                    got
                })
            })
            .collect();
        producers.into_iter().for_each(|t| t.join().unwrap());
        let mut all: Vec<(usize, usize)> = consumers
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        let want: Vec<(usize, usize)> = (0..PRODUCERS)
            .flat_map(|p| (0..PER).map(move |i| (p, i)))
            .collect();
        assert_eq!(all, want, "every value exactly once");
    }
}

/// Model check (loom) of the ring: every interleaving of the threads below passes each value
/// exactly once, in push order per producer, with no data race on a slot. Run with `make loom`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::Ring;
    use loom::sync::Arc;

    fn pop_n(r: &Ring<u32>, n: usize) -> Vec<u32> {
        let mut got = Vec::new();
        while got.len() < n {
            match r.pop() {
                Some(v) => got.push(v),
                None => loom::thread::yield_now(),
            }
        }
        got
    }

    #[test]
    fn loom_ring_two_producers_one_consumer() {
        loom::model(|| {
            let r = Arc::new(Ring::new(2));
            let producers: Vec<_> = [1u32, 2]
                .into_iter()
                .map(|v| {
                    let r = r.clone();
                    loom::thread::spawn(move || r.try_push(v).unwrap())
                })
                .collect();
            let mut got = pop_n(&r, 2);
            producers.into_iter().for_each(|t| t.join().unwrap());
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
            assert!(r.is_empty());
        });
    }

    #[test]
    fn loom_ring_wraps_around_in_order() {
        loom::model(|| {
            let r = Arc::new(Ring::new(2));
            let r2 = r.clone();
            let producer = loom::thread::spawn(move || {
                for v in 0..3u32 {
                    while r2.try_push(v).is_err() {
                        loom::thread::yield_now();
                    }
                }
            });
            assert_eq!(pop_n(&r, 3), [0, 1, 2]);
            producer.join().unwrap();
        });
    }
}
