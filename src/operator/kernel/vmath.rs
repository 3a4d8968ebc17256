//! Vectorised float32 transcendental functions: `exp`, `expm1`, `log`, `log1p`, `tanh`,
//! `sigmoid` and `softrelu` over whole buffers; and the rows of the softmax family
//! ([`softmax_row`], [`softmax_grad_row`]) built on `exp`.
//!
//! Each function is written once as branch-free scalar code (range reduction, a polynomial,
//! selects for the edges) that the compiler vectorises, and compiled three times: with AVX-512
//! (16 lanes, FMA), with AVX2 (8 lanes, FMA) and for the baseline x86-64 (SSE2, separate
//! multiply and add). The widest level the CPU has is picked once at run time. Every element
//! gets the same IEEE operations whatever its position (vector body or scalar tail), so a buffer
//! gives the same bits processed whole or in pieces: the fused and unfused runs of a graph agree.
//!
//! Accuracy, checked against f64 libm over a sweep of all float32 bit patterns (see the tests):
//! `exp`, `expm1` and `log` within 1.5 ulp, `log1p`, `tanh`, `sigmoid` and `softrelu` within
//! 3 ulp (the largest errors seen: 1.1, 1.4, 0.8, 2.3, 2.2, 2.1 and 2.6 ulp).
//! Edges follow C99: `exp` overflows to +inf above 88.72 and underflows through the subnormals
//! to +0; `log(±0) = -inf`, `log(x < 0) = NaN`; `tanh` and `sigmoid` saturate to ±1 / 0, 1; ±0
//! keep their sign where C's functions do; NaN gives NaN.

use std::sync::OnceLock;

/// A kernel over `n` elements: `y[i] = f(x[i])`.
///
/// # Safety
/// `x` must be valid for `n` reads and `y` for `n` writes; `y` may be exactly `x` but must not
/// otherwise overlap it.
pub type Kernel = unsafe fn(*const f32, *mut f32, usize);

/// The instruction sets a kernel is compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// AVX-512F with FMA (16 lanes).
    Avx512,
    /// AVX2 with FMA (8 lanes).
    Avx2,
    /// Baseline x86-64, or another architecture (no FMA).
    Base,
}

/// The widest level this CPU runs (detected once).
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("fma") {
                return Level::Avx512;
            }
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                return Level::Avx2;
            }
        }
        Level::Base
    })
}

/// The functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Exp,
    Expm1,
    Log,
    Log1p,
    Tanh,
    Sigmoid,
    /// `x > 20 ? x : log1p(exp(x))` (MXNet's `softrelu`).
    SoftRelu,
}

impl Func {
    /// Every function (for tests and benchmarks).
    pub const ALL: [Func; 7] = [
        Func::Exp,
        Func::Expm1,
        Func::Log,
        Func::Log1p,
        Func::Tanh,
        Func::Sigmoid,
        Func::SoftRelu,
    ];
}

/// `a * b + c`, fused where the level has FMA.
#[inline(always)]
fn mla<const F: bool>(a: f32, b: f32, c: f32) -> f32 {
    if F { a.mul_add(b, c) } else { a * b + c }
}

