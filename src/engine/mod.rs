//! MXNet's dependency engine.
//!
//! Ops read (`const_vars`) and write (`mutable_vars`) variables. Two ops that share a variable one
//! of them writes run in push order; everything else may run in parallel. Three engines, chosen by
//! `MXNET_ENGINE_TYPE`: [`EngineKind::Naive`] (synchronous), [`EngineKind::Pooled`]
//! (`ThreadedEngine`) and [`EngineKind::PerDevice`] (`ThreadedEnginePerDevice`, the default).
//!
//! Layout: `var` (the per-variable queue), `opr` (ops, completions, operators), `threaded` (run and
//! complete), `executor` + `pool` (where ops run), `neighbour` (idle workers defer to a thread
//! completing ops on their CPU), `wait_help` (a thread in `wait_for_all` runs queued ops), `bulk`
//! (segments of small sync ops),
//! `exception` (how errors travel), `config` (environment), `profiling` (the profiler hook).
//!
//! ```
//! use mxrt::engine::{Engine, EngineConfig, EngineKind, PushArgs};
//! use mxrt::Context;
//! use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
//!
//! let engine = Engine::new(EngineConfig::new(EngineKind::PerDevice));
//! let var = engine.new_variable();
//! let hits = Arc::new(AtomicU64::new(0));
//! for _ in 0..10 {
//!     let h = hits.clone();
//!     engine
//!         .push_fn(PushArgs::new(Context::cpu(0)).writes(std::slice::from_ref(&var)), move |_| {
//!             h.fetch_add(1, Ordering::Relaxed);
//!             Ok(())
//!         })
//!         .unwrap();
//! }
//! engine.wait_for_var(&var).unwrap();
//! assert_eq!(var.version(), 10);
//! assert_eq!(hits.load(Ordering::Relaxed), 10);
//! ```

mod bulk;
mod config;
mod exception;
mod executor;
mod fork;
mod neighbour;
mod op_memory;
mod opr;
mod pending;
mod pool;
pub mod profiling;
mod property;
mod recycler;
mod ring;
mod signal;
mod threaded;
mod var;
mod var_queue;
mod wait_help;

pub use config::{EngineConfig, EngineKind};
pub use opr::{AsyncFn, Completion, OpResult, Operator, RunContext, SyncFn};
pub use property::FnProperty;
pub use var::Var;
pub(crate) use var::VarInner;

use crate::context::{Context, DeviceType};
use crate::error::{Error, ErrorKind, Result};
use crossbeam_utils::CachePadded;
use exception::ExceptionRef;
use executor::{Executor, PerDevice, Pooled};
use opr::{AsyncBody, OpBody, OprBlock, OprRef, SyncBody};
pub(crate) use opr::{VarList, uncounted, uncounted_slice};
use parking_lot::Mutex;
use signal::Signal;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// What `delete_variable` runs when the variable's deletion op executes.
pub type OnDelete = Box<dyn FnOnce(&RunContext) + Send>;

/// Where and how an op runs, and what it reads and writes.
#[derive(Clone, Copy, Debug)]
pub struct PushArgs<'a> {
    pub ctx: Context,
    pub const_vars: &'a [Var],
    pub mutable_vars: &'a [Var],
    pub prop: FnProperty,
    pub priority: i32,
    /// Name for the profiler (kept only while the profiler records ops).
    pub name: Option<&'a str>,
    /// A wait-style op: runs even when its inputs carry an error.
    pub wait: bool,
    /// Called once the engine holds the op's variables itself (queued on them, or copied into a
    /// bulk segment), before any op body can run on the calling thread: the borrow of
    /// `const_vars`/`mutable_vars` may end there. Not called when the push fails before that.
    pub(crate) on_queued: Option<OnQueued<'a>>,
}

/// See [`PushArgs::on_queued`].
#[derive(Clone, Copy)]
pub(crate) struct OnQueued<'a>(pub(crate) &'a dyn Fn());

impl std::fmt::Debug for OnQueued<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnQueued")
    }
}

