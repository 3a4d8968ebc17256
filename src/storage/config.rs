//! Pool configuration from MXNet's environment variables, read when a manager is created.
//!
//! Host managers (cpu, cpu_pinned) read `MXNET_CPU_*`, gpu managers `MXNET_GPU_*`:
//!
//! | variable | default | rule |
//! |---|---|---|
//! | `MXNET_<D>_MEM_POOL_TYPE` | `Naive` | `Naive`, `Round` or `Unpooled` (exact spelling) |
//! | `MXNET_<D>_MEM_POOL_PAGE_SIZE` | 64 (CPU), 4096 (GPU) | `>= 32`; a power of two for `Round` (2.x's spelling `MXNET_<D>_POOL_PAGE_SIZE` is read when this one is unset) |
//! | `MXNET_<D>_MEM_LARGE_ALLOC_ROUND_SIZE` | 2097152 | `> 0` (Naive only) |
//! | `MXNET_<D>_MEM_POOL_ROUND_LINEAR_CUTOFF` | 24 | 20..=34 and `>= log2(page size)` (Round only) |
//! | `MXNET_<D>_MEM_POOL_RESERVE` | 5 | percent of device memory kept free, 0..=100 (pooled only) |
//!
//! As with `dmlc::GetEnv`, an empty value counts as unset, and only the variables the chosen
//! strategy uses are read. The CPU default is `Naive` (MXNet 2.x's choice; 1.9.1 did not pool host
//! memory at all): it makes the create/free cycle of small arrays a pool hit. Set
//! `MXNET_CPU_MEM_POOL_TYPE=Unpooled` for 1.9.1's behaviour.
//!
//! Host blocks are rounded to 64 bytes by default, not to 2.x's 4 KiB: 1.9.1 gave each host array
//! its own 64-byte-aligned allocation, and 4 KiB blocks would make a scalar take 512 times its
//! size and start every small array at a page boundary, so that all of them share one set of the
//! L1 cache (MXNet's RandSumExpr engine workload over 100 one-element arrays: 4.5% faster with
//! 64-byte blocks).

use super::strategy::{LOG2_MAX_MEM, MIN_PAGE_SIZE, MIN_ROUND_CUTOFF, Strategy, bits_needed};
use crate::error::{Error, Result};

/// Where environment variables come from: the process environment for the global storage, a map
/// in tests.
pub type EnvSource = dyn Fn(&str) -> Option<String> + Send + Sync;

/// Reads the real process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Which family of variables a manager reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvPrefix {
    /// `MXNET_CPU_*` (cpu and cpu_pinned).
    Cpu,
    /// `MXNET_GPU_*`.
    Gpu,
}

impl EnvPrefix {
    fn tag(self) -> &'static str {
        match self {
            EnvPrefix::Cpu => "CPU",
            EnvPrefix::Gpu => "GPU",
        }
    }
    /// Default `*_MEM_POOL_PAGE_SIZE` (see the module docs).
    pub fn default_page_size(self) -> usize {
        match self {
            EnvPrefix::Cpu => DEFAULT_CPU_PAGE_SIZE,
            EnvPrefix::Gpu => DEFAULT_GPU_PAGE_SIZE,
        }
    }
    /// Full variable name for a suffix such as `MEM_POOL_TYPE`.
    pub fn var(self, suffix: &str) -> String {
        format!("MXNET_{}_{suffix}", self.tag())
    }
}

/// Default pool type for both host and gpu managers.
pub const DEFAULT_POOL_TYPE: &str = "Naive";
/// Default `MXNET_CPU_MEM_POOL_PAGE_SIZE`.
pub const DEFAULT_CPU_PAGE_SIZE: usize = 64;
/// Default `MXNET_GPU_MEM_POOL_PAGE_SIZE`.
pub const DEFAULT_GPU_PAGE_SIZE: usize = 4096;
/// Default `*_MEM_LARGE_ALLOC_ROUND_SIZE`.
pub const DEFAULT_LARGE_ALLOC_ROUND_SIZE: i64 = 2 * 1024 * 1024;
/// Default `*_MEM_POOL_ROUND_LINEAR_CUTOFF`.
pub const DEFAULT_ROUND_CUTOFF: i64 = 24;
/// Default `*_MEM_POOL_RESERVE` (percent).
pub const DEFAULT_RESERVE_PERCENT: i64 = 5;

