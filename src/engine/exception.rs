//! Errors of engine operations and how they travel.
//!
//! A failed op creates one `ExceptionRef`. The same reference is handed to every variable the op
//! writes, to every later op that reads or writes such a variable (and on to their outputs), and to
//! the engine's global list. The first wait that reports it empties the shared slot, which consumes
//! it everywhere at once: MXNet's shared `exception_ptr` semantics (spec §3.1).

use parking_lot::Mutex;
use std::sync::Arc;

#[derive(Clone, Debug)]
pub(crate) struct ExceptionRef(Arc<Mutex<Option<Arc<str>>>>);

impl ExceptionRef {
    pub(crate) fn new(message: Arc<str>) -> Self {
        ExceptionRef(Arc::new(Mutex::new(Some(message))))
    }
    /// True while the error has not been reported by a wait.
    pub(crate) fn is_pending(&self) -> bool {
        self.0.lock().is_some()
    }
    /// Reports the error: returns its message and empties the slot for every holder.
    pub(crate) fn take(&self) -> Option<Arc<str>> {
        self.0.lock().take()
    }
}
