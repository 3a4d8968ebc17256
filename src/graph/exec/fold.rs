//! Convolutions of a planned graph prepared once: BatchNorm folded into the weights, the bias
//! and the relu after them applied as the kernels store the output, and the weights in the form the kernel wants (Winograd's
//! transform) kept across runs.
//!
//! A float32 2-D `Convolution` (NCHW) whose weight and bias are graph inputs runs in a planned
//! graph ([`super::fast`]) as a [`PreparedConv`]. Its output may absorb the nodes that only it
//! feeds:
//!
//! - a `BatchNorm` on axis 1 with the moving statistics (not training, or `use_global_stats`),
//!   no `output_mean_var`, whose gamma, beta and statistics are graph inputs:
//!   `BN(conv(x, w) + b) = conv(x, w·s) + (b - mean)·s + beta` with `s = gamma / sqrt(var + eps)`
//!   (gamma taken as 1 with `fix_gamma`, and, as in MXNet's executors, not written)
//!   per output channel;
//! - then a relu (`Activation(act_type='relu')` or `relu`), applied with the bias: in the
//!   store of the depthwise kernels and of the AVX-512 GEMM's products (its last `k` block),
//!   in a pass over the output after the Winograd and the other kernels.
//!
//! The prepared weight (folded; for 3×3 stride-1 layers Winograd-transformed; for layers computed
//! as matrix products also packed in the AVX-512 GEMM's panel layout, so no run or image packs
//! it again) and bias are computed on the first run and again whenever an array they come from was written since: the
//! cache is keyed by each source's address and its engine variable's count of completed writes,
//! read inside the run's engine op (which reads those variables, so no write is in flight).
//! Results are those of the unfolded graph within float32 rounding.

use super::{GraphRunner, Step};
use crate::dtype::DType;
use crate::operator::kernel::conv::{
    ConvGeom, LowerWeight, apply_epilogue, lower_packed, pack_lower_weight, winograd_geom,
};
use crate::operator::kernel::depthwise;
use crate::operator::kernel::gemm::{
    Epilogue, Operand, Packed, matmul, matmul_packed_rhs, pack_rhs,
};
use crate::operator::kernel::winograd::{self, Wino};
use crate::operator::op::TensorDesc;
use crate::operator::param;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Whether convolutions are prepared (`MXRT_FOLD=0` turns it off, for comparisons; read once).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MXRT_FOLD").map_or(true, |v| v.trim() != "0"))
}

/// A BatchNorm folded into a convolution: its epsilon, whether gamma is fixed at 1, and the
/// graph inputs holding gamma, beta, the moving mean and the moving variance.
#[derive(Clone, Copy, Debug)]
struct FoldedBn {
    eps: f64,
    fix_gamma: bool,
    gamma: usize,
    beta: usize,
    mean: usize,
    var: usize,
}

/// A chain of nodes run as one prepared convolution (see the module documentation).
#[derive(Clone, Debug)]
pub(super) struct Chain {
    /// The convolution's node.
    pub(super) conv: usize,
    bn: Option<FoldedBn>,
    relu: bool,
}

/// The chains of a graph: by the node whose output the chain's output is (its last node), and
/// the nodes absorbed into a chain that ends later.
#[derive(Default)]
pub(super) struct Chains {
    pub(super) by_last: HashMap<usize, Chain>,
    pub(super) absorbed: HashSet<usize>,
}

fn raw<'a>(params: &'a [(String, String)], key: &str) -> Option<&'a str> {
    params
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.trim().trim_matches(|c| c == '\'' || c == '"'))
}

fn flag(params: &[(String, String)], key: &str, default: bool) -> Option<bool> {
    raw(params, key).map_or(Some(default), param::boolean)
}

/// The graph input a node input is, when it is one and float32.
fn f32_input(
    runner: &GraphRunner,
    descs: &[TensorDesc],
    (node, o): (usize, usize),
) -> Option<usize> {
    match runner.steps[node] {
        Step::Input(i) if o == 0 && descs.get(i)?.dtype == DType::F32 => Some(i),
        _ => None,
    }
}

