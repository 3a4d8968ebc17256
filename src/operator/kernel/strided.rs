//! Strided access: one output in row-major order, inputs read at `base + Σ index·stride`.
//!
//! Strides are in elements and may be 0 (broadcast) or negative (flip). One walker serves
//! broadcasting binary ops, `broadcast_to`, transpose, stepped slices, flips, tiles and repeats
//! (each a choice of strides), and the reductions (which walk the reduced axes of each output).
//! Indexing goes through slices, so a wrong stride is a panic, never a stray read.

use super::element::Element;
use crate::parallel::for_chunks_mut;

/// Row-major strides (in elements) of a contiguous array of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        s[i] = acc;
        acc *= shape[i] as isize;
    }
    s
}

/// numpy's broadcast of two shapes (right-aligned; a 1 stretches), or `None` if incompatible.
pub fn broadcast_shape(a: &[i64], b: &[i64]) -> Option<Vec<i64>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => return None,
        };
    }
    Some(out)
}

/// Strides that read a contiguous array of `shape` as if broadcast to `out` (right-aligned;
/// 0 where the array has size 1 or lacks the axis). `shape` must broadcast to `out`.
pub fn broadcast_strides(shape: &[i64], out: &[i64]) -> Vec<isize> {
    let own = contiguous_strides(&shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
    let lead = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < lead || shape[i - lead] == 1 {
                0
            } else {
                own[i - lead]
            }
        })
        .collect()
}

/// Calls `f(k, offsets)` for output indices `k` in `start..start + len` of an array of `shape`,
/// where `offsets[j] = bases[j] + Σ index·strides[j]`.
pub fn walk<const N: usize>(
    shape: &[usize],
    strides: [&[isize]; N],
    bases: [isize; N],
    start: usize,
    len: usize,
    mut f: impl FnMut(usize, [isize; N]),
) {
    let nd = shape.len();
    if nd == 0 {
        if len > 0 {
            f(start, bases);
        }
        return;
    }
    // multi-index of `start`
    let mut idx = vec![0usize; nd];
    let mut rem = start;
    for d in (0..nd).rev() {
        idx[d] = rem % shape[d].max(1);
        rem /= shape[d].max(1);
    }
    let mut off = bases;
    for j in 0..N {
        for d in 0..nd {
            off[j] += idx[d] as isize * strides[j][d];
        }
    }
    let inner = shape[nd - 1];
    let mut k = start;
    let end = start + len;
    while k < end {
        // run along the last axis
        let run = (inner - idx[nd - 1]).min(end - k);
        let mut o = off;
        for _ in 0..run {
            f(k, o);
            k += 1;
            for j in 0..N {
                o[j] += strides[j][nd - 1];
            }
        }
        if k >= end {
            break;
        }
        // carry into the outer axes
        for j in 0..N {
            off[j] += (inner - idx[nd - 1]) as isize * strides[j][nd - 1];
        }
        idx[nd - 1] = 0;
        for j in 0..N {
            off[j] -= inner as isize * strides[j][nd - 1];
        }
        let mut d = nd - 1;
        loop {
            if d == 0 {
                break;
            }
            d -= 1;
            idx[d] += 1;
            for j in 0..N {
                off[j] += strides[j][d];
            }
            if idx[d] < shape[d] {
                break;
            }
            for j in 0..N {
                off[j] -= shape[d] as isize * strides[j][d];
            }
            idx[d] = 0;
        }
    }
}

/// `out[k] = src[base + Σ index·strides]` over `out`'s `shape`: broadcast, transpose, slice,
/// flip, tile and repeat are all this with the right strides.
pub fn gather<T: Copy + Send + Sync>(
    src: &[T],
    base: isize,
    strides: &[isize],
    shape: &[usize],
    out: &mut [T],
) {
    for_chunks_mut(out, 1, |start, chunk| {
        walk(shape, [strides], [base], start, chunk.len(), |k, [o]| {
            chunk[k - start] = src[o as usize];
        });
    });
}

/// `out[k] = f(a[..], b[..])` with each input read through its strides over `out`'s shape.
pub fn zip2<A: Copy + Sync, B: Copy + Sync, O: Copy + Send>(
    a: (&[A], &[isize]),
    b: (&[B], &[isize]),
    shape: &[usize],
    out: &mut [O],
    f: impl Fn(A, B) -> O + Sync,
) {
    for_chunks_mut(out, 2, |start, chunk| {
        walk(
            shape,
            [a.1, b.1],
            [0, 0],
            start,
            chunk.len(),
            |k, [oa, ob]| {
                chunk[k - start] = f(a.0[oa as usize], b.0[ob as usize]);
            },
        );
    });
}

