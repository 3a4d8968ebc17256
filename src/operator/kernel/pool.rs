//! Pooling kernels (`Pooling`, `Pooling_v1`) and their gradients, over 1-D, 2-D and 3-D windows
//! (1-D and 2-D ones have leading sizes of 1) in channels-first or channels-last layout.
//!
//! Windows follow MXNet's CPU kernels: a window starts at `o * stride - pad` and ends at
//! `min(start + kernel, size + pad)`; its elements are those inside the array. Average pooling
//! divides by the window's size including padding (`count_include_pad`) or by the elements
//! inside; max pooling's gradient goes to the first element of the window (row-major) equal to
//! the forward's output, as MXNet's CPU kernel routes it (the first maximum).
//!
//! Max, average and sum pooling compute in the array's own float type (f32, f64 for float64
//! arrays, f32 for half precision) directly on channels-first planes: each output row first
//! reduces the input rows of its window elementwise into one row (a contiguous, vectorised
//! pass), then reduces that row's x windows, with unrolled loops for the common 2- and 3-wide
//! windows. Their gradients zero the plane and route each output gradient (max) or spread it
//! back through the same two passes (average, sum). `Pooling_v1` and lp pooling go through
//! float64 plane copies window by window. Each (image, channel) plane is independent; planes
//! are split over the intra-op pool when the work is worth a hand-off. A plane's direct pass is
//! compiled for AVX-512, for AVX2 + FMA and for the baseline (`multiversion!`), global pooling
//! (one window over the whole plane) inside the same bodies.

use super::element::Element;
use super::map::Ptr;
use super::real::Real;
use crate::parallel;
use std::any::TypeId;

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

/// Whether the direct passes compute this pooling (else the float64 window walk).
fn direct_kind(g: &PoolGeom) -> bool {
    !g.v1 && matches!(g.kind, PoolKind::Max | PoolKind::Avg | PoolKind::Sum)
}

/// Splits `planes` planes of `work` elements each over the intra-op pool, one range per thread,
/// or runs them on the calling thread when the whole is too small to pay for a hand-off.
fn split_planes(planes: usize, work: usize, f: impl Fn(std::ops::Range<usize>) + Sync) {
    let threads = parallel::max_threads().min(planes).max(1);
    if threads == 1 || planes.saturating_mul(work) < parallel::MIN_PARALLEL_ELEMS {
        f(0..planes);
        return;
    }
    parallel::for_tasks(threads, threads, |t| {
        let (a, b) = (planes * t / threads, planes * (t + 1) / threads);
        f(a..b)
    });
}

/// `s` as a slice of `R` when `T` is `R`.
fn same_type<T: 'static, R: 'static>(s: &[T]) -> Option<&[R]> {
    if TypeId::of::<T>() == TypeId::of::<R>() {
        // SAFETY: `T` and `R` are the same type, so the slice's memory is a valid `[R]`.
        Some(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<R>(), s.len()) })
    } else {
        None
    }
}

/// Plane `p` of `src` (`sp` positions per plane): borrowed when it is contiguous and of type
/// `R`, else copied into `buf`.
fn plane_in<'a, T: Element, R: Real>(
    g: &PoolGeom,
    src: &'a [T],
    p: usize,
    sp: usize,
    buf: &'a mut Vec<R>,
) -> &'a [R] {
    let (base, step) = g.plane(p, sp);
    if step == 1
        && let Some(s) = same_type::<T, R>(src)
    {
        return &s[base..base + sp];
    }
    buf.clear();
    buf.extend((0..sp).map(|i| <R as Element>::from_f64(src[base + i * step].to_f64())));
    buf
}

/// Where plane `p` of an output goes: the array itself when contiguous and of type `R` (then
/// `Some`), else `buf`, stored by [`plane_out_store`] afterwards.
///
/// # Safety
/// `ptr` must address an array of at least `planes × sp` elements of `T` of which the caller
/// writes plane `p` alone while the returned slice lives.
unsafe fn plane_out<'a, T: Element, R: Real>(
    g: &PoolGeom,
    ptr: Ptr<T>,
    p: usize,
    sp: usize,
    buf: &'a mut Vec<R>,
) -> (&'a mut [R], bool) {
    let (base, step) = g.plane(p, sp);
    if step == 1 && TypeId::of::<T>() == TypeId::of::<R>() {
        // SAFETY: `T` is `R`; the plane is in bounds and this caller's alone (the contract).
        let s = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(base).cast::<R>(), sp) };
        return (s, true);
    }
    buf.clear();
    buf.resize(sp, R::ZERO);
    (buf, false)
}

/// Writes `buf` into plane `p` of the output through `ptr`.
///
/// # Safety
/// As [`plane_out`].
unsafe fn plane_out_store<T: Element, R: Real>(
    g: &PoolGeom,
    ptr: Ptr<T>,
    p: usize,
    sp: usize,
    buf: &[R],
) {
    let (base, step) = g.plane(p, sp);
    for (i, v) in buf.iter().enumerate() {
        // SAFETY: in bounds and this plane's own (the caller's contract).
        unsafe { ptr.get().add(base + i * step).write(T::from_f64(Element::to_f64(*v))) };
    }
}

