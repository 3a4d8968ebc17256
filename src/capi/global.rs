//! Process-wide functions: version, shutdown, thread settings, environment helpers.

use super::args;
use super::engine::engine;
use super::error::api_call;
use crate::error::Error;
use std::cell::Cell;
use std::ffi::{CString, c_char, c_int};

/// The MXNet version mxrt reports: 1.9.1 as MAJOR*10000 + MINOR*100 + PATCH, the C ABI it
/// implements, so clients that check for MXNet >= 1.x accept it.
pub const MXNET_VERSION: c_int = 10901;

/// Writes MXNet's version number, 10901 (1.9.1): the C ABI mxrt implements. mxrt's own version is
/// in the MXRT_VERSION_* macros.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGetVersion(out: *mut c_int) -> c_int {
    api_call("MXGetVersion", || {
        // SAFETY: API contract: out-parameter.
        *unsafe { args::out(out, "out")? } = MXNET_VERSION;
        Ok(())
    })
}

/// Marks the engine as shutting down and waits for it to become idle: later pushes fail (-1),
/// except the variable deletions that freeing NDArrays performs, and ops still queued are skipped.
/// Call it once before the process exits (MXNet's Python frontend does).
#[unsafe(no_mangle)]
pub extern "C" fn MXNotifyShutdown() -> c_int {
    api_call("MXNotifyShutdown", || engine()?.notify_shutdown())
}

thread_local! {
    static NUM_THREADS_HINT: Cell<c_int> = const { Cell::new(0) };
}

/// The calling thread's MXSetNumOMPThreads value (0 = not set).
pub(crate) fn num_threads_hint() -> c_int {
    NUM_THREADS_HINT.with(Cell::get)
}

/// MXNet sets OpenMP's thread count for the calling thread. mxrt has no OpenMP: the value
/// (>= 1) is recorded for the calling thread and caps the threads that parallel work started from
/// this thread may use; it never changes other threads. Values < 1 are an error.
#[unsafe(no_mangle)]
pub extern "C" fn MXSetNumOMPThreads(thread_num: c_int) -> c_int {
    api_call("MXSetNumOMPThreads", || {
        if thread_num < 1 {
            return Err(Error::invalid(format!(
                "thread_num must be at least 1, got {thread_num}"
            )));
        }
        NUM_THREADS_HINT.with(|c| c.set(thread_num));
        Ok(())
    })
}

thread_local! {
    static ENV_VALUE: Cell<Option<CString>> = const { Cell::new(None) };
}

/// Reads environment variable `name` into `*value` (NULL if unset). The string stays valid until
/// the next MXGetEnv on the same thread. (MXNet's test helper, used by its Python frontend.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXGetEnv(name: *const c_char, value: *mut *const c_char) -> c_int {
    api_call("MXGetEnv", || {
        // SAFETY: API contract: NUL-terminated string.
        let name = unsafe { args::c_str(name, "name")? };
        // SAFETY: API contract: out-parameter.
        let value = unsafe { args::out(value, "value")? };
        let v = std::env::var_os(name)
            .map(|v| CString::new(v.into_encoded_bytes()).unwrap_or_default());
        *value = v.as_ref().map_or(std::ptr::null(), |c| c.as_ptr());
        ENV_VALUE.with(|slot| slot.set(v));
        Ok(())
    })
}

/// Sets environment variable `name` to `value` (NULL unsets it). Settings mxrt reads once (engine
/// type, worker counts) only take effect before first use. (MXNet's test helper.)
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSetEnv(name: *const c_char, value: *const c_char) -> c_int {
    api_call("MXSetEnv", || {
        // SAFETY: API contract: NUL-terminated strings.
        let name = unsafe { args::c_str(name, "name")? };
        // SAFETY: as above.
        let value = unsafe { args::opt_c_str(value, "value")? };
        if name.is_empty() || name.contains('=') {
            return Err(Error::invalid(format!(
                "name {name:?} is not a valid variable name"
            )));
        }
        // SAFETY: setenv/unsetenv are not thread-safe against concurrent getenv in C; MXNet has
        // the same contract for this test helper: call it before starting concurrent work.
        unsafe {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
        Ok(())
    })
}
