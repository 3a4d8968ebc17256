//! Autograd: for now its two modes, which MXNet keeps per thread.
//!
//! - *Training* (`MXAutogradSetIsTraining`, `mx.autograd.train_mode()`): operators that behave
//!   differently while training read it when they are invoked: `Dropout` drops, `BatchNorm`
//!   normalises with the batch's statistics.
//! - *Recording* (`mx.autograd.record()`): ops invoked while it is on would be recorded for a
//!   backward pass. The tape and backward are not built yet, so turning recording on is an error
//!   that says so rather than a silently missing gradient.

use crate::error::{Error, Result};
pub use crate::operator::mode::{is_recording, is_training, set_training};

/// Turns recording off (a no-op) or refuses to turn it on; returns the previous state.
pub fn set_recording(on: bool) -> Result<bool> {
    if on {
        return Err(Error::not_supported(
            "autograd recording (the tape and backward) is not built yet: operators run without \
             recording gradients; train_mode() sets training mode without recording",
        ));
    }
    Ok(crate::operator::mode::set_recording(false))
}
