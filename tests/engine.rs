//! Engine behaviour through the Rust API, on all three engines and several worker counts.

use mxrt::Context;
use mxrt::engine::{Engine, EngineConfig, EngineKind, FnProperty, PushArgs, RunContext, Var};
use mxrt::error::ErrorKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

const KINDS: [EngineKind; 3] = [EngineKind::Naive, EngineKind::Pooled, EngineKind::PerDevice];

fn engines() -> Vec<Engine> {
    let mut v = Vec::new();
    for kind in KINDS {
        for n in [1, 2, 4] {
            if kind == EngineKind::Naive && n > 1 {
                continue;
            }
            v.push(Engine::new(EngineConfig::with_workers(kind, n)));
        }
    }
    v
}

fn threaded_engines() -> Vec<Engine> {
    engines()
        .into_iter()
        .filter(|e| e.kind() != EngineKind::Naive)
        .collect()
}

fn cpu() -> PushArgs<'static> {
    PushArgs::new(Context::cpu(0))
}

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// One random op of the RandSumExpr workload: out = mix(inputs).
struct Expr {
    reads: Vec<usize>,
    write: usize,
}

fn rand_exprs(seed: u64, n_ops: usize, n_vars: usize) -> Vec<Expr> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n_ops)
        .map(|_| {
            let k = rng.gen_range(2..20);
            let reads = (0..k).map(|_| rng.gen_range(0..n_vars)).collect();
            Expr {
                reads,
                write: rng.gen_range(0..n_vars),
            }
        })
        .collect()
}

fn mix(i: usize, inputs: impl Iterator<Item = u64>) -> u64 {
    inputs.fold(i as u64, |acc, x| {
        acc.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(x)
    })
}

fn serial(exprs: &[Expr], n_vars: usize) -> Vec<u64> {
    let mut vals: Vec<u64> = (0..n_vars as u64).collect();
    for (i, e) in exprs.iter().enumerate() {
        vals[e.write] = mix(i, e.reads.iter().map(|&r| vals[r]));
    }
    vals
}

fn run_exprs(engine: &Engine, exprs: &[Expr], n_vars: usize, work: Duration) -> Vec<u64> {
    let vars: Vec<Var> = (0..n_vars).map(|_| engine.new_variable()).collect();
    let vals: Arc<Vec<AtomicU64>> = Arc::new((0..n_vars as u64).map(AtomicU64::new).collect());
    for (i, e) in exprs.iter().enumerate() {
        let reads: Vec<Var> = e.reads.iter().map(|&r| vars[r].clone()).collect();
        let writes = [vars[e.write].clone()];
        let (vals, idx, out) = (vals.clone(), e.reads.clone(), e.write);
        engine
            .push_fn(cpu().reads(&reads).writes(&writes), move |_| {
                spin_for(work);
                let v = mix(i, idx.iter().map(|&r| vals[r].load(Ordering::Relaxed)));
                vals[out].store(v, Ordering::Relaxed);
                Ok(())
            })
            .unwrap();
    }
    engine.wait_for_all().unwrap();
    vals.iter().map(|v| v.load(Ordering::Relaxed)).collect()
}

#[test]
fn rand_sum_expr_matches_serial_on_every_engine() {
    let exprs = rand_exprs(42, 10_000, 100);
    let want = serial(&exprs, 100);
    for engine in engines() {
        let got = run_exprs(&engine, &exprs, 100, Duration::from_micros(2));
        assert_eq!(got, want, "{:?}", engine.config());
    }
}

/// The idle policy at its extremes: workers that park as soon as their queue is empty (every op
/// then goes through a wake-up, so a lost one hangs the test), and workers that poll with the
/// shortest step. Results still match the serial run.
#[test]
fn idle_policy_extremes_lose_no_work() {
    use mxrt::engine::IdleConfig;
    let exprs = rand_exprs(7, 5_000, 64);
    let want = serial(&exprs, 64);
    let idles = [
        IdleConfig {
            spin: Duration::ZERO,
            ..IdleConfig::default()
        },
        IdleConfig {
            poll_step: Duration::from_nanos(1),
            ..IdleConfig::default()
        },
    ];
    for idle in idles {
        for (kind, workers) in [(EngineKind::Pooled, 3), (EngineKind::PerDevice, 2)] {
            let mut cfg = EngineConfig::with_workers(kind, workers);
            cfg.idle = idle;
            let engine = Engine::new(cfg);
            for _ in 0..3 {
                let got = run_exprs(&engine, &exprs, 64, Duration::ZERO);
                assert_eq!(got, want, "{idle:?} {kind:?} x{workers}");
            }
        }
    }
}

