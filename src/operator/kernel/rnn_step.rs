//! The per-time-step products of the float32 recurrent layers on a recurrent weight packed once
//! per layer and direction, and the LSTM's step (product and gates) fused per block of hidden
//! units.
//!
//! A step multiplies a small matrix (batch × hidden) by the same `Wh` every time. A general GEMM
//! packs its right operand on every call; here [`Packed`] holds it once as column panels of
//! [`NR`] values (`k` rows of `NR` contiguous floats per panel, zeros past the last column), and
//! a micro-kernel computes up to 8 rows by one panel with the vector unit the CPU has (AVX-512,
//! AVX2 with FMA, else plain loops the compiler vectorises as it can), chosen at run time.
//!
//! The LSTM forward packs `Whᵀ` with the four gates of each block of [`NR`] hidden units in
//! adjacent panels, so one task computes a block's gate pre-activations for the whole batch and
//! applies the gates right away (vectorised `exp`, [`exp`]); the blocks are independent, so a
//! step is one hand-off to the intra-op pool (none when the step is small).

use crate::parallel;

/// Columns per panel (one AVX-512 vector of f32).
pub const NR: usize = 16;

/// Most rows one micro-kernel call computes.
const MR: usize = 8;

/// A `k × n` right operand packed in column panels.
pub struct Packed {
    k: usize,
    panels: usize,
    data: Vec<f32>,
}

/// Where the logical matrix of a [`Packed`] comes from.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// Element `(row, column)` at `data[row · ld + column]`.
    Rows(&'a [f32], usize),
    /// Element `(row, column)` at `data[column · ld + row]` (a transposed matrix).
    Cols(&'a [f32], usize),
}

/// Packed buffers of earlier calls, kept for the next ones: a step's `Wh` is packed once per
/// call, and a fresh buffer of a few megabytes comes back from the system as new pages to
/// fault in and zero on every call.
static BUFFERS: std::sync::Mutex<Vec<Vec<f32>>> = std::sync::Mutex::new(Vec::new());

/// Packed buffers kept.
const BUFFERS_KEPT: usize = 4;

/// A buffer of `len` floats, its contents unspecified: the smallest kept one large enough, or a
/// new one.
fn buffer(len: usize) -> Vec<f32> {
    let found = {
        let mut kept = BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
        let best = kept
            .iter()
            .enumerate()
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        best.map(|i| kept.swap_remove(i))
    };
    let mut v = found.unwrap_or_default();
    v.resize(len, 0.0);
    v
}

impl Drop for Packed {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.data);
        let mut kept = BUFFERS.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < BUFFERS_KEPT {
            kept.push(v);
        } else if let Some(small) = kept.iter_mut().min_by_key(|b| b.capacity())
            && small.capacity() < v.capacity()
        {
            *small = v;
        }
    }
}

impl Packed {
    /// Packs `panels` panels of `k` rows: lane `c` of panel `p` is column `col(p, c)` of the
    /// logical matrix `src` (`None`: zeros). `col(p, ·)` must give consecutive columns for
    /// consecutive lanes up to the first `None` and `None` after it.
    fn new(
        k: usize,
        panels: usize,
        col: impl Fn(usize, usize) -> Option<usize>,
        src: Source<'_>,
    ) -> Packed {
        let mut data = buffer(panels * k * NR);
        for (p, panel) in data.chunks_exact_mut(k * NR).enumerate() {
            let first = col(p, 0);
            let width = (0..NR).take_while(|&c| col(p, c).is_some()).count();
            match (src, first) {
                (_, None) => panel.fill(0.0),
                (Source::Rows(m, ld), Some(j0)) => {
                    for (r, dst) in panel.chunks_exact_mut(NR).enumerate() {
                        dst[..width].copy_from_slice(&m[r * ld + j0..][..width]);
                        dst[width..].fill(0.0);
                    }
                }
                (Source::Cols(m, ld), Some(j0)) => {
                    // one source row (a column of the logical matrix) per lane: contiguous reads,
                    // writes at a stride of one panel row inside the panel
                    for c in 0..NR {
                        if c < width {
                            let s = &m[(j0 + c) * ld..][..k];
                            for (r, &v) in s.iter().enumerate() {
                                panel[r * NR + c] = v;
                            }
                        } else {
                            for r in 0..k {
                                panel[r * NR + c] = 0.0;
                            }
                        }
                    }
                }
            }
        }
        Packed { k, panels, data }
    }

    /// `Whᵀ` (`h × g·h`) from `Wh` (`g·h × h`, row-major), panels in column order: the
    /// forward's `h_{t-1} · Whᵀ`.
    pub fn wh_t(wh: &[f32], gh: usize, h: usize) -> Packed {
        Packed::new(
            h,
            gh.div_ceil(NR),
            |p, c| Some(p * NR + c).filter(|&j| j < gh),
            Source::Cols(wh, h),
        )
    }

