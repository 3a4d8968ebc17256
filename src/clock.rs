//! The process's one clock for timestamps: microseconds since the Unix epoch, read from a
//! monotonic clock so it never goes backwards. The engine (op timings, idle-worker bookkeeping)
//! and the profiler (trace timestamps) use it, so their times can be compared directly.

use std::sync::LazyLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A monotonic instant and the wall-clock time it stands for, taken once.
static BASE: LazyLock<(Instant, u64)> = LazyLock::new(|| {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (Instant::now(), since_epoch.as_micros() as u64)
});

/// Microseconds since the Unix epoch, from a monotonic clock (never goes backwards).
#[inline]
pub fn now_us() -> u64 {
    let (base, epoch_us) = *BASE;
    epoch_us + base.elapsed().as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::now_us;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn never_goes_backwards_and_tracks_wall_time() {
        let mut last = now_us();
        for _ in 0..10_000 {
            let t = now_us();
            assert!(t >= last, "{t} < {last}");
            last = t;
        }
        std::thread::sleep(Duration::from_millis(20));
        let waited = now_us() - last;
        assert!(waited >= 20_000, "slept 20 ms, clock moved {waited} µs");
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        // Same epoch as the wall clock (within a generous margin for a clock adjustment).
        assert!(wall.abs_diff(now_us()) < 60_000_000);
    }
}