#[test]
fn several_threads_pushing_at_once() {
    for engine in threaded_engines() {
        let engine = Arc::new(engine);
        let shared = engine.new_variable();
        let total = Arc::new(AtomicI64::new(0));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (engine, shared, total) = (engine.clone(), shared.clone(), total.clone());
                std::thread::spawn(move || {
                    let own = engine.new_variable();
                    let seq = Arc::new(Mutex::new(Vec::new()));
                    for i in 0..2000 {
                        let (seq, total) = (seq.clone(), total.clone());
                        let reads = [shared.clone()];
                        let writes = [own.clone()];
                        engine
                            .push_fn(cpu().reads(&reads).writes(&writes), move |_| {
                                seq.lock().unwrap().push(i);
                                total.fetch_add(1, Ordering::Relaxed);
                                Ok(())
                            })
                            .unwrap();
                    }
                    engine.wait_for_var(&own).unwrap();
                    let seq = seq.lock().unwrap();
                    assert_eq!(
                        *seq,
                        (0..2000).collect::<Vec<_>>(),
                        "thread {t}: writes out of order"
                    );
                    assert_eq!(own.version(), 2000);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        engine.wait_for_all().unwrap();
        assert_eq!(total.load(Ordering::Relaxed), 8000);
        assert_eq!(shared.version(), 0);
    }
}

#[test]
fn writes_run_in_push_order_and_exclusively() {
    for engine in engines() {
        let v = engine.new_variable();
        let active = Arc::new(AtomicI64::new(0));
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..500 {
            let (active, order) = (active.clone(), order.clone());
            let vars = [v.clone()];
            let is_write = i % 3 == 0;
            let args = if is_write {
                cpu().writes(&vars)
            } else {
                cpu().reads(&vars)
            };
            engine
                .push_fn(args, move |_| {
                    if is_write {
                        assert_eq!(active.swap(-1, Ordering::SeqCst), 0, "write overlapped");
                        order.lock().unwrap().push(i);
                        spin_for(Duration::from_micros(5));
                        assert_eq!(active.swap(0, Ordering::SeqCst), -1);
                    } else {
                        assert!(
                            active.fetch_add(1, Ordering::SeqCst) >= 0,
                            "read overlapped a write"
                        );
                        spin_for(Duration::from_micros(2));
                        active.fetch_sub(1, Ordering::SeqCst);
                    }
                    Ok(())
                })
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        let order = order.lock().unwrap();
        assert_eq!(*order, (0..500).filter(|i| i % 3 == 0).collect::<Vec<_>>());
        assert_eq!(v.version(), order.len() as u64);
    }
}

#[test]
fn adjacent_reads_run_concurrently() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::new(EngineConfig::with_workers(kind, 4));
        let v = engine.new_variable();
        let barrier = Arc::new(Barrier::new(4));
        let met = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let (b, met) = (barrier.clone(), met.clone());
            let vars = [v.clone()];
            engine
                .push_fn(cpu().reads(&vars), move |_| {
                    b.wait(); // only returns if all four reads run at the same time
                    met.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        assert_eq!(met.load(Ordering::SeqCst), 4);
    }
}

#[test]
fn var_version_counts_writes_only() {
    for engine in engines() {
        let v = engine.new_variable();
        for _ in 0..10 {
            engine
                .push_fn(cpu().reads(std::slice::from_ref(&v)), |_| Ok(()))
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        assert_eq!(v.version(), 0);
        for _ in 0..10 {
            engine
                .push_fn(cpu().writes(std::slice::from_ref(&v)), |_| Ok(()))
                .unwrap();
        }
        engine.wait_for_var(&v).unwrap();
        assert_eq!(v.version(), 10, "{:?}", engine.kind());
    }
}

#[test]
fn async_ops_complete_from_another_thread() {
    for engine in engines() {
        let v = engine.new_variable();
        let hits = Arc::new(AtomicUsize::new(0));
        for _ in 0..200 {
            let hits = hits.clone();
            engine
                .push_async(
                    Arc::new(move |_: &RunContext, done: mxrt::engine::Completion| {
                        let hits = hits.clone();
                        std::thread::spawn(move || {
                            hits.fetch_add(1, Ordering::SeqCst);
                            done.done();
                        });
                    }),
                    cpu().writes(std::slice::from_ref(&v)),
                )
                .unwrap();
        }
        engine.wait_for_var(&v).unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 200);
        assert_eq!(v.version(), 200);
    }
}

/// Completions from a thread that shares the one CPU with the workers: the workers then park at
/// once (and defer to the completing thread) instead of polling; every op still runs, in order.
#[cfg(target_os = "linux")]
#[test]
fn async_ops_completed_by_a_thread_on_the_workers_cpu_all_run_in_order() {
    // SAFETY: cpu_set_t is plain data; the calls get valid pointers and sizes for this thread.
    let saved = unsafe {
        let mut saved: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut saved),
            0
        );
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(libc::sched_getcpu().max(0) as usize, &mut one);
        assert_eq!(
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one),
            0
        );
        saved
    };
    // workers and the completing thread inherit this thread's single CPU
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        for workers in [1, 2] {
            let engine = Engine::new(EngineConfig::with_workers(kind, workers));
            let vars: Vec<Var> = (0..8).map(|_| engine.new_variable()).collect();
            let (tx, rx) = std::sync::mpsc::channel::<mxrt::engine::Completion>();
            let completer = std::thread::spawn(move || {
                for done in rx {
                    done.done();
                }
            });
            let logs: Arc<Vec<Mutex<Vec<usize>>>> =
                Arc::new((0..8).map(|_| Mutex::new(Vec::new())).collect());
            let n = 4000;
            for i in 0..n {
                let (tx, logs) = (Mutex::new(tx.clone()), logs.clone());
                engine
                    .push_async(
                        Arc::new(move |_: &RunContext, done: mxrt::engine::Completion| {
                            logs[i % 8].lock().unwrap().push(i);
                            tx.lock().unwrap().send(done).unwrap();
                        }),
                        cpu().writes(std::slice::from_ref(&vars[i % 8])),
                    )
                    .unwrap();
            }
            engine.wait_for_all().unwrap();
            drop(tx);
            completer.join().unwrap();
            for (k, log) in logs.iter().enumerate() {
                let want: Vec<usize> = (0..n).filter(|i| i % 8 == k).collect();
                assert_eq!(
                    *log.lock().unwrap(),
                    want,
                    "{kind:?}, {workers} workers, var {k}"
                );
                assert_eq!(vars[k].version(), want.len() as u64);
            }
        }
    }
    // SAFETY: restores the affinity read above.
    unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &saved) };
}