    /// `Whᵀ` of an LSTM with the gates of each block of `NR` units adjacent: panel `4·b + q` is
    /// gate `q` of units `b·NR ..`.
    pub fn lstm_wh_t(wh: &[f32], h: usize) -> Packed {
        Packed::new(
            h,
            4 * h.div_ceil(NR),
            |p, c| {
                let (b, q) = (p / 4, p % 4);
                let u = b * NR + c;
                (u < h).then_some(q * h + u)
            },
            Source::Cols(wh, h),
        )
    }

    /// `Wh` itself (`g·h × h`): the backward's `dpre · Wh`.
    pub fn wh(wh: &[f32], gh: usize, h: usize) -> Packed {
        Packed::new(
            gh,
            h.div_ceil(NR),
            |p, c| Some(p * NR + c).filter(|&j| j < h),
            Source::Rows(wh, h),
        )
    }

    fn panel(&self, p: usize) -> &[f32] {
        &self.data[p * self.k * NR..(p + 1) * self.k * NR]
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
    Plain,
}

fn isa() -> Isa {
    use std::sync::OnceLock;
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::env::var_os("MXRT_RNN_NO_AVX512").is_none()
                && is_x86_feature_detected!("avx512f")
            {
                return Isa::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Isa::Avx2;
            }
        }
        Isa::Plain
    })
}

/// `out[r][c] = Σ_i a[r·lda + i] · panel[i·NR + c]` for `rows ≤ MR` rows.
fn tile(rows: usize, a: &[f32], lda: usize, panel: &[f32], out: &mut [[f32; NR]; MR]) {
    let k = panel.len() / NR;
    assert!(rows <= MR && (rows == 0 || a.len() >= (rows - 1) * lda + k));
    macro_rules! by_rows {
        ($f:ident) => {
            match rows {
                1 => $f::<1>(k, a, lda, panel, out),
                2 => $f::<2>(k, a, lda, panel, out),
                3 => $f::<3>(k, a, lda, panel, out),
                4 => $f::<4>(k, a, lda, panel, out),
                5 => $f::<5>(k, a, lda, panel, out),
                6 => $f::<6>(k, a, lda, panel, out),
                7 => $f::<7>(k, a, lda, panel, out),
                8 => $f::<8>(k, a, lda, panel, out),
                _ => {}
            }
        };
    }
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: the CPU has AVX-512F (detected); `tile_avx512` reads `rows` rows of `k`
            // values of `a` (asserted above) and `k` rows of the panel.
            unsafe { by_rows!(tile_avx512) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: the CPU has AVX2 and FMA (detected); reads as for AVX-512.
            unsafe { by_rows!(tile_avx2) }
        }
        _ => by_rows!(tile_plain),
    }
}

/// Rows one call of [`tile4`] computes at most.
const MR4: usize = 6;

/// Four adjacent panels at once (`panels` holds them one after the other, `k · NR` values each):
/// `out[q][r][c] = Σ_i a[r·lda + i] · panels[q][i·NR + c]` for `rows ≤ MR4` rows. With AVX-512
/// the 4 × `rows` accumulators stay in registers and each value of `a` is broadcast once for
/// four vector multiply-adds; elsewhere it is four calls of [`tile`].
fn tile4(rows: usize, a: &[f32], lda: usize, panels: &[f32], out: &mut [[[f32; NR]; MR]; 4]) {
    let k = panels.len() / (4 * NR);
    assert!(rows <= MR4 && (rows == 0 || a.len() >= (rows - 1) * lda + k));
    #[cfg(target_arch = "x86_64")]
    if isa() == Isa::Avx512 {
        macro_rules! by_rows {
            ($($r:literal)*) => {
                match rows {
                    // SAFETY: the CPU has AVX-512F (detected); `tile4_avx512` reads `rows` rows
                    // of `k` values of `a` (asserted above) and four panels of `k · NR` values.
                    $($r => unsafe { tile4_avx512::<$r>(k, a, lda, panels, out) },)*
                    _ => {}
                }
            };
        }
        by_rows!(1 2 3 4 5 6);
        return;
    }
    for (q, o) in out.iter_mut().enumerate() {
        tile(rows, a, lda, &panels[q * k * NR..(q + 1) * k * NR], o);
    }
}

