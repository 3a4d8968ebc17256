//! Batched matrix products over strided matrices, for multi-head attention on MXNet's
//! interleaved projection layout (`_contrib_interleaved_matmul_*`).
//!
//! A projection tensor of shape `(seq, batch, heads · slots · head_dim)` holds, for each
//! position, batch item and head, `slots` vectors of `head_dim` values one after another
//! (queries, keys, values for self-attention; keys, values for encoder-decoder attention;
//! plain queries have one slot). Attention batch `bh = b · heads + h` then sees slot `s` as a
//! `seq × head_dim` matrix starting at `bh · slots · head_dim + s · head_dim` with row stride
//! `batch · heads · slots · head_dim`: every product is a strided GEMM, with no copy.

use super::map::Ptr;
use super::real::Real;
use crate::parallel;

/// A strided matrix inside a buffer: element `(i, j)` of batch `b` is at
/// `offset + b · batch_stride + i · row_stride + j · col_stride`.
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub offset: usize,
    pub batch_stride: usize,
    pub row_stride: isize,
    pub col_stride: isize,
}

impl View {
    /// The matrix read transposed (rows and columns swapped).
    pub fn t(self) -> View {
        View {
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// The largest element index batch `batches - 1` reaches for an `rows × cols` matrix, plus one.
    fn extent(&self, batches: usize, rows: usize, cols: usize) -> usize {
        if batches == 0 || rows == 0 || cols == 0 {
            return 0;
        }
        let last = self.offset as isize
            + ((batches - 1) * self.batch_stride) as isize
            + (rows as isize - 1) * self.row_stride
            + (cols as isize - 1) * self.col_stride;
        last as usize + 1
    }
}

/// Slot `slot` of an interleaved projection `(seq, batch, heads · slots · dim)`, as
/// `batch · heads` matrices of `seq × dim`.
pub fn slot(batch: usize, heads: usize, slots: usize, dim: usize, slot: usize) -> View {
    View {
        offset: slot * dim,
        batch_stride: slots * dim,
        row_stride: (batch * heads * slots * dim) as isize,
        col_stride: 1,
    }
}

/// Contiguous `batches × rows × cols` matrices.
pub fn dense(rows: usize, cols: usize) -> View {
    View {
        offset: 0,
        batch_stride: rows * cols,
        row_stride: cols as isize,
        col_stride: 1,
    }
}

/// For each of `batches`: `c[m×n] (+)= scale · a[m×k] · b[k×n]` (with `accumulate` the product is
/// added to `c`, else it replaces it). Batches run in parallel over the intra-op pool; the
/// destinations of different batches must not overlap (the callers' views never do).
#[allow(clippy::too_many_arguments)]
pub fn batched<T: Real>(
    batches: usize,
    (m, n, k): (usize, usize, usize),
    scale: T,
    a: (&[T], View),
    b: (&[T], View),
    c: (&mut [T], View),
    accumulate: bool,
) {
    let (a, av) = a;
    let (b, bv) = b;
    let (c, cv) = c;
    assert!(av.extent(batches, m, k) <= a.len());
    assert!(bv.extent(batches, k, n) <= b.len());
    assert!(cv.extent(batches, m, n) <= c.len());
    if batches == 0 || m == 0 || n == 0 {
        return;
    }
    let (ap, bp, cp) = (
        Ptr(a.as_ptr().cast_mut()),
        Ptr(b.as_ptr().cast_mut()),
        Ptr(c.as_mut_ptr()),
    );
    let one = |i: usize| {
        // SAFETY: the asserts above keep every element of batch `i` inside its buffer; `c` is a
        // unique borrow whose batches the callers' views keep disjoint, so each task writes its
        // own elements only; the product only reads `a` and `b`.
        unsafe {
            let dst = cp.get().add(cv.offset + i * cv.batch_stride);
            let lhs = ap.get().cast_const().add(av.offset + i * av.batch_stride);
            let rhs = bp.get().cast_const().add(bv.offset + i * bv.batch_stride);
            if k == 0 {
                if !accumulate {
                    for r in 0..m as isize {
                        for q in 0..n as isize {
                            *dst.offset(r * cv.row_stride + q * cv.col_stride) = T::ZERO;
                        }
                    }
                }
                return;
            }
            super::gemm::matmul_strided_serial(
                (m, n, k),
                scale,
                (lhs, av.row_stride, av.col_stride),
                (rhs, bv.row_stride, bv.col_stride),
                (dst, cv.row_stride, cv.col_stride),
                accumulate,
            )
        }
    };
    let work = batches * m * n * k.max(1);
    if work < (1 << 16) {
        (0..batches).for_each(one);
    } else {
        parallel::for_tasks(batches, parallel::max_threads(), one);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_qk_matches_loops() {
        let (seq, batch, heads, dim) = (3, 2, 2, 4);
        let n = seq * batch * heads * 3 * dim;
        let qkv: Vec<f64> = (0..n).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
        let mut out = vec![0.0; batch * heads * seq * seq];
        batched(
            batch * heads,
            (seq, seq, dim),
            0.5,
            (&qkv, slot(batch, heads, 3, dim, 0)),
            (&qkv, slot(batch, heads, 3, dim, 1).t()),
            (&mut out, dense(seq, seq)),
            false,
        );
        let at = |i: usize, b: usize, h: usize, s: usize, d: usize| {
            qkv[((i * batch + b) * heads + h) * 3 * dim + s * dim + d]
        };
        for b in 0..batch {
            for h in 0..heads {
                for i in 0..seq {
                    for j in 0..seq {
                        let want: f64 = (0..dim)
                            .map(|d| at(i, b, h, 0, d) * at(j, b, h, 1, d))
                            .sum();
                        let got = out[((b * heads + h) * seq + i) * seq + j];
                        assert!((got - 0.5 * want).abs() < 1e-12);
                    }
                }
            }
        }
    }
}
