//! Convolution kernels: im2col + GEMM for `Convolution`, `Deconvolution` and their gradients.
//!
//! Every convolution is seen as one mapping between an *input* side (the convolution's data,
//! `in_ch` channels) and an *output* side (`out_ch` channels) with a weight of shape
//! `(out_ch, in_ch / groups, kernel...)`. Three products cover the forward passes and every
//! gradient of both operators:
//!
//! - [`lower`]: input → output (Convolution's forward, Deconvolution's data gradient);
//! - [`raise`]: output → input, the transpose (Convolution's data gradient, Deconvolution's
//!   forward);
//! - [`weight_grad`]: the weight's gradient from an input-side and an output-side array.
//!
//! 1-D and 2-D convolutions are 3-D ones with leading spatial sizes of 1. Each image and group is
//! one GEMM over the image's columns (`im2col`: one row per input channel and kernel offset, one
//! column per output position); a pointwise convolution (1×1 kernel, stride 1, no padding)
//! multiplies the image itself. With several images the batch is split over the intra-op pool
//! (each thread with its own column buffer and a serial GEMM); a single image gets the GEMM's own
//! threads. Float32 layers have faster paths: Winograd (`winograd.rs`) for 3×3 stride-1 layers,
//! a direct AVX-512 kernel (`direct.rs`) for few-input-channel and stride-2 layers, and direct
//! register-blocked kernels (`depthwise.rs`) for depthwise ones.

use super::depthwise;
use super::direct;
use super::element::Element;
use super::gemm::{
    self, Epilogue, Operand, Packed, View, matmul, matmul_serial, matmul_view_serial,
};
use super::map::Ptr;
use super::winograd::{self, Wino};
use crate::parallel;
use std::ops::{Add, Mul};

/// The element types the convolution kernels compute in.
pub trait ConvElement: Element + Add<Output = Self> + Mul<Output = Self> {}
impl<T: Element + Add<Output = T> + Mul<Output = T>> ConvElement for T {}

/// One convolution's sizes (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeom {
    pub batch: usize,
    pub groups: usize,
    /// Channels on the input side (all groups).
    pub in_ch: usize,
    /// Channels on the output side (all groups).
    pub out_ch: usize,
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub dilate: [usize; 3],
    pub pad: [usize; 3],
}

impl ConvGeom {
    fn in_sp(&self) -> usize {
        self.input.iter().product()
    }
    fn out_sp(&self) -> usize {
        self.output.iter().product()
    }
    fn in_g(&self) -> usize {
        self.in_ch / self.groups
    }
    fn out_g(&self) -> usize {
        self.out_ch / self.groups
    }
    /// Rows of an image's columns: input channels of a group × kernel offsets.
    fn k_rows(&self) -> usize {
        self.in_g() * self.kernel.iter().product::<usize>()
    }
    /// The columns are the image itself.
    fn pointwise(&self) -> bool {
        self.kernel == [1; 3]
            && self.stride == [1; 3]
            && self.pad == [0; 3]
            && self.input == self.output
    }
    /// Elements of the weight.
    pub fn weight_len(&self) -> usize {
        self.out_ch * self.k_rows()
    }
    /// Elements of a block of columns (`rows` output rows).
    fn col_len(&self, rows: usize) -> usize {
        if self.pointwise() {
            0
        } else {
            self.k_rows() * rows * self.output[2]
        }
    }
    /// Multiply-adds of one image.
    fn image_flops(&self) -> usize {
        self.out_ch * self.k_rows() * self.out_sp()
    }
}

/// The range of output positions `o` whose input index `o * stride + off` lies in `0..len`.
#[inline]
fn valid_range(out: usize, stride: usize, off: isize, len: usize) -> (usize, usize) {
    let lo = if off >= 0 {
        0
    } else {
        ((-off) as usize).div_ceil(stride)
    };
    let hi = if (len as isize) <= off {
        0
    } else {
        ((len as isize - off) as usize).div_ceil(stride)
    };
    let lo = lo.min(out);
    (lo, hi.min(out).max(lo))
}

/// Calls `f(dst, lo, hi, ow, off, src)` for the runs shared by im2col and col2im, over the output
/// rows (z, y) `rows` of the flattened `od × oh` (all of them for the whole columns): for every
/// input channel of a group and kernel offset (one column row of `rows.len() × ow` values), every
/// output row, its place `dst` in the columns, the range `lo..hi` of x positions whose input
/// exists and the input row's offset `src` (`usize::MAX` when the input row does not exist).
#[inline]
fn for_each_run(
    g: &ConvGeom,
    rows: std::ops::Range<usize>,
    mut f: impl FnMut(usize, usize, usize, usize, isize, usize),
) {
    let [id, ih, iw] = g.input;
    let [_, oh, ow] = g.output;
    let [k0, k1, k2] = g.kernel;
    let [s0, s1, s2] = g.stride;
    let [d0, d1, d2] = g.dilate;
    let [p0, p1, p2] = g.pad;
    let in_sp = g.in_sp();
    let l = rows.len() * ow;
    let mut row = 0;
    for c in 0..g.in_g() {
        for kd in 0..k0 {
            for kh in 0..k1 {
                for kw in 0..k2 {
                    let off = (kw * d2) as isize - p2 as isize;
                    let (lo, hi) = valid_range(ow, s2, off, iw);
                    for zy in rows.clone() {
                        let (z, y) = (zy / oh, zy % oh);
                        let iz = (z * s0 + kd * d0) as isize - p0 as isize;
                        let iy = (y * s1 + kh * d1) as isize - p1 as isize;
                        let dst = row * l + (zy - rows.start) * ow;
                        if iz < 0 || iz >= id as isize || iy < 0 || iy >= ih as isize {
                            // (dst, no source)
                            f(dst, ow, 0, 0, 0, usize::MAX);
                            continue;
                        }
                        let src = c * in_sp + (iz as usize * ih + iy as usize) * iw;
                        f(dst, lo, hi, ow, off, src);
                    }
                    row += 1;
                }
            }
        }
    }
}

/// The columns of output rows `rows` of an image's group: `col[k_rows × rows.len() * ow]` from
/// `x[in_g × in_sp]`.
fn im2col<T: ConvElement>(g: &ConvGeom, rows: std::ops::Range<usize>, x: &[T], col: &mut [T]) {
    let s2 = g.stride[2];
    let zero = T::zero();
    for_each_run(g, rows, |dst, lo, hi, ow, off, src| {
        if src == usize::MAX {
            col[dst..dst + lo].fill(zero);
            return;
        }
        let out = &mut col[dst..dst + ow];
        out[..lo].fill(zero);
        out[hi..].fill(zero);
        if hi == lo {
            return;
        }
        let a = (src as isize + (lo * s2) as isize + off) as usize;
        let xs = &x[a..a + (hi - lo - 1) * s2 + 1];
        if s2 == 1 {
            out[lo..hi].copy_from_slice(xs);
        } else {
            for (o, v) in out[lo..hi].iter_mut().zip(xs.iter().step_by(s2)) {
                *o = *v;
            }
        }
    });
}

