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
use crate::operator::def::{GradCtx, OpDef, PartialShape, ShapeRule, Val};
use crate::operator::op::{Call, GpuBinary, GpuKernel, Operator, Plan, TensorDesc};
use crate::operator::stype::StorageRule;
use crate::operator::param;
use crate::operator::tensor::Tensor;
use half::f16;

/// A binary formula.
pub trait Binary: Sync + 'static {
    const COST: usize;
    /// The gradient of each form.
    const GRAD: &'static BinaryGrad;
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
    Ok(Plan::map(vec![ins[0].clone()], move |i, o| {
        apply_same::<B>(&i[0], &i[1], &o[0], dtype)
    }))
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
    Ok(Plan::map(vec![x], move |i, o| {
        scalar::<B>(&i[0], &o[0], dtype, s, reversed)
    }))
}

/// `out = B(x, s)` or `B(s, x)` over one dtype (`out` may be `x`).
pub fn scalar<B: Binary>(x: &Tensor, out: &Tensor, dtype: DType, s: f64, reversed: bool) {
    let n = x.len();
    macro_rules! go {
        ($T:ty, $R:ty, $f:expr) => {{
            let sv: $R = s as $R;
            let f = $f;
            // SAFETY: both tensors hold `n` elements of `dtype`; `out` may be exactly `x`.
            // (The operand order is chosen outside the loop, which keeps it vectorisable.)
            unsafe {
                if reversed {
                    map1(x.ptr::<$T>(), out.ptr::<$T>(), n, B::COST, |v: $T| f(sv, v))
                } else {
                    map1(x.ptr::<$T>(), out.ptr::<$T>(), n, B::COST, |v: $T| f(v, sv))
                }
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
       $(, wrapping |$wa:ident, $wb:ident| $we:expr)? => $grad:ident;)*) => {
        $(
            pub struct $ty;
            impl Binary for $ty {
                const COST: usize = $cost;
                const GRAD: &'static BinaryGrad = &$grad;
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
                $( define::<$ty>(t.def($same, Form::<$ty, SAME>::OP), SAME); )?
                $( define::<$ty>(t.def($bcast, Form::<$ty, BROADCAST>::OP), BROADCAST); )?
                $( define::<$ty>(t.def($sc, Form::<$ty, SCALAR>::OP), SCALAR); )?
                $( define::<$ty>(t.def($rsc, Form::<$ty, RSCALAR>::OP), RSCALAR); )?
            )*
            for name in ["elemwise_add", "elemwise_sub", "elemwise_mul"] {
                t.0.iter_mut().filter(|d| d.name == name).for_each(|d| { d.stype(StorageRule::SameStorage); });
            }
            // a comparison with a scalar that is false at zero keeps a sparse input's storage
            $( $( comparison_rule::<$ty>(t, $sc); )? )*
            for name in ["_mul_scalar", "_div_scalar"] {
                t.0.iter_mut().filter(|d| d.name == name).for_each(|d| { d.stype(StorageRule::ZeroPreserving); });
            }
        }
    };
}

fn int_div(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { (a / b).trunc() }
}

binary_ops! {
    Add 1 gpu(GpuKernel::Sum) ["elemwise_add"] ["broadcast_add"] ["_plus_scalar"] [] |a, b| a + b, wrapping |a, b| a.wrapping_add(b) => ADD;
    Sub 1 gpu(GpuKernel::Binary(GpuBinary::Sub)) ["elemwise_sub"] ["broadcast_sub"] ["_minus_scalar"] ["_rminus_scalar"] |a, b| a - b, wrapping |a, b| a.wrapping_sub(b) => SUB;
    Mul 1 gpu(GpuKernel::Binary(GpuBinary::Mul)) ["elemwise_mul"] ["broadcast_mul"] ["_mul_scalar"] [] |a, b| a * b, wrapping |a, b| a.wrapping_mul(b) => MUL;
    Div 2 ["elemwise_div"] ["broadcast_div"] ["_div_scalar"] ["_rdiv_scalar"] |a, b| a / b, int |a, b| int_div(a, b) => DIV;
    Mod 4 ["_mod"] ["broadcast_mod"] ["_mod_scalar"] ["_rmod_scalar"] |a, b| modulo(a, b) => MOD;
    Power 8 ["_power"] ["broadcast_power"] ["_power_scalar"] ["_rpower_scalar"] |a, b| a.powf(b) => POWER;
    Maximum 1 ["_maximum"] ["broadcast_maximum"] ["_maximum_scalar"] [] |a, b| if a > b || a.is_nan() { a } else { b } => MAXIMUM;
    Minimum 1 ["_minimum"] ["broadcast_minimum"] ["_minimum_scalar"] [] |a, b| if a < b || a.is_nan() { a } else { b } => MINIMUM;
    Hypot 4 ["_hypot"] ["broadcast_hypot"] ["_hypot_scalar"] [] |a, b| a.hypot(b) => HYPOT;
    Equal 1 ["_equal"] ["broadcast_equal"] ["_equal_scalar"] [] |a, b| truth(a == b) => ZERO;
    NotEqual 1 ["_not_equal"] ["broadcast_not_equal"] ["_not_equal_scalar"] [] |a, b| truth(a != b) => ZERO;
    Greater 1 ["_greater"] ["broadcast_greater"] ["_greater_scalar"] [] |a, b| truth(a > b) => ZERO;
    GreaterEqual 1 ["_greater_equal"] ["broadcast_greater_equal"] ["_greater_equal_scalar"] [] |a, b| truth(a >= b) => ZERO;
    Lesser 1 ["_lesser"] ["broadcast_lesser"] ["_lesser_scalar"] [] |a, b| truth(a < b) => ZERO;
    LesserEqual 1 ["_lesser_equal"] ["broadcast_lesser_equal"] ["_lesser_equal_scalar"] [] |a, b| truth(a <= b) => ZERO;
    LogicalAnd 1 ["_logical_and"] ["broadcast_logical_and"] ["_logical_and_scalar"] [] |a, b| truth(a != R::ZERO && b != R::ZERO) => ZERO;
    LogicalOr 1 ["_logical_or"] ["broadcast_logical_or"] ["_logical_or_scalar"] [] |a, b| truth(a != R::ZERO || b != R::ZERO) => ZERO;
    LogicalXor 1 ["_logical_xor"] ["broadcast_logical_xor"] ["_logical_xor_scalar"] [] |a, b| truth((a != R::ZERO) != (b != R::ZERO)) => ZERO;
}

/// Sets the storage rule of a comparison's scalar form: with a sparse input, the output keeps its
/// storage when the comparison is false at zero (`y > 0`, `y == 1`), as MXNet's does, and is
/// dense otherwise (`y == 0`).
fn comparison_rule<B: Binary>(t: &mut Entries, name: &str) {
    const COMPARISONS: &[&str] = &[
        "_equal_scalar",
        "_not_equal_scalar",
        "_greater_scalar",
        "_greater_equal_scalar",
        "_lesser_scalar",
        "_lesser_equal_scalar",
    ];
    if !COMPARISONS.contains(&name) {
        return;
    }
    if let Some(d) = t.0.iter_mut().find(|d| d.name == name) {
        d.stype(StorageRule::Custom(|p, ins| {
            let s = crate::operator::stype::param(p, "scalar")
                .and_then(param::float)
                .unwrap_or(0.0);
            match ins.first() {
                Some(&st) if ins.len() == 1 && B::f(0.0f64, s) == 0.0 => st,
                _ => crate::ndarray::format::StorageType::Default,
            }
        }));
    }
}

/// `_grad_add`: gradient accumulation, an add.
pub(crate) fn register_extra(t: &mut Entries) {
    define::<Add>(t.def("_grad_add", Form::<Add, SAME>::OP), SAME);
    t.0.last_mut().expect("just defined").stype(StorageRule::SameStorage);
}

/// The gradient part of a binary formula's definition, for each of its forms. `two` gives
/// both operands' gradients of the tensor forms (`bc`: the broadcasting form, whose operand
/// gradients are summed back to the operands' shapes); `scalar` the tensor operand's gradient
/// of the scalar forms (`rev`: the scalar is the left operand).
pub struct BinaryGrad {
    zero: bool,
    two: fn(&mut GradCtx<'_>, bool) -> Result<[Option<Val>; 2]>,
    scalar: fn(&mut GradCtx<'_>, f64, bool) -> Result<Option<Val>>,
}

/// Sets the gradient of one form of `B` on its definition.
fn define<B: Binary>(d: &mut OpDef, kind: u8) {
    // elementwise forms: every input and the output have one shape
    if kind != BROADCAST {
        d.shape_rule(ShapeRule::Same);
    } else {
        d.shape_rule(ShapeRule::Rule(broadcast_shapes));
    }
    if B::GRAD.zero {
        d.zero_grad();
        return;
    }
    d.grad(match kind {
        SAME => grad_same::<B>,
        BROADCAST => grad_broadcast::<B>,
        _ => grad_scalar_form::<B>,
    });
}

/// A broadcasting form's output from operands with unknown dimensions (MXNet's
/// BinaryBroadcastShape): once both ranks are known, each output dimension whose two operand
/// dimensions are known; incompatible known dimensions are MXNet's error.
fn broadcast_shapes(
    _: &crate::operator::def::ParamList,
    ins: &[PartialShape],
    _: &[PartialShape],
) -> Result<(Vec<PartialShape>, Vec<PartialShape>)> {
    let none = vec![None; ins.len()];
    let (Some(Some(l)), Some(Some(r))) = (ins.first(), ins.get(1)) else {
        return Ok((none, Vec::new()));
    };
    if l.is_empty() || r.is_empty() {
        return Ok((none, Vec::new()));
    }
    if l == r {
        return Ok((none, vec![Some(l.clone())]));
    }
    let n = l.len().max(r.len());
    let (bl, br) = (n - l.len(), n - r.len());
    let mut out = vec![0; n];
    for (i, o) in out.iter_mut().enumerate() {
        let a = if i >= bl { l[i - bl] } else { 1 };
        let b = if i >= br { r[i - br] } else { 1 };
        if a <= 0 || b <= 0 {
            continue;
        }
        if a != b && a != 1 && b != 1 {
            return Err(Error::invalid(format!(
                "operands could not be broadcast together with shapes {} {}",
                show(l),
                show(r)
            )));
        }
        *o = if a == 1 { b } else { a };
    }
    Ok((none, vec![Some(out)]))
}

fn show(s: &[i64]) -> String {
    let d: Vec<String> = s.iter().map(|v| v.to_string()).collect();
    format!("[{}]", d.join(","))
}

fn grad_same<B: Binary>(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    grad_two(g, false, B::GRAD)
}

fn grad_broadcast<B: Binary>(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    grad_two(g, true, B::GRAD)
}

fn grad_scalar_form<B: Binary>(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    grad_scalar(g, B::GRAD)
}

fn grad_two(g: &mut GradCtx<'_>, bc: bool, f: &BinaryGrad) -> Result<Vec<Option<Val>>> {
    let [da, db] = (f.two)(g, bc)?;
    let mut out = Vec::with_capacity(2);
    for (i, d) in [da, db].into_iter().enumerate() {
        out.push(match d {
            Some(d) if g.needs(i) && bc => Some(g.sum_to(d, g.x(i))?),
            Some(d) if g.needs(i) => Some(d),
            _ => None,
        });
    }
    Ok(out)
}

fn grad_scalar(g: &mut GradCtx<'_>, f: &BinaryGrad) -> Result<Vec<Option<Val>>> {
    let s = g.float("scalar", 1.0)?;
    let rev = g.name.starts_with("_r");
    Ok(vec![(f.scalar)(g, s, rev)?])
}

/// `a op b` with the form's op: same-shape or broadcasting.
fn bin(g: &mut GradCtx<'_>, bc: bool, op: &str, a: Val, b: Val) -> Result<Val> {
    let name: &'static str = match (bc, op) {
        (false, "mul") => "elemwise_mul",
        (true, "mul") => "broadcast_mul",
        (false, "div") => "elemwise_div",
        (true, "div") => "broadcast_div",
        (false, "ge") => "_greater_equal",
        (true, "ge") => "broadcast_greater_equal",
        (false, "le") => "_lesser_equal",
        (true, "le") => "broadcast_lesser_equal",
        (false, "gt") => "_greater",
        (true, "gt") => "broadcast_greater",
        (false, "lt") => "_lesser",
        (true, "lt") => "broadcast_lesser",
        (false, "pow") => "_power",
        (true, "pow") => "broadcast_power",
        _ => return Err(Error::invalid(format!("no binary op {op}"))),
    };
    g.op(name, &[a, b], &[])
}

fn scalar_op(g: &mut GradCtx<'_>, op: &'static str, x: Val, s: f64) -> Result<Val> {
    let s = s.to_string();
    g.op(op, &[x], &[("scalar", &s)])
}

fn no_scalar(_: &mut GradCtx<'_>, _: f64, _: bool) -> Result<Option<Val>> {
    Ok(None)
}

fn no_two(_: &mut GradCtx<'_>, _: bool) -> Result<[Option<Val>; 2]> {
    Ok([None, None])
}

const ZERO: BinaryGrad = BinaryGrad { zero: true, two: no_two, scalar: no_scalar };

const ADD: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, _| Ok([Some(g.dy(0)), Some(g.dy(0))]),
    scalar: |g, _, _| Ok(Some(g.dy(0))),
};

const SUB: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, _| {
        let db = if g.needs(1) { Some(g.neg(g.dy(0))?) } else { None };
        Ok([Some(g.dy(0)), db])
    },
    scalar: |g, _, rev| Ok(Some(if rev { g.neg(g.dy(0))? } else { g.dy(0) })),
};

const MUL: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| {
        let (a, b, dy) = (g.x(0), g.x(1), g.dy(0));
        let da = if g.needs(0) { Some(bin(g, bc, "mul", dy, b)?) } else { None };
        let db = if g.needs(1) { Some(bin(g, bc, "mul", dy, a)?) } else { None };
        Ok([da, db])
    },
    scalar: |g, s, _| Ok(Some(g.scale(g.dy(0), s)?)),
};

