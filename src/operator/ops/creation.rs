//! Creation and conversion: `_zeros`, `_ones`, `_full`, `_arange`, `_linspace`, `_eye`,
//! `zeros_like`, `ones_like`, `_copyto`, `Cast`/`amp_cast`, `shape_array`, `size_array`.

use crate::operator::stype::StorageRule;
use super::{Entries, inputs};
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, ParamList, ShapeRule, TypeRule, Val, param};
use crate::operator::kernel::Element;
use crate::operator::kernel::map::fill;
use crate::operator::op::{Call, GpuKernel, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

/// The `ctx` parameter: `''` (or absent) is the default device, cpu(0).
fn ctx(call: &Call<'_>) -> Result<Context> {
    match call.params.raw("ctx").map(str::trim) {
        None | Some("") | Some("''") | Some("None") => Ok(Context::cpu(0)),
        Some(s) => param::context(s.trim_matches('\'')).ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: parameter 'ctx' must be a context such as cpu(0), got '{s}'",
                call.name
            ))
        }),
    }
}

fn dtype_or(call: &Call<'_>, default: DType) -> Result<DType> {
    call.params
        .or("dtype", param::dtype, "a dtype name", default)
}

/// Fills a tensor with `v` converted to its dtype.
pub fn fill_value(t: &Tensor, v: f64) {
    let n = t.len();
    crate::with_element!(t.dtype, T => {
        // SAFETY: an output tensor of `n` elements, written by this op alone.
        unsafe { fill(t.ptr::<T>(), n, T::from_f64(v)) }
    })
}

fn constant(call: &Call<'_>, value: Option<f64>) -> Result<Plan> {
    inputs(call, 0)?;
    let value = match value {
        Some(v) => v,
        None => call.params.required("value", param::float, "a number")?,
    };
    let shape = call.params.or("shape", param::shape, "a shape", vec![])?;
    if let Some(&d) = shape.iter().find(|&&d| d < 0) {
        return Err(Error::invalid(format!(
            "operator {}: shape {shape:?} has a negative dimension {d}",
            call.name
        )));
    }
    let dtype = dtype_or(call, DType::F32)?;
    let ctx = ctx(call)?;
    Ok(Plan::new(vec![TensorDesc::new(&shape, dtype)], move |k| {
        fill_value(&k.outputs[0], value);
        Ok(())
    })
    .on(Some(ctx))
    .with_gpu(GpuKernel::Fill(value)))
}

fn like(call: &Call<'_>, value: f64) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    Ok(Plan::new(vec![x], move |k| {
        fill_value(&k.outputs[0], value);
        Ok(())
    })
    .elementwise()
    .with_gpu(GpuKernel::Fill(value)))
}

fn arange(call: &Call<'_>) -> Result<Plan> {
    inputs(call, 0)?;
    let p = call.params;
    let start = p.required("start", param::float, "a number")?;
    let stop = p.optional("stop", param::float, "a number")?;
    let step = p.or("step", param::float, "a number", 1.0)?;
    let repeat = p.or("repeat", param::int, "an integer", 1)?;
    if p.or("infer_range", param::boolean, "a boolean", false)? {
        return Err(Error::not_supported(format!(
            "operator {}: infer_range=True needs symbolic shape inference, which mxrt does not have yet",
            call.name
        )));
    }
    let dtype = dtype_or(call, DType::F32)?;
    let ctx = ctx(call)?;
    let (start, stop) = match stop {
        Some(s) => (start, s),
        None => (0.0, start),
    };
    if step == 0.0 || repeat <= 0 {
        return Err(Error::invalid(format!(
            "operator {}: step must not be 0 and repeat must be positive",
            call.name
        )));
    }
    let count = ((stop - start) / step).ceil().max(0.0) as i64;
    let n = count * repeat;
    Ok(Plan::new(vec![TensorDesc::new(&[n], dtype)], move |k| {
        let out = &mut k.outputs[0];
        crate::with_element!(dtype, T => {
            for (i, o) in out.slice_mut::<T>().iter_mut().enumerate() {
                *o = T::from_f64(start + (i as i64 / repeat) as f64 * step);
            }
        });
        Ok(())
    })
    .on(Some(ctx)))
}