/// The transpose of [`im2col`]: adds the columns of output rows `rows` back into `x`.
fn col2im<T: ConvElement>(g: &ConvGeom, rows: std::ops::Range<usize>, col: &[T], x: &mut [T]) {
    let s2 = g.stride[2];
    for_each_run(g, rows, |dst, lo, hi, _ow, off, src| {
        if src == usize::MAX || hi == lo {
            return;
        }
        let a = (src as isize + (lo * s2) as isize + off) as usize;
        let xs = &mut x[a..a + (hi - lo - 1) * s2 + 1];
        let cs = &col[dst + lo..dst + hi];
        if s2 == 1 {
            for (v, c) in xs.iter_mut().zip(cs) {
                *v = *v + *c;
            }
        } else {
            for (v, c) in xs.iter_mut().step_by(s2).zip(cs) {
                *v = *v + *c;
            }
        }
    });
}

/// Output rows per block of columns: a block's columns near `MXRT_CONV_COL_BYTES` (2 MiB: the
/// L2 cache's size, measured against 512 KiB, whose narrower products lost more than the cache
/// won; 0: the whole image at once).
fn block_rows<T>(g: &ConvGeom) -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let budget = *BYTES.get_or_init(|| {
        std::env::var("MXRT_CONV_COL_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2 << 20)
    });
    let rows = g.output[0] * g.output[1];
    let row_bytes = g.k_rows() * g.output[2] * std::mem::size_of::<T>();
    if budget == 0 {
        rows
    } else {
        (budget / row_bytes.max(1)).clamp(1, rows.max(1))
    }
}

/// `0..rows` in blocks of `step`.
fn blocks(rows: usize, step: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..rows).step_by(step.max(1)).map(move |r| r..(r + step).min(rows))
}

thread_local! {
    /// The calling thread's column buffer, kept between convolutions (grown, never shrunk): a
    /// buffer allocated per call was freed, purged by the allocator and faulted in again as
    /// fresh zeroed pages on the next call.
    static SCRATCH: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Calls `f` with `len` elements of the thread's reusable scratch (contents left from earlier
/// calls: every user writes what it reads), or a fresh buffer when one is already in use on
/// this thread.
fn with_scratch<T: ConvElement, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    assert!(std::mem::align_of::<T>() <= 8);
    let words = (len * std::mem::size_of::<T>()).div_ceil(8);
    let mut buf = SCRATCH.try_with(|b| b.take()).unwrap_or_default();
    if buf.len() < words {
        buf = vec![0u64; words];
    }
    // SAFETY: `buf` holds `words · 8 ≥ len · size_of::<T>()` initialised bytes at an alignment
    // of 8 ≥ `T`'s (asserted); the element types are plain numbers (floats, integers, a byte
    // boolean), for which every bit pattern is a value. The slice lives inside this call.
    let s = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<T>(), len) };
    let r = f(s);
    let _ = SCRATCH.try_with(|b| b.set(buf));
    r
}

/// Output rows per block of columns for one call of `over_images`'s function: blocks when its
/// products run on one thread, else the whole image for the GEMM's own threads.
fn rows_per_block<T>(g: &ConvGeom, serial: bool) -> usize {
    if serial || parallel::max_threads() <= 1 {
        block_rows::<T>(g)
    } else {
        g.output[0] * g.output[1]
    }
}

/// A depthwise convolution (one input and one output channel per group) runs as direct loops
/// over each channel's plane: its GEMMs would be one row each.
fn depthwise(g: &ConvGeom) -> bool {
    g.in_g() == 1 && g.out_g() == 1
}

/// The one-channel geometry a depthwise convolution's planes share.
fn plane_geom(g: &ConvGeom) -> ConvGeom {
    ConvGeom {
        batch: 1,
        groups: 1,
        in_ch: 1,
        out_ch: 1,
        ..*g
    }
}

/// Calls `f(k, out, in, len)` for every run of a one-channel plane: kernel offset `k` maps the
/// `len` outputs from `out` on to the inputs from `in` at the plane's x stride.
#[inline(always)]
fn each_tap(p: &ConvGeom, mut f: impl FnMut(usize, usize, usize, usize)) {
    let (l, s2) = (p.out_sp(), p.stride[2]);
    for_each_run(p, 0..p.output[0] * p.output[1], |dst, lo, hi, _ow, off, src| {
        if src == usize::MAX || hi == lo {
            return;
        }
        let (k, o) = (dst / l, dst % l);
        f(
            k,
            o + lo,
            (src as isize + (lo * s2) as isize + off) as usize,
            hi - lo,
        );
    });
}

/// `y[o..o + len] += w · x[i], x[i + s], ...`.
#[inline(always)]
fn axpy_to<T: ConvElement>(y: &mut [T], w: T, x: &[T], s: usize) {
    if s == 1 {
        for (a, b) in y.iter_mut().zip(x) {
            *a = *a + w * *b;
        }
    } else {
        for (a, b) in y.iter_mut().zip(x.iter().step_by(s)) {
            *a = *a + w * *b;
        }
    }
}

/// Whether 3×3 stride-1 float32 convolutions may take Winograd F(4×4, 3×3) (`MXRT_CONV_WINOGRAD=0`
/// turns it off, for comparisons).
fn winograd_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MXRT_CONV_WINOGRAD").map_or(true, |v| v != "0"))
}

/// The Winograd form of `g` for its forward product: float32, one group, a 2-D 3×3 kernel at
/// stride 1 without dilation, and enough channels for the transforms to pay (also the choice
/// of the graph's prepared convolutions, `graph/exec/fold.rs`).
pub(crate) fn winograd_geom<T: ConvElement>(g: &ConvGeom) -> Option<Wino> {
    let ok = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
        && g.groups == 1
        && g.kernel == [1, 3, 3]
        && g.stride == [1; 3]
        && g.dilate == [1; 3]
        && g.input[0] == 1
        && g.output[0] == 1
        && g.pad[0] == 0
        // every input row and column reaches an output (not so for a Deconvolution's `adj`)
        && g.output[1] + 2 == g.input[1] + 2 * g.pad[1]
        && g.output[2] + 2 == g.input[2] + 2 * g.pad[2]
        && g.in_ch >= 8
        && g.out_ch >= 8
        && winograd_enabled();
    ok.then_some(Wino {
        batch: g.batch,
        ci: g.in_ch,
        co: g.out_ch,
        ih: g.input[1],
        iw: g.input[2],
        oh: g.output[1],
        ow: g.output[2],
        ph: g.pad[1],
        pw: g.pad[2],
    })
}

