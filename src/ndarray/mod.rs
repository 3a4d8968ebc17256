//! NDArray: dense n-dimensional arrays on a device, ordered by the engine.
//!
//! `array` (the array and its views, copies, save/load), `chunk` (memory + engine variable),
//! `shape` (element counts, reshape rules), `format` (MXNet's binary file format),
//! `np_shape` (MXNet's numpy-shape switch).

mod array;
mod chunk;
pub mod sparse;
mod sparse_array;
pub(crate) mod gpu_op;
pub mod format;
pub mod np_shape;
pub mod shape;
#[cfg(test)]
mod tests;

pub use array::{AutogradSlot, NDArray, load_list, save_list, save_record};
pub use shape::Shape;
