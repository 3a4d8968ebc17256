//! Storage: device memory for NDArrays, one manager per device (MXNet's `src/storage`).
//!
//! * [`Storage`] maps a [`Context`](crate::Context) to its manager, created on first use:
//!   cpu (all ids share one manager, as MXNet's `real_dev_id()` is 0), cpu_pinned per id
//!   (ordinary host memory while there is no CUDA backend), cpu_shared (POSIX shared memory,
//!   [`shared`]) and gpu per id (needs a registered [`DeviceMemory`] backend; without one it is a
//!   clear `NotSupported` error).
//! * Host and gpu managers are [`PooledManager`]s whose rounding [`Strategy`] and reserve come
//!   from `MXNET_CPU_*` / `MXNET_GPU_*` variables ([`config`]); see [`pool`] for the hit path,
//!   the out-of-memory retry and the trim policy that bounds cached bytes by 2x the peak in use.
//! * [`Allocation`] owns a block and frees it back on drop; [`PoolStats`] are per manager;
//!   a [`MemoryHook`] receives every allocation and free (the profiler's slot).

pub mod backend;
pub mod config;
pub mod facade;
pub mod manager;
pub mod pool;
pub mod shared;
pub mod stats;
pub mod strategy;

#[cfg(test)]
mod tests;

pub use backend::{DeviceMemory, HOST_ALIGNMENT, HostMemory, MemoryInfo};
pub use config::{EnvPrefix, PoolConfig};
pub use facade::{
    Allocation, BackendFactory, GpuBackendFactory, NO_GPU_MESSAGE, NOT_ALLOCATED_MESSAGE, Storage,
};
pub use manager::StorageManager;
pub use pool::PooledManager;
pub use shared::{SHM_HEADER_SIZE, SharedMemoryManager, segment_name};
pub use stats::{MemoryEvent, MemoryEventKind, MemoryHook, PoolStats};
pub use strategy::Strategy;
