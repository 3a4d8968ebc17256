//! mxrt's internal operators for gradients that other families share: reducing a broadcast
//! gradient back to an operand's shape and the reverse. They take the array whose shape they
//! produce as an input (a "like" input), so gradient definitions never need shapes and a
//! symbolic backward graph can use them before shapes are known. Each is the other's gradient.

use super::{Entries, dims, inputs};
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::kernel::map::map1;
use crate::operator::kernel::strided::{broadcast_shape, broadcast_strides, gather, reduce};
use crate::operator::op::{Call, Plan, TensorDesc};

/// Whether `small` broadcasts to `big` (right-aligned).
fn broadcasts(small: &[i64], big: &[i64]) -> bool {
    small.len() <= big.len() && broadcast_shape(small, big).is_some_and(|s| s == big)
}

/// `_mxrt_sum_to_like(a, like)`: `a` summed over the axes along which `like` was broadcast to
/// `a`'s shape (the leading axes `like` lacks and those where it has size 1), shaped like `like`.
fn sum_to_like(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (a, like) = (ins[0].clone(), &ins[1]);
    if !broadcasts(&like.shape, &a.shape) {
        return Err(Error::invalid(format!(
            "operator {}: shape {:?} does not broadcast to {:?}",
            call.name,
            &like.shape[..],
            &a.shape[..]
        )));
    }
    let lead = a.shape.len() - like.shape.len();
    let mask: Vec<bool> = (0..a.shape.len())
        .map(|i| i < lead || (like.shape[i - lead] == 1 && a.shape[i] != 1))
        .collect();
    let shape = dims(&a.shape);
    let dtype = a.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&like.shape, dtype)],
        move |k| {
            let (x, out) = (&k.inputs[0], &mut k.outputs[0]);
            if !mask.contains(&true) {
                // nothing was broadcast (the gradient of a same-shape broadcasting op): a
                // parallel copy
                let n = out.len();
                // SAFETY: input and output hold `n` elements of `dtype` (`like` has `a`'s
                // shape here); the runner gives the output its own buffer (not elementwise).
                crate::with_element!(dtype, T => unsafe {
                    map1(x.ptr::<T>(), out.ptr::<T>(), n, 1, |v: T| v)
                });
                return Ok(());
            }
            crate::with_element!(dtype, T => {
                reduce(x.slice::<T>(), &shape, &mask, out.slice_mut::<T>(), 0f64,
                    |acc, v: T, _| acc + v.to_f64(), |acc, _| T::from_f64(acc));
            });
            Ok(())
        },
    ))
}

/// `_mxrt_broadcast_to_like(a, like)`: `a` broadcast to `like`'s shape (numpy's rule).
fn broadcast_to_like(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 2)?;
    let (a, like) = (&ins[0], &ins[1]);
    if !broadcasts(&a.shape, &like.shape) {
        return Err(Error::invalid(format!(
            "operator {}: shape {:?} does not broadcast to {:?}",
            call.name,
            &a.shape[..],
            &like.shape[..]
        )));
    }
    let strides = broadcast_strides(&a.shape, &like.shape);
    let shape = dims(&like.shape);
    let dtype = a.dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&like.shape, dtype)],
        move |k| {
            let (x, out) = (&k.inputs[0], &mut k.outputs[0]);
            crate::with_element!(dtype, T => {
                gather(x.slice::<T>(), 0, &strides, &shape, out.slice_mut::<T>());
            });
            Ok(())
        },
    ))
}

pub(crate) fn register(t: &mut Entries) {
    t.def("_mxrt_sum_to_like", &sum_to_like).grad(|g| {
        let dx = g.op("_mxrt_broadcast_to_like", &[g.dy(0), g.x(0)], &[])?;
        Ok(vec![Some(dx), None])
    });
    t.def("_mxrt_broadcast_to_like", &broadcast_to_like).grad(|g| {
        let dx = g.op("_mxrt_sum_to_like", &[g.dy(0), g.x(0)], &[])?;
        Ok(vec![Some(dx), None])
    });
}