/// Whether node `s` is a 2-D float32 NCHW convolution whose weight (and bias) are graph inputs.
fn preparable_conv(runner: &GraphRunner, descs: &[TensorDesc], s: usize) -> bool {
    let Step::Op(op) = &runner.steps[s] else {
        return false;
    };
    if op.def.name != "Convolution" || op.inputs.len() < 2 {
        return false;
    }
    let p = &op.params;
    raw(p, "kernel")
        .and_then(param::shape)
        .is_some_and(|k| k.len() == 2)
        && raw(p, "layout").is_none_or(|l| l == "NCHW" || l == "None")
        && op.inputs[1..]
            .iter()
            .all(|&e| f32_input(runner, descs, e).is_some())
}

/// Finds the graph's chains for a run on inputs described by `descs` (`training`: the run's
/// mode). Only nodes whose outputs nothing else reads are absorbed.
pub(super) fn chains(runner: &GraphRunner, descs: &[TensorDesc], training: bool) -> Chains {
    let mut out = Chains::default();
    if !enabled() {
        return out;
    }
    // readers of each (node, output), graph outputs counted as readers
    let mut readers: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
    for (s, step) in runner.steps.iter().enumerate() {
        if let Step::Op(op) = step {
            for &e in &op.inputs {
                readers.entry(e).or_default().push(s);
            }
        }
    }
    for &e in &runner.outputs {
        readers.entry(e).or_default().push(usize::MAX);
    }
    // the one reader of node s's only output
    let sole = |s: usize| match readers.get(&(s, 0)).map(Vec::as_slice) {
        Some(&[r]) if r != usize::MAX => Some(r),
        _ => None,
    };
    let op_at = |s: usize| match &runner.steps[s] {
        Step::Op(op) => Some(op),
        Step::Input(_) => None,
    };
    let only_output = |s: usize| !readers.keys().any(|&(n, o)| n == s && o > 0);
    for c in 0..runner.steps.len() {
        if !preparable_conv(runner, descs, c) || !only_output(c) {
            continue;
        }
        let mut chain = Chain {
            conv: c,
            bn: None,
            relu: false,
        };
        let mut last = c;
        if let Some(b) = sole(c)
            && let Some(op) = op_at(b)
            && op.def.name == "BatchNorm"
            && op.inputs.len() == 5
            && op.inputs[0] == (c, 0)
            && only_output(b)
        {
            let p = &op.params;
            let global = flag(p, "use_global_stats", false);
            let fix_gamma = flag(p, "fix_gamma", true);
            let ok = fix_gamma.is_some()
                && flag(p, "output_mean_var", false) == Some(false)
                && raw(p, "axis").is_none_or(|a| param::int(a) == Some(1))
                && (global == Some(true) || (!training && global.is_some()));
            let eps = raw(p, "eps").map_or(Some(1e-3), param::float);
            // one value per output channel (the weight's first dimension) each
            let channels = match &runner.steps[c] {
                Step::Op(conv) => f32_input(runner, descs, conv.inputs[1])
                    .and_then(|w| descs[w].shape.first().copied()),
                Step::Input(_) => None,
            };
            let ins: Option<Vec<usize>> = op.inputs[1..]
                .iter()
                .map(|&e| {
                    f32_input(runner, descs, e)
                        .filter(|&i| channels.is_some_and(|n| descs[i].shape[..] == [n]))
                })
                .collect();
            if ok && let (Some(eps), Some(ins)) = (eps, ins) {
                chain.bn = Some(FoldedBn {
                    eps,
                    fix_gamma: fix_gamma == Some(true),
                    gamma: ins[0],
                    beta: ins[1],
                    mean: ins[2],
                    var: ins[3],
                });
                out.absorbed.insert(last);
                last = b;
            }
        }
        if let Some(r) = sole(last)
            && let Some(op) = op_at(r)
            && op.inputs.len() == 1
            && only_output(r)
            && (op.def.name == "relu"
                || (op.def.name == "Activation" && raw(&op.params, "act_type") == Some("relu")))
        {
            chain.relu = true;
            out.absorbed.insert(last);
            last = r;
        }
        out.by_last.insert(last, chain);
    }
    out
}

