//! Matrix products for `dot`, `batch_dot` and `FullyConnected`.
//!
//! f32 products go to mxrt's own AVX-512 GEMM ([`super::sgemm`]) where the CPU has AVX-512F
//! and the product is not tiny; other floats, and f32 on other CPUs (or with
//! `MXRT_SGEMM=gemm`), go to the `gemm` crate (runtime SIMD dispatch, packed micro-kernels,
//! threads from the intra-op pool; its f16 path computes like MXNet's CPU half-precision GEMM,
//! in f32 inside); MXNet links OpenBLAS or oneDNN for the same job. Integer types, which BLAS
//! does not cover either, use a plain loop accumulating in f64.

use super::element::Element;
use super::map::Ptr;
use super::sgemm;
use crate::parallel;
use half::f16;

/// Below this many multiply-adds a product runs on the calling thread.
const PARALLEL_FLOPS: usize = 1 << 18;

/// Below this many multiply-adds an f32 product stays on the `gemm` crate, whose unpacked
/// small-matrix kernels beat packing there (measured: 32³ runs faster on the crate).
const SGEMM_MIN_FLOPS: usize = 1 << 16;

/// Whether an f32 product of this size goes to [`sgemm`]: not tiny, and at least
/// [`sgemm::MIN_N`] columns (narrower products waste most of a vector; 128×10×512 runs as fast
/// on the crate).
fn own_sgemm(m: usize, n: usize, k: usize) -> bool {
    m * n * k >= SGEMM_MIN_FLOPS && n >= min_n() && sgemm::enabled()
}

/// [`sgemm::MIN_N`], or `MXRT_SGEMM_MIN_N` where set (for measuring the crossover).
fn min_n() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("MXRT_SGEMM_MIN_N")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(sgemm::MIN_N)
    })
}

/// A row-major matrix operand: its data and whether it is stored transposed.
#[derive(Clone, Copy)]
pub struct Operand<'a, T> {
    pub data: &'a [T],
    pub transposed: bool,
}

impl<T> Operand<'_, T> {
    /// `(column stride, row stride)` of the logical `rows × cols` matrix.
    fn strides(&self, rows: usize, cols: usize) -> (isize, isize) {
        if self.transposed {
            (rows as isize, 1)
        } else {
            let _ = rows;
            (1, cols as isize)
        }
    }
}

/// `c[m×n] (+)= a[m×k] · b[k×n]`, all row-major (`a` and `b` possibly stored transposed). With
/// `accumulate` the product is added to `c`, else it replaces it.
pub fn matmul<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: &mut [T],
    accumulate: bool,
) {
    matmul_threads(parallel::max_threads(), m, n, k, a, b, c, accumulate)
}

/// [`matmul`] on the calling thread only: for callers that already split their work over the
/// pool (a convolution's images).
pub fn matmul_serial<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: &mut [T],
    accumulate: bool,
) {
    matmul_threads(1, m, n, k, a, b, c, accumulate)
}

