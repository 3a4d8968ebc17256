//! Points in the engine where a unit test can stop a thread (test builds only), and the tests
//! that use them: a thread outside the engine's pools that completes an op must not be inside the
//! engine once a dropping engine may free it.

use std::cell::RefCell;

/// Where [`reached`] is called.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Point {
    /// `PendingOps::dropped` counted a drop and is about to touch the count's waiters.
    AfterDropCounted,
    /// A completion dispatched an op it made ready and is still inside the engine.
    AfterDispatch,
}

type Hook = Box<dyn Fn(Point)>;

thread_local! {
    static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

/// Calls the calling thread's hook, if it set one.
pub(crate) fn reached(point: Point) {
    let _ = HOOK.try_with(|h| {
        if let Some(hook) = &*h.borrow() {
            hook(point);
        }
    });
}

/// Sets the calling thread's hook.
fn set(hook: impl Fn(Point) + 'static) {
    HOOK.with(|h| *h.borrow_mut() = Some(Box::new(hook)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::engine::{Completion, Engine, EngineConfig, EngineKind, PushArgs};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// How long a paused thread waits for the engine's drop to return (it must not).
    const PATIENCE: Duration = Duration::from_millis(200);

    /// Pushes `n` async ops (on `n` variables) whose completions go to a thread outside the
    /// engine's pools, and with `then_sync`, a sync op after each on its variable. That thread
    /// completes them once every worker has let go of them, while this one drops the engine, and
    /// stops at the `pause_at`-th time it reaches `point`, until the drop returns or `PATIENCE`
    /// passes. Panics if the drop returned while the thread was stopped there: the thread would
    /// then touch the freed engine. Returns whether the thread stopped at all.
    fn drop_while_a_foreign_thread_completes(
        n: usize,
        then_sync: bool,
        point: Point,
        pause_at: usize,
    ) -> bool {
        let engine = Engine::new(EngineConfig::with_workers(EngineKind::PerDevice, 1));
        let (tx, rx) = std::sync::mpsc::channel::<Completion>();
        let dropped = Arc::new(AtomicBool::new(false));
        let received = Arc::new(AtomicUsize::new(0));
        let paused = Arc::new(AtomicBool::new(false));
        let completer = {
            let (dropped, received, paused) = (dropped.clone(), received.clone(), paused.clone());
            std::thread::spawn(move || {
                let hits = std::cell::Cell::new(0);
                set(move |p| {
                    if p != point {
                        return;
                    }
                    hits.set(hits.get() + 1);
                    if hits.get() != pause_at {
                        return;
                    }
                    paused.store(true, Ordering::SeqCst);
                    let start = Instant::now();
                    while start.elapsed() < PATIENCE {
                        // panicking here keeps this thread from touching the freed engine
                        assert!(
                            !dropped.load(Ordering::SeqCst),
                            "the engine was dropped while a thread completing its op was still \
                             inside it ({p:?})"
                        );
                        std::thread::sleep(Duration::from_millis(1));
                    }
                });
                let dones: Vec<Completion> = (0..n)
                    .map(|_| {
                        let done = rx.recv().unwrap();
                        received.fetch_add(1, Ordering::SeqCst);
                        done
                    })
                    .collect();
                // by now the worker has dropped its reference to each op (it does so as soon as
                // the body returns), so these completions drop the ops
                std::thread::sleep(Duration::from_millis(50));
                for done in dones {
                    done.done();
                }
            })
        };
        let vars: Vec<_> = (0..n).map(|_| engine.new_variable()).collect();
        for v in &vars {
            let tx = tx.clone();
            let args = PushArgs::new(Context::cpu(0)).writes(std::slice::from_ref(v));
            engine
                .push_async_fn(args, move |_, done| tx.send(done).unwrap())
                .unwrap();
            if then_sync {
                engine.push_fn(args, |_| Ok(())).unwrap();
            }
        }
        while received.load(Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
        drop(engine);
        dropped.store(true, Ordering::SeqCst);
        if let Err(e) = completer.join() {
            std::panic::resume_unwind(e);
        }
        paused.load(Ordering::SeqCst)
    }

    #[test]
    #[cfg_attr(miri, ignore)] // waits with real time; the pool's threads make it very slow
    fn the_last_drop_from_a_foreign_thread_is_over_before_a_spinning_engine_drop_returns() {
        // one op: the drop spins on the count, then sleeps; either way it must not return while
        // the completing thread is still inside the count
        drop_while_a_foreign_thread_completes(1, false, Point::AfterDropCounted, 1);
    }

    #[test]
    #[cfg_attr(miri, ignore)] // as above
    fn the_last_drop_from_a_foreign_thread_is_over_before_a_sleeping_engine_drop_returns() {
        // more ops than the drop spins for: it sleeps, and every drop then wakes it
        assert!(
            drop_while_a_foreign_thread_completes(100, false, Point::AfterDropCounted, 100),
            "the last drop stopped after counting itself"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore)] // as above
    fn a_completion_on_a_foreign_thread_keeps_the_engine_while_it_dispatches() {
        // the sync op the completion makes ready runs on the worker and finishes at once: the
        // completing thread, still in `dispatch`, must keep the engine alive
        assert!(
            drop_while_a_foreign_thread_completes(1, true, Point::AfterDispatch, 1),
            "the completion dispatched the sync op"
        );
    }
}
