//! Where a ready op runs: the scheduling policies of ThreadedEnginePerDevice and ThreadedEngine
//! (spec §5.5–5.6). Both hand ops to `WorkerPool`s created on first use.

use super::config::EngineConfig;
use super::opr::OprRef;
use super::pool::{QueueOrder, WorkerPool};
use super::property::FnProperty;
use super::threaded::execute;
use crate::context::DeviceType;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

pub(crate) trait Executor: Send + Sync {
    /// Runs `op`, whose dependencies are all granted. `pusher_thread` is true when the op became
    /// ready inside the push that created it.
    fn dispatch(&self, op: OprRef, pusher_thread: bool);
    /// Takes a queued op of a normal CPU pool (not the priority or copy pools) for the calling
    /// thread to run (see `wait_help`).
    fn take_cpu_op(&self) -> Option<OprRef>;
    /// Stops and joins every worker thread.
    fn stop(&self);
    /// Starts the workers of every pool again after `stop`; `cpu_workers` overrides the size of
    /// the CPU pools (a forked child uses MXNET_MP_WORKER_NTHREADS).
    fn restart(&self, cpu_workers: Option<usize>);
}

/// Inline execution on the pushing thread (kAsync, and kDeleteVar in the per-device engine).
fn runs_inline(op: &OprRef, pusher_thread: bool, delete_var_inline: bool) -> bool {
    op.run_inline
        || (pusher_thread
            && (op.prop == FnProperty::Async
                || (delete_var_inline && op.prop == FnProperty::DeleteVar)))
}

/// Pools created on first use, indexed by device id.
struct LazyPools {
    first: [OnceLock<WorkerPool>; 16],
    rest: Mutex<HashMap<i32, Arc<WorkerPool>>>,
}

impl LazyPools {
    fn new() -> Self {
        LazyPools {
            first: [const { OnceLock::new() }; 16],
            rest: Mutex::new(HashMap::new()),
        }
    }
    fn with<R>(
        &self,
        dev_id: i32,
        make: impl FnOnce() -> WorkerPool,
        f: impl FnOnce(&WorkerPool) -> R,
    ) -> R {
        match usize::try_from(dev_id).ok().and_then(|i| self.first.get(i)) {
            Some(cell) => f(cell.get_or_init(make)),
            None => {
                let pool = self
                    .rest
                    .lock()
                    .entry(dev_id)
                    .or_insert_with(|| Arc::new(make()))
                    .clone();
                f(&pool)
            }
        }
    }
    fn take_op(&self) -> Option<OprRef> {
        self.first
            .iter()
            .filter_map(OnceLock::get)
            .find_map(WorkerPool::try_take)
            .or_else(|| self.rest.lock().values().find_map(|p| p.try_take()))
    }
    fn stop(&self) {
        for p in self.first.iter().filter_map(OnceLock::get) {
            p.stop();
        }
        for p in self.rest.lock().values() {
            p.stop();
        }
    }
    fn start(&self, n: usize) {
        for p in self.first.iter().filter_map(OnceLock::get) {
            p.start(n);
        }
        for p in self.rest.lock().values() {
            p.start(n);
        }
    }
}

/// Runs a GPU op with its device's context current on the worker thread.
fn execute_on_gpu(op: OprRef) {
    crate::gpu::bind_thread(op.ctx.dev_id);
    execute(op);
}

/// ThreadedEnginePerDevice: one FIFO pool per CPU device id, one shared CPU priority pool; per
/// GPU a pool of workers, one of copy workers and one of priority workers. A GPU worker runs
/// its ops on its own stream of the device (`gpu::stream`), made on its first GPU op.
pub(crate) struct PerDevice {
    config: EngineConfig,
    cpu: LazyPools,
    cpu_priority: OnceLock<WorkerPool>,
    gpu: LazyPools,
    gpu_copy: LazyPools,
    gpu_priority: LazyPools,
}

impl PerDevice {
    pub(crate) fn new(config: EngineConfig) -> Self {
        PerDevice {
            config,
            cpu: LazyPools::new(),
            cpu_priority: OnceLock::new(),
            gpu: LazyPools::new(),
            gpu_copy: LazyPools::new(),
            gpu_priority: LazyPools::new(),
        }
    }

