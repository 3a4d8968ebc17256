//! A direct AVX-512 float32 convolution for 2-D layers whose im2col + GEMM is poor: few input
//! channels (the 7×7 stride-2 stem: 147 multiply-adds per output, too short a product depth for a
//! GEMM), stride 2 (whose columns are a strided gather) and small images (LeNet's 8×8 outputs,
//! too few columns per image for the AVX-512 GEMM); not 1×1 kernels, whose GEMM measured faster.
//!
//! Each image is copied once into a zero-padded *phase-plane* form `Q[c][ry][rx][i][j]`: padded
//! row `i·sy + ry`, padded column `j·sx + rx` (`sy`, `sx` the strides), each plane `hq × l` with
//! `l = ow + (kw - 1)·dx / sx`. Output `(oy, ox)` of kernel tap `(c, a, b)` then reads
//! `Q[c][a·dy % sy][b·dx % sx][oy + a·dy / sy][ox + b·dx / sx]`, that is the plane element at
//! *flat* index `oy·l + ox` plus a shift that depends on the tap only. The outputs are therefore
//! computed on the flat index `oy·l + ox` (the `l - ow` columns past each row are computed and
//! dropped), so that each tap is one contiguous run for any row width, and every product is a
//! GEMM whose second operand's rows are shifted views of `Q`:
//!
//! - forward: `Y[co][o] = Σ_t W[co][t] · Q[shift(t) + o]`, in tiles of 8 output channels × 48
//!   flat outputs (24 accumulators; per tap three vector loads and 8 weight broadcasts), the
//!   weights reordered once per call to `[block of 8 channels][tap][8]`;
//! - data gradient: `G[t][o] = Σ_co W[co][t] · dY[co][o]` in tiles of 8 taps × 48 flat outputs
//!   over the output gradient copied to the flat form (zero past each row), each tile added into
//!   the padded phase-plane gradient at its taps' shifts, which is then folded back into the
//!   image;
//! - weight gradient: `dW[co][t] = Σ_o dY[co][o] · Q[shift(t) + o]`, 8 channels × 3 taps of
//!   16-lane sums over a chunk of images (about 512 KiB of inputs and output gradients: one image
//!   of the large layers, 16 of LeNet's), reduced into per-thread sums added in image order.
//!
//! At x stride 2 the adjoint of the phase split is a vector permute (masked stores of the even
//! lanes); the split itself stays a scalar strided copy, which measured faster than masked loads
//! and permutes.
//!
//! Used on CPUs with AVX-512F only; the im2col path stays the fallback. For the forward,
//! (image, block of output channels) pairs are split over the intra-op pool; for the gradients,
//! images.

use super::conv::{ConvGeom, split};
use super::map::Ptr;

/// Output channels (forward and weight gradient) or taps (data gradient) per tile.
const CO: usize = 8;
/// Vectors of flat outputs per tile.
const NV: usize = 3;
/// Flat outputs per tile.
const NT: usize = NV * 16;
/// Taps per tile of the weight gradient.
const WT: usize = 3;

/// Whether `g`'s forward and data gradient take the direct kernel: float32 (the caller checks),
/// one group, 2-D, stride 2 or a short product depth or small images, not 1×1.
pub fn applies(g: &ConvGeom) -> bool {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let [_, oh, ow] = g.output;
    let strided = g.stride[1] >= 2 || g.stride[2] >= 2;
    let ok = g.groups == 1
        && g.input[0] == 1
        && g.output[0] == 1
        && g.kernel[0] == 1
        && g.pad[0] == 0
        && g.out_ch >= CO
        // a 1×1 kernel's columns are a plain copy (or strided gather): its GEMM wins
        && g.kernel != [1, 1, 1]
        && ((ow >= 16 && (strided || taps <= 160))
            // small images: too few columns per image for the AVX-512 GEMM
            || (!strided && ow >= 8 && oh * ow <= 256 && g.out_ch >= 16))
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

/// Whether the weight gradient also takes the direct kernel (`MXRT_CONV_DIRECT_WGRAD=0` keeps
/// im2col + GEMM for it).
pub fn applies_weight_grad(g: &ConvGeom) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    applies(g)
        && *ON.get_or_init(|| std::env::var("MXRT_CONV_DIRECT_WGRAD").map_or(true, |v| v != "0"))
}

