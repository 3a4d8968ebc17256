//! The profiler's state (MXNet's semantics, see the module doc): configuration, mode, running and
//! paused, and what they switch on in the engine and the storage.

use super::config::{self, Config, ProcessKind};
use super::flags::{self, F_API, F_MEMORY, F_OBJECTS, F_OPS, memory_enabled};
use super::output::{dump_at_exit, start_timer, stop_timer};
use super::record::{record_memory, record_op};
use super::trace::TraceWriter;
use super::{AggregateStats, buffer};
use crate::error::{Error, Result};
use parking_lot::{Condvar, Mutex};
use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

pub(super) struct Core {
    pub(super) config: Config,
    pub(super) mode: u32,
    pub(super) running: bool,
    pub(super) paused: bool,
    pub(super) output: bool,
    pub(super) writer: Option<TraceWriter>,
    pub(super) aggregate: Option<AggregateStats>,
    /// Bumped to stop the current continuous-dump thread.
    pub(super) timer_gen: u64,
    pub(super) timer_running: bool,
    pub(super) atexit_registered: bool,
}

pub(super) static CORE: LazyLock<Mutex<Core>> = LazyLock::new(|| {
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
pub(super) static TIMER_CV: Condvar = Condvar::new();

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
    flags::set(f);
    // The engine times ops with the same clock as ours, so its sink is the operator recorder.
    crate::engine::profiling::set_op_recording(record_op, f & F_OPS != 0);
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