/// `_linspace`: `num` values from `start` to `stop` (inclusive with `endpoint`). MXNet's op table
/// lists arange's parameters for it, but the op takes these.
fn linspace(call: &Call<'_>) -> Result<Plan> {
    inputs(call, 0)?;
    let p = call.params;
    let start = p.required("start", param::float, "a number")?;
    let stop = p.required("stop", param::float, "a number")?;
    let num = p.required("num", param::int, "an integer")?;
    let endpoint = p.or("endpoint", param::boolean, "a boolean", true)?;
    let dtype = dtype_or(call, DType::F32)?;
    let ctx = ctx(call)?;
    if num < 0 {
        return Err(Error::invalid(format!(
            "operator {}: num must not be negative, got {num}",
            call.name
        )));
    }
    let div = if endpoint { num - 1 } else { num };
    let step = if div > 0 {
        (stop - start) / div as f64
    } else {
        0.0
    };
    Ok(Plan::new(vec![TensorDesc::new(&[num], dtype)], move |k| {
        let out = &mut k.outputs[0];
        crate::with_element!(dtype, T => {
            for (i, o) in out.slice_mut::<T>().iter_mut().enumerate() {
                // the last point is `stop` exactly (a single point is `start`, as in MXNet)
                let v = if endpoint && num > 1 && i as i64 == num - 1 { stop } else { start + i as f64 * step };
                *o = T::from_f64(v);
            }
        });
        Ok(())
    })
    .on(Some(ctx)))
}

fn eye(call: &Call<'_>) -> Result<Plan> {
    inputs(call, 0)?;
    let p = call.params;
    let n = p.required("N", param::int, "an integer")?;
    let m = p.or("M", param::int, "an integer", 0)?;
    let m = if m == 0 { n } else { m };
    let kdiag = p.or("k", param::int, "an integer", 0)?;
    let dtype = dtype_or(call, DType::F32)?;
    let ctx = ctx(call)?;
    if n < 0 || m < 0 {
        return Err(Error::invalid(format!(
            "operator {}: N and M must not be negative",
            call.name
        )));
    }
    Ok(Plan::new(vec![TensorDesc::new(&[n, m], dtype)], move |k| {
        let out = &mut k.outputs[0];
        crate::with_element!(dtype, T => {
            let o = out.slice_mut::<T>();
            for i in 0..n {
                for j in 0..m {
                    o[(i * m + j) as usize] = if j - i == kdiag { T::one() } else { T::zero() };
                }
            }
        });
        Ok(())
    })
    .on(Some(ctx)))
}

/// Converts `x` into `y`'s dtype (same element count), through f64 in chunks: one instance per
/// source and per destination dtype instead of one per pair.
pub fn convert(x: &Tensor, y: &Tensor) {
    let n = x.len();
    if x.dtype == y.dtype {
        let bytes = n * x.dtype.size();
        let (s, d) = (x.byte_ptr().cast_const(), y.byte_ptr());
        if s != d.cast_const() && bytes > 0 {
            // SAFETY: both hold `bytes` bytes; an elementwise plan gives them the same memory
            // (skipped) or memory that does not overlap.
            unsafe { std::ptr::copy_nonoverlapping(s, d, bytes) };
        }
        return;
    }
    const CHUNK: usize = 4096;
    let mut buf = [0f64; CHUNK];
    let mut at = 0;
    while at < n {
        let len = CHUNK.min(n - at);
        crate::with_element!(x.dtype, S => {
            // SAFETY: `at + len <= n` elements of S; the dtypes differ, so the runner gave the
            // output its own (or staged) memory.
            let src = unsafe { std::slice::from_raw_parts(x.ptr::<S>().add(at), len) };
            for (b, v) in buf.iter_mut().zip(src) {
                *b = v.to_f64();
            }
        });
        crate::with_element!(y.dtype, D => {
            // SAFETY: as above, for the output.
            let dst = unsafe { std::slice::from_raw_parts_mut(y.ptr::<D>().add(at), len) };
            for (d, b) in dst.iter_mut().zip(&buf) {
                *d = D::from_f64(*b);
            }
        });
        at += len;
    }
}

fn cast_to(call: &Call<'_>, dtype: DType) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    Ok(Plan::new(vec![TensorDesc::new(&x.shape, dtype)], move |k| {
        convert(&k.inputs[0], &k.outputs[0]);
        Ok(())
    })
    .elementwise())
}

fn cast(call: &Call<'_>) -> Result<Plan> {
    let dtype = call
        .params
        .required("dtype", param::dtype, "a dtype name")?;
    cast_to(call, dtype)
}

