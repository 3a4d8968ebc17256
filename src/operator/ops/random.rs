//! Random sampling: `_random_*` (scalar parameters, a shape), `_random_*_like` (another array's
//! shape), `_sample_*` (one parameter set per element of the parameter arrays), `_shuffle` and
//! `_sample_multinomial`. Draws come from the device's kRandom resource, so `MXRandomSeed` makes
//! them reproducible; the engine op holds the resource's variable while it draws.

use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, KernelArgs, Plan, TensorDesc};
use crate::operator::param;
use crate::resource::{RandomGenerator, ResourceRequest};

/// A distribution: draws one value from its parameters (up to two).
type Draw = fn(&mut RandomGenerator, f64, f64) -> f64;

fn normal_draw(g: &mut RandomGenerator) -> f64 {
    let r = (-2.0 * (1.0 - g.next_unit()).ln()).sqrt();
    r * (std::f64::consts::TAU * g.next_unit()).cos()
}

fn uniform(g: &mut RandomGenerator, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * g.next_unit()
}

fn normal(g: &mut RandomGenerator, mu: f64, sigma: f64) -> f64 {
    mu + sigma * normal_draw(g)
}

/// Gamma(shape `a`, scale `b`): Marsaglia and Tsang's method; `a < 1` boosted by `u^(1/a)`.
fn gamma(g: &mut RandomGenerator, a: f64, b: f64) -> f64 {
    if a <= 0.0 {
        return 0.0;
    }
    let (a1, boost) = if a < 1.0 {
        (a + 1.0, (1.0 - g.next_unit()).powf(1.0 / a))
    } else {
        (a, 1.0)
    };
    let d = a1 - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal_draw(g);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = 1.0 - g.next_unit();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v * boost * b;
        }
    }
}

fn exponential(g: &mut RandomGenerator, lam: f64, _: f64) -> f64 {
    -(1.0 - g.next_unit()).ln() / lam
}

/// Poisson(`lam`): multiplication of uniforms for small means, Hörmann's PTRS otherwise.
fn poisson(g: &mut RandomGenerator, lam: f64, _: f64) -> f64 {
    if lam <= 0.0 {
        return 0.0;
    }
    if lam < 10.0 {
        let limit = (-lam).exp();
        let mut k = 0.0;
        let mut p = g.next_unit();
        while p > limit {
            k += 1.0;
            p *= g.next_unit();
        }
        return k;
    }
    let slam = lam.sqrt();
    let loglam = lam.ln();
    let b = 0.931 + 2.53 * slam;
    let a = -0.059 + 0.02483 * b;
    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    let vr = 0.9277 - 3.6224 / (b - 2.0);
    loop {
        let u = g.next_unit() - 0.5;
        let v = 1.0 - g.next_unit();
        let us = 0.5 - u.abs();
        let k = ((2.0 * a / us + b) * u + lam + 0.43).floor();
        if us >= 0.07 && v <= vr {
            return k;
        }
        if k < 0.0 || (us < 0.013 && v > us) {
            continue;
        }
        let lhs = (v * inv_alpha / (a / (us * us) + b)).ln();
        let rhs = -lam + k * loglam - libm::lgamma(k + 1.0);
        if lhs <= rhs {
            return k;
        }
    }
}

fn negative_binomial(g: &mut RandomGenerator, k: f64, p: f64) -> f64 {
    let lam = gamma(g, k, (1.0 - p) / p);
    poisson(g, lam, 0.0)
}

fn generalized_negative_binomial(g: &mut RandomGenerator, mu: f64, alpha: f64) -> f64 {
    if alpha == 0.0 {
        return poisson(g, mu, 0.0);
    }
    let lam = gamma(g, 1.0 / alpha, alpha * mu);
    poisson(g, lam, 0.0)
}

fn randint(g: &mut RandomGenerator, lo: f64, hi: f64) -> f64 {
    let span = (hi - lo) as u64;
    lo + (g.next_u64() % span.max(1)) as f64
}

