//! mxrt's own single-precision GEMM for CPUs with AVX-512.
//!
//! The `gemm` crate, which computes every other float product, runs only its AVX2+FMA kernels on
//! stable Rust (its AVX-512 kernels need the nightly compiler), so on a CPU that executes 512-bit
//! FMAs at full width it reaches half the machine's peak. This module is a BLIS-style product on
//! AVX-512F:
//!
//! - the operands are read at any strides (row-major, transposed, views inside larger buffers)
//!   and packed: `B` into `KC × NR` panels (one `NR`-float row per step of `k`), `A` into
//!   `MR × KC` panels (one `MR`-float column per step of `k`), zero-padded at the edges;
//! - a register-blocked micro-kernel keeps `MR × NR` results in `MR · NR / 16` zmm
//!   accumulators and, per step of `k`, loads `NR / 16` vectors of `B` and broadcasts `MR`
//!   values of `A` into independent FMAs; edge tiles are stored with masked loads and stores;
//! - cache blocking: a `KC × NC` block of `B` is packed once per `NC` columns, an `MC × KC`
//!   block of `A` sits in L2 while each `KC × NR` panel of `B` stays in L1 across it;
//! - large products split `C` into rectangles of whole tiles, one per thread of the intra-op
//!   pool, each packing its own operands;
//! - an operand used by many products (a convolution's weight, for every image of a batch and
//!   every run of a prepared layer) is packed once into a [`Packed`] matrix, every `KC` block of
//!   it in the panel layout above, and passed as a [`Side::Packed`]: the products skip its
//!   packing.
//!
//! [`enabled`] says whether the CPU has AVX-512F and `MXRT_SGEMM` does not ask for the `gemm`
//! crate (`MXRT_SGEMM=gemm` keeps every product on the crate, for comparison).

use crate::parallel;
use std::sync::OnceLock;

/// A strided f32 matrix: element `(i, j)` at `ptr + i · rs + j · cs`.
#[derive(Clone, Copy)]
pub struct Mat {
    pub ptr: *const f32,
    pub rs: isize,
    pub cs: isize,
}

/// A strided f32 destination: element `(i, j)` at `ptr + i · rs + j · cs`.
#[derive(Clone, Copy)]
pub struct MatMut {
    pub ptr: *mut f32,
    pub rs: isize,
    pub cs: isize,
}

// SAFETY: the pointers are only dereferenced inside `sgemm`, whose caller vouches for the
// memory; threads write disjoint rectangles of the destination.
unsafe impl Send for Mat {}
// SAFETY: as above.
unsafe impl Sync for Mat {}
// SAFETY: as above.
unsafe impl Send for MatMut {}
// SAFETY: as above.
unsafe impl Sync for MatMut {}

impl Mat {
    fn at(self, i: usize, j: usize) -> Mat {
        Mat {
            // wrapping: only a position; the caller dereferences it in bounds
            ptr: self
                .ptr
                .wrapping_offset(i as isize * self.rs + j as isize * self.cs),
            ..self
        }
    }
}

impl MatMut {
    fn at(self, i: usize, j: usize) -> MatMut {
        MatMut {
            ptr: self
                .ptr
                .wrapping_offset(i as isize * self.rs + j as isize * self.cs),
            ..self
        }
    }
}

/// What a product's store applies to each result of `C` once its last `k` block is summed: a
/// value per row added (a convolution's bias per output channel), then `max(0, ·)` keeping NaN
/// (`if t <= 0 { 0 } else { t }`, as the unfused relu). Each is one rounding on the stored
/// result, as a separate pass over `C` after the product would be.
#[derive(Clone, Copy, Debug, Default)]
pub struct Epilogue<'a> {
    /// Added to row `i`'s results: `bias[i]` (one value per row of `C` at least).
    pub bias: Option<&'a [f32]>,
    pub relu: bool,
}

impl<'a> Epilogue<'a> {
    /// Stores the product as it is.
    pub const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        relu: false,
    };

    fn is_none(&self) -> bool {
        self.bias.is_none() && !self.relu
    }

    /// The epilogue of the rows from `i` on.
    fn rows_from(self, i: usize) -> Epilogue<'a> {
        Epilogue {
            bias: self.bias.map(|b| &b[i.min(b.len())..]),
            ..self
        }
    }

    /// `t` of row `i` with the bias and relu applied.
    #[inline]
    pub fn apply(&self, i: usize, t: f32) -> f32 {
        let t = match self.bias {
            Some(b) => t + b[i],
            None => t,
        };
        if self.relu && t <= 0.0 { 0.0 } else { t }
    }
}

/// Rows of a micro-tile.
const MR: usize = 8;
/// zmm vectors per row of a micro-tile (`NR = 16 · NV` columns).
const NV: usize = 3;
const NR: usize = 16 * NV;
/// Products with fewer columns than this are routed elsewhere by the callers: one vector of the
/// micro-tile (with vectorised packing and the narrow edge kernels, 16 to 95 columns measured
/// level with or faster than the `gemm` crate: 64×48×1000 at 132 against 89 GFLOP/s).
pub const MIN_N: usize = 16;
/// Depth of a packed block.
const KC: usize = 256;
/// Rows of `A` packed at once (a multiple of `MR`).
const MC: usize = 8 * MR * 3;
/// Columns of `B` packed at once (a multiple of `NR`).
const NC: usize = NR * 40;

/// Whether products go through this module: AVX-512F present and `MXRT_SGEMM` not `gemm`.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let forced_off = std::env::var("MXRT_SGEMM").is_ok_and(|v| v == "gemm");
        !forced_off && detected()
    })
}

fn detected() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `c[m×n] = alpha · a[m×k] · b[k×n] (+ c with accumulate)` on up to `threads` threads.
///
/// # Safety
/// The CPU must have AVX-512F ([`enabled`]). `a`, `b` must be readable at every `(i, j)` of
/// their `m × k` and `k × n` matrices, `c` writable at every `(i, j)` of its `m × n`, and `c`
/// must not overlap `a` or `b` nor have two elements at one address.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm(
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Mat,
    b: Mat,
    c: MatMut,
    accumulate: bool,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        sgemm_sides(
            threads,
            m,
            n,
            k,
            alpha,
            Side::Strided(a),
            Side::Strided(b),
            c,
            accumulate,
        )
    }
}

/// A matrix packed once for many products: as `A` (`MR`-row panels) or as `B` (`NR`-column
/// panels), block `pc / KC` of the depth at `pad · pc` floats, rows (columns) past the matrix
/// zero. Made on a CPU with AVX-512F only ([`Packed::a`], [`Packed::b`]).
pub struct Packed {
    buf: Vec<Line>,
    /// Rows (as `A`) or columns (as `B`) of the matrix.
    len: usize,
    /// Its depth `k`.
    depth: usize,
    /// `len` rounded up to whole panels.
    pad: usize,
    is_a: bool,
}