/// `_copyto`: a copy into the given output, converting to its dtype.
fn copyto(call: &Call<'_>) -> Result<Plan> {
    let x = &inputs(call, 1)?[0];
    let dtype = match call.given_outputs {
        Some([o]) => {
            if o.shape != x.shape {
                return Err(Error::invalid(format!(
                    "operator {}: cannot copy shape {:?} into shape {:?}",
                    call.name,
                    &x.shape[..],
                    &o.shape[..]
                )));
            }
            o.dtype
        }
        _ => x.dtype,
    };
    let plan = cast_to(call, dtype)?;
    Ok(if dtype == x.dtype {
        plan.with_gpu(GpuKernel::Copy)
    } else {
        plan
    })
}

/// `_mxrt_cast_like(a, like)`: `a` converted to `like`'s dtype (the gradient of a cast goes
/// back to the input's dtype). Its own gradient converts back to `a`'s dtype.
fn cast_like(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    if ins[0].shape != ins[1].shape {
        return Err(Error::invalid(format!(
            "operator {}: shapes {:?} and {:?} differ",
            call.name,
            &ins[0].shape[..],
            &ins[1].shape[..]
        )));
    }
    let dtype = ins[1].dtype;
    Ok(Plan::new(vec![TensorDesc::new(&ins[0].shape, dtype)], move |k| {
        convert(&k.inputs[0], &k.outputs[0]);
        Ok(())
    }))
}

/// The gradient of a cast or copy: the output's gradient in the input's dtype.
fn cast_grad(g: &mut GradCtx<'_>) -> Result<Vec<Option<Val>>> {
    Ok(vec![Some(g.op("_mxrt_cast_like", &[g.dy(0), g.x(0)], &[])?)])
}

fn shape_array(call: &Call<'_>) -> Result<Plan> {
    let shape = inputs(call, 1)?[0].shape.clone();
    Ok(Plan::new(
        vec![TensorDesc::new(&[shape.len() as i64], DType::I64)],
        move |k| {
            k.outputs[0].slice_mut::<i64>().copy_from_slice(&shape);
            Ok(())
        },
    ))
}

fn size_array(call: &Call<'_>) -> Result<Plan> {
    let n = inputs(call, 1)?[0].size() as i64;
    Ok(Plan::new(
        vec![TensorDesc::new(&[1], DType::I64)],
        move |k| {
            k.outputs[0].slice_mut::<i64>()[0] = n;
            Ok(())
        },
    ))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("_zeros", &|c: &Call<'_>| constant(c, Some(0.0))));
    t.push(("_zeros_without_dtype", &|c: &Call<'_>| {
        constant(c, Some(0.0))
    }));
    t.push(("_ones", &|c: &Call<'_>| constant(c, Some(1.0))));
    t.push(("_full", &|c: &Call<'_>| constant(c, None)));
    t.push(("zeros_like", &|c: &Call<'_>| like(c, 0.0)))
        .stype(StorageRule::ZeroPreserving)
        .zero_grad();
    t.push(("ones_like", &|c: &Call<'_>| like(c, 1.0))).zero_grad();
    t.push(("_arange", &arange));
    t.push(("_linspace", &linspace));
    t.push(("_eye", &eye));
    t.push(("Cast", &cast))
        .stype(StorageRule::ZeroPreserving)
        .grad(cast_grad)
        .shape_rule(ShapeRule::Same)
        .dtype_rule(TypeRule::Fixed(cast_dtype));
    t.push(("amp_cast", &cast))
        .grad(cast_grad)
        .shape_rule(ShapeRule::Same)
        .dtype_rule(TypeRule::Fixed(cast_dtype));
    t.push(("_copyto", &copyto))
        .stype(StorageRule::ZeroPreserving)
        .grad(cast_grad);
    t.def("_mxrt_cast_like", &cast_like).grad(|g| {
        let da = g.op("_mxrt_cast_like", &[g.dy(0), g.x(0)], &[])?;
        Ok(vec![Some(da), None])
    });
    t.push(("shape_array", &shape_array)).zero_grad();
    t.push(("size_array", &size_array)).zero_grad();
}

/// The dtype `Cast` converts to.
fn cast_dtype(p: &ParamList) -> Option<DType> {
    param(p, "dtype").and_then(param::dtype)
}
