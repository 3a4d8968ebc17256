//! LAMB updates: `lamb_update_phase1` (moments and the update direction), `lamb_update_phase2`
//! (the step scaled by the trust ratio of the weight and direction norms), their `mp_*` forms,
//! and the aggregated `_multi_lamb_update` / `_multi_mp_lamb_update`, which compute the norms
//! themselves. float16 and float32 weights compute in f32, float64 in f64.

use super::lars::sum_sq;
use super::optimizer::{check_group, check_len, per_weight};
use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, KernelArgs, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

/// An input's values as f64.
fn read(t: &Tensor) -> Vec<f64> {
    let p = Elements::of(t);
    (0..t.len()).map(|i| p.get(i)).collect()
}

/// Element access to an array the op reads or mutates (mutated inputs are not exclusive, so
/// they are reached through the tensor's pointer).
#[derive(Clone, Copy)]
struct Elements<'a> {
    t: &'a Tensor,
}

impl<'a> Elements<'a> {
    fn of(t: &'a Tensor) -> Self {
        Elements { t }
    }

    fn get(&self, i: usize) -> f64 {
        assert!(i < self.t.len());
        // SAFETY: `i` is in bounds and the pointer is typed by the tensor's own dtype; the engine
        // op holds the array for the whole kernel and no write is in flight during this read
        // (this module reads and writes element by element on one thread).
        crate::with_element!(self.t.dtype, T => unsafe { self.t.ptr::<T>().add(i).read().to_f64() })
    }

    fn set(&self, i: usize, v: f64) {
        assert!(i < self.t.len());
        // SAFETY: as in `get`; the plan lists this array as an output or a mutated input, so the
        // engine op holds write access to it.
        crate::with_element!(self.t.dtype, T => unsafe { self.t.ptr::<T>().add(i).write(T::from_f64(v)) })
    }
}

/// Rounds `v` to the compute type: f32 unless the weight is float64.
fn round(wide: bool, v: f64) -> f64 {
    if wide { v } else { v as f32 as f64 }
}

/// MXNet's optimizer parameters are float32 whatever the weights' type.
fn f32_param(v: f64) -> f64 {
    v as f32 as f64
}

/// Moments and direction of one weight.
#[derive(Clone, Copy)]
struct Phase1 {
    beta1: f64,
    beta2: f64,
    epsilon: f64,
    t: f64,
    bias_correction: bool,
    wd: f64,
    rescale: f64,
    clip: f64,
}

impl Phase1 {
    fn parse(call: &Call<'_>, per_weight: bool) -> Result<Phase1> {
        let p = call.params;
        let f = f32_param;
        Ok(Phase1 {
            beta1: f(p.or("beta1", param::float, "a number", 0.9)?),
            beta2: f(p.or("beta2", param::float, "a number", 0.999)?),
            epsilon: f(p.or("epsilon", param::float, "a number", 1e-6)?),
            t: if per_weight {
                0.0
            } else {
                p.required("t", param::int, "an integer")? as f64
            },
            bias_correction: p.or("bias_correction", param::boolean, "a boolean", true)?,
            wd: if per_weight {
                0.0
            } else {
                f(p.required("wd", param::float, "a number")?)
            },
            rescale: f(p.or("rescale_grad", param::float, "a number", 1.0)?),
            clip: f(p.or("clip_gradient", param::float, "a number", -1.0)?),
        })
    }

