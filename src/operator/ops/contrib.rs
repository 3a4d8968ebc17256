//! Operators MXNet's sparse front end and contrib namespace call: `_set_value` (assigning a
//! number to a whole array, `x[:] = 2`), `_square_sum` (the sum of squares along axes, which
//! keeps a row_sparse array's rows), `_contrib_quadratic` (`a x² + b x + c`, storage-preserving
//! when `c` is 0) and `_contrib_getnnz` (stored values of a csr array, in all or per row).

use super::{Entries, axis as norm_axis, dims, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::format::StorageType;
use crate::operator::kernel::Element;
use crate::operator::kernel::strided::{contiguous_strides, reduce};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::stype::{self, StorageRule};

/// `_set_value(src)`: every element of the given output set to `src`.
fn set_value(call: &Call<'_>) -> Result<Plan> {
    inputs(call, 0)?;
    let v = call.params.required("src", param::float, "a number")?;
    let out = match call.given_outputs {
        Some([o]) => o.clone(),
        _ => {
            return Err(Error::invalid(format!(
                "operator {}: takes the array to set as its one output (out=)",
                call.name
            )));
        }
    };
    Ok(Plan::new(vec![out], move |k| {
        super::creation::fill_value(&k.outputs[0], v);
        Ok(())
    }))
}

/// Which axes `axis`/`exclude` fold, as in the reductions.
fn folded(call: &Call<'_>, ndim: usize) -> Result<Vec<bool>> {
    let axes = call.params.optional("axis", param::shape, "an axis or a tuple of axes")?;
    let exclude = call.params.or("exclude", param::boolean, "a boolean", false)?;
    let mut mask = vec![axes.as_ref().is_none_or(|a| a.is_empty()); ndim];
    if let Some(axes) = axes {
        for a in axes {
            mask[norm_axis(call, a, ndim)?] = true;
        }
        if exclude {
            mask.iter_mut().for_each(|m| *m = !*m);
        }
    }
    Ok(mask)
}

fn folded_shape(shape: &[i64], mask: &[bool], keepdims: bool) -> Vec<i64> {
    let mut out: Vec<i64> = shape
        .iter()
        .zip(mask)
        .filter_map(|(&d, &m)| match (m, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    if out.is_empty() {
        out.push(1);
    }
    out
}

/// `_square_sum(data; axis, keepdims, exclude)`: `sum(data * data)` along the axes.
fn square_sum(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let mask = folded(call, x.shape.len())?;
    let keepdims = call.params.or("keepdims", param::boolean, "a boolean", false)?;
    let out = folded_shape(&x.shape, &mask, keepdims);
    let shape = dims(&x.shape);
    let dtype = x.dtype;
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let (xin, o) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => {
            reduce(xin.slice::<T>(), &shape, &mask, o.slice_mut::<T>(), 0f64,
                |a, v: T, _| { let v = v.to_f64(); a + v * v }, |a, _| T::from_f64(a));
        });
        Ok(())
    }))
}

/// `_mxrt_square_sum_grad(dy, x; axis, keepdims, exclude)`: `2 x dy`, `dy` read back along the
/// folded axes (its shape is `_square_sum`'s output).
fn square_sum_grad(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let x = ins[1].clone();
    let mask = folded(call, x.shape.len())?;
    call.params.or("keepdims", param::boolean, "a boolean", false)?;
    let shape = dims(&x.shape);
    let dtype = x.dtype;
    if ins[0].dtype != dtype {
        return Err(Error::invalid(format!("operator {}: dtypes differ", call.name)));
    }
    Ok(Plan::new(vec![x], move |k| {
        // the kept axes index dy; the folded ones repeat it
        let kept: Vec<usize> = (0..shape.len()).filter(|&d| !mask[d]).collect();
        let kept_dims: Vec<usize> = kept.iter().map(|&d| shape[d]).collect();
        let kept_strides = contiguous_strides(&kept_dims);
        let full = contiguous_strides(&shape);
        let (dy, xin) = (&k.inputs[0], &k.inputs[1]);
        let out = &mut k.outputs[0];
        crate::with_element!(dtype, T => {
            let (dy, xs, o) = (dy.slice::<T>(), xin.slice::<T>(), out.slice_mut::<T>());
            let n: usize = shape.iter().product();
            for i in 0..n {
                // the index of element i along the kept axes
                let mut rem = i;
                let mut at = 0isize;
                let mut kk = 0;
                for d in 0..shape.len() {
                    let idx = rem / full[d] as usize;
                    rem %= full[d] as usize;
                    if kept.get(kk) == Some(&d) {
                        at += idx as isize * kept_strides[kk];
                        kk += 1;
                    }
                }
                let v = xs[i].to_f64();
                o[i] = T::from_f64(2.0 * v * dy[at as usize].to_f64());
            }
        });
        Ok(())
    }))
}