#[inline(always)]
fn vmax<R: Real>(a: R, b: R) -> R {
    if b > a { b } else { a }
}

/// The output columns whose x window lies wholly inside the row: `lo..hi`.
#[inline(always)]
fn interior(g: &PoolGeom) -> (usize, usize) {
    let (k, s, p, iw, ow) = (g.kernel[2], g.stride[2], g.pad[2], g.input[2], g.output[2]);
    let lo = p.div_ceil(s).min(ow);
    let hi = if iw + p >= k { ((iw + p - k) / s + 1).min(ow) } else { 0 };
    (lo, hi.max(lo))
}

/// `o[ox] = reduce(col[ox·S - pad ..][..K])` over the interior columns `lo..hi`.
#[inline(always)]
fn reduce_fixed<R: Real, const K: usize, const S: usize>(
    col: &[R],
    o: &mut [R],
    lo: usize,
    hi: usize,
    pad: usize,
    max: bool,
) {
    for (ox, out) in o[lo..hi].iter_mut().enumerate() {
        let c: &[R; K] = col[(lo + ox) * S - pad..][..K].try_into().unwrap();
        let mut m = c[0];
        for &v in &c[1..] {
            m = if max { vmax(m, v) } else { m + v };
        }
        *out = m;
    }
}

/// Reduces `col` (one row, the window rows already reduced) over every x window into `o`.
#[inline(always)]
fn reduce_row<R: Real>(g: &PoolGeom, win: &Windows, col: &[R], o: &mut [R], max: bool, low: R) {
    let (lo, hi) = interior(g);
    let (k, s, pad) = (g.kernel[2], g.stride[2], g.pad[2]);
    match (k, s) {
        (2, 2) => reduce_fixed::<R, 2, 2>(col, o, lo, hi, pad, max),
        (3, 2) => reduce_fixed::<R, 3, 2>(col, o, lo, hi, pad, max),
        (3, 1) => reduce_fixed::<R, 3, 1>(col, o, lo, hi, pad, max),
        (2, 1) => reduce_fixed::<R, 2, 1>(col, o, lo, hi, pad, max),
        _ => {
            for (ox, out) in o[lo..hi].iter_mut().enumerate() {
                let c = &col[(lo + ox) * s - pad..][..k];
                *out = if max {
                    c.iter().fold(low, |m, &v| vmax(m, v))
                } else {
                    c.iter().fold(R::ZERO, |m, &v| m + v)
                };
            }
        }
    }
    for ox in (0..lo).chain(hi..o.len()) {
        let (x0, x1, _) = win.axes[2][ox];
        let c = &col[x0..x1];
        o[ox] = if max {
            c.iter().fold(low, |m, &v| vmax(m, v))
        } else {
            c.iter().fold(R::ZERO, |m, &v| m + v)
        };
    }
}

/// Average pooling's divisors of an output row's columns, given the (z, y) window's padded and
/// inside sizes.
#[inline(always)]
fn divide_row<R: Real>(g: &PoolGeom, win: &Windows, padded: usize, inside: usize, o: &mut [R]) {
    for (v, &(x0, x1, px)) in o.iter_mut().zip(&win.axes[2]) {
        let d = if g.count_include_pad {
            padded * px
        } else {
            inside * (x1 - x0)
        };
        if d > 0 {
            *v = *v / R::from_usize(d);
        }
    }
}

/// Whether a plane is 2x2 max pooling at stride 2 with every window inside it (LeNet's and
/// most CNNs' pooling): [`max_2x2`] and [`route_2x2`] then do a plane in one pass.
fn tiles_2x2(g: &PoolGeom) -> bool {
    g.kind == PoolKind::Max
        && !g.v1
        && g.kernel == [1, 2, 2]
        && g.stride[1..] == [2, 2]
        && g.pad == [0; 3]
        && g.input[0] == 1
        && g.output[0] == 1
        && 2 * g.output[1] <= g.input[1]
        && 2 * g.output[2] <= g.input[2]
}

/// Output columns per step of [`max_2x2`] and [`route_2x2`]: fixed-size blocks, so that the
/// compiler turns the even/odd column accesses into vector shuffles.
const T2: usize = 16;

/// [`plane_forward`] of a [`tiles_2x2`] plane, the same operations in the same order: the
/// window's two rows reduced column by column, then the two columns.
#[inline(always)]
fn max_2x2<R: Real>(g: &PoolGeom, x: &[R], out: &mut [R], low: R) {
    let (iw, oh, ow) = (g.input[2], g.output[1], g.output[2]);
    #[inline(always)]
    fn one<R: Real, const N: usize>(a: &[R; 2 * T2], b: &[R; 2 * T2], o: &mut [R; N], low: R) {
        for (i, o) in o.iter_mut().enumerate() {
            let c0 = vmax(vmax(low, a[2 * i]), b[2 * i]);
            let c1 = vmax(vmax(low, a[2 * i + 1]), b[2 * i + 1]);
            *o = vmax(c0, c1);
        }
    }
    for oy in 0..oh {
        let r0 = &x[2 * oy * iw..][..2 * ow];
        let r1 = &x[(2 * oy + 1) * iw..][..2 * ow];
        let o = &mut out[oy * ow..][..ow];
        for k in (0..ow).step_by(T2) {
            let n = (ow - k).min(T2);
            let (a, b) = (&r0[2 * k..][..2 * n], &r1[2 * k..][..2 * n]);
            if n == T2 {
                one::<R, T2>(a.try_into().unwrap(), b.try_into().unwrap(), (&mut o[k..][..T2]).try_into().unwrap(), low);
            } else {
                // a short row (LeNet's 12 columns) or the end of one: through block-sized copies
                let (mut ab, mut bb, mut ob) = ([low; 2 * T2], [low; 2 * T2], [low; T2]);
                ab[..2 * n].copy_from_slice(a);
                bb[..2 * n].copy_from_slice(b);
                one::<R, T2>(&ab, &bb, &mut ob, low);
                o[k..][..n].copy_from_slice(&ob[..n]);
            }
        }
    }
}

