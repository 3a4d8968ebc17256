//! MXNet's linear-algebra operators `_linalg_*` (la_op): products (`gemm`, `gemm2`, `syrk`,
//! `trmm`, `trsm`), factorisations (`potrf`: Cholesky, `gelqf`: LQ, `syevd`: symmetric
//! eigendecomposition), `potri`, `inverse`, `det`, `slogdet`, `sumlogdiag` and the
//! diagonal/triangle copies (`extractdiag`, `makediag`, `extracttrian`, `maketrian`).
//!
//! Every op works on batches of matrices in the last two axes (gemm/gemm2: rows along `axis`),
//! float32 and float64, computing in f64 (the matrices are small; no LAPACK). Gradients are one
//! internal op per family member (`_mxrt_la_<op>_grad`) that evaluates la_op's backward formula
//! from the head gradients and the forward's inputs and outputs; the copies' and `inverse`'s
//! gradients are other public ops, so they differentiate again.

use super::nn::{as_refs, passed};
use super::{Entries, inputs};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::operator::def::{GradCtx, Signature, Val};
use crate::operator::kernel::Element;
use crate::operator::op::{Call, Plan, TensorDesc};
use crate::operator::param;
use crate::operator::tensor::Tensor;

fn read_f64(t: &Tensor) -> Vec<f64> {
    crate::with_element!(t.dtype, T => t.slice::<T>().iter().map(|v| v.to_f64()).collect())
}

fn write_f64(t: &mut Tensor, v: &[f64]) {
    crate::with_element!(t.dtype, T => {
        for (o, &x) in t.slice_mut::<T>().iter_mut().zip(v) {
            *o = T::from_f64(x);
        }
    })
}

fn err(call: &Call<'_>, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("operator {}: {msg}", call.name))
}

/// The inputs, checked: `n` of them, float32 or float64, one dtype.
fn float_inputs<'a>(call: &Call<'a>, n: usize) -> Result<&'a [TensorDesc]> {
    let ins = inputs(call, n)?;
    for (i, d) in ins.iter().enumerate() {
        if !matches!(d.dtype, DType::F32 | DType::F64) {
            return Err(err(
                call,
                format!(
                    "input {i} has dtype {}; this operation only supports float32 and float64",
                    d.dtype.name()
                ),
            ));
        }
        if d.dtype != ins[0].dtype {
            return Err(err(
                call,
                format!(
                    "inputs 0 and {i} have different dtypes ({} and {})",
                    ins[0].dtype.name(),
                    d.dtype.name()
                ),
            ));
        }
    }
    Ok(ins)
}

fn udims(shape: &[i64]) -> Vec<usize> {
    shape.iter().map(|&d| d.max(0) as usize).collect()
}

// ---------------------------------------------------------------------------------------------
// Dense matrices

/// A row-major `r × c` matrix of f64.
#[derive(Clone, Debug)]
struct Mat {
    r: usize,
    c: usize,
    d: Vec<f64>,
}

impl Mat {
    fn zeros(r: usize, c: usize) -> Mat {
        Mat {
            r,
            c,
            d: vec![0.0; r * c],
        }
    }
    fn eye(n: usize) -> Mat {
        let mut m = Mat::zeros(n, n);
        for i in 0..n {
            m.d[i * n + i] = 1.0;
        }
        m
    }
    fn at(&self, i: usize, j: usize) -> f64 {
        self.d[i * self.c + j]
    }
    fn set(&mut self, i: usize, j: usize, v: f64) {
        self.d[i * self.c + j] = v;
    }
    fn t(&self) -> Mat {
        let mut m = Mat::zeros(self.c, self.r);
        for i in 0..self.r {
            for j in 0..self.c {
                m.d[j * self.r + i] = self.d[i * self.c + j];
            }
        }
        m
    }
    /// `self` or its transpose.
    fn op(&self, trans: bool) -> Mat {
        if trans { self.t() } else { self.clone() }
    }
    fn mul(&self, b: &Mat) -> Mat {
        let mut m = Mat::zeros(self.r, b.c);
        for i in 0..self.r {
            for k in 0..self.c {
                let a = self.d[i * self.c + k];
                if a == 0.0 {
                    continue;
                }
                for j in 0..b.c {
                    m.d[i * b.c + j] += a * b.d[k * b.c + j];
                }
            }
        }
        m
    }
    fn scale(mut self, s: f64) -> Mat {
        self.d.iter_mut().for_each(|v| *v *= s);
        self
    }
    fn add(mut self, b: &Mat) -> Mat {
        self.d.iter_mut().zip(&b.d).for_each(|(v, w)| *v += w);
        self
    }
    fn sub(mut self, b: &Mat) -> Mat {
        self.d.iter_mut().zip(&b.d).for_each(|(v, w)| *v -= w);
        self
    }
    /// The lower (or upper) triangle with the diagonal; the other triangle zero.
    fn tri(mut self, lower: bool) -> Mat {
        for i in 0..self.r {
            for j in 0..self.c {
                if (lower && j > i) || (!lower && j < i) {
                    self.d[i * self.c + j] = 0.0;
                }
            }
        }
        self
    }
    /// The symmetric matrix whose lower triangle (with the diagonal) is `self`'s.
    fn sym_from_lower(mut self) -> Mat {
        for i in 0..self.r {
            for j in i + 1..self.c {
                self.d[i * self.c + j] = self.d[j * self.c + i];
            }
        }
        self
    }
}

/// Solves `T X = B` for a lower (or upper) triangular `T` (only that triangle is read).
fn tri_solve(t: &Mat, lower: bool, b: &Mat) -> Mat {
    let n = t.r;
    let mut x = b.clone();
    for col in 0..b.c {
        let order: Box<dyn Iterator<Item = usize>> = if lower {
            Box::new(0..n)
        } else {
            Box::new((0..n).rev())
        };
        for i in order {
            let mut s = x.at(i, col);
            let range = if lower { 0..i } else { i + 1..n };
            for k in range {
                s -= t.at(i, k) * x.at(k, col);
            }
            x.set(i, col, s / t.at(i, i));
        }
    }
    x
}

/// `op(T)⁻¹ B` for a triangular `T` (`trans`: `T`'s transpose).
fn tri_solve_op(t: &Mat, lower: bool, trans: bool, b: &Mat) -> Mat {
    if trans {
        tri_solve(&t.t(), !lower, b)
    } else {
        tri_solve(t, lower, b)
    }
}

/// `B op(T)⁻¹`: the transpose of `op(T)⁻ᵀ Bᵀ`.
fn tri_solve_right(t: &Mat, lower: bool, trans: bool, b: &Mat) -> Mat {
    tri_solve_op(t, lower, !trans, &b.t()).t()
}

