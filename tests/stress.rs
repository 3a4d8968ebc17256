//! Stress and soak.
//!
//! * the random engine workload (each op reads 1-8 variables and writes one; values checked
//!   against a serial run) on the three engine types with 1, 2 and 4 workers;
//! * several threads pushing at once onto the same engine, each with its own variables plus
//!   shared ones (read by all, and a commutative counter written by all);
//! * a soak of NDArray create/copy/slice/free plus KVStore push/pull from 4 threads through the C
//!   API: every result verified, handles and storage back to where they started, resident memory
//!   flat between the warm-up and the end.
//!
//! Sizes: `MXRT_STRESS_OPS` ops per engine config (default 200 000; `make soak`: 1 000 000),
//! `MXRT_SOAK_SECS` seconds of soak (default 8; `make soak`: 60).

use mxrt::Context;
use mxrt::capi::kvstore::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::ndarray_sparse::*;
use mxrt::capi::storage::*;
use mxrt::capi::types::*;
use mxrt::engine::{Completion, Engine, EngineConfig, EngineKind, PushArgs, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[macro_use]
mod common;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn configs() -> Vec<(EngineKind, usize)> {
    let mut v = vec![(EngineKind::Naive, 1)];
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        for n in [1, 2, 4] {
            v.push((kind, n));
        }
    }
    v
}

fn mix(i: usize, inputs: impl Iterator<Item = u64>) -> u64 {
    inputs.fold(i as u64 ^ 0xA5A5, |acc, x| {
        acc.rotate_left(5)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(x)
    })
}

struct Expr {
    reads: Vec<usize>,
    write: usize,
    is_async: bool,
}

fn exprs(seed: u64, n: usize, n_vars: usize) -> Vec<Expr> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| Expr {
            reads: (0..rng.gen_range(1..9))
                .map(|_| rng.gen_range(0..n_vars))
                .collect(),
            write: rng.gen_range(0..n_vars),
            is_async: rng.gen_bool(0.2),
        })
        .collect()
}

/// Pushes `ex` (op `i` computes `vals[write] = mix(i + base, vals[reads])`) onto `vars`.
fn push_all(engine: &Engine, ex: &[Expr], base: usize, vars: &[Var], vals: &Arc<Vec<AtomicU64>>) {
    for (i, e) in ex.iter().enumerate() {
        let reads: Vec<Var> = e.reads.iter().map(|&r| vars[r].clone()).collect();
        let writes = [vars[e.write].clone()];
        let args = PushArgs::new(Context::cpu(0)).reads(&reads).writes(&writes);
        let (vals, idx, out, id) = (vals.clone(), e.reads.clone(), e.write, i + base);
        let body = move || {
            let v = mix(id, idx.iter().map(|&r| vals[r].load(Ordering::Relaxed)));
            vals[out].store(v, Ordering::Relaxed);
        };
        if e.is_async {
            engine
                .push_async_fn(args, move |_, done: Completion| {
                    body();
                    done.done();
                })
                .unwrap();
        } else {
            engine
                .push_fn(args, move |_| {
                    body();
                    Ok(())
                })
                .unwrap();
        }
    }
}

fn serial(ex: &[Expr], base: usize, init: &[u64]) -> Vec<u64> {
    let mut v = init.to_vec();
    for (i, e) in ex.iter().enumerate() {
        v[e.write] = mix(i + base, e.reads.iter().map(|&r| v[r]));
    }
    v
}

#[test]
fn engine_workload_at_scale_on_every_engine() {
    let n_ops = env_usize("MXRT_STRESS_OPS", 200_000);
    let n_vars = 64;
    let ex = exprs(2024, n_ops, n_vars);
    let init: Vec<u64> = (0..n_vars as u64).collect();
    let want = serial(&ex, 0, &init);
    for (kind, workers) in configs() {
        let engine = Engine::new(EngineConfig::with_workers(kind, workers));
        let vars: Vec<Var> = (0..n_vars).map(|_| engine.new_variable()).collect();
        let vals: Arc<Vec<AtomicU64>> = Arc::new(init.iter().map(|&x| AtomicU64::new(x)).collect());
        let t = Instant::now();
        push_all(&engine, &ex, 0, &vars, &vals);
        engine.wait_for_all().unwrap();
        let dt = t.elapsed();
        let got: Vec<u64> = vals.iter().map(|v| v.load(Ordering::Relaxed)).collect();
        assert_eq!(
            got, want,
            "{kind:?} x{workers}: values differ from the serial run"
        );
        let writes: u64 = vars.iter().map(Var::version).sum();
        assert_eq!(writes, n_ops as u64, "{kind:?} x{workers}: write count");
        assert_eq!(engine.pending_ops(), 0);
        eprintln!(
            "{kind:?} x{workers}: {n_ops} ops in {dt:.2?} ({:.0} ns/op)",
            dt.as_nanos() as f64 / n_ops as f64
        );
    }
}

