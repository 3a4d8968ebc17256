//! Profiler tests: a known workload is recorded, the trace JSON is parsed and its records checked
//! (counts, nesting, names, pids/tids, metadata), the aggregate numbers are compared with the
//! workload, and every configuration error is exercised. Most go through the C API.
//!
//! The profiler is a process-wide singleton, so the tests take one lock and each starts with a
//! fresh configuration.

use mxrt::Context;
use mxrt::capi::error::MXGetLastError;
use mxrt::capi::profiler::*;
use mxrt::capi::types::ProfileHandle;
use mxrt::profiler::{self, ApiScope, OpScope};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{CStr, CString, c_char};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mxrt-profiler-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn last_error() -> String {
    // SAFETY: MXGetLastError returns this thread's live, NUL-terminated message.
    unsafe { CStr::from_ptr(MXGetLastError()) }
        .to_string_lossy()
        .into_owned()
}

fn cs(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// MXSetProfilerConfig with these pairs; returns the C return code.
fn configure(pairs: &[(&str, &str)]) -> i32 {
    let keys: Vec<CString> = pairs.iter().map(|(k, _)| cs(k)).collect();
    let vals: Vec<CString> = pairs.iter().map(|(_, v)| cs(v)).collect();
    let kp: Vec<*const c_char> = keys.iter().map(|c| c.as_ptr()).collect();
    let vp: Vec<*const c_char> = vals.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: both arrays hold `len` valid C strings that outlive the call.
    unsafe { MXSetProfilerConfig(pairs.len() as i32, kp.as_ptr(), vp.as_ptr()) }
}

/// Stops the profiler and applies a fresh configuration writing to `file`.
fn fresh(file: &str, extra: &[(&str, &str)]) -> PathBuf {
    assert_eq!(MXSetProfilerState(0), 0);
    assert_eq!(MXProfilePause(0), 0);
    // close the previous test's trace (output stays on after a non-final dump), so every test
    // starts with output off whatever ran before it
    let _ = MXDumpProfile(1);
    let path = tmp(file);
    let p = path.to_str().unwrap().to_string();
    let mut pairs = vec![("filename", p.as_str())];
    pairs.extend_from_slice(extra);
    assert_eq!(configure(&pairs), 0, "{}", last_error());
    path
}

fn read_trace(path: &PathBuf) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("invalid JSON ({e}):\n{text}"));
    assert_eq!(v["displayTimeUnit"], "ms");
    v
}

fn events(v: &Value) -> &Vec<Value> {
    v["traceEvents"].as_array().unwrap()
}

fn stats(format: i32, sort_by: i32, ascending: i32, reset: i32) -> String {
    let mut out: *const c_char = std::ptr::null();
    // SAFETY: `out` is a valid out-parameter.
    let rc = unsafe { MXAggregateProfileStatsPrintEx(&mut out, reset, format, sort_by, ascending) };
    assert_eq!(rc, 0, "{}", last_error());
    // SAFETY: on success `out` points to the thread-local NUL-terminated text.
    unsafe { CStr::from_ptr(out) }
        .to_string_lossy()
        .into_owned()
}

fn wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn ph(e: &Value) -> &str {
    e["ph"].as_str().unwrap()
}

/// Checks that every `B` is immediately followed by its `E` (same name, pid, tid, later or equal
/// ts), and likewise `b`/`e` (same id) and `(`/`)`; returns the intervals per kind.
fn pairs(evs: &[Value]) -> Vec<(&Value, &Value)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < evs.len() {
        let e = &evs[i];
        let close = match ph(e) {
            "B" => "E",
            "b" => "e",
            "(" => ")",
            "E" | "e" | ")" => panic!("unmatched end record {e}"),
            _ => {
                i += 1;
                continue;
            }
        };
        let f = &evs[i + 1];
        assert_eq!(ph(f), close, "{e} then {f}");
        for k in ["name", "cat", "pid", "tid"] {
            assert_eq!(e[k], f[k], "{k} differs: {e} / {f}");
        }
        assert_eq!(e.get("id"), f.get("id"));
        assert!(f["ts"].as_u64().unwrap() >= e["ts"].as_u64().unwrap());
        out.push((e, f));
        i += 2;
    }
    out
}

