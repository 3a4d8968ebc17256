//! The profiler (MXNet's `src/profiler`): records engine operators, C API calls, storage use,
//! KVStore calls and user profile objects, writes them as Chrome trace-event JSON, keeps aggregate
//! statistics, and optionally draws an HTML/SVG timeline.
//!
//! # Hooks for the rest of mxrt
//! The hot-path checks ([`ops_enabled`], [`api_enabled`], [`memory_enabled`],
//! [`kvstore_enabled`]) are one relaxed atomic load each. Records go to a per-thread buffer (no
//! global lock); a dump drains all buffers. Typical use in the engine:
//! ```
//! # use mxrt::{profiler, Context};
//! let scope = profiler::OpScope::begin("my_op", Context::cpu(0)); // None when off
//! // ... run the op ...
//! drop(scope); // records start/end on this thread
//! ```
//! or, with explicit times, `if ops_enabled() { let t0 = now_us(); ...; record_op(name, ctx, t0, now_us()) }`.
//!
//! The engine and the storage do not know the profiler: it installs its op sink and memory hook
//! into them while it records (see `state`), and shares their clock ([`crate::clock`]).
//!
//! Files: `flags` (the hot-path checks), `record` (the records the rest of mxrt makes), `state`
//! (configuration, run, pause), `output` (dumps, aggregate statistics, the dump timer), `buffer`
//! (per-thread record buffers), `trace` (Chrome JSON), `aggregate`, `timeline`, `objects` (user
//! profile objects), `config` (the configuration keys).
//!
//! # State (MXNet semantics, §7.2 of the spec)
//! * [`set_config`] replaces the whole configuration, deletes the trace file and starts a new one.
//! * [`set_state`]`(true)` runs (enables output, unpauses); `set_state(false)` stops and pauses.
//! * [`pause`] drops records while paused; profile objects record whenever not paused.
//! * [`dump`] needs output enabled; it appends the records collected so far and leaves a valid
//!   file. When `finished` or not `continuous_dump`, output is disabled afterwards.
//! * With `continuous_dump` a timer thread dumps every `dump_period` seconds while output is on.
//! * The process dumps once more at exit (an `atexit` hook registered on the first run).
//!
//! # Configuration keys ([`Config`])
//! | key | type | default |
//! |---|---|---|
//! | `profile_all` | bool | false (turns on the four modes below) |
//! | `profile_symbolic` | bool | true |
//! | `profile_imperative` | bool | true (engine operators and KVStore calls) |
//! | `profile_memory` | bool | true (storage counters) |
//! | `profile_api` | bool | true (C API calls) |
//! | `filename` | string | `profile.json` |
//! | `continuous_dump` | bool | true |
//! | `dump_period` | float seconds > 0 | 1.0 |
//! | `aggregate_stats` | bool | false |
//! | `profile_process` | `worker` / `server` | `worker` |
//! | `timeline` (mxrt) | bool or path | false: `true` writes `<filename stem>.html` next to the trace; a path ending in `.svg` gets an SVG, any other path an HTML page. Rewritten on every dump. |
//!
//! Booleans accept `true`/`false`/`1`/`0` in any case. An unknown key or a bad value is an error
//! naming the key (and, for unknown keys, every accepted key).
//!
//! # Trace format
//! Chrome trace-event JSON (`{"traceEvents": [...], "displayTimeUnit": "ms"}`), timestamps in
//! microseconds since the Unix epoch. Operators: `B`/`E` under the device's pid (`cpu/0` is pid
//! 0, `gpu/i` 100+i, `cpu pinned/i` 200+i, `cpu shared/i` 300+i) and the running thread's tid.
//! API calls and tasks: `b`/`e` with a unique `id`. Frames: `(`/`)`. Events and KVStore calls:
//! `B`/`E`. Counters (storage `Memory: cpu/0`, user counters, API call counters): `C`. Markers:
//! `i` with `s` = `g`/`p`/`t`. Records without a device get one pid per category, from 1000 on.
//! `process_name` and `thread_name` metadata (`M`) precede the first record of each pid / tid.

pub mod aggregate;
pub mod buffer;
pub mod config;
mod flags;
pub mod objects;
mod output;
mod record;
mod state;
pub mod timeline;
pub mod trace;

pub use crate::clock::now_us;
pub use aggregate::{AggregateStats, Format, SortBy, Stat, StatKind};
pub use buffer::{Category, MarkerScope, thread_id};
pub use config::{Config, ProcessKind, Timeline};
pub use flags::{api_enabled, kvstore_enabled, memory_enabled, objects_enabled, ops_enabled};
pub use objects::{Counter, Domain, Duration, DurationKind, ProfileObject, set_marker};
pub use output::{aggregate_print, dump};
pub use record::{
    API_CALLS_COUNTER, API_CONCURRENCY_COUNTER, ApiScope, CUSTOM_OPERATOR_DOMAIN, CustomCallbackScope,
    OpScope, record_api, record_kvstore, record_memory, record_op,
};
pub use state::{Status, init_from_env, pause, set_config, set_state, status};