/// `MXRT_CONV_DIRECT=0` turns the direct kernel off (for comparisons).
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("MXRT_CONV_DIRECT").map_or(true, |v| v != "0"))
}

/// The phase-plane form's sizes (see the module docs).
#[derive(Clone, Copy)]
struct Flat {
    sy: usize,
    sx: usize,
    /// Rows of a plane.
    hq: usize,
    /// Row length of a plane (and of the flat outputs).
    l: usize,
    /// `hq × l`.
    plane: usize,
    /// Flat outputs computed: `oh × l` rounded up to whole tiles.
    nf: usize,
    /// Elements of the whole form, with room for the last tile's overhang.
    len: usize,
}

impl Flat {
    fn of(g: &ConvGeom) -> Flat {
        let [_, oh, ow] = g.output;
        let (sy, sx) = (g.stride[1], g.stride[2]);
        let hq = oh + (g.kernel[1] - 1) * g.dilate[1] / sy;
        let l = ow + (g.kernel[2] - 1) * g.dilate[2] / sx;
        let plane = hq * l;
        let nf = (oh * l).next_multiple_of(NT);
        Flat {
            sy,
            sx,
            hq,
            l,
            plane,
            nf,
            len: g.in_ch * sy * sx * plane + nf + l,
        }
    }

    /// Each tap's shift: where its flat output 0 reads in the form.
    fn shifts(&self, g: &ConvGeom) -> Vec<usize> {
        let (kh, kw) = (g.kernel[1], g.kernel[2]);
        let (dy, dx) = (g.dilate[1], g.dilate[2]);
        let mut v = Vec::with_capacity(g.in_ch * kh * kw);
        for c in 0..g.in_ch {
            for a in 0..kh {
                for b in 0..kw {
                    let (qa, qb) = (a * dy, b * dx);
                    let pl = (c * self.sy + qa % self.sy) * self.sx + qb % self.sx;
                    v.push(pl * self.plane + (qa / self.sy) * self.l + qb / self.sx);
                }
            }
        }
        v
    }

    /// The range of `j` whose padded column `j·sx + rx` is an input column, and that column for
    /// the first of them.
    fn cols(&self, rx: usize, px: usize, iw: usize) -> (usize, usize, usize) {
        // j·sx + rx >= px  and  j·sx + rx < px + iw
        let lo = (px.saturating_sub(rx)).div_ceil(self.sx);
        let hi = (px + iw).saturating_sub(rx).div_ceil(self.sx).min(self.l);
        let lo = lo.min(hi);
        (lo, hi, lo * self.sx + rx - px.min(lo * self.sx + rx))
    }
}

/// Fills `q` with image `x` (`ch × ih × iw`) in the phase-plane form (every element written).
fn fill(g: &ConvGeom, f: &Flat, x: &[f32], q: &mut [f32]) {
    let [_, ih, iw] = g.input;
    let (py, px) = (g.pad[1], g.pad[2]);
    let (sy, sx, l) = (f.sy, f.sx, f.l);
    for c in 0..g.in_ch {
        for ry in 0..sy {
            for rx in 0..sx {
                let base = ((c * sy + ry) * sx + rx) * f.plane;
                let (lo, hi, ix0) = f.cols(rx, px, iw);
                for i in 0..f.hq {
                    let dst = &mut q[base + i * l..][..l];
                    let r = i * sy + ry;
                    if r < py || r - py >= ih || lo == hi {
                        dst.fill(0.0);
                        continue;
                    }
                    let src = &x[(c * ih + r - py) * iw..][..iw];
                    dst[..lo].fill(0.0);
                    dst[hi..].fill(0.0);
                    if sx == 1 {
                        dst[lo..hi].copy_from_slice(&src[ix0..ix0 + hi - lo]);
                    } else {
                        for (d, s) in dst[lo..hi].iter_mut().zip(src[ix0..].iter().step_by(sx)) {
                            *d = *s;
                        }
                    }
                }
            }
        }
    }
    q[g.in_ch * sy * sx * f.plane..f.len].fill(0.0);
}

