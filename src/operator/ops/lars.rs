//! LARS: `multi_sum_sq` (the squared L2 norm of each of several arrays) and `multi_lars` (each
//! layer's learning rate scaled by the ratio of its weight and gradient norms), which the
//! package's `LARS` optimizer runs before its `preloaded_multi_*` SGD update.

use super::optimizer::check_len;
use super::{Entries, inputs, same_dtype};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

/// The sum of squares, accumulated in f32 as MXNet's CPU kernel does.
pub(super) fn sum_sq(values: impl Iterator<Item = f64>) -> f32 {
    values.map(|v| (v * v) as f32).sum()
}

fn multi_sum_sq(call: &Call<'_>) -> Result<Plan> {
    let n = call
        .params
        .required("num_arrays", param::int, "an integer")?;
    if n <= 0 {
        return Err(Error::invalid(format!(
            "operator {}: num_arrays must be positive, got {n}",
            call.name
        )));
    }
    let ins = inputs(call, n as usize)?;
    for i in 1..ins.len() {
        same_dtype(call, 0, i)?;
    }
    let dtype = ins[0].dtype;
    Ok(Plan::new(
        vec![TensorDesc::new(&[n], DType::F32)],
        move |k| {
            let sums: Vec<f32> = k
            .inputs
            .iter()
            .map(|t| crate::with_element!(dtype, T => sum_sq(t.slice::<T>().iter().map(|v| v.to_f64()))))
            .collect();
            k.outputs[0].slice_mut::<f32>().copy_from_slice(&sums);
            Ok(())
        },
    ))
}

/// `multi_lars(lrs, weights_sum_sq, grads_sum_sq, wds)`: `lr * eta * |w| / (|g| * rescale_grad
/// + wd * |w| + eps)` where both norms are positive, else `lr` unchanged.
fn multi_lars(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 4)?;
    let p = call.params;
    let eta = p.required("eta", param::float, "a number")? as f32;
    let eps = p.required("eps", param::float, "a number")? as f32;
    let rescale = p.or("rescale_grad", param::float, "a number", 1.0)? as f32;
    let n = ins[0].size();
    for (i, what) in ["lrs", "weights_sum_sq", "grads_sum_sq", "wds"]
        .iter()
        .enumerate()
    {
        check_len(call, i, n, what)?;
        if ins[i].dtype != DType::F32 {
            return Err(Error::invalid(format!(
                "operator {}: {what} must be float32, got {}",
                call.name,
                ins[i].dtype.name()
            )));
        }
    }
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        let [lrs, w, g, wds] = [0, 1, 2, 3].map(|i| k.inputs[i].slice::<f32>());
        let out: Vec<f32> = (0..lrs.len())
            .map(|i| {
                let w_norm = w[i].sqrt();
                if w_norm > 0.0 && g[i] > 0.0 {
                    lrs[i] * eta * w_norm / (g[i].sqrt() * rescale + wds[i] * w_norm + eps)
                } else {
                    lrs[i]
                }
            })
            .collect();
        k.outputs[0].slice_mut::<f32>().copy_from_slice(&out);
        Ok(())
    }))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("multi_sum_sq", &multi_sum_sq));
    t.push(("multi_lars", &multi_lars));
}
