//! Writing what was recorded: dumps to the trace file (and timeline), the aggregate statistics,
//! the continuous-dump timer and the dump at process exit.

use super::aggregate::{Format, SortBy};
use super::buffer::{self, Record};
use super::state::{CORE, Core, TIMER_CV};
use super::timeline;
use super::trace::TraceWriter;
use crate::error::{Error, Result};
use parking_lot::MutexGuard;
use std::time::Instant;

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

pub(super) fn start_timer(c: &mut MutexGuard<'_, Core>) {
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

pub(super) fn stop_timer(c: &mut Core) {
    if c.timer_running {
        c.timer_gen += 1;
        c.timer_running = false;
        TIMER_CV.notify_all();
    }
}

pub(super) extern "C" fn dump_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // the dump thread holds the lock for moments (just started, between waits, while it
        // dumps): wait for it briefly rather than skip the final dump, but never hang the exit
        if let Some(mut c) = CORE.try_lock_for(std::time::Duration::from_secs(2))
            && c.output
        {
            let _ = dump_locked(&mut c, true);
        }
    });
}