/// The Cholesky factor `L` (`A = L Lᵀ`) of the symmetric matrix whose lower triangle is `a`'s;
/// `None` when it is not positive definite.
fn cholesky(a: &Mat) -> Option<Mat> {
    let n = a.r;
    let mut l = Mat::zeros(n, n);
    for j in 0..n {
        let mut s = a.at(j, j);
        for k in 0..j {
            s -= l.at(j, k) * l.at(j, k);
        }
        if s.is_nan() || s <= 0.0 {
            return None;
        }
        let d = s.sqrt();
        l.set(j, j, d);
        for i in j + 1..n {
            let mut s = a.at(i, j);
            for k in 0..j {
                s -= l.at(i, k) * l.at(j, k);
            }
            l.set(i, j, s / d);
        }
    }
    Some(l)
}

/// LU factorisation with partial pivoting (the largest magnitude, the first of equals):
/// `P A = L U` packed in one matrix (unit `L` below the diagonal), the 1-based row swapped with
/// each row (LAPACK's `ipiv`), and whether a pivot was zero.
fn lu(a: &Mat) -> (Mat, Vec<usize>, bool) {
    let n = a.r;
    let mut m = a.clone();
    let mut piv = vec![0usize; n];
    let mut singular = false;
    for k in 0..n {
        let mut p = k;
        for i in k + 1..n {
            if m.at(i, k).abs() > m.at(p, k).abs() {
                p = i;
            }
        }
        piv[k] = p + 1;
        if p != k {
            for j in 0..n {
                m.d.swap(k * n + j, p * n + j);
            }
        }
        let d = m.at(k, k);
        if d == 0.0 {
            singular = true;
            continue;
        }
        for i in k + 1..n {
            let f = m.at(i, k) / d;
            m.set(i, k, f);
            for j in k + 1..n {
                let v = m.at(i, j) - f * m.at(k, j);
                m.set(i, j, v);
            }
        }
    }
    (m, piv, singular)
}

/// The sign and the log of the magnitude of the determinant from an LU factorisation.
fn lu_slogdet(lu: &Mat, piv: &[usize]) -> (f64, f64) {
    let mut sign = 1.0;
    let mut log = 0.0;
    for (j, &p) in piv.iter().enumerate() {
        if p != j + 1 {
            sign = -sign;
        }
        let d = lu.at(j, j);
        sign *= if d > 0.0 {
            1.0
        } else if d < 0.0 {
            -1.0
        } else {
            0.0
        };
        log += d.abs().ln();
    }
    (sign, log)
}

/// `A⁻¹` from its LU factorisation.
fn lu_inverse(lu: &Mat, piv: &[usize]) -> Mat {
    let n = lu.r;
    let mut b = Mat::eye(n);
    for (k, &p) in piv.iter().enumerate() {
        if p - 1 != k {
            for j in 0..n {
                b.d.swap(k * n + j, (p - 1) * n + j);
            }
        }
    }
    // L has a unit diagonal
    for col in 0..n {
        for i in 0..n {
            let mut s = b.at(i, col);
            for k in 0..i {
                s -= lu.at(i, k) * b.at(k, col);
            }
            b.set(i, col, s);
        }
    }
    tri_solve(lu, false, &b)
}

/// Eigenvalues (ascending) and eigenvectors (the rows of `U`, `A = Uᵀ diag(λ) U`) of the
/// symmetric matrix whose lower triangle is `a`'s, by cyclic Jacobi rotations; each row's
/// largest-magnitude entry (the first of equals) is made positive, as MXNet's syevd does.
fn sym_eig(a: &Mat) -> (Mat, Vec<f64>) {
    let n = a.r;
    let mut m = a.clone().tri(true).sym_from_lower();
    let mut v = Mat::eye(n); // columns: eigenvectors
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| m.at(i, j).powi(2))
            .sum();
        let scale: f64 = m.d.iter().map(|x| x * x).sum();
        if off <= 1e-30 * scale || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = m.at(p, q);
                if apq == 0.0 {
                    continue;
                }
                let theta = (m.at(q, q) - m.at(p, p)) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (mkp, mkq) = (m.at(k, p), m.at(k, q));
                    m.set(k, p, c * mkp - s * mkq);
                    m.set(k, q, s * mkp + c * mkq);
                }
                for k in 0..n {
                    let (mpk, mqk) = (m.at(p, k), m.at(q, k));
                    m.set(p, k, c * mpk - s * mqk);
                    m.set(q, k, s * mpk + c * mqk);
                }
                for k in 0..n {
                    let (vkp, vkq) = (v.at(k, p), v.at(k, q));
                    v.set(k, p, c * vkp - s * vkq);
                    v.set(k, q, s * vkp + c * vkq);
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| m.at(i, i).total_cmp(&m.at(j, j)));
    let vals: Vec<f64> = order.iter().map(|&i| m.at(i, i)).collect();
    let mut u = Mat::zeros(n, n);
    for (r, &i) in order.iter().enumerate() {
        let mut best = 0;
        for k in 0..n {
            u.set(r, k, v.at(k, i));
            if v.at(k, i).abs() > v.at(best, i).abs() {
                best = k;
            }
        }
        if n > 0 && v.at(best, i) < 0.0 {
            for k in 0..n {
                u.set(r, k, -v.at(k, i));
            }
        }
    }
    (u, vals)
}

/// LQ factorisation of an `m × n` matrix (`m ≤ n`) by Householder reflections as LAPACK's
/// gelqf/orglq compute it: `A = L Q`, `L` lower triangular `m × m`, `Q`'s rows orthonormal.
fn lq(a: &Mat) -> (Mat, Mat) {
    let (m, n) = (a.r, a.c);
    let mut w = a.clone();
    let mut refl: Vec<(f64, Vec<f64>)> = Vec::with_capacity(m);
    for i in 0..m {
        let alpha = w.at(i, i);
        let xnorm = (i + 1..n).map(|j| w.at(i, j).powi(2)).sum::<f64>().sqrt();
        let mut v = vec![0.0; n];
        v[i] = 1.0;
        if xnorm == 0.0 {
            refl.push((0.0, v));
            continue;
        }
        let h = alpha.hypot(xnorm);
        let beta = if alpha >= 0.0 { -h } else { h };
        let tau = (beta - alpha) / beta;
        for j in i + 1..n {
            v[j] = w.at(i, j) / (alpha - beta);
        }
        // rows i+1.. of w times H = I - tau v vᵀ
        for r in i + 1..m {
            let dot: f64 = (i..n).map(|j| w.at(r, j) * v[j]).sum();
            for j in i..n {
                let x = w.at(r, j) - tau * dot * v[j];
                w.set(r, j, x);
            }
        }
        w.set(i, i, beta);
        for j in i + 1..n {
            w.set(i, j, 0.0);
        }
        refl.push((tau, v));
    }
    let mut l = Mat::zeros(m, m);
    for i in 0..m {
        for j in 0..=i {
            l.set(i, j, w.at(i, j));
        }
    }
    // Q: the first m rows of H_{m-1} ··· H_0
    let mut q = Mat::zeros(m, n);
    for i in 0..m {
        q.set(i, i, 1.0);
    }
    for (tau, v) in refl.iter().rev() {
        if *tau == 0.0 {
            continue;
        }
        for r in 0..m {
            let dot: f64 = (0..n).map(|j| q.at(r, j) * v[j]).sum();
            for j in 0..n {
                let x = q.at(r, j) - tau * dot * v[j];
                q.set(r, j, x);
            }
        }
    }
    (q, l)
}

