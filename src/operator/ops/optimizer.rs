//! Optimizer updates (`sgd_update`, `sgd_mom_update`, `adam_update`, ... and their
//! multi-precision `mp_*` and aggregated `multi_*` forms), as MXNet's kernels compute them.
//!
//! Every update is a formula over one element: it reads the weight and gradient, reads and
//! writes its state arrays (momentum, moments, ...), and returns the new weight, which goes to the
//! output (usually the weight array itself, `out=weight`). The state inputs are mutated, so the
//! engine op writes their variables. float32 and float16 weights compute in f32, float64 in f64;
//! in the `mp_*` forms the states and a float32 master copy of the weight are float32.

use crate::ndarray::format::StorageType;
use crate::operator::stype::{self, StorageRule};
use super::unary::c;
use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::kernel::map::Ptr;
use crate::operator::kernel::{Element, Real};
use crate::operator::op::{Call, KernelArgs, Plan, TensorDesc};
use crate::parallel::for_ranges;
use crate::operator::param::{self, Params};

/// Hyper-parameters, in the compute type.
#[derive(Clone, Copy, Default)]
pub struct Hyper<R> {
    pub lr: R,
    pub wd: R,
    pub rescale: R,
    pub clip: R,
    pub momentum: R,
    pub beta1: R,
    pub beta2: R,
    pub epsilon: R,
    pub t: R,
    pub gamma1: R,
    pub gamma2: R,
    pub clip_weights: R,
    pub lamda1: R,
    pub beta: R,
    pub wd_lh: R,
    /// AdamW's schedule multiplier.
    pub eta: R,
    /// The output is the weight array itself: MXNet's NAG kernel then reads the new weight for
    /// its momentum, which this reproduces.
    pub out_is_weight: bool,
}

/// The hyper-parameters as parsed (f64), converted per compute type.
#[derive(Clone, Copy, Default)]
struct HyperF64(Hyper<f64>);

impl HyperF64 {
    fn to<R: Real>(self) -> Hyper<R> {
        let h = self.0;
        Hyper {
            lr: c(h.lr),
            wd: c(h.wd),
            rescale: c(h.rescale),
            clip: c(h.clip),
            momentum: c(h.momentum),
            beta1: c(h.beta1),
            beta2: c(h.beta2),
            epsilon: c(h.epsilon),
            t: c(h.t),
            gamma1: c(h.gamma1),
            gamma2: c(h.gamma2),
            clip_weights: c(h.clip_weights),
            lamda1: c(h.lamda1),
            beta: c(h.beta),
            wd_lh: c(h.wd_lh),
            eta: c(h.eta),
            out_is_weight: h.out_is_weight,
        }
    }
}

/// `x` clipped to `[-bound, bound]` when `bound >= 0`.
#[inline(always)]
fn clip<R: Real>(x: R, bound: R) -> R {
    if bound >= R::ZERO {
        x.max(-bound).min(bound)
    } else {
        x
    }
}

#[inline(always)]
fn sign<R: Real>(x: R) -> R {
    if x > R::ZERO {
        R::ONE
    } else if x < R::ZERO {
        -R::ONE
    } else {
        R::ZERO
    }
}

/// One update formula: the new weight from weight, gradient and states (updated in place).
/// Monomorphised per formula, compute type and buffer types, so the element loop inlines it.
trait Rule: Sync + 'static {
    /// How many state arrays follow weight and gradient.
    const STATES: usize;
    fn f<R: Real>(h: &Hyper<R>, w: R, g: R, s: &mut [R; 5]) -> R;
}

macro_rules! rule {
    ($name:ident, $states:literal, |$h:ident, $w:ident, $g:ident, $s:ident| $body:block) => {
        struct $name;
        impl Rule for $name {
            const STATES: usize = $states;
            #[inline(always)]
            fn f<R: Real>($h: &Hyper<R>, $w: R, $g: R, $s: &mut [R; 5]) -> R {
                let _ = &$s;
                $body
            }
        }
    };
}