#[test]
fn several_threads_pushing_at_once() {
    let n_ops = env_usize("MXRT_STRESS_OPS", 200_000) / 8;
    let threads = 4;
    let own_vars = 16;
    for (kind, workers) in configs() {
        let engine = Arc::new(Engine::new(EngineConfig::with_workers(kind, workers)));
        // shared: read-only inputs every thread reads, and a counter every thread adds to
        let shared: Vec<Var> = (0..4).map(|_| engine.new_variable()).collect();
        let counter = engine.new_variable();
        let count = Arc::new(AtomicU64::new(0));
        let barrier = Arc::new(Barrier::new(threads));
        let t0 = Instant::now();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (engine, shared, counter, count, barrier) = (
                    engine.clone(),
                    shared.clone(),
                    counter.clone(),
                    count.clone(),
                    barrier.clone(),
                );
                std::thread::spawn(move || {
                    // own vars 0..16, then the 4 shared inputs at 16..20 (each thread keeps its
                    // own copy of their values: nobody writes them)
                    let mut vars: Vec<Var> = (0..own_vars).map(|_| engine.new_variable()).collect();
                    vars.extend(shared.iter().cloned());
                    let mut ex = exprs(77 + t as u64, n_ops, own_vars + 4);
                    for e in &mut ex {
                        e.write %= own_vars; // never write the shared inputs
                    }
                    let init: Vec<u64> = (0..own_vars as u64)
                        .map(|i| i + 100 * t as u64)
                        .chain((0..4).map(|i| 1000 + i))
                        .collect();
                    let vals: Arc<Vec<AtomicU64>> =
                        Arc::new(init.iter().map(|&x| AtomicU64::new(x)).collect());
                    barrier.wait();
                    for (k, chunk) in ex.chunks(1000).enumerate() {
                        push_all(&engine, chunk, k * 1000, &vars, &vals);
                        // a commutative update of a variable every thread writes
                        let c = count.clone();
                        let add = (t * 1_000_000 + k) as u64;
                        engine
                            .push_fn(
                                PushArgs::new(Context::cpu(0))
                                    .writes(std::slice::from_ref(&counter)),
                                move |_| {
                                    c.fetch_add(add, Ordering::Relaxed);
                                    Ok(())
                                },
                            )
                            .unwrap();
                    }
                    for v in &vars[..own_vars] {
                        engine.wait_for_var(v).unwrap();
                    }
                    let got: Vec<u64> = vals.iter().map(|v| v.load(Ordering::Relaxed)).collect();
                    assert_eq!(got, serial(&ex, 0, &init), "thread {t}: values");
                    ex.len().div_ceil(1000)
                })
            })
            .collect();
        let chunks: Vec<usize> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        engine.wait_for_all().unwrap();
        let want: u64 = (0..threads)
            .map(|t| {
                (0..chunks[t])
                    .map(|k| (t * 1_000_000 + k) as u64)
                    .sum::<u64>()
            })
            .sum();
        assert_eq!(
            count.load(Ordering::Relaxed),
            want,
            "{kind:?} x{workers}: counter"
        );
        assert_eq!(counter.version(), chunks.iter().sum::<usize>() as u64);
        assert!(shared.iter().all(|v| v.version() == 0));
        eprintln!(
            "{kind:?} x{workers}: {threads} threads x {n_ops} ops in {:.2?}",
            t0.elapsed()
        );
    }
}

/// Resident set size in bytes (Linux).
fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64
}

/// Storage statistics of cpu (the arrays) plus cpu_pinned (where the store keeps its values).
fn stats() -> MXStorageStats {
    let (mut s, mut p) = (MXStorageStats::default(), MXStorageStats::default());
    ok!(MXStorageGetStats(1, 0, &mut s));
    ok!(MXStorageGetStats(3, 0, &mut p));
    MXStorageStats {
        bytes_in_use: s.bytes_in_use + p.bytes_in_use,
        allocs: s.allocs + p.allocs,
        hits: s.hits + p.hits,
        ..s
    }
}

fn create(shape: &[i64]) -> NDArrayHandle {
    let mut h = null_mut();
    ok!(MXNDArrayCreateEx64(
        shape.as_ptr(),
        shape.len() as c_int,
        1,
        0,
        0,
        0,
        &mut h
    ));
    h
}

fn read(h: NDArrayHandle, n: usize) -> Vec<f32> {
    let mut v = vec![f32::NAN; n];
    ok!(MXNDArraySyncCopyToCPU(h, v.as_mut_ptr().cast(), n));
    v
}

