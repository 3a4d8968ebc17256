//! The fused recurrent layers of the `RNN` operator (vanilla ReLU/tanh, LSTM, GRU; stacked,
//! bidirectional), forward and backward through time, on the GEMMs of [`super::gemm`].
//!
//! The parameters are one flat vector in MXNet's layout: for each layer and then each direction
//! the input-to-hidden weights `Wx` (`G·H × in`) followed by the hidden-to-hidden weights `Wh`
//! (`G·H × H`); after all weights, for each layer and direction, the biases `bx` (`G·H`) then
//! `bh` (`G·H`). `G` is the number of gates, in the order `i, f, g, o` (LSTM) and `r, z, n`
//! (GRU).
//!
//! A layer first multiplies its whole input sequence by `Wx` in one GEMM (`T·N × in` by
//! `in × G·H`), then runs the time steps, each one GEMM by `Wh` and an elementwise pass. The
//! forward keeps what the backward needs in a reserve array ([`RnnGeom::reserve_size`]): each
//! direction's hidden states, the LSTM's cells and the gates' activations (GRU: also
//! `Wh_n·h + bh_n`), and every layer's output but the last (after dropout, when the caller
//! drops between layers). The backward runs the steps in
//! reverse to get the gates' pre-activation gradients, then gets the weights', biases' and
//! inputs' gradients in one GEMM each for the whole sequence.
//!
//! For float32 the per-step products by `Wh` run on `Wh` packed once per layer and direction
//! ([`super::rnn_step`]), and the LSTM forward step is one fused pass per block of hidden units;
//! `exp`, `tanh` and the sigmoid go through that module's vectorisable float32 versions.

use super::gemm::{Operand, matmul};
use super::real::Real;
use super::rnn_step::{self, Packed};
use crate::parallel::{self, for_each_mut};
use std::any::{Any, TypeId};
use std::sync::Mutex;

/// The recurrent cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    Relu,
    Tanh,
    Lstm,
    Gru,
}

impl Cell {
    /// Gates per hidden unit.
    pub fn gates(self) -> usize {
        match self {
            Cell::Relu | Cell::Tanh => 1,
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }
}

/// A fused RNN's sizes.
#[derive(Clone, Copy, Debug)]
pub struct RnnGeom {
    pub cell: Cell,
    pub layers: usize,
    /// 1, or 2 when bidirectional.
    pub dirs: usize,
    pub seq: usize,
    pub batch: usize,
    pub input: usize,
    pub hidden: usize,
}

impl RnnGeom {
    fn gh(&self) -> usize {
        self.cell.gates() * self.hidden
    }
    /// The input width of layer `l`.
    pub fn layer_input(&self, l: usize) -> usize {
        if l == 0 {
            self.input
        } else {
            self.dirs * self.hidden
        }
    }
    fn weights_size(&self) -> usize {
        (0..self.layers)
            .map(|l| self.dirs * self.gh() * (self.layer_input(l) + self.hidden))
            .sum()
    }
    /// Length of the flat parameter vector.
    pub fn param_size(&self) -> usize {
        self.weights_size() + self.layers * self.dirs * 2 * self.gh()
    }
    /// Offset of `Wx` of layer `l`, direction `d` (`Wh` follows it).
    fn weight_offset(&self, l: usize, d: usize) -> usize {
        let before: usize = (0..l)
            .map(|k| self.dirs * self.gh() * (self.layer_input(k) + self.hidden))
            .sum();
        before + d * self.gh() * (self.layer_input(l) + self.hidden)
    }
    /// Offset of `bx` of layer `l`, direction `d` (`bh` follows it).
    fn bias_offset(&self, l: usize, d: usize) -> usize {
        self.weights_size() + (l * self.dirs + d) * 2 * self.gh()
    }
    fn tnh(&self) -> usize {
        self.seq * self.batch * self.hidden
    }
    /// Reserve elements per layer and direction: hidden states, then LSTM cells and gates or
    /// GRU gates and `Wh_n·h + bh_n`.
    fn block(&self) -> usize {
        self.tnh()
            * match self.cell {
                Cell::Lstm => 1 + 1 + 4,
                Cell::Gru => 1 + 3 + 1,
                Cell::Relu | Cell::Tanh => 1,
            }
    }
    fn block_offset(&self, l: usize, d: usize) -> usize {
        (l * self.dirs + d) * self.block()
    }
    /// Offset of the saved output of layer `l` (`l < layers - 1`).
    fn layer_out_offset(&self, l: usize) -> usize {
        self.layers * self.dirs * self.block() + l * self.tnh() * self.dirs
    }
    /// Length of the reserve array the forward fills and the backward reads.
    pub fn reserve_size(&self) -> usize {
        self.layers * self.dirs * self.block() + (self.layers - 1) * self.tnh() * self.dirs
    }
    /// The time index of step `s` in direction `d`.
    fn time(&self, d: usize, s: usize) -> usize {
        if d == 0 { s } else { self.seq - 1 - s }
    }
}

/// Threads a time step's elementwise pass (one task per batch row) is split over: one below
/// a few thousand gate values, where handing out rows costs more than it saves.
fn step_threads(g: &RnnGeom) -> usize {
    if g.batch * g.gh() >= 4096 {
        parallel::max_threads()
    } else {
        1
    }
}

/// `tanh` through one `exp` (`(1 - e^{-2|x|}) / (1 + e^{-2|x|})`, its odd Taylor polynomial
/// near 0, where that cancels): libm's `tanhf` goes through `expm1f` and was a quarter of an
/// LSTM's forward. Within a few float32 ulps of `tanh` in absolute terms.
fn tanh<T: Real>(x: T) -> T {
    if let Some(v) = f32_value(x) {
        return <T as num_traits::NumCast>::from(rnn_step::tanh(v)).unwrap_or(x);
    }
    let a = x.abs();
    let small = T::from_f64(0.004);
    if a < small {
        let x2 = x * x;
        // x - x³/3 + 2x⁵/15
        return x * (T::ONE - x2 * (T::from_f64(1.0 / 3.0) - x2 * T::from_f64(2.0 / 15.0)));
    }
    let e = (-(a + a)).exp();
    let t = (T::ONE - e) / (T::ONE + e);
    if x < T::ZERO { -t } else { t }
}

fn sigmoid<T: Real>(x: T) -> T {
    if let Some(v) = f32_value(x) {
        return <T as num_traits::NumCast>::from(rnn_step::sigmoid(v)).unwrap_or(x);
    }
    T::ONE / (T::ONE + (-x).exp())
}

fn is_f32<T: Real>() -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>()
}

