//! Records and the per-thread buffers they are appended to.
//!
//! Each thread that records gets its own buffer (a `Mutex<Vec<Record>>` that only that thread and
//! the dumping thread ever touch), registered once in a global list. Recording therefore takes no
//! global lock; a dump drains every buffer.

use crate::Context;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The category of a record: the `cat` field of the trace and the block of the aggregate stats.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Engine operators (`"operator"`).
    Operator,
    /// C API calls (`"MXNET_C_API"`).
    Api,
    /// Storage counters (`"Device Storage"`).
    Storage,
    /// KVStore push/pull/reduce (`"KVStore"`).
    KvStore,
    /// User events (`"event"`).
    Event,
    /// Tasks and counters of a domain: the domain name.
    Domain(Arc<str>),
    /// Frames of a domain (`"<domain>,frame"`).
    Frame(Arc<str>),
    /// Instant markers of a domain (`"<domain>,instant_marker"`).
    Marker(Arc<str>),
}

impl Category {
    /// The category text written to the trace and the stats.
    pub fn text(&self) -> String {
        match self {
            Category::Operator => "operator".into(),
            Category::Api => "MXNET_C_API".into(),
            Category::Storage => "Device Storage".into(),
            Category::KvStore => "KVStore".into(),
            Category::Event => "event".into(),
            Category::Domain(d) => d.to_string(),
            Category::Frame(d) => format!("{d},frame"),
            Category::Marker(d) => format!("{d},instant_marker"),
        }
    }
}

/// How a duration is written to the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// `B`/`E` pair on the thread's track (operators, events, kvstore calls).
    Sync,
    /// `b`/`e` pair with an `id` (API calls, tasks): may overlap anything.
    Async,
    /// `(`/`)` context pair (frames).
    Context,
}

/// Scope of an instant marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerScope {
    Global,
    Process,
    Thread,
    Task,
    Marker,
}

impl MarkerScope {
    /// Parses MXNet's scope strings.
    pub fn parse(s: &str) -> crate::Result<Self> {
        match s {
            "global" => Ok(MarkerScope::Global),
            "process" => Ok(MarkerScope::Process),
            "thread" => Ok(MarkerScope::Thread),
            "task" => Ok(MarkerScope::Task),
            "marker" => Ok(MarkerScope::Marker),
            _ => Err(crate::Error::invalid(format!(
                "Invalid marker scope '{s}' (accepted: 'global', 'process', 'thread', 'task', 'marker')"
            ))),
        }
    }
    /// The trace's `s` value: `g` global, `t` thread, `p` for everything else.
    pub fn trace_letter(self) -> &'static str {
        match self {
            MarkerScope::Global => "g",
            MarkerScope::Thread => "t",
            _ => "p",
        }
    }
}

/// What a record measured.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// A completed interval, in microseconds since the epoch.
    Duration { start: u64, end: u64, style: Style },
    /// A counter's new value.
    Counter { ts: u64, value: u64 },
    /// An instant marker.
    Marker { ts: u64, scope: MarkerScope },
}

/// One profiled event.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub name: Arc<str>,
    pub category: Category,
    /// The device the event belongs to (its trace pid); `None`: a per-category pid.
    pub device: Option<Context>,
    /// The recording thread's id (see [`thread_id`]).
    pub tid: u32,
    pub payload: Payload,
    /// Whether the aggregate stats count this record.
    pub aggregate: bool,
    /// Extra `args` (key, value) for the trace, e.g. the KVStore key.
    pub arg: Option<(&'static str, Box<str>)>,
}

/// Records per chunk: a full chunk is set aside rather than grown, so recording never copies
/// earlier records.
const CHUNK: usize = 4096;

/// A thread's records: the chunk being filled and the full ones.
#[derive(Default)]
pub(crate) struct Chunks {
    current: Vec<Record>,
    full: Vec<Vec<Record>>,
}

/// One thread's buffer.
pub(crate) struct ThreadBuf {
    pub tid: u32,
    pub name: String,
    pub records: Mutex<Chunks>,
}

static NEXT_TID: AtomicU32 = AtomicU32::new(1);
static REGISTRY: Mutex<Vec<Arc<ThreadBuf>>> = Mutex::new(Vec::new());

fn register() -> Arc<ThreadBuf> {
    let tid = NEXT_TID.fetch_add(1, Ordering::Relaxed);
    let name = match std::thread::current().name() {
        Some(n) => n.to_string(),
        None => format!("thread {tid}"),
    };
    let buf = Arc::new(ThreadBuf {
        tid,
        name,
        records: Mutex::new(Chunks::default()),
    });
    REGISTRY.lock().push(buf.clone());
    buf
}

thread_local! {
    static LOCAL: Arc<ThreadBuf> = register();
    static NAMES: RefCell<HashMap<Box<str>, Arc<str>>> = RefCell::new(HashMap::new());
}

/// Names seen by this thread, shared between its records (saves an allocation per record).
const MAX_INTERNED: usize = 4096;

/// The calling thread's shared copy of `name`.
pub(crate) fn intern(name: &str) -> Arc<str> {
    NAMES
        .try_with(|m| {
            let mut m = m.borrow_mut();
            if let Some(a) = m.get(name) {
                return a.clone();
            }
            if m.len() >= MAX_INTERNED {
                m.clear();
            }
            let a: Arc<str> = name.into();
            m.insert(name.into(), a.clone());
            a
        })
        .unwrap_or_else(|_| name.into())
}

/// The calling thread's profiler id (small, stable for the thread's life, never reused). 0 when
/// called during thread teardown.
pub fn thread_id() -> u32 {
    LOCAL.try_with(|b| b.tid).unwrap_or(0)
}

/// Appends a record to the calling thread's buffer. The `tid` field is overwritten with the
/// calling thread's id. Dropped silently during thread teardown.
pub(crate) fn push(mut record: Record) {
    let _ = LOCAL.try_with(|b| {
        record.tid = b.tid;
        let mut c = b.records.lock();
        if c.current.len() == c.current.capacity() {
            let full = std::mem::replace(&mut c.current, Vec::with_capacity(CHUNK));
            if !full.is_empty() {
                c.full.push(full);
            }
        }
        c.current.push(record);
    });
}

/// Takes every buffered record of every thread (per thread in recording order), plus the
/// `(tid, name)` of every thread that had a buffer, and forgets buffers of threads that have
/// exited and have nothing left.
pub(crate) fn drain_all() -> (Vec<Record>, Vec<(u32, String)>) {
    let mut out = Vec::new();
    let mut names = Vec::new();
    let mut reg = REGISTRY.lock();
    let mut live = Vec::with_capacity(reg.len());
    for b in reg.drain(..) {
        // Decide before draining: a buffer only the registry references belongs to a thread that
        // has exited and can add nothing more. (Checking after draining would drop records a
        // thread added between the drain and its exit.)
        let exited = Arc::strong_count(&b) == 1;
        names.push((b.tid, b.name.clone()));
        let Chunks { current, full } = std::mem::take(&mut *b.records.lock());
        for mut chunk in full.into_iter().chain(std::iter::once(current)) {
            if out.is_empty() {
                out = chunk;
            } else {
                out.append(&mut chunk);
            }
        }
        if !exited {
            live.push(b);
        }
    }
    *reg = live;
    (out, names)
}
