//! Direct float32 kernels for depthwise convolutions (one input and one output channel per
//! group) at x stride 1: the forward, the data gradient and the weight gradient, each a loop over
//! a plane's rows that adds every kernel tap's contiguous run with a vector `axpy` (or, for the
//! weight gradient, a vector dot product kept in 16 lanes per tap). A 1-D or 2-D depthwise layer
//! with any kernel size, padding, dilation and y stride takes them; the rest keep `conv.rs`'s
//! generic loops.
//!
//! Each body is compiled for AVX-512 and for AVX2 + FMA and the best one the CPU has is picked at
//! run time. Planes (and, for the weight gradient, channels) are split over the intra-op pool;
//! the weight gradient sums its images in order, so its result does not depend on scheduling.

use super::conv::{ConvGeom, split};
use super::map::Ptr;

/// Lanes of the weight gradient's partial sums.
const L: usize = 16;

/// One channel's plane geometry.
#[derive(Clone, Copy)]
struct Plane {
    ih: usize,
    iw: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sy: usize,
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
    /// The input row of output row `oy` and kernel row `a`, if it exists.
    #[inline(always)]
    fn in_row(&self, oy: usize, a: usize) -> Option<usize> {
        let iy = (oy * self.sy + a * self.dy) as isize - self.py as isize;
        (iy >= 0 && (iy as usize) < self.ih).then_some(iy as usize)
    }
    /// For kernel column `b`: the outputs `lo..hi` whose input `x + off` exists, and the input
    /// index of output `lo`.
    #[inline(always)]
    fn run(&self, b: usize) -> (usize, usize, usize) {
        let off = (b * self.dx) as isize - self.px as isize;
        let lo = if off >= 0 { 0 } else { (-off) as usize };
        let hi = (self.iw as isize - off).clamp(0, self.ow as isize) as usize;
        let lo = lo.min(self.ow);
        let hi = hi.max(lo);
        (lo, hi, (lo as isize + off) as usize)
    }
}

/// Whether `g` takes these kernels: depthwise, 1-D or 2-D, x stride 1.
pub fn applies(g: &ConvGeom) -> bool {
    g.in_ch == g.groups
        && g.out_ch == g.groups
        && g.input[0] == 1
        && g.output[0] == 1
        && g.kernel[0] == 1
        && g.pad[0] == 0
        && g.stride[2] == 1
}

/// `y[i] += w · x[i]` over the shorter of the two.
#[inline(always)]
fn axpy(y: &mut [f32], w: f32, x: &[f32]) {
    for (a, b) in y.iter_mut().zip(x) {
        *a += w * *b;
    }
}

/// `acc[i % L] += a[i] · b[i]`.
#[inline(always)]
fn dot_lanes(acc: &mut [f32; L], a: &[f32], b: &[f32]) {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut ca = a.chunks_exact(L);
    let mut cb = b.chunks_exact(L);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..L {
            acc[l] += x[l] * y[l];
        }
    }
    for (l, (x, y)) in ca.remainder().iter().zip(cb.remainder()).enumerate() {
        acc[l] += x * y;
    }
}

#[inline(always)]
fn forward_body(p: &Plane, x: &[f32], w: &[f32], y: &mut [f32]) {
    for oy in 0..p.oh {
        let yr = &mut y[oy * p.ow..][..p.ow];
        yr.fill(0.0);
        for a in 0..p.kh {
            let Some(iy) = p.in_row(oy, a) else { continue };
            let xr = &x[iy * p.iw..][..p.iw];
            for b in 0..p.kw {
                let (lo, hi, i) = p.run(b);
                if lo < hi {
                    axpy(&mut yr[lo..hi], w[a * p.kw + b], &xr[i..i + (hi - lo)]);
                }
            }
        }
    }
}