/// The prepared weight and bias, and the sources they were made from.
struct Prepared {
    key: Vec<(usize, u64)>,
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    /// The weight packed for the products, where they run on the AVX-512 GEMM.
    packed: Option<Packing>,
}

/// A prepared weight packed for the GEMM: as the left operand of [`lower_packed`]'s products,
/// or (narrow layers) transposed as the right operand of each image's transposed product.
enum Packing {
    Lower(LowerWeight),
    Narrow(Packed),
}

/// A convolution (with the nodes its chain absorbed) run on a prepared weight.
pub(super) struct PreparedConv {
    geom: ConvGeom,
    wino: Option<Wino>,
    /// Few output positions per image and many channels: each image's product runs
    /// transposed (positions × channels), so its columns are the channels.
    narrow: bool,
    /// Graph inputs holding the weight and the bias.
    weight: usize,
    bias: Option<usize>,
    bn: Option<FoldedBn>,
    relu: bool,
    cache: Mutex<Option<Arc<Prepared>>>,
    /// The narrow form's buffers (columns, transposed result), kept between runs.
    scratch: Mutex<(Vec<f32>, Vec<f32>)>,
}

impl PreparedConv {
    /// The preparation of `chain`, whose convolution reads inputs described by `in_descs` and
    /// writes `out`; `None` for a geometry it does not take.
    pub(super) fn new(
        runner: &GraphRunner,
        chain: &Chain,
        in_descs: &[TensorDesc],
        out: &TensorDesc,
    ) -> Option<PreparedConv> {
        let Step::Op(op) = &runner.steps[chain.conv] else {
            return None;
        };
        let p = &op.params;
        let pair = |key: &str, default: usize| -> Option<[usize; 2]> {
            match raw(p, key) {
                None | Some("None") | Some("()") => Some([default; 2]),
                Some(v) => match param::shape(v)?.as_slice() {
                    &[a, b] if a >= 0 && b >= 0 => Some([a as usize, b as usize]),
                    _ => None,
                },
            }
        };
        let kernel = pair("kernel", 1)?;
        let (stride, dilate, pad) = (pair("stride", 1)?, pair("dilate", 1)?, pair("pad", 0)?);
        let groups = raw(p, "num_group").map_or(Some(1), param::int)?.max(1) as usize;
        let no_bias = flag(p, "no_bias", false)?;
        let (x, w) = (&in_descs[0], &in_descs[1]);
        if x.shape.len() != 4
            || out.shape.len() != 4
            || in_descs.iter().any(|d| d.dtype != DType::F32)
            || out.dtype != DType::F32
            || no_bias != (in_descs.len() == 2)
        {
            return None;
        }
        let dim = |d: i64| d.max(0) as usize;
        let geom = ConvGeom {
            batch: dim(x.shape[0]),
            groups,
            in_ch: dim(x.shape[1]),
            out_ch: dim(out.shape[1]),
            input: [1, dim(x.shape[2]), dim(x.shape[3])],
            output: [1, dim(out.shape[2]), dim(out.shape[3])],
            kernel: [1, kernel[0], kernel[1]],
            stride: [1, stride[0], stride[1]],
            dilate: [1, dilate[0], dilate[1]],
            pad: [0, pad[0], pad[1]],
        };
        if w.size() != geom.weight_len() {
            return None;
        }
        let weight = match runner.steps[op.inputs[1].0] {
            Step::Input(i) => i,
            Step::Op(_) => return None,
        };
        let bias = match op.inputs.get(2) {
            Some(&(n, _)) => match runner.steps[n] {
                Step::Input(i) => Some(i),
                Step::Op(_) => return None,
            },
            None => None,
        };
        // the kernels' own choice of Winograd (3×3, stride 1, one group, enough channels)
        let out_sp = geom.output[1] * geom.output[2];
        let narrow = geom.groups == 1 && out_sp < NARROW && geom.out_ch >= NARROW;
        let wino = if narrow { None } else { winograd_geom::<f32>(&geom) };
        Some(PreparedConv {
            geom,
            wino,
            narrow,
            weight,
            bias,
            bn: chain.bn,
            relu: chain.relu,
            cache: Mutex::new(None),
            scratch: Mutex::new((Vec::new(), Vec::new())),
        })
    }