    /// Updates the moments and returns the direction (`weight` is the master copy under mixed
    /// precision).
    fn apply(&self, wide: bool, [weight, grad, mean, var]: [Elements<'_>; 4]) -> Vec<f64> {
        let n = grad.t.len();
        let mut dir = Vec::with_capacity(n);
        let r = |v: f64| round(wide, v);
        let (b1t, b2t) = (r(self.beta1.powf(self.t)), r(self.beta2.powf(self.t)));
        for i in 0..n {
            let mut g = r(grad.get(i) * self.rescale);
            if self.clip >= 0.0 {
                g = g.clamp(-self.clip, self.clip);
            }
            let m = r(r(self.beta1 * mean.get(i)) + r((1.0 - self.beta1) * g));
            let v = r(r(self.beta2 * var.get(i)) + r(r((1.0 - self.beta2) * g) * g));
            mean.set(i, m);
            var.set(i, v);
            let (m, v) = if self.bias_correction {
                // MXNet divides the mean by a double (1.0 - b1t) and the variance by a float.
                (r(m / (1.0 - b1t)), r(v / r(1.0 - b2t)))
            } else {
                (m, v)
            };
            dir.push(r(
                r(m / r(r(v.sqrt()) + self.epsilon)) + r(self.wd * weight.get(i))
            ));
        }
        dir
    }
}

/// The trust-ratio learning rate: `lr * r1 / r2` with `r1` bounded, or `lr` when a norm is zero.
fn trust_lr(lr: f64, r1: f64, r2: f64, lower: f64, upper: f64) -> f64 {
    let mut r1 = r1;
    if lower >= 0.0 {
        r1 = r1.max(lower);
    }
    if upper >= 0.0 {
        r1 = r1.min(upper);
    }
    if r1 == 0.0 || r2 == 0.0 {
        lr
    } else {
        lr * r1 / r2
    }
}

fn phase1(call: &Call<'_>, mp: bool) -> Result<Plan> {
    let n_in = 4 + usize::from(mp);
    let ins = inputs(call, n_in)?;
    check_group(call, 0, n_in - 2 - usize::from(mp), mp)?;
    let ph = Phase1::parse(call, false)?;
    let w = &ins[0];
    let out_dtype = if mp { DType::F32 } else { w.dtype };
    let wide = w.dtype == DType::F64;
    Ok(Plan::new(
        vec![TensorDesc::new(&w.shape, out_dtype)],
        move |k: &mut KernelArgs<'_>| {
            let weight = Elements::of(&k.inputs[if mp { 4 } else { 0 }]);
            let (grad, mean, var) = (
                Elements::of(&k.inputs[1]),
                Elements::of(&k.inputs[2]),
                Elements::of(&k.inputs[3]),
            );
            let dir = ph.apply(wide, [weight, grad, mean, var]);
            let out = &mut k.outputs[0];
            crate::with_element!(out.dtype, T => {
                for (o, v) in out.slice_mut::<T>().iter_mut().zip(dir) {
                    *o = T::from_f64(v);
                }
            });
            Ok(())
        },
    )
    .mutating(&[2, 3]))
}

fn phase2(call: &Call<'_>, mp: bool) -> Result<Plan> {
    let n_in = 4 + usize::from(mp);
    let ins = inputs(call, n_in)?;
    let w = &ins[0];
    let dir_dtype = if mp { DType::F32 } else { w.dtype };
    check_len(call, 2, 1, "r1")?;
    check_len(call, 3, 1, "r2")?;
    if ins[1].shape != w.shape
        || ins[1].dtype != dir_dtype
        || (mp && (ins[4].shape != w.shape || ins[4].dtype != DType::F32))
    {
        return Err(Error::invalid(format!(
            "operator {}: the direction{} must have the weight's shape {:?} (dtype {})",
            call.name,
            if mp { " and master weight" } else { "" },
            &w.shape[..],
            dir_dtype.name()
        )));
    }
    let p = call.params;
    let f = f32_param;
    let lr = f(p.required("lr", param::float, "a number")?);
    let lower = f(p.or("lower_bound", param::float, "a number", -1.0)?);
    let upper = f(p.or("upper_bound", param::float, "a number", -1.0)?);
    let wide = w.dtype == DType::F64;
    Ok(Plan::new(vec![w.clone()], move |k| {
        let r1 = Elements::of(&k.inputs[2]).get(0);
        let r2 = Elements::of(&k.inputs[3]).get(0);
        let lr_t = round(wide, trust_lr(lr, r1, r2, lower, upper));
        let weight = read(&k.inputs[if mp { 4 } else { 0 }]);
        let dir = read(&k.inputs[1]);
        let out = &mut k.outputs[0];
        crate::with_element!(out.dtype, T => {
            for ((o, w), d) in out.slice_mut::<T>().iter_mut().zip(weight).zip(dir) {
                *o = T::from_f64(round(wide, w - round(wide, lr_t * d)));
            }
        });
        Ok(())
    }))
}