// SAFETY: the buffer is owned and only read once packed.
unsafe impl Send for Packed {}
// SAFETY: as above.
unsafe impl Sync for Packed {}

thread_local! {
    /// A packed matrix's buffer given back when it is dropped, reused by the next one made on
    /// this thread: a convolution packs its weight once per call, and a fresh allocation of a
    /// few megabytes is faulted in as zeroed pages every time.
    static SPARE: std::cell::Cell<Vec<Line>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Largest buffer kept for reuse (floats): 16 MB.
const SPARE_MAX: usize = 4 << 20;

impl Packed {
    /// `a` (`m × k`) packed as the left operand.
    ///
    /// # Safety
    /// AVX-512F present ([`enabled`]); `a` readable at every `(i, p)` of its `m × k`.
    pub unsafe fn a(m: usize, k: usize, a: Mat) -> Packed {
        let mut p = Packed::room(m, k, MR, true);
        let out: *mut f32 = p.buf.as_mut_ptr().cast();
        for pc in (0..k).step_by(KC) {
            // SAFETY: block `pc` holds `pad · kc` floats at `pad · pc` inside the buffer; the
            // block of `a` is inside it (caller's contract).
            unsafe { pack_a(m, KC.min(k - pc), a.at(0, pc), out.add(p.pad * pc)) };
        }
        p
    }

    /// `b` (`k × n`) packed as the right operand.
    ///
    /// # Safety
    /// AVX-512F present ([`enabled`]); `b` readable at every `(p, j)` of its `k × n`.
    pub unsafe fn b(k: usize, n: usize, b: Mat) -> Packed {
        let mut p = Packed::room(n, k, NR, false);
        let out: *mut f32 = p.buf.as_mut_ptr().cast();
        for pc in (0..k).step_by(KC) {
            // SAFETY: as in [`Packed::a`]; `pad · pc` floats is a multiple of 64 bytes (`pad`
            // a multiple of `NR`), so every panel is 64-byte aligned.
            unsafe { pack_b(KC.min(k - pc), n, b.at(pc, 0), out.add(p.pad * pc)) };
        }
        p
    }

    fn room(len: usize, depth: usize, panel: usize, is_a: bool) -> Packed {
        let pad = len.div_ceil(panel) * panel;
        let lines = (pad * depth).div_ceil(16);
        let mut buf = SPARE.try_with(|b| b.take()).unwrap_or_default();
        if buf.capacity() < lines {
            // the spare stays for a smaller matrix
            let _ = SPARE.try_with(|b| b.set(buf));
            buf = Vec::with_capacity(lines);
        }
        Packed {
            buf,
            len,
            depth,
            pad,
            is_a,
        }
    }

    /// Rows (as `A`) or columns (as `B`).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the matrix has no rows (columns).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The depth `k`.
    pub fn depth(&self) -> usize {
        self.depth
    }
}

impl Drop for Packed {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        if buf.capacity() * 16 > SPARE_MAX {
            return;
        }
        let _ = SPARE.try_with(|s| {
            let old = s.take();
            s.set(if old.capacity() >= buf.capacity() { old } else { buf });
        });
    }
}

/// An operand of [`sgemm_sides`]: read at strides and packed by each product, or packed once.
#[derive(Clone, Copy)]
pub enum Side<'a> {
    Strided(Mat),
    Packed(&'a Packed),
    /// As `B` only: a matrix with contiguous rows (`cs == 1`) that the micro-kernel reads where
    /// it lies (`rs` floats from one step of `k` to the next, the next panel's rows prefetched
    /// by the first tile of each panel) instead of a packed copy: a 1×1 convolution's image.
    Rows(Mat),
}

/// An operand inside a product: strided, or a packed matrix from row (column) `off` on.
#[derive(Clone, Copy)]
enum Src {
    Raw(Mat),
    /// `B` read in place ([`Side::Rows`]).
    Rows(Mat),
    Packed {
        ptr: *const f32,
        pad: usize,
        off: usize,
    },
}

// SAFETY: as for `Mat`: only dereferenced inside `sgemm_sides`, whose caller vouches for it.
unsafe impl Send for Src {}
// SAFETY: as above.
unsafe impl Sync for Src {}

impl Src {
    fn of(side: Side<'_>) -> Src {
        match side {
            Side::Strided(m) => Src::Raw(m),
            Side::Rows(m) => Src::Rows(m),
            Side::Packed(p) => Src::Packed {
                ptr: p.buf.as_ptr().cast(),
                pad: p.pad,
                off: 0,
            },
        }
    }

    /// From row `i` (as `A`) or column `j` (as `B`) on: a multiple of the panel width for a
    /// packed matrix.
    fn shift(self, i: usize, j: usize) -> Src {
        match self {
            Src::Raw(m) => Src::Raw(m.at(i, j)),
            Src::Rows(m) => Src::Rows(m.at(i, j)),
            Src::Packed { ptr, pad, off } => Src::Packed {
                ptr,
                pad,
                off: off + i + j,
            },
        }
    }

    /// Whether the operand needs no packing buffer.
    fn packed(self) -> bool {
        !matches!(self, Src::Raw(_))
    }

    /// The panels of block `(x, pc)` (`x` the first row or column, `kc` deep): packed into
    /// `buf` by `pack`, or where the packed matrix holds them.
    ///
    /// # Safety
    /// As the packing functions for a strided operand; `x` a multiple of the panel width and
    /// the block inside a packed one.
    unsafe fn panels(
        self,
        x: usize,
        pc: usize,
        kc: usize,
        buf: *mut f32,
        pack: impl FnOnce(Mat, *mut f32),
    ) -> *const f32 {
        match self {
            Src::Raw(m) => {
                pack(m, buf);
                buf
            }
            // read in place: the block's first element (only `B` is ever `Rows`)
            Src::Rows(m) => m.at(pc, x).ptr,
            // SAFETY: block `pc` starts at `pad · pc`, panel `(off + x) / width` of it at
            // `(off + x) · kc` (caller's contract).
            Src::Packed { ptr, pad, off } => unsafe { ptr.add(pad * pc + (off + x) * kc) },
        }
    }
}

/// [`sgemm`] with either operand possibly packed once ([`Packed`]).
///
/// # Safety
/// As [`sgemm`] for the strided operands; a packed `a` must have been made by [`Packed::a`]
/// with `m` rows and depth `k`, a packed `b` by [`Packed::b`] with `n` columns and depth `k`
/// (checked).
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm_sides(
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Side<'_>,
    b: Side<'_>,
    c: MatMut,
    accumulate: bool,
) {
    // SAFETY: forwarded from the caller.
    unsafe { sgemm_sides_with(threads, m, n, k, alpha, a, b, c, accumulate, Epilogue::NONE) }
}

