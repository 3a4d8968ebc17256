//! MXNet's dependency engine.
//!
//! Ops read (`const_vars`) and write (`mutable_vars`) variables. Two ops that share a variable one
//! of them writes run in push order; everything else may run in parallel. Three engines, chosen by
//! `MXNET_ENGINE_TYPE`: [`EngineKind::Naive`] (synchronous), [`EngineKind::Pooled`]
//! (`ThreadedEngine`) and [`EngineKind::PerDevice`] (`ThreadedEnginePerDevice`, the default).
//!
//! Layout, by idea:
//! - the API: `lifecycle` (construction, the global engine, shutdown, drop), `push` (what a push
//!   names, the `push_*` calls, operators, variable deletion, bulk size), `wait` (WaitForVar,
//!   WaitForAll), `lease` (the calling thread takes a variable's access itself, for SyncCopy);
//! - the core: `inner` (the engine's state and every `impl Inner`: create, queue, dispatch,
//!   complete), `opr` (ops, completions, operators), `op_memory` + `recycler` (op memory reused
//!   across threads), `var` + `var_queue` (the per-variable queue), `pending` (the count of
//!   pending ops WaitForAll and drop wait on), `threaded` (running an op's body), `exception`
//!   (how errors travel), `bulk` (segments of small sync ops);
//! - the scheduler: `executor` + `pool` + `ring` (where ops run), `signal` (a thread's wake-up),
//!   `neighbour` (idle workers defer to a thread completing ops on their CPU), `wait_help` (a
//!   thread in `wait_for_all` runs queued ops);
//! - `config` (environment), `property` (FnProperty), `fork` (fork safety), `profiling` (the
//!   profiler hook).
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
mod idle;
mod inner;
mod lease;
mod lifecycle;
mod neighbour;
mod op_memory;
mod opr;
mod pending;
mod pool;
pub mod profiling;
mod property;
mod push;
mod recycler;
mod ring;
mod signal;
#[cfg(test)]
mod test_hooks;
mod threaded;
mod var;
mod var_queue;
mod wait;
mod wait_help;

pub use config::{EngineConfig, EngineKind};
pub use idle::IdleConfig;
pub(crate) use inner::{EnginePtr, Inner};
pub use lease::VarLease;
pub use lifecycle::Engine;
use lifecycle::GLOBAL;
pub use opr::{AsyncFn, Completion, OpResult, Operator, RunContext, SyncFn};
pub(crate) use opr::{VarList, uncounted, uncounted_slice};
pub use property::FnProperty;
pub(crate) use push::OnQueued;
pub use push::{OnDelete, PushArgs};
pub use var::Var;
pub(crate) use var::VarInner;

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Engine>();
    is::<Var>();
    is::<Completion>();
}