/// 1.5 * 2^23: adding it rounds a float of magnitude below 2^22 to an integer.
const ROUND: f32 = 12_582_912.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n * LN2_HI` is exact for |n| < 2^15.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `2^n` for `-126 <= n <= 127`.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) << 23) as u32)
}

/// `x = n ln2 + r` with `n` an integer and |r| <= ln2 / 2 (about): returns `(r, n)`.
#[inline(always)]
fn reduce<const F: bool>(x: f32) -> (f32, i32) {
    let t = mla::<F>(x, LOG2E, ROUND);
    let n = t - ROUND;
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let r = mla::<F>(n, -LN2_HI, x);
    (mla::<F>(n, -LN2_LO, r), ni)
}

/// `e^r - 1` for |r| <= 0.35 (Taylor to degree 8: the remainder is below 1e-9 relative).
#[inline(always)]
fn expm1_poly<const F: bool>(r: f32) -> f32 {
    let mut q = 1.0 / 40_320.0;
    q = mla::<F>(q, r, 1.0 / 5_040.0);
    q = mla::<F>(q, r, 1.0 / 720.0);
    q = mla::<F>(q, r, 1.0 / 120.0);
    q = mla::<F>(q, r, 1.0 / 24.0);
    q = mla::<F>(q, r, 1.0 / 6.0);
    q = mla::<F>(q, r, 0.5);
    mla::<F>(q, r * r, r)
}

/// `e^r` for |r| <= 0.35 (Taylor to degree 7).
#[inline(always)]
fn exp_poly<const F: bool>(r: f32) -> f32 {
    let mut q = 1.0 / 5_040.0;
    q = mla::<F>(q, r, 1.0 / 720.0);
    q = mla::<F>(q, r, 1.0 / 120.0);
    q = mla::<F>(q, r, 1.0 / 24.0);
    q = mla::<F>(q, r, 1.0 / 6.0);
    q = mla::<F>(q, r, 0.5);
    q = mla::<F>(q, r, 1.0);
    mla::<F>(q, r, 1.0)
}

/// `x` limited to `lo..=hi`; NaN stays NaN.
#[inline(always)]
fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x > hi { hi } else { x };
    if x < lo { lo } else { x }
}

#[inline(always)]
fn exp1<const F: bool>(x: f32) -> f32 {
    // beyond these e^x is +inf / +0 in float32; the scaling below still gives them
    let x = clamp(x, -104.0, 88.8);
    let (r, n) = reduce::<F>(x);
    let p = exp_poly::<F>(r);
    // 2^n as two normal factors, so that results near overflow and in the subnormals scale right
    let n1 = n >> 1;
    p * pow2(n1) * pow2(n.wrapping_sub(n1))
}

#[inline(always)]
fn expm1_1<const F: bool>(x: f32) -> f32 {
    let xc = clamp(x, -104.0, 88.8);
    let (r, n) = reduce::<F>(xc);
    let p = expm1_poly::<F>(r);
    // |n| <= 24: 2^n (p + 1) - 1 = 2^n p + (2^n - 1), where 2^n - 1 is exact
    let t = pow2(n.clamp(-24, 24));
    let small = mla::<F>(t, p, t - 1.0);
    let n1 = n >> 1;
    let large = (p + 1.0) * pow2(n1) * pow2(n.wrapping_sub(n1)) - 1.0;
    let y = if n.wrapping_abs() <= 24 { small } else { large };
    // expm1(-0) = -0
    if x == 0.0 { x } else { y }
}

const SQRT2: f32 = std::f32::consts::SQRT_2;

#[inline(always)]
fn log1<const F: bool>(x: f32) -> f32 {
    // subnormals scaled into the normal range first
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits() as i32;
    let e = ((bits >> 23) & 0xff) - 127 - if sub { 23 } else { 0 };
    // x = m 2^e with m in [sqrt(1/2), sqrt(2))
    let m = f32::from_bits(((bits & 0x007f_ffff) | 0x3f80_0000) as u32);
    let big = m > SQRT2;
    let m = if big { m * 0.5 } else { m };
    let e = e + if big { 1 } else { 0 };
    // log(1 + f) = 2 atanh(s), s = f / (2 + f), written as f - f²/2 + s (f²/2 + R(s²))
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let z = s * s;
    let mut q = 2.0 / 11.0;
    q = mla::<F>(q, z, 2.0 / 9.0);
    q = mla::<F>(q, z, 2.0 / 7.0);
    q = mla::<F>(q, z, 2.0 / 5.0);
    q = mla::<F>(q, z, 2.0 / 3.0);
    let r = q * z;
    let hfsq = 0.5 * f * f;
    let ef = e as f32;
    let y = mla::<F>(ef, LN2_HI, f - (hfsq - mla::<F>(s, hfsq + r, ef * LN2_LO)));
    let y = if x > 0.0 {
        y
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else {
        f32::NAN
    };
    if x == f32::INFINITY { x } else { y }
}

#[inline(always)]
fn log1p1<const F: bool>(x: f32) -> f32 {
    // log(u) x / (u - 1) with u = 1 + x rounded: the quotient corrects u's rounding
    let u = 1.0 + x;
    let d = u - 1.0;
    let y = if d == 0.0 { x } else { log1::<F>(u) * (x / d) };
    if x == f32::INFINITY { x } else { y }
}

#[inline(always)]
fn tanh1<const F: bool>(x: f32) -> f32 {
    // tanh |x| = e / (e + 2), e = expm1(2 |x|); float32 tanh is 1 beyond 9.01
    let a = clamp(x.abs(), 0.0, 9.5);
    let e = expm1_1::<F>(a + a);
    (e / (e + 2.0)).copysign(x)
}

#[inline(always)]
fn sigmoid1<const F: bool>(x: f32) -> f32 {
    1.0 / (1.0 + exp1::<F>(-x))
}

/// `y[i] = f(x[i])` on slices, so that the loop vectorises; a macro, so that `f` (an
/// `#[inline(always)]` function) is called directly and inlined into the level's function.
/// Used inside `unsafe` with the [`Kernel`] contract for `x`, `y`, `n`.
macro_rules! each {
    ($x:expr, $y:expr, $n:expr, $f:expr) => {{
        let (x, y, n): (*const f32, *mut f32, usize) = ($x, $y, $n);
        if n == 0 {
        } else if std::ptr::eq(x, y.cast_const()) {
            // SAFETY: `y` is valid for `n` reads and writes and nothing else refers to it.
            let ys = unsafe { std::slice::from_raw_parts_mut(y, n) };
            for v in ys {
                *v = $f(*v);
            }
        } else {
            // SAFETY: valid, non-overlapping buffers of `n` elements (the caller's contract).
            let (xs, ys) = unsafe {
                (
                    std::slice::from_raw_parts(x, n),
                    std::slice::from_raw_parts_mut(y, n),
                )
            };
            for (o, &i) in ys.iter_mut().zip(xs) {
                *o = $f(i);
            }
        }
    }};
}

