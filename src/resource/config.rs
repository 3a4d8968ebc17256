//! How many copies of each resource a device gets (MXNet's environment variables).

use crate::error::{Error, Result};

/// Copies per device of the round-robin resource types, and the streams of a kParallelRandom copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceConfig {
    /// kTempSpace copies per CPU (`MXNET_CPU_TEMP_COPY`, default 4).
    pub cpu_temp_copies: usize,
    /// kTempSpace copies per GPU (`MXNET_GPU_TEMP_COPY`, default 1).
    pub gpu_temp_copies: usize,
    /// kParallelRandom copies per CPU (`MXNET_CPU_PARALLEL_RAND_COPY`, default 1).
    pub cpu_parallel_random_copies: usize,
    /// kParallelRandom copies per GPU (`MXNET_GPU_PARALLEL_RAND_COPY`, default 1).
    pub gpu_parallel_random_copies: usize,
    /// Streams in each kParallelRandom copy (mxrt's choice, fixed so that results do not depend
    /// on thread counts; default 64).
    pub parallel_streams: usize,
}

impl Default for ResourceConfig {
    fn default() -> Self {
        ResourceConfig {
            cpu_temp_copies: 4,
            gpu_temp_copies: 1,
            cpu_parallel_random_copies: 1,
            gpu_parallel_random_copies: 1,
            parallel_streams: 64,
        }
    }
}

impl ResourceConfig {
    /// The defaults, overridden by the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The defaults, overridden by the variables `env` returns. An empty value counts as unset;
    /// anything but an integer from 1 to 1024 is an error naming the variable.
    pub fn from_lookup(env: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut c = Self::default();
        for (name, slot) in [
            ("MXNET_CPU_TEMP_COPY", &mut c.cpu_temp_copies),
            ("MXNET_GPU_TEMP_COPY", &mut c.gpu_temp_copies),
            (
                "MXNET_CPU_PARALLEL_RAND_COPY",
                &mut c.cpu_parallel_random_copies,
            ),
            (
                "MXNET_GPU_PARALLEL_RAND_COPY",
                &mut c.gpu_parallel_random_copies,
            ),
        ] {
            let Some(v) = env(name).filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            match v.trim().parse::<usize>() {
                Ok(n) if (1..=1024).contains(&n) => *slot = n,
                _ => {
                    return Err(Error::invalid(format!(
                        "{name}={v:?} is not a copy count (expected an integer from 1 to 1024)"
                    )));
                }
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_overrides_and_errors() {
        assert_eq!(
            ResourceConfig::from_lookup(|_| None).unwrap(),
            ResourceConfig::default()
        );
        let c = ResourceConfig::from_lookup(|n| match n {
            "MXNET_CPU_TEMP_COPY" => Some(" 2 ".into()),
            "MXNET_GPU_PARALLEL_RAND_COPY" => Some("3".into()),
            "MXNET_GPU_TEMP_COPY" => Some("".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            (
                c.cpu_temp_copies,
                c.gpu_temp_copies,
                c.gpu_parallel_random_copies
            ),
            (2, 1, 3)
        );
        let e = ResourceConfig::from_lookup(|n| {
            (n == "MXNET_CPU_PARALLEL_RAND_COPY").then(|| "0".into())
        })
        .unwrap_err();
        assert!(
            e.message()
                .starts_with("MXNET_CPU_PARALLEL_RAND_COPY=\"0\" is not a copy count"),
            "{e}"
        );
    }
}
