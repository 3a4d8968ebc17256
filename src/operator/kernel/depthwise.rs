//! Direct float32 kernels for depthwise convolutions (one input and one output channel per
//! group): the forward, the data gradient and the weight gradient of 1-D and 2-D layers with any
//! kernel size, stride, dilation and padding.
//!
//! Each plane is first copied into a zero-padded scratch laid out so that every kernel tap is one
//! constant shift of a flat index:
//!
//! - forward and weight gradient: the padded input split into its `sy × sx` stride phases, each a
//!   sub-plane of `zw`-wide rows (sub-plane `(ry, rx)` row `r` column `c` holds padded input
//!   `(r·sy + ry, c·sx + rx)`). Output `(oy, ox)` sits at flat index `f = oy·zw + ox` and tap
//!   `(a, b)` reads the scratch at `f + shift(a, b)`; the columns `ox ≥ ow` of the flat grid are
//!   computed and dropped.
//! - data gradient (the transpose): the output gradient `dy` padded on a `zw`-wide grid, and the
//!   input gradient computed one stride phase `(ry, rx)` at a time: input `(iy, ix) = (jy·sy + ry,
//!   jx·sx + rx)` is the sum over the taps that reach it of `w · dy` at a constant shift of `jy·zw
//!   + jx` (at stride 1: a correlation of `dy` with the flipped kernel).
//!
//! The forward and data gradient then compute [`B`] flat outputs at a time in registers (`V`
//! 16-lane accumulators, each tap one broadcast weight and `V` shifted loads), and store the
//! valid ones with the epilogue: the forward can add a per-channel bias and apply a relu in that
//! store (prepared inference convolutions). The weight gradient keeps 16 lanes per tap for up to
//! [`TG`] taps at a time and streams the output gradient (zero in the dropped columns) once per
//! group, so a 3×3 kernel reads each image's `dy` and input scratch once.
//!
//! Each body is compiled for AVX-512, for AVX2 + FMA and for the baseline, and the best one the
//! CPU has is picked at run time (products and sums are separate roundings on every path, so
//! they agree bit for bit). Planes (and, for the weight gradient, channels) are split over the
//! intra-op pool; the weight gradient sums its images in order, so its result does not depend on
//! scheduling.

use super::conv::{ConvGeom, split};
use super::map::Ptr;

/// Lanes of one accumulator.
const L: usize = 16;
/// Accumulators (vectors of outputs) per block of the forward and data gradient.
const V: usize = 4;
/// Flat outputs per block.
const B: usize = L * V;
/// Taps per group of weight-gradient accumulators (a 3×3 kernel's in one).
const TG: usize = 9;

/// One channel's plane geometry.
#[derive(Clone, Copy, Debug)]
struct Plane {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sy: usize,
    sx: usize,
    dy: usize,
    dx: usize,
    py: usize,
    px: usize,
}

impl Plane {
    fn of(g: &ConvGeom) -> Plane {
        Plane {
            ih: g.input[1],
            iw: g.input[2],
            oh: g.output[1],
            ow: g.output[2],
            kh: g.kernel[1],
            kw: g.kernel[2],
            sy: g.stride[1],
            sx: g.stride[2],
            dy: g.dilate[1],
            dx: g.dilate[2],
            py: g.pad[1],
            px: g.pad[2],
        }
    }
    fn in_sp(&self) -> usize {
        self.ih * self.iw
    }
    fn out_sp(&self) -> usize {
        self.oh * self.ow
    }
    fn taps(&self) -> usize {
        self.kh * self.kw
    }
}

/// The forward's phase-split scratch (see the module docs): `rows` rows of `zw` per sub-plane.
#[derive(Clone, Copy, Debug)]
struct Split {
    rows: usize,
    zw: usize,
}

impl Split {
    fn of(p: &Plane) -> Split {
        Split {
            rows: p.oh + (p.kh - 1) * p.dy / p.sy,
            zw: p.ow + (p.kw - 1) * p.dx / p.sx,
        }
    }
    fn sub(&self) -> usize {
        self.rows * self.zw
    }
    /// Scratch length: the sub-planes, then zeros for the last block's reads past them.
    fn len(&self, p: &Plane) -> usize {
        p.sy * p.sx * self.sub() + self.zw + B
    }
    /// Flat shift of tap `(a, b)`.
    fn shift(&self, p: &Plane, a: usize, b: usize) -> usize {
        let (ya, xb) = (a * p.dy, b * p.dx);
        ((ya % p.sy) * p.sx + xb % p.sx) * self.sub() + (ya / p.sy) * self.zw + xb / p.sx
    }
    /// Output gradient on the flat grid (`oh` rows of `zw`, rounded up to a block, zero padded).
    fn grid_len(&self, p: &Plane) -> usize {
        (p.oh * self.zw).div_ceil(B) * B
    }
}

