//! One random number stream: ChaCha8 (the `rand_chacha` crate) keyed by the seed, the device,
//! the resource and its copy, with the ChaCha stream number selecting the stream within it.
//!
//! Every value is derived from the generator's output words in a fixed order, so the numbers
//! depend only on the seed, the stream and the sequence of calls: not on the machine, the engine
//! or the number of threads.

use crate::context::Context;
use crate::error::{Error, Result};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

/// Identifies one stream: everything its key is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId {
    /// The user's seed (`MXRandomSeed`'s `int`, taken as its 32 bits).
    pub seed: u32,
    /// The device the resource belongs to.
    pub ctx: Context,
    /// The resource type's code (`ResourceRequest::code`).
    pub kind: u32,
    /// Which copy of the resource (round-robin copies of kParallelRandom).
    pub copy: u32,
    /// The stream within the copy (kParallelRandom's per-worker streams; 0 for kRandom).
    pub stream: u64,
}

impl StreamId {
    /// The 256-bit ChaCha key: a domain tag, then the fields in little-endian order.
    fn key(&self) -> [u8; 32] {
        let mut k = [0u8; 32];
        k[..8].copy_from_slice(b"mxrt-rng");
        k[8..12].copy_from_slice(&self.seed.to_le_bytes());
        k[12..16].copy_from_slice(&self.ctx.dev_type.code().to_le_bytes());
        k[16..20].copy_from_slice(&self.ctx.dev_id.to_le_bytes());
        k[20..24].copy_from_slice(&self.kind.to_le_bytes());
        k[24..28].copy_from_slice(&self.copy.to_le_bytes());
        k
    }
}

/// Floating-point element types the distributions can fill.
pub trait RandomReal: Copy + PartialOrd + Send + Sync + 'static {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    /// The largest value below `self`.
    fn below(self) -> Self;
}

impl RandomReal for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn below(self) -> Self {
        self.next_down()
    }
}

impl RandomReal for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn below(self) -> Self {
        self.next_down()
    }
}

/// A deterministic random number generator (one stream).
#[derive(Clone, Debug)]
pub struct RandomGenerator {
    id: StreamId,
    rng: ChaCha8Rng,
}

impl RandomGenerator {
    /// The generator of stream `id`, at its start.
    pub fn new(id: StreamId) -> Self {
        let mut rng = ChaCha8Rng::from_seed(id.key());
        rng.set_stream(id.stream);
        RandomGenerator { id, rng }
    }

    /// The stream this generator produces.
    pub fn stream_id(&self) -> StreamId {
        self.id
    }

    /// Restarts the generator on stream `id`.
    pub fn reseed(&mut self, id: StreamId) {
        *self = RandomGenerator::new(id);
    }

