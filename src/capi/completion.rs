//! Completions of asynchronous ops pushed from C.
//!
//! C async functions receive a pointer to MXNet's 24-byte `CallbackOnComplete`
//! `{callback, engine, param}` and complete with `callback(engine, param, error)`, possibly from
//! another thread after copying the struct. Here `engine` and `param` are not pointers but a slot
//! index and a generation in a table of outstanding completions, so completing twice, completing a
//! stale copy, or passing garbage is detected and refused instead of corrupting memory.

use crate::engine::Completion;
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// MXNet's `engine::CallbackOnComplete`, as C code sees it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CallbackOnComplete {
    pub callback:
        Option<unsafe extern "C" fn(engine: *mut c_void, param: *mut c_void, error: *const c_void)>,
    pub engine: *mut c_void,
    pub param: *mut c_void,
}

struct Slot {
    generation: usize,
    completion: Option<Completion>,
}

#[derive(Default)]
struct Table {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

/// Parks `completion` in the table and returns the struct handed to C.
pub(crate) fn register(completion: Completion) -> CallbackOnComplete {
    let mut t = TABLE.lock();
    let index = match t.free.pop() {
        Some(i) => i,
        None => {
            t.slots.push(Slot {
                generation: 0,
                completion: None,
            });
            t.slots.len() - 1
        }
    };
    let slot = &mut t.slots[index];
    slot.generation = slot.generation.wrapping_add(1);
    slot.completion = Some(completion);
    CallbackOnComplete {
        callback: Some(complete_from_c),
        engine: std::ptr::without_provenance_mut(index + 1),
        param: std::ptr::without_provenance_mut(slot.generation),
    }
}

fn take(engine: *mut c_void, param: *mut c_void) -> Option<Completion> {
    let (index, generation) = ((engine as usize).checked_sub(1)?, param as usize);
    let mut t = TABLE.lock();
    let slot = t.slots.get_mut(index)?;
    if slot.generation != generation {
        return None;
    }
    let c = slot.completion.take()?;
    t.free.push(index);
    Some(c)
}

/// Completes the op behind (`engine`, `param`) with an optional NUL-terminated error message.
///
/// # Safety
/// A non-NULL `error` must point to a NUL-terminated string.
pub(crate) unsafe fn complete(
    engine: *mut c_void,
    param: *mut c_void,
    error: *const c_char,
) -> Result<()> {
    let message = if error.is_null() {
        None
    } else {
        // SAFETY: non-NULL and NUL-terminated per the caller's contract.
        Some(
            unsafe { CStr::from_ptr(error) }
                .to_string_lossy()
                .into_owned(),
        )
    };
    let completion = take(engine, param).ok_or_else(|| {
        Error::invalid(
            "on_complete does not belong to a running op (already completed, or not made by mxrt)",
        )
    })?;
    completion.finish(message.map_or(Ok(()), Err));
    Ok(())
}

/// The `callback` of every `CallbackOnComplete` mxrt hands out.
unsafe extern "C" fn complete_from_c(
    engine: *mut c_void,
    param: *mut c_void,
    error: *const c_void,
) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: per MXNet's contract a non-NULL error is (in mxrt) a NUL-terminated message.
        unsafe { complete(engine, param, error.cast()) }
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            super::error::set_last_error(&format!("CallbackOnComplete: {e}"));
            eprintln!("mxrt: ignored a completion callback: {e}");
        }
        Err(p) => eprintln!(
            "mxrt: panic while completing an op: {}",
            crate::util::panic_text(&*p)
        ),
    }
}

/// True if `cb` was made by mxrt (its callback is ours).
pub(crate) fn is_ours(cb: &CallbackOnComplete) -> bool {
    cb.callback.is_some_and(|f| {
        std::ptr::fn_addr_eq(
            f,
            complete_from_c as unsafe extern "C" fn(*mut c_void, *mut c_void, *const c_void),
        )
    })
}