// ---------------------------------------------------------------------------------------------
// Batches of matrices in arrays

/// The matrices of an array: `outer × inner` of them, `rows × cols` each, row `r` along the
/// row axis and column `c` along the last axis (gemm's `axis`: the axes between the row axis
/// and the last one are batch axes too).
#[derive(Clone, Copy, Debug)]
struct Layout {
    outer: usize,
    inner: usize,
    rows: usize,
    cols: usize,
}

impl Layout {
    /// Matrices in the last two axes.
    fn last2(shape: &[i64]) -> Layout {
        let d = udims(shape);
        let n = d.len();
        Layout {
            outer: d[..n - 2].iter().product(),
            inner: 1,
            rows: d[n - 2],
            cols: d[n - 1],
        }
    }
    /// Rows along `axis` (`axis < ndim - 1`).
    fn with_axis(shape: &[i64], axis: usize) -> Layout {
        let d = udims(shape);
        let n = d.len();
        Layout {
            outer: d[..axis].iter().product(),
            inner: d[axis + 1..n - 1].iter().product(),
            rows: d[axis],
            cols: d[n - 1],
        }
    }
    fn batch(&self) -> usize {
        self.outer * self.inner
    }
    fn index(&self, k: usize, r: usize, c: usize) -> usize {
        let (o, i) = (k / self.inner.max(1), k % self.inner.max(1));
        ((o * self.rows + r) * self.inner + i) * self.cols + c
    }
    fn get(&self, data: &[f64], k: usize) -> Mat {
        let mut m = Mat::zeros(self.rows, self.cols);
        for r in 0..self.rows {
            for c in 0..self.cols {
                m.d[r * self.cols + c] = data[self.index(k, r, c)];
            }
        }
        m
    }
    fn put(&self, data: &mut [f64], k: usize, m: &Mat) {
        for r in 0..self.rows {
            for c in 0..self.cols {
                data[self.index(k, r, c)] = m.d[r * self.cols + c];
            }
        }
    }
}

/// Checks that `d` is a batch of matrices (at least 2 dimensions) and, with `square`, of square
/// ones; returns its layout.
fn matrices(call: &Call<'_>, d: &TensorDesc, what: &str, square: bool) -> Result<Layout> {
    if d.shape.len() < 2 {
        return Err(err(
            call,
            format!(
                "{what} must have at least 2 dimensions, got shape {:?}",
                &d.shape[..]
            ),
        ));
    }
    let l = Layout::last2(&d.shape);
    if square && l.rows != l.cols {
        return Err(err(
            call,
            format!(
                "{what} must be a tensor of square matrices, got shape {:?}",
                &d.shape[..]
            ),
        ));
    }
    Ok(l)
}

/// Checks that `a` and `b` agree on their batch axes (all but the last two).
fn same_batch(call: &Call<'_>, a: &TensorDesc, b: &TensorDesc) -> Result<()> {
    let (na, nb) = (a.shape.len(), b.shape.len());
    if na != nb || a.shape[..na - 2] != b.shape[..nb - 2] {
        return Err(err(
            call,
            format!(
                "shapes of inputs 0 and 1 must be the same except for the last two dimensions, got {:?} and {:?}",
                &a.shape[..],
                &b.shape[..]
            ),
        ));
    }
    Ok(())
}

/// A plan whose kernel maps each batch item's input matrices to its output matrices: `ins`
/// and `outs` are the layouts of the inputs and outputs (in order), `f` gets item `k`'s inputs
/// and returns its outputs (or an error message).
fn batched(
    outs: Vec<TensorDesc>,
    in_layouts: Vec<Layout>,
    out_layouts: Vec<Layout>,
    name: String,
    f: impl Fn(usize, &[Mat]) -> std::result::Result<Vec<Mat>, String> + Send + 'static,
) -> Plan {
    Plan::new(outs, move |k| {
        let ins: Vec<Vec<f64>> = k.inputs.iter().map(read_f64).collect();
        let mut res: Vec<Vec<f64>> = k.outputs.iter().map(|t| vec![0.0; t.len()]).collect();
        let batch = out_layouts.first().map_or(0, |l| l.batch());
        for b in 0..batch {
            let ms: Vec<Mat> = in_layouts
                .iter()
                .zip(&ins)
                .map(|(l, d)| l.get(d, b))
                .collect();
            let outs = f(b, &ms).map_err(|m| Error::invalid(format!("operator {name}: {m}")))?;
            for ((l, d), m) in out_layouts.iter().zip(res.iter_mut()).zip(&outs) {
                l.put(d, b, m);
            }
        }
        for (t, v) in k.outputs.iter_mut().zip(&res) {
            write_f64(t, v);
        }
        Ok(())
    })
}

/// A layout for vectors (the last axis) as `1 × len` matrices.
fn vectors(shape: &[i64]) -> Layout {
    let d = udims(shape);
    let n = d.len();
    Layout {
        outer: d[..n.saturating_sub(1)].iter().product(),
        inner: 1,
        rows: 1,
        cols: d.last().copied().unwrap_or(1),
    }
}

/// A layout for one number per matrix.
fn scalars(batch: usize) -> Layout {
    Layout {
        outer: batch,
        inner: 1,
        rows: 1,
        cols: 1,
    }
}

fn scalar(v: f64) -> Mat {
    Mat {
        r: 1,
        c: 1,
        d: vec![v],
    }
}

fn flag(call: &Call<'_>, key: &str, default: bool) -> Result<bool> {
    call.params.or(key, param::boolean, "a boolean", default)
}

fn number(call: &Call<'_>, key: &str, default: f64) -> Result<f64> {
    call.params.or(key, param::float, "a number", default)
}

// ---------------------------------------------------------------------------------------------
// gemm, gemm2

struct Gemm {
    ta: bool,
    tb: bool,
    alpha: f64,
    beta: f64,
    axis: usize,
}

fn gemm_params(call: &Call<'_>, with_c: bool, ndim: usize) -> Result<Gemm> {
    let ta = flag(call, "transpose_a", false)?;
    let tb = flag(call, "transpose_b", false)?;
    let alpha = number(call, "alpha", 1.0)?;
    let beta = if with_c {
        number(call, "beta", 1.0)?
    } else {
        0.0
    };
    let axis = call.params.or("axis", param::int, "an integer", -2)?;
    let a = if axis < 0 { axis + ndim as i64 } else { axis };
    if a < 0 || a >= ndim as i64 - 1 {
        return Err(err(call, format!("invalid row axis ({axis})")));
    }
    Ok(Gemm {
        ta,
        tb,
        alpha,
        beta,
        axis: a as usize,
    })
}