#[inline(always)]
fn data_grad_body(p: &Plane, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    dx.fill(0.0);
    for oy in 0..p.oh {
        let yr = &dy[oy * p.ow..][..p.ow];
        for a in 0..p.kh {
            let Some(iy) = p.in_row(oy, a) else { continue };
            let xr = &mut dx[iy * p.iw..][..p.iw];
            for b in 0..p.kw {
                let (lo, hi, i) = p.run(b);
                if lo < hi {
                    axpy(&mut xr[i..i + (hi - lo)], w[a * p.kw + b], &yr[lo..hi]);
                }
            }
        }
    }
}

/// Adds the taps' lane sums of one image's plane to `acc` (`taps × L`).
#[inline(always)]
fn weight_grad_body(p: &Plane, x: &[f32], dy: &[f32], acc: &mut [[f32; L]]) {
    for oy in 0..p.oh {
        let yr = &dy[oy * p.ow..][..p.ow];
        for a in 0..p.kh {
            let Some(iy) = p.in_row(oy, a) else { continue };
            let xr = &x[iy * p.iw..][..p.iw];
            for b in 0..p.kw {
                let (lo, hi, i) = p.run(b);
                if lo < hi {
                    dot_lanes(&mut acc[a * p.kw + b], &yr[lo..hi], &xr[i..i + (hi - lo)]);
                }
            }
        }
    }
}

multiversion!(forward_plane(p: &Plane, x: &[f32], w: &[f32], y: &mut [f32]) => forward_body);
multiversion!(data_grad_plane(p: &Plane, dy: &[f32], w: &[f32], dx: &mut [f32]) => data_grad_body);
multiversion!(weight_grad_plane(p: &Plane, x: &[f32], dy: &[f32], acc: &mut [[f32; L]]) => weight_grad_body);

/// `y = conv(x, w)` (see [`applies`]); `y` overwritten.
pub fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    let p = Plane::of(g);
    each_plane(g, &p, x, p.in_sp(), w, y, p.out_sp(), forward_plane);
}

/// `dx = convᵀ(dy, w)`, the data gradient (see [`applies`]); `dx` overwritten.
pub fn data_grad(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let p = Plane::of(g);
    each_plane(g, &p, dy, p.out_sp(), w, dx, p.in_sp(), data_grad_plane);
}

/// `plane(p, src plane, its channel's taps, dst plane)` for every (image, channel) plane of
/// `src` (planes of `src_sp` values) into `dst` (planes of `dst_sp`), split over the pool.
#[allow(clippy::too_many_arguments)]
fn each_plane(
    g: &ConvGeom,
    p: &Plane,
    src: &[f32],
    src_sp: usize,
    w: &[f32],
    dst: &mut [f32],
    dst_sp: usize,
    plane: fn(&Plane, &[f32], &[f32], &mut [f32]),
) {
    let (kk, c) = (p.taps(), g.in_ch);
    let planes = g.batch * c;
    assert!(src.len() >= planes * src_sp && dst.len() >= planes * dst_sp && w.len() >= c * kk);
    let dp = Ptr(dst.as_mut_ptr());
    split(planes, |qs| {
        for q in qs {
            // SAFETY: plane q of `dst` is written by this range only; in bounds (asserted).
            let ds = unsafe { std::slice::from_raw_parts_mut(dp.get().add(q * dst_sp), dst_sp) };
            let wc = &w[(q % c) * kk..][..kk];
            plane(p, &src[q * src_sp..][..src_sp], wc, ds);
        }
    });
}

/// `dw = Σ_images` the weight gradient from `x` and `dy` (see [`applies`]); `dw` overwritten.
pub fn weight_grad(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    let p = Plane::of(g);
    let (isp, osp, kk, c) = (p.in_sp(), p.out_sp(), p.taps(), g.in_ch);
    assert!(x.len() >= g.batch * c * isp && dy.len() >= g.batch * c * osp && dw.len() >= c * kk);
    let dwp = Ptr(dw.as_mut_ptr());
    split(c, |channels| {
        let mut acc = vec![[0.0f32; L]; kk];
        for ch in channels {
            acc.iter_mut().for_each(|a| *a = [0.0; L]);
            for n in 0..g.batch {
                let q = n * c + ch;
                weight_grad_plane(&p, &x[q * isp..][..isp], &dy[q * osp..][..osp], &mut acc);
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
