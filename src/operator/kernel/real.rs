//! [`Real`]: the float types kernels compute in (`f32`, and `f64` for float64 arrays), with the
//! math `num_traits::Float` lacks. Half-precision arrays compute in `f32`, integer arrays in `f64`.

use super::element::Element;
use num_traits::Float;

pub trait Real: Float + Element + Send + Sync {
    const ZERO: Self;
    const ONE: Self;
    fn erf(self) -> Self;
    /// The inverse of `erf` on [-1, 1] (±inf at ±1, NaN outside).
    fn erfinv(self) -> Self;
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
    fn erfinv(self) -> f32 {
        erfinv(self as f64) as f32
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
    fn erfinv(self) -> f64 {
        erfinv(self)
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

/// Inverse error function: M. Giles' single-precision approximation ("Approximating the erfinv
/// function", GPU Computing Gems, 2011) refined by two Newton steps on `erf` in double precision.
fn erfinv(y: f64) -> f64 {
    if y.is_nan() || !(-1.0..=1.0).contains(&y) {
        return f64::NAN;
    }
    if y == 1.0 {
        return f64::INFINITY;
    }
    if y == -1.0 {
        return f64::NEG_INFINITY;
    }
    if y == 0.0 {
        return y;
    }
    let mut w = -((1.0 - y) * (1.0 + y)).ln();
    let p = if w < 5.0 {
        w -= 2.5;
        [
            2.810_226_36e-08,
            3.432_739_39e-07,
            -3.523_387_7e-06,
            -4.391_506_54e-06,
            0.000_218_580_87,
            -0.001_253_725_03,
            -0.004_177_681_64,
            0.246_640_727,
            1.501_409_41,
        ]
        .iter()
        .fold(0.0, |p, c| c + p * w)
    } else {
        w = w.sqrt() - 3.0;
        [
            -0.000_200_214_257,
            0.000_100_950_558,
            0.001_349_343_22,
            -0.003_673_428_44,
            0.005_739_507_73,
            -0.007_622_461_3,
            0.009_438_870_47,
            1.001_674_06,
            2.832_976_82,
        ]
        .iter()
        .fold(0.0, |p, c| c + p * w)
    };
    let mut x = p * y;
    // Newton on erf(x) = y: erf'(x) = 2/sqrt(pi) exp(-x^2)
    for _ in 0..2 {
        let d = 2.0 / std::f64::consts::PI.sqrt() * (-x * x).exp();
        if d == 0.0 {
            break;
        }
        x -= (libm::erf(x) - y) / d;
    }
    x
}

#[cfg(test)]
mod tests {
    #[test]
    fn erfinv_inverts_erf() {
        for &x in &[-3.5f64, -2.0, -0.7, -1e-6, 1e-6, 0.3, 1.0, 2.5, 4.0] {
            let y = libm::erf(x);
            assert!((super::erfinv(y) - x).abs() <= 1e-9 * x.abs().max(1.0), "{x}");
        }
        assert_eq!(super::erfinv(1.0), f64::INFINITY);
        assert_eq!(super::erfinv(-1.0), f64::NEG_INFINITY);
        assert!(super::erfinv(1.5).is_nan());
        assert_eq!(super::erfinv(0.0), 0.0);
    }
}
