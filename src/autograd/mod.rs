//! Autograd: MXNet's imperative gradients.
//!
//! While a thread records (`MXAutogradSetIsRecording`, `mx.autograd.record()`), every operator
//! it invokes on an array that is a marked variable or the output of a recorded op goes on the
//! *tape*: a graph node ([`node::Node`]) holding the op's definition name, parameters, the
//! entries of its inputs and detached copies of its inputs and outputs, and each output array
//! points back at it through its autograd slot. `backward` walks the graph from the heads in
//! reverse topological order and applies each op's gradient definition
//! ([`crate::operator::def::Gradient`]) through [`backward::TapeGraph`], which invokes the
//! gradient operators like any other op (so they run in the engine, asynchronously), recording
//! them again when a higher-order gradient is asked for.
//!
//! Layering: autograd sits above `operator` (it invokes operators and reads their definitions);
//! the per-thread modes live in [`crate::operator::mode`] so operators can read training mode
//! without depending on this module.

pub mod backward;
pub mod node;
pub mod record;
#[cfg(test)]
mod tests;

pub use crate::operator::mode::{is_recording, is_training, set_training};
pub use backward::{BackwardArgs, backward};
pub use node::{CustomBackward, GradReq, grad_of, grad_state, set_grad_state};
pub use record::{invoke, invoke_all, mark_variables, record_custom, record_view};

/// Sets this thread's recording mode; returns the previous one.
pub fn set_recording(on: bool) -> bool {
    crate::operator::mode::set_recording(on)
}