rule!(Sgd, 0, |h, w, g, s| {
    (R::ONE - h.lr * h.wd) * w - h.lr * clip(h.rescale * g, h.clip)
});
rule!(SgdMom, 1, |h, w, g, s| {
    s[0] = h.momentum * s[0] - h.lr * h.wd * w - h.lr * clip(h.rescale * g, h.clip);
    w + s[0]
});
rule!(NagMom, 1, |h, w, g, s| {
    let grad = clip(h.rescale * g, h.clip) + h.wd * w;
    s[0] = h.momentum * s[0];
    let out = w - s[0] + (h.momentum + R::ONE) * (s[0] - h.lr * grad);
    let w_now = if h.out_is_weight { out } else { w };
    s[0] = s[0] - h.lr * (clip(h.rescale * g, h.clip) + h.wd * w_now);
    out
});
rule!(Adam, 2, |h, w, g, s| {
    let grad = clip(g * h.rescale + w * h.wd, h.clip);
    s[0] = h.beta1 * s[0] + (R::ONE - h.beta1) * grad;
    s[1] = h.beta2 * s[1] + (R::ONE - h.beta2) * grad * grad;
    w - h.lr * s[0] / (s[1].sqrt() + h.epsilon)
});
rule!(RmsProp, 1, |h, w, g, s| {
    let grad = clip(h.rescale * g + h.wd * w, h.clip);
    s[0] = (R::ONE - h.gamma1) * (grad * grad) + h.gamma1 * s[0];
    clip(
        w - h.lr * (grad / (s[0] + h.epsilon).sqrt()),
        h.clip_weights,
    )
});
rule!(RmsPropAlex, 3, |h, w, g, s| {
    let grad = clip(h.rescale * g + h.wd * w, h.clip);
    s[0] = (R::ONE - h.gamma1) * grad * grad + h.gamma1 * s[0];
    s[1] = (R::ONE - h.gamma1) * grad + h.gamma1 * s[1];
    s[2] = h.gamma2 * s[2] - h.lr * grad / (s[0] - s[1] * s[1] + h.epsilon).sqrt();
    clip(w + s[2], h.clip_weights)
});
rule!(Ftrl, 2, |h, w, g, s| {
    // states: z, n
    let grad = clip(g * h.rescale, h.clip);
    s[0] = s[0] + grad - ((s[1] + grad * grad).sqrt() - s[1].sqrt()) * w / h.lr;
    s[1] = s[1] + grad * grad;
    let keep = if s[0].abs() > h.lamda1 {
        R::ONE
    } else {
        R::ZERO
    };
    (sign(s[0]) * h.lamda1 - s[0]) / ((h.beta + s[1].sqrt()) / h.lr + h.wd) * keep
});
// `_sparse_adagrad_update`: the rows of a row_sparse gradient (lazily; MXNet has no dense form)
rule!(Adagrad, 1, |h, w, g, s| {
    let grad = clip(g * h.rescale, h.clip);
    s[0] = s[0] + grad * grad;
    w - h.lr * (grad / (s[0] + h.epsilon).sqrt())
});
rule!(Ftml, 3, |h, w, g, s| {
    // states: d, v, z
    let grad = clip(h.rescale * g + h.wd * w, h.clip);
    s[1] = h.beta2 * s[1] + (R::ONE - h.beta2) * grad * grad;
    let d_t = (R::ONE - h.beta1.powf(h.t)) / h.lr
        * ((s[1] / (R::ONE - h.beta2.powf(h.t))).sqrt() + h.epsilon);
    s[2] = h.beta1 * s[2] + (R::ONE - h.beta1) * grad - (d_t - h.beta1 * s[0]) * w;
    s[0] = d_t;
    -s[2] / d_t
});
rule!(SignSgd, 0, |h, w, g, s| {
    (R::ONE - h.lr * h.wd) * w - h.lr * sign(g)
});
rule!(Signum, 1, |h, w, g, s| {
    s[0] = h.momentum * s[0]
        - (R::ONE - h.momentum) * h.wd * w
        - (R::ONE - h.momentum) * clip(h.rescale * g, h.clip);
    (R::ONE - h.lr * h.wd_lh) * w + h.lr * sign(s[0])
});

