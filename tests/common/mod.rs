//! Helpers shared by the integration tests that drive the C API.

use mxrt::capi::error::MXGetLastError;
use std::ffi::CStr;

/// The calling thread's last C API error message.
pub fn last_error() -> String {
    // SAFETY: MXGetLastError returns this thread's live message.
    unsafe { CStr::from_ptr(MXGetLastError()) }
        .to_string_lossy()
        .into_owned()
}

/// Calls a C API function and asserts it returned 0, showing the error message otherwise.
#[allow(unused_macros)] // not every test file uses it
macro_rules! ok {
    ($e:expr) => {{
        // SAFETY: test calls follow the C API contracts.
        #[allow(unused_unsafe)]
        let rc = unsafe { $e };
        assert_eq!(
            rc,
            0,
            "{} failed: {}",
            stringify!($e),
            crate::common::last_error()
        );
    }};
}