#[test]
fn errors_poison_outputs_and_are_reported_once() {
    for engine in threaded_engines() {
        let (a, b) = (engine.new_variable(), engine.new_variable());
        let ran = Arc::new(AtomicUsize::new(0));
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&a)), |_| {
                Err("bad op".into())
            })
            .unwrap();
        let r = ran.clone();
        // b = a + 1 is skipped and inherits the error
        engine
            .push_fn(
                cpu()
                    .reads(std::slice::from_ref(&a))
                    .writes(std::slice::from_ref(&b)),
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .unwrap();
        let e = engine.wait_for_var(&b).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OpFailed);
        assert_eq!(e.message(), "bad op");
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "dependent op must be skipped"
        );
        // one report consumes it everywhere (spec §3.1)
        engine.wait_for_var(&a).unwrap();
        engine.wait_for_var(&b).unwrap();
        engine.wait_for_all().unwrap();
        // the engine keeps working and the vars are usable again
        let r = ran.clone();
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&b)), move |_| {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        engine.wait_for_var(&b).unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn wait_all_reports_then_clears() {
    for engine in threaded_engines() {
        let a = engine.new_variable();
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&a)), |_| {
                Err("first".into())
            })
            .unwrap();
        let e = engine.wait_for_all().unwrap_err();
        assert_eq!(e.message(), "first");
        engine.wait_for_all().unwrap();
        engine.wait_for_var(&a).unwrap();
    }
}

#[test]
fn error_of_op_without_outputs_reaches_wait_all() {
    for engine in threaded_engines() {
        let a = engine.new_variable();
        engine
            .push_fn(cpu().reads(std::slice::from_ref(&a)), |_| {
                Err("lonely failure".into())
            })
            .unwrap();
        assert_eq!(
            engine.wait_for_all().unwrap_err().message(),
            "lonely failure"
        );
        engine.wait_for_all().unwrap();
    }
}

