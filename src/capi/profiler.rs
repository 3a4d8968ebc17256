//! Profiler exports (MXNet 1.9.1 `c_api_profile.cc`): configuration, state, dumps, aggregate
//! stats and user profile objects. Semantics are those of [`crate::profiler`].
//!
//! Profile objects are handed out as registered handles: a NULL, freed or wrong-kind handle gives
//! -1 with a message instead of undefined behaviour. Domain handles live until the process ends
//! (`MXProfileDestroyHandle` ignores them, as MXNet does).
//!
//! The `profile_process = 1` (server) variants send the call to the servers of the distributed
//! KVStore `kvStoreHandle` names (each server runs it on itself; its trace file is the configured
//! one prefixed with `rank<r>_`). For a local store they check the handle and do nothing, as
//! MXNet's local KVStore does.

#![allow(non_snake_case)] // parameter names are MXNet's, as they appear in the header

use super::args;
use super::error::api_call;
use super::handle::{self, Handle, HandleKind};
use super::types::{KVStoreHandle, ProfileHandle};
use crate::error::{Error, Result};
use crate::kvstore::ServerProfilerCommand;
use crate::profiler::{
    self, Config, Counter, Domain, Duration, Format, ProcessKind, ProfileObject, SortBy,
};
use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::sync::Arc;

/// The registered object behind a `ProfileHandle`.
pub(crate) struct ProfileEntry(ProfileObject);

impl Handle for ProfileEntry {
    const KIND: HandleKind = HandleKind::Profile;
}

fn kind_name(o: &ProfileObject) -> &'static str {
    match o {
        ProfileObject::Domain(_) => "domain",
        ProfileObject::Duration(d) => d.kind().name(),
        ProfileObject::Counter(_) => "counter",
    }
}

fn wrong(arg: &str, o: &ProfileObject, want: &str) -> Error {
    Error::invalid(format!(
        "{arg} is a {} handle, expected {want}",
        kind_name(o)
    ))
}

fn get(h: ProfileHandle, arg: &str) -> Result<Arc<ProfileEntry>> {
    handle::borrow::<ProfileEntry>(h, arg)
}

fn domain(h: ProfileHandle, arg: &str) -> Result<Arc<Domain>> {
    match &get(h, arg)?.0 {
        ProfileObject::Domain(d) => Ok(d.clone()),
        o => Err(wrong(arg, o, "a domain")),
    }
}

fn duration(h: ProfileHandle, arg: &str) -> Result<Arc<Duration>> {
    match &get(h, arg)?.0 {
        ProfileObject::Duration(d) => Ok(d.clone()),
        o => Err(wrong(arg, o, "a task, frame or event")),
    }
}

fn counter(h: ProfileHandle, arg: &str) -> Result<Arc<Counter>> {
    match &get(h, arg)?.0 {
        ProfileObject::Counter(c) => Ok(c.clone()),
        o => Err(wrong(arg, o, "a counter")),
    }
}

fn hand_out(o: ProfileObject, out: *mut ProfileHandle) -> Result<()> {
    // SAFETY: `out` comes from the C caller, who promises it is valid for a write when non-NULL.
    let slot = unsafe { args::out(out, "out") }?;
    *slot = handle::into_handle(Arc::new(ProfileEntry(o)));
    Ok(())
}

/// For the server variants: sends `command` to the servers of the store `kvstore` (a local
/// store has none: nothing happens).
fn server_command(kvstore: KVStoreHandle, command: ServerProfilerCommand) -> Result<()> {
    if kvstore.is_null() {
        return Err(Error::invalid("Kvstore Handle passed to profiler is null"));
    }
    super::kvstore::server_profiler_command(kvstore, &command)
}

fn process(code: c_int) -> Result<ProcessKind> {
    ProcessKind::from_code(code)
}

/// Sets the profiler configuration of this process; see [`MXSetProcessProfilerConfig`].
///
/// # Safety
/// `keys` and `vals` must each point to `num_params` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSetProfilerConfig(
    num_params: c_int,
    keys: *const *const c_char,
    vals: *const *const c_char,
) -> c_int {
    api_call("MXSetProfilerConfig", || {
        // SAFETY: forwarded contract; NULL is an accepted KVStore handle for the worker process.
        unsafe { set_config(num_params, keys, vals, std::ptr::null_mut()) }
    })
}

