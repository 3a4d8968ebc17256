//! The densities of the random distributions, `_random_pdf_<distr>(sample, params...; is_log)`
//! (aliases `random_pdf_<distr>`): uniform, normal, gamma, exponential, poisson,
//! negative_binomial, generalized_negative_binomial and dirichlet.
//!
//! The parameter arrays have one shape, the leftmost part of the sample's shape (dirichlet: its
//! last axis is the vector length `k`); every sample beneath a parameter index is drawn from
//! that distribution. Gradients, as MXNet's: each sample and parameter gets the derivative of
//! the density (or its log) times the head gradient, parameters summed over their samples; the
//! sample's gradient is zero for uniform and the discrete distributions
//! (`_mxrt_pdf_grad`).

use super::conv::float_dtype;
use super::misc::{read, write};
use super::unary::digamma;
use super::{Entries, inputs};
use crate::error::{Error, Result};
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dist {
    Uniform,
    Normal,
    Gamma,
    Exponential,
    Poisson,
    NegBinomial,
    GenNegBinomial,
    Dirichlet,
}

const ALL: [(&str, Dist); 8] = [
    ("uniform", Dist::Uniform),
    ("normal", Dist::Normal),
    ("gamma", Dist::Gamma),
    ("exponential", Dist::Exponential),
    ("poisson", Dist::Poisson),
    ("negative_binomial", Dist::NegBinomial),
    ("generalized_negative_binomial", Dist::GenNegBinomial),
    ("dirichlet", Dist::Dirichlet),
];

impl Dist {
    fn of_op(name: &str) -> Option<Dist> {
        let d = name
            .strip_prefix("_random_pdf_")
            .or_else(|| name.strip_prefix("random_pdf_"))?;
        ALL.iter().find(|(n, _)| *n == d).map(|&(_, d)| d)
    }
    fn of_name(name: &str) -> Option<Dist> {
        ALL.iter().find(|(n, _)| *n == name).map(|&(_, d)| d)
    }
    fn params(self) -> usize {
        match self {
            Dist::Exponential | Dist::Poisson | Dist::Dirichlet => 1,
            _ => 2,
        }
    }
    fn vector(self) -> bool {
        self == Dist::Dirichlet
    }
}

fn lgamma(x: f64) -> f64 {
    libm::lgamma(x)
}

/// `(outer, n, k)`: how a call's sample splits: `outer` distributions, `n` samples each, `k`
/// values per sample (1 except for dirichlet). Checks the shapes as MXNet's `PdfOpShape`.
fn layout(call: &Call<'_>, d: Dist, ins: &[TensorDesc]) -> Result<(Vec<i64>, usize, usize, usize)> {
    let (s, p) = (&ins[0], &ins[1]);
    for (i, q) in ins.iter().enumerate().skip(1) {
        if q.shape != p.shape {
            return Err(Error::invalid(format!(
                "operator {}: Shape inconsistent, Provided = {:?}, inferred shape={:?} (input \
                 {i})",
                call.name,
                &q.shape[..],
                &p.shape[..]
            )));
        }
    }
    for (i, q) in ins.iter().enumerate() {
        if q.dtype != s.dtype {
            return Err(Error::invalid(format!(
                "operator {}: input {i} is {}, the sample {}: the inputs must have one dtype",
                call.name,
                q.dtype.name(),
                s.dtype.name()
            )));
        }
    }
    float_dtype(call, s.dtype)?;
    if p.shape.len() > s.shape.len() {
        return Err(Error::invalid(format!(
            "operator {}: dimension of input samples ({}) must be at least dimension of \
             distribution parameters ({})",
            call.name,
            s.shape.len(),
            p.shape.len()
        )));
    }
    let mut want: Vec<i64> = s.shape[..p.shape.len()].to_vec();
    if d.vector()
        && let (Some(w), Some(&l)) = (want.last_mut(), s.shape.last())
    {
        *w = l;
    }
    if p.shape[..] != want[..] || p.shape.is_empty() {
        return Err(Error::invalid(format!(
            "operator {}: Shape inconsistent, Provided = {:?}, inferred shape={want:?}",
            call.name,
            &p.shape[..]
        )));
    }
    let out: Vec<i64> = if d.vector() {
        if s.shape.len() == 1 {
            vec![1]
        } else {
            s.shape[..s.shape.len() - 1].to_vec()
        }
    } else {
        s.shape.to_vec()
    };
    let k = if d.vector() {
        *s.shape.last().unwrap_or(&1) as usize
    } else {
        1
    };
    let psize = p.size();
    let outer = psize / k.max(1);
    let total = s.size() / k.max(1);
    let n = if outer == 0 { 0 } else { total / outer };
    Ok((out, outer, n, k))
}

