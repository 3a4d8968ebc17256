//! Elementwise binary ops in three forms: same-shape (`elemwise_add`, `_mod`, ...), numpy-style
//! broadcasting (`broadcast_add`, ...) and with a scalar parameter (`_plus_scalar`,
//! `_rminus_scalar`, ...). Comparisons and logical ops return 1 or 0 in the input dtype, as
//! MXNet's legacy ops do. Integer arrays compute in f64 with C semantics (division truncates; a
//! zero divisor gives 0 instead of a crash).

use super::{Entries, dims, inputs, same_dtype};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::map::{map1, map2};
use crate::operator::kernel::strided::{broadcast_shape, broadcast_strides, zip2};
use crate::operator::kernel::{Element, Real};
use crate::operator::op::{Call, GpuBinary, GpuKernel, Operator, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;
use half::f16;

/// A binary formula.
pub trait Binary: Sync + 'static {
    const COST: usize;
    fn f<R: Real>(a: R, b: R) -> R;
    /// The integer form, on integers held in f64 (differs only for division and modulo).
    fn int(a: f64, b: f64) -> f64 {
        Self::f(a, b)
    }
    /// What the same-shape form does on GPU arrays, if it runs there.
    const GPU: Option<GpuKernel> = None;
    /// Whether integers use [`wrapping`](Self::wrapping) (exact in the integer type, wrapping on
    /// overflow, as C++ integer arithmetic does) instead of the f64 form.
    const WRAPPING: bool = false;
    fn wrapping(a: i64, _b: i64) -> i64 {
        a
    }
}

/// `out = f(a, b)` for integer tensors computed in i64 and truncated to their type (which is
/// the type's own wrapping arithmetic for +, - and *). False for non-integer dtypes.
fn apply_wrapping<B: Binary>(a: &Tensor, b: &Tensor, out: &Tensor, dtype: DType) -> bool {
    let n = out.len();
    macro_rules! ints {
        ($($d:ident $t:ty),*) => {
            match dtype {
                $(DType::$d => {
                    // SAFETY: as in `apply_same`.
                    unsafe {
                        map2(a.ptr::<$t>(), b.ptr::<$t>(), out.ptr::<$t>(), n, B::COST, |x: $t, y: $t| {
                            B::wrapping(x as i64, y as i64) as $t
                        })
                    };
                    true
                })*
                _ => false,
            }
        };
    }
    ints!(U8 u8, I8 i8, I16 i16, U16 u16, I32 i32, U32 u32, I64 i64, U64 u64)
}

fn truth<R: Real>(b: bool) -> R {
    if b { R::ONE } else { R::ZERO }
}

/// Python's modulo (the result takes the divisor's sign), 0 for a zero divisor, as MXNet.
fn modulo<R: Real>(a: R, b: R) -> R {
    if b == R::ZERO {
        return R::ZERO;
    }
    let r = a % b;
    if r != R::ZERO && ((r < R::ZERO) != (b < R::ZERO)) {
        r + b
    } else {
        r
    }
}

/// Same-shape elementwise: `out = B(a, b)` (out may be exactly `a` or `b`).
pub fn apply_same<B: Binary>(a: &Tensor, b: &Tensor, out: &Tensor, dtype: DType) {
    let n = out.len();
    // SAFETY (all arms): the three tensors hold `n` elements of `dtype` (same planned shape and
    // dtype); the runner allows exact aliasing of an output with an input for elementwise plans.
    match dtype {
        DType::F32 => unsafe {
            map2(
                a.ptr::<f32>(),
                b.ptr::<f32>(),
                out.ptr::<f32>(),
                n,
                B::COST,
                B::f::<f32>,
            )
        },
        DType::F64 => unsafe {
            map2(
                a.ptr::<f64>(),
                b.ptr::<f64>(),
                out.ptr::<f64>(),
                n,
                B::COST,
                B::f::<f64>,
            )
        },
        DType::F16 => unsafe {
            map2(
                a.ptr::<f16>(),
                b.ptr::<f16>(),
                out.ptr::<f16>(),
                n,
                B::COST,
                |x: f16, y: f16| f16::from_f32(B::f(x.to_f32(), y.to_f32())),
            )
        },
        other if B::WRAPPING && apply_wrapping::<B>(a, b, out, other) => {}
        other => same_via_f64(a, b, out, other, &|x, y| {
            if other == DType::BF16 {
                B::f(x, y)
            } else {
                B::int(x, y)
            }
        }),
    }
}