/// Sets the profiler configuration from `num_params` key/value strings. Keys not given take their
/// defaults: profile_all=false, profile_symbolic/imperative/memory/api=true,
/// filename="profile.json", continuous_dump=true, dump_period=1.0, aggregate_stats=false,
/// profile_process="worker", and mxrt's own `timeline` (false; true = an HTML timeline next to the
/// trace, or a path ending in .html or .svg). The trace file is deleted at once. An unknown key or
/// a bad value fails naming the key. With profile_process="server" the configuration goes to the
/// servers of the distributed store `kvstoreHandle` (which must not be NULL; for a local store
/// nothing happens, as in MXNet).
///
/// # Safety
/// `keys` and `vals` must each point to `num_params` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXSetProcessProfilerConfig(
    num_params: c_int,
    keys: *const *const c_char,
    vals: *const *const c_char,
    kvstoreHandle: KVStoreHandle,
) -> c_int {
    api_call("MXSetProcessProfilerConfig", || {
        // SAFETY: forwarded contract.
        unsafe { set_config(num_params, keys, vals, kvstoreHandle) }
    })
}

/// Shared body of the two configuration exports.
///
/// # Safety
/// As for [`MXSetProcessProfilerConfig`].
unsafe fn set_config(
    num_params: c_int,
    keys: *const *const c_char,
    vals: *const *const c_char,
    kvstore: KVStoreHandle,
) -> Result<()> {
    let n = args::count(num_params.into(), "num_params")?;
    // SAFETY: the caller promises `n` readable pointers in each array.
    let (ks, vs) = unsafe { (args::slice(keys, n, "keys")?, args::slice(vals, n, "vals")?) };
    let mut pairs = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: each element is a NUL-terminated string per the caller's contract.
        let k = unsafe { args::c_str_at(ks[i], "keys", i)? };
        // SAFETY: as above.
        let v = unsafe { args::c_str_at(vs[i], "vals", i)? };
        pairs.push((k, v));
    }
    let config = Config::parse(pairs.iter().copied())?;
    if config.profile_process == ProcessKind::Server {
        let owned = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        return server_command(kvstore, ServerProfilerCommand::Config(owned));
    }
    profiler::set_config(config)
}

/// Sets the profiler state of this process: 1 runs (enables output, unpauses), 0 stops (pauses).
#[unsafe(no_mangle)]
pub extern "C" fn MXSetProfilerState(state: c_int) -> c_int {
    api_call("MXSetProfilerState", || {
        set_state(state, 0, std::ptr::null_mut())
    })
}

/// Sets the profiler state: 1 runs (enables output, unpauses), 0 stops (pauses); any other value
/// fails. `profile_process` is 0 (worker, this process) or 1 (the servers of the distributed store
/// `kvStoreHandle`, which must not be NULL; for a local store nothing happens, as in MXNet).
#[unsafe(no_mangle)]
pub extern "C" fn MXSetProcessProfilerState(
    state: c_int,
    profile_process: c_int,
    kvStoreHandle: KVStoreHandle,
) -> c_int {
    api_call("MXSetProcessProfilerState", || {
        set_state(state, profile_process, kvStoreHandle)
    })
}

fn set_state(state: c_int, profile_process: c_int, kvstore: KVStoreHandle) -> Result<()> {
    let run = match state {
        0 => false,
        1 => true,
        _ => {
            return Err(Error::invalid(format!(
                "Invalid profiler state {state} (accepted: 0 stop, 1 run)"
            )));
        }
    };
    if process(profile_process)? == ProcessKind::Server {
        return server_command(kvstore, ServerProfilerCommand::State(run));
    }
    profiler::set_state(run);
    Ok(())
}

/// Writes the records collected so far to the trace file; see [`MXDumpProcessProfile`].
#[unsafe(no_mangle)]
pub extern "C" fn MXDumpProfile(finished: c_int) -> c_int {
    api_call("MXDumpProfile", || dump(finished, 0, std::ptr::null_mut()))
}

/// Writes the records collected so far to the trace file, which is complete, valid JSON after
/// every dump. Fails unless the profiler has been run since the last final dump. When `finished`
/// is non-zero, or continuous_dump is off, output is disabled afterwards. `profile_process` as for
/// [`MXSetProcessProfilerState`] (each server dumps its own trace).
#[unsafe(no_mangle)]
pub extern "C" fn MXDumpProcessProfile(
    finished: c_int,
    profile_process: c_int,
    kvStoreHandle: KVStoreHandle,
) -> c_int {
    api_call("MXDumpProcessProfile", || {
        dump(finished, profile_process, kvStoreHandle)
    })
}

fn dump(finished: c_int, profile_process: c_int, kvstore: KVStoreHandle) -> Result<()> {
    if process(profile_process)? == ProcessKind::Server {
        return server_command(kvstore, ServerProfilerCommand::Dump(finished != 0));
    }
    profiler::dump(finished != 0)
}