// The aggregated SGD kernels compute plain SGD as momentum SGD with a zero momentum.
rule!(MultiSgd, 0, |h, w, g, s| {
    w + (-(h.lr * h.wd * w) - h.lr * clip(h.rescale * g, h.clip))
});
rule!(AdamW, 2, |h, w, g, s| {
    let grad = clip(h.rescale * g, h.clip);
    s[0] = h.beta1 * s[0] + (R::ONE - h.beta1) * grad;
    s[1] = h.beta2 * s[1] + (R::ONE - h.beta2) * grad * grad;
    w - h.eta * (h.lr * s[0] / (s[1].sqrt() + h.epsilon) + h.wd * w)
});
// The aggregated AdamW kernel writes the moment updates in another (equivalent) form.
rule!(MultiAdamW, 2, |h, w, g, s| {
    let grad = clip(h.rescale * g, h.clip);
    s[0] = h.beta1 * (s[0] - grad) + grad;
    let sq = grad * grad;
    s[1] = h.beta2 * (s[1] - sq) + sq;
    w - h.eta * (h.lr * s[0] / (s[1].sqrt() + h.epsilon) + h.wd * w)
});

/// One group of arrays an update runs over: input indices of weight, gradient, states and (for
/// `mp_*`) the float32 master weight; output index; its learning rate and weight decay.
#[derive(Clone, Copy)]
struct Group {
    first: usize,
    output: usize,
    lr: f64,
    wd: f64,
    eta: f64,
}

/// Applies `rule` to each group: reads weight (or the master copy), gradient and states, writes
/// states, master copy and output.
fn run<U: Rule>(k: &mut KernelArgs<'_>, groups: &[Group], mp: bool, hyper: HyperF64) {
    for grp in groups {
        let mut h = hyper;
        h.0.lr = grp.lr;
        h.0.wd = grp.wd;
        h.0.eta = grp.eta;
        let w = &k.inputs[grp.first];
        match w.dtype {
            DType::F64 => group::<U, f64>(k, grp, mp, h.to()),
            _ => group::<U, f32>(k, grp, mp, h.to()),
        }
    }
}

fn group<U: Rule, R: Real>(k: &mut KernelArgs<'_>, grp: &Group, mp: bool, mut h: Hyper<R>) {
    h.out_is_weight = !mp && k.inputs[grp.first].byte_ptr() == k.outputs[grp.output].byte_ptr();
    let wdt = k.inputs[grp.first].dtype;
    crate::with_element!(wdt, T => {
        if mp {
            buffers::<U, T, f32, R>(k, grp, true, h)
        } else {
            buffers::<U, T, T, R>(k, grp, false, h)
        }
    })
}