/// The output shape of `op(A) op(B)` with rows along `axis`.
fn gemm_shape(call: &Call<'_>, a: &TensorDesc, b: &TensorDesc, g: &Gemm) -> Result<Vec<i64>> {
    let n = a.shape.len();
    for (i, (&x, &y)) in a.shape.iter().zip(&b.shape).enumerate().take(n - 1) {
        if i != g.axis && x != y {
            return Err(err(
                call,
                format!(
                    "shapes of inputs 0, 1 must be the same except on the row/col axis, got {:?} and {:?}",
                    &a.shape[..],
                    &b.shape[..]
                ),
            ));
        }
    }
    let (ar, ac) = (a.shape[g.axis], a.shape[n - 1]);
    let (br, bc) = (b.shape[g.axis], b.shape[n - 1]);
    let inner_a = if g.ta { ar } else { ac };
    let inner_b = if g.tb { bc } else { br };
    if inner_a != inner_b {
        return Err(err(
            call,
            format!(
                "incompatible matrix dimensions for multiplication: {:?} and {:?} (transpose_a={}, transpose_b={})",
                &a.shape[..],
                &b.shape[..],
                g.ta,
                g.tb
            ),
        ));
    }
    let mut out = a.shape.to_vec();
    out[g.axis] = if g.ta { ac } else { ar };
    out[n - 1] = if g.tb { br } else { bc };
    Ok(out)
}

fn gemm_check(call: &Call<'_>, ins: &[TensorDesc]) -> Result<()> {
    let n = ins[0].shape.len();
    if n < 2 || ins[1].shape.len() != n {
        return Err(err(
            call,
            format!(
                "inputs must be tensors of matrices with one number of dimensions, got shapes {:?} and {:?}",
                &ins[0].shape[..],
                &ins[1].shape[..]
            ),
        ));
    }
    Ok(())
}

/// `_linalg_gemm(A, B, C)`: `alpha · op(A) op(B) + beta · C`; `_linalg_gemm2(A, B)`:
/// `alpha · op(A) op(B)`.
fn gemm(call: &Call<'_>) -> Result<Plan> {
    let with_c = !call.name.ends_with("gemm2");
    let ins = float_inputs(call, if with_c { 3 } else { 2 })?;
    gemm_check(call, ins)?;
    let g = gemm_params(call, with_c, ins[0].shape.len())?;
    let shape = gemm_shape(call, &ins[0], &ins[1], &g)?;
    if with_c && ins[2].shape[..] != shape[..] {
        return Err(err(
            call,
            format!(
                "C has shape {:?}; the product has shape {shape:?}",
                &ins[2].shape[..]
            ),
        ));
    }
    let lay = |s: &[i64]| Layout::with_axis(s, g.axis);
    let mut in_l = vec![lay(&ins[0].shape), lay(&ins[1].shape)];
    if with_c {
        in_l.push(lay(&shape));
    }
    let out = TensorDesc::new(&shape, ins[0].dtype);
    Ok(batched(
        vec![out],
        in_l,
        vec![lay(&shape)],
        call.name.to_string(),
        move |_, m| {
            let p = m[0].op(g.ta).mul(&m[1].op(g.tb)).scale(g.alpha);
            Ok(vec![if with_c {
                p.add(&m[2].clone().scale(g.beta))
            } else {
                p
            }])
        },
    ))
}