/// `out[k] = f(a, b, c)` with each input read through its strides (`where`).
pub fn zip3<A: Copy + Sync, B: Copy + Sync, C: Copy + Sync, O: Copy + Send>(
    a: (&[A], &[isize]),
    b: (&[B], &[isize]),
    c: (&[C], &[isize]),
    shape: &[usize],
    out: &mut [O],
    f: impl Fn(A, B, C) -> O + Sync,
) {
    for_chunks_mut(out, 3, |start, chunk| {
        walk(
            shape,
            [a.1, b.1, c.1],
            [0, 0, 0],
            start,
            chunk.len(),
            |k, [oa, ob, oc]| {
                chunk[k - start] = f(a.0[oa as usize], b.0[ob as usize], c.0[oc as usize]);
            },
        );
    });
}

/// Splits `shape` into the kept axes (the output, in order) and the reduced ones, returning
/// `(kept shape, kept strides, reduced shape, reduced strides)` for a contiguous input.
pub fn split_axes(
    shape: &[usize],
    reduced: &[bool],
) -> (Vec<usize>, Vec<isize>, Vec<usize>, Vec<isize>) {
    let strides = contiguous_strides(shape);
    let (mut ks, mut kst, mut rs, mut rst) = (vec![], vec![], vec![], vec![]);
    for d in 0..shape.len() {
        if reduced[d] {
            rs.push(shape[d]);
            rst.push(strides[d]);
        } else {
            ks.push(shape[d]);
            kst.push(strides[d]);
        }
    }
    (ks, kst, rs, rst)
}

/// For every output element (the kept axes), folds the reduced axes of `src`:
/// `out[o] = finish(fold(init, x…), count)`.
pub fn reduce<T: Copy + Sync, O: Copy + Send, A: Copy + Sync>(
    src: &[T],
    shape: &[usize],
    reduced: &[bool],
    out: &mut [O],
    init: A,
    fold: impl Fn(A, T, usize) -> A + Sync,
    finish: impl Fn(A, usize) -> O + Sync,
) {
    let (ks, kst, rs, rst) = split_axes(shape, reduced);
    let count: usize = rs.iter().product();
    debug_assert_eq!(out.len(), ks.iter().product::<usize>());
    let cost = count.max(1);
    for_chunks_mut(out, cost, |start, chunk| {
        walk(&ks, [&kst], [0], start, chunk.len(), |k, [base]| {
            let mut acc = init;
            let mut i = 0;
            walk(&rs, [&rst], [base], 0, count, |_, [o]| {
                acc = fold(acc, src[o as usize], i);
                i += 1;
            });
            chunk[k - start] = finish(acc, count);
        });
    });
}

/// `(A, K, B)` when the reduction of a contiguous `shape` over the `reduced` axes keeps one
/// block of axes between two reduced blocks (either may be empty): `out[k] = Σ_{a,b}
/// x[a, k, b]` then walks the input as `A × K × B`. A bias gradient (`N × C × H × W` summed over
/// all axes but C) and column sums are of this form.
pub fn kept_middle(shape: &[usize], reduced: &[bool]) -> Option<(usize, usize, usize)> {
    // the axes of size above 1, as runs of reduced / kept
    let mut runs: Vec<(bool, usize)> = Vec::new();
    for (&d, &r) in shape.iter().zip(reduced) {
        if d == 1 {
            continue;
        }
        match runs.last_mut() {
            Some((lr, n)) if *lr == r => *n *= d,
            _ => runs.push((r, d)),
        }
    }
    match runs[..] {
        [] => None,
        [(true, b)] => Some((1, 1, b)),
        [(false, _)] => None,
        [(false, k), (true, b)] => Some((1, k, b)),
        [(true, a), (false, k)] => Some((a, k, 1)),
        [(true, a), (false, k), (true, b)] => Some((a, k, b)),
        _ => None,
    }
}

