//! A direct AVX-512 float32 forward convolution for 2-D layers whose im2col + GEMM is poor: few
//! input channels (the 7×7 stride-2 stem: 147 multiply-adds per output, too short a product
//! depth for a GEMM) and stride 2 (whose columns are a strided gather); not 1×1 kernels, whose
//! GEMM measured faster.
//!
//! Each image's input is copied once into a padded, phase-split form `P[c][row][phase][j]`: row
//! `row` of the zero-padded input, its columns `j * stride + phase`. Output column `ox` of kernel
//! column `b` then reads `P[..][(b·dilate) % stride][ox + (b·dilate) / stride]`, so 16
//! consecutive outputs of a kernel tap are one contiguous vector load. The kernel keeps 8 output
//! channels × 32 output columns in 16 accumulators and, per kernel tap, loads two vectors and
//! broadcasts the 8 channels' weights (16 fused multiply-adds); the weights are reordered once
//! per call to `[block of 8 channels][tap][8]`.
//!
//! The data gradient is the same loop transposed: per output row, blocks of 8 kernel taps
//! accumulate `Σ_co w · dy` over two vectors of outputs and add them into a padded, phase-split
//! gradient at each tap's place, which is then folded back into the image. The weight gradient
//! (few-channel layers only: with many input channels im2col + GEMM is as fast) keeps 4 output
//! channels × 4 taps of 16-lane partial sums over each image's output rows.
//!
//! Used on CPUs with AVX-512F only; the im2col path stays the fallback. For the forward,
//! (image, block of output channels) pairs are split over the intra-op pool; for the gradients,
//! images (the weight gradient's per-thread sums added in image order).

use super::conv::{ConvGeom, split};
use super::map::Ptr;

/// Output channels per block (accumulator rows).
const CO: usize = 8;
/// Output columns per step: two 16-lane vectors.
const W: usize = 32;

/// Whether `g`'s forward takes the direct kernel: float32 (the caller checks), one group, 2-D,
/// stride 2 or a short product depth, and rows wide enough for the vectors.
pub fn applies(g: &ConvGeom) -> bool {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let ok = g.groups == 1
        && g.input[0] == 1
        && g.output[0] == 1
        && g.kernel[0] == 1
        && g.pad[0] == 0
        && g.output[2] >= 16
        && g.out_ch >= CO
        // a 1×1 kernel's columns are a plain copy (or strided gather): its GEMM wins
        && g.kernel != [1, 1, 1]
        && (g.stride[1] >= 2 || g.stride[2] >= 2 || taps <= 160)
        && taps <= 4096
        && enabled();
    #[cfg(target_arch = "x86_64")]
    {
        ok && std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = ok;
        false
    }
}

/// Whether the weight gradient also takes the direct kernel: few input channels only (a short
/// product depth; with many channels im2col + GEMM measured as fast, and gets faster with the GEMM).
pub fn applies_weight_grad(g: &ConvGeom) -> bool {
    applies(g) && g.in_ch * g.kernel[1] * g.kernel[2] <= 160
}

/// `MXRT_CONV_DIRECT=0` turns the direct kernel off (for comparisons).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MXRT_CONV_DIRECT").map_or(true, |v| v != "0"))
}

/// The padded, phase-split input's sizes.
#[derive(Clone, Copy)]
struct Layout {
    /// Padded rows that outputs read.
    hp: usize,
    /// Length of one phase row (with room for the last vector's overhang).
    lr: usize,
    /// Phases (the x stride).
    s: usize,
}

impl Layout {
    fn of(g: &ConvGeom) -> Layout {
        let [_, oh, ow] = g.output;
        let (kh, kw) = (g.kernel[1], g.kernel[2]);
        let (sy, sx) = (g.stride[1], g.stride[2]);
        let (dy, dx) = (g.dilate[1], g.dilate[2]);
        Layout {
            hp: (oh - 1) * sy + (kh - 1) * dy + 1,
            lr: ow.next_multiple_of(W) + (kw - 1) * dx / sx + 1,
            s: sx,
        }
    }
    fn len(&self, ch: usize) -> usize {
        ch * self.hp * self.s * self.lr
    }
}