/// [`sgemm_sides`] with `epi` applied to every result as it is stored (`c = epi(alpha · a · b
/// (+ c))`), instead of a pass over `c` afterwards.
///
/// # Safety
/// As [`sgemm_sides`].
///
/// # Panics
/// Where `epi`'s bias has fewer than `m` values, or a packed operand is of another shape.
#[allow(clippy::too_many_arguments)]
pub unsafe fn sgemm_sides_with(
    threads: usize,
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Side<'_>,
    b: Side<'_>,
    c: MatMut,
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    if let Some(bias) = epi.bias {
        assert!(bias.len() >= m, "fewer bias values than rows");
    }
    if let Side::Packed(p) = a {
        assert!(p.is_a && p.len == m && p.depth == k, "packed A of another shape");
    }
    if let Side::Packed(p) = b {
        assert!(!p.is_a && p.len == n && p.depth == k, "packed B of another shape");
    }
    assert!(!matches!(a, Side::Rows(_)), "only B is read in place");
    if let Side::Rows(m) = b {
        assert!(m.cs == 1 && m.rs >= 0, "B read in place needs contiguous rows");
    }
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate || !epi.is_none() {
            for i in 0..m {
                for j in 0..n {
                    let p = c.at(i, j).ptr;
                    // SAFETY: `(i, j)` is inside `c` (caller's contract).
                    unsafe { *p = epi.apply(i, if accumulate { *p } else { 0.0 }) };
                }
            }
        }
        return;
    }
    let (a, b) = (Src::of(a), Src::of(b));
    let (mt, nt) = grid(threads, m, n);
    if mt * nt <= 1 {
        // SAFETY: forwarded from the caller.
        unsafe { serial(m, n, k, alpha, a, b, c, accumulate, epi) };
        return;
    }
    let (mtiles, ntiles) = (m.div_ceil(MR), n.div_ceil(NR));
    let split = |tiles: usize, parts: usize, idx: usize, tile: usize, len: usize| {
        let lo = (tiles * idx / parts * tile).min(len);
        let hi = (tiles * (idx + 1) / parts * tile).min(len);
        (lo, hi)
    };
    parallel::for_tasks(mt * nt, mt * nt, |t| {
        let (i0, i1) = split(mtiles, mt, t / nt, MR, m);
        let (j0, j1) = split(ntiles, nt, t % nt, NR, n);
        if i1 > i0 && j1 > j0 {
            // SAFETY: a rectangle of the caller's product, starting at whole tiles; rectangles
            // of different tasks are disjoint in `c`.
            unsafe {
                serial(
                    i1 - i0,
                    j1 - j0,
                    k,
                    alpha,
                    a.shift(i0, 0),
                    b.shift(0, j0),
                    c.at(i0, j0),
                    accumulate,
                    epi.rows_from(i0),
                )
            };
        }
    });
}

/// Splits `C`'s tiles into `mt × nt` rectangles for `threads` threads: the factorisation whose
/// largest rectangle has the fewest tiles, ties going to fewer row splits (each row split packs
/// `B` once more).
fn grid(threads: usize, m: usize, n: usize) -> (usize, usize) {
    let threads = threads.min(parallel::cores()).max(1);
    let (mtiles, ntiles) = (m.div_ceil(MR), n.div_ceil(NR));
    let mut best = (1, 1, usize::MAX);
    for mt in 1..=threads.min(mtiles) {
        let nt = (threads / mt).min(ntiles);
        let cost = mtiles.div_ceil(mt) * ntiles.div_ceil(nt);
        if cost < best.2 {
            best = (mt, nt, cost);
        }
    }
    (best.0, best.1)
}

/// A 64-byte-aligned block of floats, the unit of the packing buffers (only ever written
/// through raw pointers, never built as a value).
#[allow(dead_code)]
#[repr(C, align(64))]
struct Line([f32; 16]);

thread_local! {
    /// The calling thread's packing buffer, kept between products (grown, never shrunk: at
    /// most `(MC + NC) · KC` floats, 2.1 MB). A buffer allocated per call was freed, purged by
    /// the allocator and faulted in again as fresh zeroed pages (a 2 MB huge page for a 200 KB
    /// buffer) on the next product: 7% of a 1×1 convolution's step.
    static PACK: std::cell::Cell<Vec<Line>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Calls `f` with room for `floats` floats, 64-byte aligned and uninitialised (packing writes
/// every float before the kernel reads it): the thread's reusable buffer, or a fresh one when a
/// product runs inside another on the same thread.
fn with_buffer<R>(floats: usize, f: impl FnOnce(*mut f32) -> R) -> R {
    let lines = floats.div_ceil(16);
    let mut buf = PACK.try_with(|b| b.take()).unwrap_or_default();
    if buf.capacity() < lines {
        buf = Vec::with_capacity(lines);
    }
    let r = f(buf.as_mut_ptr().cast());
    let _ = PACK.try_with(|b| b.set(buf));
    r
}

/// The product on the calling thread.
///
/// # Safety
/// As [`sgemm_sides`], with `m, n, k > 0`; a packed operand shifted by whole panels.
#[allow(clippy::too_many_arguments)]
unsafe fn serial(
    m: usize,
    n: usize,
    k: usize,
    alpha: f32,
    a: Src,
    b: Src,
    c: MatMut,
    accumulate: bool,
    epi: Epilogue<'_>,
) {
    // `A`'s panels, then `B`'s from a 64-byte boundary (none for a packed operand)
    let a_floats = if a.packed() {
        0
    } else {
        (MC.min(m.div_ceil(MR) * MR) * KC.min(k)).next_multiple_of(16)
    };
    let b_floats = if b.packed() {
        0
    } else {
        NC.min(n.div_ceil(NR) * NR) * KC.min(k)
    };
    with_buffer(a_floats + b_floats, |abuf| {
        // SAFETY: the buffer holds `a_floats + b_floats` floats; `a_floats` is a multiple of 16.
        let bbuf = unsafe { abuf.add(a_floats) };
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            for pc in (0..k).step_by(KC) {
                let kc = KC.min(k - pc);
                let acc = accumulate || pc > 0;
                // the epilogue goes with the last block's store only
                let last = pc + kc == k;
                // SAFETY: `bbuf` holds `ceil(nc / NR) · NR · kc` floats (allocated above) and
                // the block is inside `b`; `jc` is a multiple of `NR`.
                let bp = unsafe {
                    b.panels(jc, pc, kc, bbuf, |b, out| pack_b(kc, nc, b.at(pc, jc), out))
                };
                // a panel of `B`: `NR` columns, the next step `bs` floats on
                let (bs, in_place) = match b {
                    Src::Rows(m) => (m.rs as usize, true),
                    _ => (NR, false),
                };
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    // SAFETY: as for `B`; `ic` is a multiple of `MR`.
                    let ap = unsafe {
                        a.panels(ic, pc, kc, abuf, |a, out| pack_a(mc, kc, a.at(ic, pc), out))
                    };
                    for jr in (0..nc).step_by(NR) {
                        let nr = NR.min(nc - jr);
                        for ir in (0..mc).step_by(MR) {
                            let mr = MR.min(mc - ir);
                            // SAFETY: the panels hold `kc` steps; the tile `mr × nr` at
                            // `(ic + ir, jc + jr)` is inside `c`; the CPU has AVX-512F
                            // (caller's contract).
                            unsafe {
                                kernel(
                                    kc,
                                    ap.add(ir * kc),
                                    if in_place { bp.add(jr) } else { bp.add(jr * kc) },
                                    in_place.then_some((bs, ir == 0 && jr + NR < nc)),
                                    c.at(ic + ir, jc + jr),
                                    mr,
                                    nr,
                                    alpha,
                                    acc,
                                    if last {
                                        epi.rows_from(ic + ir)
                                    } else {
                                        Epilogue::NONE
                                    },
                                )
                            };
                        }
                    }
                }
            }
        }
    });
}

