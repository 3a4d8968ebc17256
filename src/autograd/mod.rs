//! Autograd: for now its two modes, which MXNet keeps per thread.
//!
//! - *Training* (`MXAutogradSetIsTraining`, `mx.autograd.train_mode()`): operators that behave
//!   differently while training read it when they are invoked: `Dropout` drops, `BatchNorm`
//!   normalises with the batch's statistics.
//! - *Recording* (`mx.autograd.record()`): ops invoked while it is on would be recorded for a
//!   backward pass. The tape and backward are not built yet, so turning recording on is an error
//!   that says so rather than a silently missing gradient.

use crate::error::{Error, Result};
use std::cell::Cell;

thread_local! {
    static TRAINING: Cell<bool> = const { Cell::new(false) };
    static RECORDING: Cell<bool> = const { Cell::new(false) };
}

/// Whether operators invoked on this thread run in training mode.
pub fn is_training() -> bool {
    TRAINING.with(Cell::get)
}

/// Sets this thread's training mode; returns the previous one.
pub fn set_training(on: bool) -> bool {
    TRAINING.with(|t| t.replace(on))
}

/// Whether this thread records operators for backward (never, until recording is built).
pub fn is_recording() -> bool {
    RECORDING.with(Cell::get)
}

/// Turns recording off (a no-op) or refuses to turn it on; returns the previous state.
pub fn set_recording(on: bool) -> Result<bool> {
    if on {
        return Err(Error::not_supported(
            "autograd recording (the tape and backward) is not built yet: operators run without \
             recording gradients; train_mode() sets training mode without recording",
        ));
    }
    Ok(RECORDING.with(|r| r.replace(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_per_thread() {
        assert!(!set_training(true));
        assert!(is_training());
        std::thread::spawn(|| assert!(!is_training()))
            .join()
            .unwrap();
        assert!(set_training(false));
        assert!(set_recording(true).is_err());
        assert!(!is_recording());
        assert_eq!(set_recording(false).unwrap(), false);
    }
}