#[test]
fn workload_trace_records() {
    let _g = lock();
    let path = fresh(
        "work.json",
        &[
            ("aggregate_stats", "true"),
            ("continuous_dump", "false"),
            ("profile_all", "true"),
        ],
    );
    let t_begin = wall_us();
    assert_eq!(MXSetProfilerState(1), 0);
    assert!(profiler::ops_enabled() && profiler::api_enabled() && profiler::memory_enabled());
    let handles: Vec<_> = (0..3)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || {
                    let ctx = Context::cpu(i);
                    for j in 0..4u64 {
                        let outer = OpScope::begin("outer", ctx);
                        assert!(outer.is_some());
                        {
                            let _inner = OpScope::begin("inner", ctx);
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        drop(outer);
                        if profiler::memory_enabled() {
                            profiler::record_memory(ctx, 1024 * (j + 1));
                        }
                    }
                    assert!(
                        OpScope::begin("", ctx).is_none(),
                        "unnamed ops are not recorded"
                    );
                    if i == 0 && profiler::kvstore_enabled() {
                        let t0 = profiler::now_us();
                        profiler::record_kvstore("KVStore Push", "3", t0, t0 + 5);
                    }
                    profiler::thread_id()
                })
                .unwrap()
        })
        .collect();
    let tids: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    for _ in 0..2 {
        let _api = ApiScope::begin("MXNDArrayCreate");
    }
    assert!(
        ApiScope::begin("MXProfileCreateDomain").is_none(),
        "profiler calls are not recorded"
    );
    assert_eq!(MXSetProfilerState(0), 0);
    assert!(!profiler::ops_enabled());
    assert_eq!(MXDumpProfile(1), 0, "{}", last_error());
    let t_end = wall_us();

    let v = read_trace(&path);
    let evs = events(&v);
    let intervals = pairs(evs);

    // Operators: 12 outer and 12 inner, each thread's under its device pid and its own tid.
    let ops: Vec<_> = intervals
        .iter()
        .filter(|(b, _)| b["cat"] == "operator")
        .collect();
    assert_eq!(ops.len(), 24);
    for name in ["outer", "inner"] {
        assert_eq!(
            ops.iter().filter(|(b, _)| b["name"] == name).count(),
            12,
            "{name}"
        );
    }
    let mut tid_by_pid: HashMap<u64, HashSet<u64>> = HashMap::new();
    for (b, _) in &ops {
        assert_eq!(ph(b), "B");
        tid_by_pid
            .entry(b["pid"].as_u64().unwrap())
            .or_default()
            .insert(b["tid"].as_u64().unwrap());
    }
    assert_eq!(tid_by_pid.len(), 3);
    for (i, tid) in tids.iter().enumerate() {
        assert_eq!(
            tid_by_pid[&(i as u64)],
            HashSet::from([*tid as u64]),
            "worker {i}"
        );
    }
    // Nesting: every inner lies inside an outer of the same thread.
    for (ib, ie) in ops.iter().filter(|(b, _)| b["name"] == "inner") {
        let inside = ops.iter().any(|(ob, oe)| {
            ob["name"] == "outer"
                && ob["tid"] == ib["tid"]
                && ob["ts"].as_u64() <= ib["ts"].as_u64()
                && ie["ts"].as_u64() <= oe["ts"].as_u64()
        });
        assert!(inside, "{ib} not inside an outer op");
    }
    // Timestamps are microseconds since the epoch.
    for e in evs.iter().filter(|e| ph(e) != "M") {
        let ts = e["ts"].as_u64().unwrap();
        assert!(
            ts + 1000 >= t_begin && ts <= t_end + 1000,
            "ts {ts} outside [{t_begin}, {t_end}]"
        );
    }
    // Metadata: process names for the device pids, thread names for the workers.
    let meta: Vec<_> = evs.iter().filter(|e| ph(e) == "M").collect();
    for i in 0..3u64 {
        let pn: Vec<_> = meta
            .iter()
            .filter(|e| e["name"] == "process_name" && e["pid"] == i)
            .collect();
        assert_eq!(pn.len(), 1);
        assert_eq!(pn[0]["args"]["name"], format!("cpu/{i}"));
        let tn: Vec<_> = meta
            .iter()
            .filter(|e| e["name"] == "thread_name" && e["pid"] == i && e["tid"] == tids[i as usize])
            .collect();
        assert_eq!(tn.len(), 1);
        assert_eq!(tn[0]["args"]["name"], format!("worker-{i}"));
    }
    // Every non-metadata record's pid has a process_name.
    let named: HashSet<u64> = meta
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["pid"].as_u64().unwrap())
        .collect();
    for e in evs.iter().filter(|e| ph(e) != "M") {
        assert!(named.contains(&e["pid"].as_u64().unwrap()), "{e}");
    }
    // API calls: two async pairs with distinct ids; the calls counter counts up by one.
    let api: Vec<_> = intervals
        .iter()
        .filter(|(b, _)| b["cat"] == "MXNET_C_API")
        .collect();
    assert_eq!(api.len(), 2);
    assert!(
        api.iter()
            .all(|(b, _)| b["name"] == "MXNDArrayCreate" && ph(b) == "b")
    );
    assert_ne!(api[0].0["id"], api[1].0["id"]);
    assert!(!evs.iter().any(|e| e["name"] == "MXProfileCreateDomain"));
    let calls: Vec<u64> = evs
        .iter()
        .filter(|e| e["name"] == profiler::API_CALLS_COUNTER)
        .map(|e| e["args"][profiler::API_CALLS_COUNTER].as_u64().unwrap())
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1], calls[0] + 1);
    // Memory counters per device.
    for i in 0..3u64 {
        let name = format!("Memory: cpu/{i}");
        let vals: Vec<u64> = evs
            .iter()
            .filter(|e| e["name"] == name.as_str())
            .map(|e| {
                assert_eq!(ph(e), "C");
                assert_eq!(e["cat"], "Device Storage");
                assert_eq!(e["pid"], i);
                e["args"][name.as_str()].as_u64().unwrap()
            })
            .collect();
        assert_eq!(vals, [1024, 2048, 3072, 4096]);
    }
    // KVStore.
    let kv: Vec<_> = intervals
        .iter()
        .filter(|(b, _)| b["cat"] == "KVStore")
        .collect();
    assert_eq!(kv.len(), 1);
    assert_eq!(kv[0].0["name"], "KVStore Push");
    assert_eq!(kv[0].0["args"]["key"], "3");
    assert_eq!(
        kv[0].1["ts"].as_u64().unwrap() - kv[0].0["ts"].as_u64().unwrap(),
        5
    );

    // Aggregate stats match the workload.
    let j: Value = serde_json::from_str(&stats(1, 0, 0, 0)).unwrap();
    assert_eq!(j["Time"]["operator"]["outer"]["Count"], 12);
    assert_eq!(j["Time"]["operator"]["inner"]["Count"], 12);
    assert!(j["Time"]["operator"]["inner"]["Min"].as_f64().unwrap() >= 0.2);
    assert_eq!(j["Time"]["MXNET_C_API"]["MXNDArrayCreate"]["Count"], 2);
    let m = &j["Memory"]["Device Storage"]["Memory: cpu/1"];
    assert_eq!(m["Count"], 4);
    assert_eq!(m["Min"].as_f64(), Some(1.024));
    assert_eq!(m["Max"].as_f64(), Some(4.096));
    assert!(m.get("Total").is_none());
}

/// Durations (µs) of the aggregate workload; no two names tie on any key.
const AGG: &[(&str, &[u64])] = &[
    ("alpha", &[100, 200, 300]),
    ("beta", &[1000]),
    ("gamma", &[10, 10, 10, 10, 10, 10, 10, 10, 10, 500]),
    ("delta", &[400, 400]),
];