/// Packs `A`'s `mc × kc` block into `MR`-row panels: panel `q` at `out + q · MR · kc`, step `p`
/// of it the `MR` floats of column `p`, rows past `mc` zero.
///
/// # Safety
/// `a` readable over the block; `out` writable for `ceil(mc / MR) · MR · kc` floats.
unsafe fn pack_a(mc: usize, kc: usize, a: Mat, out: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    if a.cs == 1 || a.rs == 1 {
        // SAFETY: forwarded; AVX-512F is the module's precondition.
        unsafe { vec_pack::pack_a(mc, kc, a, out) };
        return;
    }
    for ir in (0..mc).step_by(MR) {
        let mr = MR.min(mc - ir);
        // SAFETY: panel `ir / MR` is inside `out` (caller's contract).
        let panel = unsafe { out.add(ir * kc) };
        for i in 0..MR {
            if i < mr {
                let row = a.at(ir + i, 0);
                for p in 0..kc {
                    // SAFETY: `(ir + i, p)` is inside the block; `p · MR + i` inside the panel.
                    unsafe { *panel.add(p * MR + i) = *row.ptr.offset(p as isize * row.cs) };
                }
            } else {
                for p in 0..kc {
                    // SAFETY: inside the panel.
                    unsafe { *panel.add(p * MR + i) = 0.0 };
                }
            }
        }
    }
}

/// Packs `B`'s `kc × nc` block into `NR`-column panels: panel `q` at `out + q · NR · kc`, step
/// `p` of it the `NR` floats of row `p`, columns past `nc` zero.
///
/// # Safety
/// `b` readable over the block; `out` writable for `ceil(nc / NR) · NR · kc` floats.
unsafe fn pack_b(kc: usize, nc: usize, b: Mat, out: *mut f32) {
    #[cfg(target_arch = "x86_64")]
    if b.cs == 1 || b.rs == 1 {
        // SAFETY: forwarded; AVX-512F is the module's precondition.
        unsafe { vec_pack::pack_b(kc, nc, b, out) };
        return;
    }
    for jr in (0..nc).step_by(NR) {
        let nr = NR.min(nc - jr);
        // SAFETY: panel `jr / NR` is inside `out` (caller's contract).
        let panel = unsafe { out.add(jr * kc) };
        if b.cs == 1 {
            for p in 0..kc {
                let src = b.at(p, jr).ptr;
                // SAFETY: row `p`'s `nr` columns from `jr` are inside the block; the panel row
                // holds `NR ≥ nr` floats.
                unsafe {
                    std::ptr::copy_nonoverlapping(src, panel.add(p * NR), nr);
                    for j in nr..NR {
                        *panel.add(p * NR + j) = 0.0;
                    }
                }
            }
        } else {
            for j in 0..NR {
                if j < nr {
                    let col = b.at(0, jr + j);
                    for p in 0..kc {
                        // SAFETY: `(p, jr + j)` is inside the block; `p · NR + j` in the panel.
                        unsafe { *panel.add(p * NR + j) = *col.ptr.offset(p as isize * col.rs) };
                    }
                } else {
                    for p in 0..kc {
                        // SAFETY: inside the panel.
                        unsafe { *panel.add(p * NR + j) = 0.0 };
                    }
                }
            }
        }
    }
}

/// Dispatches to the AVX-512 micro-kernel.
///
/// # Safety
/// As [`micro`].
#[allow(clippy::too_many_arguments)]
#[inline]
unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    rows: Option<(usize, bool)>,
    c: MatMut,
    mr: usize,
    nr: usize,
    alpha: f32,
    acc: bool,
    epi: Epilogue<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded from the caller; the narrower kernels read a prefix of each `NR`-float
    // step of the panel and cover `nr` columns.
    unsafe {
        match (rows, nr) {
            (None, ..=16) => micro::<1, false>(kc, a, b, NR, false, c, mr, nr, alpha, acc, epi),
            (None, ..=32) => micro::<2, false>(kc, a, b, NR, false, c, mr, nr, alpha, acc, epi),
            (None, _) => micro::<NV, false>(kc, a, b, NR, false, c, mr, nr, alpha, acc, epi),
            (Some((bs, pf)), ..=16) => micro::<1, true>(kc, a, b, bs, pf, c, mr, nr, alpha, acc, epi),
            (Some((bs, pf)), ..=32) => micro::<2, true>(kc, a, b, bs, pf, c, mr, nr, alpha, acc, epi),
            (Some((bs, pf)), _) => micro::<NV, true>(kc, a, b, bs, pf, c, mr, nr, alpha, acc, epi),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kc, a, b, rows, c, mr, nr, alpha, acc, epi);
        unreachable!("sgemm needs AVX-512F")
    }
}

