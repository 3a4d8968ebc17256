//! The records the rest of mxrt makes: engine operators, C API calls (with their counters),
//! storage use and KVStore calls. Each goes to the calling thread's buffer.

use super::buffer::{self, Category, Payload, Record, Style, push};
use super::flags::{api_enabled, ops_enabled};
use super::trace;
use crate::Context;
use crate::clock::now_us;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Records an engine operator that ran on the calling thread from `start_us` to `end_us`, under
/// the trace process of `dev`. Callers check [`ops_enabled`] first; ops with an empty name are
/// not recorded (as in MXNet).
pub fn record_op(name: &str, dev: Context, start_us: u64, end_us: u64) {
    if name.is_empty() {
        return;
    }
    // an op a custom operator's callback pushed (`<op_type>::<op>`) belongs to the custom
    // operators' domain, as in MXNet
    let category = if name.contains("::") {
        Category::Domain(custom_domain())
    } else {
        Category::Operator
    };
    push_interval(
        name,
        category,
        Some(dev),
        (start_us, end_us),
        Style::Sync,
        None,
    );
}

/// MXNet's domain of the custom operators' callbacks and of the ops they push.
pub const CUSTOM_OPERATOR_DOMAIN: &str = "Custom Operator";

fn custom_domain() -> std::sync::Arc<str> {
    static NAME: std::sync::OnceLock<std::sync::Arc<str>> = std::sync::OnceLock::new();
    NAME.get_or_init(|| CUSTOM_OPERATOR_DOMAIN.into()).clone()
}

/// RAII recorder of a custom operator's front-end callback (MXNet's `<op_type>::pure_python`
/// task of the "Custom Operator" domain): records from [`CustomCallbackScope::begin`] to drop,
/// on the calling thread, while operators are being recorded.
#[must_use = "the callback is recorded when the scope is dropped"]
pub struct CustomCallbackScope {
    name: String,
    start: u64,
}

impl CustomCallbackScope {
    /// `name` is the custom operator's registered name (`_backward_<name>` for its backward).
    pub fn begin(name: &str) -> Option<Self> {
        ops_enabled().then(|| CustomCallbackScope {
            name: format!("{name}::pure_python"),
            start: now_us(),
        })
    }
}

impl Drop for CustomCallbackScope {
    fn drop(&mut self) {
        push_interval(
            &self.name,
            Category::Domain(custom_domain()),
            None,
            (self.start, now_us()),
            Style::Async,
            None,
        );
    }
}

/// Records an interval from `start_us` to `end_us` on the calling thread (counted by the aggregate
/// stats).
fn push_interval(
    name: &str,
    category: Category,
    device: Option<Context>,
    (start, end): (u64, u64),
    style: Style,
    arg: Option<(&'static str, Box<str>)>,
) {
    push(Record {
        name: buffer::intern(name),
        category,
        device,
        tid: 0,
        payload: Payload::Duration { start, end, style },
        aggregate: true,
        arg,
    });
}

/// Records a counter's value now on the calling thread.
fn push_counter(
    name: std::sync::Arc<str>,
    category: Category,
    device: Option<Context>,
    value: u64,
    aggregate: bool,
) {
    push(Record {
        name,
        category,
        device,
        tid: 0,
        payload: Payload::Counter {
            ts: now_us(),
            value,
        },
        aggregate,
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
    push_counter(name.into(), Category::Api, None, value, false);
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
    push_interval(
        name,
        Category::Api,
        None,
        (start_us, end_us),
        Style::Async,
        None,
    );
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
/// Callers (storage, on every allocation and free) check
/// [`memory_enabled`](super::memory_enabled) first.
pub fn record_memory(ctx: Context, bytes_in_use: u64) {
    push_counter(
        memory_counter_name(ctx),
        Category::Storage,
        Some(ctx),
        bytes_in_use,
        true,
    );
}

/// Records a KVStore call (`op` such as `"KVStore Push"`, `"KVStore Pull"`, `"KVStore Reduce"`)
/// on key `key` (category `KVStore`, the key in `args`). Callers check
/// [`kvstore_enabled`](super::kvstore_enabled).
pub fn record_kvstore(op: &str, key: &str, start_us: u64, end_us: u64) {
    push_interval(
        op,
        Category::KvStore,
        None,
        (start_us, end_us),
        Style::Sync,
        Some(("key", key.into())),
    );
}
