//! [`Real`]: the float types kernels compute in (`f32`, and `f64` for float64 arrays), with the
//! math `num_traits::Float` lacks. Half-precision arrays compute in `f32`, integer arrays in `f64`.

use super::element::Element;
use num_traits::Float;

pub trait Real: Float + Element + Send + Sync {
    const ZERO: Self;
    const ONE: Self;
    fn erf(self) -> Self;
    fn tgamma(self) -> Self;
    fn lgamma(self) -> Self;
    fn from_usize(n: usize) -> Self;
}

impl Real for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    #[inline]
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    #[inline]
    fn tgamma(self) -> f32 {
        libm::tgammaf(self)
    }
    #[inline]
    fn lgamma(self) -> f32 {
        libm::lgammaf(self)
    }
    #[inline]
    fn from_usize(n: usize) -> f32 {
        n as f32
    }
}

impl Real for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    #[inline]
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    #[inline]
    fn tgamma(self) -> f64 {
        libm::tgamma(self)
    }
    #[inline]
    fn lgamma(self) -> f64 {
        libm::lgamma(self)
    }
    #[inline]
    fn from_usize(n: usize) -> f64 {
        n as f64
    }
}