impl OnQueued<'_> {
    fn call(hook: Option<Self>) {
        if let Some(h) = hook {
            (h.0)();
        }
    }
}

impl<'a> PushArgs<'a> {
    pub fn new(ctx: Context) -> Self {
        PushArgs {
            ctx,
            const_vars: &[],
            mutable_vars: &[],
            prop: FnProperty::Normal,
            priority: 0,
            name: None,
            wait: false,
            on_queued: None,
        }
    }
    pub fn reads(mut self, vars: &'a [Var]) -> Self {
        self.const_vars = vars;
        self
    }
    pub fn writes(mut self, vars: &'a [Var]) -> Self {
        self.mutable_vars = vars;
        self
    }
    pub fn prop(mut self, prop: FnProperty) -> Self {
        self.prop = prop;
        self
    }
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    pub fn name(mut self, name: &'a str) -> Self {
        self.name = Some(name);
        self
    }
    pub fn wait(mut self, wait: bool) -> Self {
        self.wait = wait;
        self
    }
}

/// A dependency engine. `Engine::global()` is the process-wide one the C API uses; tests may
/// create more. Dropping an engine waits for its pending ops and stops its workers.
pub struct Engine {
    inner: Box<Inner>,
}

/// Raw pointer from an op back to its engine (see `OprBlock::engine` for why it stays valid).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct EnginePtr(*const Inner);

// SAFETY: `Inner` is Sync; the pointer is only dereferenced while the engine is alive.
unsafe impl Send for EnginePtr {}
// SAFETY: as above.
unsafe impl Sync for EnginePtr {}

impl EnginePtr {
    /// # Safety
    /// The engine must still be alive (it has a pending op, or the caller holds it).
    pub(crate) unsafe fn get<'a>(self) -> &'a Inner {
        // SAFETY: per the caller's contract the pointee is alive.
        unsafe { &*self.0 }
    }
}

pub(crate) struct Inner {
    id: u64,
    config: EngineConfig,
    /// Ops created and not yet dropped.
    pending: pending::PendingOps,
    /// Errors of failed ops, for WaitForAll.
    exceptions: Mutex<Vec<ExceptionRef>>,
    shutdown: AtomicBool,
    executor: Option<Box<dyn Executor>>,
    /// Held while an op with several variables queues on them (see `var::append_all`). Taken by
    /// pushing threads only, so it has a cache line of its own.
    push_lock: CachePadded<Mutex<()>>,
}

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

