//! Winograd F(4×4, 3×3) for float32 2-D convolutions with a 3×3 kernel, stride 1, no dilation
//! and one group (the bulk of a ResNet), used by `conv.rs` for all three products.
//!
//! The output is cut into 4×4 tiles, each computed from a 6×6 input patch `d` as
//! `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`. Over a block of tiles this becomes 36 independent products, one
//! per transform point `p`: `M_p[co × tiles] = U_p[co × ci] · V_p[ci × tiles]`, with `U` the
//! transformed weight and `V` the transformed input patches. Multiply-adds drop from 9 to 2.25 per
//! output and input channel; the transforms are vectorised over 16 tiles at a time (one lane
//! each), compiled for AVX-512 and AVX2 and picked at run time.
//!
//! - [`forward`] is the convolution (Convolution's forward; its data gradient is the forward of
//!   the transposed convolution, whose weight [`transform_weight`] flips and transposes);
//! - [`weight_grad`] is the adjoint in the weight: `dU_p = Σ_tiles (A dY Aᵀ)_p · V_pᵀ`, then
//!   `dw = Gᵀ dU G`.
//!
//! Tiles are taken over the whole batch (image-major), in blocks of 48 to 192 tiles sized by
//! [`block_bytes`]; blocks are split over the intra-op pool, each thread with its own buffers and
//! serial products.
//!
//! The 36 products per block run on an AVX-512 kernel of their own ([`product`]: 8 rows × 48
//! columns in 24 zmm accumulators) that reads the operands where the transforms wrote them, with
//! no packing: the forward's `U_p` (`co × ci`, broadcast along its rows) times `V_p` (`ci ×
//! tiles`, rows of tiles as vectors); the weight gradient's `dU_pᵀ = V_p · dM_p` with the output
//! gradient's transform written tile-major (`tiles × co`), so its rows of channels load as
//! vectors. Products of 64 columns fell to the `gemm` crate's AVX2 kernels through `matmul`, and
//! sgemm would pack both operands for each of them. Without AVX-512 they go to `matmul_serial`.
//! With AVX-512 the transforms load each lane's patch row with one masked load (zeros outside
//! the image) and transpose lanes into vectors in registers, and store output tiles the same
//! way back. Large buffers (transformed weights, blocks, the weight gradient's partial sums)
//! are reused between calls ([`Scratch`]).

use super::gemm::{Operand, matmul_serial};
use super::map::Ptr;
use super::sgemm;
use crate::parallel;
use std::sync::Mutex;

/// Tiles per vector of the transforms.
const L: usize = 16;
/// Transform points of a 6×6 tile.
const P: usize = 36;

/// One Winograd convolution: `ci` input channels of `ih × iw` → `co` output channels of
/// `oh × ow`, padding `ph`, `pw` (3×3 kernel, stride 1).
#[derive(Clone, Copy, Debug)]
pub struct Wino {
    pub batch: usize,
    pub ci: usize,
    pub co: usize,
    pub ih: usize,
    pub iw: usize,
    pub oh: usize,
    pub ow: usize,
    pub ph: usize,
    pub pw: usize,
}

impl Wino {
    fn tiles_y(&self) -> usize {
        self.oh.div_ceil(4)
    }
    fn tiles_x(&self) -> usize {
        self.ow.div_ceil(4)
    }
    fn tiles(&self) -> usize {
        self.batch * self.tiles_y() * self.tiles_x()
    }
    /// Tile groups (of `L` tiles) per block: the block's transformed input and output near
    /// [`block_bytes`], a multiple of 3 groups (the product's micro-tile is 48 tiles wide) from 3
    /// to 12.
    fn block_groups(&self) -> usize {
        let per_tile = P * (self.ci + self.co) * 4;
        (block_bytes() / per_tile / L / 3 * 3).clamp(3, 12)
    }
    /// `(image, tile row, tile column)` of tile `t`, `None` past the end.
    #[inline(always)]
    fn tile(&self, t: usize) -> Option<(usize, usize, usize)> {
        if t >= self.tiles() {
            return None;
        }
        let (ty, tx) = (self.tiles_y(), self.tiles_x());
        Some((t / (ty * tx), (t / tx) % ty, t % tx))
    }
}

/// Bytes of transformed input and output per block of tiles (`MXRT_WINOGRAD_BLOCK_KB`, 1536 KiB:
/// the products' operands of one transform point stay in L2, the block's in L3).
fn block_bytes() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        std::env::var("MXRT_WINOGRAD_BLOCK_KB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(1536 << 10, |kb| kb << 10)
    })
}

/// Reused float buffers (transformed weights, inputs, outputs and the weight gradient's partial
/// sums: tens of MiB at 512 channels), kept between calls so that large buffers are not mapped
/// and zeroed afresh by the kernel every step. A process-wide list rather than thread-locals:
/// the library's thread-locals live in the static TLS block, which is small, and a thread's
/// partial sums are read by another.
static SCRATCH: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());
/// Buffers kept in [`SCRATCH`] at most.
const SCRATCH_KEPT: usize = 8;

/// A float buffer from [`SCRATCH`] (contents unspecified), given back when dropped.
pub struct Scratch(Vec<f32>);