#[allow(clippy::too_many_arguments)]
fn matmul_threads<T: Element>(
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: &mut [T],
    accumulate: bool,
) {
    assert!(a.data.len() >= m * k && b.data.len() >= k * n && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    let t = std::any::TypeId::of::<T>();
    if t == std::any::TypeId::of::<f32>() {
        // SAFETY: `T` is f32 (checked by type id), so the casts are identities.
        unsafe { blas::<f32>(threads, m, n, k, cast(a), cast(b), cast_mut(c), accumulate) }
    } else if t == std::any::TypeId::of::<f64>() {
        // SAFETY: `T` is f64.
        unsafe { blas::<f64>(threads, m, n, k, cast(a), cast(b), cast_mut(c), accumulate) }
    } else if t == std::any::TypeId::of::<f16>() {
        // SAFETY: `T` is half::f16, the type `gemm` uses for f16.
        unsafe { blas::<f16>(threads, m, n, k, cast(a), cast(b), cast_mut(c), accumulate) }
    } else {
        naive(m, n, k, a, b, c, accumulate)
    }
}

/// An f32 matrix packed once for the products of one shape (see [`sgemm::Packed`]).
pub use sgemm::Packed;

/// `a` (`m × k`) packed as the left operand of `m × n × k` products, where those run on
/// [`sgemm`] (`None` elsewhere: the caller uses [`matmul`]).
pub fn pack_lhs(m: usize, n: usize, k: usize, a: Operand<'_, f32>) -> Option<Packed> {
    if !own_sgemm(m, n, k) {
        return None;
    }
    assert!(a.data.len() >= m * k);
    let (cs, rs) = a.strides(m, k);
    // SAFETY: AVX-512F (`own_sgemm`); `a` holds `m × k` at these strides (asserted).
    Some(unsafe { Packed::a(m, k, sgemm::Mat { ptr: a.data.as_ptr(), rs, cs }) })
}

/// `b` (`k × n`) packed as the right operand of `m × n × k` products, where those run on
/// [`sgemm`] (`None` elsewhere).
pub fn pack_rhs(m: usize, n: usize, k: usize, b: Operand<'_, f32>) -> Option<Packed> {
    if !own_sgemm(m, n, k) {
        return None;
    }
    assert!(b.data.len() >= k * n);
    let (cs, rs) = b.strides(k, n);
    // SAFETY: AVX-512F (`own_sgemm`); `b` holds `k × n` at these strides (asserted).
    Some(unsafe { Packed::b(k, n, sgemm::Mat { ptr: b.data.as_ptr(), rs, cs }) })
}

/// What the packed products apply to each result as they store it (see [`sgemm::Epilogue`]).
pub use sgemm::Epilogue;

/// `c[m×n] = epi(a · b (+ c))` (row-major `c`) with `a` packed by [`pack_lhs`] (`m = a.len()`,
/// `k = a.depth()`); `serial`: on the calling thread, else on the pool as [`matmul`].
pub fn matmul_packed_lhs(
    serial: bool,
    a: &Packed,
    n: usize,
    b: Operand<'_, f32>,
    c: &mut [f32],
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    let (m, k) = (a.len(), a.depth());
    assert!(b.data.len() >= k * n && c.len() >= m * n);
    let (cs, rs) = b.strides(k, n);
    let b = sgemm::Side::Strided(sgemm::Mat { ptr: b.data.as_ptr(), rs, cs });
    packed_product(serial, m, n, k, sgemm::Side::Packed(a), b, c, accumulate, epi);
}

/// [`matmul_packed_lhs`] with a row-major `b` (`k × n`, rows contiguous) read by the product's
/// micro-kernel where it lies instead of copied into panels first: a 1×1 convolution's image.
pub fn matmul_packed_lhs_rows(
    serial: bool,
    a: &Packed,
    n: usize,
    b: &[f32],
    c: &mut [f32],
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    let (m, k) = (a.len(), a.depth());
    assert!(b.len() >= k * n && c.len() >= m * n);
    let b = sgemm::Side::Rows(sgemm::Mat { ptr: b.as_ptr(), rs: n as isize, cs: 1 });
    packed_product(serial, m, n, k, sgemm::Side::Packed(a), b, c, accumulate, epi);
}

/// `c[m×n] (+)= a · b` (row-major `c`) with `b` packed by [`pack_rhs`] (`n = b.len()`,
/// `k = b.depth()`).
pub fn matmul_packed_rhs(
    serial: bool,
    m: usize,
    a: Operand<'_, f32>,
    b: &Packed,
    c: &mut [f32],
    accumulate: bool,
) {
    let (n, k) = (b.len(), b.depth());
    assert!(a.data.len() >= m * k && c.len() >= m * n);
    let (cs, rs) = a.strides(m, k);
    let a = sgemm::Side::Strided(sgemm::Mat { ptr: a.data.as_ptr(), rs, cs });
    packed_product(serial, m, n, k, a, sgemm::Side::Packed(b), c, accumulate, Epilogue::NONE);
}

/// [`matmul_packed_lhs`] for `b` and `c` inside larger matrices: `b` at its strides, `c`'s
/// rows at stride `ldc ≥ n`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_packed_lhs_view(
    serial: bool,
    a: &Packed,
    n: usize,
    b: View<'_, f32>,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    let (m, k) = (a.len(), a.depth());
    assert!(b.holds(k, n) && ldc >= n && (m == 0 || n == 0 || c.len() >= (m - 1) * ldc + n));
    let b = sgemm::Side::Strided(sgemm::Mat {
        ptr: b.data.as_ptr(),
        rs: b.rs as isize,
        cs: b.cs as isize,
    });
    packed_product_ld(serial, m, n, k, sgemm::Side::Packed(a), b, c, ldc, accumulate, epi);
}