/// Writes image `dx` (`ch × ih × iw`, overwritten) from the phase-plane gradient `q`: the
/// adjoint of [`fill`] (input elements that no output reads get zero).
fn unfill(g: &ConvGeom, f: &Flat, q: &[f32], dx: &mut [f32]) {
    let [_, ih, iw] = g.input;
    let (py, px) = (g.pad[1], g.pad[2]);
    let (sy, sx, l) = (f.sy, f.sx, f.l);
    for c in 0..g.in_ch {
        for iy in 0..ih {
            let dst = &mut dx[(c * ih + iy) * iw..][..iw];
            let r = iy + py;
            let (i, ry) = (r / sy, r % sy);
            dst.fill(0.0);
            if i >= f.hq {
                continue;
            }
            for rx in 0..sx {
                let base = ((c * sy + ry) * sx + rx) * f.plane + i * l;
                let (lo, hi, ix0) = f.cols(rx, px, iw);
                let src = &q[base..][..l];
                if sx == 1 {
                    dst[ix0..ix0 + hi - lo].copy_from_slice(&src[lo..hi]);
                } else if cfg!(target_arch = "x86_64") && sx == 2 {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: callers run only where `applies` (AVX-512F) holds.
                    unsafe {
                        scatter2(&src[lo..hi], dst, ix0);
                    }
                } else {
                    for (d, s) in dst[ix0..].iter_mut().step_by(sx).zip(&src[lo..hi]) {
                        *d = *s;
                    }
                }
            }
        }
    }
}

/// A mask of the first `n` (at most 16) lanes.
#[cfg(target_arch = "x86_64")]
fn lanes(n: usize) -> u16 {
    if n >= 16 {
        0xffff
    } else {
        ((1u32 << n) - 1) as u16
    }
}

/// `dst[from + 2m] = src[m]` for every `m < src.len()`, the other elements untouched (the x
/// stride 2 rows of [`unfill`]).
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn scatter2(src: &[f32], dst: &mut [f32], from: usize) {
    use std::arch::x86_64::*;
    const LO: [i32; 16] = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7];
    const HI: [i32; 16] = [8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15];
    let cnt = src.len();
    assert!(cnt == 0 || from + 2 * (cnt - 1) < dst.len());
    // SAFETY: 64-byte reads of 16-element arrays.
    let (ilo, ihi) = unsafe {
        (
            _mm512_loadu_si512(LO.as_ptr().cast()),
            _mm512_loadu_si512(HI.as_ptr().cast()),
        )
    };
    let mut m = 0;
    while m < cnt {
        let k = cnt - m;
        let at = from + 2 * m;
        let avail = dst.len() - at;
        // SAFETY: only even lanes that hold one of `src`'s values (masks of `2k`) inside `dst`
        // (masks of `avail`) are written; masked-off lanes do not fault.
        unsafe {
            let v = _mm512_maskz_loadu_ps(lanes(k), src.as_ptr().add(m));
            let p = dst.as_mut_ptr().wrapping_add(at);
            let m0 = 0x5555 & lanes(avail) & lanes(2 * k);
            _mm512_mask_storeu_ps(p, m0, _mm512_permutexvar_ps(ilo, v));
            let m1 = 0x5555 & lanes(avail.saturating_sub(16)) & lanes((2 * k).saturating_sub(16));
            _mm512_mask_storeu_ps(p.wrapping_add(16), m1, _mm512_permutexvar_ps(ihi, v));
        }
        m += 16;
    }
}