impl Scratch {
    /// Room for `len` floats: the smallest kept buffer that holds them, or a new one.
    fn new(len: usize) -> Scratch {
        let mut kept = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        let best = (0..kept.len())
            .filter(|&i| kept[i].capacity() >= len)
            .min_by_key(|&i| kept[i].capacity());
        let mut v = match best {
            Some(i) => kept.swap_remove(i),
            None => Vec::new(),
        };
        drop(kept);
        // only a new buffer's tail is written here (once); every caller writes what it reads
        v.resize(len, 0.0);
        Scratch(v)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        let mut kept = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        kept.push(v);
        if kept.len() > SCRATCH_KEPT {
            // the smallest goes
            let i = (0..kept.len()).min_by_key(|&i| kept[i].capacity()).unwrap_or(0);
            kept.swap_remove(i);
        }
    }
}

impl std::ops::Deref for Scratch {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.0
    }
}

impl std::ops::DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.0
    }
}

/// Rows of the products' micro-tile.
const MR: usize = 8;
/// zmm vectors per row of the micro-tile (48 columns).
const NV: usize = 3;

/// `c[m×n] (+)= a[m×k] · b[k×n]`, all dense row-major, on the calling thread: one transform
/// point's product. With AVX-512 ([`sgemm::enabled`]) an 8×48 register-blocked kernel that
/// reads the operands where they lie (no packing: `a`'s values are broadcast from its rows, `b`'s
/// rows loaded as vectors; the transforms lay them out so), else [`matmul_serial`].
fn product(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32], acc: bool) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if k > 0 && sgemm::enabled() {
        for i0 in (0..m).step_by(MR) {
            let r = MR.min(m - i0);
            for j0 in (0..n).step_by(16 * NV) {
                let w = (16 * NV).min(n - j0);
                // SAFETY: AVX-512F present (`sgemm::enabled`); rows `i0..i0 + r` of `a` and
                // `c`, columns `j0..j0 + w` of `b` and `c` lie inside the slices (asserted).
                unsafe {
                    micro_rows(
                        r,
                        w,
                        k,
                        a.as_ptr().add(i0 * k),
                        k,
                        b.as_ptr().add(j0),
                        n,
                        c.as_mut_ptr().add(i0 * n + j0),
                        n,
                        acc,
                    )
                };
            }
        }
        return;
    }
    let (a, b) = (
        Operand {
            data: &a[..m * k],
            transposed: false,
        },
        Operand {
            data: &b[..k * n],
            transposed: false,
        },
    );
    matmul_serial(m, n, k, a, b, &mut c[..m * n], acc);
}

/// [`micro`] for `r ≤ MR` rows and `w ≤ 48` columns.
///
/// # Safety
/// As [`micro`].
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn micro_rows(
    r: usize,
    w: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    macro_rules! go {
        ($r:literal) => {
            match w.div_ceil(16) {
                // SAFETY: forwarded.
                1 => unsafe { micro::<$r, 1>(w, k, a, lda, b, ldb, c, ldc, acc) },
                // SAFETY: forwarded.
                2 => unsafe { micro::<$r, 2>(w, k, a, lda, b, ldb, c, ldc, acc) },
                // SAFETY: forwarded.
                _ => unsafe { micro::<$r, NV>(w, k, a, lda, b, ldb, c, ldc, acc) },
            }
        };
    }
    match r {
        1 => go!(1),
        2 => go!(2),
        3 => go!(3),
        4 => go!(4),
        5 => go!(5),
        6 => go!(6),
        7 => go!(7),
        _ => go!(8),
    }
}

/// `c[R×w] (+)= a[R×k] · b[k×w]` with `16 · (V - 1) < w ≤ 16 · V`: `R · V` zmm accumulators;
/// per step of `k`, `V` vectors of `b`'s row and `R` broadcasts of `a`'s column.
///
/// # Safety
/// AVX-512F present; `a` readable at `i · lda + p`, `b` at `p · ldb + j`, `c` writable at
/// `i · ldc + j` for `i < R`, `p < k`, `j < w`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn micro<const R: usize, const V: usize>(
    w: usize,
    k: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    acc: bool,
) {
    use std::arch::x86_64::*;
    let rem = w - 16 * (V - 1);
    let last: __mmask16 = if rem >= 16 {
        0xffff
    } else {
        ((1u32 << rem) - 1) as u16
    };
    let mut s = [[_mm512_setzero_ps(); V]; R];
    for p in 0..k {
        let mut bv = [_mm512_setzero_ps(); V];
        for (v, x) in bv.iter_mut().enumerate() {
            // SAFETY: row `p` of `b`, columns below `w` (the last vector masked).
            *x = unsafe {
                let at = b.add(p * ldb + 16 * v);
                if v + 1 == V {
                    _mm512_maskz_loadu_ps(last, at)
                } else {
                    _mm512_loadu_ps(at)
                }
            };
        }
        for (i, row) in s.iter_mut().enumerate() {
            // SAFETY: `(i, p)` of `a`.
            let av = _mm512_set1_ps(unsafe { *a.add(i * lda + p) });
            for v in 0..V {
                row[v] = _mm512_fmadd_ps(av, bv[v], row[v]);
            }
        }
    }
    for (i, row) in s.iter().enumerate() {
        for (v, x) in row.iter().enumerate() {
            let mask = if v + 1 == V { last } else { 0xffff };
            // SAFETY: row `i`, columns below `w`, of `c`.
            unsafe {
                let at = c.add(i * ldc + 16 * v);
                let r = if acc {
                    _mm512_add_ps(*x, _mm512_maskz_loadu_ps(mask, at))
                } else {
                    *x
                };
                _mm512_mask_storeu_ps(at, mask, r);
            }
        }
    }
}

