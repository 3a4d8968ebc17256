//! The push path's public side: what a push names ([`PushArgs`]), the `Engine::push_*` calls,
//! reusable operators, variable deletion and the calling thread's bulk segment. Each call checks
//! the push and hands a body to `Inner` (`inner.rs`), which creates, queues and dispatches the op.

use super::Engine;
use super::bulk;
use super::inner::OpSpec;
use super::opr::{
    AsyncBody, AsyncFn, Completion, OpResult, Operator, RunContext, SyncBody, SyncFn, VarList,
};
use super::profiling;
use super::property::FnProperty;
use super::var::Var;
use crate::context::Context;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;

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
    pub(super) fn call(hook: Option<Self>) {
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

/// Removes repeated variables: each mutable var once, and const vars that are also mutable or
/// repeated. MXNet hangs on such ops; here they simply run.
pub(super) fn dedup(const_vars: &[Var], mutable_vars: &[Var]) -> (VarList, VarList) {
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

impl Engine {
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
        // SAFETY: a new op, created with these variables, which the caller's `op` holds
        unsafe { inner.submit(block, c, m, None) }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_found_in_short_and_long_lists() {
        let has_repeats = super::super::var::has_repeats;
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