fn expected_order(sort_by: i32, ascending: bool) -> Vec<&'static str> {
    let mut v: Vec<(f64, &str)> = AGG
        .iter()
        .map(|(n, d)| {
            let total: u64 = d.iter().sum();
            let key = match sort_by {
                0 => total as f64,
                1 => total as f64 / d.len() as f64,
                2 => *d.iter().min().unwrap() as f64,
                3 => *d.iter().max().unwrap() as f64,
                _ => d.len() as f64,
            };
            (key, *n)
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    if !ascending {
        v.reverse();
    }
    v.into_iter().map(|(_, n)| n).collect()
}

fn order_in(text: &str) -> Vec<&'static str> {
    let mut found: Vec<(usize, &str)> = AGG
        .iter()
        .map(|(n, _)| {
            (
                text.find(&format!("\n{n} "))
                    .or_else(|| text.find(&format!("\"{n}\"")))
                    .unwrap(),
                *n,
            )
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn aggregate_numbers_and_sort_orders() {
    let _g = lock();
    fresh(
        "agg.json",
        &[("aggregate_stats", "1"), ("continuous_dump", "0")],
    );
    assert_eq!(MXSetProfilerState(1), 0);
    let ctx = Context::cpu(0);
    for (name, durs) in AGG {
        for d in *durs {
            profiler::record_op(name, ctx, 5_000, 5_000 + d);
        }
    }
    for v in [1000, 3000, 2000] {
        profiler::record_memory(ctx, v);
    }
    let j: Value = serde_json::from_str(&stats(1, 0, 0, 0)).unwrap();
    let a = &j["Time"]["operator"]["alpha"];
    assert_eq!(a["Count"], 3);
    assert_eq!(a["Total"].as_f64(), Some(0.6));
    assert_eq!(a["Min"].as_f64(), Some(0.1));
    assert_eq!(a["Max"].as_f64(), Some(0.3));
    assert_eq!(a["Avg"].as_f64(), Some(0.2));
    let g = &j["Time"]["operator"]["gamma"];
    assert_eq!(
        (g["Count"].as_u64(), g["Total"].as_f64(), g["Avg"].as_f64()),
        (Some(10), Some(0.59), Some(0.059))
    );
    let m = &j["Memory"]["Device Storage"]["Memory: cpu/0"];
    assert_eq!(
        (m["Count"].as_u64(), m["Min"].as_f64(), m["Max"].as_f64()),
        (Some(3), Some(1.0), Some(3.0))
    );
    // MXNet's "average" of a counter is (max - min) / 2.
    assert_eq!(m["Avg"].as_f64(), Some(1.0));
    assert_eq!(j["Unit"]["Time"], "ms");
    assert_eq!(j["Unit"]["Memory"], "kB");

    let table = stats(0, 0, 0, 0);
    assert!(table.starts_with("\nProfile Statistics:\n"), "{table}");
    assert!(
        table.contains("operator\n=================\nName"),
        "{table}"
    );
    assert!(
        table.contains("Device Storage\n=================\nName"),
        "{table}"
    );
    let alpha_line = table.lines().find(|l| l.starts_with("alpha ")).unwrap();
    let nums: Vec<&str> = alpha_line.split_whitespace().collect();
    assert_eq!(nums, ["alpha", "3", "0.6000", "0.1000", "0.3000", "0.2000"]);
    let mem_line = table
        .lines()
        .find(|l| l.starts_with("Memory: cpu/0"))
        .unwrap();
    assert_eq!(
        mem_line.split_whitespace().skip(2).collect::<Vec<_>>(),
        ["3", "1.0000", "3.0000", "1.0000"]
    );

    for sort_by in 0..5 {
        for asc in [0, 1] {
            let want = expected_order(sort_by, asc == 1);
            let t = stats(0, sort_by, asc, 0);
            assert_eq!(
                order_in(&t),
                want,
                "table sort_by {sort_by} ascending {asc}"
            );
            let js = stats(1, sort_by, asc, 0);
            serde_json::from_str::<Value>(&js).unwrap();
            assert_eq!(
                order_in(&js),
                want,
                "json sort_by {sort_by} ascending {asc}"
            );
        }
    }
    // Bad arguments.
    let mut out: *const c_char = std::ptr::null();
    // SAFETY: valid out-parameter / deliberate NULL.
    unsafe {
        assert_eq!(MXAggregateProfileStatsPrintEx(&mut out, 0, 2, 0, 0), -1);
        assert!(last_error().contains("format"), "{}", last_error());
        assert_eq!(MXAggregateProfileStatsPrintEx(&mut out, 0, 0, 5, 0), -1);
        assert!(last_error().contains("sort_by"), "{}", last_error());
        assert_eq!(
            MXAggregateProfileStatsPrintEx(std::ptr::null_mut(), 0, 0, 0, 0),
            -1
        );
        assert!(last_error().contains("out_str is NULL"), "{}", last_error());
        // Print (table, by total, descending) with reset.
        assert_eq!(MXAggregateProfileStatsPrint(&mut out, 1), 0);
        assert!(CStr::from_ptr(out).to_str().unwrap().contains("alpha"));
    }
    let after = stats(1, 0, 0, 0);
    assert!(!after.contains("alpha"), "reset clears: {after}");
    // Without aggregate_stats the text is empty.
    fresh("agg2.json", &[]);
    assert_eq!(stats(0, 0, 0, 1), "");
}

#[test]
fn repeated_dumps_stay_valid() {
    let _g = lock();
    let path = fresh(
        "cont.json",
        &[("continuous_dump", "true"), ("dump_period", "1000")],
    );
    assert_eq!(MXDumpProfile(0), -1);
    assert!(last_error().contains("Profiler hasn't been run. Config and start profiler first"));
    assert_eq!(MXSetProfilerState(1), 0);
    let ctx = Context::cpu(0);
    let count_b = |v: &Value| events(v).iter().filter(|e| ph(e) == "B").count();
    profiler::record_op("x", ctx, 10, 20);
    assert_eq!(MXDumpProfile(0), 0);
    let n1 = std::fs::metadata(&path).unwrap().len();
    assert_eq!(count_b(&read_trace(&path)), 1);
    profiler::record_op("x", ctx, 30, 40);
    profiler::record_op("y", ctx, 30, 40);
    assert_eq!(MXDumpProfile(0), 0);
    let n2 = std::fs::metadata(&path).unwrap().len();
    assert!(n2 > n1);
    assert_eq!(count_b(&read_trace(&path)), 3);
    assert_eq!(MXDumpProfile(0), 0, "a dump with nothing new");
    assert_eq!(count_b(&read_trace(&path)), 3);
    assert_eq!(MXDumpProfile(1), 0);
    assert_eq!(count_b(&read_trace(&path)), 3);
    assert_eq!(MXDumpProfile(0), -1, "finished: output disabled");
    // Running again appends to the same, still valid, file.
    assert_eq!(MXSetProfilerState(1), 0);
    profiler::record_op("z", ctx, 50, 60);
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    assert_eq!(count_b(&v), 4);
    assert_eq!(
        events(&v)
            .iter()
            .filter(|e| e["name"] == "process_name")
            .count(),
        1
    );

    // Not continuous: every dump closes output, and so does printing the stats.
    let path = fresh(
        "noncont.json",
        &[("continuous_dump", "false"), ("aggregate_stats", "true")],
    );
    assert_eq!(MXSetProfilerState(1), 0);
    profiler::record_op("x", ctx, 10, 20);
    assert_eq!(MXDumpProfile(0), 0);
    assert_eq!(MXDumpProfile(0), -1);
    assert_eq!(count_b(&read_trace(&path)), 1);
    assert_eq!(MXSetProfilerState(1), 0);
    profiler::record_op("x", ctx, 10, 20);
    stats(0, 0, 0, 0);
    assert_eq!(MXDumpProfile(0), -1);
    assert_eq!(
        count_b(&read_trace(&path)),
        2,
        "the stats print flushed the record"
    );
    assert_eq!(MXSetProfilerState(0), 0);
}

#[test]
fn concurrent_recording_and_dumps() {
    let _g = lock();
    let path = fresh("conc.json", &[("dump_period", "1000")]);
    assert_eq!(MXSetProfilerState(1), 0);
    let workers: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                for _ in 0..2000 {
                    let _s = OpScope::begin("c", Context::cpu(i));
                }
            })
        })
        .collect();
    for _ in 0..20 {
        assert_eq!(MXDumpProfile(0), 0);
        read_trace(&path);
    }
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    assert_eq!(pairs(events(&v)).len(), 8000);
    assert_eq!(MXSetProfilerState(0), 0);
}