/// The log-density of sample `x` (`k` values) under parameters `a` (`k` values for dirichlet)
/// and `b`.
fn log_pdf(d: Dist, x: &[f64], a: &[f64], b: f64) -> f64 {
    let (x0, a0) = (x[0], a[0]);
    match d {
        Dist::Uniform => -(b - a0).ln(),
        Dist::Normal => {
            let z = -0.5 * (x0 - a0) * (x0 - a0) / (b * b);
            // MXNet's constant pi is a float32
            z - ((2.0 * std::f32::consts::PI as f64).sqrt() * b).ln()
        }
        Dist::Gamma => a0 * b.ln() + (a0 - 1.0) * x0.ln() - b * x0 - lgamma(a0),
        Dist::Exponential => a0.ln() - a0 * x0,
        Dist::Poisson => x0 * a0.ln() - lgamma(x0 + 1.0) - a0,
        Dist::NegBinomial => neg_binomial(a0, b, x0),
        Dist::GenNegBinomial => neg_binomial(1.0 / b, 1.0 / (a0 * b + 1.0), x0),
        Dist::Dirichlet => {
            let (mut sa, mut sl, mut ss) = (0.0, 0.0, 0.0);
            for (xj, aj) in x.iter().zip(a) {
                sa += aj;
                sl += lgamma(*aj);
                ss += (aj - 1.0) * xj.ln();
            }
            ss + (lgamma(sa) - sl)
        }
    }
}

/// The negative binomial's log-density (`p` the failure probability).
fn neg_binomial(l: f64, p: f64, x: f64) -> f64 {
    (lgamma(x + l) - lgamma(x + 1.0) - lgamma(l)) + l * p.ln() + x * (1.0 - p).ln()
}

/// The density's derivatives as MXNet's kernels give them, scaled by `s` (the head gradient
/// times the density, or times 1 for the log-density): the sample's (per value) into `gx`, the
/// parameters' into `ga` (per value for dirichlet) and `gb`.
fn grads(d: Dist, x: &[f64], a: &[f64], b: f64, s: f64, gx: &mut [f64], ga: &mut [f64]) -> f64 {
    let (x0, a0) = (x[0], a[0]);
    match d {
        Dist::Uniform => {
            gx[0] = 0.0;
            ga[0] = s / (b - a0);
            s / (a0 - b)
        }
        Dist::Normal => {
            let s2 = b * b;
            gx[0] = s * (a0 - x0) / s2;
            ga[0] = s * (x0 - a0) / s2;
            s * ((x0 - a0) * (x0 - a0) - s2) / (s2 * b)
        }
        Dist::Gamma => {
            gx[0] = s * ((a0 - 1.0) / x0 - b);
            ga[0] = s * (b.ln() + x0.ln() - digamma(a0));
            s * (a0 / b - x0)
        }
        Dist::Exponential => {
            gx[0] = -s * a0;
            ga[0] = s * (1.0 / a0 - x0);
            0.0
        }
        Dist::Poisson => {
            gx[0] = 0.0;
            ga[0] = s * (x0 / a0 - 1.0);
            0.0
        }
        Dist::NegBinomial => {
            let (gl, gp) = neg_binomial_grad(a0, b, x0, s);
            gx[0] = 0.0;
            ga[0] = gl;
            gp
        }
        Dist::GenNegBinomial => {
            let den = a0 * b + 1.0;
            let (gl, gp) = neg_binomial_grad(1.0 / b, 1.0 / den, x0, s);
            gx[0] = 0.0;
            ga[0] = -gp * b / (den * den);
            -gl / (b * b) - gp * a0 / (den * den)
        }
        Dist::Dirichlet => {
            let sa: f64 = a.iter().sum();
            let ps = digamma(sa);
            for j in 0..a.len() {
                ga[j] = s * (x[j].ln() + (ps - digamma(a[j])));
                gx[j] = s * (a[j] - 1.0) / x[j];
            }
            0.0
        }
    }
}

fn neg_binomial_grad(l: f64, p: f64, x: f64, s: f64) -> (f64, f64) {
    (
        s * ((digamma(x + l) - digamma(l)) + p.ln()),
        s * (l / p - x / (1.0 - p)),
    )
}