/// Fills `p` with image `x` (`ch × ih × iw`) padded and phase-split (see the module docs).
fn fill(g: &ConvGeom, lay: &Layout, x: &[f32], p: &mut [f32]) {
    let [_, ih, iw] = g.input;
    let (py, px) = (g.pad[1] as isize, g.pad[2] as isize);
    let (s, lr) = (lay.s, lay.lr);
    p.fill(0.0);
    for c in 0..g.in_ch {
        for r in 0..lay.hp {
            let iy = r as isize - py;
            if iy < 0 || iy >= ih as isize {
                continue;
            }
            let src = &x[(c * ih + iy as usize) * iw..][..iw];
            let base = (c * lay.hp + r) * s * lr;
            for (ix, v) in src.iter().enumerate() {
                let q = ix as isize + px; // padded column
                let (ph, j) = (q as usize % s, q as usize / s);
                if j < lr {
                    p[base + ph * lr + j] = *v;
                }
            }
        }
    }
}

/// `wt[block][tap][8]` from `w` (`out × taps`), channels past `out` zero.
fn reorder_weight(w: &[f32], out: usize, taps: usize) -> Vec<f32> {
    let blocks = out.div_ceil(CO);
    let mut wt = vec![0.0f32; blocks * taps * CO];
    for o in 0..out {
        let (bl, j) = (o / CO, o % CO);
        for t in 0..taps {
            wt[(bl * taps + t) * CO + j] = w[o * taps + t];
        }
    }
    wt
}

/// One block of 8 output channels over output row `oy` of one image.
///
/// # Safety
/// The CPU has AVX-512F; `p` holds the image's padded input (`Layout::len`), `wb` the block's
/// `taps × 8` weights, and `y` points at channel `co0`'s row `oy` of the image's output, whose
/// channels lie `osp` apart; channels `co0 + j` for `j < valid` exist.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_row(
    g: &ConvGeom,
    lay: &Layout,
    p: &[f32],
    wb: &[f32],
    oy: usize,
    y: *mut f32,
    osp: usize,
    valid: usize,
) {
    use std::arch::x86_64::*;
    let ow = g.output[2];
    let (kh, kw) = (g.kernel[1], g.kernel[2]);
    let (sy, sx) = (g.stride[1], g.stride[2]);
    let (dy, dx) = (g.dilate[1], g.dilate[2]);
    let (s, lr) = (lay.s, lay.lr);
    let mut x0 = 0;
    while x0 < ow {
        let mut acc = [[_mm512_setzero_ps(); 2]; CO];
        let mut t = 0;
        for c in 0..g.in_ch {
            for a in 0..kh {
                let row = (c * lay.hp + oy * sy + a * dy) * s * lr;
                for b in 0..kw {
                    let q = b * dx;
                    let at = row + (q % sx) * lr + q / sx + x0;
                    debug_assert!(at + W <= p.len());
                    // SAFETY: `at + 32 <= p.len()` (the phase rows have room for the last
                    // vector's overhang); unaligned loads.
                    let (v0, v1) = unsafe {
                        (
                            _mm512_loadu_ps(p.as_ptr().add(at)),
                            _mm512_loadu_ps(p.as_ptr().add(at + 16)),
                        )
                    };
                    let wt = &wb[t * CO..][..CO];
                    for j in 0..CO {
                        let wv = _mm512_set1_ps(wt[j]);
                        acc[j][0] = _mm512_fmadd_ps(wv, v0, acc[j][0]);
                        acc[j][1] = _mm512_fmadd_ps(wv, v1, acc[j][1]);
                    }
                    t += 1;
                }
            }
        }
        let n = (ow - x0).min(W);
        let m0: __mmask16 = if n >= 16 { 0xffff } else { (1u16 << n) - 1 };
        let m1: __mmask16 = if n >= W {
            0xffff
        } else if n > 16 {
            (1u16 << (n - 16)) - 1
        } else {
            0
        };
        for (j, a) in acc.iter().enumerate().take(valid) {
            // SAFETY: channel co0 + j exists (j < valid); lanes past the row's end are masked.
            unsafe {
                let dst = y.add(j * osp + x0);
                _mm512_mask_storeu_ps(dst, m0, a[0]);
                _mm512_mask_storeu_ps(dst.add(16), m1, a[1]);
            }
        }
        x0 += W;
    }
}