/// [`plane_backward`] of a [`tiles_2x2`] plane (`dx` overwritten): each output gradient goes to
/// the first of its window's four elements (row-major) equal to the output, the other three
/// and the rows and columns no window covers get zero; decided without branches.
#[inline(always)]
fn route_2x2<R: Real>(g: &PoolGeom, dy: &[R], x: &[R], y: &[R], dx: &mut [R]) {
    let (ih, iw, oh, ow) = (g.input[1], g.input[2], g.output[1], g.output[2]);
    #[inline(always)]
    fn one<R: Real>(a: &[R; 2 * T2], b: &[R; 2 * T2], ys: &[R; T2], ds: &[R; T2], t0: &mut [R; 2 * T2], t1: &mut [R; 2 * T2]) {
        for (i, (&m, &d)) in ys.iter().zip(ds).enumerate() {
            let d = R::ZERO + d; // as the general path: the plane's zero plus the gradient
            let e0 = a[2 * i] == m;
            let e1 = !e0 & (a[2 * i + 1] == m);
            let e2 = !(e0 | e1) & (b[2 * i] == m);
            let e3 = !(e0 | e1 | e2) & (b[2 * i + 1] == m);
            t0[2 * i] = if e0 { d } else { R::ZERO };
            t0[2 * i + 1] = if e1 { d } else { R::ZERO };
            t1[2 * i] = if e2 { d } else { R::ZERO };
            t1[2 * i + 1] = if e3 { d } else { R::ZERO };
        }
    }
    for oy in 0..oh {
        let (ys, ds) = (&y[oy * ow..][..ow], &dy[oy * ow..][..ow]);
        let r0 = &x[2 * oy * iw..][..2 * ow];
        let r1 = &x[(2 * oy + 1) * iw..][..2 * ow];
        let (d0, d1) = dx[2 * oy * iw..][..2 * iw].split_at_mut(iw);
        for k in (0..ow).step_by(T2) {
            let n = (ow - k).min(T2);
            let (a, b) = (&r0[2 * k..][..2 * n], &r1[2 * k..][..2 * n]);
            let (m, d) = (&ys[k..][..n], &ds[k..][..n]);
            if n == T2 {
                let t0: &mut [R; 2 * T2] = (&mut d0[2 * k..][..2 * T2]).try_into().unwrap();
                let t1: &mut [R; 2 * T2] = (&mut d1[2 * k..][..2 * T2]).try_into().unwrap();
                one(a.try_into().unwrap(), b.try_into().unwrap(), m.try_into().unwrap(), d.try_into().unwrap(), t0, t1);
            } else {
                // a short row (LeNet's 12 columns) or the end of one: through block-sized copies
                let z = R::ZERO;
                let (mut ab, mut bb, mut mb, mut db) = ([z; 2 * T2], [z; 2 * T2], [z; T2], [z; T2]);
                let (mut t0, mut t1) = ([z; 2 * T2], [z; 2 * T2]);
                ab[..2 * n].copy_from_slice(a);
                bb[..2 * n].copy_from_slice(b);
                mb[..n].copy_from_slice(m);
                db[..n].copy_from_slice(d);
                one(&ab, &bb, &mb, &db, &mut t0, &mut t1);
                d0[2 * k..][..2 * n].copy_from_slice(&t0[..2 * n]);
                d1[2 * k..][..2 * n].copy_from_slice(&t1[..2 * n]);
            }
        }
        d0[2 * ow..].fill(R::ZERO);
        d1[2 * ow..].fill(R::ZERO);
    }
    dx[2 * oh * iw..ih * iw].fill(R::ZERO);
}

/// One plane's max, average or sum pooling; `col` holds a row.
#[inline(always)]
fn plane_forward<R: Real>(g: &PoolGeom, win: &Windows, x: &[R], out: &mut [R], col: &mut [R], low: R) {
    let max = g.kind == PoolKind::Max;
    let (ih, iw, oh, ow) = (g.input[1], g.input[2], g.output[1], g.output[2]);
    for (z, &(z0, z1, pz)) in win.axes[0].iter().enumerate() {
        for (y, &(y0, y1, py)) in win.axes[1].iter().enumerate() {
            col.fill(if max { low } else { R::ZERO });
            for zz in z0..z1 {
                for yy in y0..y1 {
                    let xr = &x[(zz * ih + yy) * iw..][..iw];
                    if max {
                        col.iter_mut().zip(xr).for_each(|(c, &v)| *c = vmax(*c, v));
                    } else {
                        col.iter_mut().zip(xr).for_each(|(c, &v)| *c = *c + v);
                    }
                }
            }
            let o = &mut out[(z * oh + y) * ow..][..ow];
            reduce_row(g, win, col, o, max, low);
            if g.kind == PoolKind::Avg {
                divide_row(g, win, pz * py, (z1 - z0) * (y1 - y0), o);
            }
        }
    }
}