/// Whether `T` is f32.
fn is_f32<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
}

/// `T` as f32 (the caller checked the type).
fn as_f32<T: ConvElement>(x: &[T]) -> &[f32] {
    assert_eq!(std::any::TypeId::of::<T>(), std::any::TypeId::of::<f32>());
    // SAFETY: `T` is f32 (asserted), so the layout and length are the same.
    unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), x.len()) }
}

/// `T` as f32, mutably (the caller checked the type).
fn as_f32_mut<T: ConvElement>(x: &mut [T]) -> &mut [f32] {
    assert_eq!(std::any::TypeId::of::<T>(), std::any::TypeId::of::<f32>());
    // SAFETY: `T` is f32 (asserted); the borrow moves to the result.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), x.len()) }
}

/// Runs `f(images, serial)` over ranges of the batch: split over the pool (each call with a
/// serial GEMM) when there are several images and enough work, else one call whose GEMMs use
/// the pool themselves.
fn over_images(g: &ConvGeom, f: impl Fn(std::ops::Range<usize>, bool) + Sync) {
    let n = g.batch;
    if parallel::max_threads() <= 1 || n < 2 || g.image_flops().saturating_mul(n) < (1 << 18) {
        f(0..n, false);
        return;
    }
    split(n, |r| f(r, true));
}