/// `c[mr×nr] = epi(alpha · Σ_p a_p ⊗ b_p (+ c with acc))` over `kc` packed steps, with the
/// first `V` vectors (`16 · V` columns) of each panel step: an edge tile of a narrow product
/// (196 columns are four full tiles and 4 columns) computes one vector instead of three.
/// `ROWS`: `b` is the matrix itself (step `p` at `b + p · bs`, its `nr` columns read with
/// unaligned loads, the columns past `nr` of the last vector masked off to zero) instead of a
/// packed panel (step `p` at `b + p · NR`, aligned).
///
/// # Safety
/// AVX-512F present; `a` holds `kc · MR` floats; packed: `b` holds `kc · NR` floats and is
/// 64-byte aligned; `ROWS`: `b + p · bs` readable for `nr` floats at every step `p < kc`; `c`
/// writable over `mr ≤ MR` rows and `nr ≤ 16 · V ≤ NR` columns (`nr > 16 · (V - 1)` with
/// `ROWS`); `epi`'s bias (where it has one) holds `mr` values (checked).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const V: usize, const ROWS: bool>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    bs: usize,
    pf: bool,
    c: MatMut,
    mr: usize,
    nr: usize,
    alpha: f32,
    acc: bool,
    epi: Epilogue<'_>,
) {
    use std::arch::x86_64::*;
    let mut s = [[_mm512_setzero_ps(); V]; MR];
    let (mut a, mut b) = (a, b);
    // the last vector's columns inside the tile (read in place)
    let rem = nr.saturating_sub(16 * (V - 1)).min(16);
    let last: __mmask16 = if rem >= 16 { 0xffff } else { ((1u32 << rem) - 1) as u16 };
    for _ in 0..kc {
        let mut bv = [_mm512_setzero_ps(); V];
        for (v, x) in bv.iter_mut().enumerate() {
            *x = if !ROWS {
                // SAFETY: step `p`'s `NR` floats of the panel; panels are 64-byte aligned and
                // `NR · 4` bytes is a multiple of 64.
                unsafe { _mm512_load_ps(b.add(16 * v)) }
            } else if v + 1 < V {
                // SAFETY: columns `16v..16v + 16 < nr` of step `p` (caller's contract).
                unsafe { _mm512_loadu_ps(b.add(16 * v)) }
            } else {
                // SAFETY: the masked lanes are columns `< nr` of step `p`; masked-off lanes
                // are not read.
                unsafe { _mm512_maskz_loadu_ps(last, b.add(16 * v)) }
            };
        }
        if ROWS && pf {
            for v in 0..V {
                // the next panel's step `p` (a hint: never faults)
                _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(NR + 16 * v).cast());
            }
        }
        for (i, row) in s.iter_mut().enumerate() {
            // SAFETY: step `p`'s `MR` floats of the panel.
            let av = _mm512_set1_ps(unsafe { *a.add(i) });
            for v in 0..V {
                row[v] = _mm512_fmadd_ps(av, bv[v], row[v]);
            }
        }
        // SAFETY: at most `kc` steps, inside the panels (`B`'s pointer after the last step
        // is only a position, never read).
        unsafe {
            a = a.add(MR);
        }
        b = b.wrapping_add(bs);
    }
    let alpha = _mm512_set1_ps(alpha);
    let zero = _mm512_setzero_ps();
    if c.cs == 1 {
        for (i, row) in s.iter().enumerate().take(mr) {
            let dst = c.at(i, 0).ptr;
            let bias = epi.bias.map(|b| _mm512_set1_ps(b[i]));
            for (v, x) in row.iter().enumerate() {
                let col = 16 * v;
                if col >= nr {
                    break;
                }
                let rem = nr - col;
                let mask: __mmask16 = if rem >= 16 {
                    0xffff
                } else {
                    ((1u32 << rem) - 1) as u16
                };
                // SAFETY: the masked lanes are columns `< nr` of row `i < mr`, inside `c`.
                unsafe {
                    let mut r = if acc {
                        _mm512_fmadd_ps(*x, alpha, _mm512_maskz_loadu_ps(mask, dst.add(col)))
                    } else {
                        _mm512_mul_ps(*x, alpha)
                    };
                    if let Some(b) = bias {
                        r = _mm512_add_ps(r, b);
                    }
                    if epi.relu {
                        // lanes `<= 0` (false for NaN) to zero
                        r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_LE_OQ>(r, zero), zero);
                    }
                    _mm512_mask_storeu_ps(dst.add(col), mask, r);
                }
            }
        }
    } else {
        let mut tmp = [0f32; NR];
        let nr = nr.min(16 * V);
        for (i, row) in s.iter().enumerate().take(mr) {
            for (v, x) in row.iter().enumerate() {
                // SAFETY: `tmp` holds `NR` floats.
                unsafe { _mm512_storeu_ps(tmp.as_mut_ptr().add(16 * v), _mm512_mul_ps(*x, alpha)) };
            }
            for (j, t) in tmp.iter().enumerate().take(nr) {
                let dst = c.at(i, j).ptr;
                // SAFETY: `(i, j)` inside the tile, inside `c`.
                unsafe { *dst = epi.apply(i, if acc { *dst + t } else { *t }) };
            }
        }
    }
}

/// Packing with AVX-512 for the common layouts: rows or columns contiguous. A row-major `A`
/// (or a transposed `B`) is read 16 floats along `k` at a time from 16 rows (columns) and
/// transposed in registers, instead of one scalar load and store per float.
#[cfg(target_arch = "x86_64")]
mod vec_pack {
    use super::{MR, Mat, NR};
    use std::arch::x86_64::*;