/// The first element equal to `m` among `K` columns from `c` of each row of `rows`, in order
/// (row-major in the window), found without branches.
#[inline(always)]
fn first_equal<R: Real, const K: usize>(x: &[R], rows: &[usize], c: usize, m: R) -> Option<usize> {
    let mut pos = usize::MAX;
    for &r in rows.iter().rev() {
        let w: &[R; K] = x[r + c..][..K].try_into().unwrap();
        for j in (0..K).rev() {
            if w[j] == m {
                pos = r + c + j;
            }
        }
    }
    (pos != usize::MAX).then_some(pos)
}

/// Max pooling's gradient over the interior columns `lo..hi` of one output row, for `K`-wide
/// windows at stride `S`: a pass per window element (rows from the last, columns from the
/// right) marks, for every column at once, the element equal to the output as that column's
/// winner (`code`: row × K + column, `u32::MAX` for none), so the first one in row-major order
/// is left; then each output gradient goes to its winner.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn route_fixed<R: Real, const K: usize, const S: usize>(
    x: &[R],
    rows: &[usize],
    y: &[R],
    dy: &[R],
    dx: &mut [R],
    lo: usize,
    hi: usize,
    pad: usize,
    code: &mut [u32],
) {
    if hi <= lo {
        return;
    }
    let n = hi - lo;
    let code = &mut code[..n];
    code.fill(u32::MAX);
    let ys = &y[lo..hi];
    for (ri, &r) in rows.iter().enumerate().rev() {
        // the interior windows lie inside the row: columns lo·S - pad .. (hi-1)·S - pad + K
        let row = &x[r + lo * S - pad..][..(n - 1) * S + K];
        for j in (0..K).rev() {
            let c = (ri * K + j) as u32;
            for (i, (w, &m)) in code.iter_mut().zip(ys).enumerate() {
                debug_assert!(i * S + j < row.len());
                // SAFETY: i < n and j < K, so i·S + j ≤ (n-1)·S + K - 1 < row.len().
                let v = unsafe { *row.get_unchecked(i * S + j) };
                *w = if v == m { c } else { *w };
            }
        }
    }
    for (i, (&w, &d)) in code.iter().zip(&dy[lo..hi]).enumerate() {
        if w != u32::MAX {
            let (ri, j) = (w as usize / K, w as usize % K);
            let p = rows[ri] + (lo + i) * S - pad + j;
            dx[p] = dx[p] + d;
        }
    }
}

/// Fewest interior output columns for which [`route_max`] routes a row in whole-row passes.
const ROUTE_ROW_MIN: usize = 32;

/// Max pooling's gradient for one output row: `dy[ox]` goes to the first element of its window
/// equal to `y[ox]` (the window's rows start at `rows`).
#[inline(always)]
fn route_max<R: Real>(
    g: &PoolGeom,
    win: &Windows,
    x: &[R],
    rows: &[usize],
    y: &[R],
    dy: &[R],
    dx: &mut [R],
    code: &mut [u32],
) {
    let (lo, hi) = interior(g);
    let (s, pad) = (g.stride[2], g.pad[2]);
    // any window, row by row with early exits
    let scan = |ox: usize| {
        let (x0, x1, _) = win.axes[2][ox];
        rows.iter().find_map(|&r| {
            let run = &x[r + x0..r + x1];
            run.iter().position(|&v| v == y[ox]).map(|j| r + x0 + j)
        })
    };
    #[inline(always)]
    fn put<R: Real>(dx: &mut [R], pos: Option<usize>, d: R) {
        if let Some(p) = pos {
            dx[p] = dx[p] + d;
        }
    }
    // whole-row passes pay on long rows only: on LeNet's 12-wide rows the per-window scans
    // below make the pooling step about a fifth faster
    let long = hi.saturating_sub(lo) >= ROUTE_ROW_MIN;
    match (g.kernel[2], s) {
        (2, 2) if long => route_fixed::<R, 2, 2>(x, rows, y, dy, dx, lo, hi, pad, code),
        (3, 2) if long => route_fixed::<R, 3, 2>(x, rows, y, dy, dx, lo, hi, pad, code),
        (3, 1) if long => route_fixed::<R, 3, 1>(x, rows, y, dy, dx, lo, hi, pad, code),
        (2, 1) if long => route_fixed::<R, 2, 1>(x, rows, y, dy, dx, lo, hi, pad, code),
        (2, _) => (lo..hi).for_each(|ox| put(dx, first_equal::<R, 2>(x, rows, ox * s - pad, y[ox]), dy[ox])),
        (3, _) => (lo..hi).for_each(|ox| put(dx, first_equal::<R, 3>(x, rows, ox * s - pad, y[ox]), dy[ox])),
        _ => (lo..hi).for_each(|ox| put(dx, scan(ox), dy[ox])),
    }
    for ox in (0..lo).chain(hi..y.len()) {
        put(dx, scan(ox), dy[ox]);
    }
}