thread_local! {
    static STATS_TEXT: RefCell<CString> = RefCell::new(CString::default());
}

/// Prints the aggregate stats as a table sorted by total time, descending; see
/// [`MXAggregateProfileStatsPrintEx`].
///
/// # Safety
/// `out_str` must be valid for a write of one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAggregateProfileStatsPrint(
    out_str: *mut *const c_char,
    reset: c_int,
) -> c_int {
    api_call("MXAggregateProfileStatsPrint", || {
        // SAFETY: forwarded contract.
        unsafe { print_stats(out_str, reset, 0, 0, 0) }
    })
}

/// Flushes pending records (a dump, if output is enabled), then prints the aggregate stats:
/// `format` 0 table, 1 JSON; `sort_by` 0 total, 1 avg, 2 min, 3 max, 4 count; `ascending` 0/1.
/// The text is empty when aggregate_stats is off. `reset` non-zero clears the stats afterwards.
/// `*out_str` points to a thread-local buffer valid until the next call of this function on the
/// same thread.
///
/// # Safety
/// `out_str` must be valid for a write of one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXAggregateProfileStatsPrintEx(
    out_str: *mut *const c_char,
    reset: c_int,
    format: c_int,
    sort_by: c_int,
    ascending: c_int,
) -> c_int {
    api_call("MXAggregateProfileStatsPrintEx", || {
        // SAFETY: forwarded contract.
        unsafe { print_stats(out_str, reset, format, sort_by, ascending) }
    })
}

/// Shared body of the two stats exports.
///
/// # Safety
/// `out_str` must be valid for a write of one pointer.
unsafe fn print_stats(
    out_str: *mut *const c_char,
    reset: c_int,
    format: c_int,
    sort_by: c_int,
    ascending: c_int,
) -> Result<()> {
    // SAFETY: the caller promises `out_str` is writable when non-NULL.
    let out = unsafe { args::out(out_str, "out_str") }?;
    let format = Format::from_code(format)?;
    let sort_by = SortBy::from_code(sort_by)?;
    let text = profiler::aggregate_print(format, sort_by, ascending != 0, reset != 0)?;
    let c = CString::new(text).map_err(|_| Error::internal("stats text contains NUL"))?;
    *out = STATS_TEXT.with(|slot| {
        *slot.borrow_mut() = c;
        slot.borrow().as_ptr()
    });
    Ok(())
}

/// Pauses (non-zero) or resumes (0) recording in this process.
#[unsafe(no_mangle)]
pub extern "C" fn MXProfilePause(paused: c_int) -> c_int {
    api_call("MXProfilePause", || pause(paused, 0, std::ptr::null_mut()))
}

/// Pauses (non-zero) or resumes (0) recording. `profile_process` as for
/// [`MXSetProcessProfilerState`].
#[unsafe(no_mangle)]
pub extern "C" fn MXProcessProfilePause(
    paused: c_int,
    profile_process: c_int,
    kvStoreHandle: KVStoreHandle,
) -> c_int {
    api_call("MXProcessProfilePause", || {
        pause(paused, profile_process, kvStoreHandle)
    })
}

fn pause(paused: c_int, profile_process: c_int, kvstore: KVStoreHandle) -> Result<()> {
    if process(profile_process)? == ProcessKind::Server {
        return server_command(kvstore, ServerProfilerCommand::Pause(paused != 0));
    }
    profiler::pause(paused != 0);
    Ok(())
}

/// Creates a domain named `domain`. Domains are never destroyed.
///
/// # Safety
/// `domain` must be a NUL-terminated string; `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXProfileCreateDomain(
    domain: *const c_char,
    out: *mut ProfileHandle,
) -> c_int {
    api_call("MXProfileCreateDomain", || {
        // SAFETY: forwarded contract.
        let name = unsafe { args::c_str(domain, "domain") }?;
        hand_out(ProfileObject::Domain(Domain::new(name)), out)
    })
}

/// Creates a task of `domain`. Free it with [`MXProfileDestroyHandle`].
///
/// # Safety
/// `task_name` must be a NUL-terminated string; `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXProfileCreateTask(
    domain: ProfileHandle,
    task_name: *const c_char,
    out: *mut ProfileHandle,
) -> c_int {
    api_call("MXProfileCreateTask", || {
        let d = self::domain(domain, "domain")?;
        // SAFETY: forwarded contract.
        let name = unsafe { args::c_str(task_name, "task_name") }?;
        hand_out(ProfileObject::Duration(Duration::task(&d, name)), out)
    })
}