/// `x` when `T` is f32 (a no-op conversion the compiler folds), else `None`.
fn f32_value<T: Real>(x: T) -> Option<f32> {
    if is_f32::<T>() {
        num_traits::ToPrimitive::to_f32(&x)
    } else {
        None
    }
}

/// `s` as f32 when `T` is f32.
fn f32s<T: Real>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: `T` is f32 (checked by type id), so the cast is an identity.
    is_f32::<T>().then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) })
}

/// `s` as f32 when `T` is f32 (the borrow moves to the result).
fn f32s_mut<T: Real>(s: &mut [T]) -> Option<&mut [f32]> {
    if !is_f32::<T>() {
        return None;
    }
    // SAFETY: `T` is f32 (checked by type id), so the cast is an identity.
    Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), s.len()) })
}

/// The f32 view of a slice known to be f32 (callers hold a [`Packed`], made only for f32).
fn as32<T: Real>(s: &[T]) -> &[f32] {
    f32s(s).expect("float32 data")
}

fn as32_mut<T: Real>(s: &mut [T]) -> &mut [f32] {
    f32s_mut(s).expect("float32 data")
}

/// Scratch arrays of the last calls, kept for the next ones (one pool for the process, not one
/// per thread: the library's thread-locals live in the static TLS block, which is small).
static SCRATCH: Mutex<Vec<Box<dyn Any + Send>>> = Mutex::new(Vec::new());

/// Scratch arrays kept.
const SCRATCH_KEPT: usize = 12;

/// A scratch array of `len` values, its contents unspecified (finite values of an earlier
/// call, or zeros): reused from earlier calls, so that the large per-sequence arrays
/// (projections, gate gradients, layer outputs) do not come back from the system as fresh
/// pages to fault in and zero on every call. Back to the pool when dropped.
struct Scratch<T: Send + 'static>(Vec<T>);

fn scratch<T: Real>(len: usize) -> Scratch<T> {
    let found = {
        let mut pool = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        // the smallest one large enough, else the largest one
        let mut best: Option<(usize, usize, bool)> = None;
        for (i, b) in pool.iter().enumerate() {
            if let Some(v) = b.downcast_ref::<Vec<T>>() {
                let (cap, fits) = (v.capacity(), v.capacity() >= len);
                let better = match best {
                    None => true,
                    Some((_, bc, bf)) => (fits && (!bf || cap < bc)) || (!fits && !bf && cap > bc),
                };
                if better {
                    best = Some((i, cap, fits));
                }
            }
        }
        best.map(|(i, _, _)| pool.swap_remove(i))
    };
    let mut v = found
        .and_then(|b| b.downcast::<Vec<T>>().ok())
        .map(|b| *b)
        .unwrap_or_default();
    v.resize(len, T::ZERO);
    Scratch(v)
}

impl<T: Send + 'static> Drop for Scratch<T> {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.capacity() == 0 {
            return;
        }
        let mut pool = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < SCRATCH_KEPT {
            pool.push(Box::new(v));
        }
    }
}

impl<T: Send + 'static> std::ops::Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: Send + 'static> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// The step before `t` in direction `d`'s order (forward: `t - 1`, reverse: `t + 1`) of `tt`
/// steps, `None` at the direction's first step.
fn prev_step(d: usize, t: usize, tt: usize) -> Option<usize> {
    if d == 0 {
        t.checked_sub(1)
    } else if t + 1 < tt {
        Some(t + 1)
    } else {
        None
    }
}

/// `prev[t] = all[prev_step(t)]` for each of the `tt` steps (rows of `h0.len()`), `h0` at the
/// direction's first step: the state each step started from.
fn previous_rows<T: Copy>(prev: &mut [T], all: &[T], h0: &[T], d: usize, tt: usize) {
    let w = h0.len();
    for t in 0..tt {
        let src = match prev_step(d, t, tt) {
            Some(p) => &all[p * w..(p + 1) * w],
            None => h0,
        };
        prev[t * w..(t + 1) * w].copy_from_slice(src);
    }
}

fn row<T>(a: &[T]) -> Operand<'_, T> {
    Operand {
        data: a,
        transposed: false,
    }
}

fn trans<T>(a: &[T]) -> Operand<'_, T> {
    Operand {
        data: a,
        transposed: true,
    }
}

