//! Bulk execution (spec §5.4): a thread's small synchronous ops are collected into one segment and
//! pushed as a single op ("ImperativeBulk") once `bulk_size` of them have accumulated, or when the
//! thread pushes anything else, waits, or lowers the bulk size.

use super::EnginePtr;
use super::opr::{SyncFn, VarList};
use super::var::Var;
use crate::context::Context;
use std::cell::RefCell;
use std::sync::Arc;

/// The ops collected so far on one thread.
pub(crate) struct Segment {
    pub(crate) engine: EnginePtr,
    pub(crate) ctx: Context,
    pub(crate) fns: Vec<Arc<SyncFn>>,
    pub(crate) const_vars: VarList,
    pub(crate) mutable_vars: VarList,
}

#[derive(Default)]
struct BulkState {
    size: usize,
    segment: Option<Segment>,
}

thread_local! {
    static BULK: RefCell<BulkState> = RefCell::new(BulkState::default());
}

/// The calling thread's bulk size (0 = no bulking).
pub(crate) fn size() -> usize {
    BULK.with(|b| b.borrow().size)
}

/// Sets the calling thread's bulk size; returns the old size and the segment to flush if it
/// already holds `size` ops or more.
pub(crate) fn set_size(size: usize) -> (usize, Option<Segment>) {
    BULK.with(|b| {
        let mut b = b.borrow_mut();
        let old = std::mem::replace(&mut b.size, size);
        let full = b.segment.as_ref().is_some_and(|s| s.fns.len() >= size);
        (old, if full { b.segment.take() } else { None })
    })
}

/// Turns the calling thread's bulking off until the guard drops, segment untouched: ops that
/// `wait_help` runs on a waiting thread push without bulking, as they would on a worker.
pub(crate) fn suspend() -> Suspended {
    Suspended(BULK.with(|b| std::mem::take(&mut b.borrow_mut().size)))
}

/// Restores the bulk size [`suspend`] found (unless an op body changed it meanwhile).
pub(crate) struct Suspended(usize);

impl Drop for Suspended {
    fn drop(&mut self) {
        let _ = BULK.try_with(|b| {
            let mut b = b.borrow_mut();
            if b.size == 0 {
                b.size = self.0;
            }
        });
    }
}

/// Takes the calling thread's segment only if it was collected for `engine`.
pub(crate) fn take_for(engine: EnginePtr) -> Option<Segment> {
    BULK.with(|b| {
        let mut b = b.try_borrow_mut().ok()?;
        if b.segment.as_ref().is_some_and(|s| s.engine == engine) {
            b.segment.take()
        } else {
            None
        }
    })
}

/// What `append` asks the caller to flush.
pub(crate) struct Flush {
    /// A segment for another engine or context, to push before this op's segment grows.
    pub(crate) before: Option<Segment>,
    /// This segment, now full.
    pub(crate) full: Option<Segment>,
}

/// Adds a sync op to the calling thread's segment.
pub(crate) fn append(
    engine: EnginePtr,
    ctx: Context,
    f: Arc<SyncFn>,
    const_vars: &[Var],
    mutable_vars: &[Var],
) -> Flush {
    BULK.with(|b| {
        let mut b = b.borrow_mut();
        let size = b.size;
        let before = match &b.segment {
            Some(s) if s.engine != engine || s.ctx != ctx => b.segment.take(),
            _ => None,
        };
        let seg = b.segment.get_or_insert_with(|| Segment {
            engine,
            ctx,
            fns: Vec::with_capacity(size),
            const_vars: VarList::new(),
            mutable_vars: VarList::new(),
        });
        seg.fns.push(f);
        seg.const_vars.extend(const_vars.iter().cloned());
        seg.mutable_vars.extend(mutable_vars.iter().cloned());
        let full = if seg.fns.len() >= size {
            b.segment.take()
        } else {
            None
        };
        Flush { before, full }
    })
}