/// `t[c] += dd[ox]` for every column `c` of output column `ox`'s x window (the inverse of
/// [`reduce_row`]'s window sums).
#[inline(always)]
fn spread_row<R: Real>(g: &PoolGeom, win: &Windows, dd: &[R], t: &mut [R]) {
    let (lo, hi) = interior(g);
    match (g.kernel[2], g.stride[2]) {
        (2, 2) => spread_fixed::<R, 2, 2>(dd, t, lo, hi, g.pad[2]),
        (3, 2) => spread_fixed::<R, 3, 2>(dd, t, lo, hi, g.pad[2]),
        (3, 1) => spread_fixed::<R, 3, 1>(dd, t, lo, hi, g.pad[2]),
        (2, 1) => spread_fixed::<R, 2, 1>(dd, t, lo, hi, g.pad[2]),
        _ => {
            for ox in lo..hi {
                let (x0, x1, _) = win.axes[2][ox];
                t[x0..x1].iter_mut().for_each(|v| *v = *v + dd[ox]);
            }
        }
    }
    for ox in (0..lo).chain(hi..dd.len()) {
        let (x0, x1, _) = win.axes[2][ox];
        t[x0..x1].iter_mut().for_each(|v| *v = *v + dd[ox]);
    }
}

/// [`spread_row`] over the interior columns `lo..hi` for `K`-wide windows at stride `S`: one
/// pass per window column.
#[inline(always)]
fn spread_fixed<R: Real, const K: usize, const S: usize>(
    dd: &[R],
    t: &mut [R],
    lo: usize,
    hi: usize,
    pad: usize,
) {
    if hi <= lo {
        return;
    }
    let n = hi - lo;
    let row = &mut t[lo * S - pad..][..(n - 1) * S + K];
    for j in 0..K {
        for (i, &d) in dd[lo..hi].iter().enumerate() {
            debug_assert!(i * S + j < row.len());
            // SAFETY: i < n and j < K, so i·S + j ≤ (n-1)·S + K - 1 < row.len().
            let v = unsafe { row.get_unchecked_mut(i * S + j) };
            *v = *v + d;
        }
    }
}

/// One plane's gradient of max, average or sum pooling (`dx` overwritten); `t` and `dd` hold a
/// row of the input and of the output, `rows` a window's row starts.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn plane_backward<R: Real>(
    g: &PoolGeom,
    win: &Windows,
    dy: &[R],
    x: &[R],
    y: &[R],
    dx: &mut [R],
    t: &mut [R],
    dd: &mut [R],
    rows: &mut Vec<usize>,
    code: &mut [u32],
) {
    let (ih, iw, oh, ow) = (g.input[1], g.input[2], g.output[1], g.output[2]);
    dx.fill(R::ZERO);
    for (z, &(z0, z1, pz)) in win.axes[0].iter().enumerate() {
        for (yi, &(y0, y1, py)) in win.axes[1].iter().enumerate() {
            let orow = (z * oh + yi) * ow;
            if g.kind == PoolKind::Max {
                rows.clear();
                rows.extend((z0..z1).flat_map(|zz| (y0..y1).map(move |yy| (zz * ih + yy) * iw)));
                let (ys, ds) = (&y[orow..orow + ow], &dy[orow..orow + ow]);
                route_max(g, win, x, rows, ys, ds, dx, code);
                continue;
            }
            dd.copy_from_slice(&dy[orow..orow + ow]);
            if g.kind == PoolKind::Avg {
                divide_row(g, win, pz * py, (z1 - z0) * (y1 - y0), dd);
            }
            t.fill(R::ZERO);
            spread_row(g, win, dd, t);
            for zz in z0..z1 {
                for yy in y0..y1 {
                    let r = &mut dx[(zz * ih + yy) * iw..][..iw];
                    r.iter_mut().zip(t.iter()).for_each(|(a, &b)| *a = *a + b);
                }
            }
        }
    }
}

/// Whether every plane pools to one value over the whole plane (global pooling: no padding, a
/// window at least the plane's size).
fn whole_plane(g: &PoolGeom) -> bool {
    g.output == [1, 1, 1] && g.pad == [0; 3] && (0..3).all(|a| g.kernel[a] >= g.input[a])
}

/// The sum or maximum of `x` in 16 independent lanes (then combined pairwise).
#[inline(always)]
fn lanes_reduce<R: Real>(x: &[R], max: bool, low: R) -> R {
    let mut acc = [if max { low } else { R::ZERO }; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if max { vmax(*a, v) } else { *a + v };
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a = if max { vmax(*a, v) } else { *a + v };
    }
    let mut w = 16;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] = if max { vmax(acc[i], acc[i + w]) } else { acc[i] + acc[i + w] };
        }
    }
    acc[0]
}