#[test]
fn no_skip_runs_despite_error_but_output_inherits_it() {
    for engine in threaded_engines() {
        let (a, b) = (engine.new_variable(), engine.new_variable());
        let ran = Arc::new(AtomicUsize::new(0));
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&a)), |_| Err("x".into()))
            .unwrap();
        let r = ran.clone();
        let reads = [a.clone()];
        let writes = [b.clone()];
        engine
            .push_fn(
                cpu().reads(&reads).writes(&writes).prop(FnProperty::NoSkip),
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .unwrap();
        assert_eq!(engine.wait_for_var(&b).unwrap_err().message(), "x");
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn naive_engine_reports_errors_at_push() {
    let engine = Engine::new(EngineConfig::new(EngineKind::Naive));
    let a = engine.new_variable();
    let e = engine
        .push_fn(
            cpu().writes(std::slice::from_ref(&a)),
            |_| Err("now".into()),
        )
        .unwrap_err();
    assert_eq!(e.message(), "now");
    engine.wait_for_var(&a).unwrap();
    engine.wait_for_all().unwrap();
}

#[test]
fn panicking_body_fails_the_op() {
    for engine in engines() {
        let a = engine.new_variable();
        let r = engine.push_fn(cpu().writes(std::slice::from_ref(&a)).name("boom"), |_| {
            panic!("kaput")
        });
        let msg = match r {
            Err(e) => e.message().to_owned(),
            Ok(()) => engine.wait_for_var(&a).unwrap_err().message().to_owned(),
        };
        assert!(msg.contains("panicked") && msg.contains("kaput"), "{msg}");
        // a dropped completion fails the op instead of hanging
        let r = engine.push_async(
            Arc::new(|_: &RunContext, c| drop(c)),
            cpu().writes(std::slice::from_ref(&a)),
        );
        let msg = match r {
            Err(e) => e.message().to_owned(),
            Ok(()) => engine.wait_for_var(&a).unwrap_err().message().to_owned(),
        };
        assert!(msg.contains("without calling its completion"), "{msg}");
    }
}

#[test]
fn duplicate_vars_do_not_hang() {
    for engine in engines() {
        let a = engine.new_variable();
        let vars = [a.clone(), a.clone()];
        engine
            .push_fn(cpu().reads(&vars).writes(&vars), |_| Ok(()))
            .unwrap();
        engine.push_fn(cpu().writes(&vars), |_| Ok(())).unwrap();
        engine.wait_for_all().unwrap();
        assert_eq!(a.version(), 2);
    }
}

#[test]
fn waiting_inside_an_op_is_an_error() {
    for engine in engines() {
        let engine = Arc::new(engine);
        let a = engine.new_variable();
        let seen = Arc::new(Mutex::new(String::new()));
        let (e2, a2, s2) = (engine.clone(), a.clone(), seen.clone());
        let b = engine.new_variable();
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&b)), move |_| {
                let r1 = e2.wait_for_var(&a2).unwrap_err();
                let r2 = e2.wait_for_all().unwrap_err();
                *s2.lock().unwrap() = format!("{r1} | {r2}");
                Ok(())
            })
            .unwrap();
        engine.wait_for_all().unwrap();
        let s = seen.lock().unwrap();
        assert!(
            s.contains("WaitForVar was called from inside an engine operation"),
            "{s}"
        );
        assert!(s.contains("WaitForAll was called from inside"), "{s}");
    }
}

#[test]
fn gpu_context_and_shutdown_are_clear_errors() {
    for engine in engines() {
        let e = engine
            .push_fn(PushArgs::new(Context::gpu(0)), |_| Ok(()))
            .unwrap_err();
        // no GPU here (make gpu-test runs GPU work against a fake driver)
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("gpu(0) does not exist"), "{e}");
        let a = engine.new_variable();
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&a)), |_| Ok(()))
            .unwrap();
        engine.notify_shutdown().unwrap();
        let e = engine.push_fn(cpu(), |_| Ok(())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Shutdown);
        // deletions still run
        let deleted = Arc::new(AtomicUsize::new(0));
        let d = deleted.clone();
        engine
            .delete_variable(
                Some(Box::new(move |_| {
                    d.fetch_add(1, Ordering::SeqCst);
                })),
                Context::cpu(0),
                a,
            )
            .unwrap();
        engine.wait_for_all().unwrap();
        assert_eq!(deleted.load(Ordering::SeqCst), 1);
    }
}

