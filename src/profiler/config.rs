//! Profiler configuration: the keys of `MXSetProfilerConfig` (MXNet's `ProfileConfigParam`) plus
//! mxrt's own `timeline` key.
//!
//! Every call to `MXSetProfilerConfig` describes a *complete* configuration: keys that are not
//! given take their defaults, as with MXNet's `dmlc::Parameter::Init` on a fresh parameter struct.

use crate::error::{Error, Result};
use std::path::PathBuf;

/// Mode bit: symbolic (graph executor) operators.
pub const MODE_SYMBOLIC: u32 = 1;
/// Mode bit: imperative operators (every named engine op).
pub const MODE_IMPERATIVE: u32 = 2;
/// Mode bit: C API calls.
pub const MODE_API: u32 = 4;
/// Mode bit: storage allocations and frees.
pub const MODE_MEMORY: u32 = 8;
/// MXNet's initial mode before any configuration (`MXNET_PROFILER_MODE` default).
pub const DEFAULT_ENV_MODE: u32 = MODE_SYMBOLIC | MODE_API | MODE_MEMORY;

/// Which process a profiler call addresses (`profile_process`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessKind {
    Worker = 0,
    Server = 1,
}

impl ProcessKind {
    /// Converts the C `profile_process` argument (0 worker, 1 server).
    pub fn from_code(code: i32) -> Result<Self> {
        match code {
            0 => Ok(ProcessKind::Worker),
            1 => Ok(ProcessKind::Server),
            _ => Err(Error::invalid(format!(
                "Invalid profile_process {code} (accepted: 0 worker, 1 server)"
            ))),
        }
    }
}

/// Where the HTML/SVG timeline goes (mxrt's `timeline` key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Timeline {
    /// No timeline (default).
    Off,
    /// A timeline next to the trace: `filename` with its extension replaced by `.html`.
    NextToTrace,
    /// A timeline at this path: SVG when it ends in `.svg`, HTML otherwise.
    Path(PathBuf),
}

/// A complete profiler configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub profile_all: bool,
    pub profile_symbolic: bool,
    pub profile_imperative: bool,
    pub profile_memory: bool,
    pub profile_api: bool,
    pub filename: String,
    pub continuous_dump: bool,
    pub dump_period: f64,
    pub aggregate_stats: bool,
    pub profile_process: ProcessKind,
    pub timeline: Timeline,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            profile_all: false,
            profile_symbolic: true,
            profile_imperative: true,
            profile_memory: true,
            profile_api: true,
            filename: "profile.json".to_string(),
            continuous_dump: true,
            dump_period: 1.0,
            aggregate_stats: false,
            profile_process: ProcessKind::Worker,
            timeline: Timeline::Off,
        }
    }
}

/// The accepted keys with their type and default, as listed in error messages.
pub const KEYS: &[(&str, &str, &str)] = &[
    ("profile_all", "boolean", "false"),
    ("profile_symbolic", "boolean", "true"),
    ("profile_imperative", "boolean", "true"),
    ("profile_memory", "boolean", "true"),
    ("profile_api", "boolean", "true"),
    ("filename", "string", "'profile.json'"),
    ("continuous_dump", "boolean", "true"),
    ("dump_period", "float > 0", "1.0"),
    ("aggregate_stats", "boolean", "false"),
    ("profile_process", "{'worker', 'server'}", "'worker'"),
    ("timeline", "boolean or path (.html or .svg)", "false"),
];

