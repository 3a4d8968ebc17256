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
pub mod objects;
pub mod timeline;
pub mod trace;

pub use aggregate::{AggregateStats, Format, SortBy, Stat, StatKind};
pub use buffer::{Category, MarkerScope, thread_id};
pub use config::{Config, ProcessKind, Timeline};
pub use objects::{Counter, Domain, Duration, DurationKind, ProfileObject, set_marker};

use crate::Context;
use crate::error::{Error, Result};
use buffer::{Payload, Record, Style, push};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use trace::TraceWriter;

const F_OPS: u32 = 1;
const F_API: u32 = 2;
const F_MEMORY: u32 = 4;
const F_OBJECTS: u32 = 8;

/// What is being recorded right now; recomputed on every state change. Initially: not running,
/// not paused (so profile objects record).
static FLAGS: AtomicU32 = AtomicU32::new(F_OBJECTS);

/// True when engine operators are recorded (running, not paused, imperative mode).
#[inline]
pub fn ops_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_OPS != 0
}

/// True when C API calls are recorded (running, not paused, API mode).
#[inline]
pub fn api_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_API != 0
}

/// True when storage use is recorded (running, not paused, memory mode).
#[inline]
pub fn memory_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_MEMORY != 0
}

/// True when KVStore calls are recorded (same condition as [`ops_enabled`]).
#[inline]
pub fn kvstore_enabled() -> bool {
    ops_enabled()
}

/// True when profile objects record (not paused).
#[inline]
pub fn objects_enabled() -> bool {
    FLAGS.load(Ordering::Relaxed) & F_OBJECTS != 0
}

static CLOCK: LazyLock<(Instant, u64)> = LazyLock::new(|| {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (Instant::now(), since_epoch.as_micros() as u64)
});

/// Microseconds since the Unix epoch, from a monotonic clock (never goes backwards).
#[inline]
pub fn now_us() -> u64 {
    let (base, epoch_us) = *CLOCK;
    epoch_us + base.elapsed().as_micros() as u64
}

/// Records an engine operator that ran on the calling thread from `start_us` to `end_us`, under
/// the trace process of `dev`. Callers check [`ops_enabled`] first; ops with an empty name are
/// not recorded (as in MXNet).
pub fn record_op(name: &str, dev: Context, start_us: u64, end_us: u64) {
    if name.is_empty() {
        return;
    }
    push(Record {
        name: buffer::intern(name),
        category: Category::Operator,
        device: Some(dev),
        tid: 0,
        payload: Payload::Duration {
            start: start_us,
            end: end_us,
            style: Style::Sync,
        },
        aggregate: true,
        arg: None,
    });
}

/// RAII recorder for one engine operator: records from [`OpScope::begin`] to drop.
#[must_use = "the op is recorded when the scope is dropped"]
pub struct OpScope<'a> {
    name: &'a str,
    dev: Context,
    start: u64,
}

impl<'a> OpScope<'a> {
    /// `None` (no cost beyond one atomic load) when operators are not being recorded or the name
    /// is empty.
    #[inline]
    pub fn begin(name: &'a str, dev: Context) -> Option<Self> {
        if ops_enabled() && !name.is_empty() {
            Some(OpScope {
                name,
                dev,
                start: now_us(),
            })
        } else {
            None
        }
    }
}

impl Drop for OpScope<'_> {
    fn drop(&mut self) {
        record_op(self.name, self.dev, self.start, now_us());
    }
}

/// Name of the API-call counter record.
pub const API_CALLS_COUNTER: &str = "MXNet C API Calls";
/// Name of the API-concurrency counter record.
pub const API_CONCURRENCY_COUNTER: &str = "MXNet C API Concurrency";
static API_CALLS: AtomicU64 = AtomicU64::new(0);
static API_CONCURRENCY: AtomicI64 = AtomicI64::new(0);

fn api_counter(name: &str, value: u64) {
    push(Record {
        name: name.into(),
        category: Category::Api,
        device: None,
        tid: 0,
        payload: Payload::Counter {
            ts: now_us(),
            value,
        },
        aggregate: false,
        arg: None,
    });
}

/// True for the profiler's own C functions, which are never recorded as API calls (MXNet's
/// `IgnoreProfileCallScope`).
fn is_profiler_api(name: &str) -> bool {
    name.starts_with("MXProfile")
        || name.starts_with("MXProcessProfile")
        || name.starts_with("MXSetProfiler")
        || name.starts_with("MXSetProcessProfiler")
        || name.starts_with("MXDumpProfile")
        || name.starts_with("MXDumpProcessProfile")
        || name.starts_with("MXAggregateProfile")
}