/// The forward: `y` (`T × N × D·H`) from `x` (`T × N × I`), the flat parameters `w`, the
/// initial states `hx` (and `cx` for LSTM, both `L·D × N × H`); the final states into `hy`/`cy`
/// when given; the backward's saved values into `rs` ([`RnnGeom::reserve_size`]). `drop`:
/// the dropout between layers, one factor (0 or `1 / (1 - p)`) per element of every layer's
/// output but the last's, applied to that output before the next layer reads it.
#[allow(clippy::too_many_arguments)]
pub fn forward<T: Real>(
    g: &RnnGeom,
    x: &[T],
    w: &[T],
    hx: &[T],
    cx: Option<&[T]>,
    y: &mut [T],
    mut hy: Option<&mut [T]>,
    mut cy: Option<&mut [T]>,
    rs: &mut [T],
    drop: Option<&[T]>,
) {
    let (tt, n, h, gh, dd) = (g.seq, g.batch, g.hidden, g.gh(), g.dirs);
    let nh = n * h;
    // the previous layer's output (the data for the first layer)
    let mut below: Option<Scratch<T>> = None;
    let mut pre = scratch::<T>(tt * n * gh);
    let mut hh = vec![T::ZERO; n * gh];
    let mut hprev = vec![T::ZERO; nh];
    let mut cprev = vec![T::ZERO; nh];
    let threads = step_threads(g);
    for l in 0..g.layers {
        let inp = g.layer_input(l);
        let layer_in: &[T] = below.as_deref().unwrap_or(x);
        // every element is written: each direction's steps fill their half of every row
        let mut layer_out = scratch::<T>(tt * n * dd * h);
        for d in 0..dd {
            let wo = g.weight_offset(l, d);
            let wx = &w[wo..wo + gh * inp];
            let wh = &w[wo + gh * inp..wo + gh * (inp + h)];
            let bo = g.bias_offset(l, d);
            let (bx, bh) = (&w[bo..bo + gh], &w[bo + gh..bo + 2 * gh]);
            // the biases first, the projection added onto them by the GEMM (one pass over
            // `pre` fewer than adding them afterwards)
            let bias: Vec<T> = (0..gh)
                .map(|j| {
                    if g.cell == Cell::Gru && j >= 2 * h {
                        bx[j]
                    } else {
                        bx[j] + bh[j]
                    }
                })
                .collect();
            for r in pre.chunks_mut(gh) {
                r.copy_from_slice(&bias);
            }
            matmul(tt * n, gh, inp, row(layer_in), trans(wx), &mut pre, true);
            let state = (l * dd + d) * nh;
            hprev.copy_from_slice(&hx[state..state + nh]);
            if let Some(cx) = cx {
                cprev.copy_from_slice(&cx[state..state + nh]);
            }
            let block = &mut rs[g.block_offset(l, d)..][..g.block()];
            let (h_all, rest) = block.split_at_mut(g.tnh());
            // float32: `Wh` packed once for all steps (the LSTM's with its gates by unit block)
            let (lstm_wh, step_wh) = match (f32s(wh), g.cell) {
                (Some(w), Cell::Lstm) => (Some(Packed::lstm_wh_t(w, h)), None),
                (Some(w), _) => (None, Some(Packed::wh_t(w, gh, h))),
                (None, _) => (None, None),
            };
            for s in 0..tt {
                let t = g.time(d, s);
                let p = &pre[t * n * gh..(t + 1) * n * gh];
                let ht = &mut h_all[t * nh..(t + 1) * nh];
                if let Some(pk) = &lstm_wh {
                    let (c_all, gates) = rest.split_at_mut(g.tnh());
                    let ct = &mut c_all[t * nh..(t + 1) * nh];
                    rnn_step::lstm_step(
                        n,
                        h,
                        as32(&hprev),
                        as32(&cprev),
                        as32(p),
                        pk,
                        as32_mut(ht),
                        as32_mut(ct),
                        as32_mut(&mut gates[t * n * gh..(t + 1) * n * gh]),
                    );
                    cprev.copy_from_slice(ct);
                    hprev.copy_from_slice(ht);
                    for j in 0..n {
                        let dst = (t * n + j) * dd * h + d * h;
                        layer_out[dst..dst + h].copy_from_slice(&ht[j * h..(j + 1) * h]);
                    }
                    continue;
                }
                match &step_wh {
                    Some(pk) => rnn_step::matmul(n, gh, as32(&hprev), pk, as32_mut(&mut hh), false),
                    None => matmul(n, gh, h, row(&hprev), trans(wh), &mut hh, false),
                }
                match g.cell {
                    Cell::Relu | Cell::Tanh => {
                        let mut rows: Vec<&mut [T]> = ht.chunks_mut(h).collect();
                        for_each_mut(&mut rows, threads, |j, hrow| {
                            if is_f32::<T>() && g.cell == Cell::Tanh {
                                rnn_step::tanh_row(
                                    as32(&p[j * gh..(j + 1) * gh]),
                                    as32(&hh[j * gh..(j + 1) * gh]),
                                    as32_mut(hrow),
                                );
                                return;
                            }
                            for k in 0..h {
                                let a = p[j * gh + k] + hh[j * gh + k];
                                hrow[k] = if g.cell == Cell::Tanh {
                                    tanh(a)
                                } else if a > T::ZERO {
                                    a
                                } else {
                                    T::ZERO
                                };
                            }
                        });
                    }
                    Cell::Lstm => {
                        let (c_all, gates) = rest.split_at_mut(g.tnh());
                        let ct = &mut c_all[t * nh..(t + 1) * nh];
                        let gt = &mut gates[t * n * gh..(t + 1) * n * gh];
                        let cp = &cprev;
                        let mut rows: Vec<_> = ht
                            .chunks_mut(h)
                            .zip(ct.chunks_mut(h))
                            .zip(gt.chunks_mut(gh))
                            .collect();
                        for_each_mut(&mut rows, threads, |j, ((hrow, crow), grow)| {
                            for k in 0..h {
                                let at = |q: usize| p[j * gh + q * h + k] + hh[j * gh + q * h + k];
                                let i = sigmoid(at(0));
                                let f = sigmoid(at(1));
                                let gg = tanh(at(2));
                                let o = sigmoid(at(3));
                                let c = f * cp[j * h + k] + i * gg;
                                crow[k] = c;
                                hrow[k] = o * tanh(c);
                                grow[k] = i;
                                grow[k + h] = f;
                                grow[k + 2 * h] = gg;
                                grow[k + 3 * h] = o;
                            }
                        });
                        cprev.copy_from_slice(ct);
                    }
                    Cell::Gru => {
                        let (gates, mnh) = rest.split_at_mut(3 * g.tnh());
                        let gt = &mut gates[t * n * gh..(t + 1) * n * gh];
                        let mt = &mut mnh[t * nh..(t + 1) * nh];
                        let hp = &hprev;
                        let mut rows: Vec<_> = ht
                            .chunks_mut(h)
                            .zip(mt.chunks_mut(h))
                            .zip(gt.chunks_mut(gh))
                            .collect();
                        for_each_mut(&mut rows, threads, |j, ((hrow, mrow), grow)| {
                            if is_f32::<T>() {
                                rnn_step::gru_row(
                                    as32(&p[j * gh..(j + 1) * gh]),
                                    as32(&hh[j * gh..(j + 1) * gh]),
                                    as32(&bh[2 * h..3 * h]),
                                    as32(&hp[j * h..(j + 1) * h]),
                                    as32_mut(hrow),
                                    as32_mut(mrow),
                                    as32_mut(grow),
                                );
                                return;
                            }
                            for k in 0..h {
                                let base = j * gh + k;
                                let r = sigmoid(p[base] + hh[base]);
                                let z = sigmoid(p[base + h] + hh[base + h]);
                                let m = hh[base + 2 * h] + bh[2 * h + k];
                                let nn = tanh(p[base + 2 * h] + r * m);
                                hrow[k] = (T::ONE - z) * nn + z * hp[j * h + k];
                                mrow[k] = m;
                                grow[k] = r;
                                grow[k + h] = z;
                                grow[k + 2 * h] = nn;
                            }
                        });
                    }
                }
                hprev.copy_from_slice(ht);
                for j in 0..n {
                    let dst = (t * n + j) * dd * h + d * h;
                    layer_out[dst..dst + h].copy_from_slice(&ht[j * h..(j + 1) * h]);
                }
            }
            if let Some(hy) = hy.as_deref_mut() {
                hy[state..state + nh].copy_from_slice(&hprev);
            }
            if let Some(cy) = cy.as_deref_mut() {
                cy[state..state + nh].copy_from_slice(&cprev);
            }
        }
        if l + 1 < g.layers {
            if let Some(m) = drop {
                let len = layer_out.len();
                for (v, &k) in layer_out.iter_mut().zip(&m[l * len..(l + 1) * len]) {
                    *v = *v * k;
                }
            }
            rs[g.layer_out_offset(l)..][..layer_out.len()].copy_from_slice(&layer_out);
            below = Some(layer_out);
        } else {
            y.copy_from_slice(&layer_out);
        }
    }
}