const DIV: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| {
        let (b, y, dy) = (g.x(1), g.y(0), g.dy(0));
        let da = if g.needs(0) { Some(bin(g, bc, "div", dy, b)?) } else { None };
        let db = if g.needs(1) {
            let t = g.mul(dy, y)?;
            let t = bin(g, bc, "div", t, b)?;
            Some(g.neg(t)?)
        } else {
            None
        };
        Ok([da, db])
    },
    // x / s: dy / s; s / x: -dy * y / x
    scalar: |g, s, rev| {
        Ok(Some(if rev {
            let t = g.mul(g.dy(0), g.y(0))?;
            let t = g.div(t, g.x(0))?;
            g.neg(t)?
        } else {
            g.scale(g.dy(0), 1.0 / s)?
        }))
    },
};

const MOD: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| {
        let (a, b, dy) = (g.x(0), g.x(1), g.dy(0));
        let db = if g.needs(1) {
            let q = bin(g, bc, "div", a, b)?;
            let q = g.op("floor", &[q], &[])?;
            let t = g.mul(dy, q)?;
            Some(g.neg(t)?)
        } else {
            None
        };
        Ok([Some(dy), db])
    },
    // x mod s: dy; s mod x: -dy * floor(s / x)
    scalar: |g, s, rev| {
        Ok(Some(if rev {
            let q = scalar_op(g, "_rdiv_scalar", g.x(0), s)?;
            let q = g.op("floor", &[q], &[])?;
            let t = g.mul(g.dy(0), q)?;
            g.neg(t)?
        } else {
            g.dy(0)
        }))
    },
};