/// Copies plane `x` into `s` as [`Split`] lays it out, and zeros the padding (every value up to
/// [`Split::len`] is written). Each input row goes to its x phases in one pass: at x stride 2 the
/// even and odd columns are split apart by one vectorised loop.
#[inline(always)]
fn fill_split(p: &Plane, sp: &Split, x: &[f32], s: &mut [f32]) {
    let s = &mut s[..sp.len(p)];
    let (zw, sub) = (sp.zw, sp.sub());
    let planes = p.sy * p.sx;
    // sub-plane columns c0..c1 of x phase rx hold input columns c·sx + rx - px (0 <= it < iw)
    let mut cols = [(0usize, 0usize); 8];
    let mut heap = Vec::new();
    let cols: &mut [(usize, usize)] = if p.sx <= cols.len() {
        &mut cols[..p.sx]
    } else {
        heap.resize(p.sx, (0, 0));
        &mut heap
    };
    for (rx, c) in cols.iter_mut().enumerate() {
        let c0 = p.px.saturating_sub(rx).div_ceil(p.sx).min(zw);
        let c1 = (p.iw + p.px).saturating_sub(rx).div_ceil(p.sx).clamp(c0, zw);
        *c = (c0, c1);
    }
    s[planes * sub..].fill(0.0);
    for ry in 0..p.sy {
        for r in 0..sp.rows {
            let iy = (r * p.sy + ry) as isize - p.py as isize;
            let at = |rx: usize| (ry * p.sx + rx) * sub + r * zw;
            if iy < 0 || iy as usize >= p.ih {
                for rx in 0..p.sx {
                    s[at(rx)..][..zw].fill(0.0);
                }
                continue;
            }
            let xr = &x[iy as usize * p.iw..][..p.iw];
            for (rx, &(c0, c1)) in cols.iter().enumerate() {
                let d = &mut s[at(rx)..][..zw];
                d[..c0].fill(0.0);
                d[c1..].fill(0.0);
            }
            if p.sx == 2 {
                // input column 2k sits in phase px % 2, 2k + 1 in the other, both at column
                // k + c0 of their phase
                let (e, o) = (p.px % 2, 1 - p.px % 2);
                let ((e0, e1), (o0, o1)) = (cols[e], cols[o]);
                let (lo, hi) = s.split_at_mut(at(1));
                let (lo, hi) = (&mut lo[at(0)..][..zw], &mut hi[..zw]);
                let (de, dod) = if e == 0 { (lo, hi) } else { (hi, lo) };
                split2(xr, &mut de[e0..e1], &mut dod[o0..o1]);
            } else {
                for (rx, &(c0, c1)) in cols.iter().enumerate() {
                    if c0 == c1 {
                        continue;
                    }
                    let d = &mut s[at(rx)..][c0..c1];
                    let first = c0 * p.sx + rx - p.px;
                    if p.sx == 1 {
                        d.copy_from_slice(&xr[first..first + d.len()]);
                    } else {
                        for (v, &u) in d.iter_mut().zip(xr[first..].iter().step_by(p.sx)) {
                            *v = u;
                        }
                    }
                }
            }
        }
    }
}

/// `even[k] = x[2k]`, `odd[k] = x[2k + 1]` for the lengths of `even` and `odd`.
#[inline(always)]
fn split2(x: &[f32], even: &mut [f32], odd: &mut [f32]) {
    let m = even.len().min(odd.len());
    for ((pair, e), o) in x[..2 * m].chunks_exact(2).zip(&mut even[..m]).zip(&mut odd[..m]) {
        *e = pair[0];
        *o = pair[1];
    }
    for (k, e) in even.iter_mut().enumerate().skip(m) {
        *e = x[2 * k];
    }
    for (k, o) in odd.iter_mut().enumerate().skip(m) {
        *o = x[2 * k + 1];
    }
}

/// `d[2k] = even[k]`, `d[2k + 1] = odd[k]` for the first `even.len() + odd.len()` values of `d`
/// (`even` as long as `odd` or one longer).
#[inline(always)]
fn join2(d: &mut [f32], even: &[f32], odd: &[f32]) {
    let m = odd.len();
    debug_assert!(even.len() == m || even.len() == m + 1);
    for ((pair, e), o) in d[..2 * m].chunks_exact_mut(2).zip(&even[..m]).zip(odd) {
        pair[0] = *e;
        pair[1] = *o;
    }
    if even.len() > m {
        d[2 * m] = even[m];
    }
}

/// The sums of one block: `acc[i] = Σ_taps w · s[shift + f + i]`.
#[inline(always)]
fn block(s: &[f32], taps: &[(usize, f32)], f: usize) -> [f32; B] {
    let mut acc = [[0.0f32; L]; V];
    for &(off, w) in taps {
        let src: &[f32; B] = s[off + f..][..B].try_into().unwrap();
        for v in 0..V {
            for l in 0..L {
                acc[v][l] += w * src[v * L + l];
            }
        }
    }
    // SAFETY: `[[f32; L]; V]` and `[f32; B]` have the same size and alignment-compatible layout
    // (B = L·V, f32 elements, no padding).
    unsafe { std::mem::transmute::<[[f32; L]; V], [f32; B]>(acc) }
}

