//! The C ABI: MXNet 1.9.1's exported functions plus mxrt's additions.
//!
//! This layer only validates arguments, converts handles and calls the core modules. One file per
//! group of the C API; `error` holds the guard every export goes through, `handle` the registry
//! of live handles, `args` the checked pointer conversions, `types` MXNet's C typedefs, `constants` the enum values C callers
//! use.
//!
//! Every export is an `unsafe extern "C" fn` whose pointer contract is MXNet's and is stated in
//! its doc comment (which also goes into `include/mxrt.h`); arguments are checked before use.
#![allow(clippy::missing_safety_doc)]

pub(crate) mod args;
pub mod autograd;
pub mod cached_op;
pub mod completion;
pub mod constants;
pub mod custom_op;
pub mod data_iter;
pub mod dlpack;
pub mod engine;
pub mod engine_push;
pub mod executor;
pub mod error;
pub mod global;
pub(crate) mod handle;
pub mod imperative;
pub mod kvstore;
pub mod ndarray;
pub mod ndarray_io;
pub mod ndarray_shared;
pub mod ndarray_sparse;
pub mod operator;
pub mod predict;
pub mod profiler;
pub mod recordio;
pub mod resource;
pub mod storage;
pub mod symbol;
pub mod types;
