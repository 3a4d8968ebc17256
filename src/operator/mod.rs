//! Operators: what MXNet calls `nnvm::Op`s, run imperatively on NDArrays.
//!
//! - [`kernel`]: dense CPU kernels over contiguous row-major buffers (plain Rust: no engine, no
//!   NDArray, no C).

pub mod kernel;