/// `softrelu` in chunks of three simple loops (`exp`, `log1p`, the select), each of which
/// vectorises (the compiler leaves the whole formula in one loop scalar). The same operations
/// per element as `x > 20 ? x : log1p(exp(x))`.
///
/// # Safety
/// As [`Kernel`].
#[inline(always)]
unsafe fn softrelu_chunks<const F: bool>(x: *const f32, y: *mut f32, n: usize) {
    const CHUNK: usize = 256;
    let mut t = [0f32; CHUNK];
    let mut s = 0;
    while s < n {
        let m = CHUNK.min(n - s);
        let tp = t.as_mut_ptr();
        // `s + m <= n` elements of `x`; `t` holds `m`; then in place on `t`
        // SAFETY: inside the buffer, as above.
        let xs = unsafe { x.add(s) };
        each!(xs, tp, m, exp1::<F>);
        each!(tp, tp, m, log1p1::<F>);
        // SAFETY: `s + m <= n`; `x` is read before `y` is written at each index (exact
        // aliasing allowed).
        let (xs, ys) = unsafe { (x.add(s), y.add(s)) };
        for (i, &v) in t[..m].iter().enumerate() {
            // SAFETY: `i < m`, as above.
            unsafe {
                let xi = *xs.add(i);
                *ys.add(i) = if xi > 20.0 { xi } else { v };
            }
        }
        s += m;
    }
}

