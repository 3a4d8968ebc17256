//! Leases: the calling thread takes a variable's read or write access itself, as an op would,
//! for synchronous copies (`MXNDArraySyncCopyFromCPU/ToCPU`). Granted at once when nothing is
//! queued on the variable; otherwise a tiny async op waits for the access and hands its
//! completion to the calling thread.

use super::Engine;
use super::opr::{AsyncBody, Completion, RunContext};
use super::push::PushArgs;
use super::signal::Signal;
use super::var::{self, Var};
use super::wait::{op_failed, refuse_inside_op};
use crate::context::Context;
use crate::error::Result;
use parking_lot::Mutex;
use std::sync::Arc;

impl Engine {
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
            // ops run at push on this engine: the write counts as done for everything after
            if write {
                var.bump_version();
            }
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
            // SAFETY: `try_grant_now` granted this access to the lease, which ends it once, here;
            // `var` is a counted reference.
            unsafe {
                if self.write {
                    var.complete_write(None, &mut ready);
                } else {
                    var.complete_read(&mut ready);
                }
            }
            if !ready.is_empty() {
                self.engine.inner.dispatch_ready(ready);
            }
        }
    }
}
