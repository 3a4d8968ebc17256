//! Engine selection, worker counts and the idle policy's settings, from the environment: MXNet's
//! variables with MXNet's defaults, and mxrt's own `MXRT_ENGINE_*`. This is the only place the
//! engine reads the environment.

use super::idle::IdleConfig;
use crate::error::{Error, Result};
use std::time::Duration;

/// Which engine runs ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    /// Runs every op synchronously on the pushing thread (`NaiveEngine`).
    Naive,
    /// One shared worker pool plus an I/O thread for copies (`ThreadedEngine`).
    Pooled,
    /// Per-device worker pools, a CPU priority pool and copy workers (`ThreadedEnginePerDevice`,
    /// the default).
    PerDevice,
}

impl EngineKind {
    /// MXNet's name for the engine (`MXNET_ENGINE_TYPE` value).
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Naive => "NaiveEngine",
            EngineKind::Pooled => "ThreadedEngine",
            EngineKind::PerDevice => "ThreadedEnginePerDevice",
        }
    }

    pub fn from_name(name: &str) -> Result<Self> {
        match name {
            "" | "ThreadedEnginePerDevice" => Ok(EngineKind::PerDevice),
            "ThreadedEngine" => Ok(EngineKind::Pooled),
            "NaiveEngine" => Ok(EngineKind::Naive),
            other => Err(Error::invalid(format!(
                "Cannot find Engine {other} (MXNET_ENGINE_TYPE must be NaiveEngine, ThreadedEngine or \
                 ThreadedEnginePerDevice)"
            ))),
        }
    }
}

/// Worker counts and engine kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    pub kind: EngineKind,
    /// Threads per CPU device's normal pool (`MXNET_CPU_WORKER_NTHREADS`, default 1).
    pub cpu_workers: usize,
    /// Threads of the CPU priority pool (`MXNET_CPU_PRIORITY_NTHREADS`, default 4).
    pub cpu_priority_workers: usize,
    /// Threads of ThreadedEngine's shared pool: `MXNET_CPU_WORKER_NTHREADS` when set, else
    /// MXNet's 16.
    pub pooled_workers: usize,
    /// Threads per GPU worker pool and per GPU priority pool (`MXNET_GPU_WORKER_NTHREADS`,
    /// default 2).
    pub gpu_workers: usize,
    /// Threads per GPU copy pool (`MXNET_GPU_COPY_NTHREADS`, default 2).
    pub gpu_copy_workers: usize,
    /// Whether a thread in `wait_for_all` runs queued CPU ops itself while that pays
    /// (`MXRT_ENGINE_WAIT_HELPS`, default 1; mxrt's own, MXNet has no such setting).
    pub wait_helps: bool,
    /// How idle workers poll, park and defer (`MXRT_ENGINE_SPIN_US`, `MXRT_ENGINE_POLL_STEP_NS`,
    /// `MXRT_ENGINE_SCHED_BATCH`; see [`IdleConfig`]).
    pub idle: IdleConfig,
}

impl EngineConfig {
    /// MXNet's defaults for `kind`.
    pub fn new(kind: EngineKind) -> Self {
        EngineConfig {
            kind,
            cpu_workers: 1,
            cpu_priority_workers: 4,
            pooled_workers: 16,
            gpu_workers: 2,
            gpu_copy_workers: 2,
            wait_helps: true,
            idle: IdleConfig::default(),
        }
    }

    /// A config with `n` workers for the normal CPU pool (and ThreadedEngine's pool).
    pub fn with_workers(kind: EngineKind, n: usize) -> Self {
        EngineConfig {
            cpu_workers: n.max(1),
            pooled_workers: n.max(1),
            ..Self::new(kind)
        }
    }

