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

/// `$vis fn $name(args) -> ret`: `$body(args)` compiled for AVX-512, for AVX2 + FMA and for the
/// baseline, the widest the CPU has called at run time (`$body` is `#[inline(always)]`, so each
/// copy vectorises for its unit). `std`'s feature detection caches its answer, so the choice is
/// an atomic load per call. The function may take type parameters (`name<R: Real>(...)`), each
/// copy instantiated per type.
macro_rules! multiversion {
    ($(#[$attr:meta])* $vis:vis $name:ident $(<$($gen:ident: $bound:path),+>)? ($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? => $body:ident) => {
        $(#[$attr])*
        $vis fn $name $(<$($gen: $bound),+>)? ($($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                fn avx512 $(<$($gen: $bound),+>)? ($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn avx2 $(<$($gen: $bound),+>)? ($($arg: $ty),*) $(-> $ret)? {
                    $body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                {
                    // SAFETY: the CPU has AVX2 and FMA (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

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
