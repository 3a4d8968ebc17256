//! Memory after a burst: ops queued by the hundred thousand are given back to the system once they
//! have run. Its own test binary (one test, one process), so that the resident set it measures is
//! this test's alone. Built with mimalloc (the default): glibc's malloc, without it, keeps the top
//! of a thread's heap mapped (its trim threshold grows with the largest block freed), which
//! `malloc_trim` does not release.
#![cfg(feature = "mimalloc")]

use mxrt::Context;
use mxrt::engine::{Engine, EngineConfig, EngineKind, OpResult, PushArgs, RunContext};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Resident set size in MiB (Linux).
fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: f64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64 / 1048576.0
}

/// Op bodies of two kinds: with no data, and three words like a C function's (the size whose
/// memory the engine recycles).
#[test]
fn a_drained_burst_of_queued_ops_gives_its_memory_back() {
    burst(|_| Ok(()));
    let words = [1usize, 2, 3];
    burst(move |_| {
        assert_eq!(words.iter().sum::<usize>(), 6);
        Ok(())
    });
}

fn burst(body: impl Fn(&RunContext) -> OpResult + Clone + Send + Sync + 'static) {
    const BURST: usize = 400_000;
    let engine = Engine::new(EngineConfig::with_workers(EngineKind::PerDevice, 1));
    let var = engine.new_variable();
    let write = || PushArgs::new(Context::cpu(0)).writes(std::slice::from_ref(&var));
    // warm up: the engine's threads, recycled op memory and a small queue exist before measuring
    for _ in 0..10_000 {
        engine.push_fn(write(), body.clone()).unwrap();
    }
    engine.wait_for_all().unwrap();
    let before = rss_mib();

    // the first op holds the variable until released, so the whole burst queues behind it
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    engine
        .push_fn(write(), move |_| {
            while !g.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            Ok(())
        })
        .unwrap();
    for _ in 0..BURST {
        engine.push_fn(write(), body.clone()).unwrap();
    }
    let queued = rss_mib();
    gate.store(true, Ordering::Release);
    engine.wait_for_all().unwrap();
    let after = rss_mib();
    eprintln!(
        "RSS before {before:.1} MiB, {BURST} ops queued {queued:.1} MiB, drained {after:.1} MiB"
    );

    assert_eq!(var.version(), 10_000 + 1 + BURST as u64);
    // the burst did hold memory (so the check below can fail) ...
    assert!(
        queued > before + 20.0,
        "{BURST} queued ops should take > 20 MiB"
    );
    // ... and gave nearly all of it back once drained
    assert!(
        after < before + 8.0,
        "RSS after the burst drained: {after:.1} MiB, before it {before:.1} MiB"
    );
}
