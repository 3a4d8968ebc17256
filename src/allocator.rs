//! The process allocator as mxrt uses it: mimalloc as the global allocator (feature `mimalloc`,
//! on by default), and memory handed back to the system after a burst of queued work.
//!
//! A caller that pushes far faster than the workers run ops (a million pushes before a wait) has
//! hundreds of thousands of ops queued at once. Once they have run, their memory is free, but the
//! allocator keeps it mapped for reuse, so the process would stay at the burst's peak for good.
//! Op memory taken from the allocator instead of recycled from finished ops is reported here
//! ([`note_fresh_op_memory`]), and the next `WaitForAll` that finds the engine idle after
//! [`TRIM_AFTER_BYTES`] of it asks the allocator to return what it holds free
//! ([`trim_after_burst`], well under a millisecond). Steady pushing of ops of the common size (a C
//! function, up to 3 variables) takes no fresh memory; other ops count each time, so they bring a
//! trim at most once per 8 MiB of ops, well under 1% of their cost. The hot path pays nothing
//! else; `WaitForAll` one relaxed load.
//!
//! mimalloc returns free memory to the system on a timer: once the oldest scheduled purge is due
//! (1 s by default), every free range is decommitted at once, including what was freed a moment
//! ago. A training step frees and takes back hundreds of megabytes of activations and kernel
//! scratch (which does not go through the storage pool), so each such purge made the next step
//! fault all of it in again (zeroing 2 MiB pages: a fifth of the CPU time of a ResNet-18 step at
//! one thread). [`configure`] sets the delay to [`PURGE_DELAY_MS`] unless `MIMALLOC_PURGE_DELAY`
//! is set; a trim after a burst still returns everything at once.

use std::sync::atomic::{AtomicUsize, Ordering};

/// mimalloc: engine ops are allocated on the pushing thread and freed on a worker; glibc's
/// per-thread caches handle that pattern poorly (arena lock contention), mimalloc well.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's purge delay (milliseconds) unless the environment sets one.
#[cfg_attr(not(feature = "mimalloc"), allow(dead_code))]
pub(crate) const PURGE_DELAY_MS: i64 = 30_000;

/// Applies mxrt's allocator settings once per process (called when host storage is set up).
pub(crate) fn configure() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(set_purge_delay);
}

#[cfg(feature = "mimalloc")]
fn set_purge_delay() {
    // mimalloc 3's `mi_option_purge_delay` (the crate exports no constant for it); its default is
    // 1000, which also checks that the index names the option meant
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    const MIMALLOC_DEFAULT_PURGE_DELAY: std::ffi::c_long = 1000;
    if ["MIMALLOC_PURGE_DELAY", "MIMALLOC_RESET_DELAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return;
    }
    // SAFETY: mi_option_get/mi_option_set read and write one of mimalloc's option slots (atomic
    // longs); any thread may call them at any time.
    unsafe {
        if libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) == MIMALLOC_DEFAULT_PURGE_DELAY {
            libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as std::ffi::c_long);
        }
    }
}

#[cfg(not(feature = "mimalloc"))]
fn set_purge_delay() {}

/// Fresh op memory since the last trim that makes the next idle `WaitForAll` trim.
pub(crate) const TRIM_AFTER_BYTES: usize = 8 << 20;

/// Bytes of op memory taken from the allocator (not recycled) since the last trim.
static FRESH: BurstMeter = BurstMeter::new();

/// Records op memory taken from the allocator; callers report in batches, not per op.
pub(crate) fn note_fresh_op_memory(bytes: usize) {
    FRESH.add(bytes);
}

/// Returns free memory to the system if a burst took [`TRIM_AFTER_BYTES`] of fresh op memory
/// since the last trim; for callers that have just seen the engine idle.
pub(crate) fn trim_after_burst() {
    if FRESH.take_if_at_least(TRIM_AFTER_BYTES) {
        trim();
    }
}

/// A byte count reported from any thread and taken once it reaches a threshold.
struct BurstMeter(AtomicUsize);

impl BurstMeter {
    const fn new() -> Self {
        BurstMeter(AtomicUsize::new(0))
    }

    fn add(&self, bytes: usize) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }

    /// True (and the count restarts from 0) if it has reached `threshold`; one caller wins.
    fn take_if_at_least(&self, threshold: usize) -> bool {
        // a plain load first: below the threshold, nothing is written
        self.0.load(Ordering::Relaxed) >= threshold
            && self.0.swap(0, Ordering::Relaxed) >= threshold
    }
}

/// Hands the allocator's free memory back to the system.
fn trim() {
    #[cfg(feature = "mimalloc")]
    // SAFETY: mi_collect only walks mimalloc's own free lists; any thread may call it at any time.
    unsafe {
        libmimalloc_sys::mi_collect(true)
    };
    // without mimalloc (sanitizer builds): glibc releases free pages inside its heaps, but not the
    // free top of a thread's heap below its (adaptive) trim threshold
    #[cfg(all(not(feature = "mimalloc"), target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of glibc's heaps; callable from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_taken_once_it_reaches_the_threshold() {
        let meter = BurstMeter::new();
        meter.add(99);
        assert!(!meter.take_if_at_least(100), "below the threshold");
        meter.add(1);
        assert!(meter.take_if_at_least(100));
        assert!(
            !meter.take_if_at_least(100),
            "taken: the count restarts from 0"
        );
        meter.add(100);
        assert!(meter.take_if_at_least(100));
    }
}