    /// The graph inputs the prepared weight and bias are made from.
    fn sources(&self) -> impl Iterator<Item = usize> + '_ {
        let bn = self
            .bn
            .iter()
            .flat_map(|b| [b.gamma, b.beta, b.mean, b.var]);
        [self.weight].into_iter().chain(self.bias).chain(bn)
    }

    /// Elements of graph input `i` for this convolution.
    fn input_len(&self, i: usize) -> usize {
        if i == self.weight {
            self.geom.weight_len()
        } else {
            self.geom.out_ch
        }
    }

    /// The prepared weight and bias for the graph inputs at `ins` with write counts `versions`.
    fn prepared(&self, ins: &[*mut u8], versions: &[u64]) -> Arc<Prepared> {
        let key: Vec<(usize, u64)> = self
            .sources()
            .map(|i| (ins[i] as usize, versions.get(i).copied().unwrap_or(0)))
            .collect();
        if let Some(p) = self.cache.lock().as_ref().filter(|p| p.key == key) {
            return p.clone();
        }
        let read = |i: usize| -> &[f32] {
            let n = self.input_len(i);
            if n == 0 {
                return &[];
            }
            // SAFETY: graph input `i` is a live float32 array of the described shape (`n`
            // elements: the weight's, or one per output channel), read by the run's engine op.
            unsafe { std::slice::from_raw_parts(ins[i].cast::<f32>(), n) }
        };
        let co = self.geom.out_ch;
        let mut weight = read(self.weight).to_vec();
        let mut bias: Option<Vec<f32>> = self.bias.map(|b| read(b).to_vec());
        if let Some(bn) = self.bn {
            let (gamma, beta, mean, var) =
                (read(bn.gamma), read(bn.beta), read(bn.mean), read(bn.var));
            let per = weight.len() / co.max(1);
            let mut b = vec![0.0f32; co];
            for o in 0..co {
                let g = if bn.fix_gamma { 1.0 } else { f64::from(gamma[o]) };
                let s = g / (f64::from(var[o]) + bn.eps).sqrt();
                for v in &mut weight[o * per..][..per] {
                    *v = (f64::from(*v) * s) as f32;
                }
                let b0 = bias.as_ref().map_or(0.0, |b| f64::from(b[o]));
                b[o] = ((b0 - f64::from(mean[o])) * s + f64::from(beta[o])) as f32;
            }
            bias = Some(b);
        }
        if self.wino.is_some() {
            weight = winograd::transform_weight(&weight, co, self.geom.in_ch, false).to_vec();
        }
        let g = &self.geom;
        let packed = if self.narrow {
            let kr = g.in_ch * g.kernel[1] * g.kernel[2];
            let sp = g.output[1] * g.output[2];
            let wt = Operand {
                data: &weight[..],
                transposed: true,
            };
            pack_rhs(sp, co, kr, wt).map(Packing::Narrow)
        } else if self.wino.is_none() {
            pack_lower_weight(g, &weight).map(Packing::Lower)
        } else {
            None
        };
        let p = Arc::new(Prepared {
            key,
            weight,
            bias,
            packed,
        });
        *self.cache.lock() = Some(p.clone());
        p
    }

    /// Runs the chain: `y` from `x` with the weights of the graph inputs at `ins`.
    pub(super) fn run(&self, ins: &[*mut u8], versions: &[u64], x: &[f32], y: &mut [f32]) {
        let p = self.prepared(ins, versions);
        if self.narrow {
            self.run_narrow(&p, x, y);
            return;
        }
        let e = Epilogue {
            bias: p.bias.as_deref(),
            relu: self.relu,
        };
        if depthwise::applies(&self.geom) {
            // the bias and relu applied in the kernel's store
            depthwise::forward_with(&self.geom, x, &p.weight, e, y);
            return;
        }
        match &self.wino {
            Some(s) => {
                winograd::forward(s, x, &p.weight, y);
                let sp = self.geom.output[1] * self.geom.output[2];
                apply_epilogue(e, y, sp, self.geom.out_ch);
            }
            None => {
                let pw = match &p.packed {
                    Some(Packing::Lower(w)) => Some(w),
                    _ => None,
                };
                // the bias and relu applied in the products' store
                lower_packed(&self.geom, x, &p.weight, pw, e, y)
            }
        }
    }
}