/// What the forward's store does to each sum (the matrix products' epilogue: a bias per
/// channel, then optionally a relu).
pub use super::sgemm::Epilogue;

/// `d = epilogue(a)` for one run of a row.
#[inline(always)]
fn store(d: &mut [f32], a: &[f32], bias: Option<f32>, relu: bool) {
    match (bias, relu) {
        (None, false) => d.copy_from_slice(a),
        (Some(b), false) => d.iter_mut().zip(a).for_each(|(d, a)| *d = a + b),
        (b, true) => d.iter_mut().zip(a).for_each(|(d, a)| {
            let t = b.map_or(*a, |b| a + b);
            // relu keeps NaN, as the unfused op does
            *d = if t <= 0.0 { 0.0 } else { t };
        }),
    }
}

#[inline(always)]
fn forward_body(
    p: &Plane,
    x: &[f32],
    w: &[f32],
    bias: Option<f32>,
    relu: bool,
    s: &mut [f32],
    y: &mut [f32],
) {
    let sp = Split::of(p);
    fill_split(p, &sp, x, s);
    let mut taps = [(0usize, 0.0f32); 64];
    let mut heap = Vec::new();
    let taps: &mut [(usize, f32)] = if p.taps() <= taps.len() {
        &mut taps[..p.taps()]
    } else {
        heap.resize(p.taps(), (0, 0.0));
        &mut heap
    };
    for a in 0..p.kh {
        for b in 0..p.kw {
            taps[a * p.kw + b] = (sp.shift(p, a, b), w[a * p.kw + b]);
        }
    }
    let ow = p.ow;
    for f in (0..p.oh * sp.zw).step_by(B) {
        let acc = block(s, taps, f);
        runs(f, sp.zw, p.oh, |i, oy, ox, take| {
            if ox < ow {
                let m = take.min(ow - ox);
                store(&mut y[oy * ow + ox..][..m], &acc[i..i + m], bias, relu);
            }
        });
    }
}