/// Records one C API call (category `MXNET_C_API`). Callers check [`api_enabled`] first.
pub fn record_api(name: &str, start_us: u64, end_us: u64) {
    if is_profiler_api(name) {
        return;
    }
    push(Record {
        name: buffer::intern(name),
        category: Category::Api,
        device: None,
        tid: 0,
        payload: Payload::Duration {
            start: start_us,
            end: end_us,
            style: Style::Async,
        },
        aggregate: true,
        arg: None,
    });
}

/// RAII recorder for a C API call, for the C layer's guard: also keeps the
/// "MXNet C API Calls" and "MXNet C API Concurrency" counters.
#[must_use = "the call is recorded when the scope is dropped"]
pub struct ApiScope {
    name: &'static str,
    start: u64,
}

impl ApiScope {
    /// `None` when API calls are not being recorded, or for the profiler's own functions.
    #[inline]
    pub fn begin(name: &'static str) -> Option<Self> {
        if !api_enabled() || is_profiler_api(name) {
            return None;
        }
        let calls = API_CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        let conc = API_CONCURRENCY.fetch_add(1, Ordering::Relaxed) + 1;
        api_counter(API_CALLS_COUNTER, calls);
        api_counter(API_CONCURRENCY_COUNTER, conc.max(0) as u64);
        Some(ApiScope {
            name,
            start: now_us(),
        })
    }
}

impl Drop for ApiScope {
    fn drop(&mut self) {
        let end = now_us();
        let conc = API_CONCURRENCY.fetch_sub(1, Ordering::Relaxed) - 1;
        record_api(self.name, self.start, end);
        api_counter(API_CONCURRENCY_COUNTER, conc.max(0) as u64);
    }
}

