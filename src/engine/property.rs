//! `FnProperty`: how the engine schedules an operation. Values are MXNet's (part of the C ABI,
//! where they are `int`s; stored in a byte here to keep ops small).

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FnProperty {
    /// The device's normal FIFO queue.
    Normal = 0,
    /// A copy from a GPU: the per-GPU copy pool (on a CPU context, like `Normal`).
    CopyFromGpu = 1,
    /// A copy to a GPU: the per-GPU copy pool (on a CPU context, like `Normal`).
    CopyToGpu = 2,
    /// The shared CPU priority pool, a priority queue (higher `priority` first).
    CpuPrioritized = 3,
    /// Run inline on the pushing thread when all dependencies are ready at push time.
    Async = 4,
    /// Deletes a variable: inline on the pusher when ready, else at the front of its queue; runs
    /// even after shutdown.
    DeleteVar = 5,
    /// The per-GPU priority pool.
    GpuPrioritized = 6,
    /// Runs even when an input carries an error (its outputs still inherit the error).
    NoSkip = 7,
}

impl FnProperty {
    pub fn from_code(code: i32) -> Result<Self> {
        Ok(match code {
            0 => FnProperty::Normal,
            1 => FnProperty::CopyFromGpu,
            2 => FnProperty::CopyToGpu,
            3 => FnProperty::CpuPrioritized,
            4 => FnProperty::Async,
            5 => FnProperty::DeleteVar,
            6 => FnProperty::GpuPrioritized,
            7 => FnProperty::NoSkip,
            _ => {
                return Err(Error::invalid(format!(
                    "unknown FnProperty {code} (valid: 0 kNormal .. 7 kNoSkip)"
                )));
            }
        })
    }
}