#[test]
fn timer_thread_dumps() {
    let _g = lock();
    let path = fresh(
        "timer.json",
        &[("continuous_dump", "1"), ("dump_period", "0.05")],
    );
    assert_eq!(MXSetProfilerState(1), 0);
    profiler::record_op("tick", Context::cpu(0), 1, 2);
    let mut seen = false;
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(20));
        if let Ok(t) = std::fs::read_to_string(&path)
            && t.contains("\"tick\"")
        {
            serde_json::from_str::<Value>(&t).unwrap();
            seen = true;
            break;
        }
    }
    assert!(seen, "the timer thread never dumped");
    assert_eq!(MXSetProfilerState(0), 0);
    assert_eq!(MXDumpProfile(1), 0);
    read_trace(&path);
}

#[test]
fn modes_pause_and_state() {
    let _g = lock();
    fresh(
        "modes.json",
        &[
            ("profile_imperative", "false"),
            ("profile_memory", "0"),
            ("profile_symbolic", "0"),
        ],
    );
    assert!(!profiler::ops_enabled() && !profiler::api_enabled());
    assert_eq!(MXSetProfilerState(1), 0);
    assert!(!profiler::ops_enabled() && profiler::api_enabled() && !profiler::memory_enabled());
    assert!(OpScope::begin("x", Context::cpu(0)).is_none());
    fresh(
        "modes.json",
        &[
            ("profile_all", "true"),
            ("profile_api", "false"),
            ("profile_imperative", "0"),
        ],
    );
    assert_eq!(MXSetProfilerState(1), 0);
    assert!(profiler::ops_enabled() && profiler::api_enabled() && profiler::memory_enabled());
    assert_eq!(MXProfilePause(1), 0);
    assert!(!profiler::ops_enabled() && !profiler::objects_enabled());
    assert!(profiler::status().paused);
    assert_eq!(MXProfilePause(0), 0);
    assert!(profiler::ops_enabled() && profiler::objects_enabled());
    assert_eq!(MXSetProfilerState(0), 0);
    assert!(!profiler::ops_enabled());
    assert!(!profiler::objects_enabled(), "stopping pauses");
    assert_eq!(MXSetProfilerState(2), -1);
    assert!(last_error().contains("Invalid profiler state 2"));
    assert_eq!(MXProcessProfilePause(0, 2, std::ptr::null_mut()), -1);
    assert!(last_error().contains("profile_process"));
    assert_eq!(MXProcessProfilePause(0, 1, std::ptr::null_mut()), -1);
    assert!(last_error().contains("Kvstore Handle passed to profiler is null"));
    assert_eq!(MXSetProcessProfilerState(1, 1, std::ptr::null_mut()), -1);
    assert_eq!(MXDumpProcessProfile(1, 1, std::ptr::null_mut()), -1);
    // a local store has no servers: the server variants check the handle and do nothing
    let mut kv = std::ptr::null_mut();
    // SAFETY: a C string and an out-parameter.
    assert_eq!(unsafe { mxrt::capi::kvstore::MXKVStoreCreate(c"local".as_ptr(), &mut kv) }, 0);
    assert_eq!(MXSetProcessProfilerState(1, 1, kv), 0);
    assert!(
        !profiler::status().running,
        "a server command does not touch this process"
    );
    let mut bogus = 0u8;
    assert_eq!(MXSetProcessProfilerState(1, 1, (&mut bogus as *mut u8).cast()), -1);
    assert!(last_error().contains("kvstoreHandle"), "{}", last_error());
    // SAFETY: a live handle, freed once.
    assert_eq!(unsafe { mxrt::capi::kvstore::MXKVStoreFree(kv) }, 0);
}

