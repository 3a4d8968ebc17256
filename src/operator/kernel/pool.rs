//! Pooling kernels (`Pooling`, `Pooling_v1`) and their gradients, over 1-D, 2-D and 3-D windows
//! (1-D and 2-D ones have leading sizes of 1) in channels-first or channels-last layout.
//!
//! Windows follow MXNet's CPU kernels: a window starts at `o * stride - pad` and ends at
//! `min(start + kernel, size + pad)`; its elements are those inside the array. Average pooling
//! divides by the window's size including padding (`count_include_pad`) or by the elements
//! inside; max pooling's gradient goes to the first maximum of the window in row-major order.
//! Each (image, channel) plane is independent, and the planes are split over the pool.

use super::conv::split;
use super::element::Element;
use super::map::Ptr;

/// What a window reduces to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolKind {
    Max,
    Avg,
    Sum,
    /// `(Σ xᵖ)^(1/p)` for p = 1, 2 or 3.
    Lp(u32),
}

/// One pooling's sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeom {
    pub batch: usize,
    pub channels: usize,
    pub input: [usize; 3],
    pub output: [usize; 3],
    pub kernel: [usize; 3],
    pub stride: [usize; 3],
    pub pad: [usize; 3],
    /// Channels are the last axis (NWC, NHWC, NDHWC).
    pub channels_last: bool,
    pub kind: PoolKind,
    pub count_include_pad: bool,
    /// `Pooling_v1`'s semantics (mshadow's pooling of the zero-padded array): averages divide by
    /// the kernel's size, a window's maximum includes the padding's zeros, and the gradient of
    /// max pooling goes to every element equal to the maximum.
    pub v1: bool,
}

impl PoolGeom {
    fn in_sp(&self) -> usize {
        self.input.iter().product()
    }
    fn out_sp(&self) -> usize {
        self.output.iter().product()
    }
    /// (first element, element stride) of plane `p` in an array of `sp` positions per plane.
    fn plane(&self, p: usize, sp: usize) -> (usize, usize) {
        let (n, c) = (p / self.channels, p % self.channels);
        if self.channels_last {
            (n * sp * self.channels + c, self.channels)
        } else {
            (p * sp, 1)
        }
    }
    /// Each output position's window on axis `a`: (start, end) inside the array and the
    /// window's length including padding (MXNet's: it starts at `o * stride - pad` and ends at
    /// `min(start + kernel, size + pad)`).
    fn axis_windows(&self, a: usize) -> Vec<(usize, usize, usize)> {
        (0..self.output[a])
            .map(|o| {
                let start = (o * self.stride[a]) as isize - self.pad[a] as isize;
                let end =
                    (start + self.kernel[a] as isize).min((self.input[a] + self.pad[a]) as isize);
                let padded = (end - start).max(0) as usize;
                let s = start.max(0) as usize;
                let e = (end.max(0) as usize).min(self.input[a]).max(s);
                (s, e, padded)
            })
            .collect()
    }
}

/// The per-axis windows of a pooling, and the walk over a plane's windows.
struct Windows {
    axes: [Vec<(usize, usize, usize)>; 3],
}

impl Windows {
    fn new(g: &PoolGeom) -> Windows {
        Windows {
            axes: [g.axis_windows(0), g.axis_windows(1), g.axis_windows(2)],
        }
    }
    /// Calls `f(output index, [window], divisor, covers padding)` for every output position of
    /// a plane, in order.
    #[inline]
    fn each(&self, g: &PoolGeom, mut f: impl FnMut(usize, [(usize, usize); 3], usize, bool)) {
        let mut i = 0;
        for &(z0, z1, pz) in &self.axes[0] {
            for &(y0, y1, py) in &self.axes[1] {
                for &(x0, x1, px) in &self.axes[2] {
                    let padded = pz * py * px;
                    let inside = (z1 - z0) * (y1 - y0) * (x1 - x0);
                    let div = match g.kind {
                        PoolKind::Avg if g.v1 => g.kernel.iter().product(),
                        PoolKind::Avg if g.count_include_pad => padded,
                        PoolKind::Avg => inside,
                        _ => 1,
                    };
                    f(i, [(z0, z1), (y0, y1), (x0, x1)], div, padded > inside);
                    i += 1;
                }
            }
        }
    }
}

