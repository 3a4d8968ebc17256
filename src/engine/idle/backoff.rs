//! Spinning with exponential back-off, bounded in time.
//!
//! A spin-loop hint (`PAUSE` on x86) costs from a few to over a hundred cycles depending on the
//! CPU, so a budget counted in hints means a different wait on every machine. Budgets here are
//! durations: [`pause_ns`] measures what one hint costs on this machine once, and a [`Backoff`]
//! converts its steps and its budget into hints with it. A caller that yields the core instead of
//! spinning a step charges the step to the budget ([`Backoff::yielded`]), so a budget bounds both
//! the time a thread keeps a core busy and how many times it looks.
//!
//! `crossbeam_utils::Backoff` has a fixed schedule (2^step hints up to 2^6, then yields) and no
//! budget; the engine needs a configurable cap per step and a total, hence this type.

use std::sync::OnceLock;
use std::time::Duration;

/// Nanoseconds one spin-loop hint takes on this machine, measured once (the fastest of a few
/// runs of 2048 hints, so that a preemption during one run does not count).
pub(crate) fn pause_ns() -> f64 {
    static NS: OnceLock<f64> = OnceLock::new();
    *NS.get_or_init(measure_pause_ns)
}

#[cfg(not(any(miri, loom)))]
fn measure_pause_ns() -> f64 {
    const HINTS: u32 = 2048;
    let best = (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            for _ in 0..HINTS {
                std::hint::spin_loop();
            }
            start.elapsed()
        })
        .min()
        .unwrap_or_default();
    (best.as_nanos() as f64 / f64::from(HINTS)).clamp(0.5, 500.0)
}

/// Under Miri and loom time means nothing: a fixed figure keeps budgets finite and small.
#[cfg(any(miri, loom))]
fn measure_pause_ns() -> f64 {
    10.0
}

/// How many hints last `d` (at least one).
pub(crate) fn hints_in(d: Duration) -> u32 {
    let n = d.as_nanos() as f64 / pause_ns();
    n.clamp(1.0, f64::from(u32::MAX)) as u32
}

/// An exponential back-off: steps of spin-loop hints from `first` doubling up to `cap`, until
/// the hints spent reach the budget.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    step: u32,
    first: u32,
    cap: u32,
    spent: u64,
    budget: u64,
}

impl Backoff {
    /// A back-off whose steps last `first` doubling up to `cap`, spinning `budget` in all.
    pub(crate) fn new(first: Duration, cap: Duration, budget: Duration) -> Self {
        let first = hints_in(first);
        Backoff {
            step: first,
            first,
            cap: hints_in(cap).max(first),
            spent: 0,
            budget: if budget.is_zero() {
                0
            } else {
                u64::from(hints_in(budget))
            },
        }
    }

    /// Spins one step and doubles the next (up to the cap). Returns false, without spinning,
    /// once the budget is spent.
    #[inline]
    pub(crate) fn snooze(&mut self) -> bool {
        if self.spent >= self.budget {
            return false;
        }
        for _ in 0..self.step {
            std::hint::spin_loop();
        }
        self.spent += u64::from(self.step);
        self.step = self.step.saturating_mul(2).min(self.cap);
        true
    }

    /// Charges one step to the budget without spinning it (the caller yielded its core instead).
    /// Returns false once the budget is spent.
    pub(crate) fn yielded(&mut self) -> bool {
        self.spent += u64::from(self.step);
        self.spent < self.budget
    }

    /// True once the steps have reached the cap.
    pub(crate) fn at_cap(&self) -> bool {
        self.step >= self.cap
    }

    /// True once the budget is spent.
    #[cfg(test)]
    pub(crate) fn spent(&self) -> bool {
        self.spent >= self.budget
    }

    /// Starts over with the first step and the whole budget.
    pub(crate) fn reset(&mut self) {
        self.step = self.first;
        self.spent = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_to_the_cap_and_the_budget_ends_the_spinning() {
        let p = pause_ns();
        assert!((0.5..=500.0).contains(&p), "{p}");
        let us = Duration::from_micros;
        let mut b = Backoff::new(Duration::from_nanos(1), us(1_000), us(20));
        let mut steps = 0;
        while b.snooze() {
            steps += 1;
            assert!(steps < 1_000_000, "the budget must end it");
        }
        assert!(b.spent() && !b.snooze());
        // 20 µs of hints cannot be spent in fewer doublings than log2(20 µs / first step)
        assert!(steps >= 2, "{steps}");
        b.reset();
        assert!(!b.spent() && b.snooze());

        let mut capped = Backoff::new(us(1), us(1), us(100));
        assert!(capped.at_cap());
        assert!(capped.snooze());
        let none = Backoff::new(us(1), us(2), Duration::ZERO);
        assert!(none.spent());
    }

    #[cfg(not(miri))]
    #[test]
    fn a_budget_is_about_its_duration_in_wall_time() {
        // the calibration is not off by much: at least a quarter of the budget, and not 20x it
        // (the upper bound leaves room for preemption on a loaded machine)
        let budget = Duration::from_millis(2);
        let mut b = Backoff::new(Duration::from_micros(1), Duration::from_micros(50), budget);
        let start = std::time::Instant::now();
        while b.snooze() {}
        let took = start.elapsed();
        assert!(
            took >= budget / 4 && took <= budget * 20,
            "{took:?} for {budget:?}"
        );
    }
}