/// The other dtypes of [`apply_same`], through f64 and one shared instance per dtype.
fn same_via_f64(
    a: &Tensor,
    b: &Tensor,
    out: &Tensor,
    dtype: DType,
    f: &(dyn Fn(f64, f64) -> f64 + Sync),
) {
    let n = out.len();
    crate::with_element!(dtype, T => {
        // SAFETY: as in `apply_same`.
        unsafe {
            map2(a.ptr::<T>(), b.ptr::<T>(), out.ptr::<T>(), n, 4, |x: T, y: T| {
                T::from_f64(f(x.to_f64(), y.to_f64()))
            })
        }
    })
}

/// Broadcasting: inputs read through strides over the output shape (the output is exclusive).
fn apply_broadcast<B: Binary>(a: &Tensor, b: &Tensor, out: &mut Tensor, dtype: DType) {
    match dtype {
        DType::F32 => broadcast_typed::<f32>(a, b, out, &B::f::<f32>),
        DType::F64 => broadcast_typed::<f64>(a, b, out, &B::f::<f64>),
        other if B::WRAPPING && broadcast_wrapping::<B>(a, b, out, other) => {}
        other => {
            let float = matches!(other, DType::F16 | DType::BF16);
            let f = move |x: f64, y: f64| if float { B::f(x, y) } else { B::int(x, y) };
            crate::with_element!(other, T => broadcast_typed::<T>(a, b, out, &|x: T, y: T| {
                T::from_f64(f(x.to_f64(), y.to_f64()))
            }))
        }
    }
}

/// [`apply_wrapping`] for broadcasting.
fn broadcast_wrapping<B: Binary>(a: &Tensor, b: &Tensor, out: &mut Tensor, dtype: DType) -> bool {
    macro_rules! ints {
        ($($d:ident $t:ty),*) => {
            match dtype {
                $(DType::$d => {
                    broadcast_typed::<$t>(a, b, out, &|x: $t, y: $t| B::wrapping(x as i64, y as i64) as $t);
                    true
                })*
                _ => false,
            }
        };
    }
    ints!(U8 u8, I8 i8, I16 i16, U16 u16, I32 i32, U32 u32, I64 i64, U64 u64)
}

fn broadcast_typed<T: Element>(
    a: &Tensor,
    b: &Tensor,
    out: &mut Tensor,
    f: &(dyn Fn(T, T) -> T + Sync),
) {
    let shape = out.shape.clone();
    let (sa, sb) = (
        broadcast_strides(&a.shape, &shape),
        broadcast_strides(&b.shape, &shape),
    );
    let d = dims(&shape);
    zip2(
        (a.slice::<T>(), &sa),
        (b.slice::<T>(), &sb),
        &d,
        out.slice_mut::<T>(),
        f,
    );
}

fn plan_same<B: Binary>(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    same_dtype(call, 0, 1)?;
    if ins[0].shape != ins[1].shape {
        return Err(Error::invalid(format!(
            "operator {}: operand shapes differ: {:?} and {:?} (use the broadcast_* ops to broadcast)",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..]
        )));
    }
    let dtype = ins[0].dtype;
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        apply_same::<B>(&k.inputs[0], &k.inputs[1], &k.outputs[0], dtype);
        Ok(())
    })
    .elementwise())
}

fn plan_broadcast<B: Binary>(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    same_dtype(call, 0, 1)?;
    if ins[0].shape == ins[1].shape {
        return plan_same::<B>(call);
    }
    let shape = broadcast_shape(&ins[0].shape, &ins[1].shape).ok_or_else(|| {
        Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} cannot be broadcast together",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..]
        ))
    })?;
    let dtype = ins[0].dtype;
    Ok(Plan::new(vec![TensorDesc::new(&shape, dtype)], move |k| {
        let (ins, outs) = (k.inputs, &mut *k.outputs);
        apply_broadcast::<B>(&ins[0], &ins[1], &mut outs[0], dtype);
        Ok(())
    }))
}