/// `_mxrt_la_gemm_grad(dD, A, B)` → `dA, dB, dC` (`_mxrt_la_gemm2_grad`: `dA, dB`).
fn gemm_backward(call: &Call<'_>) -> Result<Plan> {
    let with_c = call.name == "_mxrt_la_gemm_grad";
    let ins = float_inputs(call, 3)?;
    let (dd, a, b) = (&ins[0], &ins[1], &ins[2]);
    let g = gemm_params(call, with_c, a.shape.len())?;
    let lay = |s: &[i64]| Layout::with_axis(s, g.axis);
    let mut outs = vec![a.clone(), b.clone()];
    let mut out_l = vec![lay(&a.shape), lay(&b.shape)];
    if with_c {
        outs.push(dd.clone());
        out_l.push(lay(&dd.shape));
    }
    Ok(batched(
        outs,
        vec![lay(&dd.shape), lay(&a.shape), lay(&b.shape)],
        out_l,
        call.name.to_string(),
        move |_, m| {
            let (dd, a, b) = (&m[0], &m[1], &m[2]);
            let dx = dd.mul(&b.op(g.tb).t()).scale(g.alpha);
            let dy = a.op(g.ta).t().mul(dd).scale(g.alpha);
            let mut r = vec![dx.op(g.ta), dy.op(g.tb)];
            if with_c {
                r.push(dd.clone().scale(g.beta));
            }
            Ok(r)
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// potrf, potri

/// `_linalg_potrf(A)`: the Cholesky factor (`lower`: `A = L Lᵀ`, else `A = Uᵀ U`), reading
/// that triangle of `A`.
fn potrf(call: &Call<'_>) -> Result<Plan> {
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", true)?;
    let lower = flag(call, "lower", true)?;
    Ok(batched(
        vec![a],
        vec![l],
        vec![l],
        call.name.to_string(),
        move |k, m| {
            let src = if lower { m[0].clone() } else { m[0].t() };
            let f = cholesky(&src).ok_or_else(|| {
                format!(
                    "the Cholesky factorisation failed for matrix {k}: the input matrix is either not symmetric or not positive definite"
                )
            })?;
            Ok(vec![if lower { f } else { f.t() }])
        },
    ))
}

/// `_mxrt_la_potrf_grad(dB, B)`: `dA = ½ L⁻ᵀ sym(tril(Lᵀ dL)) L⁻¹` (`L = B`, or `Bᵀ` for upper).
fn potrf_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = float_inputs(call, 2)?;
    let l = matrices(call, &ins[1], "B", true)?;
    let lower = flag(call, "lower", true)?;
    Ok(batched(
        vec![ins[1].clone()],
        vec![l, l],
        vec![l],
        call.name.to_string(),
        move |_, m| {
            let (dl, f) = if lower {
                (m[0].clone(), m[1].clone().tri(true))
            } else {
                (m[0].t(), m[1].t().tri(true))
            };
            let s = f.t().mul(&dl).sym_from_lower();
            let x = tri_solve_op(&f, true, true, &s);
            let da = tri_solve_right(&f, true, false, &x).scale(0.5);
            Ok(vec![da])
        },
    ))
}

/// `_linalg_potri(B)`: `A⁻¹` from its Cholesky factor (`lower`: `(B Bᵀ)⁻¹`, else `(Bᵀ B)⁻¹`).
fn potri(call: &Call<'_>) -> Result<Plan> {
    let b = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &b, "B", true)?;
    let lower = flag(call, "lower", true)?;
    Ok(batched(
        vec![b],
        vec![l],
        vec![l],
        call.name.to_string(),
        move |_, m| {
            let f = if lower {
                m[0].clone().tri(true)
            } else {
                m[0].t().tri(true)
            };
            let inv = tri_solve(&f, true, &Mat::eye(f.r));
            Ok(vec![inv.t().mul(&inv)])
        },
    ))
}

/// `_mxrt_la_potri_grad(dA, B, A)`: `dB = -tril(A (dA + dAᵀ) B⁻ᵀ)` (upper:
/// `-triu(B⁻ᵀ (dA + dAᵀ) A)`).
fn potri_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = float_inputs(call, 3)?;
    let l = matrices(call, &ins[1], "B", true)?;
    let lower = flag(call, "lower", true)?;
    Ok(batched(
        vec![ins[1].clone()],
        vec![l, l, l],
        vec![l],
        call.name.to_string(),
        move |_, m| {
            let (da, b, a) = (&m[0], m[1].clone().tri(lower), &m[2]);
            let s = da.clone().add(&da.t());
            let db = if lower {
                tri_solve_right(&b, true, true, &a.mul(&s))
            } else {
                tri_solve_op(&b, false, true, &s.mul(a))
            };
            Ok(vec![db.scale(-1.0).tri(lower)])
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// trmm, trsm

#[derive(Clone, Copy)]
struct Tri {
    transpose: bool,
    rightside: bool,
    lower: bool,
    alpha: f64,
}

fn tri_params(call: &Call<'_>) -> Result<Tri> {
    Ok(Tri {
        transpose: flag(call, "transpose", false)?,
        rightside: flag(call, "rightside", false)?,
        lower: flag(call, "lower", true)?,
        alpha: number(call, "alpha", 1.0)?,
    })
}

/// Shapes of `trmm`/`trsm`: `A` square, `B` with `A`'s batch, the product's dimensions agreeing.
fn tri_check(call: &Call<'_>, a: &TensorDesc, b: &TensorDesc, t: &Tri) -> Result<(Layout, Layout)> {
    let la = matrices(call, a, "A", true)?;
    let lb = matrices(call, b, "B", false)?;
    same_batch(call, a, b)?;
    let inner = if t.rightside { lb.cols } else { lb.rows };
    if inner != la.rows {
        return Err(err(
            call,
            format!(
                "incompatible matrix dimensions for multiplication: {:?} and {:?} (rightside={})",
                &a.shape[..],
                &b.shape[..],
                t.rightside
            ),
        ));
    }
    Ok((la, lb))
}

/// `_linalg_trmm(A, B)`: `alpha · op(A) B` (or `alpha · B op(A)`), `A` triangular;
/// `_linalg_trsm(A, B)`: the solution of `op(A) X = alpha · B` (or `X op(A) = alpha · B`).
fn trmm_trsm(call: &Call<'_>) -> Result<Plan> {
    let solve = call.name.ends_with("trsm");
    let ins = float_inputs(call, 2)?;
    let t = tri_params(call)?;
    let (la, lb) = tri_check(call, &ins[0], &ins[1], &t)?;
    Ok(batched(
        vec![ins[1].clone()],
        vec![la, lb],
        vec![lb],
        call.name.to_string(),
        move |_, m| {
            let a = m[0].clone().tri(t.lower);
            let b = m[1].clone().scale(t.alpha);
            Ok(vec![match (solve, t.rightside) {
                (false, false) => a.op(t.transpose).mul(&b),
                (false, true) => b.mul(&a.op(t.transpose)),
                (true, false) => tri_solve_op(&a, t.lower, t.transpose, &b),
                (true, true) => tri_solve_right(&a, t.lower, t.transpose, &b),
            }])
        },
    ))
}

/// `_mxrt_la_trmm_grad(dC, A, B)` → `dA, dB`; `_mxrt_la_trsm_grad(dC, A, C)` → `dA, dB`.
fn trmm_trsm_backward(call: &Call<'_>) -> Result<Plan> {
    let solve = call.name == "_mxrt_la_trsm_grad";
    let ins = float_inputs(call, 3)?;
    let t = tri_params(call)?;
    let (la, lb) = tri_check(call, &ins[1], &ins[2], &t)?;
    Ok(batched(
        vec![ins[1].clone(), ins[2].clone()],
        vec![lb, la, lb],
        vec![la, lb],
        call.name.to_string(),
        move |_, m| {
            let (dc, a) = (&m[0], m[1].clone().tri(t.lower));
            let x = a.op(t.transpose);
            let (dx, db) = if !solve {
                let b = &m[2];
                if t.rightside {
                    // C = α B X
                    (b.t().mul(dc).scale(t.alpha), dc.mul(&x.t()).scale(t.alpha))
                } else {
                    // C = α X B
                    (dc.mul(&b.t()).scale(t.alpha), x.t().mul(dc).scale(t.alpha))
                }
            } else {
                let c = &m[2];
                if t.rightside {
                    // C = α B X⁻¹: dB = α dC X⁻ᵀ, dX = -Cᵀ dC X⁻ᵀ
                    let g = tri_solve_right(&a, t.lower, !t.transpose, dc);
                    (c.t().mul(&g).scale(-1.0), g.scale(t.alpha))
                } else {
                    // C = α X⁻¹ B: dB = α X⁻ᵀ dC, dX = -X⁻ᵀ dC Cᵀ
                    let g = tri_solve_op(&a, t.lower, !t.transpose, dc);
                    (g.mul(&c.t()).scale(-1.0), g.scale(t.alpha))
                }
            };
            Ok(vec![dx.op(t.transpose).tri(t.lower), db])
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// sumlogdiag, syrk

/// The shape of one number per matrix: the batch axes, `(1,)` for a single matrix.
fn per_matrix_shape(shape: &[i64]) -> Vec<i64> {
    let n = shape.len();
    if n <= 2 {
        vec![1]
    } else {
        shape[..n - 2].to_vec()
    }
}

/// `_linalg_sumlogdiag(A)`: `Σ log A_ii` per matrix.
fn sumlogdiag(call: &Call<'_>) -> Result<Plan> {
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", true)?;
    let out = TensorDesc::new(&per_matrix_shape(&a.shape), a.dtype);
    Ok(batched(
        vec![out],
        vec![l],
        vec![scalars(l.batch())],
        call.name.to_string(),
        |_, m| Ok(vec![scalar((0..m[0].r).map(|i| m[0].at(i, i).ln()).sum())]),
    ))
}

/// `_mxrt_la_sumlogdiag_grad(dB, A)`: `dA = diag(dB / A_ii)`.
fn sumlogdiag_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = float_inputs(call, 2)?;
    let l = matrices(call, &ins[1], "A", true)?;
    Ok(batched(
        vec![ins[1].clone()],
        vec![scalars(l.batch()), l],
        vec![l],
        call.name.to_string(),
        |_, m| {
            let mut d = Mat::zeros(m[1].r, m[1].c);
            for i in 0..d.r {
                d.set(i, i, m[0].d[0] / m[1].at(i, i));
            }
            Ok(vec![d])
        },
    ))
}

/// `_linalg_syrk(A)`: `alpha · A Aᵀ` (`transpose`: `alpha · Aᵀ A`).
fn syrk(call: &Call<'_>) -> Result<Plan> {
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", false)?;
    let tr = flag(call, "transpose", false)?;
    let alpha = number(call, "alpha", 1.0)?;
    let n = if tr { l.cols } else { l.rows };
    let mut shape = a.shape.to_vec();
    let nd = shape.len();
    shape[nd - 2] = n as i64;
    shape[nd - 1] = n as i64;
    let out = TensorDesc::new(&shape, a.dtype);
    Ok(batched(
        vec![out],
        vec![l],
        vec![Layout::last2(&shape)],
        call.name.to_string(),
        move |_, m| {
            let x = m[0].op(tr);
            Ok(vec![x.mul(&x.t()).scale(alpha)])
        },
    ))
}

/// `_mxrt_la_syrk_grad(dB, A)`: `alpha (dB + dBᵀ) A` (`transpose`: `alpha A (dB + dBᵀ)`).
fn syrk_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = float_inputs(call, 2)?;
    let tr = flag(call, "transpose", false)?;
    let alpha = number(call, "alpha", 1.0)?;
    let la = matrices(call, &ins[1], "A", false)?;
    let lb = matrices(call, &ins[0], "dB", true)?;
    Ok(batched(
        vec![ins[1].clone()],
        vec![lb, la],
        vec![la],
        call.name.to_string(),
        move |_, m| {
            let s = m[0].clone().add(&m[0].t());
            Ok(vec![
                if tr { m[1].mul(&s) } else { s.mul(&m[1]) }.scale(alpha),
            ])
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// Diagonals and triangles

fn offset(call: &Call<'_>) -> Result<i64> {
    call.params.or("offset", param::int, "an integer", 0)
}

/// Positions `(row, col)` of the diagonal with offset `k` of an `n × n` matrix.
fn diag_positions(n: usize, k: i64) -> Vec<(usize, usize)> {
    let len = n.saturating_sub(k.unsigned_abs() as usize);
    (0..len)
        .map(|i| {
            if k >= 0 {
                (i, i + k as usize)
            } else {
                (i + (-k) as usize, i)
            }
        })
        .collect()
}

/// Positions of the triangle with offset `k` of an `n × n` matrix in MXNet's packing order:
/// below the diagonal row by row, above it (`k > 0`, or `k = 0` and not `lower`) column by
/// column.
fn trian_positions(n: usize, k: i64, lower: bool) -> Vec<(usize, usize)> {
    let m = n.saturating_sub(k.unsigned_abs() as usize);
    let upper = k > 0 || (k == 0 && !lower);
    let s = k.unsigned_abs() as usize;
    let mut v = Vec::with_capacity(m * (m + 1) / 2);
    for r in 0..m {
        for c in 0..=r {
            v.push(if upper { (c, r + s) } else { (r + s, c) });
        }
    }
    v
}

/// `_linalg_extractdiag` / `_linalg_extracttrian`: the diagonal (triangle) of each matrix.
fn extract(call: &Call<'_>) -> Result<Plan> {
    let trian = call.name.ends_with("trian");
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", true)?;
    let k = offset(call)?;
    let lower = if trian {
        flag(call, "lower", true)?
    } else {
        true
    };
    let n = l.rows;
    if n as i64 - k.abs() <= 0 {
        return Err(err(
            call,
            format!("illegal offset {k} for extraction from matrices of dimension {n}"),
        ));
    }
    let pos = if trian {
        trian_positions(n, k, lower)
    } else {
        diag_positions(n, k)
    };
    let mut shape = a.shape[..a.shape.len() - 1].to_vec();
    let last = shape.len() - 1;
    shape[last] = pos.len() as i64;
    let out = TensorDesc::new(&shape, a.dtype);
    Ok(batched(
        vec![out],
        vec![l],
        vec![vectors(&shape)],
        call.name.to_string(),
        move |_, m| {
            Ok(vec![Mat {
                r: 1,
                c: pos.len(),
                d: pos.iter().map(|&(r, c)| m[0].at(r, c)).collect(),
            }])
        },
    ))
}

/// `_linalg_makediag` / `_linalg_maketrian`: matrices with the given diagonal (triangle),
/// zero elsewhere.
fn make(call: &Call<'_>) -> Result<Plan> {
    let trian = call.name.ends_with("trian");
    let a = float_inputs(call, 1)?[0].clone();
    if a.shape.is_empty() {
        return Err(err(call, "the input must have at least 1 dimension"));
    }
    let k = offset(call)?;
    let lower = if trian {
        flag(call, "lower", true)?
    } else {
        true
    };
    let len = *a.shape.last().expect("checked") as usize;
    let n = if trian {
        let m = ((((8 * len + 1) as f64).sqrt() - 1.0) * 0.5 + 0.5).floor() as usize;
        if m * (m + 1) / 2 != len {
            return Err(err(
                call,
                format!(
                    "the last axis ({len}) is not a triangular number: invalid input for maketrian"
                ),
            ));
        }
        m + k.unsigned_abs() as usize
    } else {
        len + k.unsigned_abs() as usize
    };
    let pos = if trian {
        trian_positions(n, k, lower)
    } else {
        diag_positions(n, k)
    };
    let mut shape = a.shape.to_vec();
    let last = shape.len() - 1;
    shape[last] = n as i64;
    shape.push(n as i64);
    let out = TensorDesc::new(&shape, a.dtype);
    Ok(batched(
        vec![out],
        vec![vectors(&a.shape)],
        vec![Layout::last2(&shape)],
        call.name.to_string(),
        move |_, m| {
            let mut o = Mat::zeros(n, n);
            for (&(r, c), &v) in pos.iter().zip(&m[0].d) {
                o.set(r, c, v);
            }
            Ok(vec![o])
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// gelqf, syevd

/// `_linalg_gelqf(A)`: `Q, L` with `A = L Q`.
fn gelqf(call: &Call<'_>) -> Result<Plan> {
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", false)?;
    if l.rows > l.cols {
        return Err(err(
            call,
            format!(
                "input A shape {:?} is wrong: the last dimension must be >= the second to last",
                &a.shape[..]
            ),
        ));
    }
    let mut ls = a.shape.to_vec();
    let nd = ls.len();
    ls[nd - 1] = ls[nd - 2];
    let lout = TensorDesc::new(&ls, a.dtype);
    Ok(batched(
        vec![a, lout],
        vec![l],
        vec![l, Layout::last2(&ls)],
        call.name.to_string(),
        |_, m| {
            let (q, l) = lq(&m[0]);
            Ok(vec![q, l])
        },
    ))
}

/// `_mxrt_la_gelqf_grad(dQ, dL, Q, L)`: `dA = L⁻ᵀ (dQ + sym(tril(M)) Q)`,
/// `M = Lᵀ dL - dQ Qᵀ`.
fn gelqf_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = float_inputs(call, 4)?;
    let lq_ = matrices(call, &ins[2], "Q", false)?;
    let ll = matrices(call, &ins[3], "L", true)?;
    Ok(batched(
        vec![ins[2].clone()],
        vec![lq_, ll, lq_, ll],
        vec![lq_],
        call.name.to_string(),
        |_, m| {
            let (dq, dl, q, l) = (&m[0], &m[1], &m[2], m[3].clone().tri(true));
            let mm = l.t().mul(dl).sub(&dq.mul(&q.t())).sym_from_lower();
            let x = dq.clone().add(&mm.mul(q));
            Ok(vec![tri_solve_op(&l, true, true, &x)])
        },
    ))
}

/// `_linalg_syevd(A)`: `U, L` with `A = Uᵀ diag(L) U` (eigenvectors in `U`'s rows,
/// eigenvalues ascending).
fn syevd(call: &Call<'_>) -> Result<Plan> {
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", true)?;
    let ls = a.shape[..a.shape.len() - 1].to_vec();
    let lout = TensorDesc::new(&ls, a.dtype);
    Ok(batched(
        vec![a, lout],
        vec![l],
        vec![l, vectors(&ls)],
        call.name.to_string(),
        |_, m| {
            let (u, vals) = sym_eig(&m[0]);
            Ok(vec![
                u,
                Mat {
                    r: 1,
                    c: vals.len(),
                    d: vals,
                },
            ])
        },
    ))
}

/// `_mxrt_la_syevd_grad(dU, dL, U, L)`: `dA = Uᵀ Y U`, `Y` symmetric with
/// `Y_ij = (X_ij - X_ji) / 2 max(λ_i - λ_j, eps)` below the diagonal (`X = dU Uᵀ`) and `dL` on it.
fn syevd_backward(call: &Call<'_>) -> Result<Plan> {
    let ins = float_inputs(call, 4)?;
    let lu_ = matrices(call, &ins[2], "U", true)?;
    let eps = if ins[2].dtype == DType::F32 {
        1e-30
    } else {
        1e-100
    };
    Ok(batched(
        vec![ins[2].clone()],
        vec![lu_, vectors(&ins[1].shape), lu_, vectors(&ins[3].shape)],
        vec![lu_],
        call.name.to_string(),
        move |_, m| {
            let (du, dl, u, l) = (&m[0], &m[1].d, &m[2], &m[3].d);
            let x = du.mul(&u.t());
            let n = u.r;
            let mut y = Mat::zeros(n, n);
            for i in 0..n {
                for j in 0..i {
                    let d = 2.0 * (l[i] - l[j]).max(eps);
                    let e = (x.at(i, j) - x.at(j, i)) / d;
                    y.set(i, j, e);
                    y.set(j, i, e);
                }
                y.set(i, i, dl[i]);
            }
            Ok(vec![u.t().mul(&y).mul(u)])
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// inverse, det, slogdet

/// `_linalg_inverse(A)`.
fn inverse(call: &Call<'_>) -> Result<Plan> {
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", true)?;
    Ok(batched(
        vec![a],
        vec![l],
        vec![l],
        call.name.to_string(),
        |k, m| {
            let (f, piv, singular) = lu(&m[0]);
            if singular {
                return Err(format!(
                    "matrix {k} is singular: the input matrix is non-invertible"
                ));
            }
            Ok(vec![lu_inverse(&f, &piv)])
        },
    ))
}

/// `_linalg_det(A)` → `det, LU, pivot` (1 visible); `_linalg_slogdet(A)` →
/// `sign, logabsdet, LU, pivot` (2 visible). The hidden outputs hold LAPACK getrf's
/// factorisation of the column-major matrix (`Aᵀ`) and its 1-based pivots (int32), as MXNet's.
fn det(call: &Call<'_>) -> Result<Plan> {
    let log = call.name.ends_with("slogdet");
    let a = float_inputs(call, 1)?[0].clone();
    let l = matrices(call, &a, "A", true)?;
    let out = TensorDesc::new(&per_matrix_shape(&a.shape), a.dtype);
    let piv = TensorDesc::new(&a.shape[..a.shape.len() - 1], DType::I32);
    let mut outs = vec![out.clone()];
    let mut out_l = vec![scalars(l.batch())];
    if log {
        outs.push(out);
        out_l.push(scalars(l.batch()));
    }
    outs.push(a.clone());
    out_l.push(l);
    outs.push(piv.clone());
    out_l.push(vectors(&piv.shape));
    let visible = if log { 2 } else { 1 };
    Ok(
        batched(outs, vec![l], out_l, call.name.to_string(), move |_, m| {
            let (f, p, _) = lu(&m[0].t());
            let (sign, logabs) = lu_slogdet(&f, &p);
            let pm = Mat {
                r: 1,
                c: p.len(),
                d: p.iter().map(|&v| v as f64).collect(),
            };
            let mut r = if log {
                vec![scalar(sign), scalar(logabs)]
            } else {
                vec![scalar(sign * logabs.exp())]
            };
            r.push(f.t());
            r.push(pm);
            Ok(r)
        })
        .with_visible(visible),
    )
}

/// `_mxrt_la_det_grad(ddet, A)`: `ddet · det(A) · A⁻ᵀ`; `_mxrt_la_slogdet_grad(dlogabsdet, A)`:
/// `dlogabsdet · A⁻ᵀ`; zero for a singular matrix.
fn det_backward(call: &Call<'_>) -> Result<Plan> {
    let log = call.name == "_mxrt_la_slogdet_grad";
    let ins = float_inputs(call, 2)?;
    let l = matrices(call, &ins[1], "A", true)?;
    Ok(batched(
        vec![ins[1].clone()],
        vec![scalars(l.batch()), l],
        vec![l],
        call.name.to_string(),
        move |_, m| {
            let (f, p, singular) = lu(&m[1]);
            let n = m[1].r;
            if singular {
                return Ok(vec![Mat::zeros(n, n)]);
            }
            let (sign, logabs) = lu_slogdet(&f, &p);
            let s = if log {
                m[0].d[0]
            } else {
                m[0].d[0] * sign * logabs.exp()
            };
            Ok(vec![lu_inverse(&f, &p).t().scale(s)])
        },
    ))
}

// ---------------------------------------------------------------------------------------------
// Registration

fn grad_op(g: &mut GradCtx<'_>, op: &'static str, ins: &[Val], keys: &[&str]) -> Result<Vec<Val>> {
    let p = passed(g, keys);
    g.ops(op, ins, &as_refs(&p))
}

const GEMM_KEYS: &[&str] = &["transpose_a", "transpose_b", "alpha", "beta", "axis"];
const TRI_KEYS: &[&str] = &["transpose", "rightside", "lower", "alpha"];

pub(crate) fn register(t: &mut Entries) {
    t.def("_linalg_gemm", &gemm)
        .signature(|_| Ok(Signature::simple(&["A", "B", "C"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0), g.x(1)];
            let r = grad_op(g, "_mxrt_la_gemm_grad", &ins, GEMM_KEYS)?;
            Ok(vec![Some(r[0]), Some(r[1]), Some(r[2])])
        });
    t.def("_mxrt_la_gemm_grad", &gemm_backward);
    t.def("_linalg_gemm2", &gemm)
        .signature(|_| Ok(Signature::simple(&["A", "B"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0), g.x(1)];
            let r = grad_op(g, "_mxrt_la_gemm2_grad", &ins, GEMM_KEYS)?;
            Ok(vec![Some(r[0]), Some(r[1])])
        });
    t.def("_mxrt_la_gemm2_grad", &gemm_backward);
    t.def("_linalg_potrf", &potrf)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0), g.y(0)];
            Ok(vec![Some(
                grad_op(g, "_mxrt_la_potrf_grad", &ins, &["lower"])?[0],
            )])
        });
    t.def("_mxrt_la_potrf_grad", &potrf_backward);
    t.def("_linalg_potri", &potri)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0), g.y(0)];
            Ok(vec![Some(
                grad_op(g, "_mxrt_la_potri_grad", &ins, &["lower"])?[0],
            )])
        });
    t.def("_mxrt_la_potri_grad", &potri_backward);
    t.def("_linalg_trmm", &trmm_trsm)
        .signature(|_| Ok(Signature::simple(&["A", "B"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0), g.x(1)];
            let r = grad_op(g, "_mxrt_la_trmm_grad", &ins, TRI_KEYS)?;
            Ok(vec![Some(r[0]), Some(r[1])])
        });
    t.def("_mxrt_la_trmm_grad", &trmm_trsm_backward);
    t.def("_linalg_trsm", &trmm_trsm)
        .signature(|_| Ok(Signature::simple(&["A", "B"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0), g.y(0)];
            let r = grad_op(g, "_mxrt_la_trsm_grad", &ins, TRI_KEYS)?;
            Ok(vec![Some(r[0]), Some(r[1])])
        });
    t.def("_mxrt_la_trsm_grad", &trmm_trsm_backward);
    t.def("_linalg_sumlogdiag", &sumlogdiag)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0)];
            Ok(vec![Some(
                grad_op(g, "_mxrt_la_sumlogdiag_grad", &ins, &[])?[0],
            )])
        });
    t.def("_mxrt_la_sumlogdiag_grad", &sumlogdiag_backward);
    t.def("_linalg_syrk", &syrk)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0), g.x(0)];
            let keys = &["transpose", "alpha"];
            Ok(vec![Some(grad_op(g, "_mxrt_la_syrk_grad", &ins, keys)?[0])])
        });
    t.def("_mxrt_la_syrk_grad", &syrk_backward);
    t.def("_linalg_extractdiag", &extract)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0)];
            Ok(vec![Some(
                grad_op(g, "_linalg_makediag", &ins, &["offset"])?[0],
            )])
        });
    t.def("_linalg_makediag", &make)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0)];
            Ok(vec![Some(
                grad_op(g, "_linalg_extractdiag", &ins, &["offset"])?[0],
            )])
        });
    t.def("_linalg_extracttrian", &extract)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0)];
            let keys = &["offset", "lower"];
            Ok(vec![Some(grad_op(g, "_linalg_maketrian", &ins, keys)?[0])])
        });
    t.def("_linalg_maketrian", &make)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            let ins = [g.dy(0)];
            let keys = &["offset", "lower"];
            Ok(vec![Some(
                grad_op(g, "_linalg_extracttrian", &ins, keys)?[0],
            )])
        });
    t.def("_linalg_gelqf", &gelqf)
        .signature(|_| Ok(Signature::simple(&["A"]).with_outputs(2)))
        .grad(|g| {
            let ins = [g.dy(0), g.dy(1), g.y(0), g.y(1)];
            Ok(vec![Some(grad_op(g, "_mxrt_la_gelqf_grad", &ins, &[])?[0])])
        });
    t.def("_mxrt_la_gelqf_grad", &gelqf_backward);
    t.def("_linalg_syevd", &syevd)
        .signature(|_| Ok(Signature::simple(&["A"]).with_outputs(2)))
        .grad(|g| {
            let ins = [g.dy(0), g.dy(1), g.y(0), g.y(1)];
            Ok(vec![Some(grad_op(g, "_mxrt_la_syevd_grad", &ins, &[])?[0])])
        });
    t.def("_mxrt_la_syevd_grad", &syevd_backward);
    t.def("_linalg_inverse", &inverse)
        .signature(|_| Ok(Signature::simple(&["A"])))
        .grad(|g| {
            // dA = -Bᵀ dB Bᵀ for B = A⁻¹, as products (differentiable again)
            let (b, db) = (g.y(0), g.dy(0));
            let t = g.op(
                "_linalg_gemm2",
                &[b, db],
                &[("transpose_a", "True"), ("alpha", "-1.0")],
            )?;
            let da = g.op("_linalg_gemm2", &[t, b], &[("transpose_b", "True")])?;
            Ok(vec![Some(da)])
        });
    t.def("_linalg_det", &det)
        .signature(|_| {
            Ok(Signature::simple(&["A"]).named_outputs(&["output0", "output1", "output2"], 1))
        })
        .grad(|g| {
            let ins = [g.dy(0), g.x(0)];
            Ok(vec![Some(grad_op(g, "_mxrt_la_det_grad", &ins, &[])?[0])])
        });
    t.def("_mxrt_la_det_grad", &det_backward);
    t.def("_linalg_slogdet", &det)
        .signature(|_| {
            Ok(Signature::simple(&["A"])
                .named_outputs(&["output0", "output1", "output2", "output3"], 2))
        })
        .grad(|g| {
            let ins = [g.dy(1), g.x(0)];
            Ok(vec![Some(
                grad_op(g, "_mxrt_la_slogdet_grad", &ins, &[])?[0],
            )])
        });
    t.def("_mxrt_la_slogdet_grad", &det_backward);
}