/// Global pooling of one plane: its sum, average or maximum.
#[inline(always)]
fn whole_forward<R: Real>(g: &PoolGeom, x: &[R], low: R) -> R {
    let v = lanes_reduce(x, g.kind == PoolKind::Max, low);
    if g.kind == PoolKind::Avg && !x.is_empty() {
        v / R::from_usize(x.len())
    } else {
        v
    }
}

/// The gradient of [`whole_forward`] into `dx` (overwritten): the output gradient spread over
/// the plane (divided by its size for an average), or given to the first maximum.
#[inline(always)]
fn whole_backward<R: Real>(g: &PoolGeom, d: R, x: &[R], y: R, dx: &mut [R]) {
    match g.kind {
        PoolKind::Max => {
            dx.fill(R::ZERO);
            if let Some(i) = x.iter().position(|&v| v == y) {
                dx[i] = d;
            }
        }
        PoolKind::Avg if !dx.is_empty() => dx.fill(d / R::from_usize(dx.len())),
        _ => dx.fill(d),
    }
}

/// One plane's forward: [`whole_forward`] for global pooling, else [`plane_forward`].
#[inline(always)]
fn plane_forward_body<R: Real>(g: &PoolGeom, win: &Windows, x: &[R], out: &mut [R], col: &mut [R], low: R) {
    if whole_plane(g) {
        out[0] = whole_forward(g, x, low);
    } else if tiles_2x2(g) {
        max_2x2(g, x, out, low);
    } else {
        plane_forward(g, win, x, out, col, low)
    }
}

/// One plane's gradient (`dx` overwritten): [`whole_backward`] for global pooling, else
/// [`plane_backward`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn plane_backward_body<R: Real>(
    g: &PoolGeom,
    win: &Windows,
    dy: &[R],
    x: &[R],
    y: &[R],
    dx: &mut [R],
    t: &mut [R],
    dd: &mut [R],
    rows: &mut Vec<usize>,
    code: &mut [u32],
) {
    if whole_plane(g) {
        let (xs, ys) = if g.kind == PoolKind::Max { (x, y[0]) } else { (&[][..], R::ZERO) };
        whole_backward(g, dy[0], xs, ys, dx);
    } else if tiles_2x2(g) {
        route_2x2(g, dy, x, y, dx);
    } else {
        plane_backward(g, win, dy, x, y, dx, t, dd, rows, code)
    }
}

multiversion!(
    /// [`plane_forward_body`] on this CPU's widest vectors.
    plane_forward_any<R: Real>(g: &PoolGeom, win: &Windows, x: &[R], out: &mut [R], col: &mut [R], low: R) => plane_forward_body
);
multiversion!(
    /// [`plane_backward_body`] on this CPU's widest vectors.
    #[allow(clippy::too_many_arguments)]
    plane_backward_any<R: Real>(
        g: &PoolGeom,
        win: &Windows,
        dy: &[R],
        x: &[R],
        y: &[R],
        dx: &mut [R],
        t: &mut [R],
        dd: &mut [R],
        rows: &mut Vec<usize>,
        code: &mut [u32],
    ) => plane_backward_body
);

/// One plane's forward (as [`plane_forward_body`]).
type PlaneForward<R> = fn(&PoolGeom, &Windows, &[R], &mut [R], &mut [R], R);
/// One plane's gradient (as [`plane_backward_body`]).
type PlaneBackward<R> =
    fn(&PoolGeom, &Windows, &[R], &[R], &[R], &mut [R], &mut [R], &mut [R], &mut Vec<usize>, &mut [u32]);

/// The direct passes' forward, each plane by `plane` ([`plane_forward_any`]; the tests also
/// give it the baseline body).
fn forward_direct<T: Element, R: Real>(g: &PoolGeom, x: &[T], y: &mut [T], plane: PlaneForward<R>) {
    let planes = g.batch * g.channels;
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let yp = Ptr(y.as_mut_ptr());
    let win = Windows::new(g);
    let low = <R as Element>::from_f64(lowest::<T>());
    split_planes(planes, in_sp + out_sp, |range| {
        let (mut xb, mut ob) = (Vec::new(), Vec::new());
        let mut col = vec![R::ZERO; g.input[2]];
        for p in range {
            let xs = plane_in::<T, R>(g, x, p, in_sp, &mut xb);
            // SAFETY: `y` holds `planes × out_sp` elements (asserted by the caller) and plane
            // p is written by this range only.
            let (os, direct) = unsafe { plane_out::<T, R>(g, yp, p, out_sp, &mut ob) };
            plane(g, &win, xs, os, &mut col, low);
            if !direct {
                // SAFETY: as above.
                unsafe { plane_out_store(g, yp, p, out_sp, &ob) };
            }
        }
    });
}

