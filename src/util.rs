//! Small helpers shared by the core and the C layer.

/// The text of a panic payload (`&str` or `String`), or a fixed note for other payloads.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// A per-thread cap on the threads that parallel work started from this thread may use
/// (`MXSetNumOMPThreads`; MXNet sets OpenMP's per-thread count). `None` = no cap.
pub mod thread_cap {
    use std::cell::Cell;

    thread_local! {
        static CAP: Cell<usize> = const { Cell::new(0) };
    }

    /// Sets the calling thread's cap (0 removes it).
    pub fn set(n: usize) {
        CAP.with(|c| c.set(n));
    }

    /// The calling thread's cap, if set.
    pub fn get() -> Option<usize> {
        CAP.with(|c| (c.get() > 0).then(|| c.get()))
    }

    /// `n` limited by the calling thread's cap.
    pub fn limit(n: usize) -> usize {
        get().map_or(n, |c| n.min(c)).max(1)
    }
}