#[allow(clippy::too_many_arguments)]
fn packed_product(
    serial: bool,
    m: usize,
    n: usize,
    k: usize,
    a: sgemm::Side<'_>,
    b: sgemm::Side<'_>,
    c: &mut [f32],
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    packed_product_ld(serial, m, n, k, a, b, c, n, accumulate, epi)
}

/// # Panics
/// Where a packed operand is not of this shape or `epi` has fewer bias values than `m` rows
/// (checked by `sgemm_sides_with`).
#[allow(clippy::too_many_arguments)]
fn packed_product_ld(
    serial: bool,
    m: usize,
    n: usize,
    k: usize,
    a: sgemm::Side<'_>,
    b: sgemm::Side<'_>,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    let threads = if serial || m * n * k < PARALLEL_FLOPS {
        1
    } else {
        parallel::max_threads()
    };
    let c = sgemm::MatMut {
        ptr: c.as_mut_ptr(),
        rs: ldc as isize,
        cs: 1,
    };
    // SAFETY: a packed operand exists only on a CPU with AVX-512F and its shape is checked by
    // `sgemm_sides`; the strided one holds its matrix and `c` is a unique borrow holding `m`
    // rows of `n` at stride `ldc` (asserted by the callers).
    unsafe { sgemm::sgemm_sides_with(threads, m, n, k, 1.0, a, b, c, accumulate, epi) };
}

/// # Safety
/// `T` and `U` must be the same type.
unsafe fn cast<'a, T, U>(o: Operand<'a, T>) -> Operand<'a, U> {
    Operand {
        // SAFETY: same type, so same layout and length.
        data: unsafe { std::slice::from_raw_parts(o.data.as_ptr().cast(), o.data.len()) },
        transposed: o.transposed,
    }
}

/// # Safety
/// `T` and `U` must be the same type.
unsafe fn cast_mut<T, U>(c: &mut [T]) -> &mut [U] {
    // SAFETY: same type, so same layout and length; the borrow moves to the result.
    unsafe { std::slice::from_raw_parts_mut(c.as_mut_ptr().cast(), c.len()) }
}

multiversion!(
    /// `c[j] (+)= a · row j of bt` (`bt` holds `c.len()` rows of `a.len()` floats): a one-row
    /// product with a transposed right operand (a fully connected layer on one sample), read
    /// once as it lies; a matrix product would copy all of `bt` into panels for one row of
    /// multiply-adds per value.
    dot_rows(a: &[f32], bt: &[f32], c: &mut [f32], accumulate: bool) -> () => dot_rows_body
);

/// Lanes summed apart in [`dot_rows`]: four 16-lane chains of adds.
const DOT_LANES: usize = 64;

#[inline(always)]
fn dot_rows_body(a: &[f32], bt: &[f32], c: &mut [f32], accumulate: bool) {
    let k = a.len();
    assert!(bt.len() >= c.len() * k);
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    for (cj, row) in c.iter_mut().zip(bt.chunks_exact(k)) {
        let mut acc = [0.0f32; DOT_LANES];
        let (ab, rb) = (a.chunks_exact(DOT_LANES), row.chunks_exact(DOT_LANES));
        let (at, rt) = (ab.remainder(), rb.remainder());
        for (x, w) in ab.zip(rb) {
            for l in 0..DOT_LANES {
                acc[l] += x[l] * w[l];
            }
        }
        for (l, (x, w)) in at.iter().zip(rt).enumerate() {
            acc[l] += x * w;
        }
        // pairwise: 64 → 32 → ... → 1
        let mut w = DOT_LANES;
        while w > 1 {
            w /= 2;
            for l in 0..w {
                acc[l] += acc[l + w];
            }
        }
        *cj = if accumulate { *cj + acc[0] } else { acc[0] };
    }
}