/// Output positions per image under which a convolution with at least as many output channels
/// runs its products transposed (the matrix products' wide kernels want this many columns).
const NARROW: usize = 96;

impl PreparedConv {
    /// Per image: `yᵀ (positions × channels) = colᵀ · wᵀ`, then `y` with the bias (and relu).
    fn run_narrow(&self, p: &Prepared, x: &[f32], y: &mut [f32]) {
        let g = &self.geom;
        let (ci, co) = (g.in_ch, g.out_ch);
        let (in_sp, sp) = (g.input[1] * g.input[2], g.output[1] * g.output[2]);
        let kr = ci * g.kernel[1] * g.kernel[2];
        let pointwise = g.kernel == [1; 3] && g.stride == [1; 3] && g.pad == [0; 3] && in_sp == sp;
        // the buffers kept between runs (fresh ones where another run holds them)
        let mut kept = self.scratch.try_lock();
        let mut fresh = (Vec::new(), Vec::new());
        let (col, t) = match kept.as_deref_mut() {
            Some(b) => b,
            None => &mut fresh,
        };
        if !pointwise && col.len() < kr * sp {
            *col = vec![0.0f32; kr * sp];
        }
        if t.len() < sp * co {
            *t = vec![0.0f32; sp * co];
        }
        let t = &mut t[..sp * co];
        for n in 0..g.batch {
            let xs = &x[n * ci * in_sp..][..ci * in_sp];
            let a: &[f32] = if pointwise {
                xs
            } else {
                let col = &mut col[..kr * sp];
                im2col(g, xs, col);
                col
            };
            let a = Operand {
                data: a,
                transposed: true,
            };
            match &p.packed {
                Some(Packing::Narrow(w)) => matmul_packed_rhs(false, sp, a, w, t, false),
                _ => {
                    let w = Operand {
                        data: &p.weight[..],
                        transposed: true,
                    };
                    matmul(sp, co, kr, a, w, t, false)
                }
            }
            let ys = &mut y[n * co * sp..][..co * sp];
            // `yᵀ` back to planes 16 channels at a time: each position's 16 values are one
            // cache line of `t`, and the 16 planes being written stay in L1 (channel by channel,
            // `t`'s rows `co` floats apart fall in one L1 set when `co` is a multiple of 1,024)
            for o0 in (0..co).step_by(16) {
                let o1 = (o0 + 16).min(co);
                for (q, tr) in t.chunks_exact(co).enumerate() {
                    for (o, &u) in (o0..o1).zip(&tr[o0..o1]) {
                        let u = u + p.bias.as_ref().map_or(0.0, |b| b[o]);
                        ys[o * sp + q] = if self.relu && u <= 0.0 { 0.0 } else { u };
                    }
                }
            }
        }
    }
}

/// The columns of one image of a 2-D convolution: row `(c, i, j)` holds input channel `c` at
/// kernel offset `(i, j)` for every output position (zero in the padding).
fn im2col(g: &ConvGeom, x: &[f32], col: &mut [f32]) {
    let (ih, iw, oh, ow) = (g.input[1], g.input[2], g.output[1], g.output[2]);
    let (kh, kw, sp) = (g.kernel[1], g.kernel[2], oh * ow);
    for c in 0..g.in_ch {
        let xc = &x[c * ih * iw..][..ih * iw];
        for i in 0..kh {
            for j in 0..kw {
                let row = &mut col[((c * kh + i) * kw + j) * sp..][..sp];
                for (oy, r) in row.chunks_exact_mut(ow).enumerate() {
                    let iy = (oy * g.stride[1] + i * g.dilate[1]) as isize - g.pad[1] as isize;
                    if iy < 0 || iy >= ih as isize {
                        r.fill(0.0);
                        continue;
                    }
                    let xr = &xc[iy as usize * iw..][..iw];
                    for (ox, v) in r.iter_mut().enumerate() {
                        let ix = (ox * g.stride[2] + j * g.dilate[2]) as isize - g.pad[2] as isize;
                        *v = if ix >= 0 && ix < iw as isize {
                            xr[ix as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
        }
    }
}
