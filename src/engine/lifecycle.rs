//! The engine's life: construction ([`Engine::new`], [`Engine::global`]), shutdown, stopping
//! and restarting the workers around `fork()`, and the drop that waits for every pending op.

use super::config::{EngineConfig, EngineKind};
use super::executor::{Executor, PerDevice, Pooled};
use super::fork;
use super::inner::Inner;
use super::pending;
use super::var::Var;
use super::wait::refuse_inside_op;
use crate::error::{Error, Result};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A dependency engine. `Engine::global()` is the process-wide one the C API uses; tests may
/// create more. Dropping an engine waits for its pending ops and stops its workers.
pub struct Engine {
    pub(super) inner: Box<Inner>,
}

static NEXT_ENGINE_ID: AtomicU64 = AtomicU64::new(1);

pub(super) static GLOBAL: OnceLock<std::result::Result<Engine, Error>> = OnceLock::new();

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