/// # Safety
/// As [`Kernel`].
#[inline(always)]
unsafe fn drive<const F: bool>(func: Func, x: *const f32, y: *mut f32, n: usize) {
    // the buffers are the caller's contract (see `each!`)
    match func {
        Func::Exp => each!(x, y, n, exp1::<F>),
        Func::Expm1 => each!(x, y, n, expm1_1::<F>),
        Func::Log => each!(x, y, n, log1::<F>),
        Func::Log1p => each!(x, y, n, log1p1::<F>),
        Func::Tanh => each!(x, y, n, tanh1::<F>),
        Func::Sigmoid => each!(x, y, n, sigmoid1::<F>),
        // SAFETY: forwarded to the caller.
        Func::SoftRelu => unsafe { softrelu_chunks::<F>(x, y, n) },
    }
}

/// # Safety
/// As [`Kernel`]; the CPU must have AVX-512F and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
unsafe fn drive_avx512(func: Func, x: *const f32, y: *mut f32, n: usize) {
    // SAFETY: forwarded.
    unsafe { drive::<true>(func, x, y, n) }
}

/// # Safety
/// As [`Kernel`]; the CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn drive_avx2(func: Func, x: *const f32, y: *mut f32, n: usize) {
    // SAFETY: forwarded.
    unsafe { drive::<true>(func, x, y, n) }
}

/// Runs `func` at `level`.
///
/// # Safety
/// As [`Kernel`]; the CPU must support `level` (a level at most [`level()`]).
pub unsafe fn run_at(level: Level, func: Func, x: *const f32, y: *mut f32, n: usize) {
    // SAFETY (all arms): the buffers are the caller's contract, the level's features too.
    unsafe {
        match level {
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => drive_avx512(func, x, y, n),
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => drive_avx2(func, x, y, n),
            _ => drive::<false>(func, x, y, n),
        }
    }
}

/// Runs `func` at this CPU's level.
///
/// # Safety
/// As [`Kernel`].
#[inline]
pub unsafe fn run(func: Func, x: *const f32, y: *mut f32, n: usize) {
    // SAFETY: `level()` is what this CPU runs; the buffers are the caller's contract.
    unsafe { run_at(level(), func, x, y, n) }
}

/// One value through the buffer kernel (same bits as an element of a buffer).
pub fn one(func: Func, x: f32) -> f32 {
    let mut y = x;
    let p: *mut f32 = &mut y;
    // SAFETY: one valid element, in place.
    unsafe { run(func, p, p, 1) };
    y
}

macro_rules! kernels {
    ($($name:ident => $func:ident;)*) => {
        $(
            #[doc = concat!("The [`Func::", stringify!($func), "`] kernel (a [`Kernel`]).")]
            ///
            /// # Safety
            /// As [`Kernel`].
            pub unsafe fn $name(x: *const f32, y: *mut f32, n: usize) {
                // SAFETY: forwarded to the caller.
                unsafe { run(Func::$func, x, y, n) }
            }
        )*
    };
}