/// # Safety
/// The CPU must have AVX-512F; `a` must hold `R` rows of `k` values at stride `lda` and
/// `panels` `4 · k · NR` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile4_avx512<const R: usize>(
    k: usize,
    a: &[f32],
    lda: usize,
    panels: &[f32],
    out: &mut [[[f32; NR]; MR]; 4],
) {
    use std::arch::x86_64::*;
    let (ap, bp) = (a.as_ptr(), panels.as_ptr());
    let stride = k * NR;
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for i in 0..k {
        // SAFETY: `i < k`, so row `i` of each of the four panels and the values
        // `a[r·lda + i]` (`r < R`) are in bounds (the caller's contract).
        unsafe {
            let b = bp.add(i * NR);
            let b0 = _mm512_loadu_ps(b);
            let b1 = _mm512_loadu_ps(b.add(stride));
            let b2 = _mm512_loadu_ps(b.add(2 * stride));
            let b3 = _mm512_loadu_ps(b.add(3 * stride));
            for (r, acc) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*ap.add(r * lda + i));
                acc[0] = _mm512_fmadd_ps(av, b0, acc[0]);
                acc[1] = _mm512_fmadd_ps(av, b1, acc[1]);
                acc[2] = _mm512_fmadd_ps(av, b2, acc[2]);
                acc[3] = _mm512_fmadd_ps(av, b3, acc[3]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        for (q, v) in acc.iter().enumerate() {
            // SAFETY: `out[q][r]` is NR = 16 floats.
            unsafe { _mm512_storeu_ps(out[q][r].as_mut_ptr(), *v) };
        }
    }
}

fn tile_plain<const R: usize>(
    k: usize,
    a: &[f32],
    lda: usize,
    panel: &[f32],
    out: &mut [[f32; NR]; MR],
) {
    let mut acc = [[0.0f32; NR]; R];
    for i in 0..k {
        let b = &panel[i * NR..(i + 1) * NR];
        for r in 0..R {
            let av = a[r * lda + i];
            for c in 0..NR {
                acc[r][c] += av * b[c];
            }
        }
    }
    out[..R].copy_from_slice(&acc);
}

/// # Safety
/// The CPU must have AVX-512F; `a` must hold `R` rows of `k` values at stride `lda` and `panel`
/// `k · NR` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512<const R: usize>(
    k: usize,
    a: &[f32],
    lda: usize,
    panel: &[f32],
    out: &mut [[f32; NR]; MR],
) {
    use std::arch::x86_64::*;
    let (ap, bp) = (a.as_ptr(), panel.as_ptr());
    let mut acc = [_mm512_setzero_ps(); R];
    for i in 0..k {
        // SAFETY: `i < k`, so the panel row `i` and the values `a[r·lda + i]` (`r < R`) are in
        // bounds (the caller's contract).
        unsafe {
            let b = _mm512_loadu_ps(bp.add(i * NR));
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = _mm512_fmadd_ps(_mm512_set1_ps(*ap.add(r * lda + i)), b, *acc);
            }
        }
    }
    for (o, v) in out.iter_mut().zip(acc) {
        // SAFETY: `o` is NR = 16 floats.
        unsafe { _mm512_storeu_ps(o.as_mut_ptr(), v) };
    }
}

/// # Safety
/// The CPU must have AVX2 and FMA; reads as [`tile_avx512`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2<const R: usize>(
    k: usize,
    a: &[f32],
    lda: usize,
    panel: &[f32],
    out: &mut [[f32; NR]; MR],
) {
    use std::arch::x86_64::*;
    let (ap, bp) = (a.as_ptr(), panel.as_ptr());
    let mut lo = [_mm256_setzero_ps(); R];
    let mut hi = [_mm256_setzero_ps(); R];
    for i in 0..k {
        // SAFETY: as in `tile_avx512`.
        unsafe {
            let b0 = _mm256_loadu_ps(bp.add(i * NR));
            let b1 = _mm256_loadu_ps(bp.add(i * NR + 8));
            for r in 0..R {
                let av = _mm256_set1_ps(*ap.add(r * lda + i));
                lo[r] = _mm256_fmadd_ps(av, b0, lo[r]);
                hi[r] = _mm256_fmadd_ps(av, b1, hi[r]);
            }
        }
    }
    for r in 0..R {
        // SAFETY: `out[r]` is 16 floats.
        unsafe {
            _mm256_storeu_ps(out[r].as_mut_ptr(), lo[r]);
            _mm256_storeu_ps(out[r].as_mut_ptr().add(8), hi[r]);
        }
    }
}

/// Threads for a step of `flops` multiply-adds: one below about a quarter million, where the
/// hand-off costs more than it saves.
fn threads_for(flops: usize) -> usize {
    if flops >= 1 << 18 {
        parallel::max_threads()
    } else {
        1
    }
}

/// A raw pointer tasks write disjoint parts through.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: every use below gives each task a disjoint set of elements to write.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

