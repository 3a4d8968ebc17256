//! mxrt: Apache MXNet 1.9.1's runtime core in Rust, behind MXNet's C ABI.
//!
//! Core modules (plain Rust, no C types): [`engine`] (the dependency engine), [`storage`]
//! (memory managers per device), [`ndarray`], `kvstore`, `profiler`. The [`capi`] module is the
//! thin C layer: it validates arguments, converts handles and calls the core; every export goes
//! through one guard (`capi::error`).

pub mod autograd;
pub mod clock;
pub mod context;
pub mod dtype;
pub mod error;
pub mod parallel;

pub mod dist;
pub mod engine;
pub mod gpu;
pub mod kvstore;
pub mod ndarray;
pub mod operator;
pub mod profiler;
pub mod resource;
pub mod storage;

pub mod capi;

mod allocator;
mod util;

pub use context::{Context, DeviceType};
pub use dtype::DType;
pub use error::{Error, ErrorKind, Result};