/// Length of the flat parameters of an LSTM with a projection of size `proj` (LSTMP): for each
/// layer and direction `Wx` (`4H × in`), `Wh` (`4H × P`) and the projection `Wr` (`P × H`), then
/// the biases as for a plain LSTM. A layer above the first reads `P·D` values per step.
pub fn lstmp_param_size(g: &RnnGeom, proj: usize) -> usize {
    let h4 = 4 * g.hidden;
    (0..g.layers)
        .map(|l| {
            let inp = if l == 0 { g.input } else { proj * g.dirs };
            g.dirs * (h4 * (inp + proj) + proj * g.hidden)
        })
        .sum::<usize>()
        + g.layers * g.dirs * 2 * h4
}

/// Length of the LSTMP reserve the forward fills and [`lstmp_backward`] reads: for each layer
/// and direction the recurrent states `r` (`T·N·P`), the hidden values `h`, the cells (`T·N·H`
/// each) and the gates' activations (`T·N·4H`); then every layer's output but the last
/// (`T·N·D·P` each).
pub fn lstmp_reserve_size(g: &RnnGeom, proj: usize) -> usize {
    let tn = g.seq * g.batch;
    g.layers * g.dirs * lstmp_block(g, proj) + (g.layers - 1) * tn * g.dirs * proj
}

fn lstmp_block(g: &RnnGeom, proj: usize) -> usize {
    g.seq * g.batch * (proj + 6 * g.hidden)
}

/// Offsets of layer `l`'s `Wx`, `Wh`, `Wr` (direction `d`) and of its `bx` (`bh` follows) in
/// the LSTMP's flat parameters.
fn lstmp_offsets(g: &RnnGeom, proj: usize, l: usize, d: usize) -> (usize, usize, usize, usize) {
    let h4 = 4 * g.hidden;
    let inp = |k: usize| if k == 0 { g.input } else { proj * g.dirs };
    let per = |k: usize| h4 * (inp(k) + proj) + proj * g.hidden;
    let wo: usize = (0..l).map(|k| g.dirs * per(k)).sum::<usize>() + d * per(l);
    let bo = lstmp_param_size(g, proj) - g.layers * g.dirs * 2 * h4 + (l * g.dirs + d) * 2 * h4;
    (wo, wo + h4 * inp(l), wo + h4 * (inp(l) + proj), bo)
}

/// The LSTMP forward: the cell runs as an LSTM's, the recurrent state is `r = Wr · h` (`P`
/// values), which is also the layer's output. `hx` and `hy` are `L·D × N × P`, `cx` and `cy`
/// `L·D × N × H`, `y` is `T × N × D·P`. With `rs` ([`lstmp_reserve_size`]) it keeps what
/// [`lstmp_backward`] needs.
#[allow(clippy::too_many_arguments)]
pub fn lstmp_forward<T: Real>(
    g: &RnnGeom,
    proj: usize,
    x: &[T],
    w: &[T],
    hx: &[T],
    cx: &[T],
    y: &mut [T],
    mut hy: Option<&mut [T]>,
    mut cy: Option<&mut [T]>,
    mut rs: Option<&mut [T]>,
) {
    let (tt, n, h, dd, pp) = (g.seq, g.batch, g.hidden, g.dirs, proj);
    let h4 = 4 * h;
    let (tnh, tnp) = (tt * n * h, tt * n * pp);
    let mut layer_in: Vec<T> = x.to_vec();
    let mut pre = vec![T::ZERO; tt * n * h4];
    let mut hh = vec![T::ZERO; n * h4];
    let mut hcur = vec![T::ZERO; n * h];
    let mut c = vec![T::ZERO; n * h];
    let mut r = vec![T::ZERO; n * pp];
    for l in 0..g.layers {
        let inp = if l == 0 { g.input } else { pp * dd };
        let mut layer_out = vec![T::ZERO; tt * n * dd * pp];
        for d in 0..dd {
            let (wxo, who, wro, bo) = lstmp_offsets(g, proj, l, d);
            let wx = &w[wxo..who];
            let wh = &w[who..wro];
            let wr = &w[wro..wro + pp * h];
            let (bx, bh) = (&w[bo..bo + h4], &w[bo + h4..bo + 2 * h4]);
            matmul(tt * n, h4, inp, row(&layer_in), trans(wx), &mut pre, false);
            let state = l * dd + d;
            r.copy_from_slice(&hx[state * n * pp..(state + 1) * n * pp]);
            c.copy_from_slice(&cx[state * n * h..(state + 1) * n * h]);
            let mut block = rs
                .as_deref_mut()
                .map(|rs| &mut rs[state * lstmp_block(g, proj)..][..lstmp_block(g, proj)]);
            for s in 0..tt {
                let t = g.time(d, s);
                matmul(n, h4, pp, row(&r), trans(wh), &mut hh, false);
                let mut gates = block
                    .as_deref_mut()
                    .map(|b| &mut b[tnp + 2 * tnh + t * n * h4..][..n * h4]);
                for j in 0..n {
                    let px = &pre[(t * n + j) * h4..(t * n + j + 1) * h4];
                    let ph = &hh[j * h4..(j + 1) * h4];
                    let gate = |q: usize, k: usize| {
                        px[q * h + k] + ph[q * h + k] + bx[q * h + k] + bh[q * h + k]
                    };
                    for k in 0..h {
                        let it = sigmoid(gate(0, k));
                        let ft = sigmoid(gate(1, k));
                        let gt = tanh(gate(2, k));
                        let ot = sigmoid(gate(3, k));
                        let ct = ft * c[j * h + k] + it * gt;
                        c[j * h + k] = ct;
                        hcur[j * h + k] = ot * tanh(ct);
                        if let Some(gs) = gates.as_deref_mut() {
                            let row = &mut gs[j * h4..(j + 1) * h4];
                            row[k] = it;
                            row[h + k] = ft;
                            row[2 * h + k] = gt;
                            row[3 * h + k] = ot;
                        }
                    }
                }
                matmul(n, pp, h, row(&hcur), trans(wr), &mut r, false);
                if let Some(b) = block.as_deref_mut() {
                    b[t * n * pp..(t + 1) * n * pp].copy_from_slice(&r);
                    b[tnp + t * n * h..][..n * h].copy_from_slice(&hcur);
                    b[tnp + tnh + t * n * h..][..n * h].copy_from_slice(&c);
                }
                for j in 0..n {
                    let o = (t * n + j) * dd * pp + d * pp;
                    layer_out[o..o + pp].copy_from_slice(&r[j * pp..(j + 1) * pp]);
                }
            }
            if let Some(hy) = hy.as_deref_mut() {
                hy[state * n * pp..(state + 1) * n * pp].copy_from_slice(&r);
            }
            if let Some(cy) = cy.as_deref_mut() {
                cy[state * n * h..(state + 1) * n * h].copy_from_slice(&c);
            }
        }
        if l + 1 < g.layers {
            if let Some(rs) = rs.as_deref_mut() {
                let at = g.layers * dd * lstmp_block(g, proj) + l * tt * n * dd * pp;
                rs[at..at + layer_out.len()].copy_from_slice(&layer_out);
            }
            layer_in = layer_out;
        } else {
            y.copy_from_slice(&layer_out);
        }
    }
}

