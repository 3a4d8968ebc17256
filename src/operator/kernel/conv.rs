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
//! threads.

use super::element::Element;
use super::gemm::{Operand, matmul, matmul_serial};
use super::map::Ptr;
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
    fn col_len(&self) -> usize {
        if self.pointwise() {
            0
        } else {
            self.k_rows() * self.out_sp()
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

/// Calls `f(c, row, plane_offset, dst_row, src_offset_row)` structure shared by im2col and
/// col2im: for every input channel of a group and kernel offset (one column row), every output
/// row (z, y) whose input row exists, the range of x positions and the input offset.
#[inline]
fn for_each_run(g: &ConvGeom, mut f: impl FnMut(usize, usize, usize, usize, isize, usize)) {
    let [id, ih, iw] = g.input;
    let [od, oh, ow] = g.output;
    let [k0, k1, k2] = g.kernel;
    let [s0, s1, s2] = g.stride;
    let [d0, d1, d2] = g.dilate;
    let [p0, p1, p2] = g.pad;
    let (in_sp, l) = (g.in_sp(), g.out_sp());
    let mut row = 0;
    for c in 0..g.in_g() {
        for kd in 0..k0 {
            for kh in 0..k1 {
                for kw in 0..k2 {
                    let off = (kw * d2) as isize - p2 as isize;
                    let (lo, hi) = valid_range(ow, s2, off, iw);
                    for z in 0..od {
                        let iz = (z * s0 + kd * d0) as isize - p0 as isize;
                        for y in 0..oh {
                            let iy = (y * s1 + kh * d1) as isize - p1 as isize;
                            let dst = row * l + (z * oh + y) * ow;
                            if iz < 0 || iz >= id as isize || iy < 0 || iy >= ih as isize {
                                // (dst, no source)
                                f(dst, ow, 0, 0, 0, usize::MAX);
                                continue;
                            }
                            let src = c * in_sp + (iz as usize * ih + iy as usize) * iw;
                            f(dst, lo, hi, ow, off, src);
                        }
                    }
                    row += 1;
                }
            }
        }
    }
}

/// An image's (one group's) columns: `col[k_rows × out_sp]` from `x[in_g × in_sp]`.
fn im2col<T: ConvElement>(g: &ConvGeom, x: &[T], col: &mut [T]) {
    let s2 = g.stride[2];
    let zero = T::zero();
    for_each_run(g, |dst, lo, hi, ow, off, src| {
        if src == usize::MAX {
            col[dst..dst + lo].fill(zero);
            return;
        }
        let out = &mut col[dst..dst + ow];
        out[..lo].fill(zero);
        out[hi..].fill(zero);
        if s2 == 1 {
            let a = (src as isize + lo as isize + off) as usize;
            out[lo..hi].copy_from_slice(&x[a..a + (hi - lo)]);
        } else {
            for (xo, o) in out.iter_mut().enumerate().take(hi).skip(lo) {
                *o = x[(src as isize + (xo * s2) as isize + off) as usize];
            }
        }
    });
}

/// The transpose of [`im2col`]: adds the columns back into `x` (which the caller zeroed).
fn col2im<T: ConvElement>(g: &ConvGeom, col: &[T], x: &mut [T]) {
    let s2 = g.stride[2];
    for_each_run(g, |dst, lo, hi, _ow, off, src| {
        if src == usize::MAX {
            return;
        }
        for xo in lo..hi {
            let i = (src as isize + (xo * s2) as isize + off) as usize;
            x[i] = x[i] + col[dst + xo];
        }
    });
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
    for_each_run(p, |dst, lo, hi, _ow, off, src| {
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
    parallel::pool().in_place_scope(|s| {
        for p in 1..parts {
            let (a, b) = (p * step, ((p + 1) * step).min(n));
            if a < b {
                let f = &f;
                s.spawn(move |_| f(a..b));
            }
        }
        f(0..step.min(n));
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

fn op<T>(data: &[T], transposed: bool) -> Operand<'_, T> {
    Operand { data, transposed }
}

/// `y = conv(x, w)`: `x` is `batch × in_ch × input`, `w` the weight, `y` `batch × out_ch ×
/// output` (overwritten).
pub fn lower<T: ConvElement>(g: &ConvGeom, x: &[T], w: &[T], y: &mut [T]) {
    let (in_sp, out_sp, kr) = (g.in_sp(), g.out_sp(), g.k_rows());
    let (in_g, out_g) = (g.in_g(), g.out_g());
    assert!(x.len() >= g.batch * g.in_ch * in_sp && w.len() >= g.weight_len());
    assert!(y.len() >= g.batch * g.out_ch * out_sp);
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
        return;
    }
    over_images(g, |images, serial| {
        let mut col = vec![T::zero(); g.col_len()];
        for n in images {
            for grp in 0..g.groups {
                let xs = &x[(n * g.in_ch + grp * in_g) * in_sp..][..in_g * in_sp];
                let cols: &[T] = if g.pointwise() {
                    xs
                } else {
                    im2col(g, xs, &mut col);
                    &col
                };
                // SAFETY: image n's group grp is written by this call only (images are split
                // between the calls); the range lies inside `y` (asserted above).
                let ys = unsafe {
                    std::slice::from_raw_parts_mut(
                        yp.get().add((n * g.out_ch + grp * out_g) * out_sp),
                        out_g * out_sp,
                    )
                };
                let wg = &w[grp * out_g * kr..][..out_g * kr];
                mm(
                    serial,
                    out_g,
                    out_sp,
                    kr,
                    op(wg, false),
                    op(cols, false),
                    ys,
                    false,
                );
            }
        }
    });
}

/// `x = convᵀ(y, w)`: the transpose of [`lower`] (`x` overwritten).
pub fn raise<T: ConvElement>(g: &ConvGeom, y: &[T], w: &[T], x: &mut [T]) {
    let (in_sp, out_sp, kr) = (g.in_sp(), g.out_sp(), g.k_rows());
    let (in_g, out_g) = (g.in_g(), g.out_g());
    assert!(x.len() >= g.batch * g.in_ch * in_sp && w.len() >= g.weight_len());
    assert!(y.len() >= g.batch * g.out_ch * out_sp);
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
    over_images(g, |images, serial| {
        let mut col = vec![T::zero(); g.col_len()];
        for n in images {
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
                if g.pointwise() {
                    mm(
                        serial,
                        kr,
                        out_sp,
                        out_g,
                        op(wg, true),
                        op(ys, false),
                        xs,
                        false,
                    );
                } else {
                    mm(
                        serial,
                        kr,
                        out_sp,
                        out_g,
                        op(wg, true),
                        op(ys, false),
                        &mut col,
                        false,
                    );
                    xs.fill(T::zero());
                    col2im(g, &col, xs);
                }
            }
        }
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
    over_images(g, |images, serial| {
        let mut col = vec![T::zero(); g.col_len()];
        let mut acc = vec![T::zero(); wl];
        let first = images.start;
        for (i, n) in images.enumerate() {
            for grp in 0..g.groups {
                let xs = &x[(n * g.in_ch + grp * in_g) * in_sp..][..in_g * in_sp];
                let cols: &[T] = if g.pointwise() {
                    xs
                } else {
                    im2col(g, xs, &mut col);
                    &col
                };
                let ys = &dy[(n * g.out_ch + grp * out_g) * out_sp..][..out_g * out_sp];
                let a = &mut acc[grp * out_g * kr..][..out_g * kr];
                mm(
                    serial,
                    out_g,
                    kr,
                    out_sp,
                    op(ys, false),
                    op(cols, true),
                    a,
                    i > 0,
                );
            }
        }
        partials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((first, acc));
    });
    let mut partials = partials.into_inner().unwrap_or_else(|e| e.into_inner());
    // summed in image order, so the result does not depend on which thread finished first
    partials.sort_by_key(|(first, _)| *first);
    let dw = &mut dw[..wl];
    dw.fill(T::zero());
    for (_, p) in partials {
        for (d, v) in dw.iter_mut().zip(p) {
            *d = *d + v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
