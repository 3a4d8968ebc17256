//! The C ABI: MXNet 1.9.1's exported functions plus mxrt's additions.
//!
//! This layer only validates arguments, converts handles and calls the core modules. One file per
//! group of the C API; `error` holds the guard every export goes through.

pub(crate) mod args;
pub mod completion;
pub mod engine;
pub mod error;
pub mod global;
pub(crate) mod handle;
pub mod ndarray;
pub mod profiler;
pub mod resource;
pub mod types;