/// # Safety
/// The operands must hold the sizes `matmul` asserted.
#[allow(clippy::too_many_arguments)]
unsafe fn blas<T: Element>(
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: &mut [T],
    accumulate: bool,
) {
    let (a_cs, a_rs) = a.strides(m, k);
    let (b_cs, b_rs) = b.strides(k, n);
    let flops = m * n * k;
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && m == 1 && b.transposed {
        // SAFETY: `T` is f32 (type id).
        let (a, b, c) = unsafe { (cast::<T, f32>(a), cast::<T, f32>(b), cast_mut::<T, f32>(c)) };
        // `b` stored `n × k`: its rows are the columns of the product, split over the pool
        // when large (a fully connected layer's weight read once either way)
        let (a, bt) = (&a.data[..k], &b.data[..n * k]);
        if threads > 1 && flops >= PARALLEL_FLOPS {
            parallel::for_chunks_mut(&mut c[..n], k, |j, cs| {
                dot_rows(a, &bt[j * k..], cs, accumulate)
            });
        } else {
            dot_rows(a, bt, &mut c[..n], accumulate);
        }
        return;
    }
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() && own_sgemm(m, n, k) {
        let threads = if flops >= PARALLEL_FLOPS { threads } else { 1 };
        // SAFETY: `T` is f32 (type id); the operands hold their matrices at these strides (sizes
        // asserted by `matmul`), `c` is a unique borrow of `m × n` row-major, and the CPU has
        // AVX-512F (`own_sgemm`).
        unsafe {
            sgemm::sgemm(
                threads,
                m,
                n,
                k,
                1.0,
                sgemm::Mat {
                    ptr: a.data.as_ptr().cast(),
                    rs: a_rs,
                    cs: a_cs,
                },
                sgemm::Mat {
                    ptr: b.data.as_ptr().cast(),
                    rs: b_rs,
                    cs: b_cs,
                },
                sgemm::MatMut {
                    ptr: c.as_mut_ptr().cast(),
                    rs: n as isize,
                    cs: 1,
                },
                accumulate,
            )
        };
        return;
    }
    let dst = Ptr(c.as_mut_ptr());
    let (lhs, rhs) = (
        Ptr(a.data.as_ptr().cast_mut()),
        Ptr(b.data.as_ptr().cast_mut()),
    );
    let run = move |par| {
        // SAFETY: every operand holds its matrix at the strides given (sizes asserted by
        // `matmul`); `dst` comes from the unique borrow `c`, so the destination aliases nothing,
        // and `gemm` only reads `lhs` and `rhs`.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.get(),
                1,
                n as isize,
                accumulate,
                lhs.get().cast_const(),
                a_cs,
                a_rs,
                rhs.get().cast_const(),
                b_cs,
                b_rs,
                <T as Element>::one(),
                <T as Element>::one(),
                false,
                false,
                false,
                par,
            )
        }
    };
    if threads > 1 && flops >= PARALLEL_FLOPS {
        parallel::install(threads, || run(gemm::Parallelism::Rayon(threads)));
    } else {
        run(gemm::Parallelism::None);
    }
}