    /// The first `n` lanes set.
    #[inline(always)]
    fn mask(n: usize) -> __mmask16 {
        if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as u16 }
    }

    /// Loads `vecs ≤ 16` vectors of `lanes ≤ 16` contiguous floats, vector `t` from
    /// `src + t · stride` (the rest zero), and returns them transposed: lane `t` of result `q` is
    /// lane `q` of vector `t`.
    ///
    /// # Safety
    /// AVX-512F; the `lanes` floats of each of the `vecs` vectors readable.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn load_t16(src: *const f32, stride: isize, vecs: usize, lanes: usize) -> [__m512; 16] {
        let m = mask(lanes);
        let mut r = [_mm512_setzero_ps(); 16];
        for (t, v) in r.iter_mut().enumerate().take(vecs) {
            // SAFETY: the masked lanes of vector `t` are readable (caller's contract).
            *v = unsafe { _mm512_maskz_loadu_ps(m, src.wrapping_offset(t as isize * stride)) };
        }
        let mut a = [_mm512_setzero_ps(); 16];
        for t in (0..16).step_by(2) {
            a[t] = _mm512_unpacklo_ps(r[t], r[t + 1]);
            a[t + 1] = _mm512_unpackhi_ps(r[t], r[t + 1]);
        }
        // b[4g + j], 128-bit lane L: lane 4L + j of vectors 4g..4g + 4
        let mut b = [_mm512_setzero_ps(); 16];
        for g in (0..16).step_by(4) {
            let (x0, x1) = (_mm512_castps_pd(a[g]), _mm512_castps_pd(a[g + 1]));
            let (x2, x3) = (_mm512_castps_pd(a[g + 2]), _mm512_castps_pd(a[g + 3]));
            b[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(x0, x2));
            b[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x0, x2));
            b[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(x1, x3));
            b[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(x1, x3));
        }
        let mut out = [_mm512_setzero_ps(); 16];
        for j in 0..4 {
            let c0 = _mm512_shuffle_f32x4::<0x44>(b[j], b[4 + j]);
            let c1 = _mm512_shuffle_f32x4::<0x44>(b[8 + j], b[12 + j]);
            let c2 = _mm512_shuffle_f32x4::<0xEE>(b[j], b[4 + j]);
            let c3 = _mm512_shuffle_f32x4::<0xEE>(b[8 + j], b[12 + j]);
            out[j] = _mm512_shuffle_f32x4::<0x88>(c0, c1);
            out[4 + j] = _mm512_shuffle_f32x4::<0xDD>(c0, c1);
            out[8 + j] = _mm512_shuffle_f32x4::<0x88>(c2, c3);
            out[12 + j] = _mm512_shuffle_f32x4::<0xDD>(c2, c3);
        }
        out
    }

    /// [`super::pack_a`] for `A` with contiguous rows (`cs == 1`: 16 rows, two panels, are
    /// transposed 16 steps at a time) or contiguous columns (`rs == 1`: one masked load per
    /// step).
    ///
    /// # Safety
    /// As [`super::pack_a`]; AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pack_a(mc: usize, kc: usize, a: Mat, out: *mut f32) {
        if a.cs == 1 {
            for ir in (0..mc).step_by(2 * MR) {
                let rows = (mc - ir).min(2 * MR);
                let p0 = out.wrapping_add(ir * kc);
                let p1 = out.wrapping_add((ir + MR) * kc);
                for pk in (0..kc).step_by(16) {
                    let lanes = (kc - pk).min(16);
                    // SAFETY: rows `ir..ir + rows`, steps `pk..pk + lanes` are inside the block.
                    let t = unsafe { load_t16(a.at(ir, pk).ptr, a.rs, rows, lanes) };
                    for (q, v) in t.iter().enumerate().take(lanes) {
                        // SAFETY: step `pk + q` of panel `ir / MR` (and of the next one when it
                        // exists) is inside `out`; rows past `mc` are the zero lanes.
                        unsafe {
                            _mm256_storeu_ps(p0.add((pk + q) * MR), _mm512_castps512_ps256(*v));
                            if rows > MR {
                                let hi = _mm512_shuffle_f32x4::<0xEE>(*v, *v);
                                _mm256_storeu_ps(p1.add((pk + q) * MR), _mm512_castps512_ps256(hi));
                            }
                        }
                    }
                }
            }
        } else {
            for ir in (0..mc).step_by(MR) {
                let m = mask((mc - ir).min(MR));
                let panel = out.wrapping_add(ir * kc);
                for p in 0..kc {
                    // SAFETY: column `p`'s rows `ir..ir + mr` are contiguous inside the block;
                    // the panel's step `p` holds `MR` floats.
                    unsafe {
                        let v = _mm512_maskz_loadu_ps(m, a.at(ir, p).ptr);
                        _mm256_storeu_ps(panel.add(p * MR), _mm512_castps512_ps256(v));
                    }
                }
            }
        }
    }

    /// [`super::pack_b`] for `B` with contiguous rows (`cs == 1`: masked vector copies) or
    /// contiguous columns (`rs == 1`: 16 columns transposed 16 steps at a time).
    ///
    /// # Safety
    /// As [`super::pack_b`]; AVX-512F; `out` 64-byte aligned.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn pack_b(kc: usize, nc: usize, b: Mat, out: *mut f32) {
        for jr in (0..nc).step_by(NR) {
            let panel = out.wrapping_add(jr * kc);
            for v in 0..NR / 16 {
                let j = jr + 16 * v;
                let cols = nc.saturating_sub(j).min(16);
                if cols == 0 {
                    for p in 0..kc {
                        // SAFETY: step `p` of the panel, 64-byte aligned (`NR · 4` bytes a
                        // multiple of 64).
                        unsafe { _mm512_store_ps(panel.add(p * NR + 16 * v), _mm512_setzero_ps()) };
                    }
                } else if b.cs == 1 {
                    let m = mask(cols);
                    for p in 0..kc {
                        // SAFETY: row `p`'s `cols` columns from `j` are inside the block; the
                        // panel step is aligned as above.
                        unsafe {
                            let x = _mm512_maskz_loadu_ps(m, b.at(p, j).ptr);
                            _mm512_store_ps(panel.add(p * NR + 16 * v), x);
                        }
                    }
                } else {
                    for pk in (0..kc).step_by(16) {
                        let lanes = (kc - pk).min(16);
                        // SAFETY: columns `j..j + cols`, steps `pk..pk + lanes` are inside the
                        // block.
                        let t = unsafe { load_t16(b.at(pk, j).ptr, b.cs, cols, lanes) };
                        for (q, x) in t.iter().enumerate().take(lanes) {
                            // SAFETY: panel step `pk + q`, aligned as above.
                            unsafe { _mm512_store_ps(panel.add((pk + q) * NR + 16 * v), *x) };
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c (+)= alpha · a · b` in f64 over strided operands.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        m: usize,
        n: usize,
        k: usize,
        alpha: f32,
        a: (&[f32], usize, usize),
        b: (&[f32], usize, usize),
        c: &mut [f32],
        ldc: usize,
        accumulate: bool,
    ) {
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| a.0[i * a.1 + p * a.2] as f64 * b.0[p * b.1 + j * b.2] as f64)
                    .sum();
                let old = if accumulate {
                    c[i * ldc + j] as f64
                } else {
                    0.0
                };
                c[i * ldc + j] = (alpha as f64 * s + old) as f32;
            }
        }
    }

    fn data(len: usize, seed: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 8.0)
            .collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn check(
        m: usize,
        n: usize,
        k: usize,
        ta: bool,
        tb: bool,
        acc: bool,
        pad: usize,
        threads: usize,
    ) {
        // `A` and `B` row-major or stored transposed, with `pad` extra elements per stored row;
        // `C` with row stride `n + pad`
        let (ars, acs, alen) = if ta {
            (1, m + pad, k * (m + pad))
        } else {
            (k + pad, 1, m * (k + pad))
        };
        let (brs, bcs, blen) = if tb {
            (1, k + pad, n * (k + pad))
        } else {
            (n + pad, 1, k * (n + pad))
        };
        let ldc = n + pad;
        let (a, b) = (data(alen.max(1), 1), data(blen.max(1), 2));
        let c0 = data(m * ldc, 3);
        let alpha = if pad % 2 == 1 { 0.5 } else { 1.0 };
        let mut want = c0.clone();
        reference(
            m,
            n,
            k,
            alpha,
            (&a, ars, acs),
            (&b, brs, bcs),
            &mut want,
            ldc,
            acc,
        );
        let am = Mat {
            ptr: a.as_ptr(),
            rs: ars as isize,
            cs: acs as isize,
        };
        let bm = Mat {
            ptr: b.as_ptr(),
            rs: brs as isize,
            cs: bcs as isize,
        };
        // every combination of strided and packed operands, and (4, 5) a row-major `B` read in
        // place; the packed ones are made twice in a row, so the second reuses the first's
        // buffer (dropped), which must not matter
        for packs in 0..6 {
            let rows = packs >= 4;
            if rows && tb {
                continue;
            }
            // SAFETY: the operands hold their matrices at these strides; the CPU check is done
            // by the caller.
            let pa = (packs & 1 == 1).then(|| unsafe {
                drop(Packed::a(m, k, am));
                Packed::a(m, k, am)
            });
            // SAFETY: as above.
            let pb = (packs & 2 == 2).then(|| unsafe {
                drop(Packed::b(k, n, bm));
                Packed::b(k, n, bm)
            });
            let mut got = c0.clone();
            // SAFETY: as above; packed operands of this product's shape.
            unsafe {
                sgemm_sides(
                    threads,
                    m,
                    n,
                    k,
                    alpha,
                    pa.as_ref().map_or(Side::Strided(am), Side::Packed),
                    if rows {
                        Side::Rows(bm)
                    } else {
                        pb.as_ref().map_or(Side::Strided(bm), Side::Packed)
                    },
                    MatMut {
                        ptr: got.as_mut_ptr(),
                        rs: ldc as isize,
                        cs: 1,
                    },
                    acc,
                )
            };
            for i in 0..m {
                for j in 0..ldc {
                    let (g, w) = (got[i * ldc + j], want[i * ldc + j]);
                    let tol = 1e-4 * (1.0 + k as f32);
                    assert!(
                        (g - w).abs() <= tol,
                        "m={m} n={n} k={k} ta={ta} tb={tb} acc={acc} pad={pad} packs={packs} \
                         at ({i},{j}): {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn packed_operands_of_another_shape_are_refused() {
        if !detected() {
            return;
        }
        let a = data(6 * 5, 1);
        let am = Mat {
            ptr: a.as_ptr(),
            rs: 5,
            cs: 1,
        };
        // SAFETY: `a` holds 6 × 5 row-major; AVX-512F checked above.
        let pa = unsafe { Packed::a(6, 5, am) };
        let mut c = vec![0.0; 6 * 4];
        let cm = MatMut {
            ptr: c.as_mut_ptr(),
            rs: 4,
            cs: 1,
        };
        let run = |m, k| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: the shape check runs before any operand is read.
                unsafe { sgemm_sides(1, m, 4, k, 1.0, Side::Packed(&pa), Side::Strided(am), cm, false) }
            }))
            .is_err()
        };
        assert!(run(6, 4));
        assert!(run(5, 5));
        // `a` as `B` (5 × 4 inside its 6 × 5 storage): a packed A on the right is refused too
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: as above.
            unsafe { sgemm_sides(1, 6, 5, 5, 1.0, Side::Strided(am), Side::Packed(&pa), cm, false) }
        }));
        assert!(r.is_err());
        // read in place: only as `B`, and only with contiguous rows
        let cols = Mat { rs: 1, cs: 5, ..am };
        for (a, b) in [(Side::Rows(am), Side::Strided(am)), (Side::Strided(am), Side::Rows(cols))] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // SAFETY: as above: refused before any operand is read.
                unsafe { sgemm_sides(1, 4, 4, 4, 1.0, a, b, cm, false) }
            }));
            assert!(r.is_err());
        }
    }

    #[test]
    fn sgemm_matches_an_f64_reference_over_odd_shapes_layouts_and_strides() {
        if !detected() {
            eprintln!("no AVX-512F: sgemm not exercised");
            return;
        }
        let sizes = [1, 2, 13, 16, 31, 33, 47, 63, 65];
        let mut case = 0usize;
        for &m in &sizes {
            for &n in &sizes {
                for &k in &[0, 1, 5, 17, 64, 69] {
                    case += 1;
                    let (ta, tb) = (case % 2 == 1, (case / 2) % 2 == 1);
                    let acc = case % 3 == 0;
                    let pad = case % 4;
                    check(m, n, k, ta, tb, acc, pad, 1 + case % 3);
                }
            }
        }
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for acc in [false, true] {
                check(257, 129, 300, ta, tb, acc, 0, 1);
                check(257, 129, 300, ta, tb, acc, 3, 4);
                check(70, 1000, 9, ta, tb, acc, 1, 2);
            }
        }
        // beyond one `MC × NC` block and several `KC` depths, split over threads
        check(400, 2000, 600, false, false, true, 2, 4);
    }

    /// One product with `epi` in the store against the same product stored plainly and then
    /// `epi` applied element by element (the two-pass computation): equal bit for bit.
    #[allow(clippy::too_many_arguments)]
    fn check_epilogue(
        m: usize,
        n: usize,
        k: usize,
        threads: usize,
        acc: bool,
        packed_a: bool,
        epi: Epilogue<'_>,
        c_cols: bool,
    ) {
        let mut a = data(m * k, 7);
        let b = data(k * n, 8);
        // NaN and -0.0 in `A`: row 1 all NaN, row 2 products of -0.0 (where `k` allows)
        if m > 1 && k > 0 {
            a[k] = f32::NAN;
        }
        if m > 2 {
            a[2 * k..3 * k].fill(-0.0);
        }
        let c0 = data(m * n, 9);
        let am = Mat {
            ptr: a.as_ptr(),
            rs: k as isize,
            cs: 1,
        };
        let bm = Mat {
            ptr: b.as_ptr(),
            rs: n as isize,
            cs: 1,
        };
        // `C` row-major, or stored transposed (`c_cols`: the kernel's scalar store)
        let (rs, cs) = if c_cols { (1, m as isize) } else { (n as isize, 1) };
        let at = |i: usize, j: usize| i * rs as usize + j * cs as usize;
        // SAFETY: `a` holds `m × k` row-major; AVX-512F checked by the caller.
        let pa = packed_a.then(|| unsafe { Packed::a(m, k, am) });
        let side = pa.as_ref().map_or(Side::Strided(am), Side::Packed);
        let mut want = c0.clone();
        let mut got = c0.clone();
        // `B` read in place: the same sums in the same order as packed, so bit for bit too
        let mut got_rows = c0.clone();
        // SAFETY: the operands hold their matrices; `want`, `got` and `got_rows` hold `m × n`
        // at (rs, cs).
        unsafe {
            let cw = MatMut { ptr: want.as_mut_ptr(), rs, cs };
            sgemm_sides(threads, m, n, k, 1.0, side, Side::Strided(bm), cw, acc);
            let cg = MatMut { ptr: got.as_mut_ptr(), rs, cs };
            sgemm_sides_with(threads, m, n, k, 1.0, side, Side::Strided(bm), cg, acc, epi);
            let cr = MatMut { ptr: got_rows.as_mut_ptr(), rs, cs };
            sgemm_sides_with(threads, m, n, k, 1.0, side, Side::Rows(bm), cr, acc, epi);
        }
        for i in 0..m {
            for j in 0..n {
                let w = &mut want[at(i, j)];
                let t = match epi.bias {
                    Some(b) => *w + b[i],
                    None => *w,
                };
                *w = if epi.relu && t <= 0.0 { 0.0 } else { t };
            }
        }
        for (q, ((g, r), w)) in got.iter().zip(&got_rows).zip(&want).enumerate() {
            for (v, in_place) in [(g, false), (r, true)] {
                assert_eq!(
                    v.to_bits(),
                    w.to_bits(),
                    "m={m} n={n} k={k} threads={threads} acc={acc} packed={packed_a} \
                     relu={} bias={} cols={c_cols} in_place={in_place} at {q}: {v} vs {w}",
                    epi.relu,
                    epi.bias.is_some()
                );
            }
        }
    }

    #[test]
    fn epilogue_in_the_store_equals_a_separate_pass_bit_for_bit() {
        if !detected() {
            eprintln!("no AVX-512F: sgemm not exercised");
            return;
        }
        // several `KC` blocks (k 600, 257), one-vector and two-vector edge tiles (n 13, 33),
        // row counts off the `MR` grid, and products split over threads by rows and columns
        let shapes = [
            (1, 1, 1),
            (13, 47, 5),
            (17, 33, 300),
            (9, 100, 600),
            (70, 200, 257),
            (200, 13, 9),
            (5, 16, 0),
        ];
        let mut case = 0;
        for &(m, n, k) in &shapes {
            let bias: Vec<f32> = (0..m)
                .map(|i| match i % 5 {
                    0 => -0.0,
                    1 => 0.75,
                    2 => f32::NAN,
                    3 => -1.5,
                    _ => 1e-3,
                })
                .collect();
            for relu in [false, true] {
                for with_bias in [false, true] {
                    let epi = Epilogue {
                        bias: with_bias.then_some(&bias[..]),
                        relu,
                    };
                    for (threads, acc, packed) in [(1, false, true), (3, true, false), (2, false, false)] {
                        case += 1;
                        check_epilogue(m, n, k, threads, acc, packed, epi, case % 4 == 0);
                    }
                }
            }
        }
    }

    #[test]
    fn epilogue_with_too_few_bias_values_is_refused() {
        if !detected() {
            return;
        }
        let (a, b) = (data(6 * 5, 1), data(5 * 4, 2));
        let mut c = vec![0.0; 6 * 4];
        let bias = [1.0; 5];
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: dense operands of these shapes; the bias check runs before any is read.
            unsafe {
                sgemm_sides_with(
                    1,
                    6,
                    4,
                    5,
                    1.0,
                    Side::Strided(Mat { ptr: a.as_ptr(), rs: 5, cs: 1 }),
                    Side::Strided(Mat { ptr: b.as_ptr(), rs: 4, cs: 1 }),
                    MatMut { ptr: c.as_mut_ptr(), rs: 4, cs: 1 },
                    false,
                    Epilogue { bias: Some(&bias), relu: false },
                )
            }
        }));
        assert!(r.is_err());
    }

    #[test]
    fn sgemm_writes_strided_destination_columns() {
        if !detected() {
            return;
        }
        // `C` stored transposed (column stride ≠ 1)
        let (m, n, k) = (19, 37, 23);
        let (a, b) = (data(m * k, 4), data(k * n, 5));
        let mut want = vec![0.0; m * n];
        reference(m, n, k, 2.0, (&a, k, 1), (&b, n, 1), &mut want, n, false);
        let mut got = data(m * n, 6);
        // SAFETY: dense operands; `got` holds `n × m` row-major, read as `m × n` transposed.
        unsafe {
            sgemm(
                1,
                m,
                n,
                k,
                2.0,
                Mat {
                    ptr: a.as_ptr(),
                    rs: k as isize,
                    cs: 1,
                },
                Mat {
                    ptr: b.as_ptr(),
                    rs: n as isize,
                    cs: 1,
                },
                MatMut {
                    ptr: got.as_mut_ptr(),
                    rs: 1,
                    cs: m as isize,
                },
                false,
            )
        };
        for i in 0..m {
            for j in 0..n {
                assert!((got[j * m + i] - want[i * n + j]).abs() < 1e-3);
            }
        }
    }

    /// GFLOP/s of this module and of the `gemm` crate on the process CPU clock, one thread:
    /// `cargo test --profile test-fast --lib sgemm_speed -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn sgemm_speed() {
        fn cpu() -> f64 {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid out-pointer.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
            t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
        }
        for &(m, n, k) in &[
            (512, 512, 512),
            (128, 512, 784),
            (1024, 1024, 1024),
            (64, 3136, 576),
            (3136, 64, 576),
            (128, 784, 1152),
            (32, 32, 32),
            (128, 10, 512),
        ] {
            let (a, b) = (data(m * k, 1), data(k * n, 2));
            let mut c = vec![0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            let reps = ((4e9 / flops) as usize).clamp(3, 20000);
            let time = |f: &mut dyn FnMut()| {
                f();
                let mut best = Vec::new();
                for _ in 0..3 {
                    let t0 = cpu();
                    for _ in 0..reps {
                        f();
                    }
                    best.push((cpu() - t0) / reps as f64);
                }
                best.sort_by(f64::total_cmp);
                flops / best[1] * 1e-9
            };
            let own = time(&mut || unsafe {
                sgemm(
                    1,
                    m,
                    n,
                    k,
                    1.0,
                    Mat {
                        ptr: a.as_ptr(),
                        rs: k as isize,
                        cs: 1,
                    },
                    Mat {
                        ptr: b.as_ptr(),
                        rs: n as isize,
                        cs: 1,
                    },
                    MatMut {
                        ptr: c.as_mut_ptr(),
                        rs: n as isize,
                        cs: 1,
                    },
                    false,
                )
            });
            let crate_ = time(&mut || unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    1.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            });
            println!("{m}x{n}x{k}: sgemm {own:.1} GFLOP/s, gemm crate {crate_:.1} GFLOP/s");
        }
    }
}
