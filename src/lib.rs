//! mxrt: Apache MXNet 1.9.1's runtime core in Rust, behind MXNet's C ABI.
//!
//! Core modules (plain Rust, no C types): [`engine`] (the dependency engine), [`storage`]
//! (memory managers per device), [`ndarray`] (dense and sparse arrays, MXNet's file format),
//! [`operator`] (MXNet's operator table, planning, the imperative runner, CPU kernels),
//! [`autograd`] (above the operators: the per-thread training and recording flags, the tape and
//! backward), [`kvstore`] (the local stores and the trait every store offers), [`dist`] (the
//! distributed store over MPI), [`gpu`] (the CUDA driver, loaded at run time), [`resource`]
//! (random generators and temp space for ops), [`profiler`] and [`io`] (RecordIO files and the
//! data iterators), over the shared [`clock`], [`imgproc`] (JPEG/PNG decoding, OpenCV's resize),
//! [`context`], [`dtype`] and [`error`]. The [`capi`] module is the thin C layer: it validates
//! arguments, converts handles and calls the core; every export goes through one guard
//! (`capi::error`).

pub mod autograd;
pub mod clock;
pub mod context;
pub mod dtype;
pub mod error;
pub mod imgproc;
pub mod parallel;

pub mod dist;
pub mod engine;
pub mod gpu;
pub mod graph;
pub mod io;
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
