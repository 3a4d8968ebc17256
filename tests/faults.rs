//! Faults during long random engine workloads.
//!
//! Ops fail at random points: sync bodies return an error (from C: `MXEngineSetOpError`), async
//! bodies complete with an error from another thread (from C: `MXEngineCallbackInvoke` with a
//! message). A model of MXNet's exception rules (spec §3.1: an op adopts the first unreported
//! error of its reads, then writes, and is skipped; its outputs carry the error; the first wait
//! that reports an error consumes it everywhere; WaitForAll reports one and consumes all) predicts
//! at every checkpoint which waits fail with which message, and the values of every variable.
//! Checks: every error reaches a wait, no op or wait hangs (checkpoints time out), and the values
//! written by ops that ran are right.
//!
//! Size: `MXRT_FAULT_OPS` ops per engine (default 200 000).

use mxrt::Context;
use mxrt::capi::completion::CallbackOnComplete;
use mxrt::capi::engine::*;
use mxrt::capi::engine_push::*;
use mxrt::capi::ndarray::*;
use mxrt::capi::ndarray_sparse::*;
use mxrt::capi::types::*;
use mxrt::engine::{Completion, Engine, EngineConfig, EngineKind, PushArgs, Var};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::HashSet;
use std::ffi::{CString, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[macro_use]
mod common;
use common::last_error;

/// Tests that use the global engine (the C API) run one at a time: they check its error list.
static GLOBAL_ENGINE: Mutex<()> = Mutex::new(());

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fail {
    No,
    Sync,
    Async,
}

/// One op of the workload.
#[derive(Clone, Debug)]
struct Op {
    reads: Vec<usize>,
    write: Option<usize>,
    is_async: bool,
    fail: Fail,
    /// A checkpoint (quiesce, wait on every variable, wait for all) before this op.
    checkpoint: bool,
}

fn workload(seed: u64, n_ops: usize, n_vars: usize, fail_rate: f64) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n_ops)
        .map(|i| {
            let write = rng.gen_bool(0.9).then(|| rng.gen_range(0..n_vars));
            let mut reads = Vec::new();
            for _ in 0..rng.gen_range(0..4) {
                let r = rng.gen_range(0..n_vars);
                if Some(r) != write && !reads.contains(&r) {
                    reads.push(r);
                }
            }
            let is_async = rng.gen_bool(0.3);
            let fail = if rng.gen_bool(fail_rate) {
                if is_async { Fail::Async } else { Fail::Sync }
            } else {
                Fail::No
            };
            Op {
                reads,
                write,
                is_async,
                fail,
                checkpoint: i > 0 && rng.gen_bool(1.0 / 400.0),
            }
        })
        .collect()
}

fn mix(i: usize, inputs: impl Iterator<Item = u64>) -> u64 {
    inputs.fold(i as u64 + 1, |acc, x| {
        acc.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(x)
    })
}

fn message(i: usize) -> String {
    format!("op {i} failed on purpose")
}

fn id_of(msg: &str) -> usize {
    msg.strip_prefix("op ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an op's message: {msg:?}"))
}

/// MXNet's exception rules for the threaded engines, op by op.
struct Model {
    values: Vec<u64>,
    exc: Vec<Option<usize>>,
    reported: HashSet<usize>,
    failed: Vec<usize>,
}

impl Model {
    fn new(n_vars: usize) -> Self {
        Model {
            values: (0..n_vars as u64).collect(),
            exc: vec![None; n_vars],
            reported: HashSet::new(),
            failed: Vec::new(),
        }
    }
    fn pending(&self, v: usize) -> Option<usize> {
        self.exc[v].filter(|e| !self.reported.contains(e))
    }
    fn apply(&mut self, i: usize, op: &Op, naive: bool) {
        let adopted = if naive {
            None
        } else {
            op.reads
                .iter()
                .chain(&op.write)
                .find_map(|&v| self.pending(v))
        };
        let result = match adopted {
            Some(e) => Some(e),
            None if op.fail != Fail::No => {
                self.failed.push(i);
                Some(i)
            }
            None => {
                if let Some(w) = op.write {
                    self.values[w] = mix(i, op.reads.iter().map(|&r| self.values[r]));
                }
                None
            }
        };
        if let (Some(w), Some(e), false) = (op.write, result, naive) {
            self.exc[w] = Some(e);
        }
    }
    fn unreported(&self) -> HashSet<usize> {
        self.failed
            .iter()
            .copied()
            .filter(|e| !self.reported.contains(e))
            .collect()
    }
}