/// `Bᵀ` applied to 6 values (`x[k]` for `k` in `0..6`, each a vector of lanes).
#[inline(always)]
fn bt(d: [[f32; L]; 6]) -> [[f32; L]; 6] {
    let mut r = [[0.0f32; L]; 6];
    for l in 0..L {
        let [d0, d1, d2, d3, d4, d5] = [d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]];
        r[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
        r[1][l] = -4.0 * (d1 + d2) + d3 + d4;
        r[2][l] = 4.0 * (d1 - d2) - d3 + d4;
        r[3][l] = 2.0 * (d3 - d1) - d2 + d4;
        r[4][l] = 2.0 * (d1 - d3) - d2 + d4;
        r[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
    }
    r
}

/// `Aᵀ` applied to 6 values: 4 outputs.
#[inline(always)]
fn at(m: [[f32; L]; 6]) -> [[f32; L]; 4] {
    let mut r = [[0.0f32; L]; 4];
    for l in 0..L {
        let [m0, m1, m2, m3, m4, m5] = [m[0][l], m[1][l], m[2][l], m[3][l], m[4][l], m[5][l]];
        let (a, b) = (m1 + m2, m1 - m2);
        let (c, e) = (m3 + m4, m3 - m4);
        r[0][l] = m0 + a + c;
        r[1][l] = b + 2.0 * e;
        r[2][l] = a + 4.0 * c;
        r[3][l] = b + 8.0 * e + m5;
    }
    r
}

/// `A` applied to 4 values (the adjoint of [`at`]): 6 outputs.
#[inline(always)]
fn a_adj(y: [[f32; L]; 4]) -> [[f32; L]; 6] {
    let mut r = [[0.0f32; L]; 6];
    for l in 0..L {
        let [y0, y1, y2, y3] = [y[0][l], y[1][l], y[2][l], y[3][l]];
        let (ev1, od1) = (y0 + y2, y1 + y3);
        let (ev2, od2) = (y0 + 4.0 * y2, 2.0 * y1 + 8.0 * y3);
        r[0][l] = y0;
        r[1][l] = ev1 + od1;
        r[2][l] = ev1 - od1;
        r[3][l] = ev2 + od2;
        r[4][l] = ev2 - od2;
        r[5][l] = y3;
    }
    r
}

/// Per-lane placement of 16 consecutive tiles: `(image, first row, first column)` in the
/// tile's own coordinates (patch origin for inputs, tile origin for outputs), `None` for lanes
/// past the last tile.
type Lanes = [Option<(usize, isize, isize)>; L];

fn lanes(s: &Wino, t0: usize, oy: isize, ox: isize) -> Lanes {
    let mut r = [None; L];
    for (l, slot) in r.iter_mut().enumerate() {
        *slot = s
            .tile(t0 + l)
            .map(|(n, ty, tx)| (n, (ty * 4) as isize - oy, (tx * 4) as isize - ox));
    }
    r
}

/// Gathers the `rows × cols` patch of each lane from channel `c` of an array of `ch` channels of
/// `h × w` planes (zeros outside) into `d[i * cols + j][lane]`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gather<const R: usize, const C: usize>(
    src: &[f32],
    ch: usize,
    c: usize,
    h: usize,
    w: usize,
    lanes: &Lanes,
    d: &mut [[[f32; L]; C]; R],
) {
    let hw = h * w;
    for (l, lane) in lanes.iter().enumerate() {
        let Some((n, y0, x0)) = *lane else {
            for row in d.iter_mut() {
                for v in row.iter_mut() {
                    v[l] = 0.0;
                }
            }
            continue;
        };
        let plane = &src[(n * ch + c) * hw..][..hw];
        let inside = y0 >= 0 && x0 >= 0 && y0 as usize + R <= h && x0 as usize + C <= w;
        if inside {
            let (y0, x0) = (y0 as usize, x0 as usize);
            for (i, row) in d.iter_mut().enumerate() {
                let s = &plane[(y0 + i) * w + x0..][..C];
                for (j, v) in row.iter_mut().enumerate() {
                    v[l] = s[j];
                }
            }
        } else {
            for (i, row) in d.iter_mut().enumerate() {
                let y = y0 + i as isize;
                for (j, v) in row.iter_mut().enumerate() {
                    let x = x0 + j as isize;
                    v[l] = if y >= 0 && x >= 0 && (y as usize) < h && (x as usize) < w {
                        plane[y as usize * w + x as usize]
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// The offsets of the `R × C` patches of `lanes` in channel 0 of their images (`ch` channels of
/// `h × w`) when every lane has a patch inside the plane: then rows of lanes load without checks.
fn inside_bases<const R: usize, const C: usize>(
    lanes: &Lanes,
    ch: usize,
    h: usize,
    w: usize,
) -> Option<[usize; L]> {
    let mut base = [0usize; L];
    for (b, lane) in base.iter_mut().zip(lanes) {
        let (n, y0, x0) = (*lane)?;
        if y0 < 0 || x0 < 0 || y0 as usize + R > h || x0 as usize + C > w {
            return None;
        }
        *b = n * ch * h * w + y0 as usize * w + x0 as usize;
    }
    Some(base)
}

/// Row `C` values at `at` of every lane's patch, at offsets `base` (from [`inside_bases`],
/// which checked that they lie inside `src`), into `row[j][lane]`.
#[inline(always)]
fn load_row<const C: usize>(src: &[f32], base: &[usize; L], at: usize, row: &mut [[f32; L]; C]) {
    let last = base.iter().max().copied().unwrap_or(0) + at + C;
    assert!(last <= src.len());
    for (j, r) in row.iter_mut().enumerate() {
        for (l, v) in r.iter_mut().enumerate() {
            // SAFETY: base[l] + at + j < last <= src.len() (asserted above).
            *v = unsafe { *src.get_unchecked(base[l] + at + j) };
        }
    }
}

/// Whether patches are gathered with [`gather_avx512`] (AVX-512F present;
/// `MXRT_WINOGRAD_GATHER=scalar` keeps the scalar loads, for comparison).
fn fast_gather() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f")
                && std::env::var("MXRT_WINOGRAD_GATHER").map_or(true, |v| v != "scalar")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Per-lane patch placement for [`gather_avx512`]: the patch origin's offset in channel 0, the
/// columns (bits) and rows (bits) of the `R × C` patch inside the plane; lanes past the last tile
/// have none.
#[derive(Clone, Copy)]
struct Plan {
    off: [isize; L],
    cols: [u16; L],
    rows: [u16; L],
}

fn plan<const R: usize, const C: usize>(lanes: &Lanes, ch: usize, h: usize, w: usize) -> Plan {
    let mut p = Plan {
        off: [0; L],
        cols: [0; L],
        rows: [0; L],
    };
    for (l, lane) in lanes.iter().enumerate() {
        let Some((n, y0, x0)) = *lane else { continue };
        p.off[l] = (n * ch * h * w) as isize + y0 * w as isize + x0;
        for j in 0..C {
            let x = x0 + j as isize;
            if x >= 0 && (x as usize) < w {
                p.cols[l] |= 1 << j;
            }
        }
        for i in 0..R {
            let y = y0 + i as isize;
            if y >= 0 && (y as usize) < h {
                p.rows[l] |= 1 << i;
            }
        }
    }
    p
}

/// [`gather`] with AVX-512: per row of the patches, each lane's `C` values in one masked load
/// (zeros outside the plane, no per-value checks), two lanes per register, then an 8 × 8
/// transpose in each register half and an interleave of the halves give the rows' columns as
/// vectors of lanes.
///
/// # Safety
/// AVX-512F present; `plan` from [`plan`] for `src`'s geometry (`hw` floats per channel) and
/// `c` a channel of it, so that every unmasked value lies inside `src`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn gather_avx512<const R: usize, const C: usize>(
    src: &[f32],
    plan: &Plan,
    at: isize,
    w: usize,
    d: &mut [[[f32; L]; C]; R],
) {
    use std::arch::x86_64::*;
    let base = src.as_ptr();
    // out[2k] from the low half's row k, out[2k + 1] from the high half's, columns c (c + 4 for
    // the second index) of rows 0-3 (first operand) and 4-7 (second)
    let idx = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
    let idx4 = _mm512_add_epi32(idx, _mm512_set1_epi32(4));
    for (i, di) in d.iter_mut().enumerate() {
        let row = at + (i * w) as isize;
        let mut z = [_mm512_setzero_ps(); 8];
        for (k, zk) in z.iter_mut().enumerate() {
            let (a, b) = (2 * k, 2 * k + 1);
            let ma = if plan.rows[a] >> i & 1 == 1 { plan.cols[a] } else { 0 };
            let mb = if plan.rows[b] >> i & 1 == 1 { plan.cols[b] } else { 0 };
            // SAFETY: the unmasked values are the lanes' patch values inside the plane (caller's
            // contract); masked-off values are not accessed.
            unsafe {
                let lo = _mm512_maskz_loadu_ps(ma, base.wrapping_offset(plan.off[a] + row));
                *zk = _mm512_mask_loadu_ps(
                    lo,
                    mb << 8,
                    base.wrapping_offset(plan.off[b] + row - 8),
                );
            }
        }
        let t: [__m512; 8] = [
            _mm512_unpacklo_ps(z[0], z[1]),
            _mm512_unpackhi_ps(z[0], z[1]),
            _mm512_unpacklo_ps(z[2], z[3]),
            _mm512_unpackhi_ps(z[2], z[3]),
            _mm512_unpacklo_ps(z[4], z[5]),
            _mm512_unpackhi_ps(z[4], z[5]),
            _mm512_unpacklo_ps(z[6], z[7]),
            _mm512_unpackhi_ps(z[6], z[7]),
        ];
        // per 128-bit part: rows 0-3 (lo) / 4-7 (hi) of columns (c, c + 4)
        let lo = [
            _mm512_shuffle_ps::<0x44>(t[0], t[2]),
            _mm512_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm512_shuffle_ps::<0x44>(t[1], t[3]),
            _mm512_shuffle_ps::<0xEE>(t[1], t[3]),
        ];
        let hi = [
            _mm512_shuffle_ps::<0x44>(t[4], t[6]),
            _mm512_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm512_shuffle_ps::<0x44>(t[5], t[7]),
            _mm512_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        for (j, dj) in di.iter_mut().enumerate() {
            let v = if j < 4 {
                _mm512_permutex2var_ps(lo[j], idx, hi[j])
            } else {
                _mm512_permutex2var_ps(lo[j - 4], idx4, hi[j - 4])
            };
            // SAFETY: `dj` holds 16 floats.
            unsafe { _mm512_storeu_ps(dj.as_mut_ptr(), v) };
        }
    }
}

/// The inverse of [`gather_avx512`] for 4 × 4 output tiles: `out[i][j][lane]` stored at each
/// lane's tile in `y` (a 4 × 16 transpose per row, then one masked store of 4 values per lane).
///
/// # Safety
/// AVX-512F present; `plan` from [`plan`] for `y`'s geometry and `at` a channel's offset in it,
/// so that every unmasked position lies inside `y`; no other thread writes those positions.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn scatter_avx512(y: *mut f32, plan: &Plan, at: isize, w: usize, out: &[[[f32; L]; 4]; 4]) {
    use std::arch::x86_64::*;
    for (i, oi) in out.iter().enumerate() {
        // SAFETY: each `oi[j]` holds 16 floats.
        let o = oi.each_ref().map(|v| unsafe { _mm512_loadu_ps(v.as_ptr()) });
        let t = [
            _mm512_unpacklo_ps(o[0], o[1]),
            _mm512_unpackhi_ps(o[0], o[1]),
            _mm512_unpacklo_ps(o[2], o[3]),
            _mm512_unpackhi_ps(o[2], o[3]),
        ];
        // lane 4q + r's 4 values in 128-bit part q of s[r]
        let s = [
            _mm512_shuffle_ps::<0x44>(t[0], t[2]),
            _mm512_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm512_shuffle_ps::<0x44>(t[1], t[3]),
            _mm512_shuffle_ps::<0xEE>(t[1], t[3]),
        ];
        let row = at + (i * w) as isize;
        for l in 0..L {
            let (q, r) = (l / 4, l % 4);
            let m = if plan.rows[l] >> i & 1 == 1 { plan.cols[l] } else { 0 };
            if m != 0 {
                // SAFETY: the unmasked positions are the lane's tile row inside `y` (caller's
                // contract); masked-off positions are not accessed.
                unsafe {
                    _mm512_mask_storeu_ps(
                        y.wrapping_offset(plan.off[l] + row - 4 * q as isize),
                        m << (4 * q),
                        s[r],
                    )
                };
            }
        }
    }
}

/// Channels gathered at a time: all their (scalar) stores reach the cache before the transforms
/// read them back as vectors, which a load right behind the stores could not forward.
const CHUNK: usize = 8;

/// `V[p][c][lane]` (rows of `stride` tiles from `off`) for the 16 tiles of `lanes`, every
/// channel.
#[inline(always)]
fn input_transform_body(
    s: &Wino,
    x: &[f32],
    lanes: &Lanes,
    v: &mut [f32],
    stride: usize,
    off: usize,
) {
    let hw = s.ih * s.iw;
    let inside = inside_bases::<6, 6>(lanes, s.ci, s.ih, s.iw);
    let fast = fast_gather().then(|| plan::<6, 6>(lanes, s.ci, s.ih, s.iw));
    assert!(x.len() >= s.batch * s.ci * hw);
    let mut chunk = [[[[0.0f32; L]; 6]; 6]; CHUNK];
    for c0 in (0..s.ci).step_by(CHUNK) {
        let n = CHUNK.min(s.ci - c0);
        for (cc, d) in chunk.iter_mut().enumerate().take(n) {
            let c = c0 + cc;
            #[cfg(target_arch = "x86_64")]
            if let Some(pl) = &fast {
                // SAFETY: `fast_gather` checked AVX-512F; the plan is for `x`'s geometry (its
                // length asserted above) and `c < ci`.
                unsafe { gather_avx512::<6, 6>(x, pl, (c * hw) as isize, s.iw, d) };
                continue;
            }
            if let Some(base) = &inside {
                for (i, di) in d.iter_mut().enumerate() {
                    load_row::<6>(x, base, c * hw + i * s.iw, di);
                }
            } else {
                gather::<6, 6>(x, s.ci, c, s.ih, s.iw, lanes, d);
            }
        }
        for (cc, d) in chunk.iter().enumerate().take(n) {
            let c = c0 + cc;
            // rows: t = d B
            let mut t = [[[0.0f32; L]; 6]; 6];
            for (ti, di) in t.iter_mut().zip(d) {
                *ti = bt(*di);
            }
            // columns: Bᵀ t
            for k in 0..6 {
                let col = bt([t[0][k], t[1][k], t[2][k], t[3][k], t[4][k], t[5][k]]);
                for (i, vals) in col.iter().enumerate() {
                    let p = i * 6 + k;
                    v[(p * s.ci + c) * stride + off..][..L].copy_from_slice(vals);
                }
            }
        }
    }
}

/// The output tiles of `lanes` from `M[p][o][lane]`, written into `y` (`co` channels of
/// `oh × ow`), only the positions inside the output.
#[inline(always)]
fn output_transform_body(
    s: &Wino,
    m: &[f32],
    stride: usize,
    off: usize,
    lanes: &Lanes,
    y: Ptr<f32>,
) {
    let ohw = s.oh * s.ow;
    let fast = fast_gather().then(|| plan::<4, 4>(lanes, s.co, s.oh, s.ow));
    for o in 0..s.co {
        let mut t = [[[0.0f32; L]; 6]; 4];
        for i in 0..6 {
            let mut row = [[0.0f32; L]; 6];
            for (k, r) in row.iter_mut().enumerate() {
                r.copy_from_slice(&m[((i * 6 + k) * s.co + o) * stride + off..][..L]);
            }
            // rows first: (M A) for row i
            let r = at(row);
            for (j, v) in r.iter().enumerate() {
                t[j][i] = *v;
            }
        }
        // t[j][i] = (M A)[i][j]; columns: Aᵀ (M A)
        let mut out = [[[0.0f32; L]; 4]; 4];
        for j in 0..4 {
            let col = at(t[j]);
            for i in 0..4 {
                out[i][j] = col[i];
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(pl) = &fast {
            // SAFETY: `fast_gather` checked AVX-512F; the plan is for `y`'s geometry and
            // `o < co`; each output position belongs to exactly one tile, and tiles are split
            // between threads.
            unsafe { scatter_avx512(y.get(), pl, (o * ohw) as isize, s.ow, &out) };
            continue;
        }
        for (l, lane) in lanes.iter().enumerate() {
            let Some((n, y0, x0)) = *lane else { continue };
            let (y0, x0) = (y0 as usize, x0 as usize);
            let base = (n * s.co + o) * ohw;
            for (i, row) in out.iter().enumerate().take(s.oh.saturating_sub(y0).min(4)) {
                for (j, v) in row.iter().enumerate().take(s.ow.saturating_sub(x0).min(4)) {
                    // SAFETY: (n, o, y0 + i, x0 + j) lies inside `y` (checked against the
                    // output size); each output position belongs to exactly one tile, and tiles
                    // are split between threads.
                    unsafe { *y.get().add(base + (y0 + i) * s.ow + x0 + j) = v[l] };
                }
            }
        }
    }
}

/// `dM[p][tile][o] = (A dY Aᵀ)_p` for the 16 tiles of `lanes` from the output gradient `dy`:
/// rows of `co` floats, `stride` tiles per point, the lanes' rows from `off` (tile-major, so that
/// the weight gradient's products read rows of output channels as vectors).
#[inline(always)]
fn grad_transform_body(
    s: &Wino,
    dy: &[f32],
    lanes: &Lanes,
    dm: &mut [f32],
    stride: usize,
    off: usize,
) {
    let ohw = s.oh * s.ow;
    let inside = inside_bases::<4, 4>(lanes, s.co, s.oh, s.ow);
    let fast = fast_gather().then(|| plan::<4, 4>(lanes, s.co, s.oh, s.ow));
    assert!(dy.len() >= s.batch * s.co * ohw);
    assert!(dm.len() >= P * stride * s.co && off + L <= stride);
    let mut chunk = [[[[0.0f32; L]; 4]; 4]; CHUNK];
    let mut res = [[[0.0f32; L]; P]; CHUNK];
    for o0 in (0..s.co).step_by(CHUNK) {
        let n = CHUNK.min(s.co - o0);
        for (oo, d) in chunk.iter_mut().enumerate().take(n) {
            let o = o0 + oo;
            #[cfg(target_arch = "x86_64")]
            if let Some(pl) = &fast {
                // SAFETY: `fast_gather` checked AVX-512F; the plan is for `dy`'s geometry (its
                // length asserted above) and `o < co`.
                unsafe { gather_avx512::<4, 4>(dy, pl, (o * ohw) as isize, s.ow, d) };
                continue;
            }
            if let Some(base) = &inside {
                for (i, di) in d.iter_mut().enumerate() {
                    load_row::<4>(dy, base, o * ohw + i * s.ow, di);
                }
            } else {
                gather::<4, 4>(dy, s.co, o, s.oh, s.ow, lanes, d);
            }
        }
        for (d, r) in chunk.iter().zip(res.iter_mut()).take(n) {
            // rows: t = dY Aᵀ
            let mut t = [[[0.0f32; L]; 6]; 4];
            for (ti, di) in t.iter_mut().zip(d) {
                *ti = a_adj(*di);
            }
            // columns: A t
            for k in 0..6 {
                let col = a_adj([t[0][k], t[1][k], t[2][k], t[3][k]]);
                for (i, vals) in col.iter().enumerate() {
                    r[i * 6 + k] = *vals;
                }
            }
        }
        // the chunk's channels side by side, tile by tile
        for p in 0..P {
            for l in 0..L {
                let row = &mut dm[(p * stride + off + l) * s.co + o0..][..n];
                for (oo, v) in row.iter_mut().enumerate() {
                    *v = res[oo][p][l];
                }
            }
        }
    }
}

multiversion!(input_transform(s: &Wino, x: &[f32], lanes: &Lanes, v: &mut [f32], stride: usize, off: usize) => input_transform_body);
multiversion!(output_transform(s: &Wino, m: &[f32], stride: usize, off: usize, lanes: &Lanes, y: Ptr<f32>) => output_transform_body);
multiversion!(grad_transform(s: &Wino, dy: &[f32], lanes: &Lanes, dm: &mut [f32], stride: usize, off: usize) => grad_transform_body);

/// `G` applied to 3 values: 6 outputs.
#[inline(always)]
fn gm(g: [[f32; L]; 3]) -> [[f32; L]; 6] {
    let mut r = [[0.0f32; L]; 6];
    for l in 0..L {
        let [a, b, c] = [g[0][l], g[1][l], g[2][l]];
        let (ac, q) = (a * (1.0 / 24.0) + c * (1.0 / 6.0), b * (1.0 / 12.0));
        r[0][l] = a * 0.25;
        r[1][l] = -(a + b + c) * (1.0 / 6.0);
        r[2][l] = -(a - b + c) * (1.0 / 6.0);
        r[3][l] = ac + q;
        r[4][l] = ac - q;
        r[5][l] = c;
    }
    r
}

/// `Gᵀ` applied to 6 values (the adjoint of [`gm`]): 3 outputs.
#[inline(always)]
fn gt(u: [[f32; L]; 6]) -> [[f32; L]; 3] {
    let mut r = [[0.0f32; L]; 3];
    for l in 0..L {
        let [u0, u1, u2, u3, u4, u5] = [u[0][l], u[1][l], u[2][l], u[3][l], u[4][l], u[5][l]];
        r[0][l] = u0 * 0.25 - (u1 + u2) * (1.0 / 6.0) + (u3 + u4) * (1.0 / 24.0);
        r[1][l] = (u2 - u1) * (1.0 / 6.0) + (u3 - u4) * (1.0 / 12.0);
        r[2][l] = (u3 + u4 - u1 - u2) * (1.0 / 6.0) + u5;
    }
    r
}

/// `U[p][a][b..b + 16] = G g Gᵀ` for the kernels of 16 pairs `(a, b..)` of the destination
/// (`to × from` channels; past `from`, lanes are skipped); see [`transform_weight`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn weight_transform_body(
    w: &[f32],
    inp: usize,
    transpose: bool,
    to: usize,
    from: usize,
    a: usize,
    b: usize,
    u: Ptr<f32>,
) {
    let mut g = [[[0.0f32; L]; 3]; 3];
    let lanes = (from - b).min(L);
    for l in 0..lanes {
        let (o, c) = if transpose { (b + l, a) } else { (a, b + l) };
        let k = &w[(o * inp + c) * 9..][..9];
        for i in 0..9 {
            g[i / 3][i % 3][l] = if transpose { k[8 - i] } else { k[i] };
        }
    }
    let mut t = [[[0.0f32; L]; 3]; 6]; // G g
    for j in 0..3 {
        let col = gm([g[0][j], g[1][j], g[2][j]]);
        for i in 0..6 {
            t[i][j] = col[i];
        }
    }
    for (i, row) in t.iter().enumerate() {
        let r = gm(*row);
        for (k, vals) in r.iter().enumerate() {
            let p = i * 6 + k;
            // SAFETY: `lanes` values from (p, a, b) stay inside `U` (`P × to × from`); each
            // (a, b) block is written by one caller.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(u.get().add((p * to + a) * from + b), lanes)
            };
            dst.copy_from_slice(&vals[..lanes]);
        }
    }
}

/// `dw[a..a + 16][b] = Gᵀ dU G` (`dU[p][b][a]`, `ci × co`: transposed); `dw` holds output
/// channels `a..` of the weight gradient (`ci × 9` each).
#[inline(always)]
fn weight_adj_body(du: &[f32], co: usize, ci: usize, a: usize, b: usize, dw: &mut [f32]) {
    let lanes = (co - a).min(L);
    let mut t = [[[0.0f32; L]; 6]; 3]; // Gᵀ dU
    for j in 0..6 {
        let mut col = [[0.0f32; L]; 6];
        for (i, c) in col.iter_mut().enumerate() {
            c[..lanes].copy_from_slice(&du[((i * 6 + j) * ci + b) * co + a..][..lanes]);
        }
        let r = gt(col);
        for i in 0..3 {
            t[i][j] = r[i];
        }
    }
    for (i, row) in t.iter().enumerate() {
        let r = gt(*row);
        for (j, vals) in r.iter().enumerate() {
            for l in 0..lanes {
                dw[(l * ci + b) * 9 + i * 3 + j] = vals[l];
            }
        }
    }
}

multiversion!(weight_transform(w: &[f32], inp: usize, transpose: bool, to: usize, from: usize, a: usize, b: usize, u: Ptr<f32>) => weight_transform_body);
multiversion!(weight_adj(du: &[f32], co: usize, ci: usize, a: usize, b: usize, dw: &mut [f32]) => weight_adj_body);

/// The transformed weight `U[p][to][from]` of `w` (`(out, in, 3, 3)`, row-major). With
/// `transpose`, the weight of the transposed convolution (`in` → `out` channels swapped, the
/// kernel flipped): the data gradient as a forward convolution.
pub fn transform_weight(w: &[f32], out: usize, inp: usize, transpose: bool) -> Scratch {
    assert!(w.len() >= out * inp * 9);
    let (to, from) = if transpose { (inp, out) } else { (out, inp) };
    let mut u = Scratch::new(P * to * from);
    let up = Ptr(u.as_mut_ptr());
    // destination rows outer: the 36 points' rows of `U` are each written in order (lane groups
    // outer wrote 36 rows `from` floats apart per kernel group: 3x the time at 512 channels)
    super::conv::split(to, |rows| {
        for a in rows {
            for b in (0..from).step_by(L) {
                weight_transform(w, inp, transpose, to, from, a, b, up);
            }
        }
    });
    u
}

/// Calls `f(first_group, groups)` over the tile groups of `s` in blocks, blocks split over the
/// pool in contiguous ranges (the first on the calling thread); `f` gets the range's index.
fn over_blocks(s: &Wino, f: impl Fn(usize, std::ops::Range<usize>) + Sync) {
    let groups = s.tiles().div_ceil(L);
    let parts = parallel::max_threads().min(groups).max(1);
    let step = groups.div_ceil(parts);
    if parts == 1 {
        f(0, 0..groups);
        return;
    }
    parallel::for_parts(parts, |p| {
        let r = (p * step).min(groups)..((p + 1) * step).min(groups);
        if !r.is_empty() {
            f(p, r);
        }
    });
}

/// `y = conv3×3(x, w)` from the transformed weight `u` (`U[p][co][ci]`); `y` overwritten.
pub fn forward(s: &Wino, x: &[f32], u: &[f32], y: &mut [f32]) {
    assert!(x.len() >= s.batch * s.ci * s.ih * s.iw && u.len() >= P * s.co * s.ci);
    assert!(y.len() >= s.batch * s.co * s.oh * s.ow);
    assert!(s.oh + 2 == s.ih + 2 * s.ph && s.ow + 2 == s.iw + 2 * s.pw);
    let yp = Ptr(y.as_mut_ptr());
    let bg = s.block_groups();
    over_blocks(s, |_, groups| {
        let nb = bg.min(groups.len()) * L;
        let mut v = Scratch::new(P * s.ci * nb);
        let mut m = Scratch::new(P * s.co * nb);
        let mut g = groups.start;
        while g < groups.end {
            let n = bg.min(groups.end - g);
            let stride = n * L;
            for k in 0..n {
                let ls = lanes(s, (g + k) * L, s.ph as isize, s.pw as isize);
                input_transform(s, x, &ls, &mut v, stride, k * L);
            }
            for p in 0..P {
                product(
                    s.co,
                    stride,
                    s.ci,
                    &u[p * s.co * s.ci..],
                    &v[p * s.ci * stride..],
                    &mut m[p * s.co * stride..],
                    false,
                );
            }
            for k in 0..n {
                let ls = lanes(s, (g + k) * L, 0, 0);
                output_transform(s, &m, stride, k * L, &ls, yp);
            }
            g += n;
        }
    });
}

/// `dw = Σ_images` the 3×3 weight gradient from the input `x` and the output gradient `dy`
/// (`dw`, `(co, ci, 3, 3)`, overwritten). Per-thread partial sums are added in a fixed order.
pub fn weight_grad(s: &Wino, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    assert!(x.len() >= s.batch * s.ci * s.ih * s.iw && dw.len() >= s.co * s.ci * 9);
    assert!(dy.len() >= s.batch * s.co * s.oh * s.ow);
    assert!(s.oh + 2 == s.ih + 2 * s.ph && s.ow + 2 == s.iw + 2 * s.pw);
    let bg = s.block_groups();
    let ul = P * s.co * s.ci;
    let partials = std::sync::Mutex::new(Vec::<(usize, Scratch)>::new());
    over_blocks(s, |part, groups| {
        let nb = bg.min(groups.len()) * L;
        let mut v = Scratch::new(P * s.ci * nb);
        let mut m = Scratch::new(P * s.co * nb);
        // dUᵀ[p][ci][co]
        let mut du = Scratch::new(ul);
        let mut g = groups.start;
        let mut first = true;
        while g < groups.end {
            let n = bg.min(groups.end - g);
            let stride = n * L;
            for k in 0..n {
                let ls = lanes(s, (g + k) * L, s.ph as isize, s.pw as isize);
                input_transform(s, x, &ls, &mut v, stride, k * L);
                let ls = lanes(s, (g + k) * L, 0, 0);
                grad_transform(s, dy, &ls, &mut m, stride, k * L);
            }
            for p in 0..P {
                product(
                    s.ci,
                    s.co,
                    stride,
                    &v[p * s.ci * stride..],
                    &m[p * stride * s.co..],
                    &mut du[p * s.ci * s.co..],
                    !first,
                );
            }
            first = false;
            g += n;
        }
        partials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((part, du));
    });
    let mut partials = partials.into_inner().unwrap_or_else(|e| e.into_inner());
    partials.sort_by_key(|(part, _)| *part);
    let mut parts = partials.into_iter().map(|(_, p)| p);
    let Some(mut sum) = parts.next() else {
        dw[..s.co * s.ci * 9].fill(0.0);
        return;
    };
    // the partials' sum and its inverse transform pass over tens of MiB at 512 channels: both
    // split over the pool, in the partials' order (the sum is the serial one, bit for bit)
    let rest: Vec<Scratch> = parts.collect();
    if !rest.is_empty() {
        parallel::for_chunks_mut(&mut sum[..ul], 1, |start, chunk| {
            let len = chunk.len();
            for p in &rest {
                for (a, b) in chunk.iter_mut().zip(&p[start..start + len]) {
                    *a += b;
                }
            }
        });
    }
    drop(rest);
    // blocks of `L` output channels: contiguous in `dw`, one task each
    let sum = &sum[..ul];
    let mut blocks: Vec<&mut [f32]> = dw[..s.co * s.ci * 9].chunks_mut(L * s.ci * 9).collect();
    parallel::for_each_mut(&mut blocks, parallel::max_threads(), |k, block| {
        for c in 0..s.ci {
            weight_adj(sum, s.co, s.ci, k * L, c, block);
        }
    });
}