/// Copies image output gradient `dy` (`ch × oh × ow`) into the flat form `d` (`ch × nf`), whose
/// elements past each row were zeroed once and are never written.
fn pack_flat(g: &ConvGeom, f: &Flat, dy: &[f32], d: &mut [f32]) {
    let [_, oh, ow] = g.output;
    for co in 0..g.out_ch {
        for oy in 0..oh {
            d[co * f.nf + oy * f.l..][..ow].copy_from_slice(&dy[(co * oh + oy) * ow..][..ow]);
        }
    }
}

/// One forward tile: 8 output channels (block weights `wb`, `taps × 8`) × 48 flat outputs from
/// `o0`, stored into `out` (`8 × ld`) at column `o0`.
///
/// # Safety
/// The CPU has AVX-512F; `q` holds `Flat::len` elements and every `shift + o0 + 48` is within
/// it; `wb` holds `shifts.len() × 8` weights; `out` has `8 × ld` elements and `o0 + 48 <= ld`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fwd_tile(
    q: *const f32,
    shifts: &[usize],
    wb: *const f32,
    o0: usize,
    out: *mut f32,
    ld: usize,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NV]; CO];
    for (t, &sh) in shifts.iter().enumerate() {
        // SAFETY: in bounds per the contract.
        unsafe {
            let src = q.add(sh + o0);
            let v: [__m512; NV] = std::array::from_fn(|k| _mm512_loadu_ps(src.add(16 * k)));
            let w = wb.add(t * CO);
            for (j, a) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*w.add(j));
                for k in 0..NV {
                    a[k] = _mm512_fmadd_ps(wv, v[k], a[k]);
                }
            }
        }
    }
    for (j, a) in acc.iter().enumerate() {
        for (k, v) in a.iter().enumerate() {
            // SAFETY: inside `out` per the contract.
            unsafe { _mm512_storeu_ps(out.add(j * ld + o0 + 16 * k), *v) };
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

/// `y = conv(x, w)` for a geometry that [`applies`]; `y` overwritten.
pub fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let [_, oh, ow] = g.output;
    let (isp, osp) = (g.input[1] * g.input[2], oh * ow);
    assert!(x.len() >= g.batch * g.in_ch * isp && w.len() >= g.out_ch * taps);
    assert!(y.len() >= g.batch * g.out_ch * osp);
    assert!(applies(g));
    let f = Flat::of(g);
    let shifts = f.shifts(g);
    assert!(shifts.iter().all(|&s| s + f.nf <= f.len));
    let wt = reorder_weight(w, g.out_ch, taps);
    let blocks = g.out_ch.div_ceil(CO);
    // items: (image, block) pairs, image-major, so that a range fills few images
    let yp = Ptr(y.as_mut_ptr());
    split(g.batch * blocks, |items| {
        let mut q = vec![0.0f32; f.len];
        let mut tmp = vec![0.0f32; CO * f.nf];
        let mut have = usize::MAX;
        for it in items {
            let (n, bl) = (it / blocks, it % blocks);
            if have != n {
                fill(g, &f, &x[n * g.in_ch * isp..][..g.in_ch * isp], &mut q);
                have = n;
            }
            let wb = &wt[bl * taps * CO..][..taps * CO];
            for o0 in (0..f.nf).step_by(NT) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `applies` checked AVX-512F; shifts + nf within `q` (asserted), `wb`
                // is the block's weights, `tmp` is `8 × nf`.
                unsafe {
                    fwd_tile(q.as_ptr(), &shifts, wb.as_ptr(), o0, tmp.as_mut_ptr(), f.nf);
                }
            }
            let co0 = bl * CO;
            for j in 0..(g.out_ch - co0).min(CO) {
                // SAFETY: image n's channel co0 + j of `y` is written by this item only, inside
                // `y` (asserted).
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(
                        yp.get().add((n * g.out_ch + co0 + j) * osp),
                        osp,
                    )
                };
                for oy in 0..oh {
                    dst[oy * ow..][..ow].copy_from_slice(&tmp[j * f.nf + oy * f.l..][..ow]);
                }
            }
        }
    });
}