#[test]
fn delete_variable_runs_after_pending_ops() {
    for engine in engines() {
        let a = engine.new_variable();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let log = log.clone();
            engine
                .push_fn(cpu().writes(std::slice::from_ref(&a)), move |_| {
                    spin_for(Duration::from_micros(50));
                    log.lock().unwrap().push(i);
                    Ok(())
                })
                .unwrap();
        }
        let l = log.clone();
        engine
            .delete_variable(
                Some(Box::new(move |_| l.lock().unwrap().push(99))),
                Context::cpu(0),
                a,
            )
            .unwrap();
        engine.wait_for_all().unwrap();
        assert_eq!(*log.lock().unwrap(), vec![0, 1, 2, 3, 4, 99]);
    }
}

#[test]
fn operators_are_reusable_and_deleted_after_their_pushes() {
    for engine in engines() {
        let a = engine.new_variable();
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        let op = engine
            .new_operator(
                Arc::new(move |_: &RunContext, done: mxrt::engine::Completion| {
                    c.fetch_add(1, Ordering::SeqCst);
                    done.done();
                }),
                &[],
                std::slice::from_ref(&a),
                FnProperty::Normal,
                Some("reused"),
            )
            .unwrap();
        for _ in 0..7 {
            engine.push_operator(&op, Context::cpu(0), 0).unwrap();
        }
        let weak = Arc::downgrade(&op);
        engine.delete_operator(op).unwrap();
        engine.wait_for_all().unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 7);
        assert_eq!(a.version(), 8, "7 pushes + the deletion write");
        assert!(weak.upgrade().is_none(), "operator freed after deletion");
    }
}

#[test]
fn priority_pool_runs_higher_priority_first() {
    let mut cfg = EngineConfig::new(EngineKind::PerDevice);
    cfg.cpu_priority_workers = 1;
    let engine = Engine::new(cfg);
    // the gate op occupies the only priority worker while the others queue up behind it
    let (started, gate) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
    let order = Arc::new(Mutex::new(Vec::new()));
    let (s, g) = (started.clone(), gate.clone());
    engine
        .push_fn(cpu().prop(FnProperty::CpuPrioritized), move |_| {
            s.wait();
            g.wait();
            Ok(())
        })
        .unwrap();
    started.wait();
    for p in [1, 5, 3, 9, 0] {
        let order = order.clone();
        engine
            .push_fn(
                cpu().prop(FnProperty::CpuPrioritized).priority(p),
                move |_| {
                    order.lock().unwrap().push(p);
                    Ok(())
                },
            )
            .unwrap();
    }
    gate.wait();
    engine.wait_for_all().unwrap();
    assert_eq!(*order.lock().unwrap(), vec![9, 5, 3, 1, 0]);
}

#[test]
fn async_property_runs_inline_when_ready() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::new(EngineConfig::new(kind));
        let me = std::thread::current().id();
        let same = Arc::new(Mutex::new(None));
        let s = same.clone();
        engine
            .push_fn(cpu().prop(FnProperty::Async), move |_| {
                *s.lock().unwrap() = Some(std::thread::current().id() == me);
                Ok(())
            })
            .unwrap();
        engine.wait_for_all().unwrap();
        assert_eq!(*same.lock().unwrap(), Some(true), "{kind:?}");
    }
}

#[test]
fn bulk_segments_flush_when_full_or_on_wait() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::new(EngineConfig::new(kind));
        assert_eq!(engine.set_bulk_size(3).unwrap(), 0);
        let a = engine.new_variable();
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..4 {
            let r = ran.clone();
            engine
                .push_fn(cpu().writes(std::slice::from_ref(&a)), move |rc| {
                    assert!(rc.is_bulk);
                    r.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            ran.load(Ordering::SeqCst),
            3,
            "first three flushed as a segment"
        );
        engine.wait_for_all().unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 4);
        assert_eq!(a.version(), 2, "two bulk segments, one write each");
        assert_eq!(engine.set_bulk_size(0).unwrap(), 3);
    }
    let naive = Engine::new(EngineConfig::new(EngineKind::Naive));
    assert_eq!(naive.set_bulk_size(5).unwrap(), 0);
    assert_eq!(naive.bulk_size(), 0);
}