/// `_multi_lamb_update` and `_multi_mp_lamb_update`: both phases for up to 45 weights, with the
/// norms computed in between.
fn multi(call: &Call<'_>, mp: bool) -> Result<Plan> {
    let p = call.params;
    let count = p.or("num_tensors", param::int, "an integer", 1)?;
    if !(1..=45).contains(&count) {
        return Err(Error::invalid(format!(
            "operator {}: num_tensors must be 1 to 45, got {count}",
            call.name
        )));
    }
    let count = count as usize;
    let per = |name: &str| per_weight(call, name, count, "num_tensors");
    let lrs = per("learning_rates")?;
    let wds = per("wds")?;
    let steps = per("step_count")?;
    let ph = Phase1::parse(call, true)?;
    let f = f32_param;
    let lower = f(p.or("lower_bound", param::float, "a number", -1.0)?);
    let upper = f(p.or("upper_bound", param::float, "a number", -1.0)?);
    let (lrs, wds): (Vec<f64>, Vec<f64>) = (
        lrs.into_iter().map(f).collect(),
        wds.into_iter().map(f).collect(),
    );
    let stride = 4 + usize::from(mp);
    inputs(call, count * stride)?;
    let mut outputs = Vec::with_capacity(count);
    let mut mutated = Vec::new();
    for i in 0..count {
        check_group(call, i * stride, 2, mp)?;
        outputs.push(call.inputs[i * stride].clone());
        mutated.extend([i * stride + 2, i * stride + 3]);
        if mp {
            mutated.push(i * stride + 4);
        }
    }
    let wide = call.inputs[0].dtype == DType::F64;
    Ok(Plan::new(outputs, move |k| {
        for i in 0..count {
            let base = i * stride;
            let master = mp.then(|| Elements::of(&k.inputs[base + 4]));
            let weight = master.unwrap_or_else(|| Elements::of(&k.inputs[base]));
            let step = Phase1 {
                t: steps[i],
                wd: wds[i],
                ..ph
            };
            let dir = step.apply(
                wide,
                [
                    weight,
                    Elements::of(&k.inputs[base + 1]),
                    Elements::of(&k.inputs[base + 2]),
                    Elements::of(&k.inputs[base + 3]),
                ],
            );
            // The norms are taken in f32 over the (low-precision) weight and the direction.
            let r1 = sum_sq(read(&k.inputs[base]).into_iter()).sqrt();
            let r2 = sum_sq(dir.iter().copied()).sqrt();
            let lr_t = round(wide, trust_lr(lrs[i], r1 as f64, r2 as f64, lower, upper));
            let out = Elements::of(&k.outputs[i]);
            for (j, d) in dir.into_iter().enumerate() {
                let w = round(wide, weight.get(j) - round(wide, lr_t * d));
                if let Some(m) = &master {
                    m.set(j, w);
                }
                out.set(j, w);
            }
        }
        Ok(())
    })
    .mutating(&mutated))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("lamb_update_phase1", &|c: &Call<'_>| phase1(c, false)));
    t.push(("mp_lamb_update_phase1", &|c: &Call<'_>| phase1(c, true)));
    t.push(("lamb_update_phase2", &|c: &Call<'_>| phase2(c, false)));
    t.push(("mp_lamb_update_phase2", &|c: &Call<'_>| phase2(c, true)));
    t.push(("_multi_lamb_update", &|c: &Call<'_>| multi(c, false)));
    t.push(("_multi_mp_lamb_update", &|c: &Call<'_>| multi(c, true)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_ratio_bounds_the_weight_norm_and_skips_zero_norms() {
        assert_eq!(trust_lr(0.1, 2.0, 4.0, -1.0, -1.0), 0.05);
        assert_eq!(trust_lr(0.1, 2.0, 4.0, 8.0, -1.0), 0.2);
        assert_eq!(trust_lr(0.1, 2.0, 4.0, -1.0, 1.0), 0.025);
        assert_eq!(trust_lr(0.1, 0.0, 4.0, -1.0, -1.0), 0.1);
        assert_eq!(trust_lr(0.1, 2.0, 0.0, -1.0, -1.0), 0.1);
    }
}
