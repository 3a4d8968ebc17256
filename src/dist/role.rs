//! A process's part in a distributed job and the job's settings, read from MXNet's environment
//! variables (`DMLC_ROLE`, `DMLC_NUM_WORKER`, `DMLC_NUM_SERVER`,
//! `MXNET_KVSTORE_BIGARRAY_BOUND`) and mxrt's own deadline (`MXRT_DIST_TIMEOUT_S`).
//!
//! Reading the role never starts MPI: the C API's `MXKVStoreIs*Node` queries and the Python
//! package's import-time check use it in processes that never create a distributed store.

use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

/// Values given by `MXInitPSEnv`, which take precedence over the process environment.
static JOB_ENV: Mutex<Option<HashMap<String, String>>> = Mutex::new(None);

/// Records job settings (`DMLC_ROLE`, `DMLC_NUM_WORKER`, ...) for this process.
pub fn set_job_env<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) {
    let mut env = JOB_ENV.lock();
    let map = env.get_or_insert_with(HashMap::new);
    for (k, v) in pairs {
        map.insert(k.to_owned(), v.to_owned());
    }
}

/// A job setting: from `MXInitPSEnv`, else from the environment.
fn var(name: &str) -> Option<String> {
    if let Some(v) = JOB_ENV.lock().as_ref().and_then(|m| m.get(name)) {
        return Some(v.clone());
    }
    std::env::var(name).ok()
}

/// What a process does in a distributed job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Pushes gradients and pulls weights (`DMLC_ROLE` unset, empty or `worker`).
    Worker,
    /// Holds a share of the keys, sums the workers' pushes and runs the updater.
    Server,
    /// ps-lite's rendezvous process; MPI needs none, so it has nothing to do.
    Scheduler,
}

impl Role {
    /// The role named by `DMLC_ROLE`.
    pub fn from_env() -> Result<Role> {
        Self::parse(var("DMLC_ROLE").as_deref())
    }

    /// Parses a `DMLC_ROLE` value (case-insensitive; `None` or empty is a worker).
    pub fn parse(value: Option<&str>) -> Result<Role> {
        match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("worker") => Ok(Role::Worker),
            Some("server") => Ok(Role::Server),
            Some("scheduler") => Ok(Role::Scheduler),
            Some(other) => Err(Error::invalid(format!(
                "DMLC_ROLE={other:?} is not a role (accepted: worker, server, scheduler)"
            ))),
        }
    }

    /// The code exchanged between processes when the job starts.
    pub fn code(self) -> i32 {
        match self {
            Role::Worker => 0,
            Role::Server => 1,
            Role::Scheduler => 2,
        }
    }

    pub fn from_code(code: i32) -> Option<Role> {
        match code {
            0 => Some(Role::Worker),
            1 => Some(Role::Server),
            2 => Some(Role::Scheduler),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Server => "server",
            Role::Scheduler => "scheduler",
        }
    }
}

/// The default deadline of every wait on another process.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// A distributed store's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DistConfig {
    /// `DMLC_NUM_WORKER`, when set: checked against the job.
    pub num_worker: Option<usize>,
    /// `DMLC_NUM_SERVER`, when set: checked against the job.
    pub num_server: Option<usize>,
    /// `MXRT_DIST_TIMEOUT_S`: how long any wait on another process may last before it fails.
    pub timeout: Duration,
    /// `MXNET_KVSTORE_BIGARRAY_BOUND`: arrays of at least this many elements are split over all
    /// servers.
    pub bigarray_bound: usize,
}

fn env_num(name: &str) -> Result<Option<usize>> {
    match var(name) {
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
            Error::invalid(format!("{name}={v:?} is not a non-negative integer"))
        }),
        None => Ok(None),
    }
}

impl DistConfig {
    pub fn from_env() -> Result<DistConfig> {
        let timeout = match var("MXRT_DIST_TIMEOUT_S") {
            Some(v) if !v.trim().is_empty() => {
                let s: f64 = v.trim().parse().ok().filter(|s: &f64| *s > 0.0 && s.is_finite()).ok_or_else(|| {
                    Error::invalid(format!(
                        "MXRT_DIST_TIMEOUT_S={v:?} is not a positive number of seconds"
                    ))
                })?;
                Duration::from_secs_f64(s)
            }
            _ => DEFAULT_TIMEOUT,
        };
        Ok(DistConfig {
            num_worker: env_num("DMLC_NUM_WORKER")?,
            num_server: env_num("DMLC_NUM_SERVER")?,
            timeout,
            bigarray_bound: env_num("MXNET_KVSTORE_BIGARRAY_BOUND")?
                .unwrap_or(crate::kvstore::reduce::DEFAULT_BIGARRAY_BOUND),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_parse_like_ps_lite() {
        assert_eq!(Role::parse(None).unwrap(), Role::Worker);
        assert_eq!(Role::parse(Some("")).unwrap(), Role::Worker);
        assert_eq!(Role::parse(Some("Server")).unwrap(), Role::Server);
        assert_eq!(Role::parse(Some("scheduler")).unwrap(), Role::Scheduler);
        let e = Role::parse(Some("boss")).unwrap_err();
        assert!(e.message().contains("DMLC_ROLE=\"boss\""), "{e}");
        for r in [Role::Worker, Role::Server, Role::Scheduler] {
            assert_eq!(Role::from_code(r.code()), Some(r));
        }
        assert_eq!(Role::from_code(7), None);
    }
}