/// The element loop for weight type `T` and state type `S`.
fn buffers<U: Rule, T: Element, S: Element, R: Real>(
    k: &mut KernelArgs<'_>,
    grp: &Group,
    mp: bool,
    h: Hyper<R>,
) {
    let states = U::STATES;
    let n = k.inputs[grp.first].len();
    let w = Ptr(k.inputs[grp.first].ptr::<T>());
    let g = Ptr(k.inputs[grp.first + 1].ptr::<T>());
    let mut st = [Ptr(std::ptr::null_mut::<S>()); 5];
    for (j, p) in st.iter_mut().enumerate().take(states) {
        *p = Ptr(k.inputs[grp.first + 2 + j].ptr::<S>());
    }
    let master = mp.then(|| Ptr(k.inputs[grp.first + 2 + states].ptr::<S>()));
    let out = Ptr(k.outputs[grp.output].ptr::<T>());
    // the loop is written inside the range closure so the formula inlines into it
    // Blocks of BLOCK elements are read into local arrays, computed there and written back:
    // the formula then runs over memory nothing else can alias, which lets it vectorise.
    const BLOCK: usize = 64;
    for_ranges(n, 8, |start, end| {
        let mut at = start;
        // made once per range: zeroing them per block cost as much as the update itself
        let (mut wv, mut gv) = ([R::ZERO; BLOCK], [R::ZERO; BLOCK]);
        let mut sv = [[R::ZERO; BLOCK]; 5];
        while at < end {
            let len = BLOCK.min(end - at);
            // SAFETY: every buffer holds `n` elements of its planned dtype (checked when
            // planning) and `at + len <= n`; the engine op owns the output and the mutated
            // states; each block is touched by one thread, and a block of every input is read
            // before that block of any output or state is written, so the output may be exactly
            // the weight array.
            unsafe {
                for k in 0..len {
                    wv[k] = match master {
                        Some(m) => <R as Element>::from_f64(m.get().add(at + k).read().to_f64()),
                        None => <R as Element>::from_f64(w.get().add(at + k).read().to_f64()),
                    };
                    gv[k] = <R as Element>::from_f64(g.get().add(at + k).read().to_f64());
                }
                for j in 0..states {
                    for k in 0..len {
                        sv[j][k] =
                            <R as Element>::from_f64(st[j].get().add(at + k).read().to_f64());
                    }
                }
            }
            for k in 0..BLOCK {
                // only the rule's states (a constant per rule, so these loops unroll)
                let mut s = [R::ZERO; 5];
                for j in 0..U::STATES {
                    s[j] = sv[j][k];
                }
                wv[k] = U::f(&h, wv[k], gv[k], &mut s);
                for j in 0..U::STATES {
                    sv[j][k] = s[j];
                }
            }
            // SAFETY: as above.
            unsafe {
                for j in 0..states {
                    for k in 0..len {
                        st[j]
                            .get()
                            .add(at + k)
                            .write(S::from_f64(sv[j][k].to_f64()));
                    }
                }
                if let Some(m) = master {
                    for k in 0..len {
                        m.get().add(at + k).write(S::from_f64(wv[k].to_f64()));
                    }
                }
                for k in 0..len {
                    out.get().add(at + k).write(T::from_f64(wv[k].to_f64()));
                }
            }
            at += len;
        }
    });
}

/// The hyper-parameters an op takes, by name, with MXNet's defaults.
fn hyper(p: &Params<'_>, names: &[(&str, f64)]) -> Result<HyperF64> {
    let mut h = Hyper::<f64> {
        rescale: 1.0,
        clip: -1.0,
        clip_weights: -1.0,
        ..Default::default()
    };
    for &(name, default) in names {
        let v = if default.is_nan() {
            p.required(name, param::float, "a number")?
        } else {
            p.or(name, param::float, "a number", default)?
        };
        match name {
            "lr" => h.lr = v,
            "wd" => h.wd = v,
            "rescale_grad" => h.rescale = v,
            "clip_gradient" | "clip_grad" => h.clip = v,
            "momentum" => h.momentum = v,
            "beta1" => h.beta1 = v,
            "beta2" => h.beta2 = v,
            "epsilon" => h.epsilon = v,
            "t" => h.t = v,
            "gamma1" => h.gamma1 = v,
            "gamma2" => h.gamma2 = v,
            "clip_weights" => h.clip_weights = v,
            "lamda1" => h.lamda1 = v,
            "beta" => h.beta = v,
            "wd_lh" => h.wd_lh = v,
            "eta" => h.eta = v,
            _ => unreachable!("unknown hyper-parameter {name}"),
        }
    }
    Ok(HyperF64(h))
}

const REQUIRED: f64 = f64::NAN;

/// Checks one group's arrays: weight and gradient alike, states alike (float32 for `mp`).
pub(super) fn check_group(call: &Call<'_>, first: usize, states: usize, mp: bool) -> Result<()> {
    let ins = call.inputs;
    let w = &ins[first];
    if !matches!(w.dtype, DType::F32 | DType::F64 | DType::F16) {
        return Err(Error::invalid(format!(
            "operator {}: weights must be float16, float32 or float64, got {}",
            call.name,
            w.dtype.name()
        )));
    }
    let n_arrays = 2 + states + usize::from(mp);
    for j in 1..n_arrays {
        let a = &ins[first + j];
        let want = if j >= 2 && mp { DType::F32 } else { w.dtype };
        if a.shape != w.shape || a.dtype != want {
            return Err(Error::invalid(format!(
                "operator {}: input {} has shape {:?} and dtype {}, expected {:?} and {}",
                call.name,
                first + j,
                &a.shape[..],
                a.dtype.name(),
                &w.shape[..],
                want.name()
            )));
        }
    }
    Ok(())
}