/// The LSTMP backward through time, from the forward's inputs, its reserve `rs` and the
/// gradients arriving at the output (`dy`, `T × N × D·P`) and, when the forward returned them,
/// at the final states (`dhy`: `L·D × N × P`, `dcy`: `L·D × N × H`). Per step the gradient
/// reaching `r_t` goes back through the projection (`dh = dr · Wr`), then through the cell as
/// an LSTM's; `dWr` is one GEMM over the sequence (`drᵀ · h`), as are `dWx`, `dWh` (against the
/// previous steps' `r`) and the input gradient.
#[allow(clippy::too_many_arguments)]
pub fn lstmp_backward<T: Real>(
    g: &RnnGeom,
    proj: usize,
    x: &[T],
    w: &[T],
    hx: &[T],
    cx: &[T],
    rs: &[T],
    dy: &[T],
    dhy: Option<&[T]>,
    dcy: Option<&[T]>,
    out: RnnGrads<'_, T>,
) {
    let RnnGrads {
        dx,
        dw,
        dhx,
        mut dcx,
    } = out;
    let (tt, n, h, dd, pp) = (g.seq, g.batch, g.hidden, g.dirs, proj);
    let h4 = 4 * h;
    let (nh, np, tnh, tnp) = (n * h, n * pp, tt * n * h, tt * n * pp);
    let blk = lstmp_block(g, proj);
    let mut dlayer_out: Vec<T> = dy.to_vec();
    let mut dpre = vec![T::ZERO; tt * n * h4];
    let mut dr_all = vec![T::ZERO; tnp];
    let mut rprev_all = vec![T::ZERO; tnp];
    let mut dr_next = vec![T::ZERO; np];
    let mut dc_next = vec![T::ZERO; nh];
    let mut dh = vec![T::ZERO; nh];
    for l in (0..g.layers).rev() {
        let inp = if l == 0 { g.input } else { pp * dd };
        let layer_in: &[T] = if l == 0 {
            x
        } else {
            &rs[g.layers * dd * blk + (l - 1) * tt * n * dd * pp..][..tt * n * inp]
        };
        let mut dlayer_in = vec![T::ZERO; tt * n * inp];
        for d in 0..dd {
            let (wxo, who, wro, bo) = lstmp_offsets(g, proj, l, d);
            let wx = &w[wxo..who];
            let wh = &w[who..wro];
            let wr = &w[wro..wro + pp * h];
            let state = l * dd + d;
            let block = &rs[state * blk..][..blk];
            let (r_all, rest) = block.split_at(tnp);
            let (h_all, rest) = rest.split_at(tnh);
            let (c_all, gates) = rest.split_at(tnh);
            let prev_time = |t| prev_step(d, t, tt);
            previous_rows(&mut rprev_all, r_all, &hx[state * np..(state + 1) * np], d, tt);
            match dhy {
                Some(v) => dr_next.copy_from_slice(&v[state * np..(state + 1) * np]),
                None => dr_next.fill(T::ZERO),
            }
            match dcy {
                Some(v) => dc_next.copy_from_slice(&v[state * nh..(state + 1) * nh]),
                None => dc_next.fill(T::ZERO),
            }
            for s in (0..tt).rev() {
                let t = g.time(d, s);
                let dr = &mut dr_all[t * np..(t + 1) * np];
                for j in 0..n {
                    for k in 0..pp {
                        dr[j * pp + k] =
                            dlayer_out[(t * n + j) * dd * pp + d * pp + k] + dr_next[j * pp + k];
                    }
                }
                // through the projection: dh = dr · Wr (Wr is P × H)
                matmul(n, h, pp, row(dr), row(wr), &mut dh, false);
                let ct = &c_all[t * nh..(t + 1) * nh];
                let cp = match prev_time(t) {
                    Some(p) => &c_all[p * nh..(p + 1) * nh],
                    None => &cx[state * nh..(state + 1) * nh],
                };
                let gt = &gates[t * n * h4..(t + 1) * n * h4];
                let dp = &mut dpre[t * n * h4..(t + 1) * n * h4];
                for j in 0..n {
                    for k in 0..h {
                        let jk = j * h + k;
                        let base = j * h4 + k;
                        let (i, f, gg, o) =
                            (gt[base], gt[base + h], gt[base + 2 * h], gt[base + 3 * h]);
                        let tc = tanh(ct[jk]);
                        let dc = dc_next[jk] + dh[jk] * o * (T::ONE - tc * tc);
                        dp[base] = dc * gg * i * (T::ONE - i);
                        dp[base + h] = dc * cp[jk] * f * (T::ONE - f);
                        dp[base + 2 * h] = dc * i * (T::ONE - gg * gg);
                        dp[base + 3 * h] = dh[jk] * tc * o * (T::ONE - o);
                        dc_next[jk] = dc * f;
                    }
                }
                // to r_{t-1}: dpre · Wh (Wh is 4H × P)
                matmul(n, pp, h4, row(dp), row(wh), &mut dr_next, false);
            }
            dhx[state * np..(state + 1) * np].copy_from_slice(&dr_next);
            if let Some(dcx) = dcx.as_deref_mut() {
                dcx[state * nh..(state + 1) * nh].copy_from_slice(&dc_next);
            }
            matmul(h4, inp, tt * n, trans(&dpre), row(layer_in), &mut dw[wxo..who], false);
            matmul(h4, pp, tt * n, trans(&dpre), row(&rprev_all), &mut dw[who..wro], false);
            matmul(pp, h, tt * n, trans(&dr_all), row(h_all), &mut dw[wro..wro + pp * h], false);
            let (dbx, dbh) = dw[bo..bo + 2 * h4].split_at_mut(h4);
            col_sums(&dpre, h4, dbx);
            dbh.copy_from_slice(dbx);
            matmul(tt * n, inp, h4, row(&dpre), row(wx), &mut dlayer_in, d > 0);
        }
        if l == 0 {
            dx.copy_from_slice(&dlayer_in);
        } else {
            dlayer_out = dlayer_in;
        }
    }
}

