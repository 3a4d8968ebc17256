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
//! Tiles are taken over the whole batch (image-major), in blocks sized so that a block's
//! transformed input and output stay near the L2 cache; blocks are split over the intra-op pool,
//! each thread with its own buffers and serial products.

use super::gemm::{Operand, matmul_serial};
use super::map::Ptr;
use crate::parallel;

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
    /// Tile groups (of `L` tiles) per block: the block's transformed input and output near 1 MB,
    /// at least 64 tiles so the products stay efficient.
    fn block_groups(&self) -> usize {
        let per_tile = P * (self.ci + self.co) * 4;
        ((1usize << 20) / per_tile / L).clamp(4, 16)
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
    let mut chunk = [[[[0.0f32; L]; 6]; 6]; CHUNK];
    for c0 in (0..s.ci).step_by(CHUNK) {
        let n = CHUNK.min(s.ci - c0);
        for (cc, d) in chunk.iter_mut().enumerate().take(n) {
            let c = c0 + cc;
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

/// `dM[p][o][lane] = (A dY Aᵀ)_p` for the 16 tiles of `lanes` from the output gradient `dy`.
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
    let mut chunk = [[[[0.0f32; L]; 4]; 4]; CHUNK];
    for o0 in (0..s.co).step_by(CHUNK) {
        let n = CHUNK.min(s.co - o0);
        for (oo, d) in chunk.iter_mut().enumerate().take(n) {
            let o = o0 + oo;
            if let Some(base) = &inside {
                for (i, di) in d.iter_mut().enumerate() {
                    load_row::<4>(dy, base, o * ohw + i * s.ow, di);
                }
            } else {
                gather::<4, 4>(dy, s.co, o, s.oh, s.ow, lanes, d);
            }
        }
        for (oo, d) in chunk.iter().enumerate().take(n) {
            let o = o0 + oo;
            // rows: t = dY Aᵀ
            let mut t = [[[0.0f32; L]; 6]; 4];
            for (ti, di) in t.iter_mut().zip(d) {
                *ti = a_adj(*di);
            }
            // columns: A t
            for k in 0..6 {
                let col = a_adj([t[0][k], t[1][k], t[2][k], t[3][k]]);
                for (i, vals) in col.iter().enumerate() {
                    dm[((i * 6 + k) * s.co + o) * stride + off..][..L].copy_from_slice(vals);
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

/// `dw[a][b..b + 16] = Gᵀ dU G` (`dU[p][a][b]`, `co × ci`).
#[inline(always)]
fn weight_adj_body(du: &[f32], co: usize, ci: usize, a: usize, b: usize, dw: &mut [f32]) {
    let lanes = (ci - b).min(L);
    let mut t = [[[0.0f32; L]; 6]; 3]; // Gᵀ dU
    for j in 0..6 {
        let mut col = [[0.0f32; L]; 6];
        for (i, c) in col.iter_mut().enumerate() {
            c[..lanes].copy_from_slice(&du[((i * 6 + j) * co + a) * ci + b..][..lanes]);
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
                dw[(a * ci + b + l) * 9 + i * 3 + j] = vals[l];
            }
        }
    }
}

multiversion!(weight_transform(w: &[f32], inp: usize, transpose: bool, to: usize, from: usize, a: usize, b: usize, u: Ptr<f32>) => weight_transform_body);
multiversion!(weight_adj(du: &[f32], co: usize, ci: usize, a: usize, b: usize, dw: &mut [f32]) => weight_adj_body);

/// The transformed weight `U[p][to][from]` of `w` (`(out, in, 3, 3)`, row-major). With
/// `transpose`, the weight of the transposed convolution (`in` → `out` channels swapped, the
/// kernel flipped): the data gradient as a forward convolution.
pub fn transform_weight(w: &[f32], out: usize, inp: usize, transpose: bool) -> Vec<f32> {
    assert!(w.len() >= out * inp * 9);
    let (to, from) = if transpose { (inp, out) } else { (out, inp) };
    let mut u = vec![0.0f32; P * to * from];
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
    parallel::pool().in_place_scope(|sc| {
        for p in 1..parts {
            let r = (p * step).min(groups)..((p + 1) * step).min(groups);
            if !r.is_empty() {
                let f = &f;
                sc.spawn(move |_| f(p, r));
            }
        }
        f(0, 0..step.min(groups));
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
        let mut v = vec![0.0f32; P * s.ci * nb];
        let mut m = vec![0.0f32; P * s.co * nb];
        let mut g = groups.start;
        while g < groups.end {
            let n = bg.min(groups.end - g);
            let stride = n * L;
            for k in 0..n {
                let ls = lanes(s, (g + k) * L, s.ph as isize, s.pw as isize);
                input_transform(s, x, &ls, &mut v, stride, k * L);
            }
            for p in 0..P {
                matmul_serial(
                    s.co,
                    stride,
                    s.ci,
                    Operand {
                        data: &u[p * s.co * s.ci..][..s.co * s.ci],
                        transposed: false,
                    },
                    Operand {
                        data: &v[p * s.ci * stride..][..s.ci * stride],
                        transposed: false,
                    },
                    &mut m[p * s.co * stride..][..s.co * stride],
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
    let partials = std::sync::Mutex::new(Vec::<(usize, Vec<f32>)>::new());
    over_blocks(s, |part, groups| {
        let nb = bg.min(groups.len()) * L;
        let mut v = vec![0.0f32; P * s.ci * nb];
        let mut m = vec![0.0f32; P * s.co * nb];
        let mut du = vec![0.0f32; ul];
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
                matmul_serial(
                    s.co,
                    s.ci,
                    stride,
                    Operand {
                        data: &m[p * s.co * stride..][..s.co * stride],
                        transposed: false,
                    },
                    Operand {
                        data: &v[p * s.ci * stride..][..s.ci * stride],
                        transposed: true,
                    },
                    &mut du[p * s.co * s.ci..][..s.co * s.ci],
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
    for p in parts {
        for (a, b) in sum.iter_mut().zip(p) {
            *a += b;
        }
    }
    for o in 0..s.co {
        for c in (0..s.ci).step_by(L) {
            weight_adj(&sum, s.co, s.ci, o, c, dw);
        }
    }
}
