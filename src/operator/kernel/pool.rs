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
    /// Output position `o`'s window on each axis: (start, end) inside the array, the divisor of
    /// average pooling and whether the window covers padding.
    fn window(&self, o: [usize; 3]) -> ([(usize, usize); 3], usize, bool) {
        let mut r = [(0, 0); 3];
        let (mut padded, mut inside) = (1usize, 1usize);
        for a in 0..3 {
            let start = (o[a] * self.stride[a]) as isize - self.pad[a] as isize;
            let end = (start + self.kernel[a] as isize).min((self.input[a] + self.pad[a]) as isize);
            padded *= (end - start).max(0) as usize;
            let (s, e) = (start.max(0) as usize, (end.max(0) as usize).min(self.input[a]));
            let e = e.max(s);
            inside *= e - s;
            r[a] = (s, e);
        }
        let div = match self.kind {
            PoolKind::Avg if self.v1 => self.kernel.iter().product(),
            PoolKind::Avg if self.count_include_pad => padded,
            PoolKind::Avg => inside,
            _ => 1,
        };
        (r, div, padded > inside)
    }
    /// Calls `f(output index, [window], divisor, covers padding)` for every output position of a
    /// plane.
    fn each_window(&self, mut f: impl FnMut(usize, [(usize, usize); 3], usize, bool)) {
        let [od, oh, ow] = self.output;
        let mut i = 0;
        for z in 0..od {
            for y in 0..oh {
                for x in 0..ow {
                    let (w, div, padded) = self.window([z, y, x]);
                    f(i, w, div, padded);
                    i += 1;
                }
            }
        }
    }
}

/// Calls `f(spatial index)` over a window in row-major order.
#[inline]
fn each_in(g: &PoolGeom, w: [(usize, usize); 3], mut f: impl FnMut(usize)) {
    let [_, ih, iw] = g.input;
    for z in w[0].0..w[0].1 {
        for y in w[1].0..w[1].1 {
            let row = (z * ih + y) * iw;
            for x in w[2].0..w[2].1 {
                f(row + x);
            }
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

/// `y = pool(x)`.
pub fn forward<T: Element>(g: &PoolGeom, x: &[T], y: &mut [T]) {
    let planes = g.batch * g.channels;
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    assert!(x.len() >= planes * in_sp && y.len() >= planes * out_sp);
    let yp = Ptr(y.as_mut_ptr());
    split(planes, |range| {
        for p in range {
            let (xb, xs) = g.plane(p, in_sp);
            let (yb, ys) = g.plane(p, out_sp);
            let at = |i: usize| x[xb + i * xs].to_f64();
            g.each_window(|o, w, div, padded| {
                let v = match g.kind {
                    PoolKind::Max => {
                        let mut m = if g.v1 && padded { 0.0 } else { lowest::<T>() };
                        each_in(g, w, |i| {
                            let v = at(i);
                            if v > m {
                                m = v;
                            }
                        });
                        m
                    }
                    PoolKind::Avg | PoolKind::Sum => {
                        let mut s = 0.0;
                        each_in(g, w, |i| s += at(i));
                        if div > 0 { s / div as f64 } else { s }
                    }
                    PoolKind::Lp(q) => {
                        let mut s = 0.0;
                        each_in(g, w, |i| s += pow_p(at(i), q));
                        root_p(s, q)
                    }
                };
                // SAFETY: plane p's outputs are written by this range only; the index lies in
                // `y` (asserted above).
                unsafe { yp.get().add(yb + o * ys).write(T::from_f64(v)) };
            });
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
    split(planes, |range| {
        let mut acc = vec![0.0f64; in_sp];
        for p in range {
            let (xb, xs) = g.plane(p, in_sp);
            let (yb, ys) = g.plane(p, out_sp);
            let at = |i: usize| x[xb + i * xs].to_f64();
            acc.fill(0.0);
            g.each_window(|o, w, div, _| {
                let d = dy[yb + o * ys].to_f64();
                match g.kind {
                    PoolKind::Max if g.v1 => {
                        let m = y[yb + o * ys].to_f64();
                        each_in(g, w, |i| {
                            if at(i) == m {
                                acc[i] += d;
                            }
                        });
                    }
                    PoolKind::Max => {
                        let mut best: Option<(usize, f64)> = None;
                        each_in(g, w, |i| {
                            let v = at(i);
                            if best.is_none_or(|(_, m)| v > m) {
                                best = Some((i, v));
                            }
                        });
                        if let Some((i, _)) = best {
                            acc[i] += d;
                        }
                    }
                    PoolKind::Avg | PoolKind::Sum => {
                        let d = if div > 0 { d / div as f64 } else { d };
                        each_in(g, w, |i| acc[i] += d);
                    }
                    PoolKind::Lp(q) => {
                        let out = y[yb + o * ys].to_f64();
                        each_in(g, w, |i| {
                            acc[i] += match q {
                                1 => d,
                                _ if out == 0.0 => 0.0,
                                2 => d * at(i) / out,
                                _ => d * (at(i) / out) * (at(i) / out),
                            }
                        });
                    }
                }
            });
            for (i, v) in acc.iter().enumerate() {
                // SAFETY: plane p's elements of `dx` are written by this range only; in bounds
                // (asserted above).
                unsafe { dxp.get().add(xb + i * xs).write(T::from_f64(*v)) };
            }
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
            batch: 1, channels: 1, input: [1, 5, 5], output: [1, 4, 4], kernel: [1, 2, 2],
            stride: [1, 2, 2], pad: [0, 1, 1], channels_last: false, kind: PoolKind::Avg,
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
        let g = PoolGeom { kind: PoolKind::Max, input: [1, 1, 4], output: [1, 1, 3], kernel: [1, 1, 2],
            stride: [1; 3], pad: [0; 3], ..g };
        let ones = [1.0f32; 4];
        let mut y = [0.0f32; 3];
        forward(&g, &ones, &mut y);
        let mut dx = [9.0f32; 4];
        backward(&g, &[1.0; 3], &ones, &y, &mut dx);
        assert_eq!(dx, [1.0, 1.0, 1.0, 0.0]);
    }
}