thread_local! {
    static MEMORY_NAMES: std::cell::RefCell<Vec<(Context, std::sync::Arc<str>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `Memory: <device>`, cached per thread.
fn memory_counter_name(ctx: Context) -> std::sync::Arc<str> {
    let make = || -> std::sync::Arc<str> { format!("Memory: {}", trace::device_name(ctx)).into() };
    MEMORY_NAMES
        .try_with(|v| {
            let mut v = v.borrow_mut();
            if let Some((_, n)) = v.iter().find(|(c, _)| *c == ctx) {
                return n.clone();
            }
            let n = make();
            v.push((ctx, n.clone()));
            n
        })
        .unwrap_or_else(|_| make())
}

/// Records the bytes in use on `ctx` (a counter `Memory: <dev>` in category `Device Storage`).
/// Callers (storage, on every allocation and free) check [`memory_enabled`] first.
pub fn record_memory(ctx: Context, bytes_in_use: u64) {
    push(Record {
        name: memory_counter_name(ctx),
        category: Category::Storage,
        device: Some(ctx),
        tid: 0,
        payload: Payload::Counter {
            ts: now_us(),
            value: bytes_in_use,
        },
        aggregate: true,
        arg: None,
    });
}

/// Records a KVStore call (`op` such as `"KVStore Push"`, `"KVStore Pull"`, `"KVStore Reduce"`)
/// on key `key` (category `KVStore`, the key in `args`). Callers check [`kvstore_enabled`].
pub fn record_kvstore(op: &str, key: &str, start_us: u64, end_us: u64) {
    push(Record {
        name: buffer::intern(op),
        category: Category::KvStore,
        device: None,
        tid: 0,
        payload: Payload::Duration {
            start: start_us,
            end: end_us,
            style: Style::Sync,
        },
        aggregate: true,
        arg: Some(("key", key.into())),
    });
}

// ---------------------------------------------------------------------------------------------
// State

struct Core {
    config: Config,
    mode: u32,
    running: bool,
    paused: bool,
    output: bool,
    writer: Option<TraceWriter>,
    aggregate: Option<AggregateStats>,
    /// Bumped to stop the current continuous-dump thread.
    timer_gen: u64,
    timer_running: bool,
    atexit_registered: bool,
}

static CORE: LazyLock<Mutex<Core>> = LazyLock::new(|| {
    let mode = std::env::var("MXNET_PROFILER_MODE")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .unwrap_or(config::DEFAULT_ENV_MODE);
    Mutex::new(Core {
        config: Config::default(),
        mode,
        running: false,
        paused: false,
        output: false,
        writer: None,
        aggregate: None,
        timer_gen: 0,
        timer_running: false,
        atexit_registered: false,
    })
});
static TIMER_CV: Condvar = Condvar::new();

fn recompute(c: &Core) {
    let active = c.running && !c.paused;
    let mut f = 0;
    if active && c.mode & config::MODE_IMPERATIVE != 0 {
        f |= F_OPS;
    }
    if active && c.mode & config::MODE_API != 0 {
        f |= F_API;
    }
    if active && c.mode & config::MODE_MEMORY != 0 {
        f |= F_MEMORY;
    }
    if !c.paused {
        f |= F_OBJECTS;
    }
    FLAGS.store(f, Ordering::Relaxed);
    crate::engine::profiling::set_op_recording(engine_op_sink, f & F_OPS != 0);
    // The process-wide storage reports allocations and frees only while memory is recorded.
    let memory = f & F_MEMORY != 0;
    if MEMORY_HOOKED.swap(memory, Ordering::Relaxed) != memory {
        let hook: Option<crate::storage::MemoryHook> =
            if memory { Some(storage_hook) } else { None };
        crate::storage::Storage::global().set_memory_hook(hook);
    }
}

static MEMORY_HOOKED: AtomicBool = AtomicBool::new(false);

/// The storage's memory hook: one counter record of the bytes in use per allocation or free.
fn storage_hook(event: &crate::storage::MemoryEvent) {
    if memory_enabled() {
        record_memory(event.ctx, event.bytes_in_use as u64);
    }
}

/// The engine's op sink. The engine measures with its own monotonic clock, so the interval is
/// moved onto [`now_us`]: the sink runs right after the op's end was taken, so the end is "now"
/// and the start is "now" minus the op's duration.
fn engine_op_sink(name: &str, ctx: Context, start_us: u64, end_us: u64) {
    let end = now_us();
    record_op(
        name,
        ctx,
        end.saturating_sub(end_us.saturating_sub(start_us)),
        end,
    );
}

/// A snapshot of the profiler's state.
#[derive(Clone, Debug, PartialEq)]
pub struct Status {
    pub running: bool,
    pub paused: bool,
    /// Whether dumps are allowed (set by running, cleared by a final dump).
    pub output_enabled: bool,
    /// The `MODE_*` bits.
    pub mode: u32,
    pub config: Config,
}

/// The current state.
pub fn status() -> Status {
    let c = CORE.lock();
    Status {
        running: c.running,
        paused: c.paused,
        output_enabled: c.output,
        mode: c.mode,
        config: c.config.clone(),
    }
}

/// Runs [`init_from_env`] when the library is loaded (as MXNet's profiler singleton does at static
/// initialisation), so `MXNET_PROFILER_AUTOSTART=1` works without any call.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static AUTOSTART_AT_LOAD: extern "C" fn() = {
    extern "C" fn autostart() {
        // Never unwind out of a loader constructor.
        let _ = std::panic::catch_unwind(init_from_env);
    }
    autostart
};

/// Applies `MXNET_PROFILER_AUTOSTART` (`1`/`true`: run at once with the default configuration,
/// writing `profile.json`). The initial mode comes from `MXNET_PROFILER_MODE` when the profiler
/// is first touched. Runs automatically at library load on Linux.
pub fn init_from_env() {
    let on = std::env::var("MXNET_PROFILER_AUTOSTART")
        .map(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
        .unwrap_or(false);
    if on {
        set_state(true);
    }
}

/// Replaces the configuration (worker process). Deletes the configured trace file (a new one is
/// started by the next dump) and drops records not yet dumped, creates or drops the aggregate accumulator and restarts the
/// continuous-dump timer. A server-process configuration is the caller's business (it goes to a
/// distributed KVStore) and is rejected here.
pub fn set_config(config: Config) -> Result<()> {
    if config.profile_process == ProcessKind::Server {
        return Err(Error::invalid(
            "profile_process=server configures a KVStore server, not this process",
        ));
    }
    let mut c = CORE.lock();
    match std::fs::remove_file(&config.filename) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(Error::io(format!(
                "cannot remove old profile {}: {e}",
                config.filename
            )));
        }
    }
    // Records collected for the old configuration (and its deleted file) are dropped.
    drop(buffer::drain_all());
    c.mode = config.mode();
    c.writer = None;
    if config.aggregate_stats {
        if c.aggregate.is_none() {
            c.aggregate = Some(AggregateStats::new());
        }
    } else {
        c.aggregate = None;
    }
    c.config = config;
    stop_timer(&mut c);
    if c.output && c.config.continuous_dump {
        start_timer(&mut c);
    }
    recompute(&c);
    Ok(())
}