impl Inner {
    fn ptr(&self) -> EnginePtr {
        EnginePtr(self as *const Inner)
    }
    pub(crate) fn is_naive(&self) -> bool {
        self.executor.is_none()
    }
    pub(crate) fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Relaxed)
    }
    pub(crate) fn dispatch(&self, op: OprRef, pusher_thread: bool) {
        match &self.executor {
            Some(x) => x.dispatch(op, pusher_thread),
            None => threaded::execute(op),
        }
    }
    pub(crate) fn record_exception(&self, e: &ExceptionRef) {
        let mut list = self.exceptions.lock();
        if list.len() >= 1024 {
            list.retain(ExceptionRef::is_pending);
        }
        list.push(e.clone());
    }
    /// Called when an `OprBlock` is dropped.
    pub(crate) fn op_released(&self) {
        self.pending.dropped();
    }
    /// Blocks until no op is pending; with `help`, the calling thread runs queued CPU ops
    /// meanwhile (see `wait_help`).
    fn wait_idle(&self, help: bool) {
        if help
            && self.config.wait_helps
            && let Some(x) = &self.executor
            && wait_help::help_drain(x.as_ref(), &self.pending)
        {
            return;
        }
        self.pending.wait_zero();
    }

    /// Creates an op on `const_vars` and `mutable_vars` (distinct variables). The op does not
    /// count references to them: the caller's borrow, passed on to [`submit`](Self::submit), keeps
    /// them alive until each variable holds itself for the op queued on it.
    fn new_op<B: OpBody + 'static>(
        &self,
        body: B,
        const_vars: &[Var],
        mutable_vars: &[Var],
        spec: OpSpec,
    ) -> OprRef {
        self.pending.created();
        let n_const = const_vars.len();
        let waits = n_const + mutable_vars.len() + 1;
        let vars = op_memory::op_vars(const_vars, mutable_vars);
        let done = self
            .is_naive()
            .then(|| Arc::new(Signal::for_current_thread()));
        let cold = (spec.name.is_some() || done.is_some()).then(|| {
            Box::new(opr::OpCold {
                name: spec.name,
                done,
            })
        });
        op_memory::alloc_op(OprBlock {
            engine: self.ptr(),
            vars,
            n_const: u32::try_from(n_const).expect("fewer than 2^32 variables"),
            wait: AtomicU32::new(u32::try_from(waits).expect("fewer than 2^32 variables")),
            ctx: spec.ctx,
            priority: spec.priority,
            prop: spec.prop,
            wait_op: spec.wait,
            run_inline: spec.run_inline,
            error_flags: AtomicU8::new(0),
            exception: Mutex::new(None),
            cold,
            body: std::mem::ManuallyDrop::new(body),
        })
    }

    /// Queues `op` on its variables and dispatches it if nothing blocks it; NaiveEngine runs it
    /// now and returns its error. `const_vars`/`mutable_vars` are the variables `op` was created
    /// with, borrowed from the caller, which keeps them alive until the op is queued on them.
    fn submit(
        &self,
        op: OprRef,
        const_vars: &[Var],
        mutable_vars: &[Var],
        on_queued: Option<OnQueued<'_>>,
    ) -> Result<()> {
        if self.is_naive() {
            // the op uses its variables while it runs, here, after the caller's borrow may end
            let _held: VarList = match on_queued {
                Some(_) => const_vars.iter().chain(mutable_vars).cloned().collect(),
                None => VarList::new(),
            };
            OnQueued::call(on_queued);
            threaded::execute(op.clone());
            if let Some(done) = op.done_signal() {
                done.wait();
            }
            let err = op.exception.lock().take();
            return match err.and_then(|e| e.take()) {
                Some(msg) => Err(Error::new(ErrorKind::OpFailed, msg.to_string())),
                None => Ok(()),
            };
        }
        let granted = var::append_all(&op, const_vars, mutable_vars, &self.push_lock) as u32;
        // every variable now holds itself while the op is queued on it (or runs)
        OnQueued::call(on_queued);
        // This reference now belongs to the op's wait count: if grants are still pending, the
        // last one takes it back (`QueuedOp::grant`) and the op may be gone as soon as we count.
        let op = std::mem::ManuallyDrop::new(op);
        if op.wait.fetch_sub(granted + 1, Ordering::AcqRel) == granted + 1 {
            self.dispatch(std::mem::ManuallyDrop::into_inner(op), true);
        }
        Ok(())
    }

    fn check_push(&self, ctx: Context, prop: FnProperty) -> Result<()> {
        if ctx.dev_type == DeviceType::Gpu {
            return Err(Error::not_supported(format!(
                "cannot run an op on {ctx}: GPU support is not built into this mxrt yet"
            )));
        }
        if self.is_shutdown() && prop != FnProperty::DeleteVar {
            return Err(Error::new(
                ErrorKind::Shutdown,
                "the engine has been shut down (MXNotifyShutdown); it only runs variable deletions now",
            ));
        }
        Ok(())
    }

    /// Checks a push (device, shutdown), pushes the calling thread's bulk segment first, then
    /// queues the op on `args`' variables.
    fn push_body<B: OpBody + 'static>(&self, body: B, args: &PushArgs<'_>) -> Result<()> {
        self.check_push(args.ctx, args.prop)?;
        self.flush_bulk()?;
        self.enqueue(body, args, false)
    }

    /// Creates the op and queues it on `args`' variables, unchecked (for the engine's own wait and
    /// lease ops too). Repeated variables are merged; lists without repeats are used as they are,
    /// without taking references: the borrow keeps them alive until the op is queued.
    fn enqueue<B: OpBody + 'static>(
        &self,
        body: B,
        args: &PushArgs<'_>,
        run_inline: bool,
    ) -> Result<()> {
        let (c, m) = (args.const_vars, args.mutable_vars);
        let spec = OpSpec::from_args(args, run_inline);
        if var::has_repeats(c, m) {
            let (c, m) = dedup(c, m);
            let op = self.new_op(body, &c, &m, spec);
            return self.submit(op, &c, &m, args.on_queued);
        }
        let op = self.new_op(body, c, m, spec);
        self.submit(op, c, m, args.on_queued)
    }

    fn flush_bulk(&self) -> Result<()> {
        match bulk::take_for(self.ptr()) {
            Some(seg) => self.push_segment(seg),
            None => Ok(()),
        }
    }

    fn push_segment(&self, seg: bulk::Segment) -> Result<()> {
        let bulk::Segment {
            ctx,
            fns,
            const_vars,
            mutable_vars,
            ..
        } = seg;
        let body = SyncBody(move |_rc: &RunContext| {
            let rc = RunContext::new(ctx, true);
            fns.iter().try_for_each(|f| f(&rc))
        });
        // the segment's ops were checked when they were appended; their variables may repeat
        let args = PushArgs::new(ctx)
            .reads(&const_vars)
            .writes(&mutable_vars)
            .name("ImperativeBulk");
        self.enqueue(body, &args, false)
    }
}