/// Gradients the backward writes: of the data, the flat parameters, the initial hidden state
/// and (LSTM) the initial cell.
pub struct RnnGrads<'a, T> {
    pub dx: &'a mut [T],
    pub dw: &'a mut [T],
    pub dhx: &'a mut [T],
    pub dcx: Option<&'a mut [T]>,
}

/// The backward through time, from the forward's inputs, its reserve `rs` and the gradients
/// arriving at the output (`dy`) and, when the forward returned them, at the final states;
/// `drop` is the forward's dropout factors.
#[allow(clippy::too_many_arguments)]
pub fn backward<T: Real>(
    g: &RnnGeom,
    x: &[T],
    w: &[T],
    hx: &[T],
    cx: Option<&[T]>,
    rs: &[T],
    dy: &[T],
    dhy: Option<&[T]>,
    dcy: Option<&[T]>,
    out: RnnGrads<'_, T>,
    drop: Option<&[T]>,
) {
    let RnnGrads {
        dx,
        dw,
        dhx,
        mut dcx,
    } = out;
    let (tt, n, h, gh, dd) = (g.seq, g.batch, g.hidden, g.gh(), g.dirs);
    let (nh, tnh) = (n * h, g.tnh());
    // the gradient reaching the layer above's input (`dy` for the last layer)
    let mut above: Option<Scratch<T>> = None;
    let mut dpre_x = scratch::<T>(tt * n * gh);
    let mut dpre_h = scratch::<T>(if g.cell == Cell::Gru { tt * n * gh } else { 0 });
    let mut hprev_all = scratch::<T>(tnh);
    let mut dh_next = vec![T::ZERO; nh];
    let mut dc_next = vec![T::ZERO; nh];
    let threads = step_threads(g);
    for l in (0..g.layers).rev() {
        let inp = g.layer_input(l);
        let layer_in: &[T] = if l == 0 {
            x
        } else {
            &rs[g.layer_out_offset(l - 1)..][..tt * n * inp]
        };
        let dlayer_out: &[T] = above.as_deref().unwrap_or(dy);
        // the first direction's GEMM writes every element, the second adds to them
        let mut dlayer_in = scratch::<T>(tt * n * inp);
        for d in 0..dd {
            let wo = g.weight_offset(l, d);
            let wx = &w[wo..wo + gh * inp];
            let wh = &w[wo + gh * inp..wo + gh * (inp + h)];
            let state = (l * dd + d) * nh;
            let h0 = &hx[state..state + nh];
            let block = &rs[g.block_offset(l, d)..][..g.block()];
            let (h_all, rest) = block.split_at(tnh);
            // h_{t-1} in the direction's order, for every t
            let prev_time = |t| prev_step(d, t, tt);
            previous_rows(&mut hprev_all, h_all, h0, d, tt);
            match dhy {
                Some(v) => dh_next.copy_from_slice(&v[state..state + nh]),
                None => dh_next.fill(T::ZERO),
            }
            match dcy {
                Some(v) => dc_next.copy_from_slice(&v[state..state + nh]),
                None => dc_next.fill(T::ZERO),
            }
            // float32: `Wh` packed once for the steps' `dpre · Wh`
            let step_wh = f32s(wh).map(|w| Packed::wh(w, gh, h));
            for s in (0..tt).rev() {
                let t = g.time(d, s);
                let dyo = |j: usize, k: usize| dlayer_out[(t * n + j) * dd * h + d * h + k];
                let dp = &mut dpre_x[t * n * gh..(t + 1) * n * gh];
                let ht = &h_all[t * nh..(t + 1) * nh];
                match g.cell {
                    Cell::Relu | Cell::Tanh => {
                        let dhn = &dh_next;
                        let mut rows: Vec<&mut [T]> = dp.chunks_mut(gh).collect();
                        for_each_mut(&mut rows, threads, |j, drow| {
                            if is_f32::<T>() {
                                let at = (t * n + j) * dd * h + d * h;
                                rnn_step::act_back_row(
                                    as32(&dlayer_out[at..at + h]),
                                    as32(&dhn[j * h..(j + 1) * h]),
                                    as32(&ht[j * h..(j + 1) * h]),
                                    as32_mut(&mut drow[..h]),
                                    g.cell == Cell::Relu,
                                );
                                return;
                            }
                            for k in 0..h {
                                let dh = dyo(j, k) + dhn[j * h + k];
                                let hv = ht[j * h + k];
                                drow[k] = if g.cell == Cell::Tanh {
                                    dh * (T::ONE - hv * hv)
                                } else if hv > T::ZERO {
                                    dh
                                } else {
                                    T::ZERO
                                };
                            }
                        });
                    }
                    Cell::Lstm => {
                        let (c_all, gates) = rest.split_at(tnh);
                        let ct = &c_all[t * nh..(t + 1) * nh];
                        let cp = match prev_time(t) {
                            Some(p) => &c_all[p * nh..(p + 1) * nh],
                            None => &cx.expect("LSTM has a cell state")[state..state + nh],
                        };
                        let gt = &gates[t * n * gh..(t + 1) * n * gh];
                        let dhn = &dh_next;
                        let mut rows: Vec<_> =
                            dp.chunks_mut(gh).zip(dc_next.chunks_mut(h)).collect();
                        for_each_mut(&mut rows, threads, |j, (drow, dcrow)| {
                            if is_f32::<T>() {
                                let at = (t * n + j) * dd * h + d * h;
                                rnn_step::lstm_back_row(
                                    as32(&dlayer_out[at..at + h]),
                                    as32(&dhn[j * h..(j + 1) * h]),
                                    as32(&ct[j * h..(j + 1) * h]),
                                    as32(&cp[j * h..(j + 1) * h]),
                                    as32(&gt[j * gh..(j + 1) * gh]),
                                    as32_mut(drow),
                                    as32_mut(dcrow),
                                );
                                return;
                            }
                            for k in 0..h {
                                let jk = j * h + k;
                                let base = j * gh + k;
                                let (i, f, gg, o) =
                                    (gt[base], gt[base + h], gt[base + 2 * h], gt[base + 3 * h]);
                                let dh = dyo(j, k) + dhn[jk];
                                let tc = tanh(ct[jk]);
                                let dc = dcrow[k] + dh * o * (T::ONE - tc * tc);
                                drow[k] = dc * gg * i * (T::ONE - i);
                                drow[k + h] = dc * cp[jk] * f * (T::ONE - f);
                                drow[k + 2 * h] = dc * i * (T::ONE - gg * gg);
                                drow[k + 3 * h] = dh * tc * o * (T::ONE - o);
                                dcrow[k] = dc * f;
                            }
                        });
                    }
                    Cell::Gru => {
                        let (gates, mnh) = rest.split_at(3 * tnh);
                        let gt = &gates[t * n * gh..(t + 1) * n * gh];
                        let mt = &mnh[t * nh..(t + 1) * nh];
                        let hp = &hprev_all[t * nh..(t + 1) * nh];
                        let dph = &mut dpre_h[t * n * gh..(t + 1) * n * gh];
                        let mut rows: Vec<_> = dp
                            .chunks_mut(gh)
                            .zip(dph.chunks_mut(gh))
                            .zip(dh_next.chunks_mut(h))
                            .collect();
                        for_each_mut(&mut rows, threads, |j, ((drow, dhrow), dnrow)| {
                            if is_f32::<T>() {
                                let at = (t * n + j) * dd * h + d * h;
                                rnn_step::gru_back_row(
                                    as32(&dlayer_out[at..at + h]),
                                    as32_mut(dnrow),
                                    as32(&gt[j * gh..(j + 1) * gh]),
                                    as32(&mt[j * h..(j + 1) * h]),
                                    as32(&hp[j * h..(j + 1) * h]),
                                    as32_mut(drow),
                                    as32_mut(dhrow),
                                );
                                return;
                            }
                            for k in 0..h {
                                let jk = j * h + k;
                                let base = j * gh + k;
                                let (r, z, nn) = (gt[base], gt[base + h], gt[base + 2 * h]);
                                let dh = dyo(j, k) + dnrow[k];
                                let dan = dh * (T::ONE - z) * (T::ONE - nn * nn);
                                let daz = dh * (hp[jk] - nn) * z * (T::ONE - z);
                                let dar = dan * mt[jk] * r * (T::ONE - r);
                                drow[k] = dar;
                                drow[k + h] = daz;
                                drow[k + 2 * h] = dan;
                                dhrow[k] = dar;
                                dhrow[k + h] = daz;
                                dhrow[k + 2 * h] = dan * r;
                                // the direct path h_{t-1} → h_t; the path through Wh is added below
                                dnrow[k] = dh * z;
                            }
                        });
                    }
                }
                let dph: &[T] = if g.cell == Cell::Gru {
                    &dpre_h[t * n * gh..(t + 1) * n * gh]
                } else {
                    &dpre_x[t * n * gh..(t + 1) * n * gh]
                };
                match &step_wh {
                    Some(pk) => rnn_step::matmul(
                        n,
                        h,
                        as32(dph),
                        pk,
                        as32_mut(&mut dh_next),
                        g.cell == Cell::Gru,
                    ),
                    None => matmul(
                        n,
                        h,
                        gh,
                        row(dph),
                        row(wh),
                        &mut dh_next,
                        g.cell == Cell::Gru,
                    ),
                }
            }
            dhx[state..state + nh].copy_from_slice(&dh_next);
            if let Some(dcx) = dcx.as_deref_mut() {
                dcx[state..state + nh].copy_from_slice(&dc_next);
            }
            let dph: &[T] = if g.cell == Cell::Gru {
                &dpre_h
            } else {
                &dpre_x
            };
            let (dwx, dwh) = dw[wo..wo + gh * (inp + h)].split_at_mut(gh * inp);
            matmul(gh, inp, tt * n, trans(&dpre_x), row(layer_in), dwx, false);
            matmul(gh, h, tt * n, trans(dph), row(&hprev_all), dwh, false);
            let bo = g.bias_offset(l, d);
            let (dbx, dbh) = dw[bo..bo + 2 * gh].split_at_mut(gh);
            col_sums(&dpre_x, gh, dbx);
            col_sums(dph, gh, dbh);
            matmul(
                tt * n,
                inp,
                gh,
                row(&dpre_x),
                row(wx),
                &mut dlayer_in,
                d > 0,
            );
        }
        if l == 0 {
            dx.copy_from_slice(&dlayer_in);
        } else {
            if let Some(m) = drop {
                let len = dlayer_in.len();
                for (v, &k) in dlayer_in.iter_mut().zip(&m[(l - 1) * len..l * len]) {
                    *v = *v * k;
                }
            }
            above = Some(dlayer_in);
        }
    }
}