/// A distribution's parameter names, defaults and checks.
struct Dist {
    draw: Draw,
    params: [(&'static str, f64); 2],
    /// How many of `params` it has.
    arity: usize,
    /// Checks a parameter pair, returning what is wrong.
    check: fn(f64, f64) -> Option<&'static str>,
}

const UNIFORM: Dist = Dist {
    draw: uniform,
    params: [("low", 0.0), ("high", 1.0)],
    arity: 2,
    check: |l, h| (l > h).then_some("low must not exceed high"),
};
const NORMAL: Dist = Dist {
    draw: normal,
    params: [("loc", 0.0), ("scale", 1.0)],
    arity: 2,
    check: |_, s| (s < 0.0).then_some("scale must not be negative"),
};
const GAMMA: Dist = Dist {
    draw: gamma,
    params: [("alpha", 1.0), ("beta", 1.0)],
    arity: 2,
    check: |a, b| (a <= 0.0 || b <= 0.0).then_some("alpha and beta must be positive"),
};
const EXPONENTIAL: Dist = Dist {
    draw: exponential,
    params: [("lam", 1.0), ("", 0.0)],
    arity: 1,
    check: |l, _| (l <= 0.0).then_some("lam must be positive"),
};
const POISSON: Dist = Dist {
    draw: poisson,
    params: [("lam", 1.0), ("", 0.0)],
    arity: 1,
    check: |l, _| (l < 0.0).then_some("lam must not be negative"),
};
const NEG_BINOMIAL: Dist = Dist {
    draw: negative_binomial,
    params: [("k", 1.0), ("p", 1.0)],
    arity: 2,
    check: |k, p| {
        (k <= 0.0 || !(p > 0.0 && p <= 1.0)).then_some("k must be positive and p in (0, 1]")
    },
};
const GEN_NEG_BINOMIAL: Dist = Dist {
    draw: generalized_negative_binomial,
    params: [("mu", 1.0), ("alpha", 1.0)],
    arity: 2,
    check: |m, a| (m < 0.0 || a < 0.0).then_some("mu and alpha must not be negative"),
};
const RANDINT: Dist = Dist {
    draw: randint,
    params: [("low", f64::NAN), ("high", f64::NAN)],
    arity: 2,
    check: |l, h| (l >= h).then_some("low must be less than high"),
};

/// Draws into `out[k]` for every element, one parameter pair per `per` outputs.
fn fill(k: &mut KernelArgs<'_>, dist: Draw, pairs: &[(f64, f64)], per: usize) -> Result<()> {
    let res = k
        .resource
        .ok_or_else(|| Error::invalid("random op without its generator"))?;
    let mut g = res.random()?;
    let out = &mut k.outputs[0];
    let dtype = out.dtype;
    crate::with_element!(dtype, T => {
        for (i, o) in out.slice_mut::<T>().iter_mut().enumerate() {
            let (a, b) = pairs[if pairs.len() == 1 { 0 } else { i / per.max(1) }];
            *o = T::from_f64(dist(&mut g, a, b));
        }
    });
    Ok(())
}

fn scalar_params(call: &Call<'_>, dist: &Dist) -> Result<(f64, f64)> {
    let mut v = [0.0; 2];
    for (i, &(name, default)) in dist.params.iter().take(dist.arity).enumerate() {
        v[i] = if default.is_nan() {
            call.params.required(name, param::float, "a number")?
        } else {
            call.params.or(name, param::float, "a number", default)?
        };
    }
    Ok((v[0], v[1]))
}

/// A draw from scalar parameters, checked when the kernel runs: MXNet checks the parameters'
/// values in its sampling kernels, so a bad value (`scale=-1`) reaches the caller at the next
/// wait on the output, like any engine error, not at the invoke.
fn fill_checked(
    k: &mut crate::operator::op::KernelArgs<'_>,
    name: &str,
    dist: &'static Dist,
    pair: (f64, f64),
) -> Result<()> {
    if let Some(what) = (dist.check)(pair.0, pair.1) {
        return Err(Error::invalid(format!("operator {name}: {what}")));
    }
    fill(k, dist.draw, &[pair], 1)
}

/// `_random_<dist>`: a shape, a context and a dtype as parameters.
fn random(call: &Call<'_>, dist: &'static Dist, int: bool) -> Result<Plan> {
    inputs(call, 0)?;
    let pair = scalar_params(call, dist)?;
    let shape = call.params.or("shape", param::shape, "a shape", vec![])?;
    // Without a dtype, MXNet's type inference keeps the dtype of an `out=` array it writes
    // (Gluon's initialisers fill float64 parameters this way); otherwise float32 (int32 for
    // `randint`).
    let given = call
        .given_outputs
        .and_then(|o| o.first())
        .map(|d| d.dtype)
        .filter(|&d| int || matches!(d, DType::F32 | DType::F64 | DType::F16));
    let default = given.unwrap_or(if int { DType::I32 } else { DType::F32 });
    let dtype = call
        .params
        .optional("dtype", param::dtype, "a dtype name")?
        .unwrap_or(default);
    let ctx = match call.params.raw("ctx").map(str::trim) {
        None | Some("") | Some("None") => crate::context::Context::cpu(0),
        Some(s) => param::context(s).ok_or_else(|| {
            Error::invalid(format!(
                "operator {}: parameter 'ctx' must be a context, got '{s}'",
                call.name
            ))
        })?,
    };
    let name = call.name.to_owned();
    Ok(Plan::new(vec![TensorDesc::new(&shape, dtype)], move |k| {
        fill_checked(k, &name, dist, pair)
    })
    .with_resource(ResourceRequest::Random)
    .on(Some(ctx)))
}

/// `_random_<dist>_like`: the shape and dtype of the input.
fn random_like(call: &Call<'_>, dist: &'static Dist) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let pair = scalar_params(call, dist)?;
    let name = call.name.to_owned();
    Ok(Plan::new(vec![x], move |k| fill_checked(k, &name, dist, pair))
        .with_resource(ResourceRequest::Random))
}

/// `_sample_<dist>`: parameter arrays of one shape `S`; the output is `S + shape`.
fn sample(call: &Call<'_>, dist: &'static Dist) -> Result<Plan> {
    let ins = inputs(call, dist.arity)?;
    if dist.arity == 2 && (ins[0].shape != ins[1].shape || ins[0].dtype != ins[1].dtype) {
        return Err(Error::invalid(format!(
            "operator {}: the parameter arrays must have one shape and dtype",
            call.name
        )));
    }
    let extra = call.params.or("shape", param::shape, "a shape", vec![])?;
    let dtype = call
        .params
        .optional("dtype", param::dtype, "a dtype name")?
        .unwrap_or(ins[0].dtype);
    let mut out = ins[0].shape.to_vec();
    out.extend_from_slice(&extra);
    let per: usize = extra.iter().map(|&d| d.max(0) as usize).product();
    let arity = dist.arity;
    let name = call.name.to_owned();
    Ok(Plan::new(vec![TensorDesc::new(&out, dtype)], move |k| {
        let read = |t: &crate::operator::tensor::Tensor| -> Vec<f64> {
            crate::with_element!(t.dtype, P => t.slice::<P>().iter().map(|v| v.to_f64()).collect())
        };
        let a = read(&k.inputs[0]);
        let b = if arity == 2 {
            read(&k.inputs[1])
        } else {
            vec![0.0; a.len()]
        };
        let pairs: Vec<(f64, f64)> = a.into_iter().zip(b).collect();
        if let Some(what) = pairs.iter().find_map(|&(x, y)| (dist.check)(x, y)) {
            return Err(Error::invalid(format!("operator {name}: {what}")));
        }
        if pairs.is_empty() {
            return Ok(());
        }
        fill(k, dist.draw, &pairs, per)
    })
    .with_resource(ResourceRequest::Random))
}

/// `_shuffle`: the rows (first axis) in a random order.
fn shuffle(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let rows = x.shape.first().copied().unwrap_or(1).max(0) as usize;
    let row = if rows == 0 { 0 } else { x.size() / rows };
    let dtype = x.dtype;
    Ok(Plan::new(vec![x], move |k| {
        let res = k
            .resource
            .ok_or_else(|| Error::invalid("random op without its generator"))?;
        let mut order: Vec<usize> = (0..rows).collect();
        {
            let mut g = res.random()?;
            for i in (1..rows).rev() {
                let j = (g.next_u64() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
        }
        crate::with_element!(dtype, T => {
            let src = k.inputs[0].slice::<T>();
            let out = k.outputs[0].slice_mut::<T>();
            for (dst, &from) in order.iter().enumerate() {
                out[dst * row..(dst + 1) * row].copy_from_slice(&src[from * row..(from + 1) * row]);
            }
        });
        Ok(())
    })
    .with_resource(ResourceRequest::Random))
}

/// `_sample_unique_zipfian`: for each of `shape[0]` rows, `shape[1]` distinct classes in
/// `[0, range_max)` drawn from the log-uniform (Zipfian) distribution, and the number of draws
/// each row took.
fn unique_zipfian(call: &Call<'_>) -> Result<Plan> {
    inputs(call, 0)?;
    let p = call.params;
    let range_max = p.required("range_max", param::int, "an integer")?;
    let shape = p.or("shape", param::shape, "a shape", vec![])?;
    let fail = |m: String| Err(Error::invalid(format!("operator {}: {m}", call.name)));
    let (rows, per) = match shape[..] {
        [r, c] if r >= 0 && c >= 0 => (r as usize, c as usize),
        _ => return fail(format!("shape must be (batch, num_sampled), got {shape:?}")),
    };
    if range_max <= 0 || per as i64 > range_max {
        return fail(format!(
            "cannot draw {per} distinct classes out of range_max {range_max}"
        ));
    }
    let log_range = (range_max as f64).ln();
    let outs = vec![
        TensorDesc::new(&shape, DType::I64),
        TensorDesc::new(&[shape[0]], DType::I64),
    ];
    Ok(Plan::new(outs, move |k| {
        let res = k
            .resource
            .ok_or_else(|| Error::invalid("random op without its generator"))?;
        let mut g = res.random()?;
        let (samples, tries) = k.outputs.split_at_mut(1);
        let (samples, tries) = (samples[0].slice_mut::<i64>(), tries[0].slice_mut::<i64>());
        let mut seen = std::collections::HashSet::with_capacity(per);
        for r in 0..rows {
            seen.clear();
            let row = &mut samples[r * per..(r + 1) * per];
            let mut n = 0i64;
            while seen.len() < per {
                let v = (g.next_unit() * log_range).exp().round() as i64 - 1;
                if seen.insert(v) {
                    row[seen.len() - 1] = v;
                }
                n += 1;
            }
            tries[r] = n;
        }
        Ok(())
    })
    .with_resource(ResourceRequest::Random)
    .on(Some(crate::context::Context::cpu(0))))
}

/// `_sample_multinomial(data)`: indices drawn from each row's probabilities (last axis), `shape`
/// draws per row; with `get_prob` also the log-probability of each draw.
fn multinomial(call: &Call<'_>) -> Result<Plan> {
    let x = inputs(call, 1)?[0].clone();
    let p = call.params;
    let extra = p.or("shape", param::shape, "a shape", vec![])?;
    let get_prob = p.or("get_prob", param::boolean, "a boolean", false)?;
    let dtype = p.or("dtype", param::dtype, "a dtype name", DType::I32)?;
    let k = *x.shape.last().ok_or_else(|| {
        Error::invalid(format!(
            "operator {}: data must have a dimension",
            call.name
        ))
    })? as usize;
    let mut out = x.shape[..x.shape.len() - 1].to_vec();
    out.extend_from_slice(&extra);
    let per: usize = extra.iter().map(|&d| d.max(0) as usize).product();
    let mut outputs = vec![TensorDesc::new(&out, dtype)];
    if get_prob {
        outputs.push(TensorDesc::new(&out, x.dtype));
    }
    let xdt = x.dtype;
    Ok(Plan::new(outputs, move |kargs| {
        let probs: Vec<f64> = crate::with_element!(xdt, P => kargs.inputs[0].slice::<P>().iter().map(|v| v.to_f64()).collect());
        let rows = if k == 0 { 0 } else { probs.len() / k };
        let mut picks = Vec::with_capacity(rows * per);
        {
            let res = kargs.resource.ok_or_else(|| Error::invalid("random op without its generator"))?;
            let mut g = res.random()?;
            for r in 0..rows {
                let row = &probs[r * k..(r + 1) * k];
                for _ in 0..per {
                    let u = g.next_unit();
                    let mut acc = 0.0;
                    let mut pick = k.saturating_sub(1);
                    for (j, &pj) in row.iter().enumerate() {
                        acc += pj;
                        if u < acc {
                            pick = j;
                            break;
                        }
                    }
                    picks.push((pick, row.get(pick).copied().unwrap_or(0.0)));
                }
            }
        }
        let (first, rest) = kargs.outputs.split_at_mut(1);
        crate::with_element!(dtype, I => {
            for (o, &(j, _)) in first[0].slice_mut::<I>().iter_mut().zip(&picks) {
                *o = I::from_f64(j as f64);
            }
        });
        if let Some(lp) = rest.first_mut() {
            crate::with_element!(xdt, P => {
                for (o, &(_, pj)) in lp.slice_mut::<P>().iter_mut().zip(&picks) {
                    *o = P::from_f64(pj.ln());
                }
            });
        }
        Ok(())
    })
    .with_resource(ResourceRequest::Random))
}

pub(crate) fn register(t: &mut Entries) {
    t.push(("_sample_unique_zipfian", &unique_zipfian));
    t.push(("_random_uniform", &|c: &Call<'_>| {
        random(c, &UNIFORM, false)
    }));
    t.push(("_random_normal", &|c: &Call<'_>| random(c, &NORMAL, false)));
    t.push(("_random_gamma", &|c: &Call<'_>| random(c, &GAMMA, false)));
    t.push(("_random_exponential", &|c: &Call<'_>| {
        random(c, &EXPONENTIAL, false)
    }));
    t.push(("_random_poisson", &|c: &Call<'_>| {
        random(c, &POISSON, false)
    }));
    t.push(("_random_negative_binomial", &|c: &Call<'_>| {
        random(c, &NEG_BINOMIAL, false)
    }));
    t.push(("_random_generalized_negative_binomial", &|c: &Call<'_>| {
        random(c, &GEN_NEG_BINOMIAL, false)
    }));
    t.push(("_random_randint", &|c: &Call<'_>| random(c, &RANDINT, true)));
    t.push(("_random_uniform_like", &|c: &Call<'_>| {
        random_like(c, &UNIFORM)
    }));
    t.push(("_random_normal_like", &|c: &Call<'_>| {
        random_like(c, &NORMAL)
    }));
    t.push(("_random_gamma_like", &|c: &Call<'_>| random_like(c, &GAMMA)));
    t.push(("_random_exponential_like", &|c: &Call<'_>| {
        random_like(c, &EXPONENTIAL)
    }));
    t.push(("_random_poisson_like", &|c: &Call<'_>| {
        random_like(c, &POISSON)
    }));
    t.push(("_random_negative_binomial_like", &|c: &Call<'_>| {
        random_like(c, &NEG_BINOMIAL)
    }));
    t.push(("_random_generalized_negative_binomial_like", &|c: &Call<
        '_,
    >| {
        random_like(c, &GEN_NEG_BINOMIAL)
    }));
    t.push(("_sample_uniform", &|c: &Call<'_>| {
        sample(
            c,
            &Dist {
                params: [("low", 0.0), ("high", 1.0)],
                ..UNIFORM
            },
        )
    }));
    t.push(("_sample_normal", &|c: &Call<'_>| sample(c, &NORMAL)));
    t.push(("_sample_gamma", &|c: &Call<'_>| sample(c, &GAMMA)));
    t.push(("_sample_exponential", &|c: &Call<'_>| {
        sample(c, &EXPONENTIAL)
    }));
    t.push(("_sample_poisson", &|c: &Call<'_>| sample(c, &POISSON)));
    t.push(("_sample_negative_binomial", &|c: &Call<'_>| {
        sample(c, &NEG_BINOMIAL)
    }));
    t.push(("_sample_generalized_negative_binomial", &|c: &Call<'_>| {
        sample(c, &GEN_NEG_BINOMIAL)
    }));
    // MXNet: the *_like and _sample_* draws have zero gradient; _shuffle none; multinomial
    // differentiates its log-likelihood output (get_prob=True)
    for d in t.0.iter_mut().filter(|d| {
        (d.name.starts_with("_random_") && d.name.ends_with("_like"))
            || (d.name.starts_with("_sample_") && d.name != "_sample_unique_zipfian")
    }) {
        d.zero_grad();
    }
    t.push(("_shuffle", &shuffle));
    t.push(("_sample_multinomial", &multinomial)).grad(|g| {
        if !g.flag("get_prob", false) {
            return Ok(vec![None]);
        }
        let dx = g.op("_mxrt_multinomial_grad", &[g.dy(1), g.x(0), g.y(0)], &[])?;
        Ok(vec![Some(dx)])
    });
    t.def("_mxrt_multinomial_grad", &multinomial_backward);
}

/// `_mxrt_multinomial_grad(dy, p, idx)`: the gradient of the log-likelihoods
/// `log p[.., idx[.., j]]` that `_sample_multinomial(get_prob=True)` returns: `dy / p` added at
/// each drawn class.
fn multinomial_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = inputs(call, 3)?;
    let (dy, x, idx) = (&ins[0], &ins[1], &ins[2]);
    let k = x.shape.last().copied().unwrap_or(0).max(0) as usize;
    let rows = x.size().checked_div(k).unwrap_or(0);
    if dy.shape != idx.shape || dy.dtype != x.dtype || (rows > 0 && idx.size() % rows != 0) {
        return Err(Error::invalid(format!(
            "operator {}: draws of shape {:?} do not fit probabilities of shape {:?}",
            call.name,
            &idx.shape[..],
            &x.shape[..]
        )));
    }
    let per = idx.size().checked_div(rows).unwrap_or(0);
    let (dtype, idt) = (x.dtype, idx.dtype);
    Ok(Plan::new(vec![x.clone()], move |kargs| {
        let picks: Vec<usize> = crate::with_element!(idt, I => kargs.inputs[2].slice::<I>().iter().map(|v| v.to_f64() as usize).collect());
        crate::with_element!(dtype, T => {
            let (dy, p) = (kargs.inputs[0].slice::<T>(), kargs.inputs[1].slice::<T>());
            let out = kargs.outputs[0].slice_mut::<T>();
            out.fill(T::zero());
            for (i, (&j, &d)) in picks.iter().zip(dy).enumerate() {
                if j >= k {
                    return Err(Error::invalid(format!("class {j} is out of range for {k} classes")));
                }
                let at = (i / per.max(1)) * k + j;
                out[at] = T::from_f64(out[at].to_f64() + d.to_f64() / p[at].to_f64());
            }
        });
        Ok(())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::StreamId;

    fn moments(d: Draw, a: f64, b: f64) -> (f64, f64) {
        let mut g = RandomGenerator::new(StreamId {
            seed: 7,
            ctx: crate::context::Context::cpu(0),
            kind: 0,
            copy: 0,
            stream: 0,
        });
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| d(&mut g, a, b)).collect();
        let m = xs.iter().sum::<f64>() / n as f64;
        let v = xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n as f64;
        (m, v)
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "moments of 200 000 draws per distribution: hours interpreted, and the samplers \
                  are safe code"
    )]
    fn samplers_have_their_distributions_moments() {
        let close = |got: f64, want: f64| (got - want).abs() <= 0.02 * want.abs().max(1.0);
        let (m, v) = moments(gamma, 2.5, 2.0);
        assert!(close(m, 5.0) && close(v, 10.0), "gamma {m} {v}");
        let (m, v) = moments(gamma, 0.5, 1.0);
        assert!(close(m, 0.5) && close(v, 0.5), "gamma<1 {m} {v}");
        for lam in [3.0, 50.0] {
            let (m, v) = moments(poisson, lam, 0.0);
            assert!(close(m, lam) && close(v, lam), "poisson {lam}: {m} {v}");
        }
        let (m, v) = moments(exponential, 2.0, 0.0);
        assert!(close(m, 0.5) && close(v, 0.25), "exponential {m} {v}");
        let (m, v) = moments(negative_binomial, 3.0, 0.4);
        assert!(
            close(m, 4.5) && close(v, 11.25),
            "negative binomial {m} {v}"
        );
        let (m, v) = moments(normal, 1.0, 2.0);
        assert!(close(m, 1.0) && close(v, 4.0), "normal {m} {v}");
    }
}