/// The scheduling fields of an op being created.
struct OpSpec {
    ctx: Context,
    prop: FnProperty,
    priority: i32,
    name: Option<Arc<str>>,
    wait: bool,
    run_inline: bool,
}

impl OpSpec {
    fn from_args(args: &PushArgs<'_>, run_inline: bool) -> Self {
        OpSpec {
            ctx: args.ctx,
            prop: args.prop,
            priority: args.priority,
            name: op_name(args.name),
            wait: args.wait,
            run_inline,
        }
    }
}

/// Keeps an op's name only while the profiler records ops (copying it costs an allocation).
fn op_name(name: Option<&str>) -> Option<Arc<str>> {
    name.filter(|_| profiling::recording()).map(Arc::from)
}

/// Removes repeated variables: each mutable var once, and const vars that are also mutable or
/// repeated. MXNet hangs on such ops; here they simply run.
fn dedup(const_vars: &[Var], mutable_vars: &[Var]) -> (VarList, VarList) {
    fn contains(list: &[Var], v: &Var) -> bool {
        list.iter().any(|x| x.same_as(v))
    }
    if const_vars.len() + mutable_vars.len() <= 16 {
        let mut m = VarList::new();
        for v in mutable_vars {
            if !contains(&m, v) {
                m.push(v.clone());
            }
        }
        let mut c = VarList::new();
        for v in const_vars {
            if !contains(&m, v) && !contains(&c, v) {
                c.push(v.clone());
            }
        }
        return (c, m);
    }
    let mut seen = std::collections::HashSet::with_capacity(const_vars.len() + mutable_vars.len());
    let m: VarList = mutable_vars
        .iter()
        .filter(|v| seen.insert(v.addr()))
        .cloned()
        .collect();
    let c: VarList = const_vars
        .iter()
        .filter(|v| seen.insert(v.addr()))
        .cloned()
        .collect();
    (c, m)
}

fn op_failed(msg: Arc<str>) -> Error {
    Error::new(ErrorKind::OpFailed, msg.to_string())
}

fn refuse_inside_op(what: &str) -> Result<()> {
    if threaded::inside_op() {
        return Err(Error::invalid(format!(
            "{what} was called from inside an engine operation; waiting there would deadlock"
        )));
    }
    Ok(())
}

static GLOBAL: OnceLock<std::result::Result<Engine, Error>> = OnceLock::new();