fn accepted_keys() -> String {
    KEYS.iter()
        .map(|(k, t, d)| format!("{k} ({t}, default {d})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses a boolean as dmlc does: `true`/`false`/`1`/`0`, case-insensitive.
fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(bad_value(key, value, "a boolean (true, false, 1 or 0)")),
    }
}

fn bad_value(key: &str, value: &str, expected: &str) -> Error {
    Error::invalid(format!(
        "Invalid value '{value}' for profiler config key '{key}': expected {expected}"
    ))
}

impl Config {
    /// Builds a configuration from key/value pairs; keys not given keep their defaults. An unknown
    /// key or a malformed value is an error naming the key (and, for unknown keys, every accepted
    /// key).
    pub fn parse<'a, I>(pairs: I) -> Result<Config>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut c = Config::default();
        for (key, value) in pairs {
            match key {
                "profile_all" => c.profile_all = parse_bool(key, value)?,
                "profile_symbolic" => c.profile_symbolic = parse_bool(key, value)?,
                "profile_imperative" => c.profile_imperative = parse_bool(key, value)?,
                "profile_memory" => c.profile_memory = parse_bool(key, value)?,
                "profile_api" => c.profile_api = parse_bool(key, value)?,
                "filename" => {
                    if value.is_empty() {
                        return Err(bad_value(key, value, "a non-empty file name"));
                    }
                    c.filename = value.to_string();
                }
                "continuous_dump" => c.continuous_dump = parse_bool(key, value)?,
                "dump_period" => {
                    let v: f64 = value
                        .trim()
                        .parse()
                        .map_err(|_| bad_value(key, value, "a number of seconds"))?;
                    if !v.is_finite() || v <= 0.0 {
                        return Err(bad_value(key, value, "a number of seconds greater than 0"));
                    }
                    c.dump_period = v;
                }
                "aggregate_stats" => c.aggregate_stats = parse_bool(key, value)?,
                "profile_process" => {
                    c.profile_process = match value.trim() {
                        "worker" => ProcessKind::Worker,
                        "server" => ProcessKind::Server,
                        _ => return Err(bad_value(key, value, "one of 'worker', 'server'")),
                    }
                }
                "timeline" => {
                    c.timeline = match value.trim().to_ascii_lowercase().as_str() {
                        "false" | "0" | "" => Timeline::Off,
                        "true" | "1" => Timeline::NextToTrace,
                        _ => Timeline::Path(PathBuf::from(value)),
                    }
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "Cannot find argument '{key}', Possible Arguments: {}",
                        accepted_keys()
                    )));
                }
            }
        }
        Ok(c)
    }

    /// The mode bitmask (`MODE_*`) this configuration selects.
    pub fn mode(&self) -> u32 {
        let all = self.profile_all;
        let mut mode = 0;
        if self.profile_api || all {
            mode |= MODE_API;
        }
        if self.profile_symbolic || all {
            mode |= MODE_SYMBOLIC;
        }
        if self.profile_imperative || all {
            mode |= MODE_IMPERATIVE;
        }
        if self.profile_memory || all {
            mode |= MODE_MEMORY;
        }
        mode
    }

    /// The timeline file, if one is configured.
    pub fn timeline_path(&self) -> Option<PathBuf> {
        match &self.timeline {
            Timeline::Off => None,
            Timeline::NextToTrace => Some(PathBuf::from(&self.filename).with_extension("html")),
            Timeline::Path(p) => Some(p.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_mxnet() {
        let c = Config::parse([]).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.mode(), 15);
        assert!(c.continuous_dump);
        assert_eq!(c.filename, "profile.json");
        assert_eq!(c.dump_period, 1.0);
        assert!(!c.aggregate_stats);
    }

    #[test]
    fn values_and_modes() {
        let c = Config::parse([
            ("profile_symbolic", "False"),
            ("profile_imperative", "0"),
            ("profile_memory", "false"),
            ("profile_api", "TRUE"),
            ("dump_period", "0.25"),
            ("profile_process", "server"),
            ("timeline", "x.svg"),
        ])
        .unwrap();
        assert_eq!(c.mode(), MODE_API);
        assert_eq!(c.dump_period, 0.25);
        assert_eq!(c.profile_process, ProcessKind::Server);
        assert_eq!(c.timeline_path(), Some(PathBuf::from("x.svg")));
        let c = Config::parse([("profile_all", "1"), ("profile_api", "0")]).unwrap();
        assert_eq!(c.mode(), 15);
        let c = Config::parse([("timeline", "true"), ("filename", "/tmp/a/t.json")]).unwrap();
        assert_eq!(c.timeline_path(), Some(PathBuf::from("/tmp/a/t.html")));
    }

    #[test]
    fn errors_name_the_key() {
        let e = Config::parse([("profile_everything", "1")]).unwrap_err();
        assert!(
            e.message()
                .starts_with("Cannot find argument 'profile_everything'"),
            "{e}"
        );
        for (k, _, _) in KEYS {
            assert!(e.message().contains(k), "{k} missing from {e}");
        }
        for (k, v) in [
            ("profile_api", "yes"),
            ("dump_period", "abc"),
            ("dump_period", "0"),
            ("dump_period", "-1"),
            ("profile_process", "client"),
            ("filename", ""),
        ] {
            let e = Config::parse([(k, v)]).unwrap_err();
            assert!(e.message().contains(&format!("'{k}'")), "{e}");
            assert!(e.message().contains(&format!("'{v}'")), "{e}");
        }
        assert!(ProcessKind::from_code(2).is_err());
    }
}
