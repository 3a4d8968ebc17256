//! Waiting for ops: `WaitForVar` (a wait-style op queued behind the variable's writes) and
//! `WaitForAll` (the engine's count of pending ops), and how they report errors.

use super::Engine;
use super::opr::{RunContext, SyncBody};
use super::push::PushArgs;
use super::signal::Signal;
use super::threaded;
use super::var::Var;
use crate::context::Context;
use crate::error::{Error, ErrorKind, Result};
use std::sync::Arc;

impl Engine {
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
}

pub(super) fn op_failed(msg: Arc<str>) -> Error {
    Error::new(ErrorKind::OpFailed, msg.to_string())
}

pub(super) fn refuse_inside_op(what: &str) -> Result<()> {
    if threaded::inside_op() {
        return Err(Error::invalid(format!(
            "{what} was called from inside an engine operation; waiting there would deadlock"
        )));
    }
    Ok(())
}