/// `out[j] = Σ_rows a[row][j]` for a row-major `a` of width `out.len()`.
fn col_sums<T: Real>(a: &[T], width: usize, out: &mut [T]) {
    out.fill(T::ZERO);
    for r in a.chunks(width) {
        for (o, v) in out.iter_mut().zip(r) {
            *o = *o + *v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    }

    /// Σ y·wy + Σ hy·wh + Σ cy·wc: a scalar whose gradient the backward gives.
    fn loss(g: &RnnGeom, x: &[f64], w: &[f64], hx: &[f64], cx: &[f64], heads: &[Vec<f64>]) -> f64 {
        let mut y = vec![0.0; g.seq * g.batch * g.dirs * g.hidden];
        let mut hy = vec![0.0; hx.len()];
        let mut cy = vec![0.0; hx.len()];
        let mut rs = vec![0.0; g.reserve_size()];
        let lstm = g.cell == Cell::Lstm;
        forward(
            g,
            x,
            w,
            hx,
            lstm.then_some(cx),
            &mut y,
            Some(&mut hy),
            lstm.then_some(&mut cy[..]),
            &mut rs,
            None,
        );
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
        dot(&y, &heads[0]) + dot(&hy, &heads[1]) + if lstm { dot(&cy, &heads[2]) } else { 0.0 }
    }

    #[test]
    fn backward_matches_central_differences() {
        for cell in [Cell::Relu, Cell::Tanh, Cell::Lstm, Cell::Gru] {
            for (layers, dirs) in [(1, 1), (2, 2)] {
                let g = RnnGeom {
                    cell,
                    layers,
                    dirs,
                    seq: 3,
                    batch: 2,
                    input: 3,
                    hidden: 2,
                };
                let mut seed = 7u64;
                let mut fill =
                    |k: usize| (0..k).map(|_| lcg(&mut seed) * 0.8).collect::<Vec<f64>>();
                let x = fill(g.seq * g.batch * g.input);
                let w = fill(g.param_size());
                let ns = layers * dirs * g.batch * g.hidden;
                let hx = fill(ns);
                let cx = fill(ns);
                let heads = vec![fill(g.seq * g.batch * dirs * g.hidden), fill(ns), fill(ns)];
                let lstm = cell == Cell::Lstm;
                let mut y = vec![0.0; heads[0].len()];
                let mut rs = vec![0.0; g.reserve_size()];
                forward(
                    &g,
                    &x,
                    &w,
                    &hx,
                    lstm.then_some(&cx[..]),
                    &mut y,
                    None,
                    None,
                    &mut rs,
                    None,
                );
                let (mut dx, mut dw, mut dhx, mut dcx) = (
                    vec![0.0; x.len()],
                    vec![0.0; w.len()],
                    vec![0.0; ns],
                    vec![0.0; ns],
                );
                backward(
                    &g,
                    &x,
                    &w,
                    &hx,
                    lstm.then_some(&cx[..]),
                    &rs,
                    &heads[0],
                    Some(&heads[1]),
                    lstm.then_some(&heads[2][..]),
                    RnnGrads {
                        dx: &mut dx,
                        dw: &mut dw,
                        dhx: &mut dhx,
                        dcx: lstm.then_some(&mut dcx[..]),
                    },
                    None,
                );
                let eps = 1e-6;
                let check = |which: usize, grad: &[f64]| {
                    for i in 0..grad.len() {
                        let mut args = [x.clone(), w.clone(), hx.clone(), cx.clone()];
                        args[which][i] += eps;
                        let plus = loss(&g, &args[0], &args[1], &args[2], &args[3], &heads);
                        args[which][i] -= 2.0 * eps;
                        let minus = loss(&g, &args[0], &args[1], &args[2], &args[3], &heads);
                        let num = (plus - minus) / (2.0 * eps);
                        assert!(
                            (num - grad[i]).abs() < 1e-6 + 1e-5 * num.abs(),
                            "{cell:?} L={layers} D={dirs} input {which} [{i}]: {} vs {num}",
                            grad[i]
                        );
                    }
                };
                check(0, &dx);
                check(1, &dw);
                check(2, &dhx);
                if lstm {
                    check(3, &dcx);
                }
            }
        }
    }
    #[test]
    fn lstmp_backward_matches_central_differences() {
        for (layers, dirs) in [(1, 1), (2, 2)] {
            let g = RnnGeom {
                cell: Cell::Lstm,
                layers,
                dirs,
                seq: 3,
                batch: 2,
                input: 3,
                hidden: 3,
            };
            let proj = 2;
            let mut seed = 11u64;
            let mut fill = |k: usize| (0..k).map(|_| lcg(&mut seed) * 0.8).collect::<Vec<f64>>();
            let ns = layers * dirs * g.batch;
            let x = fill(g.seq * g.batch * g.input);
            let w = fill(lstmp_param_size(&g, proj));
            let hx = fill(ns * proj);
            let cx = fill(ns * g.hidden);
            let heads = [
                fill(g.seq * g.batch * dirs * proj),
                fill(ns * proj),
                fill(ns * g.hidden),
            ];
            let loss = |args: &[Vec<f64>; 4]| {
                let mut y = vec![0.0; heads[0].len()];
                let (mut hy, mut cy) = (vec![0.0; heads[1].len()], vec![0.0; heads[2].len()]);
                lstmp_forward(
                    &g,
                    proj,
                    &args[0],
                    &args[1],
                    &args[2],
                    &args[3],
                    &mut y,
                    Some(&mut hy),
                    Some(&mut cy),
                    None,
                );
                let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
                dot(&y, &heads[0]) + dot(&hy, &heads[1]) + dot(&cy, &heads[2])
            };
            let mut y = vec![0.0; heads[0].len()];
            let mut rs = vec![0.0; lstmp_reserve_size(&g, proj)];
            lstmp_forward(
                &g,
                proj,
                &x,
                &w,
                &hx,
                &cx,
                &mut y,
                None,
                None,
                Some(&mut rs),
            );
            let (mut dx, mut dw, mut dhx, mut dcx) = (
                vec![0.0; x.len()],
                vec![0.0; w.len()],
                vec![0.0; hx.len()],
                vec![0.0; cx.len()],
            );
            lstmp_backward(
                &g,
                proj,
                &x,
                &w,
                &hx,
                &cx,
                &rs,
                &heads[0],
                Some(&heads[1]),
                Some(&heads[2]),
                RnnGrads {
                    dx: &mut dx,
                    dw: &mut dw,
                    dhx: &mut dhx,
                    dcx: Some(&mut dcx),
                },
            );
            let eps = 1e-6;
            for (which, grad) in [&dx, &dw, &dhx, &dcx].into_iter().enumerate() {
                for i in 0..grad.len() {
                    let mut args = [x.clone(), w.clone(), hx.clone(), cx.clone()];
                    args[which][i] += eps;
                    let plus = loss(&args);
                    args[which][i] -= 2.0 * eps;
                    let num = (plus - loss(&args)) / (2.0 * eps);
                    assert!(
                        (num - grad[i]).abs() < 1e-6 + 1e-5 * num.abs(),
                        "LSTMP L={layers} D={dirs} input {which} [{i}]: {} vs {num}",
                        grad[i]
                    );
                }
            }
        }
    }
}
