//! The engine's idle policy: how long threads that find nothing to do spin before they sleep,
//! how they sleep, and how they are woken. Everything that spins in the engine takes its budget
//! from here, as a duration (see [`backoff`]); `README.md` describes the sleep/wake protocol.
//!
//! | who waits | for what | spin | then |
//! |---|---|---|---|
//! | an idle worker (`pool.rs`) | an op in its pool's queue | [`IdleConfig::spin`], steps up to [`IdleConfig::poll_step`]; one worker per pool at a time | parks ([`sleep::Sleep`]) |
//! | a thread in `WaitForVar`, a lease, a sync push on NaiveEngine (`signal.rs`) | one op | [`SIGNAL_SPIN`] | parks |
//! | `WaitForAll` with few ops pending (`pending.rs`) | the last ops | [`SIGNAL_SPIN`] | sleeps on a countdown |
//! | `WaitForAll` running queued ops itself (`wait_help.rs`) | more ops to run | [`HELP_SPIN`] | sleeps as above |
//! | a contended variable lock (`var.rs`) | the lock | [`VAR_LOCK_SPIN`], without touching the lock between steps | parking_lot's wait |

pub(crate) mod backoff;
pub(crate) mod sleep;

pub(crate) use backoff::Backoff;
use std::time::Duration;

/// A budget: the first step, the longest step and the total time spun.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpinBudget {
    pub(crate) first: Duration,
    pub(crate) cap: Duration,
    pub(crate) total: Duration,
}

impl SpinBudget {
    pub(crate) fn backoff(self) -> Backoff {
        Backoff::new(self.first, self.cap, self.total)
    }
}

/// One op waited for: the flag is checked after every hint (it is one line, written once),
/// yielding every [`SIGNAL_YIELD_EVERY`] of spinning.
pub(crate) const SIGNAL_SPIN: SpinBudget = SpinBudget {
    first: Duration::from_nanos(16),
    cap: Duration::from_nanos(16),
    total: Duration::from_micros(64),
};
/// How often a thread spinning on one op yields (another thread on its core may be the one
/// that completes it).
pub(crate) const SIGNAL_YIELD_EVERY: Duration = Duration::from_micros(16);

/// A thread helping in `WaitForAll` that finds the queues empty polls this long before it
/// sleeps.
pub(crate) const HELP_SPIN: SpinBudget = SpinBudget {
    first: Duration::from_nanos(16),
    cap: Duration::from_micros(2),
    total: Duration::from_micros(120),
};

/// A contended variable lock: the holder usually runs a few ops and lets go within
/// microseconds; backing off without touching the lock lets it keep the line meanwhile.
pub(crate) const VAR_LOCK_SPIN: SpinBudget = SpinBudget {
    first: Duration::from_micros(2),
    cap: Duration::from_micros(64),
    total: Duration::from_micros(128),
};

/// The settings of idle workers, from `EngineConfig` (environment variables in brackets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleConfig {
    /// How long an idle worker polls its queue before it parks (`MXRT_ENGINE_SPIN_US`, default
    /// 256 µs; 0 parks at once). Waking a parked thread costs tens of microseconds, so polling
    /// pays while ops come faster than that.
    pub spin: Duration,
    /// The longest pause between two polls (`MXRT_ENGINE_POLL_STEP_NS`, default 2048 ns): the
    /// poll interval doubles up to it, so the queue's cache line is not pulled away from the
    /// pushing thread on every push.
    pub poll_step: Duration,
    /// Whether a worker that defers to a completing thread on its CPU runs under `SCHED_BATCH`
    /// meanwhile (`MXRT_ENGINE_SCHED_BATCH`, default 0). Off, workers keep the scheduling
    /// policy the process gave them.
    pub sched_batch: bool,
}

impl Default for IdleConfig {
    fn default() -> Self {
        IdleConfig {
            spin: Duration::from_micros(256),
            poll_step: Duration::from_nanos(2048),
            sched_batch: false,
        }
    }
}

impl IdleConfig {
    /// The idle worker's poll as a back-off.
    pub(crate) fn poll(&self) -> Backoff {
        Backoff::new(Duration::from_nanos(16), self.poll_step, self.spin)
    }
}