    fn dispatch_gpu(&self, op: OprRef) {
        let (idle, id) = (self.config.idle, op.ctx.dev_id);
        let front = op.prop == FnProperty::DeleteVar;
        let (pools, n, kind, order) = match op.prop {
            FnProperty::CopyFromGpu | FnProperty::CopyToGpu => (
                &self.gpu_copy,
                self.config.gpu_copy_workers,
                "copy",
                QueueOrder::Priority,
            ),
            FnProperty::GpuPrioritized => (
                &self.gpu_priority,
                self.config.gpu_workers,
                "prio",
                QueueOrder::Priority,
            ),
            _ => (&self.gpu, self.config.gpu_workers, "", QueueOrder::Fifo),
        };
        pools.with(
            id,
            || WorkerPool::new(&format!("mxrt-gpu{id}{kind}"), n.max(1), order, idle, execute_on_gpu),
            |p| p.push(op, front),
        );
    }

    fn gpu_pools(&self) -> [(&LazyPools, usize); 3] {
        [
            (&self.gpu, self.config.gpu_workers.max(1)),
            (&self.gpu_copy, self.config.gpu_copy_workers.max(1)),
            (&self.gpu_priority, self.config.gpu_workers.max(1)),
        ]
    }
}

impl Executor for PerDevice {
    fn dispatch(&self, op: OprRef, pusher_thread: bool) {
        if runs_inline(&op, pusher_thread, true) {
            execute(op);
            return;
        }
        if op.ctx.dev_type == DeviceType::Gpu {
            self.dispatch_gpu(op);
            return;
        }
        let idle = self.config.idle;
        if op.prop == FnProperty::CpuPrioritized {
            let n = self.config.cpu_priority_workers;
            self.cpu_priority
                .get_or_init(|| {
                    WorkerPool::new("mxrt-cpu-prio", n, QueueOrder::Priority, idle, execute)
                })
                .push(op, false);
        } else {
            let front = op.prop == FnProperty::DeleteVar;
            let (n, id) = (self.config.cpu_workers, op.ctx.dev_id);
            self.cpu.with(
                id,
                || WorkerPool::new(&format!("mxrt-cpu{id}"), n, QueueOrder::Fifo, idle, execute),
                |p| p.push(op, front),
            );
        }
    }

    fn take_cpu_op(&self) -> Option<OprRef> {
        self.cpu.take_op()
    }

    fn stop(&self) {
        self.cpu.stop();
        if let Some(p) = self.cpu_priority.get() {
            p.stop();
        }
        for (pools, _) in self.gpu_pools() {
            pools.stop();
        }
    }

    fn restart(&self, cpu_workers: Option<usize>) {
        self.cpu
            .start(cpu_workers.unwrap_or(self.config.cpu_workers));
        if let Some(p) = self.cpu_priority.get() {
            p.start(self.config.cpu_priority_workers);
        }
        for (pools, n) in self.gpu_pools() {
            pools.start(n);
        }
    }
}

/// ThreadedEngine: one shared FIFO pool, plus an I/O thread for copy ops.
pub(crate) struct Pooled {
    config: EngineConfig,
    main: OnceLock<WorkerPool>,
    io: OnceLock<WorkerPool>,
}

impl Pooled {
    pub(crate) fn new(config: EngineConfig) -> Self {
        Pooled {
            config,
            main: OnceLock::new(),
            io: OnceLock::new(),
        }
    }
}

impl Executor for Pooled {
    fn dispatch(&self, op: OprRef, pusher_thread: bool) {
        if runs_inline(&op, pusher_thread, false) {
            execute(op);
            return;
        }
        let front = op.prop == FnProperty::DeleteVar;
        let idle = self.config.idle;
        if matches!(op.prop, FnProperty::CopyFromGpu | FnProperty::CopyToGpu) {
            self.io
                .get_or_init(|| WorkerPool::new("mxrt-io", 1, QueueOrder::Fifo, idle, execute))
                .push(op, front);
        } else {
            let n = self.config.pooled_workers;
            self.main
                .get_or_init(|| WorkerPool::new("mxrt-worker", n, QueueOrder::Fifo, idle, execute))
                .push(op, front);
        }
    }

    fn take_cpu_op(&self) -> Option<OprRef> {
        self.main.get().and_then(WorkerPool::try_take)
    }

    fn stop(&self) {
        for p in [self.main.get(), self.io.get()].into_iter().flatten() {
            p.stop();
        }
    }

    fn restart(&self, cpu_workers: Option<usize>) {
        if let Some(p) = self.main.get() {
            p.start(cpu_workers.unwrap_or(self.config.pooled_workers));
        }
        if let Some(p) = self.io.get() {
            p.start(1);
        }
    }
}