/// One soak iteration of thread `t`: arrays created, filled, copied, sliced, pushed to and pulled
/// from the store under the thread's own keys, checked, and freed.
fn soak_step(t: usize, iter: usize, k: usize, kv: KVStoreHandle, key_shapes: &[i64]) {
    let key = (t * 100 + k) as c_int;
    let n = key_shapes[k];
    let rows = 4;
    let shape = [rows, n / rows];
    let a = create(&shape);
    let b = create(&shape);
    let base = (iter % 1000) as f32;
    let va: Vec<f32> = (0..n).map(|i| base + (i % 97) as f32).collect();
    ok!(MXNDArraySyncCopyFromCPU(a, va.as_ptr().cast(), n as usize));
    ok!(MXNDArraySyncCopyFromNDArray(b, a, -1));
    // a view of the copy's second row, overwritten through the view
    let mut row = null_mut();
    ok!(MXNDArrayAt(b, 1, &mut row));
    let per_row = (n / rows) as usize;
    let ones = vec![1f32; per_row];
    ok!(MXNDArraySyncCopyFromCPU(row, ones.as_ptr().cast(), per_row));
    // push a + b (summed by the store), pull it back into a fresh array
    let out = create(&shape);
    ok!(MXKVStorePush(
        kv,
        2,
        [key, key].as_ptr(),
        [a, b].as_mut_ptr(),
        0
    ));
    ok!(MXKVStorePull(kv, 1, [key].as_ptr(), [out].as_mut_ptr(), 0));
    let got = read(out, n as usize);
    for (i, &g) in got.iter().enumerate() {
        let b_i = if i / per_row == 1 { 1.0 } else { va[i] };
        assert_eq!(g, va[i] + b_i, "thread {t} iter {iter}: element {i}");
    }
    for h in [row, a, b, out] {
        ok!(MXNDArrayFree(h));
    }
}

#[test]
fn soak_ndarray_and_kvstore_from_4_threads() {
    let secs = env_usize("MXRT_SOAK_SECS", 8) as u64;
    let threads = 4;
    let key_shapes: Vec<i64> = vec![64, 1024, 4096, 65536];
    let mut kv = null_mut();
    ok!(MXKVStoreCreate(c"local".as_ptr(), &mut kv));
    for t in 0..threads {
        for (k, &n) in key_shapes.iter().enumerate() {
            let z = create(&[4, n / 4]);
            ok!(MXNDArraySyncCopyFromCPU(
                z,
                vec![0f32; n as usize].as_ptr().cast(),
                n as usize
            ));
            ok!(MXKVStoreInit(
                kv,
                1,
                [(t * 100 + k) as c_int].as_ptr(),
                [z].as_mut_ptr()
            ));
            ok!(MXNDArrayFree(z));
        }
    }
    // one push/pull per key first: the store allocates its merge buffers on a key's first push
    for t in 0..threads {
        for k in 0..key_shapes.len() {
            soak_step(t, 0, k, kv, &key_shapes);
        }
    }
    ok!(MXNDArrayWaitAll());
    let before = stats();
    let kv_addr = kv as usize;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let warm_at = start + Duration::from_secs(secs) / 4;
    let warm_rss = Arc::new(AtomicU64::new(0));
    let peak_rss = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (warm_rss, peak_rss) = (warm_rss.clone(), peak_rss.clone());
        std::thread::spawn(move || {
            while Instant::now() < deadline {
                let r = rss();
                peak_rss.fetch_max(r, Ordering::Relaxed);
                if Instant::now() >= warm_at && warm_rss.load(Ordering::Relaxed) == 0 {
                    warm_rss.store(r, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let shapes = key_shapes.clone();
            std::thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(t as u64);
                let mut iters = 0;
                while Instant::now() < deadline {
                    let k = rng.gen_range(0..shapes.len());
                    soak_step(t, iters, k, kv_addr as KVStoreHandle, &shapes);
                    iters += 1;
                }
                iters
            })
        })
        .collect();
    let iters: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    sampler.join().unwrap();
    ok!(MXNDArrayWaitAll());
    let end_rss = rss();
    let after = stats();
    let warm = warm_rss.load(Ordering::Relaxed).max(1);
    eprintln!(
        "soak: {threads} threads, {secs} s, {iters} iterations; RSS warm {} MiB, end {} MiB, peak {} MiB; \
         storage in use {} -> {} bytes, {} allocs ({} from the cache)",
        warm >> 20,
        end_rss >> 20,
        peak_rss.load(Ordering::Relaxed) >> 20,
        before.bytes_in_use,
        after.bytes_in_use,
        after.allocs - before.allocs,
        after.hits - before.hits
    );
    assert!(iters > threads, "the soak made no progress");
    // every array made during the soak was freed: the storage in use is back where it was
    assert_eq!(after.bytes_in_use, before.bytes_in_use, "storage leaked");
    // resident memory is flat: the end is within 16 MiB (or 20 %) of the warmed-up level
    let slack = (16u64 << 20).max(warm / 5);
    assert!(
        end_rss <= warm + slack,
        "resident memory grew from {} MiB (warm) to {} MiB",
        warm >> 20,
        end_rss >> 20
    );
    ok!(MXKVStoreFree(kv));
}