/// Calls `f(spatial index)` over a window in row-major order.
#[inline(always)]
fn each_in(g: &PoolGeom, w: [(usize, usize); 3], mut f: impl FnMut(usize)) {
    each_row(g, w, |a, b| (a..b).for_each(&mut f));
}

/// Calls `f(start, end)` for each row of a window (its elements `start..end` of the plane).
#[inline(always)]
fn each_row(g: &PoolGeom, w: [(usize, usize); 3], mut f: impl FnMut(usize, usize)) {
    let [_, ih, iw] = g.input;
    for z in w[0].0..w[0].1 {
        for y in w[1].0..w[1].1 {
            let row = (z * ih + y) * iw;
            f(row + w[2].0, row + w[2].1);
        }
    }
}

fn pow_p(v: f64, p: u32) -> f64 {
    match p {
        1 => v,
        2 => v * v,
        _ => v * v * v,
    }
}

fn root_p(v: f64, p: u32) -> f64 {
    match p {
        1 => v,
        2 => v.sqrt(),
        _ => v.cbrt(),
    }
}

/// The smallest finite value of `T` (max pooling's start, as MXNet's).
fn lowest<T: Element>() -> f64 {
    match T::DTYPE {
        crate::dtype::DType::F64 => f64::MIN,
        crate::dtype::DType::F16 => -65504.0,
        _ => f32::MIN as f64,
    }
}

/// Copies plane `p` of `src` (`sp` positions per plane) into `buf` as f64.
fn load<T: Element>(g: &PoolGeom, src: &[T], p: usize, sp: usize, buf: &mut [f64]) {
    let (base, step) = g.plane(p, sp);
    if step == 1 {
        for (b, v) in buf.iter_mut().zip(&src[base..base + sp]) {
            *b = v.to_f64();
        }
    } else {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = src[base + i * step].to_f64();
        }
    }
}

/// Writes `buf` into plane `p` of `dst` through `ptr`.
///
/// # Safety
/// `ptr` must address an array of at least `planes × sp` elements of `T` of which the caller
/// writes plane `p` alone.
unsafe fn store<T: Element>(g: &PoolGeom, ptr: Ptr<T>, p: usize, sp: usize, buf: &[f64]) {
    let (base, step) = g.plane(p, sp);
    for (i, v) in buf.iter().enumerate() {
        // SAFETY: in bounds and this plane's own (the caller's contract).
        unsafe { ptr.get().add(base + i * step).write(T::from_f64(*v)) };
    }
}

/// Max, average and sum pooling are separable: each input row is reduced over every x window
/// first (`r`: rows × output columns), then each output row reduces the rows of its (z, y)
/// window elementwise across the output columns, a loop the compiler vectorises.
fn row_pass(
    g: &PoolGeom,
    win: &Windows,
    xin: &[f64],
    max: bool,
    low: f64,
    r: &mut [f64],
    mut at: Option<&mut [usize]>,
) {
    let (iw, ow) = (g.input[2], g.output[2]);
    for row in 0..g.input[0] * g.input[1] {
        let xr = &xin[row * iw..][..iw];
        for (ox, &(x0, x1, _)) in win.axes[2].iter().enumerate() {
            let k = row * ow + ox;
            if max {
                // the maximum (from `low`, as the forward) and the first maximum's position
                let (mut m, mut i, mut first) = (low, x0, f64::NAN);
                for (j, &v) in xr[x0..x1].iter().enumerate() {
                    if j == 0 || v > first {
                        first = v;
                        i = x0 + j;
                    }
                    if v > m {
                        m = v;
                    }
                }
                r[k] = m;
                if let Some(at) = at.as_deref_mut() {
                    at[k] = i;
                }
            } else {
                r[k] = xr[x0..x1].iter().sum();
            }
        }
    }
}