fn create(f: impl FnOnce(*mut ProfileHandle) -> i32) -> ProfileHandle {
    let mut h: ProfileHandle = std::ptr::null_mut();
    assert_eq!(f(&mut h), 0, "{}", last_error());
    assert!(!h.is_null());
    h
}

#[test]
fn profile_objects() {
    let _g = lock();
    let path = fresh(
        "objects.json",
        &[("aggregate_stats", "true"), ("continuous_dump", "false")],
    );
    assert_eq!(MXSetProfilerState(1), 0);
    let (dn, tn, fname, en, cn, mn) = (cs("dom"), cs("t1"), cs("f1"), cs("e1"), cs("c1"), cs("m"));
    // SAFETY: every pointer passed below is a live C string or a valid out-parameter.
    unsafe {
        let dom = create(|o| MXProfileCreateDomain(dn.as_ptr(), o));
        let task = create(|o| MXProfileCreateTask(dom, tn.as_ptr(), o));
        let frame = create(|o| MXProfileCreateFrame(dom, fname.as_ptr(), o));
        let event = create(|o| MXProfileCreateEvent(en.as_ptr(), o));
        let counter = create(|o| MXProfileCreateCounter(dom, cn.as_ptr(), o));
        for h in [task, frame, event] {
            assert_eq!(MXProfileDurationStart(h), 0);
        }
        for h in [event, frame, task] {
            assert_eq!(MXProfileDurationStop(h), 0);
        }
        assert_eq!(MXProfileDurationStop(task), -1);
        assert!(
            last_error().contains("profile task 't1' was stopped without being started"),
            "{}",
            last_error()
        );
        assert_eq!(MXProfileSetCounter(counter, 10), 0);
        assert_eq!(MXProfileAdjustCounter(counter, 5), 0);
        assert_eq!(MXProfileAdjustCounter(counter, -3), 0);
        for s in ["thread", "global", "process"] {
            let sc = cs(s);
            assert_eq!(MXProfileSetMarker(dom, mn.as_ptr(), sc.as_ptr()), 0);
        }
        let bad = cs("galaxy");
        assert_eq!(MXProfileSetMarker(dom, mn.as_ptr(), bad.as_ptr()), -1);
        assert!(
            last_error().contains("Invalid marker scope 'galaxy'"),
            "{}",
            last_error()
        );
        // Paused: objects do not record.
        assert_eq!(MXProfilePause(1), 0);
        assert_eq!(MXProfileSetCounter(counter, 99), 0);
        assert_eq!(MXProfilePause(0), 0);

        // Wrong kinds, NULL, freed handles.
        assert_eq!(MXProfileSetCounter(task, 1), -1);
        assert!(
            last_error().contains("counter_handle is a task handle, expected a counter"),
            "{}",
            last_error()
        );
        assert_eq!(MXProfileDurationStart(counter), -1);
        assert!(
            last_error().contains("is a counter handle"),
            "{}",
            last_error()
        );
        assert_eq!(
            MXProfileCreateTask(event, tn.as_ptr(), &mut std::ptr::null_mut()),
            -1
        );
        assert!(
            last_error().contains("domain is a event handle, expected a domain"),
            "{}",
            last_error()
        );
        assert_eq!(MXProfileDurationStart(std::ptr::null_mut()), -1);
        assert!(
            last_error().contains("duration_handle is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(MXProfileCreateDomain(dn.as_ptr(), std::ptr::null_mut()), -1);
        assert!(last_error().contains("out is NULL"));
        assert_eq!(
            MXProfileCreateEvent(std::ptr::null(), &mut std::ptr::null_mut()),
            -1
        );
        assert!(last_error().contains("event_name is NULL"));
        assert_eq!(MXProfileDestroyHandle(std::ptr::null_mut()), -1);
        for h in [task, frame, event, counter] {
            assert_eq!(MXProfileDestroyHandle(h), 0);
        }
        assert_eq!(MXProfileDestroyHandle(task), -1);
        assert!(
            last_error().contains("not a live profile object handle"),
            "{}",
            last_error()
        );
        assert_eq!(MXProfileSetCounter(counter, 1), -1);
        assert_eq!(MXProfileDestroyHandle(dom), 0, "domains are ignored");
        let t2 = create(|o| MXProfileCreateTask(dom, tn.as_ptr(), o));
        assert_eq!(MXProfileDestroyHandle(t2), 0);
    }
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    let evs = events(&v);
    let iv = pairs(evs);
    let find = |name: &str| {
        iv.iter()
            .filter(|(b, _)| b["name"] == name)
            .collect::<Vec<_>>()
    };
    let t = find("t1");
    assert_eq!(t.len(), 1);
    assert_eq!((ph(t[0].0), t[0].0["cat"].as_str()), ("b", Some("dom")));
    assert!(t[0].0["id"].is_u64());
    let f = find("f1");
    assert_eq!(
        (f.len(), ph(f[0].0), f[0].0["cat"].as_str()),
        (1, "(", Some("dom,frame"))
    );
    let e = find("e1");
    assert_eq!(
        (e.len(), ph(e[0].0), e[0].0["cat"].as_str()),
        (1, "B", Some("event"))
    );
    // The event is inside the frame, inside the task.
    assert!(
        t[0].0["ts"].as_u64() <= f[0].0["ts"].as_u64()
            && f[0].0["ts"].as_u64() <= e[0].0["ts"].as_u64()
    );
    assert!(
        e[0].1["ts"].as_u64() <= f[0].1["ts"].as_u64()
            && f[0].1["ts"].as_u64() <= t[0].1["ts"].as_u64()
    );
    let counts: Vec<u64> = evs
        .iter()
        .filter(|e| e["name"] == "c1")
        .map(|e| {
            assert_eq!((ph(e), e["cat"].as_str()), ("C", Some("dom")));
            e["args"]["c1"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(counts, [10, 15, 12]);
    let markers: Vec<&str> = evs
        .iter()
        .filter(|e| e["name"] == "m")
        .map(|e| {
            assert_eq!(
                (ph(e), e["cat"].as_str()),
                ("i", Some("dom,instant_marker"))
            );
            e["s"].as_str().unwrap()
        })
        .collect();
    assert_eq!(markers, ["t", "g", "p"]);
    // Objects show up in the aggregate stats by category.
    let j: Value = serde_json::from_str(&stats(1, 0, 0, 0)).unwrap();
    assert_eq!(j["Time"]["dom"]["t1"]["Count"], 1);
    assert_eq!(j["Time"]["event"]["e1"]["Count"], 1);
    assert_eq!(j["Time"]["dom"]["c1"]["Count"], 3);
}

#[test]
fn config_errors() {
    let _g = lock();
    fresh("cfg.json", &[]);
    let bad = [
        ("profile_all", "maybe"),
        ("profile_symbolic", "2"),
        ("profile_imperative", "yes"),
        ("profile_memory", ""),
        ("profile_api", "on"),
        ("filename", ""),
        ("continuous_dump", "x"),
        ("dump_period", "soon"),
        ("dump_period", "0"),
        ("dump_period", "-2"),
        ("aggregate_stats", "t"),
        ("profile_process", "client"),
    ];
    for (k, v) in bad {
        assert_eq!(configure(&[(k, v)]), -1, "{k}={v}");
        let e = last_error();
        assert!(e.starts_with("MXSetProfilerConfig: "), "{e}");
        assert!(
            e.contains(&format!("'{k}'")) && e.contains(&format!("'{v}'")),
            "{e}"
        );
    }
    assert_eq!(
        configure(&[("aggregate_stats", "1"), ("no_such_key", "1")]),
        -1
    );
    let e = last_error();
    assert!(
        e.contains("Cannot find argument 'no_such_key', Possible Arguments:"),
        "{e}"
    );
    for (k, _, _) in profiler::config::KEYS {
        assert!(e.contains(k), "{k} not listed: {e}");
    }
    // A failed configuration changes nothing.
    assert!(profiler::status().config.filename.ends_with("cfg.json"));
    // Pointer and count checks.
    // SAFETY: deliberate NULL/negative arguments; no array is read.
    unsafe {
        assert_eq!(
            MXSetProfilerConfig(-1, std::ptr::null(), std::ptr::null()),
            -1
        );
        assert!(
            last_error().contains("num_params must be non-negative"),
            "{}",
            last_error()
        );
        assert_eq!(
            MXSetProfilerConfig(1, std::ptr::null(), std::ptr::null()),
            -1
        );
        assert!(last_error().contains("keys is NULL"), "{}", last_error());
        let k = cs("filename");
        let kp = [k.as_ptr()];
        let vp = [std::ptr::null()];
        assert_eq!(MXSetProfilerConfig(1, kp.as_ptr(), vp.as_ptr()), -1);
        assert!(last_error().contains("vals[0] is NULL"), "{}", last_error());
        // Server configuration needs a KVStore handle.
        let k2 = cs("profile_process");
        let v2 = cs("server");
        let (kp, vp) = ([k2.as_ptr()], [v2.as_ptr()]);
        assert_eq!(MXSetProfilerConfig(1, kp.as_ptr(), vp.as_ptr()), -1);
        assert!(last_error().starts_with("MXSetProfilerConfig: "));
        assert_eq!(
            MXSetProcessProfilerConfig(1, kp.as_ptr(), vp.as_ptr(), std::ptr::null_mut()),
            -1
        );
        assert!(last_error().starts_with("MXSetProcessProfilerConfig: "));
        assert!(
            last_error().contains("Kvstore Handle passed to profiler is null"),
            "{}",
            last_error()
        );
    }
    // The trace file is deleted by a configuration.
    let path = tmp("unlink.json");
    std::fs::write(&path, "old").unwrap();
    assert_eq!(configure(&[("filename", path.to_str().unwrap())]), 0);
    assert!(!path.exists());
    // Defaults: every key unset.
    assert_eq!(configure(&[]), 0);
    let st = profiler::status();
    assert_eq!(st.config, profiler::Config::default());
    assert_eq!(st.mode, 15);
}

#[test]
fn timeline_files() {
    let _g = lock();
    let svg = tmp("tl.svg");
    let path = fresh(
        "tl.json",
        &[
            ("timeline", svg.to_str().unwrap()),
            ("continuous_dump", "false"),
        ],
    );
    assert_eq!(MXSetProfilerState(1), 0);
    let ws: Vec<_> = (0..2)
        .map(|i| {
            std::thread::spawn(move || {
                for n in ["a", "b", "a"] {
                    let _s = OpScope::begin(n, Context::cpu(i));
                }
            })
        })
        .collect();
    ws.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    let sync = events(&v).iter().filter(|e| ph(e) == "B").count();
    assert_eq!(sync, 6);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"));
    assert_eq!(text.matches("class=\"bar\"").count(), 6);
    assert_eq!(
        text.matches("/ thread ").count(),
        2,
        "one row per worker thread"
    );
    let (ca, cb) = (
        profiler::timeline::colour("a"),
        profiler::timeline::colour("b"),
    );
    assert_eq!(text.matches(&format!("fill=\"{ca}\"")).count(), 4);
    assert_eq!(text.matches(&format!("fill=\"{cb}\"")).count(), 2);

    let path = fresh("tl2.json", &[("timeline", "true")]);
    assert_eq!(MXSetProfilerState(1), 0);
    drop(OpScope::begin("a", Context::cpu(0)));
    assert_eq!(MXDumpProfile(1), 0);
    let html = std::fs::read_to_string(path.with_extension("html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("class=\"bar\""));
}

/// Run by `dump_at_exit` in a child process: records without dumping and exits normally.
#[test]
#[ignore = "helper run in a child process by dump_at_exit"]
fn exit_dump_child() {
    let Ok(file) = std::env::var("MXRT_PROFILER_CHILD_FILE") else {
        return;
    };
    assert_eq!(
        configure(&[("filename", &file), ("dump_period", "1000")]),
        0
    );
    assert_eq!(MXSetProfilerState(1), 0);
    profiler::record_op("at_exit_op", Context::cpu(0), 1, 2);
}

#[test]
fn dump_at_exit() {
    let path = tmp("exit.json");
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exit_dump_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env("MXRT_PROFILER_CHILD_FILE", &path)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stdout)
    );
    let v = read_trace(&path);
    assert_eq!(
        events(&v)
            .iter()
            .filter(|e| e["name"] == "at_exit_op")
            .count(),
        2
    );
}

#[test]
fn trace_strings_are_escaped() {
    let _g = lock();
    let path = fresh("esc.json", &[("continuous_dump", "false")]);
    assert_eq!(MXSetProfilerState(1), 0);
    let weird = "q\"uote\\back\nline\ttab\u{1}ü";
    profiler::record_op(weird, Context::cpu(0), 1, 2);
    profiler::record_kvstore("KVStore Pull", "k\"ey", 1, 2);
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    let names: BTreeMap<&str, usize> = events(&v).iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e["name"].as_str().unwrap()).or_default() += 1;
        m
    });
    assert_eq!(names.get(weird), Some(&2));
    assert!(events(&v).iter().any(|e| e["args"]["key"] == "k\"ey"));
}