/// Creates a frame of `domain`. Free it with [`MXProfileDestroyHandle`].
///
/// # Safety
/// `frame_name` must be a NUL-terminated string; `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXProfileCreateFrame(
    domain: ProfileHandle,
    frame_name: *const c_char,
    out: *mut ProfileHandle,
) -> c_int {
    api_call("MXProfileCreateFrame", || {
        let d = self::domain(domain, "domain")?;
        // SAFETY: forwarded contract.
        let name = unsafe { args::c_str(frame_name, "frame_name") }?;
        hand_out(ProfileObject::Duration(Duration::frame(&d, name)), out)
    })
}

/// Creates an event. Free it with [`MXProfileDestroyHandle`].
///
/// # Safety
/// `event_name` must be a NUL-terminated string; `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXProfileCreateEvent(
    event_name: *const c_char,
    out: *mut ProfileHandle,
) -> c_int {
    api_call("MXProfileCreateEvent", || {
        // SAFETY: forwarded contract.
        let name = unsafe { args::c_str(event_name, "event_name") }?;
        hand_out(ProfileObject::Duration(Duration::event(name)), out)
    })
}

/// Creates a counter (initially 0) of `domain`. Free it with [`MXProfileDestroyHandle`].
///
/// # Safety
/// `counter_name` must be a NUL-terminated string; `out` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXProfileCreateCounter(
    domain: ProfileHandle,
    counter_name: *const c_char,
    out: *mut ProfileHandle,
) -> c_int {
    api_call("MXProfileCreateCounter", || {
        let d = self::domain(domain, "domain")?;
        // SAFETY: forwarded contract.
        let name = unsafe { args::c_str(counter_name, "counter_name") }?;
        hand_out(ProfileObject::Counter(Counter::new(&d, name)), out)
    })
}

/// Frees a task, frame, event or counter handle. NULL, or a freed handle, fails; a domain handle
/// is accepted and ignored (domains live for the whole process).
#[unsafe(no_mangle)]
pub extern "C" fn MXProfileDestroyHandle(frame_handle: ProfileHandle) -> c_int {
    api_call("MXProfileDestroyHandle", || {
        if let ProfileObject::Domain(_) = get(frame_handle, "frame_handle")?.0 {
            return Ok(());
        }
        handle::take::<ProfileEntry>(frame_handle, "frame_handle").map(drop)
    })
}

/// Starts (or restarts) a task, frame or event.
#[unsafe(no_mangle)]
pub extern "C" fn MXProfileDurationStart(duration_handle: ProfileHandle) -> c_int {
    api_call("MXProfileDurationStart", || {
        duration(duration_handle, "duration_handle")?.start();
        Ok(())
    })
}

/// Stops a task, frame or event and records it (unless paused). Fails if it was not started.
#[unsafe(no_mangle)]
pub extern "C" fn MXProfileDurationStop(duration_handle: ProfileHandle) -> c_int {
    api_call("MXProfileDurationStop", || {
        duration(duration_handle, "duration_handle")?.stop()
    })
}

/// Sets a counter's value; records the change (unless paused).
#[unsafe(no_mangle)]
pub extern "C" fn MXProfileSetCounter(counter_handle: ProfileHandle, value: u64) -> c_int {
    api_call("MXProfileSetCounter", || {
        counter(counter_handle, "counter_handle")?.set(value);
        Ok(())
    })
}

/// Adds `value` (possibly negative) to a counter; records the change (unless paused).
#[unsafe(no_mangle)]
pub extern "C" fn MXProfileAdjustCounter(counter_handle: ProfileHandle, value: i64) -> c_int {
    api_call("MXProfileAdjustCounter", || {
        counter(counter_handle, "counter_handle")?.adjust(value);
        Ok(())
    })
}

/// Records an instant marker named `instant_marker_name` in `domain`. `scope` is one of
/// "global", "process", "thread", "task", "marker"; anything else fails.
///
/// # Safety
/// `instant_marker_name` and `scope` must be NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn MXProfileSetMarker(
    domain: ProfileHandle,
    instant_marker_name: *const c_char,
    scope: *const c_char,
) -> c_int {
    api_call("MXProfileSetMarker", || {
        let d = self::domain(domain, "domain")?;
        // SAFETY: forwarded contract.
        let name = unsafe { args::c_str(instant_marker_name, "instant_marker_name") }?;
        // SAFETY: forwarded contract.
        let scope = unsafe { args::c_str(scope, "scope") }?;
        profiler::set_marker(&d, name, scope)
    })
}
