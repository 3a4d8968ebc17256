//! The one guard every export goes through, and the thread-local last-error message.
//!
//! `api_call` runs an export's body inside `catch_unwind`: `Ok(())` becomes 0; an `Err` or a panic
//! becomes -1 with a message stored for `MXGetLastError` on the calling thread. Messages start with
//! the exported function's name (`MXNDArrayCreateEx: Unknown type enum 13`), except failures of
//! engine operations, which keep the op's original message so callers see what their op reported.

use crate::error::{Error, ErrorKind};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Stores `message` as the calling thread's last error. Interior NUL bytes are replaced so the
/// message is never truncated silently.
pub(crate) fn set_last_error(message: &str) {
    let c = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|slot| *slot.borrow_mut() = c);
}

/// The message an error gets at the C boundary.
pub(crate) fn boundary_message(func: &str, err: &Error) -> String {
    match err.kind() {
        ErrorKind::OpFailed => err.message().to_owned(),
        _ => format!("{func}: {}", err.message()),
    }
}

/// What the layers below the C API need before its first call: modules that sit below others
/// and cannot call up get their upper halves registered here (the GPU memory backends with the
/// storage, the distributed store kinds with `kvstore::create`). Runs once, from [`api_call`],
/// which every export goes through; afterwards one atomic load.
#[inline]
fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        crate::gpu::storage();
        crate::dist::register();
    });
}

/// Runs an export's body: 0 on `Ok`, -1 plus the last-error message on `Err` or panic.
#[inline]
pub(crate) fn api_call<F>(func: &'static str, body: F) -> c_int
where
    F: FnOnce() -> crate::Result<()>,
{
    init();
    // records the call when the profiler traces API calls (one atomic load otherwise)
    let _scope = crate::profiler::ApiScope::begin(func);
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(err)) => {
            set_last_error(&boundary_message(func, &err));
            -1
        }
        Err(payload) => {
            set_last_error(&format!(
                "{func}: internal panic: {}",
                crate::util::panic_text(&*payload)
            ));
            -1
        }
    }
}

/// Returns the message of the last failed call on this thread (an empty string if none failed).
/// The pointer stays valid until the next failing call on the same thread.
#[unsafe(no_mangle)]
pub extern "C" fn MXGetLastError() -> *const c_char {
    LAST_ERROR.with(|slot| slot.borrow().as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: MXGetLastError returns a pointer to this thread's live CString.
        unsafe { CStr::from_ptr(MXGetLastError()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn ok_err_and_panic() {
        assert_eq!(api_call("F", || Ok(())), 0);
        assert_eq!(api_call("F", || Err(Error::invalid("bad x"))), -1);
        assert_eq!(last(), "F: bad x");
        assert_eq!(
            api_call("G", || Err(Error::new(ErrorKind::OpFailed, "op said no"))),
            -1
        );
        assert_eq!(last(), "op said no");
        assert_eq!(api_call("H", || panic!("boom {}", 7)), -1);
        assert_eq!(last(), "H: internal panic: boom 7");
        // success does not clear the message (MXNet's behaviour)
        assert_eq!(api_call("F", || Ok(())), 0);
        assert_eq!(last(), "H: internal panic: boom 7");
    }
}
