//! Autograd's mode switches in MXNet 1.9.1's C API (per thread, as in MXNet). Recording is not
//! built yet: `MXAutogradSetIsRecording(1, ..)` is -1 saying so.

use super::args;
use super::error::api_call;
use crate::autograd;
use std::ffi::c_int;

/// Sets this thread's training mode (`is_training` != 0) and writes the previous one to `*prev`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradSetIsTraining(is_training: c_int, prev: *mut c_int) -> c_int {
    api_call("MXAutogradSetIsTraining", || {
        // SAFETY: API contract: out-parameter.
        let prev = unsafe { args::out(prev, "prev")? };
        *prev = c_int::from(autograd::set_training(is_training != 0));
        Ok(())
    })
}

/// Whether this thread runs operators in training mode.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradIsTraining(curr: *mut bool) -> c_int {
    api_call("MXAutogradIsTraining", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(curr, "curr")? } = autograd::is_training();
        Ok(())
    })
}

/// Turns recording off (`is_recording` == 0), writing the previous state to `*prev`; turning it
/// on is -1: the tape and backward are not built yet.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradSetIsRecording(is_recording: c_int, prev: *mut c_int) -> c_int {
    api_call("MXAutogradSetIsRecording", || {
        // SAFETY: API contract: out-parameter.
        let prev = unsafe { args::out(prev, "prev")? };
        *prev = c_int::from(autograd::set_recording(is_recording != 0)?);
        Ok(())
    })
}

/// Whether this thread records operators (never, until recording is built).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAutogradIsRecording(curr: *mut bool) -> c_int {
    api_call("MXAutogradIsRecording", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(curr, "curr")? } = autograd::is_recording();
        Ok(())
    })
}
