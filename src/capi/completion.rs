//! Completions of asynchronous ops pushed from C.
//!
//! C async functions receive a pointer to MXNet's 24-byte `CallbackOnComplete`
//! `{callback, engine, param}` and complete with `callback(engine, param, error)`, possibly from
//! another thread after copying the struct. Here `engine` and `param` are not pointers but a slot
//! index and a generation in a table of outstanding completions, so completing twice, completing a
//! stale copy, or passing garbage is detected and refused instead of corrupting memory.

use crate::engine::Completion;
use crate::error::{Error, Result};
use crossbeam_queue::SegQueue;
use parking_lot::Mutex;
use std::cell::UnsafeCell;
use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// MXNet's `engine::CallbackOnComplete`, as C code sees it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CallbackOnComplete {
    pub callback:
        Option<unsafe extern "C" fn(engine: *mut c_void, param: *mut c_void, error: *const c_void)>,
    pub engine: *mut c_void,
    pub param: *mut c_void,
}

/// One outstanding completion. `state` packs the slot's generation (upper bits) and whether it
/// holds a completion (bit 0); the single CAS that clears bit 0 decides which caller may take it,
/// so concurrent or repeated completions cannot both succeed.
struct Slot {
    state: AtomicU64,
    completion: UnsafeCell<Option<Completion>>,
}

// SAFETY: `completion` is only accessed by the thread that owns the slot at that moment: the
// registering thread while the slot is free (bit 0 clear and the index popped from `FREE`), or the
// thread whose CAS cleared bit 0.
unsafe impl Sync for Slot {}

const CHUNK: usize = 1024;
const MAX_CHUNKS: usize = 1024;

/// Chunks of slots allocated on demand and never freed or moved, so a slot's address is stable
/// and lookups need no lock. At most `CHUNK * MAX_CHUNKS` (about a million) completions can be
/// outstanding at once.
static CHUNKS: [OnceLock<Box<[Slot]>>; MAX_CHUNKS] = [const { OnceLock::new() }; MAX_CHUNKS];
static FREE: SegQueue<usize> = SegQueue::new();
static NEXT_CHUNK: Mutex<usize> = Mutex::new(0);

fn slot(index: usize) -> Option<&'static Slot> {
    CHUNKS.get(index / CHUNK)?.get().map(|c| &c[index % CHUNK])
}

/// A free slot index: from the free list, or a newly allocated chunk.
fn free_index() -> Option<usize> {
    if let Some(i) = FREE.pop() {
        return Some(i);
    }
    let mut next = NEXT_CHUNK.lock();
    if let Some(i) = FREE.pop() {
        return Some(i); // another thread grew the table meanwhile
    }
    let c = *next;
    if c >= MAX_CHUNKS {
        return None;
    }
    let chunk: Box<[Slot]> = (0..CHUNK)
        .map(|_| Slot {
            state: AtomicU64::new(0),
            completion: UnsafeCell::new(None),
        })
        .collect();
    let _ = CHUNKS[c].set(chunk);
    *next = c + 1;
    for i in 1..CHUNK {
        FREE.push(c * CHUNK + i);
    }
    Some(c * CHUNK)
}

/// Parks `completion` in the table and returns the struct handed to C. If a million completions
/// are already outstanding the op fails at once instead.
pub(crate) fn register(completion: Completion) -> CallbackOnComplete {
    let Some(index) = free_index() else {
        completion
            .fail("too many asynchronous ops are waiting for their completion (about a million)");
        return CallbackOnComplete {
            callback: Some(complete_from_c),
            engine: std::ptr::null_mut(),
            param: std::ptr::null_mut(),
        };
    };
    let s = slot(index).expect("allocated above");
    let generation = (s.state.load(Ordering::Relaxed) >> 1).wrapping_add(1) & (u64::MAX >> 1);
    // SAFETY: the slot is free and its index came off the free list, so no other thread touches
    // `completion` until the state store below publishes it.
    unsafe { *s.completion.get() = Some(completion) };
    s.state.store(generation << 1 | 1, Ordering::Release);
    CallbackOnComplete {
        callback: Some(complete_from_c),
        engine: std::ptr::without_provenance_mut(index + 1),
        param: std::ptr::without_provenance_mut(generation as usize),
    }
}

fn take(engine: *mut c_void, param: *mut c_void) -> Option<Completion> {
    let index = (engine as usize).checked_sub(1)?;
    let s = slot(index)?;
    let want = (param as u64) << 1 | 1;
    s.state
        .compare_exchange(want, want & !1, Ordering::AcqRel, Ordering::Relaxed)
        .ok()?;
    // SAFETY: our CAS cleared the occupied bit, so this thread alone owns the slot's content.
    let c = unsafe { (*s.completion.get()).take() };
    FREE.push(index);
    c
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
///
/// # Safety
/// `error` is NULL or a NUL-terminated message. `engine` and `param` are only compared with the
/// live completions' slots (a stale or foreign pair is an error, not a dereference).
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
