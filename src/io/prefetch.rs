//! MXNet's `PrefetcherIter`: a background thread runs the loader and keeps up to
//! `prefetch_buffer` batches ready, so parsing and copying overlap with the consumer's work.
//!
//! Memory stays bounded: the thread stops when that many batches wait (plus the one it is
//! building) and starts again when half of them are taken, and every batch is a fresh set of
//! arrays from the storage pool, so an array the consumer keeps is never overwritten (MXNet
//! recycles its buffers after `prefetch_buffer` batches). `before_first` discards the waiting batches, has the thread reset the loader and
//! waits for it, so its errors reach the caller. A loader error reaches the consumer's next
//! `next`, after the batches made before it. Dropping the prefetcher stops the thread and
//! joins it.

use super::batch::{Batch, Loader};
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

struct State {
    queue: VecDeque<Result<Batch>>,
    /// The loader reached the end of the epoch (after the queued batches).
    ended: bool,
    /// A reset the thread has not done yet: `Some(keep_wrap)`.
    reset: Option<bool>,
    /// Resets asked for and done, so the consumer waits for its own.
    resets_asked: u64,
    resets_done: u64,
    reset_error: Option<Error>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the thread: room in the queue, a reset, stop.
    producer: Condvar,
    /// Wakes the consumer: a batch, the end, a reset done.
    consumer: Condvar,
    capacity: usize,
}

impl Shared {
    /// Once the queue is full the thread sleeps until it is down to this many batches, then
    /// fills it again: one wake-up per half queue instead of one per batch.
    fn low_mark(&self) -> usize {
        self.capacity / 2
    }
}

/// The consumer's side of the prefetching thread.
pub struct Prefetcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The consumer took this epoch's wrapped batch.
    saw_wrap: bool,
}

impl Prefetcher {
    /// Starts the thread; it begins the first epoch at once.
    pub fn start(loader: Box<dyn Loader>, capacity: usize, name: &str) -> Result<Prefetcher> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                ended: false,
                reset: None,
                resets_asked: 0,
                resets_done: 0,
                reset_error: None,
                stop: false,
            }),
            producer: Condvar::new(),
            consumer: Condvar::new(),
            capacity: capacity.max(1),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("mxrt-{name}"))
            .spawn(move || produce(&s, loader))
            .map_err(|e| Error::internal(format!("cannot start the prefetch thread: {e}")))?;
        Ok(Prefetcher {
            shared,
            thread: Some(thread),
            saw_wrap: false,
        })
    }

    /// The next batch, waiting for the thread if none is ready; `None` at the end of the epoch.
    pub fn next_batch(&mut self) -> Result<Option<Batch>> {
        let mut st = self.shared.state.lock();
        loop {
            if let Some(item) = st.queue.pop_front() {
                if st.queue.len() <= self.shared.low_mark() {
                    self.shared.producer.notify_one();
                }
                let b = item?;
                self.saw_wrap |= b.wrapped;
                return Ok(Some(b));
            }
            if st.ended {
                return Ok(None);
            }
            self.shared.consumer.wait(&mut st);
        }
    }

    /// Starts the next epoch (MXNet's `BeforeFirst`).
    pub fn before_first(&mut self) -> Result<()> {
        let mut st = self.shared.state.lock();
        st.queue.clear();
        st.reset = Some(std::mem::take(&mut self.saw_wrap));
        st.resets_asked += 1;
        let mine = st.resets_asked;
        self.shared.producer.notify_one();
        while st.resets_done < mine {
            self.shared.consumer.wait(&mut st);
        }
        match st.reset_error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Prefetcher {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.producer.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn produce(shared: &Shared, mut loader: Box<dyn Loader>) {
    let mut st = shared.state.lock();
    // the queue was full and has not come down to the low mark yet
    let mut draining = false;
    loop {
        if st.stop {
            return;
        }
        if let Some(keep_wrap) = st.reset.take() {
            st.queue.clear();
            drop(st);
            let r = loader.before_first(keep_wrap);
            st = shared.state.lock();
            st.ended = false;
            st.reset_error = r.err();
            st.resets_done += 1;
            draining = false;
            shared.consumer.notify_all();
            continue;
        }
        draining = (draining && st.queue.len() > shared.low_mark())
            || st.queue.len() >= shared.capacity;
        if st.ended || draining {
            shared.producer.wait(&mut st);
            continue;
        }
        drop(st);
        let item = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loader.next_batch()))
            .unwrap_or_else(|_| Err(Error::internal("the data loader panicked")));
        st = shared.state.lock();
        if st.reset.is_some() || st.stop {
            continue; // made for an epoch the consumer left
        }
        match item {
            Ok(Some(b)) => st.queue.push_back(Ok(b)),
            Ok(None) => st.ended = true,
            Err(e) => {
                st.queue.push_back(Err(e));
                st.ended = true;
            }
        }
        shared.consumer.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::BatchLoader;
    use super::super::batch::tests::Counting;
    use super::*;

    fn first_labels(p: &mut Prefetcher) -> Vec<f32> {
        let mut out = Vec::new();
        while let Some(b) = p.next_batch().unwrap() {
            let bytes = b.label.to_bytes().unwrap();
            out.push(f32::from_le_bytes(bytes[..4].try_into().unwrap()) / 10.0);
        }
        out
    }

    #[test]
    fn epochs_through_the_thread_match_the_loader() {
        for cap in [1, 4] {
            let l = BatchLoader::new(Counting { n: 10, at: 0 }, 4, true).unwrap();
            let mut p = Prefetcher::start(Box::new(l), cap, "test").unwrap();
            assert_eq!(first_labels(&mut p), vec![0., 4., 8.]);
            assert!(p.next_batch().unwrap().is_none());
            p.before_first().unwrap();
            assert_eq!(first_labels(&mut p), vec![2., 6.]);
            p.before_first().unwrap();
            // a reset mid-epoch starts over, whatever the thread had read ahead
            assert_eq!(p.next_batch().unwrap().unwrap().index, vec![0, 1, 2, 3]);
            std::thread::sleep(std::time::Duration::from_millis(5));
            p.before_first().unwrap();
            assert_eq!(first_labels(&mut p), vec![0., 4., 8.]);
        }
    }

    #[test]
    fn loader_errors_arrive_in_order_and_dropping_stops_the_thread() {
        let l = BatchLoader::new(Counting { n: 3, at: 0 }, 8, true).unwrap();
        let mut p = Prefetcher::start(Box::new(l), 2, "test").unwrap();
        let e = p.next_batch().unwrap_err();
        assert!(e.message().contains("bigger than batch size"), "{e}");
        assert!(p.next_batch().unwrap().is_none());
        // dropped mid-epoch with the queue full
        let l = BatchLoader::new(Counting { n: 1000, at: 0 }, 2, true).unwrap();
        let mut p = Prefetcher::start(Box::new(l), 2, "test").unwrap();
        p.next_batch().unwrap();
        drop(p);
    }
}