/// Calls `f` over one contiguous range of `0..n` per pool thread (at most `n`), the first on the
/// calling thread.
pub fn split(n: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    let parts = parallel::max_threads().min(n).max(1);
    if parts == 1 {
        f(0..n);
        return;
    }
    let step = n.div_ceil(parts);
    parallel::for_parts(parts, |p| {
        let (a, b) = (p * step, ((p + 1) * step).min(n));
        if a < b {
            f(a..b);
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn mm<T: ConvElement>(
    serial: bool,
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: &mut [T],
    acc: bool,
) {
    if serial {
        matmul_serial(m, n, k, a, b, c, acc)
    } else {
        matmul(m, n, k, a, b, c, acc)
    }
}

/// `c` (rows at stride `ldc`) `= epi(a · b)` for a packed `a` and a row-major `b` of `n`
/// columns.
#[allow(clippy::too_many_arguments)]
fn packed_block(
    serial: bool,
    a: &Packed,
    b: &[f32],
    n: usize,
    c: &mut [f32],
    ldc: usize,
    epi: Epilogue<'_>,
) {
    if ldc == n {
        gemm::matmul_packed_lhs(serial, a, n, op(b, false), c, false, epi);
        return;
    }
    let b = View { data: b, rs: n, cs: 1 };
    gemm::matmul_packed_lhs_view(serial, a, n, b, c, ldc, false, epi);
}

/// `c` (row-major, `n` columns) `= a · b` for a packed `a` and `b` with rows at stride `ldb`.
fn packed_block_from(serial: bool, a: &Packed, b: &[f32], ldb: usize, n: usize, c: &mut [f32]) {
    let b = View { data: b, rs: ldb, cs: 1 };
    gemm::matmul_packed_lhs_view(serial, a, n, b, c, n, false, Epilogue::NONE);
}

fn op<T>(data: &[T], transposed: bool) -> Operand<'_, T> {
    Operand { data, transposed }
}

/// `y = conv(x, w)`: `x` is `batch × in_ch × input`, `w` the weight, `y` `batch × out_ch ×
/// output` (overwritten).
pub fn lower<T: ConvElement>(g: &ConvGeom, x: &[T], w: &[T], y: &mut [T]) {
    lower_packed(g, x, w, None, Epilogue::NONE, y)
}

/// `y` (images of `co` planes of `sp` values) with `epi` applied, plane `o` of each image with
/// output channel `o`'s bias: the pass for layers whose kernel does not apply it as it stores.
pub fn apply_epilogue(epi: Epilogue<'_>, y: &mut [f32], sp: usize, co: usize) {
    if sp == 0 || co == 0 {
        return;
    }
    for (k, plane) in y.chunks_mut(sp).enumerate() {
        let b = epi.bias.map(|b| b[k % co]);
        match (epi.relu, b) {
            // relu keeps NaN, as the unfused op does
            (true, b) => plane.iter_mut().for_each(|v| {
                let t = b.map_or(*v, |b| *v + b);
                *v = if t <= 0.0 { 0.0 } else { t };
            }),
            (false, Some(b)) => plane.iter_mut().for_each(|v| *v += b),
            (false, None) => {}
        }
    }
}

/// A float32 weight packed once as the left operand of [`lower`]'s products (one matrix per
/// group), for every image of a batch and, kept by the caller, for every call on that weight.
pub struct LowerWeight {
    geom: ConvGeom,
    groups: Vec<Packed>,
}

/// Whether [`lower`] computes this float32 layer as matrix products (pointwise or im2col)
/// rather than with the Winograd, depthwise or direct kernels.
fn lower_by_products(g: &ConvGeom) -> bool {
    winograd_geom::<f32>(g).is_none() && !depthwise(g) && !direct::applies(g)
}

/// `w` (the weight of `g`) packed for [`lower_packed`], where the layer runs as products on the
/// AVX-512 GEMM (`None` elsewhere).
pub fn pack_lower_weight(g: &ConvGeom, w: &[f32]) -> Option<LowerWeight> {
    if !lower_by_products(g) {
        return None;
    }
    pack_groups(g, w, false).map(|groups| LowerWeight { geom: *g, groups })
}

/// Each group's weight packed as the left operand: `out_g × k_rows` for [`lower`]
/// (`transposed` false), its transpose for [`raise`].
fn pack_groups(g: &ConvGeom, w: &[f32], transposed: bool) -> Option<Vec<Packed>> {
    let (kr, out_g, out_sp) = (g.k_rows(), g.out_g(), g.out_sp());
    assert!(w.len() >= g.weight_len());
    (0..g.groups)
        .map(|grp| {
            let wg = op(&w[grp * out_g * kr..][..out_g * kr], transposed);
            if transposed {
                gemm::pack_lhs(kr, out_sp, out_g, wg)
            } else {
                gemm::pack_lhs(out_g, out_sp, kr, wg)
            }
        })
        .collect()
}

/// `y = epi(conv(x, w))` ([`lower`] with the output channels' bias and relu, float32 only),
/// the weight packed beforehand by [`pack_lower_weight`] (for this geometry: asserted) or packed
/// here once for the whole batch. Products on the AVX-512 GEMM apply `epi` in their store;
/// the other kernels in a pass over each image after it.
pub fn lower_packed<T: ConvElement>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    packed: Option<&LowerWeight>,
    epi: Epilogue<'_>,
    y: &mut [T],
) {
    if let Some(p) = packed {
        assert!(p.geom == *g, "weight packed for another convolution");
    }
    let (in_sp, out_sp, kr) = (g.in_sp(), g.out_sp(), g.k_rows());
    let (in_g, out_g) = (g.in_g(), g.out_g());
    assert!(x.len() >= g.batch * g.in_ch * in_sp && w.len() >= g.weight_len());
    assert!(y.len() >= g.batch * g.out_ch * out_sp);
    let fused = epi.bias.is_some() || epi.relu;
    assert!(!fused || is_f32::<T>(), "an epilogue on a float32 convolution only");
    if let Some(b) = epi.bias {
        assert!(b.len() >= g.out_ch);
    }
    let whole = |y: &mut [T]| {
        if fused {
            let y = &mut as_f32_mut(y)[..g.batch * g.out_ch * out_sp];
            apply_epilogue(epi, y, out_sp, g.out_ch);
        }
    };
    if let Some(s) = winograd_geom::<T>(g) {
        let u = winograd::transform_weight(as_f32(w), g.out_ch, g.in_ch, false);
        winograd::forward(&s, as_f32(x), &u, as_f32_mut(y));
        whole(y);
        return;
    }
    if is_f32::<T>() && depthwise(g) && depthwise::applies(g) {
        depthwise::forward_with(g, as_f32(x), as_f32(w), epi, as_f32_mut(y));
        return;
    }
    if is_f32::<T>() && direct::applies(g) {
        direct::forward(g, as_f32(x), as_f32(w), as_f32_mut(y));
        whole(y);
        return;
    }
    let yp = Ptr(y.as_mut_ptr());
    if depthwise(g) {
        let pg = plane_geom(g);
        let kk: usize = g.kernel.iter().product();
        split(g.batch * g.in_ch, |planes| {
            for q in planes {
                let c = q % g.in_ch;
                let xs = &x[q * in_sp..][..in_sp];
                let wc = &w[c * kk..][..kk];
                // SAFETY: plane q of `y` is written by this range only; in bounds (asserted).
                let ys =
                    unsafe { std::slice::from_raw_parts_mut(yp.get().add(q * out_sp), out_sp) };
                ys.fill(T::zero());
                let s2 = pg.stride[2];
                each_tap(&pg, |k, o, i, n| {
                    axpy_to(&mut ys[o..o + n], wc[k], &xs[i..i + (n - 1) * s2 + 1], s2)
                });
            }
        });
        whole(y);
        return;
    }
    let (rows, ow) = (g.output[0] * g.output[1], g.output[2]);
    // float32: the weight packed once for every image's products
    let own;
    let packed: Option<&[Packed]> = match packed {
        Some(p) => Some(&p.groups),
        None if is_f32::<T>() && g.batch > 1 => {
            own = pack_groups(g, as_f32(w), false);
            own.as_deref()
        }
        None => None,
    };
    over_images(g, |images, serial| {
        let brows = rows_per_block::<T>(g, serial);
        with_scratch(g.col_len(brows), |col: &mut [T]| {
        for n in images.clone() {
            for grp in 0..g.groups {
                let xs = &x[(n * g.in_ch + grp * in_g) * in_sp..][..in_g * in_sp];
                // SAFETY: image n's group grp is written by this call only (images are split
                // between the calls); the range lies inside `y` (asserted above).
                let ys = unsafe {
                    std::slice::from_raw_parts_mut(
                        yp.get().add((n * g.out_ch + grp * out_g) * out_sp),
                        out_g * out_sp,
                    )
                };
                let wg = &w[grp * out_g * kr..][..out_g * kr];
                let pw = packed.map(|p| &p[grp]);
                // the group's output channels' bias
                let ge = Epilogue {
                    bias: epi.bias.map(|b| &b[grp * out_g..][..out_g]),
                    ..epi
                };
                if g.pointwise() {
                    match pw {
                        // the image read by the products in place (no copy into panels)
                        Some(p) => gemm::matmul_packed_lhs_rows(
                            serial,
                            p,
                            out_sp,
                            as_f32(xs),
                            as_f32_mut(ys),
                            false,
                            ge,
                        ),
                        None => {
                            mm(serial, out_g, out_sp, kr, op(wg, false), op(xs, false), ys, false);
                            if fused {
                                apply_epilogue(ge, as_f32_mut(ys), out_sp, out_g);
                            }
                        }
                    }
                    continue;
                }
                for r in blocks(rows, brows) {
                    let (c0, bn) = (r.start * ow, r.len() * ow);
                    let col = &mut col[..kr * bn];
                    im2col(g, r, xs, col);
                    if let Some(p) = pw {
                        // the block's columns, written into the image's rows at `c0`
                        let yb = &mut as_f32_mut(ys)[c0..];
                        packed_block(serial, p, as_f32(col), bn, yb, out_sp, ge);
                    } else if bn == out_sp {
                        mm(serial, out_g, out_sp, kr, op(wg, false), op(col, false), ys, false);
                    } else {
                        matmul_view_serial(
                            out_g,
                            bn,
                            kr,
                            View { data: wg, rs: kr, cs: 1 },
                            View { data: col, rs: bn, cs: 1 },
                            &mut ys[c0..],
                            out_sp,
                            false,
                        );
                    }
                }
                if fused && pw.is_none() {
                    apply_epilogue(ge, as_f32_mut(ys), out_sp, out_g);
                }
            }
        }
        })
    });
}

/// `x = convᵀ(y, w)`: the transpose of [`lower`] (`x` overwritten).
pub fn raise<T: ConvElement>(g: &ConvGeom, y: &[T], w: &[T], x: &mut [T]) {
    let (in_sp, out_sp, kr) = (g.in_sp(), g.out_sp(), g.k_rows());
    let (in_g, out_g) = (g.in_g(), g.out_g());
    assert!(x.len() >= g.batch * g.in_ch * in_sp && w.len() >= g.weight_len());
    assert!(y.len() >= g.batch * g.out_ch * out_sp);
    if let Some(s) = winograd_geom::<T>(g).filter(|s| s.ph <= 2 && s.pw <= 2) {
        // the transposed convolution: the output side's channels to the input side's, the
        // flipped kernel, padding 2 - pad
        let t = Wino {
            ci: s.co,
            co: s.ci,
            ih: s.oh,
            iw: s.ow,
            oh: s.ih,
            ow: s.iw,
            ph: 2 - s.ph,
            pw: 2 - s.pw,
            ..s
        };
        let u = winograd::transform_weight(as_f32(w), g.out_ch, g.in_ch, true);
        winograd::forward(&t, as_f32(y), &u, as_f32_mut(x));
        return;
    }
    if is_f32::<T>() && depthwise(g) && depthwise::applies(g) {
        depthwise::data_grad(g, as_f32(y), as_f32(w), as_f32_mut(x));
        return;
    }
    if is_f32::<T>() && direct::applies(g) {
        direct::data_grad(g, as_f32(y), as_f32(w), as_f32_mut(x));
        return;
    }
    let xp = Ptr(x.as_mut_ptr());
    if depthwise(g) {
        let pg = plane_geom(g);
        let kk: usize = g.kernel.iter().product();
        split(g.batch * g.in_ch, |planes| {
            for q in planes {
                let c = q % g.in_ch;
                let ys = &y[q * out_sp..][..out_sp];
                let wc = &w[c * kk..][..kk];
                // SAFETY: plane q of `x` is written by this range only; in bounds (asserted).
                let xs = unsafe { std::slice::from_raw_parts_mut(xp.get().add(q * in_sp), in_sp) };
                xs.fill(T::zero());
                let s2 = pg.stride[2];
                each_tap(&pg, |k, o, i, n| {
                    if s2 == 1 {
                        axpy_to(&mut xs[i..i + n], wc[k], &ys[o..o + n], 1);
                    } else {
                        for j in 0..n {
                            xs[i + j * s2] = xs[i + j * s2] + wc[k] * ys[o + j];
                        }
                    }
                });
            }
        });
        return;
    }
    let (rows, ow) = (g.output[0] * g.output[1], g.output[2]);
    // float32: the transposed weight packed once for every image's products
    let packed = if is_f32::<T>() && g.batch > 1 {
        pack_groups(g, as_f32(w), true)
    } else {
        None
    };
    over_images(g, |images, serial| {
        let brows = rows_per_block::<T>(g, serial);
        with_scratch(g.col_len(brows), |col: &mut [T]| {
        for n in images.clone() {
            for grp in 0..g.groups {
                // SAFETY: image n's group grp of `x` is written by this call only; in bounds
                // (asserted above).
                let xs = unsafe {
                    std::slice::from_raw_parts_mut(
                        xp.get().add((n * g.in_ch + grp * in_g) * in_sp),
                        in_g * in_sp,
                    )
                };
                let ys = &y[(n * g.out_ch + grp * out_g) * out_sp..][..out_g * out_sp];
                let wg = &w[grp * out_g * kr..][..out_g * kr];
                let pw = packed.as_ref().map(|p| &p[grp]);
                if g.pointwise() {
                    match pw {
                        Some(p) => gemm::matmul_packed_lhs(
                            serial,
                            p,
                            out_sp,
                            op(as_f32(ys), false),
                            as_f32_mut(xs),
                            false,
                            Epilogue::NONE,
                        ),
                        None => {
                            mm(serial, kr, out_sp, out_g, op(wg, true), op(ys, false), xs, false)
                        }
                    }
                    continue;
                }
                xs.fill(T::zero());
                for r in blocks(rows, brows) {
                    let (c0, bn) = (r.start * ow, r.len() * ow);
                    let col = &mut col[..kr * bn];
                    if let Some(p) = pw {
                        // the block's columns of `y` (rows at stride `out_sp`) into `col`
                        let ycols = &as_f32(ys)[c0..];
                        packed_block_from(serial, p, ycols, out_sp, bn, as_f32_mut(col));
                    } else if bn == out_sp {
                        mm(serial, kr, out_sp, out_g, op(wg, true), op(ys, false), col, false);
                    } else {
                        matmul_view_serial(
                            kr,
                            bn,
                            out_g,
                            View { data: wg, rs: 1, cs: kr },
                            View { data: &ys[c0..], rs: out_sp, cs: 1 },
                            col,
                            bn,
                            false,
                        );
                    }
                    col2im(g, r, col, xs);
                }
            }
        }
        })
    });
}

/// `dw = Σ_images dy · colsᵀ`: the weight's gradient from the input side `x` and the output side
/// `dy` (`dw` overwritten).
pub fn weight_grad<T: ConvElement>(g: &ConvGeom, x: &[T], dy: &[T], dw: &mut [T]) {
    let (in_sp, out_sp, kr) = (g.in_sp(), g.out_sp(), g.k_rows());
    let (in_g, out_g) = (g.in_g(), g.out_g());
    assert!(x.len() >= g.batch * g.in_ch * in_sp && dw.len() >= g.weight_len());
    assert!(dy.len() >= g.batch * g.out_ch * out_sp);
    let wl = g.weight_len();
    if let Some(s) = winograd_geom::<T>(g) {
        winograd::weight_grad(&s, as_f32(x), as_f32(dy), as_f32_mut(dw));
        return;
    }
    if is_f32::<T>() && depthwise(g) && depthwise::applies(g) {
        depthwise::weight_grad(g, as_f32(x), as_f32(dy), as_f32_mut(dw));
        return;
    }
    if is_f32::<T>() && direct::applies_weight_grad(g) {
        direct::weight_grad(g, as_f32(x), as_f32(dy), as_f32_mut(dw));
        return;
    }
    let partials = std::sync::Mutex::new(Vec::<(usize, Vec<T>)>::new());
    if depthwise(g) {
        // each channel's taps summed over the images, channels split over the pool
        let pg = plane_geom(g);
        let kk: usize = g.kernel.iter().product();
        let dwp = Ptr(dw.as_mut_ptr());
        split(g.in_ch, |channels| {
            for c in channels {
                let mut acc = vec![T::zero(); kk];
                for n in 0..g.batch {
                    let q = n * g.in_ch + c;
                    let (xs, ys) = (&x[q * in_sp..][..in_sp], &dy[q * out_sp..][..out_sp]);
                    let s2 = pg.stride[2];
                    each_tap(&pg, |k, o, i, n| {
                        let mut sum = T::zero();
                        for (a, b) in ys[o..o + n]
                            .iter()
                            .zip(xs[i..i + (n - 1) * s2 + 1].iter().step_by(s2))
                        {
                            sum = sum + *a * *b;
                        }
                        acc[k] = acc[k] + sum;
                    });
                }
                // SAFETY: channel c's taps of `dw` are written by this range only; in bounds
                // (asserted).
                unsafe { std::slice::from_raw_parts_mut(dwp.get().add(c * kk), kk) }
                    .copy_from_slice(&acc);
            }
        });
        return;
    }
    let (rows, ow) = (g.output[0] * g.output[1], g.output[2]);
    if g.batch == 0 || g.out_sp() == 0 || g.k_rows() == 0 {
        dw[..wl].fill(T::zero());
        return;
    }
    // the range of the first images sums straight into `dw` (every range's first product
    // overwrites its sums), the others into partials added after it in image order
    let dwp = Ptr(dw.as_mut_ptr());
    over_images(g, |images, serial| {
        let brows = rows_per_block::<T>(g, serial);
        let first = images.start;
        let mut own = if first == 0 { Vec::new() } else { vec![T::zero(); wl] };
        let acc: &mut [T] = if first == 0 {
            // SAFETY: only the range starting at image 0 writes `dw` (ranges are disjoint and
            // one starts at 0); `dw` holds `wl` elements (asserted above).
            unsafe { std::slice::from_raw_parts_mut(dwp.get(), wl) }
        } else {
            &mut own
        };
        with_scratch(g.col_len(brows), |col: &mut [T]| {
        for (i, n) in images.enumerate() {
            for grp in 0..g.groups {
                let xs = &x[(n * g.in_ch + grp * in_g) * in_sp..][..in_g * in_sp];
                let ys = &dy[(n * g.out_ch + grp * out_g) * out_sp..][..out_g * out_sp];
                let a = &mut acc[grp * out_g * kr..][..out_g * kr];
                if g.pointwise() {
                    mm(serial, out_g, kr, out_sp, op(ys, false), op(xs, true), a, i > 0);
                    continue;
                }
                for (b, r) in blocks(rows, brows).enumerate() {
                    let (c0, bn) = (r.start * ow, r.len() * ow);
                    let col = &mut col[..kr * bn];
                    im2col(g, r, xs, col);
                    let acc = i > 0 || b > 0;
                    if bn == out_sp {
                        mm(serial, out_g, kr, out_sp, op(ys, false), op(col, true), a, acc);
                    } else {
                        matmul_view_serial(
                            out_g,
                            kr,
                            bn,
                            View { data: &ys[c0..], rs: out_sp, cs: 1 },
                            View { data: col, rs: 1, cs: bn },
                            a,
                            kr,
                            acc,
                        );
                    }
                }
            }
        }
        });
        if first != 0 {
            partials
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((first, own));
        }
    });
    let mut partials = partials.into_inner().unwrap_or_else(|e| e.into_inner());
    // summed in image order, so the result does not depend on which thread finished first
    partials.sort_by_key(|(first, _)| *first);
    let dw = &mut dw[..wl];
    for (_, p) in partials {
        for (d, v) in dw.iter_mut().zip(p) {
            *d = *d + v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2-D geometry: `k`x`k` kernel, stride `s`, padding `p`, no dilation.
    #[allow(clippy::too_many_arguments)]
    fn geom2(batch: usize, groups: usize, (in_ch, out_ch): (usize, usize), input: [usize; 2], output: [usize; 2], k: usize, s: usize, p: usize) -> ConvGeom {
        ConvGeom {
            batch,
            groups,
            in_ch,
            out_ch,
            input: [1, input[0], input[1]],
            output: [1, output[0], output[1]],
            kernel: [1, k, k],
            stride: [1, s, s],
            dilate: [1, 1, 1],
            pad: [0, p, p],
        }
    }

    /// A direct serial convolution in f64.
    fn reference(g: &ConvGeom, x: &[f64], w: &[f64]) -> Vec<f64> {
        let mut y = vec![0.0; g.batch * g.out_ch * g.out_sp()];
        let (in_g, out_g) = (g.in_g(), g.out_g());
        let [kd, kh, kw] = g.kernel;
        for n in 0..g.batch {
            for o in 0..g.out_ch {
                let grp = o / out_g;
                for z in 0..g.output[0] {
                    for yy in 0..g.output[1] {
                        for xx in 0..g.output[2] {
                            let mut s = 0.0;
                            for c in 0..in_g {
                                for a in 0..kd {
                                    for b in 0..kh {
                                        for e in 0..kw {
                                            let iz = (z * g.stride[0] + a * g.dilate[0]) as isize
                                                - g.pad[0] as isize;
                                            let iy = (yy * g.stride[1] + b * g.dilate[1]) as isize
                                                - g.pad[1] as isize;
                                            let ix = (xx * g.stride[2] + e * g.dilate[2]) as isize
                                                - g.pad[2] as isize;
                                            if iz < 0
                                                || iy < 0
                                                || ix < 0
                                                || iz >= g.input[0] as isize
                                                || iy >= g.input[1] as isize
                                                || ix >= g.input[2] as isize
                                            {
                                                continue;
                                            }
                                            let xi = (((n * g.in_ch + grp * in_g + c)
                                                * g.input[0]
                                                + iz as usize)
                                                * g.input[1]
                                                + iy as usize)
                                                * g.input[2]
                                                + ix as usize;
                                            let wi = (((o * in_g + c) * kd + a) * kh + b) * kw + e;
                                            s += x[xi] * w[wi];
                                        }
                                    }
                                }
                            }
                            y[(((n * g.out_ch + o) * g.output[0] + z) * g.output[1] + yy)
                                * g.output[2]
                                + xx] = s;
                        }
                    }
                }
            }
        }
        y
    }

    fn dot(a: &[f64], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn products_match_a_direct_convolution_and_are_transposes() {
        let geoms = [
            // 2-D, stride 2, dilation, padding, groups
            ConvGeom {
                batch: 3,
                groups: 2,
                in_ch: 4,
                out_ch: 6,
                input: [1, 7, 6],
                output: [1, 3, 3],
                kernel: [1, 3, 2],
                stride: [1, 2, 2],
                dilate: [1, 1, 2],
                pad: [0, 1, 1],
            },
            // 3-D
            ConvGeom {
                batch: 2,
                groups: 1,
                in_ch: 2,
                out_ch: 3,
                input: [4, 3, 5],
                output: [3, 3, 5],
                kernel: [2, 3, 3],
                stride: [1, 1, 1],
                dilate: [1, 1, 1],
                pad: [0, 1, 1],
            },
            // pointwise, depthwise
            ConvGeom {
                batch: 2,
                groups: 1,
                in_ch: 3,
                out_ch: 2,
                input: [1, 1, 5],
                output: [1, 1, 5],
                kernel: [1, 1, 1],
                stride: [1; 3],
                dilate: [1; 3],
                pad: [0; 3],
            },
            ConvGeom {
                batch: 1,
                groups: 3,
                in_ch: 3,
                out_ch: 3,
                input: [1, 5, 5],
                output: [1, 5, 5],
                kernel: [1, 3, 3],
                stride: [1; 3],
                dilate: [1; 3],
                pad: [0, 1, 1],
            },
            // depthwise with stride, dilation and uneven padding (direct loops)
            ConvGeom {
                batch: 3,
                groups: 4,
                in_ch: 4,
                out_ch: 4,
                input: [1, 9, 8],
                output: [1, 4, 3],
                kernel: [1, 3, 2],
                stride: [1, 2, 3],
                dilate: [1, 2, 1],
                pad: [0, 1, 1],
            },
        ];
        for g in geoms {
            let xl = g.batch * g.in_ch * g.in_sp();
            let yl = g.batch * g.out_ch * g.out_sp();
            let x: Vec<f64> = (0..xl).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
            let w: Vec<f64> = (0..g.weight_len())
                .map(|i| ((i * 5) % 7) as f64 - 3.0)
                .collect();
            let dy: Vec<f64> = (0..yl).map(|i| ((i * 3) % 13) as f64 - 6.0).collect();
            let mut y = vec![0.0; yl];
            lower(&g, &x, &w, &mut y);
            assert_eq!(y, reference(&g, &x, &w), "{g:?}");
            // <lower(x, w), dy> = <x, raise(dy, w)> = <w, weight_grad(x, dy)>
            let mut dx = vec![1.0; xl];
            raise(&g, &dy, &w, &mut dx);
            let mut dw = vec![1.0; g.weight_len()];
            weight_grad(&g, &x, &dy, &mut dw);
            let want = dot(&y, &dy);
            assert_eq!(dot(&x, &dx), want, "{g:?}");
            assert_eq!(dot(&w, &dw), want, "{g:?}");
        }
    }

    #[test]
    fn direct_and_depthwise_kernels_match_a_direct_convolution_and_their_adjoints() {
        // (batch, groups, in, out, [h, w], kernel, stride, dilate, pad): the direct kernel's
        // stem-like and stride-2 layers (out channels not a multiple of 8, partial vectors) and
        // depthwise layers (x and y strides, dilation, padding past the kernel)
        type Pair = [usize; 2];
        type Case = (usize, usize, usize, usize, Pair, Pair, Pair, Pair, Pair);
        let cases: [Case; 9] = [
            (2, 1, 3, 20, [45, 70], [7, 7], [2, 2], [1, 1], [3, 3]),
            (2, 1, 16, 12, [20, 66], [3, 3], [2, 2], [1, 1], [1, 1]),
            (2, 1, 3, 8, [20, 40], [3, 3], [1, 1], [2, 2], [2, 2]),
            (2, 6, 6, 6, [9, 37], [3, 3], [1, 1], [1, 1], [1, 1]),
            (2, 5, 5, 5, [13, 18], [5, 5], [2, 1], [1, 1], [2, 1]),
            (2, 4, 4, 4, [12, 19], [3, 3], [1, 1], [2, 2], [2, 2]),
            (1, 3, 3, 3, [5, 6], [3, 3], [1, 1], [1, 1], [3, 2]),
            (2, 4, 4, 4, [15, 33], [3, 3], [2, 2], [1, 1], [1, 1]),
            (1, 3, 3, 3, [16, 29], [3, 3], [3, 2], [1, 2], [0, 2]),
        ];
        for (batch, groups, in_ch, out_ch, [h, w], k, s, d, p) in cases {
            let out = |i: usize| (([h, w][i] + 2 * p[i] - (d[i] * (k[i] - 1) + 1)) / s[i]) + 1;
            let g = ConvGeom {
                batch,
                groups,
                in_ch,
                out_ch,
                input: [1, h, w],
                output: [1, out(0), out(1)],
                kernel: [1, k[0], k[1]],
                stride: [1, s[0], s[1]],
                dilate: [1, d[0], d[1]],
                pad: [0, p[0], p[1]],
            };
            let xl = g.batch * g.in_ch * g.in_sp();
            let yl = g.batch * g.out_ch * g.out_sp();
            let val = |i: usize, a: usize, b: usize| ((i * a) % b) as f64 / b as f64 - 0.5;
            let x: Vec<f64> = (0..xl).map(|i| val(i, 7, 11)).collect();
            let wt: Vec<f64> = (0..g.weight_len()).map(|i| val(i, 5, 7)).collect();
            let dy: Vec<f64> = (0..yl).map(|i| val(i, 3, 13)).collect();
            let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let (xf, wf, dyf) = (f32s(&x), f32s(&wt), f32s(&dy));
            let near = |got: &[f32], want: &[f64], what: &str| {
                let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    let tol = 1e-4 * b.abs() + 1e-5 * scale;
                    assert!((*a as f64 - b).abs() <= tol, "{what} {i}: {a} vs {b} ({g:?})");
                }
            };
            let mut y = vec![f32::NAN; yl];
            lower(&g, &xf, &wf, &mut y);
            near(&y, &reference(&g, &x, &wt), "forward");
            // the gradients against the f64 generic products
            let mut dx = vec![0.0; xl];
            raise(&g, &dy, &wt, &mut dx);
            let mut dxf = vec![f32::NAN; xl];
            raise(&g, &dyf, &wf, &mut dxf);
            near(&dxf, &dx, "data gradient");
            let mut dw = vec![0.0; g.weight_len()];
            weight_grad(&g, &x, &dy, &mut dw);
            let mut dwf = vec![f32::NAN; g.weight_len()];
            weight_grad(&g, &xf, &dyf, &mut dwf);
            near(&dwf, &dw, "weight gradient");
        }
    }

    #[test]
    fn winograd_matches_a_direct_convolution_and_its_adjoints() {
        // padding 0..3 (3: the data gradient falls back), planes smaller than a tile, several
        // tile groups
        let cases = [
            (2, 8, 12, [9, 11], [1, 1]),
            (3, 16, 8, [7, 6], [0, 0]),
            (1, 9, 10, [5, 5], [2, 2]),
            (2, 8, 8, [6, 7], [3, 1]),
            (5, 24, 20, [3, 2], [1, 1]),
            (3, 8, 9, [23, 21], [1, 1]),
        ];
        for (batch, in_ch, out_ch, [h, w], [ph, pw]) in cases {
            let g = ConvGeom {
                batch,
                groups: 1,
                in_ch,
                out_ch,
                input: [1, h, w],
                output: [1, h + 2 * ph - 2, w + 2 * pw - 2],
                kernel: [1, 3, 3],
                stride: [1; 3],
                dilate: [1; 3],
                pad: [0, ph, pw],
            };
            assert!(winograd_geom::<f32>(&g).is_some());
            let xl = g.batch * g.in_ch * g.in_sp();
            let yl = g.batch * g.out_ch * g.out_sp();
            let val = |i: usize, a: usize, b: usize| ((i * a) % b) as f64 / b as f64 - 0.5;
            let x: Vec<f64> = (0..xl).map(|i| val(i, 7, 11)).collect();
            let w: Vec<f64> = (0..g.weight_len()).map(|i| val(i, 5, 7)).collect();
            let dy: Vec<f64> = (0..yl).map(|i| val(i, 3, 13)).collect();
            let f32s = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let (xf, wf, dyf) = (f32s(&x), f32s(&w), f32s(&dy));
            let near = |got: &[f32], want: &[f64], what: &str| {
                let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    let tol = 1e-3 * b.abs() + 1e-4 * scale;
                    assert!((*a as f64 - b).abs() <= tol, "{what} {i}: {a} vs {b} ({g:?})");
                }
            };
            let mut y = vec![0.0f32; yl];
            lower(&g, &xf, &wf, &mut y);
            near(&y, &reference(&g, &x, &w), "forward");
            // the gradients against the f64 im2col products (exact for these inputs)
            let mut dx = vec![0.0; xl];
            raise(&g, &dy, &w, &mut dx);
            let mut dxf = vec![1.0f32; xl];
            raise(&g, &dyf, &wf, &mut dxf);
            near(&dxf, &dx, "data gradient");
            let mut dw = vec![0.0; g.weight_len()];
            weight_grad(&g, &x, &dy, &mut dw);
            let mut dwf = vec![1.0f32; g.weight_len()];
            weight_grad(&g, &xf, &dyf, &mut dwf);
            near(&dwf, &dw, "weight gradient");
        }
    }

    /// A float32 layer with the bias and relu as the epilogue ([`lower_packed`]) against the same
    /// layer stored plainly and then [`apply_epilogue`]: equal bit for bit, on every path
    /// (products on a prepared or per-call packed weight, one or several column blocks, two
    /// groups, products narrower than the AVX-512 GEMM takes, Winograd, depthwise).
    #[test]
    fn epilogue_in_the_products_store_equals_a_separate_pass() {
        let geoms = [
            geom2(2, 1, (67, 45), [13, 11], [13, 11], 1, 1, 0),
            geom2(1, 1, (300, 21), [5, 7], [5, 7], 1, 1, 0),
            geom2(2, 2, (38, 50), [15, 13], [8, 7], 1, 2, 0),
            geom2(1, 1, (64, 6), [60, 128], [30, 64], 3, 2, 1),
            geom2(1, 1, (9, 10), [5, 5], [3, 3], 3, 2, 1),
            geom2(1, 1, (32, 32), [12, 12], [12, 12], 3, 1, 1),
            geom2(2, 24, (24, 24), [14, 14], [7, 7], 3, 2, 1),
        ];
        for g in geoms {
            let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
            let val = |i: usize, m: usize| ((i * 37 + m) % 29) as f32 / 16.0 - 0.9;
            let mut x: Vec<f32> = (0..g.batch * g.in_ch * in_sp).map(|i| val(i, 1)).collect();
            x[in_sp / 2] = f32::NAN;
            let w: Vec<f32> = (0..g.weight_len()).map(|i| val(i, 2)).collect();
            let bias: Vec<f32> = (0..g.out_ch).map(|o| val(o, 3) * 4.0).collect();
            let packed = pack_lower_weight(&g, &w);
            for relu in [false, true] {
                for with_bias in [false, true] {
                    let epi = Epilogue {
                        bias: with_bias.then_some(&bias[..]),
                        relu,
                    };
                    for prepared in [false, true] {
                        let pw = packed.as_ref().filter(|_| prepared);
                        let mut want = vec![f32::NAN; g.batch * g.out_ch * out_sp];
                        lower_packed(&g, &x, &w, pw, Epilogue::NONE, &mut want);
                        apply_epilogue(epi, &mut want, out_sp, g.out_ch);
                        let mut got = vec![f32::NAN; want.len()];
                        lower_packed(&g, &x, &w, pw, epi, &mut got);
                        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{g:?} relu={relu} bias={with_bias} prepared={prepared} at {i}: \
                                 {a} vs {b}"
                            );
                        }
                    }
                }
            }
        }
    }

    /// The float32 products with the weight packed once (per call, or beforehand as a prepared
    /// layer keeps it) against the same layers in f64 (never packed): pointwise, a strided 1x1
    /// layer through im2col, and a 3x3 stride-2 layer whose images run in several column blocks.
    #[test]
    fn packed_weight_products_match_unpacked_f64() {
        let geom = |batch, in_ch, out_ch, input, output, k, s, p| geom2(batch, 1, (in_ch, out_ch), input, output, k, s, p);
        let geoms = [
            geom(3, 67, 45, [13, 11], [13, 11], 1, 1, 0),
            geom(3, 48, 33, [7, 7], [7, 7], 1, 1, 0),
            geom(2, 37, 50, [15, 13], [8, 7], 1, 2, 0),
            geom(2, 64, 6, [60, 128], [30, 64], 3, 2, 1),
        ];
        for g in geoms {
            let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
            let val = |i: usize, m: usize| ((i * 37 + m) % 29) as f64 / 16.0 - 0.9;
            let x: Vec<f64> = (0..g.batch * g.in_ch * in_sp).map(|i| val(i, 1)).collect();
            let w: Vec<f64> = (0..g.weight_len()).map(|i| val(i, 2)).collect();
            let dy: Vec<f64> = (0..g.batch * g.out_ch * out_sp).map(|i| val(i, 3)).collect();
            let f = |v: &[f64]| v.iter().map(|&a| a as f32).collect::<Vec<f32>>();
            let (xf, wf, dyf) = (f(&x), f(&w), f(&dy));
            let mut want_y = vec![0.0f64; dy.len()];
            lower(&g, &x, &w, &mut want_y);
            let mut want_x = vec![0.0f64; x.len()];
            raise(&g, &dy, &w, &mut want_x);
            let close = |got: &[f32], want: &[f64], what: &str| {
                let tol = 1e-4 * g.k_rows().max(g.out_ch) as f64;
                for (i, (a, b)) in got.iter().zip(want).enumerate() {
                    assert!((*a as f64 - b).abs() <= tol, "{g:?} {what} at {i}: {a} vs {b}");
                }
            };
            let mut y = vec![f32::NAN; dy.len()];
            lower(&g, &xf, &wf, &mut y);
            close(&y, &want_y, "forward");
            let mut xg = vec![f32::NAN; x.len()];
            raise(&g, &dyf, &wf, &mut xg);
            close(&xg, &want_x, "data gradient");
            if crate::operator::kernel::sgemm::enabled() {
                let packed = pack_lower_weight(&g, &wf).expect("a layer computed as products");
                let mut y = vec![f32::NAN; dy.len()];
                lower_packed(&g, &xf, &wf, Some(&packed), Epilogue::NONE, &mut y);
                close(&y, &want_y, "forward on a prepared weight");
                // the packing of another layer is refused
                let other = ConvGeom { batch: g.batch + 1, ..g };
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    lower_packed(&other, &xf, &wf, Some(&packed), Epilogue::NONE, &mut y)
                }));
                assert!(r.is_err());
            }
        }
    }
}