#[test]
fn engine_ops_are_recorded() {
    use mxrt::engine::{Engine, EngineConfig, EngineKind, PushArgs};
    let _g = lock();
    let path = fresh(
        "engine.json",
        &[("continuous_dump", "false"), ("aggregate_stats", "true")],
    );
    let mut cfg = EngineConfig::new(EngineKind::PerDevice);
    cfg.cpu_workers = 2;
    // every op on a worker: this thread does not run any while it waits
    cfg.wait_helps = false;
    let engine = Engine::new(cfg);
    let vars: Vec<_> = (0..2).map(|_| engine.new_variable()).collect();
    // Recorded only while running.
    engine
        .push_fn(
            PushArgs::new(Context::cpu(0)).name("before_run"),
            |_| Ok(()),
        )
        .unwrap();
    engine.wait_for_all().unwrap();
    assert_eq!(MXSetProfilerState(1), 0);
    let pushed_at = profiler::now_us();
    for dev in 0..2 {
        for _ in 0..10 {
            engine
                .push_fn(
                    PushArgs::new(Context::cpu(dev))
                        .writes(&vars[dev as usize..dev as usize + 1])
                        .name("eng_write"),
                    |_| {
                        std::thread::sleep(Duration::from_micros(300));
                        Ok(())
                    },
                )
                .unwrap();
        }
        // Unnamed ops are not recorded.
        engine
            .push_fn(PushArgs::new(Context::cpu(dev)), |_| Ok(()))
            .unwrap();
    }
    engine.wait_for_all().unwrap();
    let done_at = profiler::now_us();
    assert_eq!(MXSetProfilerState(0), 0);
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    let evs = events(&v);
    assert!(!evs.iter().any(|e| e["name"] == "before_run"));
    let ops: Vec<_> = pairs(evs)
        .into_iter()
        .filter(|(b, _)| b["cat"] == "operator")
        .collect();
    assert_eq!(ops.len(), 20, "only the named ops");
    let me = profiler::thread_id() as u64;
    for dev in 0..2u64 {
        let mut iv: Vec<(u64, u64)> = ops
            .iter()
            .filter(|(b, _)| b["pid"] == dev)
            .map(|(b, e)| {
                assert_eq!(b["name"], "eng_write");
                assert_ne!(b["tid"].as_u64(), Some(me), "ops run on engine workers");
                (b["ts"].as_u64().unwrap(), e["ts"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(iv.len(), 10, "device {dev}");
        // The engine's times are on the profiler's clock: every op ran between push and wait.
        for &(b, e) in &iv {
            assert!(
                pushed_at <= b && b <= e && e <= done_at,
                "{b}..{e} outside {pushed_at}..{done_at}"
            );
        }
        // Ops writing one variable are serialised: their intervals do not overlap.
        iv.sort();
        for w in iv.windows(2) {
            assert!(w[0].1 <= w[1].0 + 2, "overlap {w:?}");
            assert!(w[0].1 - w[0].0 >= 300);
        }
    }
    let j: Value = serde_json::from_str(&stats(1, 0, 0, 0)).unwrap();
    assert_eq!(j["Time"]["operator"]["eng_write"]["Count"], 20);
    assert!(j["Time"]["operator"]["eng_write"]["Min"].as_f64().unwrap() >= 0.3);
}

/// Cost of the hooks (run with `cargo test --release --test profiler hook_cost -- --ignored
/// --nocapture`); prints ns per op, asserts only a loose bound on the "off" path.
#[test]
#[ignore = "timing; run explicitly in release mode"]
fn hook_cost() {
    use std::hint::black_box;
    use std::time::Instant;
    let _g = lock();
    let path = fresh("cost.json", &[("continuous_dump", "false")]);
    let ctx = Context::cpu(0);
    let n = 10_000_000u64;
    let t = Instant::now();
    for _ in 0..n {
        black_box(OpScope::begin(black_box("op"), ctx));
    }
    let off = t.elapsed().as_nanos() as f64 / n as f64;
    assert_eq!(MXSetProfilerState(1), 0);
    let n_on = 1_000_000u64;
    let t = Instant::now();
    for _ in 0..n_on {
        drop(black_box(OpScope::begin(black_box("op"), ctx)));
    }
    let on = t.elapsed().as_nanos() as f64 / n_on as f64;
    let threads = 4;
    let t = Instant::now();
    let ws: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..n_on / 4 {
                    drop(black_box(OpScope::begin(black_box("op"), ctx)));
                }
            })
        })
        .collect();
    ws.into_iter().for_each(|w| w.join().unwrap());
    let on_mt = t.elapsed().as_nanos() as f64 / (n_on as f64);
    let t = Instant::now();
    assert_eq!(MXSetProfilerState(0), 0);
    assert_eq!(MXDumpProfile(1), 0);
    let dump = t.elapsed();
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "off: {off:.2} ns/op; on: {on:.1} ns/op (1 thread), {on_mt:.1} ns/op wall ({threads} threads); \
         dump of {} records: {dump:?}, {size} bytes",
        n_on + n_on / 4 * 4
    );
    assert!(off < 5.0, "off path {off} ns");
}

