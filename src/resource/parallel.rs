//! kParallelRandom: a fixed set of independent streams that parallel code shares out among its
//! workers.
//!
//! The fill functions cut the output into one contiguous chunk per stream (chunk `i` always comes
//! from stream `i`) and hand chunks to threads of mxrt's pool ([`crate::parallel`]), so the numbers
//! are the same whatever the thread count.

use super::random::{RandomGenerator, RandomReal, StreamId, check_normal, check_uniform};
use crate::error::Result;

/// Below this many elements per thread, filling stays on the calling thread (a few under Miri,
/// so that its small test arrays still go parallel).
const MIN_PER_THREAD: usize = if cfg!(miri) { 64 } else { 1 << 14 };

/// The streams of one kParallelRandom copy.
#[derive(Clone, Debug)]
pub struct ParallelRandom {
    streams: Vec<RandomGenerator>,
}

impl ParallelRandom {
    /// `count` streams: stream `i` is `base` with `stream = i`.
    pub fn new(base: StreamId, count: usize) -> Self {
        let streams = (0..count.max(1) as u64)
            .map(|i| RandomGenerator::new(StreamId { stream: i, ..base }))
            .collect();
        ParallelRandom { streams }
    }

    /// Restarts every stream from `base` (stream numbers as in [`new`](Self::new)).
    pub fn reseed(&mut self, base: StreamId) {
        for (i, g) in self.streams.iter_mut().enumerate() {
            g.reseed(StreamId {
                stream: i as u64,
                ..base
            });
        }
    }

    pub fn num_streams(&self) -> usize {
        self.streams.len()
    }

    /// The streams, for code that distributes them over its own workers (one stream per worker,
    /// or per fixed piece of work, keeps results independent of the thread count).
    pub fn streams_mut(&mut self) -> &mut [RandomGenerator] {
        &mut self.streams
    }

    /// Applies `f` to each (stream, chunk) pair on up to `threads` threads (the caller's and the
    /// pool's).
    fn partitioned<T, F>(&mut self, out: &mut [T], threads: usize, f: F)
    where
        T: Send,
        F: Fn(&mut RandomGenerator, &mut [T]) + Sync,
    {
        if out.is_empty() {
            return;
        }
        let chunk = out.len().div_ceil(self.streams.len());
        let mut work: Vec<(&mut RandomGenerator, &mut [T])> =
            self.streams.iter_mut().zip(out.chunks_mut(chunk)).collect();
        let threads = threads
            .min(work.len())
            .min(work.len() * chunk / MIN_PER_THREAD)
            .max(1);
        crate::parallel::for_each_mut(&mut work, threads, |_, (g, c)| f(g, c));
    }

    /// Raw 32-bit words.
    pub fn fill_bits(&mut self, out: &mut [u32], threads: usize) {
        self.partitioned(out, threads, |g, c| g.fill_bits(c));
    }

    /// Uniform values in `[low, high)`; see [`RandomGenerator::uniform`].
    pub fn uniform<T: RandomReal>(
        &mut self,
        out: &mut [T],
        low: T,
        high: T,
        threads: usize,
    ) -> Result<()> {
        check_uniform(low, high)?;
        self.partitioned(out, threads, |g, c| {
            g.uniform(c, low, high).expect("bounds checked")
        });
        Ok(())
    }

    /// Normal values; see [`RandomGenerator::normal`].
    pub fn normal<T: RandomReal>(
        &mut self,
        out: &mut [T],
        mean: T,
        std: T,
        threads: usize,
    ) -> Result<()> {
        check_normal(mean, std)?;
        self.partitioned(out, threads, |g, c| {
            g.normal(c, mean, std).expect("parameters checked")
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;

    fn base() -> StreamId {
        StreamId {
            seed: 3,
            ctx: Context::cpu(0),
            kind: 2,
            copy: 0,
            stream: 0,
        }
    }

    #[test]
    fn same_numbers_for_any_thread_count() {
        let n = if cfg!(miri) { 2_003 } else { 200_003 };
        let mut reference = vec![0f32; n];
        ParallelRandom::new(base(), 16)
            .uniform(&mut reference, 0.0, 1.0, 1)
            .unwrap();
        for &threads in if cfg!(miri) { &[3][..] } else { &[2, 3, 4, 8][..] } {
            let mut v = vec![0f32; n];
            ParallelRandom::new(base(), 16)
                .uniform(&mut v, 0.0, 1.0, threads)
                .unwrap();
            assert_eq!(v, reference, "{threads} threads");
        }
        // chunk i comes from stream i
        let chunk = n.div_ceil(16);
        let mut g = RandomGenerator::new(StreamId {
            stream: 5,
            ..base()
        });
        let mut expect = vec![0f32; chunk];
        g.uniform(&mut expect, 0.0, 1.0).unwrap();
        assert_eq!(&reference[5 * chunk..6 * chunk], &expect[..]);
        // and the streams are not copies of each other
        assert_ne!(&reference[..chunk], &reference[chunk..2 * chunk]);
    }

    #[test]
    fn reseed_restarts_all_streams() {
        let mut p = ParallelRandom::new(base(), 4);
        let mut a = vec![0u32; 1000];
        p.fill_bits(&mut a, 2);
        let mut b = vec![0u32; 1000];
        p.fill_bits(&mut b, 2);
        assert_ne!(a, b);
        p.reseed(base());
        p.fill_bits(&mut b, 1);
        assert_eq!(a, b);
        assert_eq!(p.num_streams(), 4);
        assert!(p.normal(&mut [0f32; 4], 0.0, f32::INFINITY, 1).is_err());
    }
}