/// `out = B(x, s)`, or `B(s, x)` when `reversed`.
fn plan_scalar<B: Binary>(call: &Call<'_>, reversed: bool) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let s = call.params.or("scalar", param::float, "a number", 1.0)?;
    call.params
        .or("is_int", param::boolean, "a boolean", true)?;
    let dtype = x.dtype;
    Ok(Plan::new(vec![x], move |k| {
        scalar::<B>(&k.inputs[0], &k.outputs[0], dtype, s, reversed);
        Ok(())
    })
    .elementwise())
}

/// `out = B(x, s)` or `B(s, x)` over one dtype (`out` may be `x`).
pub fn scalar<B: Binary>(x: &Tensor, out: &Tensor, dtype: DType, s: f64, reversed: bool) {
    let n = x.len();
    macro_rules! go {
        ($T:ty, $R:ty, $f:expr) => {{
            let sv: $R = s as $R;
            let f = $f;
            // SAFETY: both tensors hold `n` elements of `dtype`; `out` may be exactly `x`.
            unsafe {
                map1(x.ptr::<$T>(), out.ptr::<$T>(), n, B::COST, |v: $T| {
                    if reversed { f(sv, v) } else { f(v, sv) }
                })
            }
        }};
    }
    match dtype {
        DType::F32 => go!(f32, f32, |a: f32, b: f32| B::f(a, b)),
        DType::F64 => go!(f64, f64, |a: f64, b: f64| B::f(a, b)),
        other => {
            let float = matches!(other, DType::F16 | DType::BF16);
            scalar_via_f64(x, out, other, &move |v| {
                let (a, b) = if reversed { (s, v) } else { (v, s) };
                if float { B::f(a, b) } else { B::int(a, b) }
            })
        }
    }
}

/// The other dtypes of [`scalar`], through f64 and one shared instance per dtype.
fn scalar_via_f64(x: &Tensor, out: &Tensor, dtype: DType, f: &(dyn Fn(f64) -> f64 + Sync)) {
    let n = x.len();
    crate::with_element!(dtype, T => {
        // SAFETY: both tensors hold `n` elements of `dtype`; `out` may be exactly `x`.
        unsafe { map1(x.ptr::<T>(), out.ptr::<T>(), n, 4, |v: T| T::from_f64(f(v.to_f64()))) }
    })
}

const SAME: u8 = 0;
const BROADCAST: u8 = 1;
const SCALAR: u8 = 2;
const RSCALAR: u8 = 3;

/// One form of a binary formula as an operator.
struct Form<B, const KIND: u8>(std::marker::PhantomData<B>);

impl<B: Binary, const KIND: u8> Form<B, KIND> {
    const OP: &'static Self = &Form(std::marker::PhantomData);
}

impl<B: Binary, const KIND: u8> Operator for Form<B, KIND> {
    fn plan(&self, call: &Call<'_>) -> Result<Plan> {
        match KIND {
            SAME => {
                let plan = plan_same::<B>(call)?;
                Ok(match B::GPU {
                    Some(k) => plan.with_gpu(k),
                    None => plan,
                })
            }
            // operands of one shape need no broadcasting: the same-shape GPU kernel applies
            BROADCAST
                if B::GPU.is_some()
                    && call.inputs.len() == 2
                    && call.inputs[0].shape == call.inputs[1].shape
                    && call.inputs[0].dtype == call.inputs[1].dtype =>
            {
                Ok(plan_broadcast::<B>(call)?.with_gpu(B::GPU.expect("checked")))
            }
            BROADCAST => plan_broadcast::<B>(call),
            _ => plan_scalar::<B>(call, KIND == RSCALAR),
        }
    }
}