    /// Reads `MXNET_ENGINE_TYPE` and the worker-count variables. An empty variable counts as unset
    /// (as dmlc::GetEnv does); a value that is not a positive integer is an error naming it.
    pub fn from_env() -> Result<Self> {
        let kind = EngineKind::from_name(&std::env::var("MXNET_ENGINE_TYPE").unwrap_or_default())?;
        let mut c = Self::new(kind);
        if let Some(n) = env_count("MXNET_CPU_WORKER_NTHREADS")? {
            c.cpu_workers = n;
            c.pooled_workers = n;
        }
        if let Some(n) = env_count("MXNET_CPU_PRIORITY_NTHREADS")? {
            c.cpu_priority_workers = n;
        }
        if let Some(n) = env_count("MXNET_GPU_WORKER_NTHREADS")? {
            c.gpu_workers = n;
        }
        if let Some(n) = env_count("MXNET_GPU_COPY_NTHREADS")? {
            c.gpu_copy_workers = n;
        }
        if let Some(on) = env_switch("MXRT_ENGINE_WAIT_HELPS")? {
            c.wait_helps = on;
        }
        for old in ["MXRT_ENGINE_SPIN", "MXRT_ENGINE_POLL_DELAY"] {
            if std::env::var(old).is_ok_and(|v| !v.trim().is_empty()) {
                return Err(Error::invalid(format!(
                    "{old} is no longer read: idle workers take durations, \
                     MXRT_ENGINE_SPIN_US and MXRT_ENGINE_POLL_STEP_NS"
                )));
            }
        }
        if let Some(us) = env_duration("MXRT_ENGINE_SPIN_US", 0, 1_000_000)? {
            c.idle.spin = Duration::from_micros(us);
        }
        if let Some(ns) = env_duration("MXRT_ENGINE_POLL_STEP_NS", 1, 1_000_000)? {
            c.idle.poll_step = Duration::from_nanos(ns);
        }
        if let Some(on) = env_switch("MXRT_ENGINE_SCHED_BATCH")? {
            c.idle.sched_batch = on;
        }
        Ok(c)
    }
}

/// A 0/1 setting from the environment; `None` when unset or empty.
fn env_switch(name: &str) -> Result<Option<bool>> {
    match std::env::var(name) {
        Ok(v) => parse_switch(name, &v),
        Err(_) => Ok(None),
    }
}

fn parse_switch(name: &str, v: &str) -> Result<Option<bool>> {
    match v.trim() {
        "" => Ok(None),
        "0" => Ok(Some(false)),
        "1" => Ok(Some(true)),
        _ => Err(Error::invalid(format!(
            "{name}={v:?} is not a switch (expected 0 or 1)"
        ))),
    }
}

/// An integer from `min` to `max` from the environment; `None` when unset or empty.
fn env_duration(name: &str, min: u64, max: u64) -> Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => parse_duration(name, &v, min, max),
        Err(_) => Ok(None),
    }
}

fn parse_duration(name: &str, v: &str, min: u64, max: u64) -> Result<Option<u64>> {
    if v.trim().is_empty() {
        return Ok(None);
    }
    match v.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
        _ => Err(Error::invalid(format!(
            "{name}={v:?} is not an integer from {min} to {max}"
        ))),
    }
}

/// A positive thread count from the environment; `None` when unset or empty.
pub(crate) fn env_count(name: &str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (1..=1024).contains(&n) => Ok(Some(n)),
            _ => Err(Error::invalid(format!(
                "{name}={v:?} is not a thread count (expected an integer from 1 to 1024)"
            ))),
        },
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(EngineKind::from_name("").unwrap(), EngineKind::PerDevice);
        assert_eq!(
            EngineKind::from_name("NaiveEngine").unwrap(),
            EngineKind::Naive
        );
        assert_eq!(
            EngineKind::from_name("ThreadedEngine").unwrap(),
            EngineKind::Pooled
        );
        let e = EngineKind::from_name("naiveengine").unwrap_err();
        assert!(
            e.message().starts_with("Cannot find Engine naiveengine"),
            "{e}"
        );
        for k in [EngineKind::Naive, EngineKind::Pooled, EngineKind::PerDevice] {
            assert_eq!(EngineKind::from_name(k.name()).unwrap(), k);
        }
    }

    #[test]
    fn switches() {
        assert_eq!(parse_switch("S", "0").unwrap(), Some(false));
        assert_eq!(parse_switch("S", " 1 ").unwrap(), Some(true));
        assert_eq!(parse_switch("S", "").unwrap(), None);
        assert_eq!(parse_duration("D", " 250 ", 0, 1000).unwrap(), Some(250));
        assert_eq!(parse_duration("D", "", 0, 1000).unwrap(), None);
        let e = parse_duration("MXRT_ENGINE_SPIN_US", "-1", 0, 1000).unwrap_err();
        assert_eq!(
            e.message(),
            "MXRT_ENGINE_SPIN_US=\"-1\" is not an integer from 0 to 1000"
        );
        let e = parse_switch("MXRT_ENGINE_WAIT_HELPS", "yes").unwrap_err();
        assert_eq!(
            e.message(),
            "MXRT_ENGINE_WAIT_HELPS=\"yes\" is not a switch (expected 0 or 1)"
        );
    }
}