/// How a workload reaches an engine: the Rust API on one engine, or the C API on the global one.
trait Target {
    fn naive(&self) -> bool;
    /// Pushes op `i`; `Err(message)` if the push itself failed (NaiveEngine runs ops in the push).
    fn push(&self, i: usize, op: &Op) -> Result<(), String>;
    fn pending(&self) -> usize;
    fn wait_var(&self, v: usize) -> Result<(), String>;
    fn wait_all(&self) -> Result<(), String>;
    fn values(&self) -> Vec<u64>;
}

/// Completes async ops from another thread, after a short random delay now and then.
type Job = Box<dyn FnOnce() + Send>;

struct Completer {
    tx: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Completer {
    fn new() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::spawn(move || {
            let mut n = 0u32;
            for f in rx {
                n = n.wrapping_add(1);
                if n.is_multiple_of(64) {
                    std::thread::sleep(Duration::from_micros(50));
                }
                f();
            }
        });
        Completer {
            tx: Mutex::new(Some(tx)),
            thread: Some(thread),
        }
    }
    fn send(&self, f: impl FnOnce() + Send + 'static) {
        let tx = self.tx.lock().unwrap();
        tx.as_ref().unwrap().send(Box::new(f)).unwrap();
    }
}

impl Drop for Completer {
    fn drop(&mut self) {
        self.tx.lock().unwrap().take();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

struct RustTarget {
    engine: Engine,
    vars: Vec<Var>,
    vals: Arc<Vec<AtomicU64>>,
    completer: Arc<Completer>,
}

impl Target for RustTarget {
    fn naive(&self) -> bool {
        self.engine.kind() == EngineKind::Naive
    }
    fn push(&self, i: usize, op: &Op) -> Result<(), String> {
        let reads: Vec<Var> = op.reads.iter().map(|&r| self.vars[r].clone()).collect();
        let writes: Vec<Var> = op.write.iter().map(|&w| self.vars[w].clone()).collect();
        let args = PushArgs::new(Context::cpu(0)).reads(&reads).writes(&writes);
        let (vals, ridx, w, fail) = (self.vals.clone(), op.reads.clone(), op.write, op.fail);
        let body = move || -> Result<(), String> {
            if fail != Fail::No {
                return Err(message(i));
            }
            if let Some(w) = w {
                let v = mix(i, ridx.iter().map(|&r| vals[r].load(Ordering::Relaxed)));
                vals[w].store(v, Ordering::Relaxed);
            }
            Ok(())
        };
        let r = if op.is_async {
            let completer = self.completer.clone();
            self.engine.push_async_fn(args, move |_, done: Completion| {
                // the work happens on the engine's thread, the completion on another
                let result = body();
                completer.send(move || done.finish(result));
            })
        } else {
            self.engine.push_fn(args, move |_| body())
        };
        r.map_err(|e| e.message().to_owned())
    }
    fn pending(&self) -> usize {
        self.engine.pending_ops()
    }
    fn wait_var(&self, v: usize) -> Result<(), String> {
        self.engine
            .wait_for_var(&self.vars[v])
            .map_err(|e| e.message().to_owned())
    }
    fn wait_all(&self) -> Result<(), String> {
        self.engine
            .wait_for_all()
            .map_err(|e| e.message().to_owned())
    }
    fn values(&self) -> Vec<u64> {
        self.vals
            .iter()
            .map(|v| v.load(Ordering::Relaxed))
            .collect()
    }
}

/// The C API target: MXEnginePushSync/Async on engine variables of the global engine.
struct CTarget {
    vars: Vec<*mut c_void>,
    vals: Arc<Vec<AtomicU64>>,
    completer: Arc<Completer>,
}

struct CParam {
    i: usize,
    reads: Vec<usize>,
    write: Option<usize>,
    fail: Fail,
    vals: Arc<Vec<AtomicU64>>,
    completer: Arc<Completer>,
}

impl CParam {
    fn run(&self) -> bool {
        if self.fail != Fail::No {
            return false;
        }
        if let Some(w) = self.write {
            let v = mix(
                self.i,
                self.reads
                    .iter()
                    .map(|&r| self.vals[r].load(Ordering::Relaxed)),
            );
            self.vals[w].store(v, Ordering::Relaxed);
        }
        true
    }
}

unsafe extern "C" fn c_sync(_rc: *mut c_void, p: *mut c_void) {
    // SAFETY: `p` is the CParam this op was pushed with (alive until the deleter).
    let p = unsafe { &*(p as *const CParam) };
    if !p.run() {
        let msg = CString::new(message(p.i)).unwrap();
        // SAFETY: called from inside a running sync function, with a NUL-terminated message.
        assert_eq!(unsafe { MXEngineSetOpError(msg.as_ptr()) }, 0);
    }
}

struct SendCb(CallbackOnComplete);
// SAFETY: MXNet's contract lets a copied CallbackOnComplete complete the op from any thread.
unsafe impl Send for SendCb {}

unsafe extern "C" fn c_async(_rc: *mut c_void, cb: *mut c_void, p: *mut c_void) {
    // SAFETY: `p` is the CParam this op was pushed with.
    let p = unsafe { &*(p as *const CParam) };
    // SAFETY: the engine passes a valid CallbackOnComplete; completing later needs a copy.
    let cb = SendCb(unsafe { *(cb as *const CallbackOnComplete) });
    let error = (!p.run()).then(|| CString::new(message(p.i)).unwrap());
    p.completer.send(move || {
        let cb = cb;
        let e = error.as_ref().map_or(null(), |m| m.as_ptr());
        if (cb.0.param as usize).is_multiple_of(2) {
            // SAFETY: the struct mxrt made, completed once; `e` is NULL or NUL-terminated.
            let rc = unsafe {
                MXEngineCallbackInvoke(&cb.0 as *const CallbackOnComplete as *const c_void, e)
            };
            assert_eq!(rc, 0, "{}", last_error());
        } else {
            // SAFETY: MXNet's calling convention for the callback.
            unsafe { (cb.0.callback.unwrap())(cb.0.engine, cb.0.param, e.cast()) };
        }
    });
}

unsafe extern "C" fn c_delete(p: *mut c_void) {
    // SAFETY: made by Box::into_raw below; the deleter runs once.
    drop(unsafe { Box::from_raw(p as *mut CParam) });
}

const CPU: MXContext = MXContext {
    dev_type: 1,
    dev_id: 0,
};

impl Target for CTarget {
    fn naive(&self) -> bool {
        Engine::global().unwrap().kind() == EngineKind::Naive
    }
    fn push(&self, i: usize, op: &Op) -> Result<(), String> {
        let p = Box::into_raw(Box::new(CParam {
            i,
            reads: op.reads.clone(),
            write: op.write,
            fail: op.fail,
            vals: self.vals.clone(),
            completer: self.completer.clone(),
        }));
        let reads: Vec<*mut c_void> = op.reads.iter().map(|&r| self.vars[r]).collect();
        let writes: Vec<*mut c_void> = op.write.iter().map(|&w| self.vars[w]).collect();
        let ctx = &CPU as *const MXContext as ContextHandle;
        // SAFETY: live variables, a valid context; the op owns `p` (freed by c_delete).
        let rc = unsafe {
            if op.is_async {
                MXEnginePushAsync(
                    Some(c_async),
                    p.cast(),
                    Some(c_delete),
                    ctx,
                    reads.as_ptr() as *mut c_void,
                    reads.len() as c_int,
                    writes.as_ptr() as *mut c_void,
                    writes.len() as c_int,
                    null(),
                    0,
                    null(),
                    false,
                )
            } else {
                MXEnginePushSync(
                    Some(c_sync),
                    p.cast(),
                    Some(c_delete),
                    ctx,
                    reads.as_ptr() as *mut c_void,
                    reads.len() as c_int,
                    writes.as_ptr() as *mut c_void,
                    writes.len() as c_int,
                    null(),
                    0,
                    null(),
                )
            }
        };
        if rc == 0 { Ok(()) } else { Err(last_error()) }
    }
    fn pending(&self) -> usize {
        Engine::global().unwrap().pending_ops()
    }
    fn wait_var(&self, v: usize) -> Result<(), String> {
        // SAFETY: a live variable.
        match unsafe { MXEngineWaitForVar(self.vars[v]) } {
            0 => Ok(()),
            _ => Err(last_error()),
        }
    }
    fn wait_all(&self) -> Result<(), String> {
        match MXEngineWaitForAll() {
            0 => Ok(()),
            _ => Err(last_error()),
        }
    }
    fn values(&self) -> Vec<u64> {
        self.vals
            .iter()
            .map(|v| v.load(Ordering::Relaxed))
            .collect()
    }
}

#[derive(Default, Debug)]
struct Tally {
    ops: usize,
    failed: usize,
    var_errors: usize,
    all_errors: usize,
    checkpoints: usize,
}

fn checkpoint(t: &dyn Target, m: &mut Model, rng: &mut StdRng, what: &str, tally: &mut Tally) {
    let start = Instant::now();
    while t.pending() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: {} ops still pending after 60 s (an op waits forever)",
            t.pending()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let n = m.values.len();
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    for v in order {
        let want = m.pending(v);
        let got = t.wait_var(v);
        match (want, got) {
            (None, Ok(())) => {}
            (Some(e), Err(msg)) => {
                assert_eq!(id_of(&msg), e, "{what}: var {v} reported the wrong error");
                m.reported.insert(e);
                tally.var_errors += 1;
            }
            (w, g) => panic!("{what}: wait on var {v}: model {w:?}, engine {g:?}"),
        }
    }
    let unreported = m.unreported();
    match t.wait_all() {
        Ok(()) => assert!(
            unreported.is_empty(),
            "{what}: errors of ops {unreported:?} never reached a wait"
        ),
        Err(msg) => {
            assert!(
                unreported.contains(&id_of(&msg)),
                "{what}: WaitForAll reported {msg:?}, expected one of {unreported:?}"
            );
            tally.all_errors += 1;
        }
    }
    // everything is reported now: a second WaitForAll is clean
    assert_eq!(t.wait_all(), Ok(()), "{what}: second WaitForAll");
    m.reported.extend(m.failed.iter().copied());
    assert_eq!(t.values(), m.values, "{what}: values of the ops that ran");
    tally.checkpoints += 1;
}

fn run(t: &dyn Target, ops: &[Op], n_vars: usize, seed: u64, what: &str) -> Tally {
    let mut m = Model::new(n_vars);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED);
    let naive = t.naive();
    let mut tally = Tally::default();
    for (i, op) in ops.iter().enumerate() {
        if op.checkpoint {
            checkpoint(
                t,
                &mut m,
                &mut rng,
                &format!("{what}, before op {i}"),
                &mut tally,
            );
        }
        let r = t.push(i, op);
        m.apply(i, op, naive);
        tally.ops += 1;
        match &r {
            Ok(()) => {}
            // NaiveEngine runs the op inside the push: its failure is the push's
            Err(msg) if naive => {
                assert_eq!(*msg, message(i), "{what}: op {i}");
                m.reported.insert(i);
            }
            Err(msg) => panic!("{what}: push of op {i} failed: {msg}"),
        }
        if naive {
            assert_eq!(
                r.is_err(),
                op.fail != Fail::No,
                "{what}: op {i} push result"
            );
        }
    }
    checkpoint(
        t,
        &mut m,
        &mut rng,
        &format!("{what}, at the end"),
        &mut tally,
    );
    tally.failed = m.failed.len();
    tally
}

#[test]
fn random_failures_reach_waits_on_every_engine() {
    let n_ops = env_usize("MXRT_FAULT_OPS", 200_000);
    let n_vars = 24;
    let mut total = Tally::default();
    for (k, kind) in [EngineKind::Naive, EngineKind::Pooled, EngineKind::PerDevice]
        .into_iter()
        .enumerate()
    {
        for workers in [1, 2, 4] {
            if kind == EngineKind::Naive && workers > 1 {
                continue;
            }
            let seed = 100 + k as u64 * 10 + workers as u64;
            let ops = workload(seed, n_ops, n_vars, 0.02);
            let engine = Engine::new(EngineConfig::with_workers(kind, workers));
            let t = RustTarget {
                vars: (0..n_vars).map(|_| engine.new_variable()).collect(),
                engine,
                vals: Arc::new((0..n_vars as u64).map(AtomicU64::new).collect()),
                completer: Arc::new(Completer::new()),
            };
            let start = Instant::now();
            let tally = run(&t, &ops, n_vars, seed, &format!("{kind:?} x{workers}"));
            eprintln!("{kind:?} x{workers}: {tally:?} in {:.1?}", start.elapsed());
            assert!(tally.failed > 0 && tally.checkpoints > 2);
            if kind != EngineKind::Naive {
                assert!(tally.var_errors > 0);
            }
            total.ops += tally.ops;
            total.failed += tally.failed;
        }
    }
    eprintln!(
        "total: {} ops, {} failed on purpose",
        total.ops, total.failed
    );
}

#[test]
fn random_failures_through_the_c_api() {
    let _g = GLOBAL_ENGINE.lock().unwrap_or_else(|p| p.into_inner());
    let n_ops = env_usize("MXRT_FAULT_OPS", 200_000);
    let n_vars = 16;
    let vars: Vec<*mut c_void> = (0..n_vars)
        .map(|_| {
            let mut v = null_mut();
            // SAFETY: valid out-parameter.
            assert_eq!(unsafe { MXEngineNewVariable(&mut v) }, 0);
            v
        })
        .collect();
    let t = CTarget {
        vars,
        vals: Arc::new((0..n_vars as u64).map(AtomicU64::new).collect()),
        completer: Arc::new(Completer::new()),
    };
    let ops = workload(7, n_ops, n_vars, 0.03);
    let start = Instant::now();
    let tally = run(&t, &ops, n_vars, 7, "C API");
    eprintln!("C API: {tally:?} in {:.1?}", start.elapsed());
    assert!(tally.failed > 0);
    for &v in &t.vars {
        // SAFETY: live variables, deleted once.
        assert_eq!(unsafe { MXEngineDeleteVariable(v) }, 0);
    }
    assert_eq!(MXEngineWaitForAll(), 0, "{}", last_error());
}

/// An allocation that fails inside an engine op (a delayed array's first write) fails that op:
/// the error reaches the wait with "out of memory", and later ops on the array are skipped.
#[test]
fn allocation_failure_inside_an_op_reaches_the_wait() {
    let _g = GLOBAL_ENGINE.lock().unwrap_or_else(|p| p.into_inner());
    let shape = [777i64, 1311];
    let n = (shape[0] * shape[1]) as usize;
    let (mut src, mut dst) = (null_mut(), null_mut());
    // SAFETY (block): valid arguments throughout.
    unsafe {
        assert_eq!(
            MXNDArrayCreateEx64(shape.as_ptr(), 2, 1, 0, 0, 0, &mut src),
            0
        );
        let ones = vec![1f32; n];
        assert_eq!(MXNDArraySyncCopyFromCPU(src, ones.as_ptr().cast(), n), 0);
        assert_eq!(
            MXNDArrayCreateEx64(shape.as_ptr(), 2, 1, 0, 1, 0, &mut dst),
            0
        );
        assert_eq!(MXNDArrayWaitAll(), 0);
        assert_eq!(mxrt::capi::storage::MXStorageEmptyCache(1, 0), 0);
        mxrt::storage::Storage::global().fail_next_allocations(2);
        // the copy is an engine op writing `dst`, whose memory is allocated when it runs
        let rc = MXNDArraySyncCopyFromNDArray(dst, src, -1);
        assert_eq!(rc, -1, "the copy should fail");
        let msg = last_error();
        assert!(msg.contains("out of memory"), "{msg}");
        // reported once; the array is usable afterwards
        assert_eq!(MXNDArrayWaitToRead(dst), 0, "{}", last_error());
        assert_eq!(
            MXNDArraySyncCopyFromNDArray(dst, src, -1),
            0,
            "{}",
            last_error()
        );
        let mut back = vec![0f32; n];
        assert_eq!(MXNDArraySyncCopyToCPU(dst, back.as_mut_ptr().cast(), n), 0);
        assert!(back.iter().all(|&x| x == 1.0));
        assert_eq!(MXNDArrayFree(src), 0);
        assert_eq!(MXNDArrayFree(dst), 0);
        assert_eq!(MXNDArrayWaitAll(), 0, "{}", last_error());
    }
}