/// A pool's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    pub strategy: Strategy,
    /// Percent of the device's total memory the pool tries to leave free: when a fresh allocation
    /// would go below it, the pool first releases its cache.
    pub reserve_percent: u32,
}

fn read(env: &EnvSource, name: &str) -> Option<String> {
    env(name).filter(|v| !v.is_empty())
}

fn read_int(env: &EnvSource, name: &str, default: i64) -> Result<i64> {
    match read(env, name) {
        None => Ok(default),
        Some(v) => v.trim().parse::<i64>().map_err(|_| {
            Error::invalid(format!(
                "Invalid value for environment variable {name}: expected an integer, got '{v}'"
            ))
        }),
    }
}

impl PoolConfig {
    /// Reads and validates the variables of `prefix`. Bad values give an `InvalidArgument` error
    /// naming the variable.
    pub fn from_env(prefix: EnvPrefix, env: &EnvSource) -> Result<PoolConfig> {
        let type_var = prefix.var("MEM_POOL_TYPE");
        let pool_type = read(env, &type_var).unwrap_or_else(|| DEFAULT_POOL_TYPE.to_string());
        let page_var = prefix.var("MEM_POOL_PAGE_SIZE");
        let strategy = match pool_type.as_str() {
            "Unpooled" => Strategy::Unpooled,
            "Naive" => {
                let page_size = read_page_size(env, &page_var, prefix.default_page_size())?;
                let large_var = prefix.var("MEM_LARGE_ALLOC_ROUND_SIZE");
                let large = read_int(env, &large_var, DEFAULT_LARGE_ALLOC_ROUND_SIZE)?;
                if large <= 0 {
                    return Err(Error::invalid(format!(
                        "{large_var} cannot be set to a value <= 0, found: {large}"
                    )));
                }
                Strategy::Naive {
                    page_size,
                    large_alloc_round_size: to_usize(large, &large_var)?,
                }
            }
            "Round" => {
                let page_size = read_page_size(env, &page_var, prefix.default_page_size())?;
                if !page_size.is_power_of_two() {
                    return Err(Error::invalid(format!(
                        "{page_var} must be a power of 2. Got: {page_size}."
                    )));
                }
                let log2_page = page_size.trailing_zeros();
                let cutoff_var = prefix.var("MEM_POOL_ROUND_LINEAR_CUTOFF");
                let cutoff = read_int(env, &cutoff_var, DEFAULT_ROUND_CUTOFF)?;
                if cutoff < i64::from(MIN_ROUND_CUTOFF) || cutoff > i64::from(LOG2_MAX_MEM) {
                    return Err(Error::invalid(format!(
                        "{cutoff_var} cannot be set to a value smaller than {MIN_ROUND_CUTOFF} or greater than {LOG2_MAX_MEM}. Got: {cutoff}."
                    )));
                }
                if cutoff < i64::from(log2_page) {
                    return Err(Error::invalid(format!(
                        "{cutoff_var} cannot be set to a value smaller than log2 of {page_var}. Got: {cutoff} vs {log2_page}."
                    )));
                }
                debug_assert_eq!(bits_needed(page_size - 1), log2_page.max(1));
                Strategy::Round {
                    log2_page,
                    cutoff: cutoff as u32,
                }
            }
            other => {
                return Err(Error::invalid(format!(
                    "Unknown memory pool strategy specified: {other}. ({type_var} must be Naive, Round or Unpooled)"
                )));
            }
        };
        let reserve_percent = if strategy.is_pooled() {
            let reserve_var = prefix.var("MEM_POOL_RESERVE");
            let reserve = read_int(env, &reserve_var, DEFAULT_RESERVE_PERCENT)?;
            if !(0..=100).contains(&reserve) {
                return Err(Error::invalid(format!(
                    "{reserve_var} must be a percentage between 0 and 100. Got: {reserve}."
                )));
            }
            reserve as u32
        } else {
            0
        };
        Ok(PoolConfig {
            strategy,
            reserve_percent,
        })
    }
}

