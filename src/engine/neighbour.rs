//! Where a thread outside the worker pools that completes async ops runs, so that an idle worker
//! on the same CPU leaves the CPU to it.
//!
//! C code often completes its async ops from a thread of its own. When the kernel puts that thread
//! on the core of an idle worker, the worker's polling keeps it off the core: the completion that
//! would give the worker its next op waits until the poll gives up (each op then costs a whole
//! spin budget). So a completing thread outside the pools notes its CPU and the time here, and an
//! idle worker that finds itself on the noted CPU, noted recently, parks at once instead of
//! polling. On other CPUs, or with no such thread, polling is unchanged.
//!
//! Parking alone still costs two context switches per op: the first completion that makes an op
//! ready wakes the worker, the woken worker preempts the completing thread, runs the one op and
//! parks again. With `MXRT_ENGINE_SCHED_BATCH=1` (`IdleConfig::sched_batch`), a worker that defers
//! to a completing thread runs under `SCHED_BATCH` meanwhile, whose wake-ups do not preempt the
//! running thread: the completing thread finishes its whole batch of completions, and the worker
//! then runs every op they made ready in one go. The worker returns to `SCHED_OTHER` as soon as it
//! polls again; a thread that started under any other policy (a real-time one inherited from the
//! process) is left alone. It is off by default because it changes the scheduling policy of
//! threads that run user code; docs/performance.md has what it gains.
//!
//! The note is a hint, read and written with relaxed atomics: a stale or torn view only makes a
//! worker poll or park when the other choice would have been better, never loses an op. The
//! completing thread refreshes it every [`NOTE_EVERY`]th completion and writes only when it
//! changed, so in a steady stream its cache line stays shared instead of bouncing.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// `cpu + 1` in the upper 16 bits, a time in [`now_ticks`] units in the lower 48; 0 = no note.
static NOTE: AtomicU64 = AtomicU64::new(0);

const TIME_BITS: u32 = 48;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;

/// A completing thread refreshes the note on every this many completions.
const NOTE_EVERY: u32 = 16;

/// A note older than this many ticks (about 1 ms each) no longer counts.
const FRESH_TICKS: u64 = 3;

thread_local! {
    static COMPLETIONS: Cell<u32> = const { Cell::new(0) };
}

/// The CPU the calling thread runs on (from the kernel's rseq area or the vDSO: no system call).
#[cfg(all(target_os = "linux", not(miri)))]
fn current_cpu() -> Option<u64> {
    // SAFETY: sched_getcpu takes no arguments and only reads per-thread kernel data.
    let cpu = unsafe { libc::sched_getcpu() };
    u64::try_from(cpu).ok().filter(|&c| c < (1 << 15))
}

#[cfg(any(not(target_os = "linux"), miri))]
fn current_cpu() -> Option<u64> {
    None
}

/// Monotonic time in units of 1024 µs (about 1 ms).
fn now_ticks() -> u64 {
    (crate::clock::now_us() >> 10) & TIME_MASK
}

/// Called by a thread outside the worker pools as it completes an op.
#[inline]
pub(crate) fn note_completion() {
    let Ok(n) = COMPLETIONS.try_with(|c| {
        let n = c.get().wrapping_add(1);
        c.set(n);
        n
    }) else {
        return;
    };
    if n % NOTE_EVERY != 1 {
        return;
    }
    let Some(cpu) = current_cpu() else {
        return;
    };
    let note = encode(cpu, now_ticks());
    if NOTE.load(Ordering::Relaxed) != note {
        NOTE.store(note, Ordering::Relaxed);
    }
}

/// True if a thread outside the pools completed ops on the caller's CPU in the last few ms.
#[inline]
pub(crate) fn completer_on_this_cpu() -> bool {
    let note = NOTE.load(Ordering::Relaxed);
    if note == 0 {
        return false;
    }
    let Some(cpu) = current_cpu() else {
        return false;
    };
    matches(note, cpu, now_ticks())
}