impl Engine {
    /// An engine with the given configuration. Worker threads start on first use.
    pub fn new(config: EngineConfig) -> Engine {
        let executor: Option<Box<dyn Executor>> = match config.kind {
            EngineKind::Naive => None,
            EngineKind::Pooled => Some(Box::new(Pooled::new(config.clone()))),
            EngineKind::PerDevice => Some(Box::new(PerDevice::new(config.clone()))),
        };
        Engine {
            inner: Box::new(Inner {
                id: NEXT_ENGINE_ID.fetch_add(1, Ordering::Relaxed),
                config,
                pending: pending::PendingOps::new(),
                exceptions: Mutex::new(Vec::new()),
                shutdown: AtomicBool::new(false),
                push_lock: CachePadded::new(Mutex::new(())),
                executor,
            }),
        }
    }

    /// An engine configured from MXNet's environment variables.
    pub fn from_env() -> Result<Engine> {
        Ok(Engine::new(EngineConfig::from_env()?))
    }

    /// The process-wide engine, created from the environment on first use. A bad
    /// `MXNET_ENGINE_TYPE` is reported by every call.
    pub fn global() -> Result<&'static Engine> {
        GLOBAL
            .get_or_init(|| {
                fork::register();
                Engine::from_env()
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn kind(&self) -> EngineKind {
        self.inner.config.kind
    }
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn new_variable(&self) -> Var {
        Var::new()
    }

    /// Pushes an asynchronous op: `body` gets a [`Completion`] it must consume, from any thread.
    pub fn push_async(&self, body: Arc<AsyncFn>, args: PushArgs<'_>) -> Result<()> {
        self.push_async_fn(args, move |rc, done| body(rc, done))
    }

    /// [`push_async`](Self::push_async) with a closure (stored inline in the op: one allocation).
    pub fn push_async_fn<F>(&self, args: PushArgs<'_>, f: F) -> Result<()>
    where
        F: Fn(&RunContext, Completion) + Send + Sync + 'static,
    {
        self.inner.push_body(AsyncBody(f), &args)
    }

    /// Pushes a synchronous op (it completes when `f` returns). Eligible for bulking.
    pub fn push_sync(&self, f: Arc<SyncFn>, args: PushArgs<'_>) -> Result<()> {
        self.push_fn(args, move |rc| f(rc))
    }

    /// True when a sync push with `args` joins the calling thread's bulk segment.
    fn bulks(&self, args: &PushArgs<'_>) -> bool {
        !self.inner.is_naive()
            && args.prop == FnProperty::Normal
            && args.priority == 0
            && !args.wait
            && bulk::size() > 0
    }

    fn append_bulk(&self, f: Arc<SyncFn>, args: &PushArgs<'_>) -> Result<()> {
        let inner = &*self.inner;
        {
            inner.check_push(args.ctx, args.prop)?;
            let flush = bulk::append(inner.ptr(), args.ctx, f, args.const_vars, args.mutable_vars);
            // the segment holds its own references to the variables
            OnQueued::call(args.on_queued);
            if let Some(seg) = flush.before {
                // SAFETY: a segment is only kept for a live engine (engines flush theirs on drop).
                unsafe { seg.engine.get() }.push_segment(seg)?;
            }
            if let Some(seg) = flush.full {
                inner.push_segment(seg)?;
            }
        }
        Ok(())
    }

    /// [`push_sync`](Self::push_sync) with a closure (stored inline in the op: one allocation).
    pub fn push_fn<F>(&self, args: PushArgs<'_>, f: F) -> Result<()>
    where
        F: Fn(&RunContext) -> OpResult + Send + Sync + 'static,
    {
        if self.bulks(&args) {
            return self.append_bulk(Arc::new(f), &args);
        }
        self.inner.push_body(SyncBody(f), &args)
    }

    /// Creates a reusable operator; each [`push_operator`](Self::push_operator) runs it once.
    pub fn new_operator(
        &self,
        body: Arc<AsyncFn>,
        const_vars: &[Var],
        mutable_vars: &[Var],
        prop: FnProperty,
        name: Option<&str>,
    ) -> Result<Arc<Operator>> {
        let (c, m) = dedup(const_vars, mutable_vars);
        Ok(Arc::new(Operator {
            engine_id: self.inner.id,
            body,
            const_vars: c,
            mutable_vars: m,
            prop,
            name: name.map(Arc::from),
        }))
    }

    pub fn push_operator(&self, op: &Arc<Operator>, ctx: Context, priority: i32) -> Result<()> {
        let inner = &*self.inner;
        if op.engine_id != inner.id {
            return Err(Error::invalid("the operator belongs to another engine"));
        }
        inner.check_push(ctx, op.prop)?;
        inner.flush_bulk()?;
        let spec = OpSpec {
            ctx,
            prop: op.prop,
            priority,
            name: op.name.clone().filter(|_| profiling::recording()),
            wait: false,
            run_inline: false,
        };
        let body = op.body.clone();
        // the caller's `op` keeps its variables alive until the block is queued on them
        let (c, m) = (&op.const_vars[..], &op.mutable_vars[..]);
        let block = inner.new_op(
            AsyncBody(move |rc: &RunContext, done: Completion| body(rc, done)),
            c,
            m,
            spec,
        );
        inner.submit(block, c, m, None)
    }

    /// Frees an operator after every pending push of it has finished.
    pub fn delete_operator(&self, op: Arc<Operator>) -> Result<()> {
        let vars: VarList = op
            .const_vars
            .iter()
            .chain(&op.mutable_vars)
            .cloned()
            .collect();
        let holder = Mutex::new(Some(op));
        let f = move |_: &RunContext| {
            holder.lock().take();
            Ok(())
        };
        let args = PushArgs::new(Context::cpu(0))
            .writes(&vars)
            .prop(FnProperty::DeleteVar)
            .name("DeleteOperator");
        self.inner.push_body(SyncBody(f), &args)
    }

    /// Deletes `var` after every op queued on it: `on_delete` runs then (on the worker that runs
    /// the deletion), and the variable is freed when its last reference goes.
    pub fn delete_variable(
        &self,
        on_delete: Option<OnDelete>,
        ctx: Context,
        var: Var,
    ) -> Result<()> {
        let holder = Mutex::new(on_delete);
        let f = move |rc: &RunContext| {
            if let Some(f) = holder.lock().take() {
                f(rc);
            }
            Ok(())
        };
        let vars = [var];
        let args = PushArgs::new(ctx)
            .writes(&vars)
            .prop(FnProperty::DeleteVar)
            .name("DeleteVariable");
        self.inner.push_body(SyncBody(f), &args)
    }

    /// Waits until every write pushed to `var` before this call has finished, then reports (once)
    /// the error carried by `var`, if any.
    pub fn wait_for_var(&self, var: &Var) -> Result<()> {
        refuse_inside_op("WaitForVar")?;
        let inner = &*self.inner;
        inner.flush_bulk()?;
        if inner.is_naive() {
            return Ok(());
        }
        if var.has_pending_write() {
            let signal = Arc::new(Signal::for_current_thread());
            let s = signal.clone();
            let body = SyncBody(move |_: &RunContext| {
                s.set();
                Ok(())
            });
            let reads = std::slice::from_ref(var);
            let args = PushArgs::new(Context::cpu(0))
                .reads(reads)
                .wait(true)
                .name("WaitForVar");
            // runs inline on the thread that completes the last write: no pool hop, no wake-up
            inner.enqueue(body, &args, true)?;
            signal.wait();
        }
        match var.pending_exception().and_then(|e| e.take()) {
            Some(msg) => Err(op_failed(msg)),
            None => Ok(()),
        }
    }

    /// Waits until every op pushed so far has finished, then reports (once) the first error of a
    /// failed op that no wait has reported yet; all such errors count as reported afterwards.
    /// Meanwhile the calling thread runs queued CPU ops itself while that pays, unless
    /// [`EngineConfig::wait_helps`] is off.
    pub fn wait_for_all(&self) -> Result<()> {
        refuse_inside_op("WaitForAll")?;
        let inner = &*self.inner;
        inner.flush_bulk()?;
        inner.wait_idle(true);
        crate::allocator::trim_after_burst();
        let list = std::mem::take(&mut *inner.exceptions.lock());
        let mut first = None;
        for e in &list {
            if let Some(msg) = e.take() {
                first.get_or_insert(msg);
            }
        }
        match first {
            Some(msg) => Err(op_failed(msg)),
            None => Ok(()),
        }
    }

    /// MXNotifyShutdown: no new ops are accepted (except variable deletions), queued ops are
    /// skipped, and the call returns once the engine is idle.
    pub fn notify_shutdown(&self) -> Result<()> {
        let _ = self.inner.flush_bulk();
        self.inner.shutdown.store(true, Ordering::SeqCst);
        refuse_inside_op("MXNotifyShutdown")?;
        self.inner.wait_idle(false);
        Ok(())
    }

    pub fn is_shutdown(&self) -> bool {
        self.inner.is_shutdown()
    }

    /// Sets the calling thread's bulk size and returns the previous one. NaiveEngine never bulks
    /// and always reports 0.
    pub fn set_bulk_size(&self, size: usize) -> Result<usize> {
        if self.inner.is_naive() {
            return Ok(0);
        }
        let (old, full) = bulk::set_size(size);
        if let Some(seg) = full {
            // SAFETY: segments only exist for live engines.
            unsafe { seg.engine.get() }.push_segment(seg)?;
        }
        Ok(old)
    }

    /// The calling thread's bulk size.
    pub fn bulk_size(&self) -> usize {
        if self.inner.is_naive() {
            0
        } else {
            bulk::size()
        }
    }

    /// Takes read (`write == false`) or write access to `var` on the calling thread, as an op
    /// would: it waits for the earlier conflicting ops, and later ops wait for the returned
    /// [`VarLease`] to be dropped. When nothing is queued on the variable this costs two lock
    /// round trips and no op. Reports (once) an error the variable carries, like `wait_for_var`.
    /// Used for synchronous copies (`MXNDArraySyncCopyFromCPU/ToCPU`).
    pub fn lease(&self, var: &Var, write: bool) -> Result<VarLease<'_>> {
        let inner = &*self.inner;
        let report = |var: &Var| match var.pending_exception().and_then(|e| e.take()) {
            Some(msg) => Err(op_failed(msg)),
            None => Ok(()),
        };
        if inner.is_naive() {
            report(var)?;
            return Ok(VarLease {
                engine: self,
                var: None,
                write,
                completion: None,
            });
        }
        inner.flush_bulk()?;
        if var.try_grant_now(write) {
            let lease = VarLease {
                engine: self,
                var: Some(var.clone()),
                write,
                completion: None,
            };
            report(var)?;
            return Ok(lease);
        }
        refuse_inside_op(if write {
            "a synchronous write"
        } else {
            "a synchronous read"
        })?;
        // Slow path: an async op holds the access and hands its completion to this thread.
        let slot: Arc<Mutex<Option<Completion>>> = Arc::new(Mutex::new(None));
        let signal = Arc::new(Signal::for_current_thread());
        let (slot2, signal2) = (slot.clone(), signal.clone());
        let body = AsyncBody(move |_: &RunContext, done: Completion| {
            *slot2.lock() = Some(done);
            signal2.set();
        });
        let vars = [var.clone()];
        let args = if write {
            PushArgs::new(Context::cpu(0)).writes(&vars)
        } else {
            PushArgs::new(Context::cpu(0)).reads(&vars)
        };
        inner.enqueue(body, &args.wait(true).name("VarLease"), true)?;
        signal.wait();
        let completion = slot.lock().take();
        let lease = VarLease {
            engine: self,
            var: None,
            write,
            completion,
        };
        report(var)?;
        Ok(lease)
    }

    /// Waits until no op is pending and stops every worker thread (before `fork()`).
    pub(crate) fn stop_workers(&self) {
        let _ = self.inner.flush_bulk();
        self.inner.wait_idle(false);
        if let Some(x) = &self.inner.executor {
            x.stop();
        }
    }

    /// Starts the worker threads again after `stop_workers`.
    pub(crate) fn start_workers(&self, cpu_workers: Option<usize>) {
        if let Some(x) = &self.inner.executor {
            x.restart(cpu_workers);
        }
    }

    /// Number of ops pushed and not yet finished.
    pub fn pending_ops(&self) -> usize {
        self.inner.pending.count() as usize
    }
}

/// Access to a variable held by the calling thread (see [`Engine::lease`]); released on drop.
pub struct VarLease<'e> {
    engine: &'e Engine,
    /// Set when the access was granted directly (no op).
    var: Option<Var>,
    write: bool,
    /// Set when an op holds the access for us.
    completion: Option<Completion>,
}

impl Drop for VarLease<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.completion.take() {
            c.done();
        }
        if let Some(var) = self.var.take() {
            let mut ready = var::Ready::new();
            if self.write {
                var.complete_write(None, &mut ready);
            } else {
                var.complete_read(&mut ready);
            }
            if !ready.is_empty() {
                self.engine.inner.dispatch_ready(ready);
            }
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.inner.flush_bulk();
        self.inner.wait_idle(false);
        if let Some(x) = &self.inner.executor {
            x.stop();
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("kind", &self.kind())
            .field("pending", &self.pending_ops())
            .finish()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Engine>();
    is::<Var>();
    is::<Completion>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_lives_while_ops_are_queued_on_it_and_no_longer() {
        let engine = Engine::new(EngineConfig::new(EngineKind::PerDevice));
        let (dropped, kept) = (engine.new_variable(), engine.new_variable());
        let weak = Arc::downgrade(&dropped.0);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Mutex::new(rx);
        let both = [dropped.clone(), kept.clone()];
        let args = PushArgs::new(Context::cpu(0));
        engine
            .push_fn(args.writes(&both), move |_| {
                rx.lock().recv().ok();
                Ok(())
            })
            .unwrap();
        let ran = Arc::new(AtomicU32::new(0));
        for i in 0..10 {
            let r = ran.clone();
            let vars = [dropped.clone()];
            let rw = if i % 2 == 0 {
                args.reads(&vars)
            } else {
                args.writes(&vars)
            };
            engine
                .push_fn(rw, move |_| {
                    r.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                })
                .unwrap();
        }
        drop((dropped, both));
        assert!(weak.upgrade().is_some(), "ops queued on it keep it");
        tx.send(()).unwrap();
        engine.wait_for_all().unwrap();
        assert_eq!(ran.load(Ordering::Relaxed), 10);
        assert!(weak.upgrade().is_none(), "freed once its last op finished");
        assert_eq!(
            Arc::strong_count(&kept.0),
            1,
            "an idle variable holds no reference"
        );
        assert_eq!(kept.version(), 1);
    }

    #[test]
    fn repeats_are_found_in_short_and_long_lists() {
        let has_repeats = var::has_repeats;
        for n in [2usize, 5, 8, 9, 17, 40] {
            let vars: Vec<Var> = (0..n).map(|_| Var::new()).collect();
            let (c, m) = vars.split_at(n / 2);
            assert!(!has_repeats(c, m), "{n} distinct variables");
            // the last variable again, as a read and as a write
            let mut c2 = c.to_vec();
            c2.push(vars[n - 1].clone());
            assert!(has_repeats(&c2, m), "{n} variables, one read twice");
            let mut m2 = m.to_vec();
            m2.push(vars[0].clone());
            assert!(has_repeats(c, &m2), "{n} variables, one read and written");
            let (dc, dm) = dedup(&c2, &m2);
            assert_eq!(dc.len() + dm.len(), n);
            assert_eq!(dm.len(), m2.len(), "a written variable stays written");
        }
    }
}