/// `true`: run (output on, unpaused); `false`: stop (paused; output stays on so a final dump
/// still works).
pub fn set_state(run: bool) {
    let mut c = CORE.lock();
    if run {
        c.running = true;
        c.paused = false;
        c.output = true;
        if !c.atexit_registered {
            c.atexit_registered = true;
            // SAFETY: `dump_at_exit` is a plain `extern "C" fn()` that never unwinds (its body is
            // inside catch_unwind) and only uses 'static data.
            unsafe {
                libc::atexit(dump_at_exit);
            }
        }
        if c.config.continuous_dump && !c.timer_running {
            start_timer(&mut c);
        }
    } else {
        c.running = false;
        c.paused = true;
        stop_timer(&mut c);
    }
    recompute(&c);
}

/// Pauses (`true`) or resumes (`false`) recording.
pub fn pause(paused: bool) {
    let mut c = CORE.lock();
    c.paused = paused;
    recompute(&c);
}

const NOT_RUN: &str = "Profiler hasn't been run. Config and start profiler first";

/// Writes the records collected so far to the trace file (see the module doc).
pub fn dump(finished: bool) -> Result<()> {
    let mut c = CORE.lock();
    if !c.output {
        return Err(Error::invalid(NOT_RUN));
    }
    dump_locked(&mut c, finished)
}

/// Drains every thread's buffer into the aggregate stats; returns the records if they are to be
/// written (output on), with the thread names.
fn collect(c: &mut Core) -> (Vec<Record>, Vec<(u32, String)>) {
    let (records, names) = buffer::drain_all();
    if let Some(a) = c.aggregate.as_mut() {
        for r in &records {
            a.add(r);
        }
    }
    if c.output {
        (records, names)
    } else {
        (Vec::new(), names)
    }
}

fn dump_locked(c: &mut Core, finished: bool) -> Result<()> {
    let (records, names) = collect(c);
    let timeline = c.config.timeline_path();
    let filename = c.config.filename.clone();
    let w = c.writer.get_or_insert_with(|| TraceWriter::new(&filename));
    w.keep_bars = timeline.is_some();
    w.note_threads(&names);
    w.write(&records)
        .map_err(|e| Error::io(format!("cannot write profile {}: {e}", w.path().display())))?;
    if let Some(path) = timeline {
        let text = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            timeline::svg(&w.bars)
        } else {
            timeline::html(&w.bars)
        };
        std::fs::write(&path, text)
            .map_err(|e| Error::io(format!("cannot write timeline {}: {e}", path.display())))?;
    }
    if finished || !c.config.continuous_dump {
        c.output = false;
        stop_timer(c);
    }
    Ok(())
}

/// `MXAggregateProfileStatsPrintEx`: flushes pending records (a dump, when output is on, with the
/// usual effect on output), then prints the stats; empty when `aggregate_stats` is off. `reset`
/// clears the stats afterwards.
pub fn aggregate_print(
    format: Format,
    sort_by: SortBy,
    ascending: bool,
    reset: bool,
) -> Result<String> {
    let mut c = CORE.lock();
    if c.output {
        dump_locked(&mut c, false)?;
    } else {
        collect(&mut c);
    }
    let Some(a) = c.aggregate.as_mut() else {
        return Ok(String::new());
    };
    let out = a.print(format, sort_by, ascending);
    if reset {
        a.clear();
    }
    Ok(out)
}

fn start_timer(c: &mut MutexGuard<'_, Core>) {
    c.timer_gen += 1;
    c.timer_running = true;
    let generation = c.timer_gen;
    let period = std::time::Duration::from_secs_f64(c.config.dump_period);
    let spawned = std::thread::Builder::new()
        .name("mxrt-profiler-dump".into())
        .spawn(move || {
            let mut c = CORE.lock();
            loop {
                let deadline = Instant::now() + period;
                while Instant::now() < deadline && c.timer_gen == generation {
                    TIMER_CV.wait_until(&mut c, deadline);
                }
                if c.timer_gen != generation || !c.output {
                    break;
                }
                let _ = dump_locked(&mut c, false);
            }
            if c.timer_gen == generation {
                c.timer_running = false;
            }
        });
    if spawned.is_err() {
        c.timer_running = false;
    }
}

fn stop_timer(c: &mut Core) {
    if c.timer_running {
        c.timer_gen += 1;
        c.timer_running = false;
        TIMER_CV.notify_all();
    }
}

extern "C" fn dump_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(mut c) = CORE.try_lock()
            && c.output
        {
            let _ = dump_locked(&mut c, true);
        }
    });
}