const POWER: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| {
        let (a, b, y, dy) = (g.x(0), g.x(1), g.y(0), g.dy(0));
        // d/da = b * a^(b-1); d/db = a^b * ln a
        let da = if g.needs(0) {
            let bm1 = g.shift(b, -1.0)?;
            let p = bin(g, bc, "pow", a, bm1)?;
            let p = bin(g, bc, "mul", p, b)?;
            Some(g.mul(dy, p)?)
        } else {
            None
        };
        let db = if g.needs(1) {
            let la = g.op("log", &[a], &[])?;
            let t = g.mul(dy, y)?;
            Some(bin(g, bc, "mul", t, la)?)
        } else {
            None
        };
        Ok([da, db])
    },
    // x^s: dy * s * x^(s-1); s^x: dy * y * ln s
    scalar: |g, s, rev| {
        Ok(Some(if rev {
            let t = g.mul(g.dy(0), g.y(0))?;
            g.scale(t, s.ln())?
        } else {
            let p = scalar_op(g, "_power_scalar", g.x(0), s - 1.0)?;
            let p = g.scale(p, s)?;
            g.mul(g.dy(0), p)?
        }))
    },
};

fn select(g: &mut GradCtx<'_>, bc: bool, ops: [&str; 2]) -> Result<[Option<Val>; 2]> {
    let (a, b, dy) = (g.x(0), g.x(1), g.dy(0));
    let mut out = [None, None];
    for (i, op) in ops.into_iter().enumerate() {
        if g.needs(i) {
            let m = bin(g, bc, op, a, b)?;
            out[i] = Some(g.mul(dy, m)?);
        }
    }
    Ok(out)
}

const MAXIMUM: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| select(g, bc, ["ge", "lt"]),
    scalar: |g, s, _| {
        let m = scalar_op(g, "_greater_equal_scalar", g.x(0), s)?;
        Ok(Some(g.mul(g.dy(0), m)?))
    },
};

const MINIMUM: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| select(g, bc, ["le", "gt"]),
    scalar: |g, s, _| {
        let m = scalar_op(g, "_lesser_equal_scalar", g.x(0), s)?;
        Ok(Some(g.mul(g.dy(0), m)?))
    },
};

const HYPOT: BinaryGrad = BinaryGrad {
    zero: false,
    two: |g, bc| {
        let (y, dy) = (g.y(0), g.dy(0));
        let r = g.div(dy, y)?;
        let mut out = [None, None];
        for (i, slot) in out.iter_mut().enumerate() {
            if g.needs(i) {
                *slot = Some(bin(g, bc, "mul", r, g.x(i))?);
            }
        }
        Ok(out)
    },
    scalar: |g, _, _| {
        let r = g.div(g.dy(0), g.y(0))?;
        Ok(Some(g.mul(r, g.x(0))?))
    },
};

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
