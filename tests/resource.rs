//! The resource manager through the Rust API, on all three engines and several worker counts.

use mxrt::Context;
use mxrt::engine::{Engine, EngineConfig, EngineKind, PushArgs, Var};
use mxrt::error::ErrorKind;
use mxrt::resource::{
    RandomGenerator, Resource, ResourceConfig, ResourceManager, ResourceRequest, StreamId,
};
use mxrt::storage::Storage;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn configs() -> Vec<(EngineKind, usize)> {
    let mut v = vec![(EngineKind::Naive, 1)];
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        for n in [1, 2, 4] {
            v.push((kind, n));
        }
    }
    v
}

fn manager(engine: &Engine, config: ResourceConfig) -> ResourceManager<'_> {
    ResourceManager::with_config(engine, Storage::global(), config)
}

fn cpu() -> Context {
    Context::cpu(0)
}

type Out = Arc<Mutex<Vec<u32>>>;

/// Pushes op `k` of the script: it uses `res` (and a temp space for every third op) and stores
/// what it drew in `out`.
fn push_draw(engine: &Engine, k: usize, res: &Resource, temp: &Resource, threads: usize, out: Out) {
    let (r, t) = (res.clone(), temp.clone());
    let mut vars: Vec<Var> = vec![res.var().clone()];
    if k % 3 == 2 {
        vars.push(temp.var().clone());
    }
    engine
        .push_fn(PushArgs::new(cpu()).writes(&vars).name("draw"), move |_| {
            let mut o = out.lock().unwrap();
            match k % 3 {
                0 => {
                    let mut v = vec![0f32; 64];
                    r.fill_uniform(&mut v, -1.0, 1.0)
                        .map_err(|e| e.to_string())?;
                    o.extend(v.iter().map(|x| x.to_bits()));
                }
                1 => {
                    // enough values that the parallel fill really uses `threads` threads
                    let mut v = vec![0f32; 70_000];
                    r.parallel_random()
                        .map_err(|e| e.to_string())?
                        .normal(&mut v, 0.0, 1.0, threads)
                        .map_err(|e| e.to_string())?;
                    o.extend(v.iter().map(|x| x.to_bits()));
                }
                _ => {
                    // random words through the temp space, which grows op after op
                    let n = 64 * (k % 9 + 1);
                    let mut space = t.temp_space(n * 4).map_err(|e| e.to_string())?;
                    let mut words = vec![0u32; n];
                    r.fill_bits(&mut words).map_err(|e| e.to_string())?;
                    for (chunk, w) in space.chunks_exact_mut(4).zip(&words) {
                        chunk.copy_from_slice(&w.to_le_bytes());
                    }
                    o.extend(
                        space
                            .chunks_exact(4)
                            .map(|c| u32::from_le_bytes(c.try_into().unwrap())),
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Runs the script on one engine and returns what each op drew.
fn run_script(kind: EngineKind, workers: usize) -> Vec<Vec<u32>> {
    let engine = Engine::new(EngineConfig::with_workers(kind, workers));
    let rm = manager(&engine, ResourceConfig::default());
    let rand = rm.request(cpu(), ResourceRequest::Random).unwrap();
    let par = rm.request(cpu(), ResourceRequest::ParallelRandom).unwrap();
    let temps: Vec<Resource> = (0..4)
        .map(|_| rm.request(cpu(), ResourceRequest::TempSpace).unwrap())
        .collect();
    let outs: Vec<Out> = (0..27).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    for (k, out) in outs.iter().enumerate() {
        match k {
            0 | 9 => rm.seed(123).unwrap(),
            18 => rm.seed_context(5, Context::cpu_pinned(0)).unwrap(),
            _ => {}
        }
        let res = if k % 3 == 1 { &par } else { &rand };
        push_draw(&engine, k, res, &temps[k % 4], workers, out.clone());
    }
    engine.wait_for_all().unwrap();
    outs.iter().map(|o| o.lock().unwrap().clone()).collect()
}

#[test]
fn same_seed_same_numbers_on_every_engine_and_worker_count() {
    let reference = run_script(EngineKind::Naive, 1);
    // the script's own structure: reseeding with 123 repeats ops 0..9, seed 5 does not
    for k in 0..9 {
        assert!(!reference[k].is_empty());
        assert!(reference[k + 9] == reference[k], "op {k} after reseeding");
        assert!(
            reference[k + 18] != reference[k],
            "op {k} with another seed"
        );
    }
    assert!(reference[0] != reference[3], "the generator advances");
    // first op: a fresh seed-123 kRandom stream
    let mut g = RandomGenerator::new(StreamId {
        seed: 123,
        ctx: cpu(),
        kind: 0,
        copy: 0,
        stream: 0,
    });
    let mut v = vec![0f32; 64];
    g.uniform(&mut v, -1.0, 1.0).unwrap();
    assert!(reference[0] == v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    for (kind, n) in configs().into_iter().skip(1) {
        let got = run_script(kind, n);
        for (k, (a, b)) in got.iter().zip(&reference).enumerate() {
            assert!(a == b, "{kind:?} with {n} workers: op {k} differs");
        }
    }
}

#[test]
fn seeding_runs_after_pending_users_without_blocking() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::new(EngineConfig::with_workers(kind, 2));
        let rm = manager(&engine, ResourceConfig::default());
        let rand = rm.request(cpu(), ResourceRequest::Random).unwrap();
        rm.seed(1).unwrap();
        let (a, b) = (
            Arc::new(Mutex::new(vec![0f32; 8])),
            Arc::new(Mutex::new(vec![0f32; 8])),
        );
        let started = Arc::new(AtomicBool::new(false));
        let finished = Arc::new(AtomicBool::new(false));
        let vars = [rand.var().clone()];
        {
            let (r, a, s, f) = (rand.clone(), a.clone(), started.clone(), finished.clone());
            engine
                .push_fn(PushArgs::new(cpu()).writes(&vars), move |_| {
                    s.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(150));
                    r.fill_uniform(&mut a.lock().unwrap(), 0.0, 1.0)
                        .map_err(|e| e.to_string())?;
                    f.store(true, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        while !started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let t = Instant::now();
        rm.seed(2).unwrap();
        assert!(
            !finished.load(Ordering::SeqCst),
            "{kind:?}: seed waited for the running op ({:?})",
            t.elapsed()
        );
        {
            let (r, b) = (rand.clone(), b.clone());
            engine
                .push_fn(PushArgs::new(cpu()).writes(&vars), move |_| {
                    r.fill_uniform(&mut b.lock().unwrap(), 0.0, 1.0)
                        .map_err(|e| e.to_string())
                })
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        let expect = |seed| {
            let mut g = RandomGenerator::new(StreamId {
                seed,
                ctx: cpu(),
                kind: 0,
                copy: 0,
                stream: 0,
            });
            let mut v = vec![0f32; 8];
            g.uniform(&mut v, 0.0, 1.0).unwrap();
            v
        };
        assert_eq!(
            *a.lock().unwrap(),
            expect(1),
            "{kind:?}: the op pushed before the seed"
        );
        assert_eq!(
            *b.lock().unwrap(),
            expect(2),
            "{kind:?}: the op pushed after the seed"
        );
        assert_eq!(rm.global_seed(), 2);
    }
}

#[test]
fn ops_sharing_a_temp_space_never_overlap() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::new(EngineConfig::with_workers(kind, 4));
        let rm = manager(
            &engine,
            ResourceConfig {
                cpu_temp_copies: 1,
                ..ResourceConfig::default()
            },
        );
        let temp = rm.request(cpu(), ResourceRequest::TempSpace).unwrap();
        let active = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let corrupted = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        for k in 0..200u8 {
            // each op also writes its own variable: only the resource orders them
            let vars = [temp.var().clone(), Var::new()];
            let (t, a, o, c, r) = (
                temp.clone(),
                active.clone(),
                overlaps.clone(),
                corrupted.clone(),
                runs.clone(),
            );
            engine
                .push_fn(PushArgs::new(cpu()).writes(&vars), move |_| {
                    if a.fetch_add(1, Ordering::SeqCst) != 0 {
                        o.fetch_add(1, Ordering::SeqCst);
                    }
                    let mut space = t.temp_space(4096).map_err(|e| e.to_string())?;
                    space.fill(k);
                    let until = Instant::now() + Duration::from_micros(200);
                    while Instant::now() < until {
                        std::hint::spin_loop();
                    }
                    if space.iter().any(|&b| b != k) {
                        c.fetch_add(1, Ordering::SeqCst);
                    }
                    a.fetch_sub(1, Ordering::SeqCst);
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 200);
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "{kind:?}");
        assert_eq!(corrupted.load(Ordering::SeqCst), 0, "{kind:?}");
    }
}

#[test]
fn temp_space_grows_and_keeps_its_contents() {
    let engine = Engine::new(EngineConfig::with_workers(EngineKind::PerDevice, 2));
    let rm = manager(&engine, ResourceConfig::default());
    let temp = rm.request(cpu(), ResourceRequest::TempSpace).unwrap();
    assert_eq!(temp.temp_capacity(), 0);
    let log = Arc::new(Mutex::new(Vec::new()));
    let vars = [temp.var().clone()];
    let (t, l) = (temp.clone(), log.clone());
    engine
        .push_fn(PushArgs::new(cpu()).writes(&vars), move |_| {
            let mut l = l.lock().unwrap();
            {
                let mut s = t.temp_space(16).map_err(|e| e.to_string())?;
                l.push((s.len(), s.capacity(), s.iter().all(|&b| b == 0)));
                s.fill(7);
                assert_eq!(s.as_mut_ptr() as usize % 64, 0);
            }
            {
                // growing: a new, zeroed buffer
                let mut s = t.temp_space(1 << 20).map_err(|e| e.to_string())?;
                l.push((s.len(), s.capacity(), s.iter().all(|&b| b == 0)));
                s[..100].fill(9);
            }
            {
                // smaller request: same buffer, contents kept
                let s = t.temp_space(100).map_err(|e| e.to_string())?;
                l.push((s.len(), s.capacity(), s.iter().all(|&b| b == 9)));
            }
            Ok(())
        })
        .unwrap();
    engine.wait_for_all().unwrap();
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            (16, 16, true),
            (1 << 20, 1 << 20, true),
            (100, 1 << 20, true)
        ]
    );
    assert_eq!(temp.temp_capacity(), 1 << 20);
}

#[test]
fn requests_cycle_through_copies() {
    let engine = Engine::new(EngineConfig::new(EngineKind::Naive));
    let rm = manager(
        &engine,
        ResourceConfig {
            cpu_parallel_random_copies: 2,
            ..ResourceConfig::default()
        },
    );
    let temps: Vec<Resource> = (0..5)
        .map(|_| rm.request(cpu(), ResourceRequest::TempSpace).unwrap())
        .collect();
    for i in 0..4 {
        assert_eq!(temps[i].id(), i);
        for j in 0..i {
            assert!(!temps[i].same_as(&temps[j]));
            assert!(!temps[i].var().same_as(temps[j].var()));
        }
    }
    assert!(temps[4].same_as(&temps[0]));
    // kRandom is one per device; every host type maps to the CPU's resources
    let r1 = rm.request(cpu(), ResourceRequest::Random).unwrap();
    let r2 = rm
        .request(Context::cpu_pinned(3), ResourceRequest::Random)
        .unwrap();
    assert!(r1.same_as(&r2));
    assert_eq!(r2.ctx(), cpu());
    let p: Vec<Resource> = (0..3)
        .map(|_| {
            rm.request(Context::cpu(1), ResourceRequest::ParallelRandom)
                .unwrap()
        })
        .collect();
    assert_eq!((p[0].id(), p[1].id(), p[2].id()), (0, 1, 0));
    assert!(p[2].same_as(&p[0]));
    assert_eq!(p[0].parallel_random().unwrap().num_streams(), 64);
    assert_eq!(format!("{}", temps[1]), "resource kTempSpace#1 on cpu(0)");
}

#[test]
fn misuse_is_reported() {
    let engine = Engine::new(EngineConfig::with_workers(EngineKind::PerDevice, 2));
    let rm = manager(&engine, ResourceConfig::default());
    let rand = rm.request(cpu(), ResourceRequest::Random).unwrap();
    let temp = rm.request(cpu(), ResourceRequest::TempSpace).unwrap();
    // outside any op holding the variable
    let e = rand.fill_uniform(&mut [0f32; 4], 0.0, 1.0).unwrap_err();
    assert!(
        e.message().contains("used outside an engine op holding it"),
        "{e}"
    );
    assert!(temp.temp_space_ptr(8).is_err());
    // a write lease holds the variable like an op does
    {
        let _lease = engine.lease(rand.var(), true).unwrap();
        assert!(rand.fill_uniform(&mut [0f32; 4], 0.0, 1.0).is_ok());
        // a second user at the same time
        let g = rand.random().unwrap();
        let e = rand.fill_bits(&mut [0u32; 2]).unwrap_err();
        assert!(
            e.message()
                .contains("in use by another op at the same time"),
            "{e}"
        );
        drop(g);
    }
    // wrong kinds and bad parameters
    let lease = engine.lease(temp.var(), true).unwrap();
    let e = temp.fill_uniform(&mut [0f32; 1], 0.0, 1.0).unwrap_err();
    assert_eq!(
        e.message(),
        "resource kTempSpace#0 on cpu(0) is not a kRandom resource"
    );
    drop(lease);
    let _lease = engine.lease(rand.var(), true).unwrap();
    assert!(rand.temp_space(4).is_err());
    assert!(rand.parallel_random().is_err());
    assert!(rand.fill_uniform(&mut [0f32; 1], 1.0, 0.0).is_err());
    assert!(rand.fill_normal(&mut [0f32; 1], 0.0, -1.0).is_err());
    // devices and codes
    let e = rm
        .request(Context::gpu(0), ResourceRequest::Random)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported);
    assert!(rm.seed_context(3, Context::gpu(1)).is_ok());
    assert_eq!(
        ResourceRequest::from_code(3).unwrap_err().kind(),
        ErrorKind::NotSupported
    );
    assert!(
        ResourceRequest::from_code(7)
            .unwrap_err()
            .message()
            .contains("unknown resource type 7")
    );
    for r in [
        ResourceRequest::Random,
        ResourceRequest::TempSpace,
        ResourceRequest::ParallelRandom,
    ] {
        assert_eq!(ResourceRequest::from_code(r.code()).unwrap(), r);
    }
}

#[test]
fn naive_engine_needs_no_op_and_reseeds_at_once() {
    let engine = Engine::new(EngineConfig::new(EngineKind::Naive));
    let rm = manager(&engine, ResourceConfig::default());
    let rand = rm.request(cpu(), ResourceRequest::Random).unwrap();
    let mut a = [0u32; 16];
    rand.fill_bits(&mut a).unwrap();
    rm.seed(0).unwrap();
    let mut b = [0u32; 16];
    rand.fill_bits(&mut b).unwrap();
    // the default seed is 0, so reseeding with 0 restarts the stream
    assert_eq!(a, b);
    rm.seed_context(0, cpu()).unwrap();
    rand.fill_bits(&mut b).unwrap();
    assert_eq!(a, b);
    rm.seed_context(1, cpu()).unwrap();
    rand.fill_bits(&mut b).unwrap();
    assert_ne!(a, b);
    // resources created after a seed start from it
    let engine2 = Engine::new(EngineConfig::new(EngineKind::Naive));
    let rm2 = manager(&engine2, ResourceConfig::default());
    rm2.seed_context(1, cpu()).unwrap();
    let mut c = [0u32; 16];
    rm2.request(cpu(), ResourceRequest::Random)
        .unwrap()
        .fill_bits(&mut c)
        .unwrap();
    assert_eq!(b, c);
}

/// Through the C API: a resource's variable handle is stable across calls, is a live variable
/// (ops can write it), and is given out again if the caller deletes it.
#[test]
fn c_resource_variable_handle_is_stable_and_live() {
    use mxrt::capi::engine::{MXEngineDeleteVariable, MXEngineWaitForVar};
    use mxrt::capi::resource::{MXResourceGetVar, MXResourceRequest};
    use std::ffi::c_void;
    use std::ptr::null_mut;
    // SAFETY: every pointer passed is a valid out-parameter or a handle the calls returned.
    unsafe {
        let mut res: *mut c_void = null_mut();
        assert_eq!(MXResourceRequest(1, 0, 0, &mut res), 0);
        let (mut v1, mut v2) = (null_mut(), null_mut());
        assert_eq!(MXResourceGetVar(res, &mut v1), 0);
        assert_eq!(MXResourceGetVar(res, &mut v2), 0);
        assert_eq!(v1, v2, "the same handle every time");
        assert_eq!(MXEngineWaitForVar(v1), 0, "a live variable");
        assert_eq!(MXEngineDeleteVariable(v1), 0);
        let mut v3 = null_mut();
        assert_eq!(MXResourceGetVar(res, &mut v3), 0);
        assert_ne!(v3, v1, "the deleted handle is not handed out again");
        assert_eq!(MXEngineWaitForVar(v3), 0, "the new handle is live");
        assert_ne!(MXEngineWaitForVar(v1), 0, "the deleted one stays dead");
    }
}
