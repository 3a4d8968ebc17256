//! The intra-op thread pool: large kernels split their index range over it, as MXNet's kernels
//! do with OpenMP. Its size is `MXNET_OMP_MAX_THREADS`, else `OMP_NUM_THREADS`, else the number
//! of cores; small ranges run on the calling worker with no hand-off.
//!
//! rayon provides the pool (work stealing, a caller that helps while it waits); the GEMM kernels
//! run on the same pool, so a matrix product and elementwise work never oversubscribe the cores
//! beyond one pool plus the engine's workers.

use std::sync::OnceLock;

/// Below this many elements of work a kernel runs on one thread: a hand-off costs a few
/// microseconds, which is about what 32 K elements of simple arithmetic take.
pub const MIN_PARALLEL_ELEMS: usize = 1 << 15;

fn env_threads(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n > 0)
}

/// Threads an op may use.
pub fn max_threads() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        env_threads("MXNET_OMP_MAX_THREADS")
            .or_else(|| env_threads("OMP_NUM_THREADS"))
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            })
    })
}

/// The pool, made on first use.
pub fn pool() -> &'static rayon::ThreadPool {
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(max_threads())
            .thread_name(|i| format!("mxrt-omp-{i}"))
            .build()
            .expect("the intra-op thread pool starts")
    })
}

/// Calls `f(start, end)` over disjoint ranges covering `0..n`, in parallel when `n` elements of
/// work are worth it (`cost` scales the threshold: 1 for a simple map, more for costly ones).
pub fn for_ranges(n: usize, cost: usize, f: impl Fn(usize, usize) + Sync) {
    let threads = max_threads();
    if threads <= 1 || n.saturating_mul(cost.max(1)) < MIN_PARALLEL_ELEMS {
        f(0, n);
        return;
    }
    let parts = threads.min(n.div_ceil(1024).max(1));
    let step = n.div_ceil(parts);
    // the calling (engine worker) thread computes the first range itself instead of waiting
    // for a pool thread to pick the whole scope up
    pool().in_place_scope(|s| {
        for p in 1..parts {
            let (start, end) = (p * step, ((p + 1) * step).min(n));
            if start < end {
                let f = &f;
                s.spawn(move |_| f(start, end));
            }
        }
        f(0, step.min(n));
    });
}

/// Calls `f(start, chunk)` over disjoint chunks of `out` (`start` is the chunk's first index),
/// in parallel when large enough.
pub fn for_chunks_mut<T: Send>(out: &mut [T], cost: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    let n = out.len();
    let threads = max_threads();
    if threads <= 1 || n.saturating_mul(cost.max(1)) < MIN_PARALLEL_ELEMS {
        f(0, out);
        return;
    }
    let step = n.div_ceil(threads.min(n.div_ceil(1024).max(1)));
    pool().install(|| {
        out.par_chunks_mut(step)
            .enumerate()
            .for_each(|(i, c)| f(i * step, c))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn ranges_cover_every_index_once() {
        for n in [0, 1, 1000, MIN_PARALLEL_ELEMS + 7, 1 << 20] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            for_ranges(n, 1, |a, b| {
                for h in &hits[a..b] {
                    h.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(
                hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                "n = {n}"
            );
        }
    }
}