fn encode(cpu: u64, now: u64) -> u64 {
    (cpu + 1) << TIME_BITS | (now & TIME_MASK)
}

/// True if `note` was made on `cpu` at most [`FRESH_TICKS`] before `now`.
fn matches(note: u64, cpu: u64, now: u64) -> bool {
    // `cpu + 1` is never 0, so no note (0) matches no CPU
    note >> TIME_BITS == cpu + 1 && now.wrapping_sub(note & TIME_MASK) & TIME_MASK <= FRESH_TICKS
}

/// The scheduling policy a worker runs under, as far as deferring is concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// Not looked at yet.
    Unknown,
    Other,
    Batch,
    /// Started under a policy other than `SCHED_OTHER`: never changed.
    LeftAlone,
}

thread_local! {
    static POLICY: Cell<Policy> = const { Cell::new(Policy::Unknown) };
}

/// Makes the calling worker's wake-ups stop (`on`) or resume preempting the thread running on its
/// CPU: `SCHED_BATCH` or `SCHED_OTHER`. A system call only when the setting changes.
pub(crate) fn defer_to_completer(on: bool) {
    let _ = POLICY.try_with(|p| {
        let mut current = p.get();
        if current == Policy::Unknown {
            current = if initial_policy_is_other() {
                Policy::Other
            } else {
                Policy::LeftAlone
            };
            p.set(current);
        }
        let want = if on { Policy::Batch } else { Policy::Other };
        if current == Policy::LeftAlone || current == want {
            return;
        }
        // refused (a sandbox that filters the call): stop trying, polling still parks early
        p.set(if set_policy(want) {
            want
        } else {
            Policy::LeftAlone
        });
    });
}

#[cfg(all(target_os = "linux", not(miri)))]
fn initial_policy_is_other() -> bool {
    // SAFETY: no arguments but the calling thread's id (0).
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_OTHER }
}

#[cfg(all(target_os = "linux", not(miri)))]
fn set_policy(policy: Policy) -> bool {
    let policy = if policy == Policy::Batch {
        libc::SCHED_BATCH
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param; both policies take priority 0 and need no privilege.
    // The nice value is kept.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

#[cfg(any(not(target_os = "linux"), miri))]
fn initial_policy_is_other() -> bool {
    false
}

#[cfg(any(not(target_os = "linux"), miri))]
fn set_policy(_: Policy) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_counts_only_for_its_own_cpu_and_while_fresh() {
        let now = 1000;
        let note = encode(3, now);
        assert!(matches(note, 3, now));
        assert!(matches(note, 3, now + FRESH_TICKS));
        assert!(!matches(note, 3, now + FRESH_TICKS + 1));
        assert!(!matches(note, 2, now));
        assert!(!matches(0, 0, now), "no note");
        // the clock's 48 bits wrap: a note just before the wrap is still fresh just after it
        let wrap = encode(1, TIME_MASK);
        assert!(matches(wrap, 1, 1));
    }

    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn deferring_switches_between_batch_and_other_and_leaves_other_policies_alone() {
        std::thread::spawn(|| {
            // SAFETY: queries the calling thread's policy.
            let policy = || unsafe { libc::sched_getscheduler(0) };
            assert_eq!(policy(), libc::SCHED_OTHER);
            defer_to_completer(true);
            assert_eq!(policy(), libc::SCHED_BATCH);
            defer_to_completer(true);
            assert_eq!(policy(), libc::SCHED_BATCH);
            defer_to_completer(false);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            // a thread that starts under another policy (SCHED_IDLE needs no privilege) keeps it
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: valid sched_param for the calling thread.
            assert_eq!(
                unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) },
                0
            );
            defer_to_completer(true);
            defer_to_completer(false);
            // SAFETY: queries the calling thread's policy.
            assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE);
        })
        .join()
        .unwrap();
    }
}
