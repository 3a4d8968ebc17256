//! Operators: what MXNet calls `nnvm::Op`s, run imperatively on NDArrays.
//!
//! - [`registry`]: the table of MXNet's operators and their arguments (data).
//! - [`table`]: the operators mxrt implements, by name; [`ops`]: their definitions by family.
//! - [`op`]: what an operator is (planning: parameters, shape and dtype inference; a kernel).
//! - [`imperative`]: running one on NDArrays as an engine op.
//! - [`custom`]: the `Custom` operator, whose callbacks a front end (Python) registers.
//! - [`param`]: operator parameters in the string syntax front ends send.
//! - [`tensor`]: the arrays as a kernel sees them; [`kernel`]: dense CPU kernels (plain Rust: no
//!   engine, no NDArray, no C); they split big loops over [`crate::parallel`]'s thread pool.

pub mod custom;
pub(crate) mod device;
pub mod def;
pub mod imperative;
pub mod mode;
pub mod kernel;
pub mod op;
pub mod ops;
pub mod param;
pub mod registry;
pub mod stype;
pub mod table;
pub mod tensor;
#[cfg(test)]
mod tests;