/// The divisor of average pooling for output columns of window rows (z, y).
#[inline]
fn divisor(g: &PoolGeom, win: &Windows, z: usize, y: usize, ox: usize) -> f64 {
    let ((z0, z1, pz), (y0, y1, py), (x0, x1, px)) =
        (win.axes[0][z], win.axes[1][y], win.axes[2][ox]);
    match g.kind {
        PoolKind::Avg if g.v1 => g.kernel.iter().product::<usize>() as f64,
        PoolKind::Avg if g.count_include_pad => (pz * py * px) as f64,
        PoolKind::Avg => ((z1 - z0) * (y1 - y0) * (x1 - x0)) as f64,
        _ => 1.0,
    }
}

fn forward_separable(
    g: &PoolGeom,
    win: &Windows,
    xin: &[f64],
    r: &mut [f64],
    out: &mut [f64],
    low: f64,
) {
    let max = g.kind == PoolKind::Max;
    row_pass(g, win, xin, max, low, r, None);
    let (ih, oh, ow) = (g.input[1], g.output[1], g.output[2]);
    for (z, &(z0, z1, _)) in win.axes[0].iter().enumerate() {
        for (y, &(y0, y1, _)) in win.axes[1].iter().enumerate() {
            let o = &mut out[(z * oh + y) * ow..][..ow];
            o.fill(if max { low } else { 0.0 });
            for zz in z0..z1 {
                for yy in y0..y1 {
                    let rr = &r[(zz * ih + yy) * ow..][..ow];
                    if max {
                        for (a, &b) in o.iter_mut().zip(rr) {
                            if b > *a {
                                *a = b;
                            }
                        }
                    } else {
                        for (a, &b) in o.iter_mut().zip(rr) {
                            *a += b;
                        }
                    }
                }
            }
            if g.kind == PoolKind::Avg {
                for (ox, a) in o.iter_mut().enumerate() {
                    let d = divisor(g, win, z, y, ox);
                    if d > 0.0 {
                        *a /= d;
                    }
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn backward_separable(
    g: &PoolGeom,
    win: &Windows,
    d: &[f64],
    xin: &[f64],
    r: &mut [f64],
    at: &mut [usize],
    acc: &mut [f64],
    low: f64,
) {
    let (ih, iw, oh, ow) = (g.input[1], g.input[2], g.output[1], g.output[2]);
    if g.kind == PoolKind::Max {
        row_pass(g, win, xin, true, low, r, Some(at));
        for (z, &(z0, z1, _)) in win.axes[0].iter().enumerate() {
            for (y, &(y0, y1, _)) in win.axes[1].iter().enumerate() {
                for (ox, &(x0, x1, _)) in win.axes[2].iter().enumerate() {
                    if x1 == x0 {
                        continue;
                    }
                    let mut best: Option<(usize, f64)> = None;
                    for zz in z0..z1 {
                        for yy in y0..y1 {
                            let k = (zz * ih + yy) * ow + ox;
                            if best.is_none_or(|(_, m)| r[k] > m) {
                                best = Some(((zz * ih + yy) * iw + at[k], r[k]));
                            }
                        }
                    }
                    if let Some((i, _)) = best {
                        acc[i] += d[(z * oh + y) * ow + ox];
                    }
                }
            }
        }
        return;
    }
    // average and sum: the transposes of the two passes
    let t = r;
    t.fill(0.0);
    let mut dd = vec![0.0; ow];
    for (z, &(z0, z1, _)) in win.axes[0].iter().enumerate() {
        for (y, &(y0, y1, _)) in win.axes[1].iter().enumerate() {
            for (ox, v) in dd.iter_mut().enumerate() {
                let div = divisor(g, win, z, y, ox);
                let dv = d[(z * oh + y) * ow + ox];
                *v = if div > 0.0 { dv / div } else { dv };
            }
            for zz in z0..z1 {
                for yy in y0..y1 {
                    for (a, &b) in t[(zz * ih + yy) * ow..][..ow].iter_mut().zip(&dd) {
                        *a += b;
                    }
                }
            }
        }
    }
    for row in 0..g.input[0] * ih {
        let ar = &mut acc[row * iw..][..iw];
        for (ox, &(x0, x1, _)) in win.axes[2].iter().enumerate() {
            let v = t[row * ow + ox];
            ar[x0..x1].iter_mut().for_each(|a| *a += v);
        }
    }
}

/// Whether the separable passes compute this pooling.
fn separable(g: &PoolGeom) -> bool {
    !g.v1 && matches!(g.kind, PoolKind::Max | PoolKind::Avg | PoolKind::Sum)
}

/// `y = pool(x)`.
pub fn forward<T: Element>(g: &PoolGeom, x: &[T], y: &mut [T]) {
    let planes = g.batch * g.channels;
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    assert!(x.len() >= planes * in_sp && y.len() >= planes * out_sp);
    let yp = Ptr(y.as_mut_ptr());
    let windows = Windows::new(g);
    let low = lowest::<T>();
    split(planes, |range| {
        let (mut xin, mut out) = (vec![0.0f64; in_sp], vec![0.0f64; out_sp]);
        let rows = g.input[0] * g.input[1] * g.output[2];
        let mut r = vec![0.0f64; if separable(g) { rows } else { 0 }];
        for p in range {
            load(g, x, p, in_sp, &mut xin);
            if separable(g) {
                forward_separable(g, &windows, &xin, &mut r, &mut out, low);
                // SAFETY: as below.
                unsafe { store(g, yp, p, out_sp, &out) };
                continue;
            }
            windows.each(g, |o, w, div, padded| {
                out[o] = match g.kind {
                    PoolKind::Max => {
                        let mut m = if g.v1 && padded { 0.0 } else { low };
                        each_row(g, w, |a, b| {
                            for &v in &xin[a..b] {
                                if v > m {
                                    m = v;
                                }
                            }
                        });
                        m
                    }
                    PoolKind::Avg | PoolKind::Sum => {
                        let mut s = 0.0;
                        each_row(g, w, |a, b| s += xin[a..b].iter().sum::<f64>());
                        if div > 0 { s / div as f64 } else { s }
                    }
                    PoolKind::Lp(q) => {
                        let mut s = 0.0;
                        each_in(g, w, |i| s += pow_p(xin[i], q));
                        root_p(s, q)
                    }
                };
            });
            // SAFETY: `y` holds `planes × out_sp` elements (asserted) and plane p is written by
            // this range only.
            unsafe { store(g, yp, p, out_sp, &out) };
        }
    });
}

/// `dx` from `dy`, the forward's input `x` and output `y` (`dx` overwritten).
pub fn backward<T: Element>(g: &PoolGeom, dy: &[T], x: &[T], y: &[T], dx: &mut [T]) {
    let planes = g.batch * g.channels;
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    assert!(x.len() >= planes * in_sp && dx.len() >= planes * in_sp);
    assert!(y.len() >= planes * out_sp && dy.len() >= planes * out_sp);
    let dxp = Ptr(dx.as_mut_ptr());
    let windows = Windows::new(g);
    let needs_y = matches!(g.kind, PoolKind::Lp(_)) || (g.v1 && g.kind == PoolKind::Max);
    let needs_x = !matches!(g.kind, PoolKind::Avg | PoolKind::Sum);
    split(planes, |range| {
        let mut acc = vec![0.0f64; in_sp];
        let mut xin = vec![0.0f64; if needs_x { in_sp } else { 0 }];
        let (mut d, mut yo) = (
            vec![0.0f64; out_sp],
            vec![0.0f64; if needs_y { out_sp } else { 0 }],
        );
        let rows = if separable(g) {
            g.input[0] * g.input[1] * g.output[2]
        } else {
            0
        };
        let (mut r, mut at) = (vec![0.0f64; rows], vec![0usize; rows]);
        let low = lowest::<T>();
        for p in range {
            load(g, dy, p, out_sp, &mut d);
            if needs_x {
                load(g, x, p, in_sp, &mut xin);
            }
            if needs_y {
                load(g, y, p, out_sp, &mut yo);
            }
            acc.fill(0.0);
            if separable(g) {
                backward_separable(g, &windows, &d, &xin, &mut r, &mut at, &mut acc, low);
                // SAFETY: `dx` holds `planes × in_sp` elements (asserted) and plane p is written
                // by this range only.
                unsafe { store(g, dxp, p, in_sp, &acc) };
                continue;
            }
            windows.each(g, |o, w, div, _| {
                let d = d[o];
                match g.kind {
                    PoolKind::Max if g.v1 => {
                        let m = yo[o];
                        each_in(g, w, |i| {
                            if xin[i] == m {
                                acc[i] += d;
                            }
                        });
                    }
                    PoolKind::Max => {
                        // the first maximum of the window
                        let mut best: Option<(usize, f64)> = None;
                        each_in(g, w, |i| {
                            if best.is_none_or(|(_, m)| xin[i] > m) {
                                best = Some((i, xin[i]));
                            }
                        });
                        if let Some((i, _)) = best {
                            acc[i] += d;
                        }
                    }
                    PoolKind::Avg | PoolKind::Sum => {
                        let d = if div > 0 { d / div as f64 } else { d };
                        each_row(g, w, |a, b| acc[a..b].iter_mut().for_each(|v| *v += d));
                    }
                    PoolKind::Lp(q) => {
                        let out = yo[o];
                        each_in(g, w, |i| {
                            acc[i] += match q {
                                1 => d,
                                _ if out == 0.0 => 0.0,
                                2 => d * xin[i] / out,
                                _ => d * (xin[i] / out) * (xin[i] / out),
                            }
                        });
                    }
                }
            });
            // SAFETY: `dx` holds `planes × in_sp` elements (asserted) and plane p is written by
            // this range only.
            unsafe { store(g, dxp, p, in_sp, &acc) };
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_mxnet_conventions() {
        // 1 × 1 × 5 × 5, kernel 2, stride 2, pad 1, 'full': 4 × 4 outputs, the last row and
        // column outside the array (0 for an average, as MXNet gives)
        let x: Vec<f32> = (1..=25).map(|v| v as f32).collect();
        let mut g = PoolGeom {
            batch: 1,
            channels: 1,
            input: [1, 5, 5],
            output: [1, 4, 4],
            kernel: [1, 2, 2],
            stride: [1, 2, 2],
            pad: [0, 1, 1],
            channels_last: false,
            kind: PoolKind::Avg,
            count_include_pad: true,
            v1: false,
        };
        let mut y = vec![0.0f32; 16];
        forward(&g, &x, &mut y);
        assert_eq!(&y[..4], &[0.25, 1.25, 2.25, 0.0]);
        g.count_include_pad = false;
        forward(&g, &x, &mut y);
        assert_eq!(&y[..4], &[1.0, 2.5, 4.5, 0.0]);
        // max: the gradient goes to the first maximum of each window
        let g = PoolGeom {
            kind: PoolKind::Max,
            input: [1, 1, 4],
            output: [1, 1, 3],
            kernel: [1, 1, 2],
            stride: [1; 3],
            pad: [0; 3],
            ..g
        };
        let ones = [1.0f32; 4];
        let mut y = [0.0f32; 3];
        forward(&g, &ones, &mut y);
        let mut dx = [9.0f32; 4];
        backward(&g, &[1.0; 3], &ones, &y, &mut dx);
        assert_eq!(dx, [1.0, 1.0, 1.0, 0.0]);
    }
}