/// `c (+)= a · B` for `a` of `m` rows (`m × k`, row-major) and `c` `m × n` (row-major, `n` the
/// packed matrix's columns): the panels are split over the pool.
pub fn matmul(m: usize, n: usize, a: &[f32], b: &Packed, c: &mut [f32], accumulate: bool) {
    let k = b.k;
    assert!(a.len() >= m * k && c.len() >= m * n && b.panels * NR >= n);
    let dst = Out(c.as_mut_ptr());
    // tasks of four panels (the last one of what is left)
    let groups = b.panels.div_ceil(4);
    parallel::for_tasks(groups, threads_for(m * n * k), |gi| {
        let dst = dst;
        let p0 = gi * 4;
        let np = 4.min(b.panels - p0);
        let mut acc = [[[0.0f32; NR]; MR]; 4];
        let step = if np == 4 { MR4 } else { MR };
        for r0 in (0..m).step_by(step) {
            let rows = step.min(m - r0);
            if np == 4 {
                tile4(rows, &a[r0 * k..], k, &b.data[p0 * k * NR..(p0 + 4) * k * NR], &mut acc);
            } else {
                for (q, acc) in acc.iter_mut().enumerate().take(np) {
                    tile(rows, &a[r0 * k..], k, b.panel(p0 + q), acc);
                }
            }
            for (q, acc) in acc.iter().enumerate().take(np) {
                let p = p0 + q;
                let width = NR.min(n - p * NR);
                for (r, v) in acc.iter().enumerate().take(rows) {
                    let at = (r0 + r) * n + p * NR;
                    // SAFETY: columns `p·NR .. p·NR + width` of row `r0 + r` are inside `c`
                    // (asserted) and written by this task only (panel `p`).
                    let row = unsafe { std::slice::from_raw_parts_mut(dst.0.add(at), width) };
                    if accumulate {
                        for (o, x) in row.iter_mut().zip(v) {
                            *o += x;
                        }
                    } else {
                        row.copy_from_slice(&v[..width]);
                    }
                }
            }
        }
    });
}

/// `e^x` for float32, within 3 ulp on [-87, 88], in code the compiler vectorises: `x = n·ln2 + r`,
/// a degree-6 polynomial for `e^r` (`|r| ≤ ln2/2`) scaled by `2^n` through the exponent bits.
/// Arguments are clamped to `[-87, 88]`, where float32's `e^x` stays normal and finite.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E).round();
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    p * f32::from_bits(((n as i32 + 127) << 23) as u32)
}

#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// `tanh` through [`exp`] as the generic kernel's (`(1 - e^{-2|x|}) / (1 + e^{-2|x|})`, its
/// Taylor polynomial near 0), branch-free so that it vectorises.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let e = exp(-2.0 * a);
    let big = (1.0 - e) / (1.0 + e);
    let x2 = x * x;
    let small = a * (1.0 - x2 * (1.0 / 3.0 - x2 * (2.0 / 15.0)));
    let t = if a < 0.004 { small } else { big };
    t.copysign(x)
}

/// One LSTM forward step: from `h_{t-1}` (`n × h`), `c_{t-1}`, the step's input projection
/// with both biases (`pre`, `n × 4h`) and the grouped `Whᵀ` ([`Packed::lstm_wh_t`]), writes
/// `h_t`, `c_t` (`n × h`) and the gates' activations (`n × 4h`, gate-major per row).
#[allow(clippy::too_many_arguments)]
pub fn lstm_step(
    n: usize,
    h: usize,
    hprev: &[f32],
    cprev: &[f32],
    pre: &[f32],
    wh: &Packed,
    ht: &mut [f32],
    ct: &mut [f32],
    gates: &mut [f32],
) {
    assert!(
        wh.k == h
            && hprev.len() >= n * h
            && cprev.len() >= n * h
            && pre.len() >= n * 4 * h
            && ht.len() >= n * h
            && ct.len() >= n * h
            && gates.len() >= n * 4 * h
    );
    let (hp, cp, gp) = (
        Out(ht.as_mut_ptr()),
        Out(ct.as_mut_ptr()),
        Out(gates.as_mut_ptr()),
    );
    let blocks = h.div_ceil(NR);
    parallel::for_tasks(blocks, threads_for(n * 4 * h * h), |b| {
        let (hp, cp, gp) = (hp, cp, gp);
        let u0 = b * NR;
        let width = NR.min(h - u0);
        let mut acc = [[[0.0f32; NR]; MR]; 4];
        let gate_panels = &wh.data[4 * b * h * NR..4 * (b + 1) * h * NR];
        for r0 in (0..n).step_by(MR4) {
            let rows = MR4.min(n - r0);
            tile4(rows, &hprev[r0 * h..], h, gate_panels, &mut acc);
            for r in 0..rows {
                let j = r0 + r;
                // SAFETY: row `j`'s units `u0 .. u0 + width` of `h_t`, `c_t` and each gate's
                // span of the gates are inside the arrays (asserted) and this block's alone.
                let (hrow, crow, grow) = unsafe {
                    (
                        std::slice::from_raw_parts_mut(hp.0.add(j * h + u0), width),
                        std::slice::from_raw_parts_mut(cp.0.add(j * h + u0), width),
                        gp.0.add(j * 4 * h + u0),
                    )
                };
                let at = |q: usize| {
                    let p = &pre[j * 4 * h + q * h + u0..][..width];
                    let mut v = [0.0f32; NR];
                    for c in 0..width {
                        v[c] = p[c] + acc[q][r][c];
                    }
                    v
                };
                let (ai, af, ag, ao) = (at(0), at(1), at(2), at(3));
                let cprow = &cprev[j * h + u0..][..width];
                let mut gi = [0.0f32; NR];
                let mut gf = [0.0f32; NR];
                let mut gg = [0.0f32; NR];
                let mut go = [0.0f32; NR];
                let mut cn = [0.0f32; NR];
                let mut hn = [0.0f32; NR];
                gates16(
                    &ai, &af, &ag, &ao, cprow, &mut gi, &mut gf, &mut gg, &mut go, &mut cn, &mut hn,
                );
                hrow.copy_from_slice(&hn[..width]);
                crow.copy_from_slice(&cn[..width]);
                for (q, g) in [gi, gf, gg, go].iter().enumerate() {
                    // SAFETY: as above (gate `q`'s span of row `j`).
                    let dst = unsafe { std::slice::from_raw_parts_mut(grow.add(q * h), width) };
                    dst.copy_from_slice(&g[..width]);
                }
            }
        }
    });
}