/// `_contrib_quadratic(data; a, b, c)`: `a x² + b x + c`.
fn quadratic(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let [a, b, c] = ["a", "b", "c"].map(|k| call.params.or(k, param::float, "a number", 0.0));
    let (a, b, c) = (a?, b?, c?);
    let dtype = x.dtype;
    Ok(Plan::new(vec![x], move |k| {
        let (xin, o) = (&k.inputs[0], &mut k.outputs[0]);
        crate::with_element!(dtype, T => {
            for (o, &v) in o.slice_mut::<T>().iter_mut().zip(xin.slice::<T>()) {
                let v = v.to_f64();
                *o = T::from_f64(a * v * v + b * v + c);
            }
        });
        Ok(())
    }))
}

/// `_contrib_getnnz(data; axis)`: the number of stored values of a csr array, in all (axis
/// None) or per row (axis 1), as int64. The array reaches the kernel dense, so explicit zeros
/// a csr array stores are not counted.
fn getnnz(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    if x.shape.len() != 2 {
        return Err(Error::invalid(format!(
            "operator {}: takes a 2-dimensional csr array, got {} dimensions",
            call.name,
            x.shape.len()
        )));
    }
    let axis = call.params.optional("axis", param::int, "an integer or None")?;
    let (rows, cols) = (x.shape[0].max(0) as usize, x.shape[1].max(0) as usize);
    let out = match axis {
        None => vec![1],
        Some(1) => vec![rows as i64],
        Some(a) => {
            return Err(Error::invalid(format!(
                "operator {}: axis {a} is not supported (None or 1)",
                call.name
            )));
        }
    };
    let dtype = x.dtype;
    let per_row = axis.is_some();
    Ok(Plan::new(vec![TensorDesc::new(&out, DType::I64)], move |k| {
        let counts: Vec<i64> = crate::with_element!(dtype, T => {
            let xs = k.inputs[0].slice::<T>();
            (0..rows).map(|r| xs[r * cols..(r + 1) * cols].iter().filter(|v| v.to_f64() != 0.0).count() as i64).collect()
        });
        let o = k.outputs[0].slice_mut::<i64>();
        if per_row {
            o.copy_from_slice(&counts);
        } else {
            o[0] = counts.iter().sum();
        }
        Ok(())
    }))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("_set_value", &set_value);
    // rows of a row_sparse array summed along axis 1 with keepdims stay rows (MXNet)
    t.def("_square_sum", &square_sum)
        .stype(StorageRule::Custom(|p, ins| {
            let axis1 = stype::param(p, "axis").is_some_and(|a| {
                matches!(a.trim(), "1" | "(1,)" | "(1)" | "[1]" | "-1" | "(-1,)")
            });
            if ins.first() == Some(&StorageType::RowSparse) && axis1 && stype::truthy(stype::param(p, "keepdims")) {
                StorageType::RowSparse
            } else {
                StorageType::Default
            }
        }))
        .grad(|g| {
            let params = g.pass(&["axis", "keepdims", "exclude"]);
            let dx = g.op("_mxrt_square_sum_grad", &[g.dy(0), g.x(0)], &params)?;
            Ok(vec![Some(dx)])
        });
    t.def("_mxrt_square_sum_grad", &square_sum_grad);
    // a x² + b x keeps zeros: the output keeps a sparse input's storage when c is 0
    t.def("_contrib_quadratic", &quadratic)
        .stype(StorageRule::Custom(|p, ins| {
            let c = stype::param(p, "c").and_then(param::float).unwrap_or(0.0);
            match ins.first() {
                Some(&s) if c == 0.0 => s,
                _ => StorageType::Default,
            }
        }))
        .grad(|g| {
            let (a, b) = (g.float("a", 0.0)?, g.float("b", 0.0)?);
            let t = g.scale(g.x(0), 2.0 * a)?;
            let t = g.shift(t, b)?;
            Ok(vec![Some(g.mul(g.dy(0), t)?)])
        });
    t.def("_contrib_getnnz", &getnnz);
}