fn to_usize(v: i64, name: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::invalid(format!("{name} is out of range: {v}")))
}

fn read_page_size(env: &EnvSource, name: &str, default: usize) -> Result<usize> {
    // MXNet 2.x spells it `MXNET_<D>_POOL_PAGE_SIZE`; accept that when the 1.9.1 name is unset.
    let alias = name.replace("_MEM_POOL_PAGE_SIZE", "_POOL_PAGE_SIZE");
    let name = if read(env, name).is_none() && read(env, &alias).is_some() {
        alias.as_str()
    } else {
        name
    };
    let page = read_int(env, name, default as i64)?;
    if page < MIN_PAGE_SIZE as i64 {
        return Err(Error::invalid(format!(
            "{name} cannot be set to a value smaller than {MIN_PAGE_SIZE}. Got {page}."
        )));
    }
    to_usize(page, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> Box<EnvSource> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Box::new(move |name: &str| map.get(name).cloned())
    }

    fn cfg(prefix: EnvPrefix, pairs: &[(&str, &str)]) -> Result<PoolConfig> {
        PoolConfig::from_env(prefix, &*env_of(pairs))
    }

    fn err(prefix: EnvPrefix, pairs: &[(&str, &str)]) -> String {
        let e = cfg(prefix, pairs).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        e.message().to_string()
    }

    #[test]
    fn defaults_are_mxnets() {
        for (prefix, page_size) in [(EnvPrefix::Cpu, 64), (EnvPrefix::Gpu, 4096)] {
            let c = cfg(prefix, &[]).unwrap();
            assert_eq!(
                c.strategy,
                Strategy::Naive {
                    page_size,
                    large_alloc_round_size: 2097152
                }
            );
            assert_eq!(c.reserve_percent, 5);
        }
        // Empty values count as unset.
        let c = cfg(
            EnvPrefix::Cpu,
            &[
                ("MXNET_CPU_MEM_POOL_TYPE", ""),
                ("MXNET_CPU_MEM_POOL_PAGE_SIZE", ""),
            ],
        );
        assert_eq!(c.unwrap().strategy.name(), "Naive");
    }

    #[test]
    fn each_prefix_reads_only_its_variables() {
        let pairs = [
            ("MXNET_GPU_MEM_POOL_TYPE", "Round"),
            ("MXNET_CPU_MEM_POOL_TYPE", "Unpooled"),
        ];
        assert_eq!(
            cfg(EnvPrefix::Gpu, &pairs).unwrap().strategy,
            Strategy::Round {
                log2_page: 12,
                cutoff: 24
            }
        );
        let cpu = cfg(EnvPrefix::Cpu, &pairs).unwrap();
        assert_eq!(cpu.strategy, Strategy::Unpooled);
        assert_eq!(cpu.reserve_percent, 0);
    }

    #[test]
    fn round_settings() {
        let c = cfg(
            EnvPrefix::Gpu,
            &[
                ("MXNET_GPU_MEM_POOL_TYPE", "Round"),
                ("MXNET_GPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "20"),
                ("MXNET_GPU_MEM_POOL_PAGE_SIZE", "64"),
                ("MXNET_GPU_MEM_POOL_RESERVE", "10"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.strategy,
            Strategy::Round {
                log2_page: 6,
                cutoff: 20
            }
        );
        assert_eq!(c.reserve_percent, 10);
    }

    #[test]
    fn naive_settings() {
        let c = cfg(
            EnvPrefix::Cpu,
            &[
                ("MXNET_CPU_MEM_POOL_PAGE_SIZE", " 100 "),
                ("MXNET_CPU_MEM_LARGE_ALLOC_ROUND_SIZE", "1000"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.strategy,
            Strategy::Naive {
                page_size: 100,
                large_alloc_round_size: 1000
            }
        );
    }

    #[test]
    fn bad_values_are_clear_errors() {
        let m = err(EnvPrefix::Gpu, &[("MXNET_GPU_MEM_POOL_TYPE", "Fancy")]);
        assert!(
            m.contains("Unknown memory pool strategy specified: Fancy."),
            "{m}"
        );
        // Case matters, as in MXNet.
        assert!(err(EnvPrefix::Cpu, &[("MXNET_CPU_MEM_POOL_TYPE", "naive")]).contains("naive"));
        let m = err(EnvPrefix::Cpu, &[("MXNET_CPU_MEM_POOL_PAGE_SIZE", "16")]);
        assert_eq!(
            m,
            "MXNET_CPU_MEM_POOL_PAGE_SIZE cannot be set to a value smaller than 32. Got 16."
        );
        let m = err(EnvPrefix::Cpu, &[("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4k")]);
        assert!(
            m.contains("MXNET_CPU_MEM_POOL_PAGE_SIZE") && m.contains("'4k'"),
            "{m}"
        );
        let m = err(
            EnvPrefix::Gpu,
            &[("MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE", "0")],
        );
        assert_eq!(
            m,
            "MXNET_GPU_MEM_LARGE_ALLOC_ROUND_SIZE cannot be set to a value <= 0, found: 0"
        );
        let m = err(
            EnvPrefix::Gpu,
            &[
                ("MXNET_GPU_MEM_POOL_TYPE", "Round"),
                ("MXNET_GPU_MEM_POOL_PAGE_SIZE", "96"),
            ],
        );
        assert_eq!(
            m,
            "MXNET_GPU_MEM_POOL_PAGE_SIZE must be a power of 2. Got: 96."
        );
        for bad in ["19", "35"] {
            let m = err(
                EnvPrefix::Cpu,
                &[
                    ("MXNET_CPU_MEM_POOL_TYPE", "Round"),
                    ("MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF", bad),
                ],
            );
            assert!(
                m.contains("smaller than 20 or greater than 34") && m.contains(bad),
                "{m}"
            );
        }
        let m = err(
            EnvPrefix::Cpu,
            &[
                ("MXNET_CPU_MEM_POOL_TYPE", "Round"),
                ("MXNET_CPU_MEM_POOL_PAGE_SIZE", "4194304"),
                ("MXNET_CPU_MEM_POOL_ROUND_LINEAR_CUTOFF", "21"),
            ],
        );
        assert!(
            m.contains("smaller than log2 of MXNET_CPU_MEM_POOL_PAGE_SIZE. Got: 21 vs 22"),
            "{m}"
        );
        let m = err(EnvPrefix::Cpu, &[("MXNET_CPU_MEM_POOL_RESERVE", "101")]);
        assert!(m.contains("MXNET_CPU_MEM_POOL_RESERVE"), "{m}");
    }

    #[test]
    fn mxnet2_page_size_spelling_is_an_alias() {
        let c = cfg(EnvPrefix::Cpu, &[("MXNET_CPU_POOL_PAGE_SIZE", "256")]).unwrap();
        assert_eq!(
            c.strategy,
            Strategy::Naive {
                page_size: 256,
                large_alloc_round_size: 2097152
            }
        );
        let c = cfg(
            EnvPrefix::Cpu,
            &[
                ("MXNET_CPU_POOL_PAGE_SIZE", "256"),
                ("MXNET_CPU_MEM_POOL_PAGE_SIZE", "512"),
            ],
        )
        .unwrap();
        assert_eq!(
            c.strategy,
            Strategy::Naive {
                page_size: 512,
                large_alloc_round_size: 2097152
            }
        );
        let m = err(EnvPrefix::Gpu, &[("MXNET_GPU_POOL_PAGE_SIZE", "8")]);
        assert!(m.starts_with("MXNET_GPU_POOL_PAGE_SIZE cannot"), "{m}");
    }

    #[test]
    fn unused_variables_are_not_validated() {
        // Unpooled reads nothing else; Round ignores the Naive-only large-allocation size.
        assert!(
            cfg(
                EnvPrefix::Cpu,
                &[
                    ("MXNET_CPU_MEM_POOL_TYPE", "Unpooled"),
                    ("MXNET_CPU_MEM_POOL_PAGE_SIZE", "1")
                ]
            )
            .is_ok()
        );
        assert!(
            cfg(
                EnvPrefix::Cpu,
                &[
                    ("MXNET_CPU_MEM_POOL_TYPE", "Round"),
                    ("MXNET_CPU_MEM_LARGE_ALLOC_ROUND_SIZE", "-1")
                ]
            )
            .is_ok()
        );
    }
}
