//! Dense CPU kernels over contiguous row-major buffers.
//!
//! A kernel takes typed slices and shapes and writes its output slice; it knows nothing of the
//! engine, NDArrays or the C API, so it is tested against a serial reference on plain vectors.

pub mod element;

pub use element::{Bool, Element};