/// The gradient scale an update reads from its last input (the AdamW ops take `rescale_grad`
/// as an array so it can change without a new op): `None` when it is zero or not finite, and
/// the update is then skipped, as in MXNet.
fn scale_input(k: &KernelArgs<'_>) -> Option<f64> {
    let t = k.inputs.last()?;
    let v = crate::with_element!(t.dtype, T => t.slice::<T>().first().map(|v| v.to_f64()))?;
    (v.is_finite() && v != 0.0).then_some(v)
}

/// Checks that input `i` holds `want` values (a scale, or per-weight values, given as an array).
pub(super) fn check_len(call: &Call<'_>, i: usize, want: usize, what: &str) -> Result<()> {
    let d = &call.inputs[i];
    if d.size() != want {
        return Err(Error::invalid(format!(
            "operator {}: {what} (input {i}) must hold {want} value(s), got shape {:?}",
            call.name,
            &d.shape[..]
        )));
    }
    Ok(())
}

/// A per-weight tuple parameter (`lrs`, `wds`, ...) with one value for each of `count` weights;
/// `count_name` is the parameter that gave the count.
pub(super) fn per_weight(
    call: &Call<'_>,
    name: &str,
    count: usize,
    count_name: &str,
) -> Result<Vec<f64>> {
    let v = call
        .params
        .required(name, param::floats, "a tuple of numbers")?;
    if v.len() != count {
        return Err(Error::invalid(format!(
            "operator {}: {name} has {} values, {count_name} is {count}",
            call.name,
            v.len()
        )));
    }
    Ok(v)
}

/// A single-weight update op.
fn single<U: Rule>(call: &Call<'_>, mp: bool, names: &[(&str, f64)]) -> Result<Plan> {
    single_with::<U>(call, mp, false, names)
}

/// A single-weight update op; with `scaled`, the last input is the gradient scale.
fn single_with<U: Rule>(
    call: &Call<'_>,
    mp: bool,
    scaled: bool,
    names: &[(&str, f64)],
) -> Result<Plan> {
    let n = 2 + U::STATES + usize::from(mp);
    let ins = inputs(call, n + usize::from(scaled))?;
    check_group(call, 0, U::STATES, mp)?;
    if scaled {
        check_len(call, n, 1, "rescale_grad")?;
    }
    let h = hyper(call.params, names)?;
    call.params
        .or("lazy_update", param::boolean, "a boolean", true)?;
    let grp = Group {
        first: 0,
        output: 0,
        lr: h.0.lr,
        wd: h.0.wd,
        eta: h.0.eta,
    };
    Ok(Plan::new(vec![ins[0].clone()], move |k| {
        let mut h = h;
        if scaled {
            match scale_input(k) {
                Some(v) => h.0.rescale = v,
                None => return Ok(()),
            }
        }
        run::<U>(k, &[grp], mp, h);
        Ok(())
    })
    .elementwise()
    .mutating(&(2..n).collect::<Vec<_>>()))
}

/// Where an aggregated op finds its per-weight values and gradient scale.
#[derive(Clone, Copy, Default)]
struct MultiForm {
    /// `lrs` and `wds` are the two inputs after the groups (`preloaded_multi_*`).
    preloaded: bool,
    /// Per-weight `etas` (AdamW).
    etas: bool,
    /// The last input is the gradient scale (AdamW).
    scaled: bool,
}

/// An aggregated `multi_*` op: `num_weights` groups, per-group `lrs` and `wds`.
fn multi<U: Rule>(call: &Call<'_>, mp: bool, names: &[(&str, f64)]) -> Result<Plan> {
    multi_with::<U>(call, mp, MultiForm::default(), names)
}

