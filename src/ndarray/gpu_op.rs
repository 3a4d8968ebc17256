//! Engine ops whose work runs on a GPU.

use crate::engine::{Engine, EngineKind, PushArgs};
use crate::error::Result;
use crate::gpu::Finish;

/// Pushes an op whose body queues GPU work and says how it finishes: the op completes when the
/// device has done the work (reported from the device's completion thread, so the worker takes
/// its next op meanwhile). On the NaiveEngine, which runs every op inside its push, the body
/// waits for the device itself.
pub(crate) fn push(
    args: PushArgs<'_>,
    body: impl Fn(Finish) -> Result<()> + Send + Sync + 'static,
) -> Result<()> {
    let engine = Engine::global()?;
    if engine.kind() == EngineKind::Naive {
        return engine.push_fn(args, move |_| {
            body(Finish::Here).map_err(|e| e.message().to_string())
        });
    }
    engine.push_async_fn(args, move |_, completion| {
        let done = Box::new(move |r: Result<()>| {
            completion.finish(r.map_err(|e| e.message().to_string()))
        });
        // with `Finish::Then` the outcome, errors included, goes to `done`
        let _ = body(Finish::Then(done));
    })
}