/// `out[k] = Σ_{a,b} x[a, k, b]` in f64 over a contiguous `A × K × B` array, as vectorised
/// passes: contiguous runs of `B` summed in eight independent lanes, or (`B` = 1) whole rows of
/// `K` added elementwise.
pub fn sum_kept_middle<T: Element>(x: &[T], a: usize, k: usize, b: usize, out: &mut [f64]) {
    assert!(x.len() >= a * k * b && out.len() >= k);
    let out = &mut out[..k];
    if b == 1 {
        out.fill(0.0);
        for row in x[..a * k].chunks_exact(k.max(1)) {
            out.iter_mut().zip(row).for_each(|(o, v)| *o += v.to_f64());
        }
        return;
    }
    for_chunks_mut(out, a * b, |start, chunk| {
        for (j, o) in chunk.iter_mut().enumerate() {
            let c = start + j;
            let mut lanes = [0.0f64; 8];
            let mut tail = 0.0;
            for i in 0..a {
                let run = &x[(i * k + c) * b..][..b];
                let mut it = run.chunks_exact(8);
                for ch in &mut it {
                    for (l, v) in lanes.iter_mut().zip(ch) {
                        *l += v.to_f64();
                    }
                }
                tail += it.remainder().iter().map(|v| v.to_f64()).sum::<f64>();
            }
            *o = lanes.iter().sum::<f64>() + tail;
        }
    });
}

/// `out[k]` = the maximum (`max`) or minimum of `x[a, k, b]` over `a` and `b`, in f64, over a
/// contiguous `A × K × B` array: the value the serial fold in row-major order gives (NaN if any
/// element is NaN; of equal zeros the first, so the sign of a zero result is the serial one).
/// Runs of `B` are folded in eight independent lanes; rows of `K` (`B` = 1) elementwise.
pub fn extreme_kept_middle<T: Element>(x: &[T], a: usize, k: usize, b: usize, max: bool, out: &mut [f64]) {
    assert!(x.len() >= a * k * b && out.len() >= k);
    let out = &mut out[..k];
    let init = if max { f64::NEG_INFINITY } else { f64::INFINITY };
    if b == 1 {
        // per column, in row order: the serial fold itself
        out.fill(init);
        for row in x[..a * k].chunks_exact(k.max(1)) {
            extreme_rows(row, max, out);
        }
        return;
    }
    for_chunks_mut(out, a * b, |start, chunk| {
        for (j, o) in chunk.iter_mut().enumerate() {
            let c = start + j;
            let mut lanes = [init; 8];
            for i in 0..a {
                extreme_lanes(&x[(i * k + c) * b..][..b], max, &mut lanes);
            }
            let m = if lanes.iter().any(|l| l.is_nan()) {
                f64::NAN
            } else if max {
                lanes.iter().copied().fold(init, f64::max)
            } else {
                lanes.iter().copied().fold(init, f64::min)
            };
            *o = if m == 0.0 {
                // the lanes may have met the zeros in another order: the serial fold keeps the
                // first (nothing before it is above it for max, below it for min)
                (0..a)
                    .flat_map(|i| x[(i * k + c) * b..][..b].iter())
                    .map(|v| v.to_f64())
                    .find(|v| *v == 0.0)
                    .unwrap_or(m)
            } else {
                m
            };
        }
    });
}

multiversion!(extreme_lanes<T: Element>(run: &[T], max: bool, lanes: &mut [f64; 8]) => extreme_lanes_body);
multiversion!(extreme_rows<T: Element>(row: &[T], max: bool, acc: &mut [f64]) => extreme_rows_body);

/// The serial fold's step: `x` replaces `a` if beyond it or NaN (a NaN then stays).
#[inline(always)]
fn step(max: bool, a: f64, x: f64) -> f64 {
    let beyond = if max { x > a } else { x < a };
    if beyond || x.is_nan() { x } else { a }
}

#[inline(always)]
fn extreme_lanes_body<T: Element>(run: &[T], max: bool, lanes: &mut [f64; 8]) {
    let mut it = run.chunks_exact(8);
    // two loops so that the comparison is fixed inside each
    if max {
        for ch in &mut it {
            for (l, v) in lanes.iter_mut().zip(ch) {
                *l = step(true, *l, v.to_f64());
            }
        }
    } else {
        for ch in &mut it {
            for (l, v) in lanes.iter_mut().zip(ch) {
                *l = step(false, *l, v.to_f64());
            }
        }
    }
    for (l, v) in lanes.iter_mut().zip(it.remainder()) {
        *l = step(max, *l, v.to_f64());
    }
}

