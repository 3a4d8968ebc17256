//! BatchNorm's float32 passes over one contiguous run of a channel's elements: the statistics
//! (sums in f64 of exact f32 products, so a one-pass variance keeps f64's precision) and the
//! per-element output formulas (in f32, without fused multiply-adds, so every path rounds the
//! same). Each is compiled for AVX-512 and AVX2 + FMA as well as
//! the baseline and picked at run time, so the loops run at full vector width.

/// Lanes of each f64 accumulator: four 512-bit registers per sum.
const LANES: usize = 32;

multiversion!(
    /// `[Σx, Σx²]` over `x`, in f64.
    pub sums(x: &[f32]) -> [f64; 2] => sums_body
);
multiversion!(
    /// `[Σx, Σx², Σdy, Σx·dy]` over `x` and `dy` (as long), in f64.
    pub sums4(x: &[f32], dy: &[f32]) -> [f64; 4] => sums4_body
);
multiversion!(
    /// `y = (x - mean)·scale + beta` (`y` as long as `x`); `mean` is given as the f32 sum
    /// `mean[0] + mean[1]` of its nearest f32 and the rest, subtracted one after the other.
    pub affine(x: &[f32], y: &mut [f32], mean: [f32; 2], scale: f32, beta: f32) -> () => affine_body
);
multiversion!(
    /// `dx = dy·a + (x - mean)·b + c` (all as long as `dy`; `mean` as in [`affine`]).
    pub data_grad(dy: &[f32], x: &[f32], dx: &mut [f32], mean: [f32; 2], a: f32, b: f32, c: f32) -> () => data_grad_body
);

/// `m` as an f32 and the f32 nearest to what that leaves out: subtracting both in turn from an
/// f32 value close to `m` rounds only once (the first difference is exact).
pub fn split(m: f64) -> [f32; 2] {
    let hi = m as f32;
    [hi, (m - hi as f64) as f32]
}

#[inline(always)]
fn fold(l: &[f64; LANES]) -> f64 {
    // pairwise, so the order is fixed whatever the vector width
    let mut w = *l;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            w[i] += w[i + n];
        }
    }
    w[0]
}

#[inline(always)]
fn sums_body(x: &[f32]) -> [f64; 2] {
    let (mut s, mut q) = ([0.0f64; LANES], [0.0f64; LANES]);
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for i in 0..LANES {
            let v = c[i] as f64;
            s[i] += v;
            q[i] += v * v;
        }
    }
    let (mut s0, mut q0) = (fold(&s), fold(&q));
    for &v in chunks.remainder() {
        let v = v as f64;
        s0 += v;
        q0 += v * v;
    }
    [s0, q0]
}

#[inline(always)]
fn sums4_body(x: &[f32], dy: &[f32]) -> [f64; 4] {
    let dy = &dy[..x.len()];
    let mut acc = [[0.0f64; LANES]; 4];
    let mut xc = x.chunks_exact(LANES);
    let mut dc = dy.chunks_exact(LANES);
    for (c, d) in (&mut xc).zip(&mut dc) {
        for i in 0..LANES {
            let (v, g) = (c[i] as f64, d[i] as f64);
            acc[0][i] += v;
            acc[1][i] += v * v;
            acc[2][i] += g;
            acc[3][i] += v * g;
        }
    }
    let mut r = [fold(&acc[0]), fold(&acc[1]), fold(&acc[2]), fold(&acc[3])];
    for (&v, &g) in xc.remainder().iter().zip(dc.remainder()) {
        let (v, g) = (v as f64, g as f64);
        r[0] += v;
        r[1] += v * v;
        r[2] += g;
        r[3] += v * g;
    }
    r
}

#[inline(always)]
fn affine_body(x: &[f32], y: &mut [f32], mean: [f32; 2], scale: f32, beta: f32) {
    let y = &mut y[..x.len()];
    let [mh, ml] = mean;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = ((v - mh) - ml) * scale + beta;
    }
}

#[inline(always)]
fn data_grad_body(dy: &[f32], x: &[f32], dx: &mut [f32], mean: [f32; 2], a: f32, b: f32, c: f32) {
    let (x, dx) = (&x[..dy.len()], &mut dx[..dy.len()]);
    let [mh, ml] = mean;
    for ((o, &g), &v) in dx.iter_mut().zip(dy).zip(x) {
        *o = g * a + (((v - mh) - ml) * b + c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                ((s >> 8) as f32 / (1u32 << 24) as f32) * 4.0 - 1.5
            })
            .collect()
    }

    #[test]
    fn sums_match_a_serial_f64_loop() {
        for n in [0, 1, 31, 32, 33, 100, 3136] {
            let (x, dy) = (data(n, 1), data(n, 2));
            let r = sums4(&x, &dy);
            let mut want = [0.0f64; 4];
            for (&v, &g) in x.iter().zip(&dy) {
                let (v, g) = (v as f64, g as f64);
                want[0] += v;
                want[1] += v * v;
                want[2] += g;
                want[3] += v * g;
            }
            for k in 0..4 {
                assert!(
                    (r[k] - want[k]).abs() <= 1e-12 * (1.0 + want[k].abs()),
                    "n={n} k={k}"
                );
            }
            let s = sums(&x);
            assert!((s[0] - want[0]).abs() <= 1e-12 * (1.0 + want[0].abs()));
            assert!((s[1] - want[1]).abs() <= 1e-12 * (1.0 + want[1].abs()));
        }
    }

    #[test]
    fn formulas_match_their_definition() {
        let (x, dy) = (data(77, 3), data(77, 4));
        let mut y = vec![0.0f32; 77];
        affine(&x, &mut y, split(0.25), 2.0, -1.0);
        for (o, v) in y.iter().zip(&x) {
            assert!((o - ((v - 0.25) * 2.0 - 1.0)).abs() < 1e-6);
        }
        data_grad(&dy, &x, &mut y, split(0.25), 1.5, -0.5, 0.125);
        for ((o, g), v) in y.iter().zip(&dy).zip(&x) {
            assert!((o - (g * 1.5 + (v - 0.25) * -0.5 + 0.125)).abs() < 1e-6);
        }
    }
}