/// `y = conv(x, w)` for a geometry that [`applies`]; `y` overwritten.
pub fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let (isp, osp) = (g.input[1] * g.input[2], g.output[1] * g.output[2]);
    assert!(x.len() >= g.batch * g.in_ch * isp && w.len() >= g.out_ch * taps);
    assert!(y.len() >= g.batch * g.out_ch * osp);
    assert!(applies(g));
    let lay = Layout::of(g);
    let wt = reorder_weight(w, g.out_ch, taps);
    let blocks = g.out_ch.div_ceil(CO);
    // items: (image, block) pairs, image-major, so that a range rebuilds few padded inputs
    let yp = Ptr(y.as_mut_ptr());
    split(g.batch * blocks, |items| {
        let mut p = vec![0.0f32; lay.len(g.in_ch)];
        let mut have = usize::MAX;
        for it in items {
            let (n, bl) = (it / blocks, it % blocks);
            if have != n {
                fill(g, &lay, &x[n * g.in_ch * isp..][..g.in_ch * isp], &mut p);
                have = n;
            }
            let co0 = bl * CO;
            let valid = (g.out_ch - co0).min(CO);
            let wb = &wt[bl * taps * CO..][..taps * CO];
            for oy in 0..g.output[1] {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `applies` checked AVX-512F; image n's block bl of `y` is written by
                // this item only, inside `y` (asserted); `p` is image n's padded input.
                unsafe {
                    block_row(
                        g,
                        &lay,
                        &p,
                        wb,
                        oy,
                        yp.get().add((n * g.out_ch + co0) * osp + oy * g.output[2]),
                        osp,
                        valid,
                    );
                }
            }
        }
    });
}

/// Adds the padded, phase-split gradient `p` back into image `dx` (`ch × ih × iw`, overwritten):
/// the adjoint of [`fill`].
fn unfill(g: &ConvGeom, lay: &Layout, p: &[f32], dx: &mut [f32]) {
    let [_, ih, iw] = g.input;
    let (py, px) = (g.pad[1] as isize, g.pad[2] as isize);
    let (s, lr) = (lay.s, lay.lr);
    for c in 0..g.in_ch {
        for iy in 0..ih {
            let dst = &mut dx[(c * ih + iy) * iw..][..iw];
            let r = iy as isize + py;
            if r < 0 || r >= lay.hp as isize {
                dst.fill(0.0);
                continue;
            }
            let base = (c * lay.hp + r as usize) * s * lr;
            for (ix, v) in dst.iter_mut().enumerate() {
                let q = (ix as isize + px) as usize;
                let (ph, j) = (q % s, q / s);
                *v = if j < lr { p[base + ph * lr + j] } else { 0.0 };
            }
        }
    }
}

/// Taps per block of the data gradient (accumulator rows).
const TB: usize = 8;

