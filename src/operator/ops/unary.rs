//! Elementwise unary math: `exp`, `log`, trigonometric, rounding, `relu`, `sigmoid`, ... Each op
//! is a formula written once over [`Real`]; float32 and float16 arrays compute in f32, float64 in
//! f64, integer and bool arrays in f64 and convert back like a C cast (MXNet keeps the dtype).

use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::Result;
use crate::operator::kernel::map::map1;
use crate::operator::kernel::{Element, Real};
use crate::operator::op::{Call, Operator, Plan};
use crate::operator::tensor::Tensor;
use half::f16;

/// An elementwise formula.
pub trait Math: Sync + 'static {
    /// Work per element relative to an add (for the parallel threshold).
    const COST: usize;
    fn f<R: Real>(x: R) -> R;
}

/// A constant in the compute type.
#[inline(always)]
pub fn c<R: Real>(v: f64) -> R {
    R::from(v).unwrap_or_else(R::nan)
}

fn plan<M: Math>(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let dtype = x.dtype;
    Ok(Plan::new(vec![x], move |k| {
        apply::<M>(&k.inputs[0], &k.outputs[0], dtype);
        Ok(())
    })
    .elementwise())
}

/// `y = M(x)` over two tensors of one dtype (`y` may be `x`).
pub fn apply<M: Math>(x: &Tensor, y: &Tensor, dtype: DType) {
    let n = x.len();
    // SAFETY (all arms): both tensors hold `n` elements of `dtype` (planned with one shape and
    // dtype); the runner allows `y` to be exactly `x` for elementwise plans, which `map1` allows.
    match dtype {
        DType::F32 => unsafe { map1(x.ptr::<f32>(), y.ptr::<f32>(), n, M::COST, M::f::<f32>) },
        DType::F64 => unsafe { map1(x.ptr::<f64>(), y.ptr::<f64>(), n, M::COST, M::f::<f64>) },
        DType::F16 => unsafe {
            map1(x.ptr::<f16>(), y.ptr::<f16>(), n, M::COST, |v: f16| {
                f16::from_f32(M::f(v.to_f32()))
            })
        },
        other => via_f64(x, y, other, &|v| M::f::<f64>(v)),
    }
}

/// The other dtypes, through f64 and one shared instance per dtype.
fn via_f64(x: &Tensor, y: &Tensor, dtype: DType, f: &(dyn Fn(f64) -> f64 + Sync)) {
    let n = x.len();
    crate::with_element!(dtype, T => {
        // SAFETY: as in `apply`.
        unsafe { map1(x.ptr::<T>(), y.ptr::<T>(), n, 4, |v: T| T::from_f64(f(v.to_f64()))) }
    })
}

macro_rules! unary_ops {
    ($($ty:ident $name:literal $cost:literal |$x:ident| $e:expr;)*) => {
        $(
            struct $ty;
            impl Math for $ty {
                const COST: usize = $cost;
                #[inline(always)]
                fn f<R: Real>($x: R) -> R { $e }
            }
            impl Operator for $ty {
                fn plan(&self, call: &Call<'_>) -> Result<Plan> { plan::<$ty>(call) }
            }
        )*
        pub(crate) fn register(t: &mut Entries) {
            $( t.push(($name, &$ty)); )*
        }
    };
}

/// MXNet's `rint`: the nearer integer, halves down (`rint(1.5) = 1`, `rint(-1.5) = -2`).
fn rint<R: Real>(x: R) -> R {
    let f = x.floor();
    if x - f <= c(0.5) { f } else { x.ceil() }
}

unary_ops! {
    Copy "_copy" 1 |x| x;
    BlockGrad "BlockGrad" 1 |x| x;
    MakeLoss "make_loss" 1 |x| x;
    Negative "negative" 1 |x| -x;
    Abs "abs" 1 |x| x.abs();
    Sign "sign" 1 |x| if x > R::ZERO { R::ONE } else if x < R::ZERO { -R::ONE } else { x };
    Round "round" 1 |x| x.round();
    Rint "rint" 1 |x| rint(x);
    Ceil "ceil" 1 |x| x.ceil();
    Floor "floor" 1 |x| x.floor();
    Trunc "trunc" 1 |x| x.trunc();
    Fix "fix" 1 |x| x.trunc();
    Square "square" 1 |x| x * x;
    Sqrt "sqrt" 4 |x| x.sqrt();
    Rsqrt "rsqrt" 4 |x| R::ONE / x.sqrt();
    Cbrt "cbrt" 8 |x| x.cbrt();
    Rcbrt "rcbrt" 8 |x| R::ONE / x.cbrt();
    Exp "exp" 8 |x| x.exp();
    Log "log" 8 |x| x.ln();
    Log10 "log10" 8 |x| x.log10();
    Log2 "log2" 8 |x| x.log2();
    Log1p "log1p" 8 |x| x.ln_1p();
    Expm1 "expm1" 8 |x| x.exp_m1();
    Reciprocal "reciprocal" 2 |x| R::ONE / x;
    Sin "sin" 8 |x| x.sin();
    Cos "cos" 8 |x| x.cos();
    Tan "tan" 8 |x| x.tan();
    Arcsin "arcsin" 8 |x| x.asin();
    Arccos "arccos" 8 |x| x.acos();
    Arctan "arctan" 8 |x| x.atan();
    Sinh "sinh" 8 |x| x.sinh();
    Cosh "cosh" 8 |x| x.cosh();
    Tanh "tanh" 8 |x| x.tanh();
    Arcsinh "arcsinh" 8 |x| x.asinh();
    Arccosh "arccosh" 8 |x| x.acosh();
    Arctanh "arctanh" 8 |x| x.atanh();
    Degrees "degrees" 1 |x| x.to_degrees();
    Radians "radians" 1 |x| x.to_radians();
    Relu "relu" 1 |x| if x > R::ZERO { x } else if x.is_nan() { x } else { R::ZERO };
    Sigmoid "sigmoid" 8 |x| R::ONE / (R::ONE + (-x).exp());
    Softsign "softsign" 2 |x| x / (R::ONE + x.abs());
    Erf "erf" 8 |x| x.erf();
    Erfinv "erfinv" 16 |x| x.erfinv();
    Gamma "gamma" 16 |x| x.tgamma();
    Gammaln "gammaln" 16 |x| x.lgamma();
    LogicalNot "logical_not" 1 |x| if x == R::ZERO { R::ONE } else { R::ZERO };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formulas_follow_mxnet_conventions() {
        assert_eq!(rint(1.5f32), 1.0);
        assert_eq!(rint(-1.5f32), -2.0);
        assert_eq!(rint(1.6f64), 2.0);
        assert_eq!(Round::f(-2.5f32), -3.0);
        assert_eq!(Sign::f(-0.0f32), 0.0);
        assert_eq!(Relu::f(-3.0f64), 0.0);
        assert!((Sigmoid::f(0.0f32) - 0.5).abs() < 1e-7);
        assert!((Gammaln::f(5.0f64) - 24f64.ln()).abs() < 1e-12);
    }
}