kernels! {
    exp => Exp;
    expm1 => Expm1;
    log => Log;
    log1p => Log1p;
    tanh => Tanh;
    sigmoid => Sigmoid;
    softrelu => SoftRelu;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(func: Func, x: f64) -> f64 {
        match func {
            Func::Exp => x.exp(),
            Func::Expm1 => x.exp_m1(),
            Func::Log => x.ln(),
            Func::Log1p => x.ln_1p(),
            Func::Tanh => x.tanh(),
            Func::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Func::SoftRelu => {
                if x > 20.0 {
                    x
                } else {
                    x.exp().ln_1p()
                }
            }
        }
    }

    /// Distance in float32 ulps between `got` and the exact `want` (subnormal ulps below 2^-126).
    fn ulps(got: f32, want: f64) -> f64 {
        if want.is_nan() || got.is_nan() {
            return if want.is_nan() && got.is_nan() {
                0.0
            } else {
                f64::INFINITY
            };
        }
        let w32 = want as f32;
        if w32.is_infinite() || got.is_infinite() {
            return if got == w32 { 0.0 } else { f64::INFINITY };
        }
        let ulp = |v: f64| {
            let e = v.abs().max(f32::MIN_POSITIVE as f64).log2().floor();
            2f64.powf(e - 23.0)
        };
        (got as f64 - want).abs() / ulp(want)
    }

    fn levels() -> Vec<Level> {
        [Level::Avx512, Level::Avx2, Level::Base]
            .into_iter()
            .filter(|&l| match (l, level()) {
                (Level::Avx512, Level::Avx512) => true,
                (Level::Avx512, _) => false,
                (Level::Avx2, Level::Base) => false,
                _ => true,
            })
            .collect()
    }

    /// Every 1021st float32 bit pattern (both signs, all exponents) plus the edges.
    fn sweep() -> Vec<f32> {
        let mut v: Vec<f32> = (0..=u32::MAX).step_by(1021).map(f32::from_bits).collect();
        v.extend([
            0.0,
            -0.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            1e-45,
            -1e-45,
            f32::MAX,
            f32::MIN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            88.72283,
            88.72284,
            -87.33654,
            -103.97,
            -104.0,
            9.0,
            9.02,
            20.0,
            20.000002,
            -0.9999999,
            1e-8,
            -1e-8,
        ]);
        v
    }

    #[test]
    fn vmath_within_a_few_ulps_of_f64_libm_at_every_level() {
        let xs = sweep();
        let mut ys = vec![0f32; xs.len()];
        for lvl in levels() {
            for func in Func::ALL {
                // SAFETY: two vectors of the same length; the level is supported.
                unsafe { run_at(lvl, func, xs.as_ptr(), ys.as_mut_ptr(), xs.len()) };
                let bound = match func {
                    Func::Exp | Func::Expm1 | Func::Log => 1.5,
                    _ => 3.0,
                };
                let mut worst = (0.0, 0f32);
                for (&x, &y) in xs.iter().zip(&ys) {
                    let want = reference(func, x as f64);
                    let mut e = ulps(y, want);
                    // 1 / (1 + e^-x) is 0 in float32 once e^-x overflows (MXNet's formula too):
                    // below the normal range these two are checked to the smallest normal
                    if matches!(func, Func::Sigmoid | Func::SoftRelu)
                        && want.abs() < f32::MIN_POSITIVE as f64
                        && (y as f64 - want).abs() <= f32::MIN_POSITIVE as f64
                    {
                        e = 0.0;
                    }
                    if e > worst.0 || (e.is_nan() && !worst.0.is_nan()) {
                        worst = (e, x);
                    }
                }
                assert!(
                    worst.0 <= bound,
                    "{func:?} at {lvl:?}: {} ulp at x = {:e} (got {:e}, want {:e})",
                    worst.0,
                    worst.1,
                    one(func, worst.1),
                    reference(func, worst.1 as f64)
                );
            }
        }
    }

    #[test]
    fn vmath_edges_follow_c() {
        use Func::*;
        let pos0 = |v: f32| v == 0.0 && v.is_sign_positive();
        let neg0 = |v: f32| v == 0.0 && v.is_sign_negative();
        assert!(pos0(one(Exp, -200.0)) && pos0(one(Exp, f32::NEG_INFINITY)));
        assert_eq!(one(Exp, 89.0), f32::INFINITY);
        assert_eq!(one(Exp, 0.0), 1.0);
        assert_eq!(one(Exp, 1e-40), 1.0);
        assert!(one(Exp, -100.0) > 0.0 && one(Exp, -100.0) < f32::MIN_POSITIVE);
        assert!(neg0(one(Expm1, -0.0)) && neg0(one(Tanh, -0.0)) && neg0(one(Log1p, -0.0)));
        assert_eq!(one(Expm1, 1e-40), 1e-40);
        assert_eq!(one(Expm1, -50.0), -1.0);
        assert_eq!(one(Expm1, f32::INFINITY), f32::INFINITY);
        assert_eq!(one(Log, 0.0), f32::NEG_INFINITY);
        assert_eq!(one(Log, -0.0), f32::NEG_INFINITY);
        assert!(one(Log, -1.0).is_nan() && one(Log1p, -2.0).is_nan());
        assert_eq!(one(Log, f32::INFINITY), f32::INFINITY);
        assert!(pos0(one(Log, 1.0)));
        assert_eq!(one(Log1p, -1.0), f32::NEG_INFINITY);
        assert_eq!(one(Log1p, 1e-30), 1e-30);
        assert_eq!(one(Tanh, 10.0), 1.0);
        assert_eq!(one(Tanh, -1e30), -1.0);
        assert_eq!(one(Tanh, 1e-40), 1e-40);
        assert_eq!(one(Sigmoid, 200.0), 1.0);
        assert!(pos0(one(Sigmoid, -200.0)));
        assert_eq!(one(Sigmoid, 0.0), 0.5);
        assert_eq!(one(SoftRelu, 30.0), 30.0);
        assert!(pos0(one(SoftRelu, -200.0)));
        for f in Func::ALL {
            assert!(one(f, f32::NAN).is_nan(), "{f:?}");
        }
    }

    #[test]
    fn vmath_gives_the_same_bits_whole_in_pieces_and_in_place() {
        let xs: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 0.037).collect();
        for func in Func::ALL {
            let mut whole = vec![0f32; xs.len()];
            // SAFETY: vectors of equal length.
            unsafe { run(func, xs.as_ptr(), whole.as_mut_ptr(), xs.len()) };
            let mut pieces = vec![0f32; xs.len()];
            let mut s = 0;
            for len in [1, 3, 7, 16, 17, 33, 100].iter().cycle() {
                if s >= xs.len() {
                    break;
                }
                let n = (*len).min(xs.len() - s);
                // SAFETY: `s + n <= len` of both vectors.
                unsafe { run(func, xs.as_ptr().add(s), pieces.as_mut_ptr().add(s), n) };
                s += n;
            }
            let mut inplace = xs.clone();
            let p = inplace.as_mut_ptr();
            // SAFETY: exactly aliased, which kernels allow.
            unsafe { run(func, p, p, xs.len()) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&whole), bits(&pieces), "{func:?}");
            assert_eq!(bits(&whole), bits(&inplace), "{func:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Softmax rows: float32 lines with float64 sums (as MXNet's float32 softmax accumulates), the
// exponentials through the `exp` kernel above, the other passes compiled for AVX-512 where the
// CPU has it.

/// What a softmax row computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftRow {
    /// `exp(v - max) / Σ exp(v - max)`.
    Softmax,
    /// `v - max - log Σ exp(v - max)`.
    LogSoftmax,
}

#[inline(always)]
fn row_max(x: &[f32], sign: f32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            let v = v * sign;
            *a = if v > *a { v } else { *a };
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        let v = v * sign;
        *a = if v > *a { v } else { *a };
    }
    acc.iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// `Σ a[i]·b[i]` (`b` = None: `Σ a[i]`) in float64, 8 lanes.
#[inline(always)]
fn row_sum(a: &[f32], b: Option<&[f32]>) -> f64 {
    let mut acc = [0f64; 8];
    match b {
        Some(b) => {
            let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
            let (ta, tb) = (ca.remainder(), cb.remainder());
            for (x, y) in ca.zip(cb) {
                for ((s, &u), &v) in acc.iter_mut().zip(x).zip(y) {
                    *s += u as f64 * v as f64;
                }
            }
            for ((s, &u), &v) in acc.iter_mut().zip(ta).zip(tb) {
                *s += u as f64 * v as f64;
            }
        }
        None => {
            let ca = a.chunks_exact(8);
            let ta = ca.remainder();
            for x in ca {
                for (s, &u) in acc.iter_mut().zip(x) {
                    *s += u as f64;
                }
            }
            for (s, &u) in acc.iter_mut().zip(ta) {
                *s += u as f64;
            }
        }
    }
    acc.iter().sum()
}

#[inline(always)]
fn softmax_row_body(kind: SoftRow, x: &[f32], y: &mut [f32], sign: f32, temp: f32, scratch: &mut Vec<f32>) {
    let m = row_max(x, sign);
    if temp == 1.0 {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = v * sign - m);
    } else {
        y.iter_mut().zip(x).for_each(|(o, &v)| *o = (v * sign - m) / temp);
    }
    match kind {
        SoftRow::Softmax => {
            // SAFETY: `y` holds `y.len()` elements, processed in place.
            unsafe { exp(y.as_ptr(), y.as_mut_ptr(), y.len()) };
            let r = 1.0 / row_sum(y, None);
            y.iter_mut().for_each(|o| *o = (*o as f64 * r) as f32);
        }
        SoftRow::LogSoftmax => {
            scratch.clear();
            scratch.resize(y.len(), 0.0);
            // SAFETY: `y` and `scratch` hold `y.len()` elements and do not overlap.
            unsafe { exp(y.as_ptr(), scratch.as_mut_ptr(), y.len()) };
            let l = row_sum(scratch, None).ln();
            y.iter_mut().for_each(|o| *o = (*o as f64 - l) as f32);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
unsafe fn softmax_row_avx512(kind: SoftRow, x: &[f32], y: &mut [f32], sign: f32, temp: f32, scratch: &mut Vec<f32>) {
    softmax_row_body(kind, x, y, sign, temp, scratch)
}

/// One softmax row: `y = softmax(sign·x / temp)` (or its log), `sign` -1 for softmin; `scratch`
/// is a work buffer. `x` and `y` have the same length.
pub fn softmax_row(kind: SoftRow, x: &[f32], y: &mut [f32], sign: f32, temp: f32, scratch: &mut Vec<f32>) {
    assert_eq!(x.len(), y.len());
    if x.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if level() == Level::Avx512 {
        // SAFETY: the CPU has AVX-512 (the level says so).
        return unsafe { softmax_row_avx512(kind, x, y, sign, temp, scratch) };
    }
    softmax_row_body(kind, x, y, sign, temp, scratch)
}

#[inline(always)]
fn softmax_grad_row_body(kind: SoftRow, dy: &[f32], y: &[f32], out: &mut [f32], scale: f64) {
    match kind {
        SoftRow::Softmax => {
            let s = row_sum(dy, Some(y));
            for ((o, &g), &v) in out.iter_mut().zip(dy).zip(y) {
                *o = (v as f64 * (g as f64 - s) * scale) as f32;
            }
        }
        SoftRow::LogSoftmax => {
            let s = row_sum(dy, None);
            // SAFETY: `y` and `out` hold `out.len()` elements and do not overlap.
            unsafe { exp(y.as_ptr(), out.as_mut_ptr(), out.len()) };
            for (o, &g) in out.iter_mut().zip(dy) {
                *o = ((g as f64 - *o as f64 * s) * scale) as f32;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
unsafe fn softmax_grad_row_avx512(kind: SoftRow, dy: &[f32], y: &[f32], out: &mut [f32], scale: f64) {
    softmax_grad_row_body(kind, dy, y, out, scale)
}

/// One softmax row's gradient from the head gradient `dy` and the forward's output `y`:
/// softmax: `scale · y (dy - Σ dy·y)`; log_softmax: `scale · (dy - e^y Σ dy)` (`scale` is
/// ±1/temperature).
pub fn softmax_grad_row(kind: SoftRow, dy: &[f32], y: &[f32], out: &mut [f32], scale: f64) {
    assert!(dy.len() == out.len() && y.len() == out.len());
    if out.is_empty() {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if level() == Level::Avx512 {
        // SAFETY: the CPU has AVX-512 (the level says so).
        return unsafe { softmax_grad_row_avx512(kind, dy, y, out, scale) };
    }
    softmax_grad_row_body(kind, dy, y, out, scale)
}