/// One data-gradient tile: taps `shifts` (at most 8; block weights `wb`, `out_ch × 8`) × 48 flat
/// outputs from `o0` of the flat output gradient `d` (`out_ch × ld`), added into `q` at each
/// tap's shift.
///
/// # Safety
/// The CPU has AVX-512F; `d` holds `out_ch × ld` elements with `o0 + 48 <= ld`; `wb` holds
/// `out_ch × 8`; every `shift + o0 + 48` is within `q`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn grad_tile(
    d: *const f32,
    ld: usize,
    out_ch: usize,
    wb: *const f32,
    o0: usize,
    q: *mut f32,
    shifts: &[usize],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); NV]; CO];
    for co in 0..out_ch {
        // SAFETY: in bounds per the contract.
        unsafe {
            let src = d.add(co * ld + o0);
            let v: [__m512; NV] = std::array::from_fn(|k| _mm512_loadu_ps(src.add(16 * k)));
            let w = wb.add(co * CO);
            for (j, a) in acc.iter_mut().enumerate() {
                let wv = _mm512_set1_ps(*w.add(j));
                for k in 0..NV {
                    a[k] = _mm512_fmadd_ps(wv, v[k], a[k]);
                }
            }
        }
    }
    for (a, &sh) in acc.iter().zip(shifts) {
        for (k, v) in a.iter().enumerate() {
            // SAFETY: inside `q` per the contract.
            unsafe {
                let p = q.add(sh + o0 + 16 * k);
                _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), *v));
            }
        }
    }
}

/// `dx = convᵀ(dy, w)`, the data gradient of a geometry that [`applies`]; `dx` overwritten.
pub fn data_grad(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let taps = g.in_ch * g.kernel[1] * g.kernel[2];
    let (isp, osp) = (g.input[1] * g.input[2], g.output[1] * g.output[2]);
    assert!(dx.len() >= g.batch * g.in_ch * isp && w.len() >= g.out_ch * taps);
    assert!(dy.len() >= g.batch * g.out_ch * osp);
    assert!(applies(g));
    let f = Flat::of(g);
    let shifts = f.shifts(g);
    assert!(shifts.iter().all(|&s| s + f.nf <= f.len));
    // wtt[tap block][co][8]
    let tblocks = taps.div_ceil(CO);
    let mut wtt = vec![0.0f32; tblocks * g.out_ch * CO];
    for o in 0..g.out_ch {
        for t in 0..taps {
            wtt[((t / CO) * g.out_ch + o) * CO + t % CO] = w[o * taps + t];
        }
    }
    let xp = Ptr(dx.as_mut_ptr());
    split(g.batch, |images| {
        let mut q = vec![0.0f32; f.len];
        let mut d = vec![0.0f32; g.out_ch * f.nf];
        for n in images {
            pack_flat(g, &f, &dy[n * g.out_ch * osp..][..g.out_ch * osp], &mut d);
            q.fill(0.0);
            for o0 in (0..f.nf).step_by(NT) {
                for tb in 0..tblocks {
                    let sh = &shifts[tb * CO..taps.min((tb + 1) * CO)];
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: `applies` checked AVX-512F; sizes as documented (asserted).
                    unsafe {
                        grad_tile(
                            d.as_ptr(),
                            f.nf,
                            g.out_ch,
                            wtt[tb * g.out_ch * CO..].as_ptr(),
                            o0,
                            q.as_mut_ptr(),
                            sh,
                        );
                    }
                }
            }
            // SAFETY: image n of `dx` is written by this range only; in bounds (asserted).
            let dxn = unsafe {
                std::slice::from_raw_parts_mut(xp.get().add(n * g.in_ch * isp), g.in_ch * isp)
            };
            unfill(g, &f, &q, dxn);
        }
    });
}