fn multi_with<U: Rule>(
    call: &Call<'_>,
    mp: bool,
    form: MultiForm,
    names: &[(&str, f64)],
) -> Result<Plan> {
    let p = call.params;
    let count = p.or("num_weights", param::int, "an integer", 1)?;
    if count <= 0 {
        return Err(Error::invalid(format!(
            "operator {}: num_weights ({count}) must be positive",
            call.name
        )));
    }
    let count = count as usize;
    let per_weight = |name: &str| per_weight(call, name, count, "num_weights");
    let (lrs, wds) = if form.preloaded {
        (vec![0.0; count], vec![0.0; count])
    } else {
        (per_weight("lrs")?, per_weight("wds")?)
    };
    let etas = if form.etas {
        per_weight("etas")?
    } else {
        vec![0.0; count]
    };
    let stride = 2 + U::STATES + usize::from(mp);
    let extra = if form.preloaded {
        2
    } else {
        usize::from(form.scaled)
    };
    inputs(call, count * stride + extra)?;
    if form.preloaded {
        check_len(call, count * stride, count, "lrs")?;
        check_len(call, count * stride + 1, count, "wds")?;
    }
    if form.scaled {
        check_len(call, count * stride, 1, "rescale_grad")?;
    }
    let h = hyper(p, names)?;
    let mut groups = Vec::with_capacity(count);
    let mut outputs = Vec::with_capacity(count);
    let mut mutated = Vec::new();
    for i in 0..count {
        check_group(call, i * stride, U::STATES, mp)?;
        groups.push(Group {
            first: i * stride,
            output: i,
            lr: lrs[i],
            wd: wds[i],
            eta: etas[i],
        });
        outputs.push(TensorDesc::clone(&call.inputs[i * stride]));
        mutated.extend(i * stride + 2..(i + 1) * stride);
    }
    let at = count * stride;
    Ok(Plan::new(outputs, move |k| {
        let mut h = h;
        if form.scaled {
            match scale_input(k) {
                Some(v) => h.0.rescale = v,
                None => return Ok(()),
            }
        }
        if form.preloaded {
            let read = |t: &crate::operator::tensor::Tensor| -> Vec<f64> {
                crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
            };
            let (lrs, wds) = (read(&k.inputs[at]), read(&k.inputs[at + 1]));
            for (g, (lr, wd)) in groups.iter_mut().zip(lrs.into_iter().zip(wds)) {
                g.lr = lr;
                g.wd = wd;
            }
        }
        run::<U>(k, &groups, mp, h);
        Ok(())
    })
    .elementwise()
    .mutating(&mutated))
}

const SGD_ARGS: &[(&str, f64)] = &[
    ("lr", REQUIRED),
    ("wd", 0.0),
    ("rescale_grad", 1.0),
    ("clip_gradient", -1.0),
];
const MOM_ARGS: &[(&str, f64)] = &[
    ("lr", REQUIRED),
    ("momentum", 0.0),
    ("wd", 0.0),
    ("rescale_grad", 1.0),
    ("clip_gradient", -1.0),
];
const MULTI_ARGS: &[(&str, f64)] = &[("rescale_grad", 1.0), ("clip_gradient", -1.0)];
const MULTI_MOM_ARGS: &[(&str, f64)] = &[
    ("momentum", 0.0),
    ("rescale_grad", 1.0),
    ("clip_gradient", -1.0),
];

/// The states each optimizer update writes in place: its auxiliary states in a graph.
const MUTATED_STATES: &[(&str, &[usize])] = &[
    ("sgd_mom_update", &[2]),
    ("mp_sgd_update", &[2]),
    ("mp_sgd_mom_update", &[2, 3]),
    ("nag_mom_update", &[2]),
    ("mp_nag_mom_update", &[2, 3]),
    ("signum_update", &[2]),
    ("adam_update", &[2, 3]),
    ("rmsprop_update", &[2]),
    ("rmspropalex_update", &[2, 3, 4]),
    ("ftrl_update", &[2, 3]),
    ("_sparse_adagrad_update", &[2]),
    ("ftml_update", &[2, 3, 4]),
    ("_adamw_update", &[2, 3]),
    ("_mp_adamw_update", &[2, 3, 4]),
];

