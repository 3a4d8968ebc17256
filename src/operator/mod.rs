//! Operators: what MXNet calls `nnvm::Op`s, run imperatively on NDArrays.
//!
//! - [`registry`]: the table of MXNet's operators and their arguments.
//! - [`param`]: operator parameters in the string syntax front ends send.
//! - [`kernel`]: dense CPU kernels over contiguous row-major buffers (plain Rust: no engine, no
//!   NDArray, no C).

pub mod kernel;
pub mod param;
pub mod registry;
