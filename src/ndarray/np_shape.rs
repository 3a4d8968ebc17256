//! MXNet's numpy-shape switch (`MXSetIsNumpyShape` / `MXIsNumpyShape`): a process-wide flag and a
//! per-thread flag. It decides how shapes are reported and which record version is saved/loaded.

use super::format::NpShape;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

static GLOBAL_ON: AtomicBool = AtomicBool::new(false);

thread_local! {
    static THREAD_ON: Cell<bool> = const { Cell::new(false) };
}

/// The state seen by the calling thread: global on wins over thread-local on.
pub fn current() -> NpShape {
    if GLOBAL_ON.load(Ordering::Relaxed) {
        NpShape::GlobalOn
    } else if THREAD_ON.with(Cell::get) {
        NpShape::ThreadLocalOn
    } else {
        NpShape::Off
    }
}

/// Sets the state as MXNet does and returns whether it was on before: `Off` clears both flags,
/// `ThreadLocalOn` sets the calling thread's flag, `GlobalOn` the process flag.
pub fn set(state: NpShape) -> bool {
    let was_on = current().is_on();
    match state {
        NpShape::Off => {
            GLOBAL_ON.store(false, Ordering::Relaxed);
            THREAD_ON.with(|c| c.set(false));
        }
        NpShape::ThreadLocalOn => THREAD_ON.with(|c| c.set(true)),
        NpShape::GlobalOn => GLOBAL_ON.store(true, Ordering::Relaxed),
    }
    was_on
}
