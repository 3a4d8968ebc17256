//! Dense CPU kernels over contiguous row-major buffers.
//!
//! A kernel takes typed slices (or raw pointers, where an output may alias an input) and shapes
//! and writes its output; it knows nothing of the engine, NDArrays or the C API, so it is tested
//! against a serial reference on plain vectors.
//!
//! - [`element`]: the element types and dtype dispatch; [`real`]: the float types math runs in.
//! - [`map`]: elementwise maps; [`strided`]: broadcasting, gathers and reductions by strides.
//! - [`bn`]: BatchNorm's float32 passes over a channel.
//! - [`gemm`]: matrix products ([`sgemm`]: the AVX-512 f32 product behind them); [`conv`]: convolutions on it (im2col); [`pool`]: pooling;
//!   [`rnn`]: the fused recurrent layers; [`attention`]: batched strided products for
//!   multi-head attention.
//! - [`vmath`]: vectorised float32 `exp`, `log`, `tanh`, `sigmoid`, ... (AVX-512, AVX2).

pub mod attention;
pub mod bn;
pub mod conv;
pub mod depthwise;
pub mod direct;
pub mod element;
pub mod gemm;
pub mod map;
pub mod pool;
pub mod real;
pub mod rnn;
pub mod rnn_step;
pub mod sgemm;
pub mod strided;
pub mod vmath;
pub mod winograd;

pub use element::{Bool, Element};
pub use real::Real;