/// Adds the weight gradient of `count` images to `dw` (`out_ch × taps`) from their phase-plane
/// inputs `q` (`qlen` apart) and flat output gradients `d` (`out_ch × nf` each, zero past each
/// row); the 16-lane sums run over all the images before they are reduced.
///
/// # Safety
/// The CPU has AVX-512F; every `shift + nf` is within `qlen`; `q` and `d` hold `count` images.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn weight_grad_images(
    out_ch: usize,
    nf: usize,
    shifts: &[usize],
    q: &[f32],
    qlen: usize,
    d: &[f32],
    count: usize,
    dw: &mut [f32],
) {
    use std::arch::x86_64::*;
    let taps = shifts.len();
    let dl = out_ch * nf;
    assert!(d.len() >= count * dl && q.len() >= count * qlen && dw.len() >= out_ch * taps);
    for co0 in (0..out_ch).step_by(CO) {
        for t0 in (0..taps).step_by(WT) {
            let mut acc = [[_mm512_setzero_ps(); WT]; CO];
            for m in 0..count {
                let rows: [*const f32; CO] =
                    std::array::from_fn(|j| d[m * dl + (co0 + j).min(out_ch - 1) * nf..].as_ptr());
                let cols: [*const f32; WT] = std::array::from_fn(|k| {
                    q[m * qlen + shifts[(t0 + k).min(taps - 1)]..].as_ptr()
                });
                for o in (0..nf).step_by(16) {
                    // SAFETY: `o + 16 <= nf`: inside each row of `d` and each tap's run in `q`
                    // (contract).
                    unsafe {
                        let v: [__m512; WT] =
                            std::array::from_fn(|k| _mm512_loadu_ps(cols[k].add(o)));
                        for (j, a) in acc.iter_mut().enumerate() {
                            let dv = _mm512_loadu_ps(rows[j].add(o));
                            for k in 0..WT {
                                a[k] = _mm512_fmadd_ps(dv, v[k], a[k]);
                            }
                        }
                    }
                }
            }
            for j in 0..CO.min(out_ch - co0) {
                for k in 0..WT.min(taps - t0) {
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
    let f = Flat::of(g);
    let shifts = f.shifts(g);
    assert!(shifts.iter().all(|&s| s + f.nf <= f.len));
    // images whose 16-lane sums run together: about 512 KiB of inputs and output gradients
    let dl = g.out_ch * f.nf;
    let chunk = ((512 << 10) / 4 / (f.len + dl)).max(1);
    let partials = std::sync::Mutex::new(Vec::<(usize, Vec<f32>)>::new());
    split(g.batch, |images| {
        let first = images.start;
        let per = chunk.min(images.len()).max(1);
        let mut q = vec![0.0f32; per * f.len];
        let mut d = vec![0.0f32; per * dl];
        let mut acc = vec![0.0f32; wl];
        for start in images.clone().step_by(per) {
            let count = per.min(images.end - start);
            for m in 0..count {
                let n = start + m;
                fill(
                    g,
                    &f,
                    &x[n * g.in_ch * isp..][..g.in_ch * isp],
                    &mut q[m * f.len..][..f.len],
                );
                pack_flat(
                    g,
                    &f,
                    &dy[n * g.out_ch * osp..][..g.out_ch * osp],
                    &mut d[m * dl..][..dl],
                );
            }
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `applies` checked AVX-512F; shifts + nf within `f.len` (asserted).
            unsafe {
                weight_grad_images(g.out_ch, f.nf, &shifts, &q, f.len, &d, count, &mut acc);
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