/// The direct passes' gradient, each plane by `plane` (as [`forward_direct`]).
fn backward_direct<T: Element, R: Real>(
    g: &PoolGeom,
    dy: &[T],
    x: &[T],
    y: &[T],
    dx: &mut [T],
    plane: PlaneBackward<R>,
) {
    let planes = g.batch * g.channels;
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    let dxp = Ptr(dx.as_mut_ptr());
    let win = Windows::new(g);
    let max = g.kind == PoolKind::Max;
    split_planes(planes, 2 * in_sp + 2 * out_sp, |range| {
        let (mut db, mut xb, mut yb, mut ob) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut t, mut dd) = (vec![R::ZERO; g.input[2]], vec![R::ZERO; g.output[2]]);
        let mut code = vec![0u32; g.output[2]];
        let mut rows = Vec::new();
        for p in range {
            let ds = plane_in::<T, R>(g, dy, p, out_sp, &mut db);
            let (xs, ys): (&[R], &[R]) = if max {
                (
                    plane_in::<T, R>(g, x, p, in_sp, &mut xb),
                    plane_in::<T, R>(g, y, p, out_sp, &mut yb),
                )
            } else {
                (&[], &[])
            };
            // SAFETY: `dx` holds `planes × in_sp` elements (asserted by the caller) and plane
            // p is written by this range only.
            let (os, direct) = unsafe { plane_out::<T, R>(g, dxp, p, in_sp, &mut ob) };
            plane(g, &win, ds, xs, ys, os, &mut t, &mut dd, &mut rows, &mut code);
            if !direct {
                // SAFETY: as above.
                unsafe { plane_out_store(g, dxp, p, in_sp, &ob) };
            }
        }
    });
}

