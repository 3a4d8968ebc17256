//! The per-thread modes operators read when they are invoked, as MXNet keeps them per thread.
//!
//! - *Training* (`MXAutogradSetIsTraining`, `mx.autograd.train_mode()`): `Dropout` drops,
//!   `BatchNorm` normalises with the batch's statistics.
//! - *Recording* (`mx.autograd.record()`): the autograd layer above records the ops invoked while
//!   it is on. The flag lives here, below autograd, so that the operator layer never depends on
//!   autograd: autograd reads and sets it, operators only see training mode.

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

/// Whether this thread records the operators it invokes.
pub fn is_recording() -> bool {
    RECORDING.with(Cell::get)
}

/// Sets this thread's recording mode; returns the previous one.
pub fn set_recording(on: bool) -> bool {
    RECORDING.with(|r| r.replace(on))
}

/// Restores both modes when dropped (backward runs with its own modes and restores the caller's,
/// also when it fails).
pub struct ModeGuard {
    training: bool,
    recording: bool,
}

impl ModeGuard {
    /// Sets the modes and remembers the previous ones.
    pub fn set(training: bool, recording: bool) -> ModeGuard {
        ModeGuard {
            training: set_training(training),
            recording: set_recording(recording),
        }
    }
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        set_training(self.training);
        set_recording(self.recording);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_per_thread_and_guards_restore_them() {
        assert!(!set_training(true));
        assert!(is_training());
        std::thread::spawn(|| assert!(!is_training() && !is_recording()))
            .join()
            .unwrap();
        {
            let _g = ModeGuard::set(false, true);
            assert!(!is_training());
            assert!(is_recording());
        }
        assert!(is_training());
        assert!(!is_recording());
        assert!(set_training(false));
    }
}