/// `_random_pdf_<distr>(sample, params...; is_log)`.
fn pdf(call: &Call<'_>) -> Result<Plan> {
    let d = Dist::of_op(call.name)
        .ok_or_else(|| Error::invalid(format!("operator {}: not a density operator", call.name)))?;
    let ins = inputs(call, 1 + d.params())?;
    let is_log = call
        .params
        .or("is_log", param::boolean, "a boolean", false)?;
    let (out, outer, n, k) = layout(call, d, ins)?;
    Ok(Plan::new(
        vec![TensorDesc::new(&out, ins[0].dtype)],
        move |kk| {
            let xs = read(&kk.inputs[0]);
            let a = read(&kk.inputs[1]);
            let b = if d.params() == 2 {
                read(&kk.inputs[2])
            } else {
                Vec::new()
            };
            let mut o = vec![0f64; outer * n];
            for di in 0..outer {
                let pa = &a[di * k..(di + 1) * k];
                let pb = b.get(di).copied().unwrap_or(0.0);
                for si in 0..n {
                    let i = di * n + si;
                    let lp = log_pdf(d, &xs[i * k..(i + 1) * k], pa, pb);
                    o[i] = if is_log { lp } else { lp.exp() };
                }
            }
            write(&mut kk.outputs[0], &o);
            Ok(())
        },
    ))
}

/// `_mxrt_pdf_grad(dy, sample, params..., out; distr, is_log)`: the gradients of the sample and
/// of each parameter.
fn pdf_grad(call: &Call<'_>) -> Result<Plan> {
    let name = call
        .params
        .required("distr", param::choice, "a distribution name")?;
    let d = Dist::of_name(&name).ok_or_else(|| {
        Error::invalid(format!(
            "operator {}: unknown distribution {name}",
            call.name
        ))
    })?;
    let is_log = call
        .params
        .or("is_log", param::boolean, "a boolean", false)?;
    let ins = inputs(call, 3 + d.params())?;
    let fwd = &ins[1..2 + d.params()];
    let (out, outer, n, k) = layout(call, d, fwd)?;
    if ins[0].shape[..] != out[..] {
        return Err(Error::invalid(format!(
            "operator {}: gradient of shape {:?} for densities of shape {out:?}",
            call.name,
            &ins[0].shape[..]
        )));
    }
    let outs: Vec<TensorDesc> = fwd.to_vec();
    let np = d.params();
    Ok(Plan::new(outs, move |kk| {
        let dy = read(&kk.inputs[0]);
        let xs = read(&kk.inputs[1]);
        let a = read(&kk.inputs[2]);
        let b = if np == 2 {
            read(&kk.inputs[3])
        } else {
            Vec::new()
        };
        let y = read(&kk.inputs[2 + np]);
        let mut gx = vec![0f64; xs.len()];
        let mut ga = vec![0f64; a.len()];
        let mut gb = vec![0f64; b.len()];
        let mut tmp = vec![0f64; k];
        for di in 0..outer {
            let pa = &a[di * k..(di + 1) * k];
            let pb = b.get(di).copied().unwrap_or(0.0);
            for si in 0..n {
                let i = di * n + si;
                let s = dy[i] * if is_log { 1.0 } else { y[i] };
                let g = grads(
                    d,
                    &xs[i * k..(i + 1) * k],
                    pa,
                    pb,
                    s,
                    &mut gx[i * k..(i + 1) * k],
                    &mut tmp,
                );
                for j in 0..k {
                    ga[di * k + j] += tmp[j];
                }
                if np == 2 {
                    gb[di] += g;
                }
            }
        }
        write(&mut kk.outputs[0], &gx);
        write(&mut kk.outputs[1], &ga);
        if np == 2 {
            write(&mut kk.outputs[2], &gb);
        }
        Ok(())
    }))
}

macro_rules! pdf_op {
    ($t:expr, $name:literal, $distr:literal) => {
        $t.def($name, &pdf).grad(|g| {
            let is_log = if g.flag("is_log", false) {
                "True"
            } else {
                "False"
            };
            let mut ins = vec![g.dy(0)];
            ins.extend_from_slice(g.inputs);
            ins.push(g.y(0));
            let d = g.ops(
                "_mxrt_pdf_grad",
                &ins,
                &[("distr", $distr), ("is_log", is_log)],
            )?;
            Ok(d.into_iter().map(Some).collect())
        });
    };
}

pub(crate) fn register(t: &mut Entries) {
    pdf_op!(t, "_random_pdf_uniform", "uniform");
    pdf_op!(t, "_random_pdf_normal", "normal");
    pdf_op!(t, "_random_pdf_gamma", "gamma");
    pdf_op!(t, "_random_pdf_exponential", "exponential");
    pdf_op!(t, "_random_pdf_poisson", "poisson");
    pdf_op!(t, "_random_pdf_negative_binomial", "negative_binomial");
    pdf_op!(
        t,
        "_random_pdf_generalized_negative_binomial",
        "generalized_negative_binomial"
    );
    pdf_op!(t, "_random_pdf_dirichlet", "dirichlet");
    t.def("_mxrt_pdf_grad", &pdf_grad);
}
