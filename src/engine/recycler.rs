//! Memory recycled between the threads that push ops and the threads that finish them.
//!
//! Nearly every op is created on a pushing thread and dropped on a worker. Left to the allocator,
//! each such free is a cross-thread free: the worker updates the allocation page's shared free
//! list and the pusher's next allocation from that page misses on the same cache line, once per
//! allocation. A [`Recycler`] instead lets the thread that frees an item keep it, and hand items
//! over in batches of [`BATCH`] through a small shared stack of batches: one lock round trip per
//! batch instead of a contended line per item. A thread takes what it freed itself first, then
//! its spare batch, then a batch from the shared stack.
//!
//! Memory stays bounded: at most [`MAX_SHARED_BATCHES`] batches wait in the shared stack, one
//! partial and one spare batch per thread; anything beyond that goes back to the allocator, and a
//! thread's batches are freed when it exits. The bound covers the ops of a burst of a few thousand
//! pushes (RandSumExpr queues ~8500): with a stack of 32 batches instead, most of such a burst's
//! ops came from the allocator again on every repeat.

use parking_lot::Mutex;
use std::cell::RefCell;
use std::thread::LocalKey;

/// Items handed between threads at a time.
pub(crate) const BATCH: usize = 32;

/// Most batches waiting in the shared stack: 8192 items, at most 1 MiB each for op memory
/// (128-byte blocks) and for variable lists (16 variables).
pub(crate) const MAX_SHARED_BATCHES: usize = 256;

/// One thread's items: those it freed last, not yet handed over, and a batch taken from the
/// shared stack for its next takes.
pub(crate) struct Local<T> {
    freed: Vec<T>,
    spare: Vec<T>,
}

impl<T> Local<T> {
    pub(crate) const fn new() -> Self {
        Local {
            freed: Vec::new(),
            spare: Vec::new(),
        }
    }
}

/// A pool of items of one kind; its per-thread part is declared with `thread_local!` and passed
/// to [`Recycler::new`].
pub(crate) struct Recycler<T: 'static> {
    local: &'static LocalKey<RefCell<Local<T>>>,
    shared: Mutex<Vec<Vec<T>>>,
}

impl<T: 'static> Recycler<T> {
    pub(crate) const fn new(local: &'static LocalKey<RefCell<Local<T>>>) -> Self {
        Recycler {
            local,
            shared: Mutex::new(Vec::new()),
        }
    }

    /// An item freed earlier (by this thread if it freed any), or `None`.
    pub(crate) fn take(&self) -> Option<T> {
        self.local
            .try_with(|l| {
                let mut l = l.borrow_mut();
                if let Some(item) = l.freed.pop() {
                    return Some(item);
                }
                if l.spare.is_empty() {
                    l.spare = self.shared.lock().pop()?;
                }
                l.spare.pop()
            })
            .ok()
            .flatten()
    }

    /// Keeps `item` for a later [`take`](Self::take); on a thread being torn down, or when the
    /// shared stack is full, it goes back to the allocator instead.
    pub(crate) fn keep(&self, item: T) {
        let full = self.local.try_with(|l| {
            let mut l = l.borrow_mut();
            l.freed.push(item);
            (l.freed.len() >= BATCH)
                .then(|| std::mem::replace(&mut l.freed, Vec::with_capacity(BATCH)))
        });
        if let Ok(Some(batch)) = full {
            let overflow = {
                let mut shared = self.shared.lock();
                if shared.len() < MAX_SHARED_BATCHES {
                    shared.push(batch);
                    None
                } else {
                    Some(batch)
                }
            };
            drop(overflow); // back to the allocator, outside the lock
        }
    }

    #[cfg(test)]
    pub(crate) fn shared_batches(&self) -> usize {
        self.shared.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static LOCAL: RefCell<Local<Box<u32>>> = const { RefCell::new(Local::new()) };
    }
    static POOL: Recycler<Box<u32>> = Recycler::new(&LOCAL);

    #[test]
    fn a_thread_takes_back_what_it_freed_others_get_full_batches_and_the_stack_is_capped() {
        std::thread::spawn(|| {
            let item = Box::new(7);
            let addr: *const u32 = &*item;
            POOL.keep(item);
            let again = POOL.take().expect("the item just freed");
            assert_eq!(&*again as *const u32, addr);
            // a full batch goes to the shared stack, where another thread finds it
            for i in 0..BATCH as u32 {
                POOL.keep(Box::new(i));
            }
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            assert!(POOL.take().is_some(), "a batch another thread freed");
            // many more than the shared stack holds: the surplus goes back to the allocator
            for i in 0..(BATCH * (MAX_SHARED_BATCHES + 4)) as u32 {
                POOL.keep(Box::new(i));
            }
            assert!(POOL.shared_batches() <= MAX_SHARED_BATCHES);
        })
        .join()
        .unwrap();
    }
}
