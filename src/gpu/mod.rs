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

use crate::storage::Storage;
use std::sync::{Arc, Once};

/// The process-wide [`Storage`] with this module's memory backends registered: gpu managers use
/// device memory (`cuMemAlloc`) and cpu_pinned page-locked memory when the machine has a GPU.
///
/// Storage sits below this module and does not know it, so this is the way in to the process's
/// storage for everything above both: NDArray creation, the resource manager, the C API and
/// this module's own scratch memory. The registration runs once, before the storage is first
/// handed out; later calls cost one atomic load.
pub fn storage() -> &'static Storage {
    static REGISTERED: Once = Once::new();
    let storage = Storage::global();
    REGISTERED.call_once(|| {
        storage.set_gpu_backend(Some(Arc::new(device_memory)));
        storage.set_pinned_backend(Some(Arc::new(pinned_memory)));
    });
    storage
}
pub use stream::{Finish, bind_thread};
