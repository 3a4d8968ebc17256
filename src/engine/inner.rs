//! The engine's state (`Inner`) and everything it does: create an op, queue it on its
//! variables, dispatch it to a pool (or run it, NaiveEngine), complete it and release the ops
//! waiting for it. The public API (`push`, `wait`, `lease`, `lifecycle`) calls into it; ops reach it
//! back through an [`EnginePtr`].

use super::bulk;
use super::config::EngineConfig;
use super::exception::ExceptionRef;
use super::executor::Executor;
use super::op_memory;
use super::opr::{self, ERROR_SET, OpBody, OprBlock, OprRef, RunContext, SyncBody, VarList};
use super::pending;
use super::profiling;
use super::property::FnProperty;
use super::push::{OnQueued, PushArgs, dedup};
use super::signal::Signal;
use super::threaded;
use super::var::{self, Ready, Var};
use super::wait_help;
use crate::context::{Context, DeviceType};
use crate::error::{Error, ErrorKind, Result};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

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

/// One engine's state, shared by its API (`Engine` owns it in a `Box`, so its address is stable),
/// its ops (each holds an [`EnginePtr`] to it) and its worker pools.
pub(crate) struct Inner {
    pub(super) id: u64,
    pub(super) config: EngineConfig,
    /// Ops created and not yet dropped.
    pub(super) pending: pending::PendingOps,
    /// Errors of failed ops, for WaitForAll.
    pub(super) exceptions: Mutex<Vec<ExceptionRef>>,
    pub(super) shutdown: AtomicBool,
    pub(super) executor: Option<Box<dyn Executor>>,
    /// Held while an op with several variables queues on them (see `var::append_all`). Taken by
    /// pushing threads only, so it has a cache line of its own.
    pub(super) push_lock: CachePadded<Mutex<()>>,
}

impl Inner {
    pub(super) fn ptr(&self) -> EnginePtr {
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
    pub(super) fn wait_idle(&self, help: bool) {
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
    /// them alive until each variable holds itself for the op queued on it. An op that is dropped
    /// instead of submitted never touches them.
    pub(super) fn new_op<B: OpBody + 'static>(
        &self,
        body: B,
        const_vars: &[Var],
        mutable_vars: &[Var],
        spec: OpSpec,
    ) -> OprRef {
        self.pending.created();
        let n_const = const_vars.len();
        let waits = n_const + mutable_vars.len() + 1;
        // SAFETY: the op uses its variables only once submitted, and `submit`'s caller promises
        // that they are these, kept alive until the op is queued on them.
        let vars = unsafe { op_memory::op_vars(const_vars, mutable_vars) };
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
    /// now and returns its error.
    ///
    /// # Safety
    /// `op` is a new op of this engine from [`new_op`](Self::new_op), not yet submitted, and
    /// `const_vars`/`mutable_vars` are the variables it was created with: the op holds uncounted
    /// copies of them, which the caller's borrow keeps alive until the op is queued on them.
    pub(super) unsafe fn submit(
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
        // SAFETY: `new_op` set `op.wait` to one per variable plus one for this reference, which
        // goes to the wait count below; the variables are the op's own (this fn's contract).
        let granted =
            unsafe { var::append_all(&op, const_vars, mutable_vars, &self.push_lock) } as u32;
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

    pub(super) fn check_push(&self, ctx: Context, prop: FnProperty) -> Result<()> {
        if ctx.dev_type == DeviceType::Gpu {
            // the device must exist (its context is made on first use)
            crate::gpu::context(i64::from(ctx.dev_id))
                .map_err(|e| e.context(format!("cannot run an op on {ctx}")))?;
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
    pub(super) fn push_body<B: OpBody + 'static>(
        &self,
        body: B,
        args: &PushArgs<'_>,
    ) -> Result<()> {
        self.check_push(args.ctx, args.prop)?;
        self.flush_bulk()?;
        self.enqueue(body, args, false)
    }

    /// Creates the op and queues it on `args`' variables, unchecked (for the engine's own wait and
    /// lease ops too). Repeated variables are merged; lists without repeats are used as they are,
    /// without taking references: the borrow keeps them alive until the op is queued.
    pub(super) fn enqueue<B: OpBody + 'static>(
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
            // SAFETY: a new op, created with these variables, which `c` and `m` hold
            return unsafe { self.submit(op, &c, &m, args.on_queued) };
        }
        let op = self.new_op(body, c, m, spec);
        // SAFETY: a new op, created with these variables, borrowed from `args` for the call
        unsafe { self.submit(op, c, m, args.on_queued) }
    }

    pub(super) fn flush_bulk(&self) -> Result<()> {
        match bulk::take_for(self.ptr()) {
            Some(seg) => self.push_segment(seg),
            None => Ok(()),
        }
    }

    pub(super) fn push_segment(&self, seg: bulk::Segment) -> Result<()> {
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

    /// Completes `op` (from any thread): records its error, releases its variables and
    /// dispatches the ops that became ready.
    pub(crate) fn on_complete(op: OprRef, error: Option<String>) {
        let engine = op.engine();
        if engine.is_naive() {
            if let Some(msg) = error {
                *op.exception.lock() = Some(ExceptionRef::new(msg.into()));
            }
            for v in op.mutable_vars() {
                v.bump_version();
            }
            if let Some(s) = op.done_signal() {
                s.set();
            }
            return;
        }
        let exception = match error {
            Some(msg) => {
                let e = ExceptionRef::new(msg.into());
                engine.record_exception(&e);
                *op.exception.lock() = Some(e.clone());
                op.set_error_flag(ERROR_SET);
                Some(e)
            }
            None if op.has_error_flag(ERROR_SET) => op.exception.lock().clone(),
            None => None,
        };
        let mut ready = Ready::new();
        // the locks below wait for each line in turn: start fetching them all first
        if op.vars.len() > 1 {
            for v in op.vars.iter() {
                v.prefetch();
            }
        }
        for v in op.const_vars() {
            // SAFETY: the op ran (or was skipped) with every access granted; this ends each one
            // once, and the variable is alive because it is busy with the op.
            unsafe { v.complete_read(&mut ready) };
        }
        for v in op.mutable_vars() {
            // SAFETY: as above.
            unsafe { v.complete_write(exception.as_ref(), &mut ready) };
        }
        if !ready.is_empty() {
            engine.dispatch_ready(ready);
        }
        // Released last: until then the op's pending count keeps the engine alive for this
        // thread, which may be a thread outside the engine's pools that nothing else keeps out of
        // a dropping engine (the ops it dispatched may run and finish before `dispatch` returns).
        super::op_memory::release(op);
    }

    /// Grants the accesses variables released and runs the ops that got their last one.
    pub(crate) fn dispatch_ready(&self, ready: Ready) {
        for r in ready {
            if let Some(op) = r.grant() {
                self.dispatch(op, false);
                #[cfg(test)]
                super::test_hooks::reached(super::test_hooks::Point::AfterDispatch);
            }
        }
    }
}

/// The scheduling fields of an op being created.
pub(super) struct OpSpec {
    pub(super) ctx: Context,
    pub(super) prop: FnProperty,
    pub(super) priority: i32,
    pub(super) name: Option<Arc<str>>,
    pub(super) wait: bool,
    pub(super) run_inline: bool,
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

#[cfg(test)]
mod tests {
    use super::super::{Engine, EngineConfig, EngineKind};
    use super::*;
    use std::sync::atomic::AtomicU32;

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
}