#[test]
fn wait_for_var_waits_only_for_earlier_writes() {
    for engine in threaded_engines() {
        let a = engine.new_variable();
        let done = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            let d = done.clone();
            engine
                .push_fn(cpu().writes(std::slice::from_ref(&a)), move |_| {
                    spin_for(Duration::from_millis(2));
                    d.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        engine.wait_for_var(&a).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 3);
        // a var with only reads queued does not block
        let gate = Arc::new(Barrier::new(2));
        let g = gate.clone();
        engine
            .push_fn(cpu().reads(std::slice::from_ref(&a)), move |_| {
                g.wait();
                Ok(())
            })
            .unwrap();
        engine.wait_for_var(&a).unwrap();
        gate.wait();
        engine.wait_for_all().unwrap();
    }
}

#[test]
fn leases_order_with_ops() {
    for engine in engines() {
        let v = engine.new_variable();
        let cell = Arc::new(AtomicU64::new(0));
        // fast path: idle var
        {
            let _w = engine.lease(&v, true).unwrap();
            cell.store(1, Ordering::SeqCst);
        }
        // slow path: a lease waits for queued writes, and later ops wait for the lease
        for i in 0..5u64 {
            let c = cell.clone();
            engine
                .push_fn(cpu().writes(std::slice::from_ref(&v)), move |_| {
                    spin_for(Duration::from_micros(200));
                    c.store(c.load(Ordering::SeqCst) * 10 + i, Ordering::SeqCst);
                    Ok(())
                })
                .unwrap();
        }
        let lease = engine.lease(&v, true).unwrap();
        assert_eq!(cell.load(Ordering::SeqCst), 101234, "{:?}", engine.kind());
        let c = cell.clone();
        engine
            .push_fn(cpu().writes(std::slice::from_ref(&v)), move |_| {
                c.store(7, Ordering::SeqCst);
                Ok(())
            })
            .unwrap();
        cell.store(42, Ordering::SeqCst);
        if engine.kind() != EngineKind::Naive {
            std::thread::sleep(Duration::from_millis(20));
            assert_eq!(
                cell.load(Ordering::SeqCst),
                42,
                "op ran while the lease was held"
            );
        }
        drop(lease);
        engine.wait_for_var(&v).unwrap();
        // NaiveEngine ran the op inside its push, before the store of 42
        let want = if engine.kind() == EngineKind::Naive {
            42
        } else {
            7
        };
        assert_eq!(cell.load(Ordering::SeqCst), want);
        // a lease reports the variable's error once
        if engine.kind() != EngineKind::Naive {
            engine
                .push_fn(cpu().writes(std::slice::from_ref(&v)), |_| {
                    Err("poisoned".into())
                })
                .unwrap();
            assert_eq!(engine.lease(&v, false).err().unwrap().message(), "poisoned");
            engine.lease(&v, false).unwrap();
        }
    }
}

/// Two threads push ops with opposite access patterns on two variables (W a + R b, and R a + W b).
/// If an op's appends to its variables were not atomic, the two could queue in opposite orders
/// on `a` and `b` and wait for each other forever (the race the loom model in
/// src/engine/var_queue.rs found). A hang fails the test through the timeout.
#[test]
fn opposite_multi_var_pushes_from_two_threads_never_deadlock() {
    for engine in threaded_engines() {
        let engine = Arc::new(engine);
        let (a, b) = (engine.new_variable(), engine.new_variable());
        let (tx, rx) = std::sync::mpsc::channel();
        let handles: Vec<_> = [true, false]
            .into_iter()
            .map(|first| {
                let (engine, a, b) = (engine.clone(), a.clone(), b.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let (w, r) = if first {
                            ([a.clone()], [b.clone()])
                        } else {
                            ([b.clone()], [a.clone()])
                        };
                        engine
                            .push_fn(cpu().reads(&r).writes(&w), |_| Ok(()))
                            .unwrap();
                    }
                })
            })
            .collect();
        let e2 = engine.clone();
        std::thread::spawn(move || {
            for h in handles {
                h.join().unwrap();
            }
            e2.wait_for_all().unwrap();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("pushes from two threads deadlocked");
        assert_eq!(a.version() + b.version(), 40_000);
    }
}

/// An engine of `kind` with one CPU worker; `helps` sets whether `wait_for_all` runs ops itself.
fn one_worker(kind: EngineKind, helps: bool) -> Engine {
    let mut cfg = EngineConfig::with_workers(kind, 1);
    cfg.wait_helps = helps;
    Engine::new(cfg)
}

/// Pushes an op that occupies the engine's only worker until `release` returns true (or 20 s
/// pass), and returns once the worker is running it.
fn block_the_worker(engine: &Engine, release: impl Fn() -> bool + Send + Sync + 'static) {
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let v = engine.new_variable();
    engine
        .push_fn(
            cpu().writes(std::slice::from_ref(&v)).priority(1),
            move |_| {
                s.store(1, Ordering::SeqCst);
                let t = Instant::now();
                while !release() && t.elapsed() < Duration::from_secs(20) {
                    std::thread::sleep(Duration::from_micros(100));
                }
                Ok(())
            },
        )
        .unwrap();
    while started.load(Ordering::SeqCst) == 0 {
        std::thread::yield_now();
    }
}

#[test]
fn wait_for_all_runs_queued_ops_on_the_waiting_thread_in_dependency_order() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = one_worker(kind, true);
        let me = std::thread::current().id();
        // the only worker stays busy until this thread has run an op: only helping drains
        let on_waiter = Arc::new(AtomicUsize::new(0));
        let w = on_waiter.clone();
        block_the_worker(&engine, move || w.load(Ordering::SeqCst) > 0);
        // ops pushed from the ops this thread runs must not land in this thread's bulk segment
        assert_eq!(engine.set_bulk_size(16).unwrap(), 0);
        let chain = engine.new_variable();
        let order = Arc::new(Mutex::new(Vec::new()));
        let children = Arc::new(AtomicUsize::new(0));
        let engine = Arc::new(engine);
        for i in 0..10 {
            let (w, order, children, e) = (
                on_waiter.clone(),
                order.clone(),
                children.clone(),
                engine.clone(),
            );
            // priority 1: these pushes are not bulked, the ops' own pushes would be
            let args = cpu().writes(std::slice::from_ref(&chain)).priority(1);
            engine
                .push_fn(args, move |_| {
                    spin_for(Duration::from_micros(300));
                    if std::thread::current().id() == me {
                        w.fetch_add(1, Ordering::SeqCst);
                    }
                    order.lock().unwrap().push(i);
                    let c = children.clone();
                    e.push_fn(cpu(), move |_| {
                        c.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .unwrap();
                    Ok(())
                })
                .unwrap();
        }
        engine.wait_for_all().unwrap();
        assert!(on_waiter.load(Ordering::SeqCst) > 0, "{kind:?}");
        assert_eq!(*order.lock().unwrap(), (0..10).collect::<Vec<_>>());
        assert_eq!(
            children.load(Ordering::SeqCst),
            10,
            "{kind:?}: pushes from ops all ran"
        );
        assert_eq!(chain.version(), 10);
        assert_eq!(engine.set_bulk_size(0).unwrap(), 16, "bulk size restored");
    }
}

#[test]
fn wait_for_all_stops_helping_when_ops_are_short_and_never_helps_when_turned_off() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        for helps in [true, false] {
            let engine = one_worker(kind, helps);
            let me = std::thread::current().id();
            let release = Arc::new(AtomicUsize::new(0));
            let r = release.clone();
            block_the_worker(&engine, move || r.load(Ordering::SeqCst) > 0);
            // 20 000 ready ops queued behind the blocked worker
            let vars: Vec<_> = (0..64).map(|_| engine.new_variable()).collect();
            let (ran, on_waiter) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            for i in 0..20_000 {
                let (ran, w) = (ran.clone(), on_waiter.clone());
                engine
                    .push_fn(cpu().writes(&vars[i % 64..i % 64 + 1]), move |_| {
                        ran.fetch_add(1, Ordering::Relaxed);
                        if std::thread::current().id() == me {
                            w.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(())
                    })
                    .unwrap();
            }
            release.store(1, Ordering::SeqCst);
            engine.wait_for_all().unwrap();
            assert_eq!(ran.load(Ordering::SeqCst), 20_000);
            let n = on_waiter.load(Ordering::SeqCst);
            if helps {
                // it tries a few, finds them short and sleeps; helping throughout would have
                // taken thousands
                assert!(n < 200, "{kind:?}: the waiting thread ran {n} short ops");
            } else {
                assert_eq!(n, 0, "{kind:?}");
            }
        }
    }
}