/// Asks the CPU to bring the cache line holding `v` into its caches (a hint; nothing else
/// changes).
#[inline(always)]
fn prefetch(v: &f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and writes no memory or register; `v` is a live reference.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>((v as *const f32).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// Calls `run(i, row, col, take)` for each row run of the block of flat outputs `f..f + B` on a
/// grid of `zw`-wide rows, up to row `rows`: block values `i..i + take` are columns
/// `col..col + take` of `row`.
#[inline(always)]
fn runs(f: usize, zw: usize, rows: usize, mut run: impl FnMut(usize, usize, usize, usize)) {
    let (mut i, mut r, mut c) = (0, f / zw, f % zw);
    while i < B && r < rows {
        let take = (zw - c).min(B - i);
        run(i, r, c, take);
        i += take;
        c += take;
        if c == zw {
            c = 0;
            r += 1;
        }
    }
}

/// The data gradient's padded output-gradient grid (see the module docs): `dy` at rows
/// `top..top + oh`, columns `left..left + ow` of `rows × zw`.
#[derive(Clone, Copy, Debug)]
struct Pad {
    top: usize,
    left: usize,
    rows: usize,
    zw: usize,
}

/// For stride `s`, dilation `d`, padding `pd`, kernel `k`, `n` outputs and `len` inputs: the
/// (phase, tap) pairs that reach an input, with `q` the output index of input phase index 0
/// (`q = (r + pd - t·d) / s`, exact).
fn phase_taps(s: usize, d: usize, pd: usize, k: usize) -> impl Iterator<Item = (usize, usize, isize)> {
    (0..s).flat_map(move |r| {
        (0..k).filter_map(move |t| {
            let num = (r + pd) as isize - (t * d) as isize;
            (num.rem_euclid(s as isize) == 0).then(|| (r, t, num.div_euclid(s as isize)))
        })
    })
}

/// Inputs of phase `r` along an axis of `len` at stride `s`.
fn phase_len(len: usize, s: usize, r: usize) -> usize {
    len.saturating_sub(r).div_ceil(s)
}

impl Pad {
    fn of(p: &Plane) -> Pad {
        let axis = |s, d, pd, k, len, n| {
            let mut lead = 0isize;
            let mut span = n as isize;
            for (r, _, q) in phase_taps(s, d, pd, k) {
                lead = lead.max(-q);
                span = span.max(phase_len(len, s, r) as isize + q);
            }
            (lead as usize, (lead + span) as usize)
        };
        let (top, rows) = axis(p.sy, p.dy, p.py, p.kh, p.ih, p.oh);
        let (left, zw) = axis(p.sx, p.dx, p.px, p.kw, p.iw, p.ow);
        Pad { top, left, rows, zw }
    }
    fn len(&self) -> usize {
        self.rows * self.zw + self.zw + B
    }
}

#[inline(always)]
fn data_grad_body(p: &Plane, dy: &[f32], w: &[f32], s: &mut [f32], dx: &mut [f32]) {
    let pd = Pad::of(p);
    let s = &mut s[..pd.len()];
    let zw = pd.zw;
    s[..pd.top * zw].fill(0.0);
    for oy in 0..p.oh {
        let d = &mut s[(pd.top + oy) * zw..][..zw];
        d[..pd.left].fill(0.0);
        d[pd.left..pd.left + p.ow].copy_from_slice(&dy[oy * p.ow..][..p.ow]);
        d[pd.left + p.ow..].fill(0.0);
    }
    s[(pd.top + p.oh) * zw..].fill(0.0);
    // the taps of x phase rx are taps[at[rx]..at[rx + 1]] (none: that phase is zero)
    let mut taps = Vec::with_capacity(p.taps());
    let mut at = vec![0; p.sx + 1];
    for ry in 0..p.sy.min(p.ih) {
        taps.clear();
        for (rx, start) in at[..p.sx].iter_mut().enumerate() {
            *start = taps.len();
            for (_, a, qa) in phase_taps(p.sy, p.dy, p.py, p.kh).filter(|t| t.0 == ry) {
                for (_, b, qb) in phase_taps(p.sx, p.dx, p.px, p.kw).filter(|t| t.0 == rx) {
                    let off = (qa + pd.top as isize) as usize * zw + (qb + pd.left as isize) as usize;
                    taps.push((off, w[a * p.kw + b]));
                }
            }
        }
        at[p.sx] = taps.len();
        let jh = phase_len(p.ih, p.sy, ry);
        let row = |jy: usize| (jy * p.sy + ry) * p.iw;
        if p.sx == 2 {
            // both x phases of a block, then each run of a dx row stored once, interleaved
            let (t0, t1) = (&taps[at[0]..at[1]], &taps[at[1]..at[2]]);
            let (jw0, jw1) = (phase_len(p.iw, 2, 0), phase_len(p.iw, 2, 1));
            for f in (0..jh * zw).step_by(B) {
                let (a0, a1) = (block(s, t0, f), block(s, t1, f));
                runs(f, zw, jh, |i, jy, jx, take| {
                    if jx < jw0 {
                        let (m0, m1) = (take.min(jw0 - jx), take.min(jw1.saturating_sub(jx)));
                        join2(&mut dx[row(jy) + 2 * jx..][..m0 + m1], &a0[i..i + m0], &a1[i..i + m1]);
                    }
                });
            }
            continue;
        }
        for rx in 0..p.sx.min(p.iw) {
            let t = &taps[at[rx]..at[rx + 1]];
            let jw = phase_len(p.iw, p.sx, rx);
            for f in (0..jh * zw).step_by(B) {
                let acc = block(s, t, f);
                runs(f, zw, jh, |i, jy, jx, take| {
                    if jx < jw {
                        let m = take.min(jw - jx);
                        let d = &mut dx[row(jy)..][..p.iw];
                        if p.sx == 1 {
                            d[jx..jx + m].copy_from_slice(&acc[i..i + m]);
                        } else {
                            for (d, a) in d[jx * p.sx + rx..].iter_mut().step_by(p.sx).zip(&acc[i..i + m]) {
                                *d = *a;
                            }
                        }
                    }
                });
            }
        }
    }
}

/// Adds one image's plane to the taps' lane sums `acc` (`taps × L`); `s` and `grid` scratch.
/// `next` (the input and output gradient planes the caller takes next, or empty) is prefetched
/// a few cache lines per step of the first tap group: the caller steps through planes a channel
/// apart, so each would otherwise open a new memory stream whose first reads wait on memory.
#[inline(always)]
fn weight_grad_body(
    p: &Plane,
    x: &[f32],
    dy: &[f32],
    next: (&[f32], &[f32]),
    s: &mut [f32],
    grid: &mut [f32],
    acc: &mut [[f32; L]],
) {
    let sp = Split::of(p);
    fill_split(p, &sp, x, s);
    let n = sp.grid_len(p);
    let grid = &mut grid[..n];
    for oy in 0..p.oh {
        let d = &mut grid[oy * sp.zw..][..sp.zw];
        d[..p.ow].copy_from_slice(&dy[oy * p.ow..][..p.ow]);
        d[p.ow..].fill(0.0);
    }
    grid[p.oh * sp.zw..].fill(0.0);
    let kk = p.taps();
    let mut t0 = 0;
    while t0 < kk {
        let m = TG.min(kk - t0);
        // a short group repeats its first tap in the unused slots (their sums are dropped)
        let mut off = [0usize; TG];
        for (j, o) in off.iter_mut().enumerate() {
            let t = t0 + if j < m { j } else { 0 };
            *o = sp.shift(p, t / p.kw, t % p.kw);
        }
        let mut a = [[0.0f32; L]; TG];
        a[..m].copy_from_slice(&acc[t0..t0 + m]);
        let hi = off.iter().copied().max().unwrap_or(0) + n;
        let s = &s[..hi];
        let (nx, ny) = if t0 == 0 { next } else { (&[][..], &[][..]) };
        let lines = (nx.len() + ny.len()).div_ceil(L);
        let per = lines.div_ceil(n / L);
        for f in (0..n).step_by(L) {
            for k in (f / L * per..).take(per) {
                let e = k * L;
                if e < nx.len() {
                    prefetch(&nx[e]);
                } else if e - nx.len() < ny.len() {
                    prefetch(&ny[e - nx.len()]);
                }
            }
            let g: &[f32; L] = grid[f..f + L].try_into().unwrap();
            for j in 0..TG {
                let src: &[f32; L] = s[off[j] + f..][..L].try_into().unwrap();
                for l in 0..L {
                    a[j][l] += g[l] * src[l];
                }
            }
        }
        acc[t0..t0 + m].copy_from_slice(&a[..m]);
        t0 += m;
    }
}

multiversion!(forward_plane(p: &Plane, x: &[f32], w: &[f32], bias: Option<f32>, relu: bool, s: &mut [f32], y: &mut [f32]) => forward_body);
multiversion!(data_grad_plane(p: &Plane, dy: &[f32], w: &[f32], s: &mut [f32], dx: &mut [f32]) => data_grad_body);
multiversion!(weight_grad_plane(p: &Plane, x: &[f32], dy: &[f32], next: (&[f32], &[f32]), s: &mut [f32], grid: &mut [f32], acc: &mut [[f32; L]]) => weight_grad_body);

/// Whether `g` takes these kernels: depthwise, 1-D or 2-D.
pub fn applies(g: &ConvGeom) -> bool {
    g.in_ch == g.groups
        && g.out_ch == g.groups
        && g.input[0] == 1
        && g.output[0] == 1
        && g.kernel[0] == 1
        && g.pad[0] == 0
        && g.kernel[1] >= 1
        && g.kernel[2] >= 1
        && g.stride[1..].iter().all(|&s| s >= 1)
        && g.dilate[1..].iter().all(|&d| d >= 1)
}

/// `y = conv(x, w)` (see [`applies`]); `y` overwritten.
pub fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    forward_with(g, x, w, Epilogue::default(), y);
}

/// `y = epilogue(conv(x, w))`: the bias and relu applied as the outputs are stored.
pub fn forward_with(g: &ConvGeom, x: &[f32], w: &[f32], e: Epilogue, y: &mut [f32]) {
    let p = Plane::of(g);
    let c = g.in_ch;
    assert!(e.bias.is_none_or(|b| b.len() >= c));
    let len = Split::of(&p).len(&p);
    each_plane(g, &p, x, p.in_sp(), w, y, p.out_sp(), len, |q, xs, wc, s, ys| {
        let b = e.bias.map(|b| b[q % c]);
        forward_plane(&p, xs, wc, b, e.relu, s, ys)
    });
}

/// `dx = convᵀ(dy, w)`, the data gradient (see [`applies`]); `dx` overwritten.
pub fn data_grad(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let p = Plane::of(g);
    let len = Pad::of(&p).len();
    each_plane(g, &p, dy, p.out_sp(), w, dx, p.in_sp(), len, |_, ys, wc, s, xs| {
        data_grad_plane(&p, ys, wc, s, xs)
    });
}

/// `plane(q, src plane, its channel's taps, scratch, dst plane)` for every (image, channel)
/// plane `q` of `src` (planes of `src_sp` values) into `dst` (planes of `dst_sp`), split over the
/// pool; each range has one scratch of `scratch` values.
#[allow(clippy::too_many_arguments)]
fn each_plane(
    g: &ConvGeom,
    p: &Plane,
    src: &[f32],
    src_sp: usize,
    w: &[f32],
    dst: &mut [f32],
    dst_sp: usize,
    scratch: usize,
    plane: impl Fn(usize, &[f32], &[f32], &mut [f32], &mut [f32]) + Sync,
) {
    let (kk, c) = (p.taps(), g.in_ch);
    let planes = g.batch * c;
    assert!(src.len() >= planes * src_sp && dst.len() >= planes * dst_sp && w.len() >= c * kk);
    let dp = Ptr(dst.as_mut_ptr());
    split(planes, |qs| {
        let mut s = vec![0.0f32; scratch];
        for q in qs {
            // SAFETY: plane q of `dst` is written by this range only; in bounds (asserted).
            let ds = unsafe { std::slice::from_raw_parts_mut(dp.get().add(q * dst_sp), dst_sp) };
            let wc = &w[(q % c) * kk..][..kk];
            plane(q, &src[q * src_sp..][..src_sp], wc, &mut s, ds);
        }
    });
}

/// `dw = Σ_images` the weight gradient from `x` and `dy` (see [`applies`]); `dw` overwritten.
pub fn weight_grad(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    let p = Plane::of(g);
    let (isp, osp, kk, c) = (p.in_sp(), p.out_sp(), p.taps(), g.in_ch);
    assert!(x.len() >= g.batch * c * isp && dy.len() >= g.batch * c * osp && dw.len() >= c * kk);
    let sp = Split::of(&p);
    let dwp = Ptr(dw.as_mut_ptr());
    split(c, |channels| {
        let mut acc = vec![[0.0f32; L]; kk];
        let mut s = vec![0.0f32; sp.len(&p)];
        let mut grid = vec![0.0f32; sp.grid_len(&p)];
        let end = channels.end;
        for ch in channels {
            acc.iter_mut().for_each(|a| *a = [0.0; L]);
            for n in 0..g.batch {
                let q = n * c + ch;
                let (xs, ys) = (&x[q * isp..][..isp], &dy[q * osp..][..osp]);
                // the next image of this channel, else the first of the next channel
                let nq = if n + 1 < g.batch { Some(q + c) } else { (ch + 1 < end).then_some(ch + 1) };
                let next = nq.map_or((&[][..], &[][..]), |r| (&x[r * isp..][..isp], &dy[r * osp..][..osp]));
                weight_grad_plane(&p, xs, ys, next, &mut s, &mut grid, &mut acc);
            }
            // SAFETY: channel ch's taps of `dw` are written by this range only; in bounds
            // (asserted).
            let d = unsafe { std::slice::from_raw_parts_mut(dwp.get().add(ch * kk), kk) };
            for (d, a) in d.iter_mut().zip(&acc) {
                *d = a.iter().sum();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The instruction sets the bodies are tested on.
    #[derive(Clone, Copy, Debug)]
    enum Isa {
        Best,
        Avx2,
        Baseline,
    }

    #[cfg(target_arch = "x86_64")]
    mod avx2 {
        use super::super::*;
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn forward(p: &Plane, x: &[f32], w: &[f32], b: Option<f32>, r: bool, s: &mut [f32], y: &mut [f32]) {
            forward_body(p, x, w, b, r, s, y)
        }
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn data_grad(p: &Plane, dy: &[f32], w: &[f32], s: &mut [f32], dx: &mut [f32]) {
            data_grad_body(p, dy, w, s, dx)
        }
        #[target_feature(enable = "avx2,fma")]
        pub(super) fn weight_grad(p: &Plane, x: &[f32], dy: &[f32], nx: (&[f32], &[f32]), s: &mut [f32], g: &mut [f32], a: &mut [[f32; L]]) {
            weight_grad_body(p, x, dy, nx, s, g, a)
        }
    }

    fn avx2_ok() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }

    /// Every plane of `g` through one instruction set's bodies (serially): forward with an
    /// epilogue, data gradient, weight gradient.
    fn run(isa: Isa, g: &ConvGeom, x: &[f32], w: &[f32], e: Epilogue, dy: &[f32]) -> [Vec<f32>; 3] {
        let p = Plane::of(g);
        let (c, kk, isp, osp) = (g.in_ch, p.taps(), p.in_sp(), p.out_sp());
        let mut s = vec![f32::NAN; Split::of(&p).len(&p).max(Pad::of(&p).len())];
        let mut grid = vec![f32::NAN; Split::of(&p).grid_len(&p)];
        let mut y = vec![f32::NAN; g.batch * c * osp];
        let mut dx = vec![f32::NAN; g.batch * c * isp];
        let mut dw = vec![0.0f32; c * kk];
        for ch in 0..c {
            let wc = &w[ch * kk..][..kk];
            let b = e.bias.map(|b| b[ch]);
            let mut acc = vec![[0.0f32; L]; kk];
            for n in 0..g.batch {
                let q = n * c + ch;
                let (xs, ys) = (&x[q * isp..][..isp], &dy[q * osp..][..osp]);
                let (yo, dxo) = (&mut y[q * osp..][..osp], &mut dx[q * isp..][..isp]);
                let nx = if n + 1 < g.batch { (&x[(q + c) * isp..][..isp], &dy[(q + c) * osp..][..osp]) } else { (&[][..], &[][..]) };
                match isa {
                    Isa::Best => {
                        forward_plane(&p, xs, wc, b, e.relu, &mut s, yo);
                        data_grad_plane(&p, ys, wc, &mut s, dxo);
                        weight_grad_plane(&p, xs, ys, nx, &mut s, &mut grid, &mut acc);
                    }
                    Isa::Baseline => {
                        forward_body(&p, xs, wc, b, e.relu, &mut s, yo);
                        data_grad_body(&p, ys, wc, &mut s, dxo);
                        weight_grad_body(&p, xs, ys, nx, &mut s, &mut grid, &mut acc);
                    }
                    // SAFETY: only run where the CPU has AVX2 and FMA (`avx2_ok`).
                    Isa::Avx2 => unsafe {
                        avx2::forward(&p, xs, wc, b, e.relu, &mut s, yo);
                        avx2::data_grad(&p, ys, wc, &mut s, dxo);
                        avx2::weight_grad(&p, xs, ys, nx, &mut s, &mut grid, &mut acc);
                    },
                }
            }
            for (d, a) in dw[ch * kk..][..kk].iter_mut().zip(&acc) {
                *d = a.iter().sum();
            }
        }
        [y, dx, dw]
    }

    /// The naive direct convolution in f64 and its two gradients: `y[n, c, oy, ox] = Σ w · x`
    /// over the taps inside; `dx` and `dw` gather `dy` through the same index map.
    fn naive(g: &ConvGeom, x: &[f64], w: &[f64], dy: &[f64]) -> [Vec<f64>; 3] {
        let p = Plane::of(g);
        let mut y = vec![0.0; g.batch * g.in_ch * p.out_sp()];
        let mut dx = vec![0.0; g.batch * g.in_ch * p.in_sp()];
        let mut dw = vec![0.0; g.in_ch * p.taps()];
        for q in 0..g.batch * g.in_ch {
            let c = q % g.in_ch;
            for oy in 0..p.oh {
                for ox in 0..p.ow {
                    let o = q * p.out_sp() + oy * p.ow + ox;
                    let mut t = 0.0;
                    for a in 0..p.kh {
                        for b in 0..p.kw {
                            let iy = (oy * p.sy + a * p.dy) as isize - p.py as isize;
                            let ix = (ox * p.sx + b * p.dx) as isize - p.px as isize;
                            if iy >= 0 && ix >= 0 && (iy as usize) < p.ih && (ix as usize) < p.iw {
                                let (wi, xi) = (c * p.taps() + a * p.kw + b, q * p.in_sp() + iy as usize * p.iw + ix as usize);
                                t += w[wi] * x[xi];
                                dx[xi] += w[wi] * dy[o];
                                dw[wi] += x[xi] * dy[o];
                            }
                        }
                    }
                    y[o] = t;
                }
            }
        }
        [y, dx, dw]
    }

    fn geom(batch: usize, c: usize, [h, w]: [usize; 2], k: [usize; 2], s: [usize; 2], d: [usize; 2], p: [usize; 2]) -> ConvGeom {
        let out = |i: usize| ([h, w][i] + 2 * p[i] - (d[i] * (k[i] - 1) + 1)) / s[i] + 1;
        ConvGeom {
            batch,
            groups: c,
            in_ch: c,
            out_ch: c,
            input: [1, h, w],
            output: [1, out(0), out(1)],
            kernel: [1, k[0], k[1]],
            stride: [1, s[0], s[1]],
            dilate: [1, d[0], d[1]],
            pad: [0, p[0], p[1]],
        }
    }

    /// Strides 1/2/3, pads 0/1/2 (and past the kernel), odd sizes, rows shorter and longer than
    /// 16 lanes and than a block, dilation, 1-D, kernels of more taps than a weight-gradient
    /// group; forward (plain and with bias and relu) against the naive convolution, the
    /// gradients by their adjoint identities `<conv(x), dy> = <x, convᵀ(dy)> = <w, dw>`.
    #[test]
    fn depthwise_kernels_match_a_naive_convolution_and_their_adjoints() {
        let mut cases = Vec::new();
        for s in [1, 2, 3] {
            for pad in [0, 1, 2] {
                for (h, w) in [(7, 9), (12, 19), (5, 70), (9, 113)] {
                    cases.push(geom(2, 3, [h, w], [3, 3], [s, s], [1, 1], [pad, pad]));
                }
            }
        }
        cases.extend([
            geom(1, 2, [6, 7], [3, 3], [2, 1], [1, 1], [1, 2]),
            geom(2, 3, [13, 18], [5, 5], [2, 1], [1, 1], [2, 1]),
            geom(2, 2, [12, 19], [3, 3], [1, 1], [2, 2], [2, 2]),
            geom(2, 2, [15, 33], [3, 3], [2, 2], [2, 2], [2, 2]),
            geom(1, 3, [5, 6], [3, 3], [1, 1], [1, 1], [3, 2]),
            geom(2, 3, [11, 16], [3, 3], [2, 2], [1, 1], [4, 3]),
            geom(2, 4, [1, 33], [1, 3], [1, 1], [1, 1], [0, 1]),
            geom(2, 4, [1, 40], [1, 5], [1, 3], [1, 2], [0, 2]),
            geom(1, 2, [17, 23], [7, 7], [2, 3], [1, 1], [3, 3]),
            geom(1, 2, [2, 3], [3, 3], [2, 2], [1, 1], [1, 1]),
            geom(1, 2, [14, 14], [3, 3], [2, 2], [1, 1], [1, 1]),
        ]);
        // x strides 2 and 3: odd and even sizes, rows below and above 16 and 32 columns (the
        // phase split's and the data gradient's interleaved stores have tails), dilation 2
        for s in [2, 3] {
            for pad in [0, 1, 2] {
                for (h, w) in [(6, 8), (7, 15), (8, 16), (5, 17), (9, 31), (4, 32), (6, 33), (3, 34), (10, 56), (11, 57)] {
                    cases.push(geom(1, 2, [h, w], [3, 3], [s, s], [1, 1], [pad, pad]));
                }
                for w in [13, 32, 35, 64, 67] {
                    cases.push(geom(1, 2, [9, w], [3, 3], [s, s], [2, 2], [pad, pad]));
                    cases.push(geom(1, 2, [w % 9 + 4, w], [3, 3], [1, s], [1, 2], [pad, 2 - pad]));
                    cases.push(geom(1, 2, [8, w], [2, 4], [3, s], [2, 1], [1, pad]));
                }
            }
        }
        // a row narrower than the stride and than the kernel
        cases.extend([
            geom(1, 2, [5, 1], [3, 3], [2, 2], [1, 1], [1, 1]),
            geom(1, 2, [4, 2], [3, 3], [2, 2], [1, 1], [1, 1]),
            geom(1, 2, [3, 3], [1, 1], [2, 2], [1, 1], [0, 0]),
            geom(1, 2, [7, 5], [3, 3], [2, 3], [1, 1], [2, 2]),
        ]);
        let isas = if avx2_ok() {
            vec![Isa::Best, Isa::Avx2, Isa::Baseline]
        } else {
            vec![Isa::Best, Isa::Baseline]
        };
        for g in cases {
            let p = Plane::of(&g);
            let (xl, yl, wl) = (g.batch * g.in_ch * p.in_sp(), g.batch * g.in_ch * p.out_sp(), g.in_ch * p.taps());
            let val = |i: usize, a: usize, b: usize| ((i * a) % b) as f64 / b as f64 - 0.5;
            let x: Vec<f64> = (0..xl).map(|i| val(i, 7, 11)).collect();
            let w: Vec<f64> = (0..wl).map(|i| val(i, 5, 7)).collect();
            let dy: Vec<f64> = (0..yl).map(|i| val(i, 3, 13)).collect();
            let bias: Vec<f64> = (0..g.in_ch).map(|i| val(i, 3, 5)).collect();
            let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let (xf, wf, dyf, bf) = (f32s(&x), f32s(&w), f32s(&dy), f32s(&bias));
            let [want, want_dx, want_dw] = naive(&g, &x, &w, &dy);
            let dot = |a: &[f32], b: &[f64]| a.iter().zip(b).map(|(a, b)| *a as f64 * b).sum::<f64>();
            let adj: f64 = want.iter().zip(&dy).map(|(a, b)| a * b).sum();
            let scale = adj.abs().max(1.0);
            let close = |what: &str, isa: Isa, got: &[f32], want: &[f64], tol: f64| {
                assert_eq!(got.len(), want.len());
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    assert!((*a as f64 - b).abs() <= tol, "{isa:?} {what} {i}: {a} vs {b} ({g:?})");
                }
            };
            let mut first: Option<[Vec<f32>; 3]> = None;
            for &isa in &isas {
                let [y, dx, dw] = run(isa, &g, &xf, &wf, Epilogue::default(), &dyf);
                for (i, (a, b)) in y.iter().zip(&want).enumerate() {
                    assert!((*a as f64 - b).abs() <= 1e-5, "{isa:?} forward {i}: {a} vs {b} ({g:?})");
                }
                let e = Epilogue { bias: Some(&bf), relu: true };
                let [yr, ..] = run(isa, &g, &xf, &wf, e, &dyf);
                for (i, (a, b)) in yr.iter().zip(&want).enumerate() {
                    let t = (b + bias[(i / p.out_sp()) % g.in_ch]).max(0.0);
                    assert!((*a as f64 - t).abs() <= 1e-5, "{isa:?} relu {i}: {a} vs {t} ({g:?})");
                }
                assert!((dot(&dx, &x) - adj).abs() <= 1e-5 * scale, "{isa:?} data grad ({g:?})");
                assert!((dot(&dw, &w) - adj).abs() <= 1e-5 * scale, "{isa:?} weight grad ({g:?})");
                close("data grad", isa, &dx, &want_dx, 1e-5);
                close("weight grad", isa, &dw, &want_dw, 1e-5 * (g.batch * p.out_sp()) as f64);
                // every instruction set computes the same roundings
                match &first {
                    None => first = Some([y, dx, dw]),
                    Some(f) => {
                        assert_eq!(f[0], y, "{isa:?} forward bits ({g:?})");
                        assert_eq!(f[1], dx, "{isa:?} data grad bits ({g:?})");
                    }
                }
            }
            // the pooled entry points agree with the serial planes
            let mut y = vec![f32::NAN; yl];
            forward(&g, &xf, &wf, &mut y);
            let mut dx = vec![f32::NAN; xl];
            data_grad(&g, &dyf, &wf, &mut dx);
            let mut dw = vec![f32::NAN; wl];
            weight_grad(&g, &xf, &dyf, &mut dw);
            let f = first.unwrap();
            assert_eq!(f[0], y, "pooled forward ({g:?})");
            assert_eq!(f[1], dx, "pooled data grad ({g:?})");
            assert_eq!(f[2], dw, "pooled weight grad ({g:?})");
        }
    }
}