/// The data gradient's taps `t0..t0 + valid` over output row `oy` of one image: `p` (the padded,
/// phase-split input gradient) gets `Σ_co w[co][t] · dy[co][oy][..]` at each tap's place.
///
/// # Safety
/// The CPU has AVX-512F; `p` has `Layout::len` elements, `wb` holds the block's `out_ch × 8`
/// weights and `dy` is the image's output gradient (`out_ch × oh × ow`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn grad_block_row(
    g: &ConvGeom,
    lay: &Layout,
    p: &mut [f32],
    wb: &[f32],
    dy: &[f32],
    oy: usize,
    t0: usize,
    valid: usize,
) {
    use std::arch::x86_64::*;
    let [_, oh, ow] = g.output;
    let (kh, kw) = (g.kernel[1], g.kernel[2]);
    let (sy, sx) = (g.stride[1], g.stride[2]);
    let (dy_, dx_) = (g.dilate[1], g.dilate[2]);
    let (s, lr) = (lay.s, lay.lr);
    let osp = oh * ow;
    assert!(dy.len() >= g.out_ch * osp && wb.len() >= g.out_ch * TB);
    let mut places = [0usize; TB];
    for (k, pl) in places.iter_mut().enumerate().take(valid) {
        let t = t0 + k;
        let (c, a, b) = (t / (kh * kw), (t / kw) % kh, t % kw);
        let q = b * dx_;
        *pl = (c * lay.hp + oy * sy + a * dy_) * s * lr + (q % sx) * lr + q / sx;
    }
    let mut x0 = 0;
    while x0 < ow {
        let n = (ow - x0).min(W);
        let m0: __mmask16 = if n >= 16 { 0xffff } else { (1u16 << n) - 1 };
        let m1: __mmask16 = if n >= W {
            0xffff
        } else if n > 16 {
            (1u16 << (n - 16)) - 1
        } else {
            0
        };
        let mut acc = [[_mm512_setzero_ps(); 2]; TB];
        for co in 0..g.out_ch {
            let at = co * osp + oy * ow + x0;
            // SAFETY: masked lanes stay inside row oy of channel co of `dy` (asserted length).
            let (v0, v1) = unsafe {
                (
                    _mm512_maskz_loadu_ps(m0, dy.as_ptr().add(at)),
                    _mm512_maskz_loadu_ps(m1, dy.as_ptr().add(at + 16)),
                )
            };
            let wt = &wb[co * TB..][..TB];
            for k in 0..TB {
                let wv = _mm512_set1_ps(wt[k]);
                acc[k][0] = _mm512_fmadd_ps(wv, v0, acc[k][0]);
                acc[k][1] = _mm512_fmadd_ps(wv, v1, acc[k][1]);
            }
        }
        for (k, a) in acc.iter().enumerate().take(valid) {
            let at = places[k] + x0;
            assert!(at + W <= p.len());
            // SAFETY: `at + 32 <= p.len()` (asserted); lanes past the row hold zero sums.
            unsafe {
                let d = p.as_mut_ptr().add(at);
                _mm512_storeu_ps(d, _mm512_add_ps(_mm512_loadu_ps(d), a[0]));
                _mm512_storeu_ps(d.add(16), _mm512_add_ps(_mm512_loadu_ps(d.add(16)), a[1]));
            }
        }
        x0 += W;
    }
}

/// `dx = convᵀ(dy, w)`, the data gradient of a geometry that [`applies`]; `dx` overwritten.
pub fn data_grad(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let (isp, osp) = (g.input[1] * g.input[2], g.output[1] * g.output[2]);
    assert!(dx.len() >= g.batch * g.in_ch * isp && w.len() >= g.out_ch * taps);
    assert!(dy.len() >= g.batch * g.out_ch * osp);
    assert!(applies(g));
    let lay = Layout::of(g);
    // wtt[tap block][co][8]
    let tblocks = taps.div_ceil(TB);
    let mut wtt = vec![0.0f32; tblocks * g.out_ch * TB];
    for o in 0..g.out_ch {
        for t in 0..taps {
            wtt[((t / TB) * g.out_ch + o) * TB + t % TB] = w[o * taps + t];
        }
    }
    let xp = Ptr(dx.as_mut_ptr());
    split(g.batch, |images| {
        let mut p = vec![0.0f32; lay.len(g.in_ch)];
        for n in images {
            p.fill(0.0);
            let dyn_ = &dy[n * g.out_ch * osp..][..g.out_ch * osp];
            for oy in 0..g.output[1] {
                for tb in 0..tblocks {
                    let valid = (taps - tb * TB).min(TB);
                    let wb = &wtt[tb * g.out_ch * TB..][..g.out_ch * TB];
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `applies` checked AVX-512F; the sizes are as documented.
                    unsafe {
                        grad_block_row(g, &lay, &mut p, wb, dyn_, oy, tb * TB, valid);
                    }
                }
            }
            // SAFETY: image n of `dx` is written by this range only; in bounds (asserted).
            let d = unsafe {
                std::slice::from_raw_parts_mut(xp.get().add(n * g.in_ch * isp), g.in_ch * isp)
            };
            unfill(g, &lay, &p, d);
        }
    });
}

/// Output channels and taps per block of the weight gradient (4 × 4 accumulators).
const WB: usize = 4;

