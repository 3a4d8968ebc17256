//! GPUs through the CUDA driver API (cudarc, loaded at run time).
//!
//! * `driver` finds the driver and its devices once per process: without a `libcuda.so` (every
//!   machine without an NVIDIA driver) the process has 0 GPUs and nothing else changes. Device
//!   contexts are made on first use of a device.
//! * `memory` is the raw device memory (`cuMemAlloc`) and page-locked host memory
//!   (`cuMemHostAlloc`) behind the storage managers of gpu and cpu_pinned.
//! * `stream` gives every thread that runs GPU work its own stream per device, with the device's
//!   context bound; work finishes where the caller says ([`Finish`]): on return, or later from
//!   the device's completion thread (`completion`), which lets engine workers move on.
//! * `copy` moves bytes between host memory and devices, and between devices.
//! * `kernels` launches mxrt's own device kernels (`kernels/kernels.cu`, shipped as PTX).
//!
//! Nothing here orders work: the engine does (every use of device memory is an engine op on the
//! array's variable), which is why cudarc's own event tracking is off.

mod completion;
mod copy;
mod driver;
mod kernels;
mod memory;
mod stream;

pub use completion::Done;
pub use copy::{Endpoint, copy, copy_finish, fill_bytes};
pub use driver::{context, device_count, driver_problem, memory_info};
pub use kernels::{BinaryOp, Rounding, binary, can_sum, fill, sum};
pub use memory::{device_memory, pinned_memory};
pub use stream::{Finish, bind_thread};