/// The gates of up to 16 units, dispatched to the widest vector unit.
#[allow(clippy::too_many_arguments)]
fn gates16(
    ai: &[f32; NR],
    af: &[f32; NR],
    ag: &[f32; NR],
    ao: &[f32; NR],
    cprev: &[f32],
    i: &mut [f32; NR],
    f: &mut [f32; NR],
    g: &mut [f32; NR],
    o: &mut [f32; NR],
    c: &mut [f32; NR],
    hn: &mut [f32; NR],
) {
    let mut cp = [0.0f32; NR];
    cp[..cprev.len()].copy_from_slice(cprev);
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: the CPU has AVX-512F (detected).
            unsafe { gates_avx512(ai, af, ag, ao, &cp, i, f, g, o, c, hn) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: the CPU has AVX2 and FMA (detected).
            unsafe { gates_avx2(ai, af, ag, ao, &cp, i, f, g, o, c, hn) }
        }
        _ => gates_body(ai, af, ag, ao, &cp, i, f, g, o, c, hn),
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gates_body(
    ai: &[f32; NR],
    af: &[f32; NR],
    ag: &[f32; NR],
    ao: &[f32; NR],
    cp: &[f32; NR],
    i: &mut [f32; NR],
    f: &mut [f32; NR],
    g: &mut [f32; NR],
    o: &mut [f32; NR],
    c: &mut [f32; NR],
    hn: &mut [f32; NR],
) {
    for k in 0..NR {
        i[k] = sigmoid(ai[k]);
        f[k] = sigmoid(af[k]);
        g[k] = tanh(ag[k]);
        o[k] = sigmoid(ao[k]);
        c[k] = f[k] * cp[k] + i[k] * g[k];
        hn[k] = o[k] * tanh(c[k]);
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn gates_avx512(
    ai: &[f32; NR],
    af: &[f32; NR],
    ag: &[f32; NR],
    ao: &[f32; NR],
    cp: &[f32; NR],
    i: &mut [f32; NR],
    f: &mut [f32; NR],
    g: &mut [f32; NR],
    o: &mut [f32; NR],
    c: &mut [f32; NR],
    hn: &mut [f32; NR],
) {
    gates_body(ai, af, ag, ao, cp, i, f, g, o, c, hn)
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn gates_avx2(
    ai: &[f32; NR],
    af: &[f32; NR],
    ag: &[f32; NR],
    ao: &[f32; NR],
    cp: &[f32; NR],
    i: &mut [f32; NR],
    f: &mut [f32; NR],
    g: &mut [f32; NR],
    o: &mut [f32; NR],
    c: &mut [f32; NR],
    hn: &mut [f32; NR],
) {
    gates_body(ai, af, ag, ao, cp, i, f, g, o, c, hn)
}

/// One batch row of the LSTM's backward step, before the product by `Wh`: from the gradient
/// reaching `h_t` (`dy + dh_next`), the cell `c_t`, the previous cell, the gates' activations
/// (`4h`, gate-major) and the cell's gradient from the step after (`dc`), the gates'
/// pre-activation gradients (`dpre`, `4h`); `dc` becomes the gradient reaching `c_{t-1}`.
#[allow(clippy::too_many_arguments)]
pub fn lstm_back_row(
    dy: &[f32],
    dh_next: &[f32],
    ct: &[f32],
    cprev: &[f32],
    gates: &[f32],
    dpre: &mut [f32],
    dc: &mut [f32],
) {
    let h = dc.len();
    assert!(
        dy.len() >= h
            && dh_next.len() >= h
            && ct.len() >= h
            && cprev.len() >= h
            && gates.len() >= 4 * h
            && dpre.len() >= 4 * h
    );
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => {
            // SAFETY: the CPU has AVX-512F (detected).
            unsafe { lstm_back_avx512(dy, dh_next, ct, cprev, gates, dpre, dc) }
        }
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            // SAFETY: the CPU has AVX2 and FMA (detected).
            unsafe { lstm_back_avx2(dy, dh_next, ct, cprev, gates, dpre, dc) }
        }
        _ => lstm_back_body(dy, dh_next, ct, cprev, gates, dpre, dc),
    }
}

#[inline(always)]
fn lstm_back_body(
    dy: &[f32],
    dh_next: &[f32],
    ct: &[f32],
    cprev: &[f32],
    gates: &[f32],
    dpre: &mut [f32],
    dc: &mut [f32],
) {
    let h = dc.len();
    let (dy, dhn, ct, cp) = (&dy[..h], &dh_next[..h], &ct[..h], &cprev[..h]);
    let (gi, rest) = gates[..4 * h].split_at(h);
    let (gf, rest) = rest.split_at(h);
    let (gg, go) = rest.split_at(h);
    let (di, rest) = dpre[..4 * h].split_at_mut(h);
    let (df, rest) = rest.split_at_mut(h);
    let (dg, dout) = rest.split_at_mut(h);
    for k in 0..h {
        let dh = dy[k] + dhn[k];
        let tc = tanh(ct[k]);
        let (i, f, g, o) = (gi[k], gf[k], gg[k], go[k]);
        let d = dc[k] + dh * o * (1.0 - tc * tc);
        di[k] = d * g * i * (1.0 - i);
        df[k] = d * cp[k] * f * (1.0 - f);
        dg[k] = d * i * (1.0 - g * g);
        dout[k] = dh * tc * o * (1.0 - o);
        dc[k] = d * f;
    }
}

/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn lstm_back_avx512(
    dy: &[f32],
    dh_next: &[f32],
    ct: &[f32],
    cprev: &[f32],
    gates: &[f32],
    dpre: &mut [f32],
    dc: &mut [f32],
) {
    lstm_back_body(dy, dh_next, ct, cprev, gates, dpre, dc)
}

/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn lstm_back_avx2(
    dy: &[f32],
    dh_next: &[f32],
    ct: &[f32],
    cprev: &[f32],
    gates: &[f32],
    dpre: &mut [f32],
    dc: &mut [f32],
) {
    lstm_back_body(dy, dh_next, ct, cprev, gates, dpre, dc)
}

/// `pub fn $name(args)`: `$body(args)` compiled for the widest vector unit the CPU has, chosen
/// at run time (the body is `#[inline(always)]`, so each copy vectorises for its unit).
macro_rules! row_kernel {
    ($(#[$doc:meta])* $name:ident => $body:ident($($arg:ident: $ty:ty),*)) => {
        $(#[$doc])*
        pub fn $name($($arg: $ty),*) {
            /// # Safety
            /// The CPU must have AVX-512F.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f")]
            unsafe fn wide($($arg: $ty),*) {
                $body($($arg),*)
            }
            /// # Safety
            /// The CPU must have AVX2 and FMA.
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn narrow($($arg: $ty),*) {
                $body($($arg),*)
            }
            match isa() {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX-512F (detected).
                Isa::Avx512 => unsafe { wide($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the CPU has AVX2 and FMA (detected).
                Isa::Avx2 => unsafe { narrow($($arg),*) },
                _ => $body($($arg),*),
            }
        }
    };
}

row_kernel! {
    /// One batch row of a GRU forward step: from the input projection with its biases (`pre`,
    /// `3h`: `r` and `z` with both biases, `n` with `bx` only), `Wh · h_{t-1}` (`hh`, `3h`),
    /// `bh`'s `n` part and `h_{t-1}`, writes `h_t`, `Wh_n·h + bh_n` (`m`) and the gates `r, z, n`
    /// (`3h`).
    gru_row => gru_row_body(
        pre: &[f32], hh: &[f32], bhn: &[f32], hprev: &[f32], ht: &mut [f32], m: &mut [f32],
        gates: &mut [f32]
    )
}

#[inline(always)]
fn gru_row_body(
    pre: &[f32],
    hh: &[f32],
    bhn: &[f32],
    hprev: &[f32],
    ht: &mut [f32],
    m: &mut [f32],
    gates: &mut [f32],
) {
    let h = ht.len();
    let (pre, hh, bhn, hp, m) = (&pre[..3 * h], &hh[..3 * h], &bhn[..h], &hprev[..h], &mut m[..h]);
    let (gr, rest) = gates[..3 * h].split_at_mut(h);
    let (gz, gn) = rest.split_at_mut(h);
    for k in 0..h {
        let r = sigmoid(pre[k] + hh[k]);
        let z = sigmoid(pre[h + k] + hh[h + k]);
        let mk = hh[2 * h + k] + bhn[k];
        let nn = tanh(pre[2 * h + k] + r * mk);
        ht[k] = (1.0 - z) * nn + z * hp[k];
        m[k] = mk;
        gr[k] = r;
        gz[k] = z;
        gn[k] = nn;
    }
}

row_kernel! {
    /// One batch row of a GRU backward step, before the product by `Wh`: from the gradient
    /// arriving from the output (`dy`) and from the step after (`dh`, which becomes the direct
    /// path's share `dh·z` of the gradient reaching `h_{t-1}`), the gates, `m` and `h_{t-1}`,
    /// the pre-activation gradients of the input side (`dx`, `3h`) and the hidden side (`dhh`,
    /// `3h`).
    gru_back_row => gru_back_body(
        dy: &[f32], dh: &mut [f32], gates: &[f32], m: &[f32], hprev: &[f32], dx: &mut [f32],
        dhh: &mut [f32]
    )
}

#[inline(always)]
fn gru_back_body(
    dy: &[f32],
    dh: &mut [f32],
    gates: &[f32],
    m: &[f32],
    hprev: &[f32],
    dx: &mut [f32],
    dhh: &mut [f32],
) {
    let h = dh.len();
    let (dy, m, hp) = (&dy[..h], &m[..h], &hprev[..h]);
    let (gr, rest) = gates[..3 * h].split_at(h);
    let (gz, gn) = rest.split_at(h);
    let (dxr, rest) = dx[..3 * h].split_at_mut(h);
    let (dxz, dxn) = rest.split_at_mut(h);
    let (dhr, rest) = dhh[..3 * h].split_at_mut(h);
    let (dhz, dhn) = rest.split_at_mut(h);
    for k in 0..h {
        let (r, z, nn) = (gr[k], gz[k], gn[k]);
        let d = dy[k] + dh[k];
        let dan = d * (1.0 - z) * (1.0 - nn * nn);
        let daz = d * (hp[k] - nn) * z * (1.0 - z);
        let dar = dan * m[k] * r * (1.0 - r);
        dxr[k] = dar;
        dxz[k] = daz;
        dxn[k] = dan;
        dhr[k] = dar;
        dhz[k] = daz;
        dhn[k] = dan * r;
        dh[k] = d * z;
    }
}

row_kernel! {
    /// One batch row of a tanh RNN's forward step: `h_t = tanh(pre + hh)`.
    tanh_row => tanh_row_body(pre: &[f32], hh: &[f32], ht: &mut [f32])
}

#[inline(always)]
fn tanh_row_body(pre: &[f32], hh: &[f32], ht: &mut [f32]) {
    let h = ht.len();
    let (pre, hh) = (&pre[..h], &hh[..h]);
    for k in 0..h {
        ht[k] = tanh(pre[k] + hh[k]);
    }
}

row_kernel! {
    /// One batch row of a ReLU or tanh RNN's backward step, before the product by `Wh`: the
    /// pre-activation gradient `dpre` from the gradients arriving from the output (`dy`) and from
    /// the step after (`dh_next`) and the step's output `h` (ReLU when `relu`, else tanh).
    act_back_row => act_back_body(
        dy: &[f32], dh_next: &[f32], h: &[f32], dpre: &mut [f32], relu: bool
    )
}

#[inline(always)]
fn act_back_body(dy: &[f32], dh_next: &[f32], h: &[f32], dpre: &mut [f32], relu: bool) {
    let w = dpre.len();
    let (dy, dhn, h) = (&dy[..w], &dh_next[..w], &h[..w]);
    if relu {
        for k in 0..w {
            let d = dy[k] + dhn[k];
            dpre[k] = if h[k] > 0.0 { d } else { 0.0 };
        }
    } else {
        for k in 0..w {
            dpre[k] = (dy[k] + dhn[k]) * (1.0 - h[k] * h[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_gates_match_libm() {
        let mut x = -90.0f32;
        while x < 90.0 {
            let (e, want) = (exp(x), x.exp());
            if (-87.0..=88.0).contains(&x) {
                assert!(
                    (e - want).abs() <= 6e-7 * want,
                    "exp({x}) = {e}, libm {want}"
                );
            }
            assert!((tanh(x) - x.tanh()).abs() < 3e-7, "tanh({x})");
            assert!(
                (sigmoid(x) - 1.0 / (1.0 + (-x).exp())).abs() < 3e-7,
                "sigmoid({x})"
            );
            x += 0.0137;
        }
    }

    #[test]
    fn packing_into_a_reused_buffer_matches_the_definition() {
        // a larger packing first, filled with values that must not survive into the padding
        // of the next ones (the buffer comes back from the kept ones)
        drop(Packed::wh(&vec![7.0f32; 64 * 40], 64, 40));
        for h in [5usize, 16, 21, 33] {
            let wh: Vec<f32> = (0..4 * h * h).map(|i| i as f32 + 0.5).collect();
            let gh = 4 * h;
            let blocks = h.div_ceil(NR);
            // lstm_wh_t: lane c of panel 4·b + q is column q·h + b·NR + c of Whᵀ, i.e. row
            // q·h + u of Wh (u = b·NR + c), zero past the last unit
            let pk = Packed::lstm_wh_t(&wh, h);
            assert_eq!((pk.k, pk.panels), (h, 4 * blocks));
            for p in 0..pk.panels {
                let (b, q) = (p / 4, p % 4);
                for r in 0..h {
                    for c in 0..NR {
                        let u = b * NR + c;
                        let want = if u < h { wh[(q * h + u) * h + r] } else { 0.0 };
                        assert_eq!(pk.panel(p)[r * NR + c], want, "lstm {h} {p} {r} {c}");
                    }
                }
            }
            let pk = Packed::wh_t(&wh, gh, h);
            for p in 0..pk.panels {
                for r in 0..h {
                    for c in 0..NR {
                        let j = p * NR + c;
                        let want = if j < gh { wh[j * h + r] } else { 0.0 };
                        assert_eq!(pk.panel(p)[r * NR + c], want, "wh_t {h} {p} {r} {c}");
                    }
                }
            }
            let pk = Packed::wh(&wh, gh, h);
            assert_eq!((pk.k, pk.panels), (gh, blocks));
            for p in 0..pk.panels {
                for r in 0..gh {
                    for c in 0..NR {
                        let j = p * NR + c;
                        let want = if j < h { wh[r * h + j] } else { 0.0 };
                        assert_eq!(pk.panel(p)[r * NR + c], want, "wh {h} {p} {r} {c}");
                    }
                }
            }
        }
    }

    #[test]
    fn activation_backward_rows_match_the_formulas() {
        for w in [1, 15, 16, 37] {
            let dy: Vec<f32> = (0..w).map(|i| (i as f32 * 0.37).sin()).collect();
            let dhn: Vec<f32> = (0..w).map(|i| (i as f32 * 0.91).cos()).collect();
            let h: Vec<f32> = (0..w).map(|i| ((i * 7 % 11) as f32 - 5.0) / 6.0).collect();
            for relu in [false, true] {
                let want: Vec<f32> = (0..w)
                    .map(|k| {
                        let d = dy[k] + dhn[k];
                        if relu {
                            if h[k] > 0.0 { d } else { 0.0 }
                        } else {
                            d * (1.0 - h[k] * h[k])
                        }
                    })
                    .collect();
                // the dispatched kernel and the plain body (the path of CPUs without AVX2)
                let mut got = vec![9.0f32; w];
                act_back_row(&dy, &dhn, &h, &mut got, relu);
                let mut plain = vec![9.0f32; w];
                act_back_body(&dy, &dhn, &h, &mut plain, relu);
                for k in 0..w {
                    assert!((got[k] - want[k]).abs() < 1e-6, "{w} {relu} {k}");
                    assert!((plain[k] - want[k]).abs() < 1e-6, "{w} {relu} {k}");
                }
            }
        }
    }

    #[test]
    fn packed_products_match_a_plain_product() {
        let (gh, h) = (4 * 21, 21);
        let wh: Vec<f32> = (0..gh * h)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        for m in [1, 7, 8, 13] {
            let a: Vec<f32> = (0..m * gh)
                .map(|i| ((i * 11 % 29) as f32 - 14.0) / 14.0)
                .collect();
            // forward: a (m × h) · Whᵀ
            let mut c = vec![0.0f32; m * gh];
            matmul(m, gh, &a[..m * h], &Packed::wh_t(&wh, gh, h), &mut c, false);
            for r in 0..m {
                for j in 0..gh {
                    let want: f32 = (0..h).map(|i| a[r * h + i] * wh[j * h + i]).sum();
                    assert!((c[r * gh + j] - want).abs() < 1e-4, "{m} {r} {j}");
                }
            }
            // backward: a (m × gh) · Wh, accumulated onto ones
            let mut d = vec![1.0f32; m * h];
            matmul(m, h, &a, &Packed::wh(&wh, gh, h), &mut d, true);
            for r in 0..m {
                for j in 0..h {
                    let want: f32 =
                        1.0 + (0..gh).map(|i| a[r * gh + i] * wh[i * h + j]).sum::<f32>();
                    assert!((d[r * h + j] - want).abs() < 1e-4, "{m} {r} {j}");
                }
            }
        }
    }
}