/// Adds one image's weight gradient to `dw` (`out_ch × taps`) from its padded input `p` and its
/// output gradient `dy` (`out_ch × oh × ow`).
///
/// # Safety
/// The CPU has AVX-512F; `p` has `Layout::len` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn weight_grad_image(g: &ConvGeom, lay: &Layout, p: &[f32], dy: &[f32], dw: &mut [f32]) {
    use std::arch::x86_64::*;
    let [_, oh, ow] = g.output;
    let (kh, kw) = (g.kernel[1], g.kernel[2]);
    let (sy, sx) = (g.stride[1], g.stride[2]);
    let (dly, dlx) = (g.dilate[1], g.dilate[2]);
    let (s, lr) = (lay.s, lay.lr);
    let taps = g.in_ch * kh * kw;
    let osp = oh * ow;
    assert!(dy.len() >= g.out_ch * osp && dw.len() >= g.out_ch * taps);
    assert!(p.len() >= lay.len(g.in_ch));
    // a tap's place in `p` for output row 0, and its step per output row
    let place = |t: usize| {
        let (c, a, b) = (t / (kh * kw), (t / kw) % kh, t % kw);
        let q = b * dlx;
        (c * lay.hp + a * dly) * s * lr + (q % sx) * lr + q / sx
    };
    let row_step = sy * s * lr;
    for co0 in (0..g.out_ch).step_by(WB) {
        let cos: [usize; WB] = std::array::from_fn(|j| (co0 + j).min(g.out_ch - 1));
        for t0 in (0..taps).step_by(WB) {
            let ts: [usize; WB] = std::array::from_fn(|k| (t0 + k).min(taps - 1));
            let pl: [usize; WB] = std::array::from_fn(|k| place(ts[k]));
            let mut acc = [[_mm512_setzero_ps(); WB]; WB];
            for oy in 0..oh {
                let mut x0 = 0;
                while x0 < ow {
                    let n = (ow - x0).min(16);
                    let m: __mmask16 = if n >= 16 { 0xffff } else { (1u16 << n) - 1 };
                    // SAFETY: masked lanes lie inside row oy of each channel of `dy` and inside
                    // each tap's phase row of `p` (asserted lengths; `lr` covers the row).
                    let (d, v) = unsafe {
                        let d: [__m512; WB] = std::array::from_fn(|j| {
                            _mm512_maskz_loadu_ps(m, dy.as_ptr().add(cos[j] * osp + oy * ow + x0))
                        });
                        let v: [__m512; WB] = std::array::from_fn(|k| {
                            _mm512_maskz_loadu_ps(m, p.as_ptr().add(pl[k] + oy * row_step + x0))
                        });
                        (d, v)
                    };
                    for j in 0..WB {
                        for k in 0..WB {
                            acc[j][k] = _mm512_fmadd_ps(d[j], v[k], acc[j][k]);
                        }
                    }
                    x0 += 16;
                }
            }
            for j in 0..WB.min(g.out_ch - co0) {
                for k in 0..WB.min(taps - t0) {
                    dw[(co0 + j) * taps + t0 + k] += _mm512_reduce_add_ps(acc[j][k]);
                }
            }
        }
    }
}

/// `dw = Σ_images` the weight gradient from `x` and `dy` for a geometry that [`applies`] (`dw`
/// overwritten). Per-thread partial sums are added in image order.
pub fn weight_grad(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let (isp, osp) = (g.input[1] * g.input[2], g.output[1] * g.output[2]);
    let wl = g.out_ch * taps;
    assert!(x.len() >= g.batch * g.in_ch * isp && dw.len() >= wl);
    assert!(dy.len() >= g.batch * g.out_ch * osp);
    assert!(applies(g));
    let lay = Layout::of(g);
    let partials = std::sync::Mutex::new(Vec::<(usize, Vec<f32>)>::new());
    split(g.batch, |images| {
        let first = images.start;
        let mut p = vec![0.0f32; lay.len(g.in_ch)];
        let mut acc = vec![0.0f32; wl];
        for n in images {
            fill(g, &lay, &x[n * g.in_ch * isp..][..g.in_ch * isp], &mut p);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `applies` checked AVX-512F; `p` is image n's padded input.
            unsafe {
                weight_grad_image(
                    g,
                    &lay,
                    &p,
                    &dy[n * g.out_ch * osp..][..g.out_ch * osp],
                    &mut acc,
                );
            }
        }
        partials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((first, acc));
    });
    let mut partials = partials.into_inner().unwrap_or_else(|e| e.into_inner());
    partials.sort_by_key(|(first, _)| *first);
    let dw = &mut dw[..wl];
    dw.fill(0.0);
    for (_, part) in partials {
        for (d, v) in dw.iter_mut().zip(part) {
            *d += v;
        }
    }
}
