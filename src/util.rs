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

/// Asks the CPU to fetch the cache line holding `addr` for writing, without waiting for it (for
/// memory the calling thread will write soon that another core probably holds).
///
/// `PREFETCHW` is written out because the compiler lowers a write-prefetch intrinsic to a read
/// prefetch (`prefetcht0`) unless the whole crate is built for a CPU with `prfchw`; a read
/// prefetch brings the line in shared, and the write then needs a second trip to take it over.
/// CPUs without the instruction execute its encoding (0F 0D /1) as a no-op.
#[inline]
pub(crate) fn prefetch_write<T>(addr: *const T) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch is only a hint: it never faults, whatever the address, reads or writes
    // no register but its address operand, and leaves memory and flags unchanged.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    // (Miri cannot run inline assembly; a hint changes nothing it checks)
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = addr;
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

/// A multiplicative (Fibonacci) hasher for integer keys such as addresses and sizes: their low
/// bits are often alignment zeros, which this mixes into the high bits the tables use.
#[derive(Default)]
pub(crate) struct IntHasher(u64);

impl std::hash::Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64 ^ (n as u64 >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A raw data pointer moved into an engine op.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut u8);

// SAFETY: only dereferenced inside engine ops whose variable dependencies give them read access to
// their inputs and exclusive write access to their outputs while they run.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    pub(crate) fn get(self) -> *mut u8 {
        self.0
    }
}
