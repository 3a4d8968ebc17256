//! User profile objects: domains, tasks, frames, events, counters and instant markers
//! (`MXProfileCreate*`, `MXProfileDuration*`, `MXProfileSetCounter`, `MXProfileSetMarker`).
//!
//! Objects record whenever the profiler is not paused, independently of the run state.

use super::buffer::{Category, MarkerScope, Payload, Record, Style, push};
use super::{now_us, objects_enabled};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A named domain that groups tasks, frames, counters and markers.
#[derive(Debug)]
pub struct Domain {
    name: Arc<str>,
}

impl Domain {
    pub fn new(name: &str) -> Arc<Domain> {
        Arc::new(Domain { name: name.into() })
    }
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What kind of duration object a [`Duration`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DurationKind {
    Task,
    Frame,
    Event,
}

impl DurationKind {
    pub fn name(self) -> &'static str {
        match self {
            DurationKind::Task => "task",
            DurationKind::Frame => "frame",
            DurationKind::Event => "event",
        }
    }
}

/// A task, frame or event: something with a start and a stop.
#[derive(Debug)]
pub struct Duration {
    kind: DurationKind,
    name: Arc<str>,
    category: Category,
    started: Mutex<Option<u64>>,
}

impl Duration {
    /// A task of `domain` (trace: `b`/`e` pairs, category = the domain name).
    pub fn task(domain: &Domain, name: &str) -> Arc<Duration> {
        Self::make(
            DurationKind::Task,
            name,
            Category::Domain(domain.name.clone()),
        )
    }
    /// A frame of `domain` (trace: `(`/`)` pairs, category `<domain>,frame`).
    pub fn frame(domain: &Domain, name: &str) -> Arc<Duration> {
        Self::make(
            DurationKind::Frame,
            name,
            Category::Frame(domain.name.clone()),
        )
    }
    /// An event (trace: `B`/`E` pairs on the stopping thread's track, category `event`).
    pub fn event(name: &str) -> Arc<Duration> {
        Self::make(DurationKind::Event, name, Category::Event)
    }
    fn make(kind: DurationKind, name: &str, category: Category) -> Arc<Duration> {
        Arc::new(Duration {
            kind,
            name: name.into(),
            category,
            started: Mutex::new(None),
        })
    }
    pub fn kind(&self) -> DurationKind {
        self.kind
    }
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts (or restarts) the interval.
    pub fn start(&self) {
        *self.started.lock() = Some(now_us());
    }

    /// Ends the interval and records it (if the profiler is not paused). Stopping an interval that
    /// was never started is an error.
    pub fn stop(&self) -> Result<()> {
        let end = now_us();
        let Some(start) = self.started.lock().take() else {
            return Err(Error::invalid(format!(
                "profile {} '{}' was stopped without being started",
                self.kind.name(),
                self.name
            )));
        };
        if objects_enabled() {
            let style = match self.kind {
                DurationKind::Task => Style::Async,
                DurationKind::Frame => Style::Context,
                DurationKind::Event => Style::Sync,
            };
            push(Record {
                name: self.name.clone(),
                category: self.category.clone(),
                device: None,
                tid: 0,
                payload: Payload::Duration { start, end, style },
                aggregate: true,
                arg: None,
            });
        }
        Ok(())
    }
}

/// A counter of a domain; each change emits a counter record.
#[derive(Debug)]
pub struct Counter {
    name: Arc<str>,
    category: Category,
    value: AtomicU64,
}

impl Counter {
    pub fn new(domain: &Domain, name: &str) -> Arc<Counter> {
        Arc::new(Counter {
            name: name.into(),
            category: Category::Domain(domain.name.clone()),
            value: AtomicU64::new(0),
        })
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn value(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
    /// Sets the value.
    pub fn set(&self, value: u64) {
        self.value.store(value, Ordering::Relaxed);
        self.emit(value);
    }
    /// Adds `delta` (wrapping, as MXNet's unsigned counter does).
    pub fn adjust(&self, delta: i64) {
        let v = self
            .value
            .fetch_add(delta as u64, Ordering::Relaxed)
            .wrapping_add(delta as u64);
        self.emit(v);
    }
    fn emit(&self, value: u64) {
        if objects_enabled() {
            push(Record {
                name: self.name.clone(),
                category: self.category.clone(),
                device: None,
                tid: 0,
                payload: Payload::Counter {
                    ts: now_us(),
                    value,
                },
                aggregate: true,
                arg: None,
            });
        }
    }
}

/// Records an instant marker in `domain` (category `<domain>,instant_marker`). `scope` is one of
/// `global`, `process`, `thread`, `task`, `marker`.
pub fn set_marker(domain: &Domain, name: &str, scope: &str) -> Result<()> {
    let scope = MarkerScope::parse(scope)?;
    if objects_enabled() {
        push(Record {
            name: name.into(),
            category: Category::Marker(domain.name.clone()),
            device: None,
            tid: 0,
            payload: Payload::Marker {
                ts: now_us(),
                scope,
            },
            aggregate: false,
            arg: None,
        });
    }
    Ok(())
}

/// Any profile object, as a `ProfileHandle` refers to it.
#[derive(Clone, Debug)]
pub enum ProfileObject {
    Domain(Arc<Domain>),
    Duration(Arc<Duration>),
    Counter(Arc<Counter>),
}