    pub fn next_u32(&mut self) -> u32 {
        self.rng.next_u32()
    }

    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A double uniformly distributed in [0, 1) with 53 random bits.
    pub fn next_unit(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Fills `out` with raw 32-bit words.
    pub fn fill_bits(&mut self, out: &mut [u32]) {
        for x in out {
            *x = self.rng.next_u32();
        }
    }

    /// Fills `out` with values uniformly distributed in `[low, high)` (all `low` when they are
    /// equal). Errors: bounds that are not finite or `low > high`.
    pub fn uniform<T: RandomReal>(&mut self, out: &mut [T], low: T, high: T) -> Result<()> {
        check_uniform(low, high)?;
        let (lo, hi) = (low.to_f64(), high.to_f64());
        let span = hi - lo;
        for x in out {
            let v = T::from_f64(lo + span * self.next_unit());
            // rounding to T may land on `high`, which the interval excludes
            *x = if v >= high && low < high {
                high.below()
            } else {
                v
            };
        }
        Ok(())
    }

    /// Fills `out` with normally distributed values (Box–Muller on pairs of uniforms; an odd
    /// count drops the last pair's second value). Errors: `mean` not finite, `std` negative or
    /// not finite.
    pub fn normal<T: RandomReal>(&mut self, out: &mut [T], mean: T, std: T) -> Result<()> {
        check_normal(mean, std)?;
        let (m, s) = (mean.to_f64(), std.to_f64());
        for pair in out.chunks_mut(2) {
            // 1 - u lies in (0, 1], so the logarithm is finite
            let r = (-2.0 * (1.0 - self.next_unit()).ln()).sqrt();
            let theta = std::f64::consts::TAU * self.next_unit();
            let (sin, cos) = theta.sin_cos();
            pair[0] = T::from_f64(m + s * r * cos);
            if let Some(second) = pair.get_mut(1) {
                *second = T::from_f64(m + s * r * sin);
            }
        }
        Ok(())
    }
}

pub(crate) fn check_uniform<T: RandomReal>(low: T, high: T) -> Result<()> {
    let (lo, hi) = (low.to_f64(), high.to_f64());
    if !lo.is_finite() || !hi.is_finite() || lo > hi {
        return Err(Error::invalid(format!(
            "uniform needs finite bounds with low <= high, got low={lo} high={hi}"
        )));
    }
    Ok(())
}

pub(crate) fn check_normal<T: RandomReal>(mean: T, std: T) -> Result<()> {
    let (m, s) = (mean.to_f64(), std.to_f64());
    if !m.is_finite() || !s.is_finite() || s < 0.0 {
        return Err(Error::invalid(format!(
            "normal needs a finite mean and a finite std >= 0, got mean={m} std={s}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seed: u32, stream: u64) -> StreamId {
        StreamId {
            seed,
            ctx: Context::cpu(0),
            kind: 0,
            copy: 0,
            stream,
        }
    }

    #[test]
    fn same_id_same_numbers_other_ids_differ() {
        let mut a = RandomGenerator::new(id(7, 0));
        let mut b = RandomGenerator::new(id(7, 0));
        let (mut x, mut y) = ([0u32; 64], [0u32; 64]);
        a.fill_bits(&mut x);
        b.fill_bits(&mut y);
        assert_eq!(x, y);
        for other in [
            id(8, 0),
            id(7, 1),
            StreamId {
                copy: 1,
                ..id(7, 0)
            },
            StreamId {
                ctx: Context::gpu(0),
                ..id(7, 0)
            },
        ] {
            let mut c = RandomGenerator::new(other);
            let mut z = [0u32; 64];
            c.fill_bits(&mut z);
            assert_ne!(x, z, "{other:?}");
        }
        // reseeding restarts the stream
        a.reseed(id(7, 0));
        a.fill_bits(&mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn uniform_range_and_moments() {
        let mut g = RandomGenerator::new(id(1, 0));
        // (smaller under Miri, which interprets every step)
        let (n, tol) = if cfg!(miri) { (5_000, 0.1) } else { (100_000, 0.03) };
        let mut v = vec![0f32; n];
        g.uniform(&mut v, -2.0, 3.0).unwrap();
        assert!(v.iter().all(|&x| (-2.0..3.0).contains(&x)));
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!((mean - 0.5).abs() < tol, "mean {mean}");
        // a tiny interval: rounding never reaches `high`
        let hi = 1.0f32.next_up();
        g.uniform(&mut v, 1.0, hi).unwrap();
        assert!(v.iter().all(|&x| x == 1.0));
        g.uniform(&mut v[..4], 5.0, 5.0).unwrap();
        assert_eq!(&v[..4], &[5.0; 4]);
        let e = g.uniform(&mut v, 1.0, 0.0).unwrap_err();
        assert!(e.message().contains("low <= high"), "{e}");
        assert!(g.uniform(&mut v, f32::NAN, 1.0).is_err());
    }

    #[test]
    fn normal_moments() {
        let mut g = RandomGenerator::new(id(2, 0));
        let (len, tol) = if cfg!(miri) { (5_001, 0.15) } else { (100_001, 0.03) };
        let mut v = vec![0f64; len];
        g.normal(&mut v, 1.5, 2.0).unwrap();
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        assert!((mean - 1.5).abs() < tol, "mean {mean}");
        assert!((var.sqrt() - 2.0).abs() < tol, "std {}", var.sqrt());
        assert!(g.normal(&mut v, 0.0, -1.0).is_err());
    }
}
