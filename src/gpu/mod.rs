//! GPUs through the CUDA driver API (cudarc, loaded at run time).
//!
//! `driver` finds the driver and its devices once per process: without a `libcuda.so` (every
//! machine without an NVIDIA driver) the process has 0 GPUs and nothing else changes. Device
//! contexts are made on first use of a device.

mod driver;

pub use driver::{context, device_count, driver_problem, memory_info};