/// A matrix inside a buffer: element `(i, j)` at `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub struct View<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<T> View<'_, T> {
    fn holds(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `c[m×n] (+)= a[m×k] · b[k×n]` on the calling thread for matrices inside larger ones (`c` with
/// row stride `ldc`, columns contiguous): blocks of a convolution's columns.
#[allow(clippy::too_many_arguments)]
pub fn matmul_view_serial<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: View<'_, T>,
    b: View<'_, T>,
    c: &mut [T],
    ldc: usize,
    accumulate: bool,
) {
    assert!(a.holds(m, k) && b.holds(k, n));
    if m == 0 || n == 0 {
        return;
    }
    assert!(ldc >= n && (m - 1) * ldc + n <= c.len());
    let t = std::any::TypeId::of::<T>();
    if t == std::any::TypeId::of::<f32>()
        || t == std::any::TypeId::of::<f64>()
        || t == std::any::TypeId::of::<f16>()
    {
        if k == 0 {
            if !accumulate {
                for i in 0..m {
                    c[i * ldc..][..n].fill(T::zero());
                }
            }
            return;
        }
        if t == std::any::TypeId::of::<f32>() && own_sgemm(m, n, k) {
            let mat = |v: View<'_, T>| sgemm::Mat {
                ptr: v.data.as_ptr().cast(),
                rs: v.rs as isize,
                cs: v.cs as isize,
            };
            // SAFETY: `T` is f32 (type id); the views hold their matrices (asserted), `c` is a
            // unique borrow holding `m` rows of `n` at stride `ldc`; AVX-512F (`own_sgemm`).
            unsafe {
                sgemm::sgemm(
                    1,
                    m,
                    n,
                    k,
                    1.0,
                    mat(a),
                    mat(b),
                    sgemm::MatMut {
                        ptr: c.as_mut_ptr().cast(),
                        rs: ldc as isize,
                        cs: 1,
                    },
                    accumulate,
                )
            };
            return;
        }
        // SAFETY: `T` is one of gemm's float types (checked above, dispatched inside on its
        // size through the type parameter); the views hold their matrices (asserted), `c` is a
        // unique borrow holding `m` rows of `n` at stride `ldc`, and `gemm` only reads `a`, `b`.
        unsafe {
            let run = |dst: *mut T, lhs: *const T, rhs: *const T| {
                gemm::gemm(
                    m,
                    n,
                    k,
                    dst,
                    1,
                    ldc as isize,
                    accumulate,
                    lhs,
                    a.cs as isize,
                    a.rs as isize,
                    rhs,
                    b.cs as isize,
                    b.rs as isize,
                    T::one(),
                    T::one(),
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            };
            run(c.as_mut_ptr(), a.data.as_ptr(), b.data.as_ptr());
        }
        return;
    }
    for i in 0..m {
        for j in 0..n {
            let mut s = if accumulate {
                c[i * ldc + j].to_f64()
            } else {
                0.0
            };
            for p in 0..k {
                s += a.data[i * a.rs + p * a.cs].to_f64() * b.data[p * b.rs + j * b.cs].to_f64();
            }
            c[i * ldc + j] = T::from_f64(s);
        }
    }
}

/// `c[m×n] (+)= alpha · a[m×k] · b[k×n]` on the calling thread, over raw strided matrices
/// (element `(i, j)` of `a` at `a + i · a_strides.0 + j · a_strides.1`, likewise `b` and `c`):
/// the batched products of attention. `T` must be f32, f64 or f16. With `k == 0` the caller
/// fills `c` itself.
///
/// # Safety
/// `a` and `b` readable at every element of their `m × k` and `k × n` matrices, `c` writable at
/// every element of its `m × n` one, no two of which share an address, and `c` overlapping
/// neither `a` nor `b`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_strided_serial<T: Element>(
    (m, n, k): (usize, usize, usize),
    alpha: T,
    a: (*const T, isize, isize),
    b: (*const T, isize, isize),
    c: (*mut T, isize, isize),
    accumulate: bool,
) {
    let t = std::any::TypeId::of::<T>();
    if t == std::any::TypeId::of::<f32>() && own_sgemm(m, n, k) {
        // SAFETY: `T` is f32 (type id), so `alpha` is an f32 read at its own address; the
        // matrices are as the caller vouched; AVX-512F (`own_sgemm`).
        unsafe {
            let alpha = *(&alpha as *const T).cast::<f32>();
            sgemm::sgemm(
                1,
                m,
                n,
                k,
                alpha,
                sgemm::Mat { ptr: a.0.cast(), rs: a.1, cs: a.2 },
                sgemm::Mat { ptr: b.0.cast(), rs: b.1, cs: b.2 },
                sgemm::MatMut { ptr: c.0.cast(), rs: c.1, cs: c.2 },
                accumulate,
            )
        };
        return;
    }
    assert!(
        t == std::any::TypeId::of::<f32>()
            || t == std::any::TypeId::of::<f64>()
            || t == std::any::TypeId::of::<f16>(),
        "matmul_strided_serial: not a float type"
    );
    // SAFETY: `T` is one of `gemm`'s float types (asserted); the matrices are as the caller
    // vouched, and `gemm` only reads `a` and `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.0,
            c.2,
            c.1,
            accumulate,
            a.0,
            a.2,
            a.1,
            b.0,
            b.2,
            b.1,
            T::one(),
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

fn naive<T: Element>(
    m: usize,
    n: usize,
    k: usize,
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    c: &mut [T],
    accumulate: bool,
) {
    let at = |i: usize, p: usize| {
        if a.transposed {
            a.data[p * m + i]
        } else {
            a.data[i * k + p]
        }
    };
    let bt = |p: usize, j: usize| {
        if b.transposed {
            b.data[j * k + p]
        } else {
            b.data[p * n + j]
        }
    };
    for i in 0..m {
        for j in 0..n {
            let mut s = if accumulate {
                c[i * n + j].to_f64()
            } else {
                0.0
            };
            for p in 0..k {
                s += at(i, p).to_f64() * bt(p, j).to_f64();
            }
            c[i * n + j] = T::from_f64(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_products_with_a_transposed_rhs_match_an_f64_reference() {
        for &k in &[0usize, 1, 15, 17, 63, 64, 65, 130, 1024] {
            for &n in &[1usize, 3, 17, 100, 300] {
                for accumulate in [false, true] {
                    let a: Vec<f32> = (0..k).map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0).collect();
                    let bt: Vec<f32> =
                        (0..n * k).map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0).collect();
                    let c0: Vec<f32> = (0..n).map(|j| j as f32 - 1.5).collect();
                    let want: Vec<f32> = (0..n)
                        .map(|j| {
                            let s: f64 = (0..k).map(|p| a[p] as f64 * bt[j * k + p] as f64).sum();
                            (s + if accumulate { c0[j] as f64 } else { 0.0 }) as f32
                        })
                        .collect();
                    // through `matmul` (the CPU's widest copy) and the baseline body
                    let mut got = c0.clone();
                    let lhs = Operand { data: &a[..], transposed: false };
                    let rhs = Operand { data: &bt[..], transposed: true };
                    matmul(1, n, k, lhs, rhs, &mut got, accumulate);
                    let mut base = c0.clone();
                    dot_rows_body(&a, &bt, &mut base, accumulate);
                    for j in 0..n {
                        let tol = 1e-5 * (1.0 + k as f32);
                        for (v, what) in [(got[j], "matmul"), (base[j], "baseline")] {
                            assert!(
                                (v - want[j]).abs() <= tol,
                                "{what} k={k} n={n} acc={accumulate} at {j}: {v} vs {}",
                                want[j]
                            );
                        }
                    }
                }
            }
        }
    }

    fn reference(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0.0; x.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = x[r * cols + c];
            }
        }
        t
    }

    #[test]
    fn float_products_match_a_serial_reference_in_every_layout() {
        // odd sizes reach the edges of the micro-kernels (small ones under Miri, which
        // interprets the SIMD kernels step by step)
        let (m, n, k) = if cfg!(miri) { (9, 7, 13) } else { (67, 45, 129) };
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
        let want = reference(
            m,
            n,
            k,
            &a.iter().map(|&x| x as f64).collect::<Vec<_>>(),
            &b.iter().map(|&x| x as f64).collect::<Vec<_>>(),
        );
        let (at, bt) = (transpose(&a, m, k), transpose(&b, k, n));
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let mut c = vec![1.0f32; m * n];
            let op_a = Operand {
                data: if ta { &at } else { &a },
                transposed: ta,
            };
            let op_b = Operand {
                data: if tb { &bt } else { &b },
                transposed: tb,
            };
            matmul(m, n, k, op_a, op_b, &mut c, false);
            assert!(
                c.iter()
                    .zip(&want)
                    .all(|(x, y)| (*x as f64 - y).abs() < 1e-3),
                "{ta} {tb}"
            );
            matmul(m, n, k, op_a, op_b, &mut c, true);
            assert!(
                c.iter()
                    .zip(&want)
                    .all(|(x, y)| (*x as f64 - 2.0 * y).abs() < 1e-3)
            );
        }
        let ai: Vec<i32> = a.iter().map(|&x| x as i32).collect();
        let bi: Vec<i32> = b.iter().map(|&x| x as i32).collect();
        let mut ci = vec![0i32; m * n];
        let op = |d| Operand {
            data: d,
            transposed: false,
        };
        matmul(m, n, k, op(&ai), op(&bi), &mut ci, false);
        assert!(ci.iter().zip(&want).all(|(x, y)| *x as f64 == *y));
    }
}