#[inline(always)]
fn extreme_rows_body<T: Element>(row: &[T], max: bool, acc: &mut [f64]) {
    if max {
        acc.iter_mut().zip(row).for_each(|(o, v)| *o = step(true, *o, v.to_f64()));
    } else {
        acc.iter_mut().zip(row).for_each(|(o, v)| *o = step(false, *o, v.to_f64()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: the offset of output index `k` computed from scratch.
    fn offset(shape: &[usize], strides: &[isize], base: isize, mut k: usize) -> isize {
        let mut o = base;
        for d in (0..shape.len()).rev() {
            o += (k % shape[d]) as isize * strides[d];
            k /= shape[d];
        }
        o
    }

    #[test]
    fn walk_visits_every_offset_from_any_start() {
        let shape = [3usize, 1, 4, 5];
        let strides = [-20isize, 7, 1, 4];
        let base = 60;
        let total: usize = shape.iter().product();
        for start in [0, 1, 4, 5, 19, 20, 59] {
            let mut seen = vec![];
            walk(
                &shape,
                [&strides],
                [base],
                start,
                total - start,
                |k, [o]| seen.push((k, o)),
            );
            let want: Vec<_> = (start..total)
                .map(|k| (k, offset(&shape, &strides, base, k)))
                .collect();
            assert_eq!(seen, want, "start {start}");
        }
    }

    #[test]
    fn transpose_and_broadcast_are_gathers() {
        let src: Vec<i32> = (0..6).collect(); // 2x3
        let mut t = vec![0; 6];
        gather(&src, 0, &[1, 3], &[3, 2], &mut t);
        assert_eq!(t, [0, 3, 1, 4, 2, 5]);
        assert_eq!(broadcast_shape(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shape(&[2, 3], &[4, 3]), None);
        let s = broadcast_strides(&[3], &[2, 3]);
        let mut b = vec![0; 6];
        gather(&src[..3], 0, &s, &[2, 3], &mut b);
        assert_eq!(b, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn reduce_over_middle_axis_matches_serial_sum() {
        let shape = [2usize, 3, 4];
        let src: Vec<f64> = (0..24).map(|x| x as f64).collect();
        let mut out = vec![0.0; 8];
        reduce(
            &src,
            &shape,
            &[false, true, false],
            &mut out,
            0.0,
            |a, x, _| a + x,
            |a, _| a,
        );
        for i in 0..2 {
            for k in 0..4 {
                let want: f64 = (0..3).map(|j| src[i * 12 + j * 4 + k]).sum();
                assert_eq!(out[i * 4 + k], want);
            }
        }
    }

    #[test]
    fn extreme_kept_middle_is_the_serial_fold() {
        // values with repeats, signed zeros and (in some cases) a NaN
        let vals = [3.5f64, -0.0, 0.0, -2.0, 7.25, -7.25, 0.0, -0.0, 1.0];
        for &(a, k, b) in &[(1, 1, 1), (5, 3, 1), (1, 4, 37), (3, 2, 9), (2, 3, 16), (4, 1, 8), (2, 2, 0)] {
            for nan_at in [None, Some(0), Some(a * k * b / 2)] {
                for shift in 0..4usize {
                    let mut x: Vec<f64> = (0..a * k * b).map(|i| vals[(i * 7 + shift) % vals.len()] - (shift % 2) as f64 * 9.0).collect();
                    if shift == 3 {
                        // all zeros of mixed sign: the result's sign is the first zero's
                        x.iter_mut().enumerate().for_each(|(i, v)| *v = if (i + a) % 3 == 0 { -0.0 } else { 0.0 });
                    }
                    if let Some(i) = nan_at.filter(|&i| i < x.len()) {
                        x[i] = f64::NAN;
                    }
                    let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
                    for max in [true, false] {
                        let init = if max { f64::NEG_INFINITY } else { f64::INFINITY };
                        let want: Vec<f64> = (0..k)
                            .map(|c| {
                                let mut acc = init;
                                for i in 0..a {
                                    for j in 0..b {
                                        acc = step(max, acc, x[(i * k + c) * b + j]);
                                    }
                                }
                                acc
                            })
                            .collect();
                        let mut got = vec![0.0; k];
                        extreme_kept_middle(&x, a, k, b, max, &mut got);
                        let mut got32 = vec![0.0; k];
                        extreme_kept_middle(&xf, a, k, b, max, &mut got32);
                        for (g, w) in got.iter().chain(&got32).zip(want.iter().chain(&want)) {
                            assert!(
                                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                                "{a}x{k}x{b} max={max} nan_at={nan_at:?} shift={shift}: {got:?} {got32:?} vs {want:?}"
                            );
                        }
                    }
                }
            }
        }
        // the baseline and AVX2 bodies agree with the dispatched one
        let x: Vec<f32> = (0..1000).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        let (mut l1, mut l2) = ([f64::NEG_INFINITY; 8], [f64::NEG_INFINITY; 8]);
        extreme_lanes(&x, true, &mut l1);
        extreme_lanes_body(&x, true, &mut l2);
        assert_eq!(l1, l2);
    }
}