/// `y = pool(x)`.
pub fn forward<T: Element>(g: &PoolGeom, x: &[T], y: &mut [T]) {
    let planes = g.batch * g.channels;
    let (in_sp, out_sp) = (g.in_sp(), g.out_sp());
    assert!(x.len() >= planes * in_sp && y.len() >= planes * out_sp);
    if direct_kind(g) {
        if T::DTYPE == crate::dtype::DType::F64 {
            forward_direct::<T, f64>(g, x, y, plane_forward_any);
        } else {
            forward_direct::<T, f32>(g, x, y, plane_forward_any);
        }
        return;
    }
    let yp = Ptr(y.as_mut_ptr());
    let windows = Windows::new(g);
    let low = lowest::<T>();
    split_planes(planes, in_sp + out_sp, |range| {
        let (mut xin, mut out) = (vec![0.0f64; in_sp], vec![0.0f64; out_sp]);
        for p in range {
            load(g, x, p, in_sp, &mut xin);
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
    if direct_kind(g) {
        if T::DTYPE == crate::dtype::DType::F64 {
            backward_direct::<T, f64>(g, dy, x, y, dx, plane_backward_any);
        } else {
            backward_direct::<T, f32>(g, dy, x, y, dx, plane_backward_any);
        }
        return;
    }
    let dxp = Ptr(dx.as_mut_ptr());
    let windows = Windows::new(g);
    let needs_y = matches!(g.kind, PoolKind::Lp(_)) || (g.v1 && g.kind == PoolKind::Max);
    let needs_x = !matches!(g.kind, PoolKind::Avg | PoolKind::Sum);
    split_planes(planes, 2 * in_sp + 2 * out_sp, |range| {
        let mut acc = vec![0.0f64; in_sp];
        let mut xin = vec![0.0f64; if needs_x { in_sp } else { 0 }];
        let (mut d, mut yo) = (
            vec![0.0f64; out_sp],
            vec![0.0f64; if needs_y { out_sp } else { 0 }],
        );
        for p in range {
            load(g, dy, p, out_sp, &mut d);
            if needs_x {
                load(g, x, p, in_sp, &mut xin);
            }
            if needs_y {
                load(g, y, p, out_sp, &mut yo);
            }
            acc.fill(0.0);
            windows.each(g, |o, w, div, _| {
                let d = d[o];
                match g.kind {
                    // (Pooling_v1's: every element equal to the maximum)
                    PoolKind::Max => {
                        let m = yo[o];
                        each_in(g, w, |i| {
                            if xin[i] == m {
                                acc[i] += d;
                            }
                        });
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

    /// MXNet's pooling, window by window in f64: the outputs and the input gradient.
    fn naive(g: &PoolGeom, x: &[f64], dy: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let (is, os) = (g.in_sp(), g.out_sp());
        let planes = g.batch * g.channels;
        let (mut y, mut dx) = (vec![0.0; planes * os], vec![0.0; planes * is]);
        let range = |a: usize, o: usize| {
            let s = (o * g.stride[a]) as isize - g.pad[a] as isize;
            let e = (s + g.kernel[a] as isize).min((g.input[a] + g.pad[a]) as isize);
            let padded = (e - s).max(0) as usize;
            (s.max(0) as usize, (e.max(0) as usize).min(g.input[a]), padded)
        };
        for p in 0..planes {
            for (o, (oz, oy, ox)) in (0..g.output[0])
                .flat_map(|z| (0..g.output[1]).flat_map(move |y| (0..g.output[2]).map(move |x| (z, y, x))))
                .enumerate()
            {
                let ((z0, z1, pz), (y0, y1, py), (x0, x1, px)) = (range(0, oz), range(1, oy), range(2, ox));
                let mut at = Vec::new();
                for z in z0..z1 {
                    for yy in y0..y1.max(y0) {
                        for xx in x0..x1.max(x0) {
                            at.push(p * is + (z * g.input[1] + yy) * g.input[2] + xx);
                        }
                    }
                }
                let d = dy[p * os + o];
                y[p * os + o] = match g.kind {
                    PoolKind::Max => {
                        let m = at.iter().map(|&i| x[i]).fold(f32::MIN as f64, f64::max);
                        if let Some(&i) = at.iter().find(|&&i| x[i] == m) {
                            dx[i] += d;
                        }
                        m
                    }
                    _ => {
                        let div = match g.kind {
                            PoolKind::Avg if g.count_include_pad => pz * py * px,
                            PoolKind::Avg => at.len(),
                            _ => 1,
                        };
                        let div = div.max(1) as f64;
                        at.iter().for_each(|&i| dx[i] += d / div);
                        at.iter().map(|&i| x[i]).sum::<f64>() / div
                    }
                };
            }
        }
        (y, dx)
    }

    /// Pseudo-random values in [-1, 1) on a coarse grid, so that windows hold ties.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                ((s >> 16) % 64) as f32 / 32.0 - 1.0
            })
            .collect()
    }

    fn check<R: Real>(g: &PoolGeom, fwd: PlaneForward<R>, bwd: PlaneBackward<R>) {
        let (is, os) = (g.in_sp(), g.out_sp());
        let planes = g.batch * g.channels;
        let xv: Vec<R> = values(planes * is, 7).iter().map(|&v| <R as Element>::from_f64(v as f64)).collect();
        let dyv: Vec<R> = values(planes * os, 9).iter().map(|&v| <R as Element>::from_f64(v as f64)).collect();
        let f = |v: &[R]| v.iter().map(|&a| Element::to_f64(a)).collect::<Vec<f64>>();
        let (want_y, want_dx) = naive(g, &f(&xv), &f(&dyv));
        let mut y = vec![R::ZERO; planes * os];
        forward_direct::<R, R>(g, &xv, &mut y, fwd);
        let mut dx = vec![<R as Element>::from_f64(7.0); planes * is];
        backward_direct::<R, R>(g, &dyv, &xv, &y, &mut dx, bwd);
        for (what, got, want) in [("y", f(&y), want_y), ("dx", f(&dx), want_dx)] {
            for (i, (a, b)) in got.iter().zip(&want).enumerate() {
                assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{g:?}: {what}[{i}] = {a}, want {b}");
            }
        }
    }

    #[test]
    fn direct_passes_match_a_naive_pooling_on_every_dispatch() {
        let base = PoolGeom {
            batch: 2,
            channels: 3,
            input: [1, 9, 11],
            output: [1, 1, 1],
            kernel: [1, 2, 2],
            stride: [1, 2, 2],
            pad: [0, 0, 0],
            channels_last: false,
            kind: PoolKind::Max,
            count_include_pad: true,
            v1: false,
        };
        let mut cases = Vec::new();
        // (input, kernel, stride, pad): LeNet's 2×2 (one pass a plane where the windows tile it) and a 3×3 at stride 3 on sizes they do
        // not divide, 3×3 stride 2 with padding,
        // stride 1, wide rows (whole-row routing), a 5-wide window, 3-D, global pooling
        for (input, kernel, stride, pad) in [
            ([1, 9, 11], [1, 2, 2], [1, 2, 2], [0, 0, 0]),
            ([1, 24, 24], [1, 2, 2], [1, 2, 2], [0, 0, 0]),
            ([1, 6, 40], [1, 2, 2], [1, 2, 2], [0, 0, 0]),
            ([1, 10, 14], [1, 3, 3], [1, 3, 3], [0, 0, 0]),
            ([1, 13, 15], [1, 3, 3], [1, 2, 2], [0, 1, 1]),
            ([1, 7, 10], [1, 3, 3], [1, 1, 1], [0, 1, 1]),
            ([1, 5, 83], [1, 2, 2], [1, 2, 2], [0, 0, 0]),
            ([1, 4, 70], [1, 3, 3], [1, 1, 1], [0, 0, 0]),
            ([1, 8, 9], [1, 5, 5], [1, 2, 3], [0, 2, 2]),
            ([3, 5, 6], [2, 2, 3], [1, 2, 2], [1, 0, 1]),
            ([1, 7, 7], [1, 7, 7], [1, 1, 1], [0, 0, 0]),
            ([1, 1, 37], [1, 1, 37], [1, 1, 1], [0, 0, 0]),
        ] {
            let output: [usize; 3] =
                std::array::from_fn(|a| (input[a] + 2 * pad[a] - kernel[a]) / stride[a] + 1);
            for (kind, cip) in [(PoolKind::Max, true), (PoolKind::Avg, true), (PoolKind::Avg, false), (PoolKind::Sum, true)] {
                cases.push(PoolGeom { input, output, kernel, stride, pad, kind, count_include_pad: cip, ..base });
            }
        }
        // 'full' convention: the last 2×2 windows hang over the bottom and right edges
        let input = [1, 9, 11];
        cases.push(PoolGeom { input, output: [1, 5, 6], kernel: [1, 2, 2], stride: [1, 2, 2], ..base });
        for g in &cases {
            check::<f32>(g, plane_forward_any, plane_backward_any);
            check::<f32>(g, plane_forward_body, plane_backward_body);
            check::<f64>(g, plane_forward_any, plane_backward_any);
            check::<f64>(g, plane_forward_body, plane_backward_body);
        }
    }
}
