//! What the profiler records right now: one word of flags, recomputed on every state change, so
//! each hot-path check is one relaxed atomic load.

use std::sync::atomic::{AtomicU32, Ordering};

pub(super) const F_OPS: u32 = 1;
pub(super) const F_API: u32 = 2;
pub(super) const F_MEMORY: u32 = 4;
pub(super) const F_OBJECTS: u32 = 8;

/// What is being recorded right now; recomputed on every state change. Initially: not running,
/// not paused (so profile objects record).
static FLAGS: AtomicU32 = AtomicU32::new(F_OBJECTS);

/// True when engine operators are recorded (running, not paused, imperative mode).
#[inline]
pub fn ops_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_OPS != 0
}

/// True when C API calls are recorded (running, not paused, API mode).
#[inline]
pub fn api_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_API != 0
}

/// True when storage use is recorded (running, not paused, memory mode).
#[inline]
pub fn memory_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_MEMORY != 0
}

/// True when KVStore calls are recorded (same condition as [`ops_enabled`]).
#[inline]
pub fn kvstore_enabled() -> bool {
    ops_enabled()
}

/// True when profile objects record (not paused).
#[inline]
pub fn objects_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_OBJECTS != 0
}

/// Publishes the flags computed from a new state.
pub(super) fn set(flags: u32) {
    FLAGS.store(flags, Ordering::Relaxed);
}
