//! The resource manager: random number generators and temporary workspace handed to operations,
//! with the engine serialising their users (MXNet's `ResourceManager`).
//!
//! * [`ResourceManager::request`] gives a [`Resource`] of a [`ResourceRequest`] type for a device:
//!   kRandom (one [`RandomGenerator`] per device), kParallelRandom ([`ParallelRandom`]: a fixed
//!   number of streams for parallel workers, round-robin copies) and kTempSpace ([`TempSpace`]:
//!   a buffer from the storage pool that grows to the largest request, round-robin copies).
//! * Each resource carries an engine [`Var`](crate::engine::Var). An op using the resource lists
//!   it among its mutable variables; the engine then never runs two users at once, and
//!   [`ResourceManager::seed`] (an op writing the same variables) lands between the ops pushed
//!   before and after it. So the same seed and the same sequence of pushes give the same numbers
//!   on every engine and worker count.
//! * Generators are ChaCha8 streams keyed by (seed, device, type, copy), see [`random`].
//!
//! ```
//! use mxrt::engine::{Engine, EngineConfig, EngineKind, PushArgs};
//! use mxrt::resource::{ResourceManager, ResourceRequest};
//! use mxrt::Context;
//! use std::sync::{Arc, Mutex};
//!
//! let engine = Engine::new(EngineConfig::new(EngineKind::PerDevice));
//! let rm = ResourceManager::new(&engine).unwrap();
//! let rng = rm.request(Context::cpu(0), ResourceRequest::Random).unwrap();
//! let draw = |rm: &ResourceManager| {
//!     let out = Arc::new(Mutex::new(vec![0f32; 4]));
//!     let (o, r) = (out.clone(), rng.clone());
//!     let vars = [rng.var().clone()];
//!     rm.engine()
//!         .push_fn(PushArgs::new(Context::cpu(0)).writes(&vars), move |_| {
//!             r.fill_uniform(&mut o.lock().unwrap(), 0.0, 1.0).map_err(|e| e.to_string())
//!         })
//!         .unwrap();
//!     rm.engine().wait_for_var(rng.var()).unwrap();
//!     let v = out.lock().unwrap().clone();
//!     v
//! };
//! rm.seed(42).unwrap();
//! let a = draw(&rm);
//! rm.seed(42).unwrap();
//! assert_eq!(draw(&rm), a);
//! ```

pub mod config;
pub mod manager;
pub mod parallel;
pub mod random;
pub mod request;
pub mod temp;

pub use config::ResourceConfig;
pub use manager::ResourceManager;
pub use parallel::ParallelRandom;
pub use random::{RandomGenerator, RandomReal, StreamId};
pub use request::{Resource, ResourceGuard, ResourceRequest, TempSpaceGuard};
pub use temp::TempSpace;