macro_rules! binary_ops {
    ($($ty:ident $cost:literal $(gpu($gpu:expr))? [$($same:literal)?] [$($bcast:literal)?] [$($sc:literal)?] [$($rsc:literal)?]
       |$a:ident, $b:ident| $e:expr $(, int |$ia:ident, $ib:ident| $ie:expr)?
       $(, wrapping |$wa:ident, $wb:ident| $we:expr)?;)*) => {
        $(
            pub struct $ty;
            impl Binary for $ty {
                const COST: usize = $cost;
                $(const GPU: Option<GpuKernel> = Some($gpu);)?
                #[inline(always)]
                fn f<R: Real>($a: R, $b: R) -> R { $e }
                $(#[inline(always)] fn int($ia: f64, $ib: f64) -> f64 { $ie })?
                $(
                    const WRAPPING: bool = true;
                    #[inline(always)] fn wrapping($wa: i64, $wb: i64) -> i64 { $we }
                )?
            }
        )*
        pub(crate) fn register(t: &mut Entries) {
            $(
                $( t.push(($same, Form::<$ty, SAME>::OP)); )?
                $( t.push(($bcast, Form::<$ty, BROADCAST>::OP)); )?
                $( t.push(($sc, Form::<$ty, SCALAR>::OP)); )?
                $( t.push(($rsc, Form::<$ty, RSCALAR>::OP)); )?
            )*
        }
    };
}

fn int_div(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { (a / b).trunc() }
}

binary_ops! {
    Add 1 gpu(GpuKernel::Sum) ["elemwise_add"] ["broadcast_add"] ["_plus_scalar"] [] |a, b| a + b, wrapping |a, b| a.wrapping_add(b);
    Sub 1 gpu(GpuKernel::Binary(GpuBinary::Sub)) ["elemwise_sub"] ["broadcast_sub"] ["_minus_scalar"] ["_rminus_scalar"] |a, b| a - b, wrapping |a, b| a.wrapping_sub(b);
    Mul 1 gpu(GpuKernel::Binary(GpuBinary::Mul)) ["elemwise_mul"] ["broadcast_mul"] ["_mul_scalar"] [] |a, b| a * b, wrapping |a, b| a.wrapping_mul(b);
    Div 2 ["elemwise_div"] ["broadcast_div"] ["_div_scalar"] ["_rdiv_scalar"] |a, b| a / b, int |a, b| int_div(a, b);
    Mod 4 ["_mod"] ["broadcast_mod"] ["_mod_scalar"] ["_rmod_scalar"] |a, b| modulo(a, b);
    Power 8 ["_power"] ["broadcast_power"] ["_power_scalar"] ["_rpower_scalar"] |a, b| a.powf(b);
    Maximum 1 ["_maximum"] ["broadcast_maximum"] ["_maximum_scalar"] [] |a, b| if a > b || a.is_nan() { a } else { b };
    Minimum 1 ["_minimum"] ["broadcast_minimum"] ["_minimum_scalar"] [] |a, b| if a < b || a.is_nan() { a } else { b };
    Hypot 4 ["_hypot"] ["broadcast_hypot"] ["_hypot_scalar"] [] |a, b| a.hypot(b);
    Equal 1 ["_equal"] ["broadcast_equal"] ["_equal_scalar"] [] |a, b| truth(a == b);
    NotEqual 1 ["_not_equal"] ["broadcast_not_equal"] ["_not_equal_scalar"] [] |a, b| truth(a != b);
    Greater 1 ["_greater"] ["broadcast_greater"] ["_greater_scalar"] [] |a, b| truth(a > b);
    GreaterEqual 1 ["_greater_equal"] ["broadcast_greater_equal"] ["_greater_equal_scalar"] [] |a, b| truth(a >= b);
    Lesser 1 ["_lesser"] ["broadcast_lesser"] ["_lesser_scalar"] [] |a, b| truth(a < b);
    LesserEqual 1 ["_lesser_equal"] ["broadcast_lesser_equal"] ["_lesser_equal_scalar"] [] |a, b| truth(a <= b);
    LogicalAnd 1 ["_logical_and"] ["broadcast_logical_and"] ["_logical_and_scalar"] [] |a, b| truth(a != R::ZERO && b != R::ZERO);
    LogicalOr 1 ["_logical_or"] ["broadcast_logical_or"] ["_logical_or_scalar"] [] |a, b| truth(a != R::ZERO || b != R::ZERO);
    LogicalXor 1 ["_logical_xor"] ["broadcast_logical_xor"] ["_logical_xor_scalar"] [] |a, b| truth((a != R::ZERO) != (b != R::ZERO));
}

/// `_grad_add`: gradient accumulation, an add.
pub(crate) fn register_extra(t: &mut Entries) {
    t.push(("_grad_add", Form::<Add, SAME>::OP));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modulo_and_integer_division_follow_mxnet() {
        assert_eq!(modulo(-7.0f64, 3.0), 2.0);
        assert_eq!(modulo(7.0f64, -3.0), -2.0);
        assert_eq!(modulo(7.0f32, 0.0), 0.0);
        assert_eq!(Div::int(-7.0, 2.0), -3.0);
        assert_eq!(Div::int(1.0, 0.0), 0.0);
    }
}