pub(crate) fn register(t: &mut Entries) {
    register_updates(t);
    for (name, states) in MUTATED_STATES {
        if let Some(d) = t.0.iter_mut().find(|d| d.name == *name) {
            d.mutates(states);
        }
    }
}

fn register_updates(t: &mut Entries) {
    t.push(("sgd_update", &|c: &Call<'_>| {
        single::<Sgd>(c, false, SGD_ARGS)
    }))
    .stype(StorageRule::LazyUpdate(stype::lazy_if_asked));
    t.push(("sgd_mom_update", &|c: &Call<'_>| {
        single::<SgdMom>(c, false, MOM_ARGS)
    }))
    .stype(StorageRule::LazyUpdate(stype::lazy_if_asked));
    t.push(("mp_sgd_update", &|c: &Call<'_>| {
        single::<Sgd>(c, true, SGD_ARGS)
    }));
    t.push(("mp_sgd_mom_update", &|c: &Call<'_>| {
        single::<SgdMom>(c, true, MOM_ARGS)
    }));
    t.push(("nag_mom_update", &|c: &Call<'_>| {
        single::<NagMom>(c, false, MOM_ARGS)
    }));
    t.push(("mp_nag_mom_update", &|c: &Call<'_>| {
        single::<NagMom>(c, true, MOM_ARGS)
    }));
    t.push(("signsgd_update", &|c: &Call<'_>| {
        single::<SignSgd>(c, false, SGD_ARGS)
    }));
    t.push(("signum_update", &|c: &Call<'_>| {
        single::<Signum>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("momentum", 0.0),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_gradient", -1.0),
                ("wd_lh", 0.0),
            ],
        )
    }));
    t.push(("adam_update", &|c: &Call<'_>| {
        single::<Adam>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("beta1", 0.9),
                ("beta2", 0.999),
                ("epsilon", 1e-8),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_gradient", -1.0),
            ],
        )
    }))
    .stype(StorageRule::LazyUpdate(stype::lazy_if_asked));
    t.push(("rmsprop_update", &|c: &Call<'_>| {
        single::<RmsProp>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("gamma1", 0.95),
                ("epsilon", 1e-8),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_gradient", -1.0),
                ("clip_weights", -1.0),
            ],
        )
    }));
    t.push(("rmspropalex_update", &|c: &Call<'_>| {
        single::<RmsPropAlex>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("gamma1", 0.95),
                ("gamma2", 0.9),
                ("epsilon", 1e-8),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_gradient", -1.0),
                ("clip_weights", -1.0),
            ],
        )
    }));
    t.push(("ftrl_update", &|c: &Call<'_>| {
        single::<Ftrl>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("lamda1", 0.01),
                ("beta", 1.0),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_gradient", -1.0),
            ],
        )
    }))
    .stype(StorageRule::LazyUpdate(|_, ins| ins[0] == StorageType::RowSparse));
    t.push(("_sparse_adagrad_update", &|c: &Call<'_>| {
        let wd = c.params.or("wd", param::float, "a number", 0.0)?;
        if wd != 0.0 {
            return Err(Error::invalid(format!(
                "operator {}: wd is {wd}; sparse adagrad_update does not support weight decay \
                 (wd must be 0)",
                c.name
            )));
        }
        single::<Adagrad>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("epsilon", 1e-7),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_gradient", -1.0),
            ],
        )
    }))
    .stype(StorageRule::LazyUpdate(stype::always_lazy));
    t.push(("ftml_update", &|c: &Call<'_>| {
        single::<Ftml>(
            c,
            false,
            &[
                ("lr", REQUIRED),
                ("beta1", 0.6),
                ("beta2", 0.999),
                ("epsilon", 1e-8),
                ("t", REQUIRED),
                ("wd", 0.0),
                ("rescale_grad", 1.0),
                ("clip_grad", -1.0),
            ],
        )
    }));
    t.push(("multi_sgd_update", &|c: &Call<'_>| {
        multi::<MultiSgd>(c, false, MULTI_ARGS)
    }));
    t.push(("multi_sgd_mom_update", &|c: &Call<'_>| {
        multi::<SgdMom>(c, false, MULTI_MOM_ARGS)
    }));
    t.push(("multi_mp_sgd_update", &|c: &Call<'_>| {
        multi::<MultiSgd>(c, true, MULTI_ARGS)
    }));
    t.push(("multi_mp_sgd_mom_update", &|c: &Call<'_>| {
        multi::<SgdMom>(c, true, MULTI_MOM_ARGS)
    }));
    const PRELOADED: MultiForm = MultiForm {
        preloaded: true,
        etas: false,
        scaled: false,
    };
    t.push(("preloaded_multi_sgd_update", &|c: &Call<'_>| {
        multi_with::<MultiSgd>(c, false, PRELOADED, MULTI_ARGS)
    }));
    t.push(("preloaded_multi_sgd_mom_update", &|c: &Call<'_>| {
        multi_with::<SgdMom>(c, false, PRELOADED, MULTI_MOM_ARGS)
    }));
    t.push(("preloaded_multi_mp_sgd_update", &|c: &Call<'_>| {
        multi_with::<MultiSgd>(c, true, PRELOADED, MULTI_ARGS)
    }));
    t.push(("preloaded_multi_mp_sgd_mom_update", &|c: &Call<'_>| {
        multi_with::<SgdMom>(c, true, PRELOADED, MULTI_MOM_ARGS)
    }));
    const ADAMW_ARGS: &[(&str, f64)] = &[
        ("lr", REQUIRED),
        ("beta1", 0.9),
        ("beta2", 0.999),
        ("epsilon", 1e-8),
        ("wd", 0.0),
        ("eta", REQUIRED),
        ("clip_gradient", -1.0),
    ];
    t.push(("_adamw_update", &|c: &Call<'_>| {
        single_with::<AdamW>(c, false, true, ADAMW_ARGS)
    }));
    t.push(("_mp_adamw_update", &|c: &Call<'_>| {
        single_with::<AdamW>(c, true, true, ADAMW_ARGS)
    }));
    const MULTI_ADAMW: MultiForm = MultiForm {
        preloaded: false,
        etas: true,
        scaled: true,
    };
    const MULTI_ADAMW_ARGS: &[(&str, f64)] = &[
        ("beta1", 0.9),
        ("beta2", 0.999),
        ("epsilon", 1e-8),
        ("clip_gradient", -1.0),
    ];
    t.push(("_multi_adamw_update", &|c: &Call<'_>| {
        multi_with::<MultiAdamW>(c, false, MULTI_ADAMW, MULTI_ADAMW_ARGS)
    }));
    t.push(("_multi_mp_adamw_update", &|c: &Call<'_>| {
        multi_with::<MultiAdamW>(c, true, MULTI_ADAMW, MULTI_ADAMW_ARGS)
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgd_momentum_follows_mxnet_formula() {
        let h = Hyper::<f64> {
            lr: 0.1,
            wd: 0.01,
            rescale: 1.0,
            clip: -1.0,
            momentum: 0.9,
            ..Default::default()
        };
        let mut s = [0.5, 0.0, 0.0, 0.0, 0.0];
        let w = SgdMom::f(&h, 2.0f64, 3.0, &mut s);
        let mom = 0.9 * 0.5 - 0.1 * 0.01 * 2.0 - 0.1 * 3.0;
        assert!((s[0] - mom).abs() < 1e-15 && (w - (2.0 + mom)).abs() < 1e-15);
        let h2 = Hyper { clip: 1.0, ..h };
        let w = Sgd::f(&h2, 2.0f64, 3.0, &mut s);
        assert!(
            (w - ((1.0 - 0.001) * 2.0 - 0.1 * 1.0)).abs() < 1e-15,
            "gradient clipped to 1"
        );
    }
}