#[test]
fn storage_allocations_are_counted() {
    use mxrt::storage::Storage;
    let _g = lock();
    let path = fresh(
        "storage.json",
        &[("continuous_dump", "false"), ("aggregate_stats", "true")],
    );
    let before = Storage::global().alloc(Context::cpu(0), 4096).unwrap();
    drop(before); // not recorded: not running
    assert_eq!(MXSetProfilerState(1), 0);
    let a = Storage::global().alloc(Context::cpu(0), 1 << 20).unwrap();
    let b = Storage::global().alloc(Context::cpu(0), 1 << 16).unwrap();
    drop(a);
    drop(b);
    assert_eq!(MXSetProfilerState(0), 0);
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    let vals: Vec<u64> = events(&v)
        .iter()
        .filter(|e| e["name"] == "Memory: cpu/0")
        .map(|e| {
            assert_eq!(
                (ph(e), e["cat"].as_str(), e["pid"].as_u64()),
                ("C", Some("Device Storage"), Some(0))
            );
            e["args"]["Memory: cpu/0"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(vals.len(), 4, "{vals:?}");
    // in use grows by each block, then shrinks by each block
    assert!(
        vals[0] >= 1 << 20 && vals[1] >= vals[0] + (1 << 16),
        "{vals:?}"
    );
    // freeing b gives back what allocating it took; freeing a gives back at least its size
    assert_eq!(vals[2] - vals[3], vals[1] - vals[0], "{vals:?}");
    assert!(vals[1] - vals[2] >= 1 << 20, "{vals:?}");
    assert!(vals[3] < vals[2] && vals[2] < vals[1], "{vals:?}");
    let j: Value = serde_json::from_str(&stats(1, 0, 0, 0)).unwrap();
    assert_eq!(j["Memory"]["Device Storage"]["Memory: cpu/0"]["Count"], 4);
}

/// Run by `autostart_from_env` in a child process with MXNET_PROFILER_AUTOSTART=1.
#[test]
#[ignore = "helper run in a child process by autostart_from_env"]
fn autostart_child() {
    if std::env::var("MXNET_PROFILER_AUTOSTART").is_err() {
        return;
    }
    let st = profiler::status();
    assert!(st.running && st.output_enabled, "{st:?}");
    assert_eq!(st.mode, 2, "MXNET_PROFILER_MODE=2");
    assert!(profiler::ops_enabled() && !profiler::api_enabled());
    profiler::record_op("autostarted", Context::cpu(0), 1, 2);
}

#[test]
fn autostart_from_env() {
    let dir = tmp("autostart");
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "autostart_child",
            "--ignored",
            "--test-threads=1",
        ])
        .env("MXNET_PROFILER_AUTOSTART", "1")
        .env("MXNET_PROFILER_MODE", "2")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let v = read_trace(&dir.join("profile.json"));
    assert_eq!(
        events(&v)
            .iter()
            .filter(|e| e["name"] == "autostarted")
            .count(),
        2
    );
}

#[test]
fn kvstore_calls_are_recorded() {
    use mxrt::kvstore::KVStore;
    use mxrt::kvstore::keys::Keys;
    use mxrt::ndarray::NDArray;
    let _g = lock();
    let path = fresh("kv.json", &[("continuous_dump", "false")]);
    assert_eq!(MXSetProfilerState(1), 0);
    let kv = KVStore::create("local").unwrap();
    let a = NDArray::new(&[4], Context::cpu(0), mxrt::DType::F32, false).unwrap();
    a.sync_copy_from_bytes(&[0u8; 16]).unwrap();
    kv.init(Keys::Int(&[3, 9]), &[&a, &a]).unwrap();
    kv.push(Keys::Int(&[3, 3]), &[&a, &a], 0).unwrap();
    kv.pull(Keys::Int(&[3]), &[&a], 0, true).unwrap();
    a.wait_to_read().unwrap();
    assert_eq!(MXSetProfilerState(0), 0);
    assert_eq!(MXDumpProfile(1), 0);
    let v = read_trace(&path);
    let kvs: Vec<&Value> = events(&v)
        .iter()
        .filter(|e| e["cat"] == "KVStore")
        .collect();
    let names: Vec<(&str, &str)> = kvs
        .iter()
        .filter(|e| e["ph"] == "B")
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["args"]["key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, vec![("KVStorePush", "3,3"), ("KVStorePull", "3")]);
    assert_eq!(
        pairs(&kvs.into_iter().cloned().collect::<Vec<_>>()).len(),
        2
    );
    // the reduction of the two values is an engine op
    assert!(
        events(&v)
            .iter()
            .any(|e| e["name"] == "KVStoreReduce" && e["cat"] == "operator")
    );
}
