//! Robustness of the symbol JSON loader and of what runs on its result.
//!
//! Samples: the Gluon networks exported by MXNet 1.9.1 in `tests/fixtures/graphs/` (written by
//! `scripts/make-graph-fixtures.py`; model-zoo architectures and a small CNN with its `.params`
//! file) and inline graphs (a chain of 100 000 nodes, so walks that recurse per node would
//! exhaust the stack). Each is loaded through `MXSymbolCreateFromJSON`, its shapes inferred
//! through `MXSymbolInferShapeEx64`, bound (`Executor::simple_bind`, one forward) and run through
//! the predict API (`MXPredCreate`, `MXPredForward`). Then truncations, byte mutations and
//! structural mutations of the JSON (dangling and forward node ids, which would make cycles,
//! self references, unknown ops, values of the wrong type, huge counts, shapes and parameters,
//! missing fields) go through the same steps: every call returns 0 or -1 with a message
//! (never a panic, an abort or a hang), a rejected node is named in the message, and neither
//! loading nor shape inference allocates more than a bound set by the input's size.
//!
//! A counting global allocator records the largest single allocation a step makes on the
//! calling thread. Binding allocates the inferred arrays, so mutated graphs are bound only when
//! inference gives them a bounded size.
//!
//! The counting allocator conflicts with mxrt's mimalloc, so this file builds only without it:
//! `cargo test --no-default-features --test graph_mutation` (as `make test` runs it).
#![cfg(not(feature = "mimalloc"))]

use mxrt::Context;
use mxrt::autograd::GradReq;
use mxrt::capi::error::MXGetLastError;
use mxrt::capi::predict::{MXPredCreate, MXPredForward, MXPredFree};
use mxrt::capi::symbol::{MXSymbolCreateFromJSON, MXSymbolFree, MXSymbolInferShapeEx64};
use mxrt::graph::exec::Executor;
use mxrt::graph::json::from_json;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::time::{Duration, Instant};

// ---- allocation accounting ----------------------------------------------------------------

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

/// The most any single allocation of loading and inferring a graph of `len` JSON bytes may
/// take: the parsed JSON tree, the node and slot vectors and the shapes are all proportional to
/// the text (a node or a dimension takes at least a few bytes of it).
fn alloc_cap(len: usize) -> usize {
    64 * len + 4 * 1024 * 1024
}

/// The most bytes a mutated graph may ask for and still be bound and run.
const BIND_BYTES: i64 = 64 << 20;

// ---- samples -------------------------------------------------------------------------------

struct Sample {
    name: String,
    json: String,
    input: Vec<i64>,
    params: Vec<u8>,
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/graphs")
}

/// An NDArray list file with no arrays (the predict API then zero-fills every parameter).
fn empty_params() -> Vec<u8> {
    [0x112u64, 0, 0, 0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// `n` chained `relu` nodes after one variable.
fn chain(n: usize) -> String {
    let mut nodes = vec![r#"{"op":"null","name":"data","inputs":[]}"#.to_string()];
    for i in 1..=n {
        nodes.push(format!(
            r#"{{"op":"relu","name":"r{i}","inputs":[[{},0,0]]}}"#,
            i - 1
        ));
    }
    format!(
        r#"{{"nodes":[{}],"arg_nodes":[0],"heads":[[{n},0,0]],"attrs":{{"mxnet_version":["int",10901]}}}}"#,
        nodes.join(",")
    )
}

fn samples() -> Vec<Sample> {
    let dir = fixture_dir();
    let inputs: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("inputs.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for (name, v) in inputs.as_object().unwrap() {
        let json = std::fs::read_to_string(dir.join(format!("{name}-symbol.json"))).unwrap();
        let input = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_i64().unwrap())
            .collect();
        let params = std::fs::read(dir.join(format!("{name}-0000.params")))
            .unwrap_or_else(|_| empty_params());
        out.push(Sample {
            name: name.clone(),
            json,
            input,
            params,
        });
    }
    assert!(out.len() >= 4, "the graph fixtures are missing");
    out.push(Sample {
        name: "chain of 100000 relu".into(),
        json: chain(100_000),
        input: vec![2, 3],
        params: empty_params(),
    });
    out
}

// ---- one case ------------------------------------------------------------------------------

fn last_error() -> String {
    // SAFETY: MXGetLastError returns a NUL-terminated thread-local string.
    unsafe { CStr::from_ptr(MXGetLastError()) }
        .to_string_lossy()
        .into_owned()
}

fn check_error(rc: c_int, what: &str, case: &str) -> bool {
    assert!(rc == 0 || rc == -1, "{case}: {what} returned {rc}");
    if rc == -1 {
        let msg = last_error();
        assert!(!msg.is_empty(), "{case}: {what} failed without a message");
        assert!(!msg.contains("panic"), "{case}: {what} panicked: {msg}");
    }
    rc == 0
}

/// What a case reached.
#[derive(Default, Debug)]
struct Outcome {
    loaded: bool,
    inferred: bool,
    bound: bool,
    predicted: bool,
    error: String,
}

/// Loads `text`, infers its shapes with `data` given, binds and runs it if small enough, and
/// runs it through the predict API. Panics (failing the test) on a crash-like outcome.
fn run_case(case: &str, text: &str, input: &[i64], params: &[u8], execute: bool) -> Outcome {
    let started = Instant::now();
    let mut out = Outcome::default();
    let Ok(c_text) = CString::new(text) else {
        return out;
    };
    // load and infer through the C API; allocations bounded by the text's size
    counting_alloc::reset_thread_max();
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: a NUL-terminated text and a valid out-pointer.
    let rc = unsafe { MXSymbolCreateFromJSON(c_text.as_ptr(), &mut handle) };
    if !check_error(rc, "MXSymbolCreateFromJSON", case) {
        out.error = last_error();
        check_alloc(case, "MXSymbolCreateFromJSON", text.len());
        return out;
    }
    out.loaded = true;
    let key = CString::new("data").unwrap();
    let mut keys = [key.as_ptr()];
    let ind = [0i64, input.len() as i64];
    let (mut n_in, mut n_out, mut n_aux) = (0usize, 0usize, 0usize);
    let (mut in_nd, mut out_nd, mut aux_nd) = (
        std::ptr::null::<c_int>(),
        std::ptr::null::<c_int>(),
        std::ptr::null::<c_int>(),
    );
    let (mut in_d, mut out_d, mut aux_d) = (
        std::ptr::null_mut::<*const i64>(),
        std::ptr::null_mut::<*const i64>(),
        std::ptr::null_mut::<*const i64>(),
    );
    let mut complete: c_int = 0;
    // SAFETY: one key with its shape in CSR form; valid out-pointers.
    let rc = unsafe {
        MXSymbolInferShapeEx64(
            handle,
            1,
            keys.as_mut_ptr(),
            ind.as_ptr(),
            input.as_ptr(),
            &mut n_in,
            &mut in_nd,
            &mut in_d,
            &mut n_out,
            &mut out_nd,
            &mut out_d,
            &mut n_aux,
            &mut aux_nd,
            &mut aux_d,
            &mut complete,
        )
    };
    let inferred = check_error(rc, "MXSymbolInferShapeEx64", case);
    check_alloc(case, "loading and inferring", text.len());
    // the bytes every inferred array takes (float32), saturating
    let mut bytes: i64 = 0;
    if inferred {
        out.inferred = true;
        for (n, nd, d) in [
            (n_in, in_nd, in_d),
            (n_out, out_nd, out_d),
            (n_aux, aux_nd, aux_d),
        ] {
            for i in 0..n {
                // SAFETY: MXNet's contract: `n` shapes of `nd[i]` dimensions each, valid until
                // the next inference call on this thread.
                let dims = unsafe {
                    let k = *nd.add(i);
                    if k <= 0 {
                        &[][..]
                    } else {
                        std::slice::from_raw_parts(*d.add(i), k as usize)
                    }
                };
                let elems = dims
                    .iter()
                    .try_fold(1i64, |a, &x| a.checked_mul(x.max(0)))
                    .unwrap_or(i64::MAX);
                bytes = bytes.saturating_add(elems.saturating_mul(4));
            }
        }
    } else {
        out.error = last_error();
    }
    // SAFETY: the handle came from MXSymbolCreateFromJSON and is freed once.
    assert_eq!(unsafe { MXSymbolFree(handle) }, 0);
    if !(execute && inferred && complete == 1 && bytes <= BIND_BYTES) {
        assert_time(case, started);
        return out;
    }
    // bind and run one forward
    let r = catch_unwind(AssertUnwindSafe(|| -> mxrt::Result<()> {
        let sym = from_json(text)?;
        let mut e = Executor::simple_bind(
            &sym,
            Context::cpu(0),
            vec![("data".into(), input.to_vec())],
            Vec::new(),
            &|_| GradReq::Null,
            &|_| None,
        )?;
        e.forward(false)?;
        for o in &e.outputs {
            o.wait_to_read()?;
        }
        Ok(())
    }));
    match r {
        Err(_) => panic!("{case}: bind or forward panicked"),
        Ok(Ok(())) => out.bound = true,
        Ok(Err(e)) => {
            let msg = e.to_string();
            assert!(!msg.is_empty() && !msg.contains("panic"), "{case}: {msg}");
        }
    }
    out.predicted = predict(case, &c_text, input, params);
    assert_time(case, started);
    out
}

/// Creates a predictor for `text` with `data` shaped `input` and runs one forward.
fn predict(case: &str, c_text: &CStr, input: &[i64], params: &[u8]) -> bool {
    let key = CString::new("data").unwrap();
    let mut keys = [key.as_ptr()];
    let indptr = [0u32, input.len() as u32];
    let shape: Vec<u32> = input.iter().map(|&d| d as u32).collect();
    let mut pred: *mut c_void = std::ptr::null_mut();
    // SAFETY: a NUL-terminated text, `params.len()` readable bytes, one input key with its shape
    // in CSR form and a valid out-pointer.
    let rc = unsafe {
        MXPredCreate(
            c_text.as_ptr(),
            params.as_ptr().cast(),
            params.len() as c_int,
            1,
            0,
            1,
            keys.as_mut_ptr().cast::<*const c_char>(),
            indptr.as_ptr(),
            shape.as_ptr(),
            &mut pred,
        )
    };
    if !check_error(rc, "MXPredCreate", case) {
        return false;
    }
    // SAFETY: a live predictor handle, freed once.
    let rc = unsafe { MXPredForward(pred) };
    let ran = check_error(rc, "MXPredForward", case);
    // SAFETY: as above.
    assert_eq!(unsafe { MXPredFree(pred) }, 0);
    ran
}

fn check_alloc(case: &str, what: &str, len: usize) {
    let m = counting_alloc::thread_max();
    assert!(
        m <= alloc_cap(len),
        "{case}: {what} allocated {m} bytes at once for a {len}-byte graph"
    );
}

fn assert_time(case: &str, started: Instant) {
    let t = started.elapsed();
    assert!(t < Duration::from_secs(30), "{case}: took {t:?} (a hang?)");
}

// ---- structural mutations ------------------------------------------------------------------

/// Values of the wrong kind or size for any field.
fn odd_value(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..12) {
        0 => Value::Null,
        1 => Value::Bool(true),
        2 => Value::from(-1),
        3 => Value::from(u64::MAX),
        4 => Value::from(1e300),
        5 => Value::from("(4294967296, 4294967296)"),
        6 => Value::from("1000000000000"),
        7 => Value::from("(0,)"),
        8 => Value::Array(vec![]),
        9 => Value::Object(serde_json::Map::new()),
        10 => Value::from("nan"),
        _ => Value::from("(-5, 3)"),
    }
}

/// Attribute values that ask for huge or absurd sizes.
fn odd_attr(rng: &mut StdRng) -> String {
    [
        "1000000000000",
        "4294967296",
        "2147483648",
        "-1",
        "0",
        "(100000, 100000)",
        "(4294967295, 4294967295, 4294967295)",
        "(1000000000,)",
        "()",
        "(",
        "",
        "nan",
        "inf",
        "True",
        "[1,2",
        "(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)",
    ][rng.gen_range(0..16)]
    .to_string()
}

/// A structural mutation of the graph `root`; returns the index of the node it changed, if
/// the loader must name it when it refuses the graph.
fn mutate(root: &mut Value, rng: &mut StdRng, ops: &[String]) -> Option<usize> {
    let n = root["nodes"].as_array().map_or(0, Vec::len);
    if n == 0 {
        return None;
    }
    let i = rng.gen_range(0..n);
    let node = &mut root["nodes"][i];
    match rng.gen_range(0..14) {
        // an input reading a node at or after itself (a cycle), or one that does not exist
        0 | 1 => {
            let Some(ins) = node["inputs"].as_array_mut().filter(|a| !a.is_empty()) else {
                return None;
            };
            let k = rng.gen_range(0..ins.len());
            let src = match rng.gen_range(0..3) {
                0 => i,
                1 => rng.gen_range(i..n + 2),
                _ => n + rng.gen_range(0..1_000_000),
            };
            ins[k][0] = Value::from(src);
            Some(i)
        }
        // an input reading an output the node does not have
        2 => {
            let ins = node["inputs"].as_array_mut().filter(|a| !a.is_empty())?;
            let k = rng.gen_range(0..ins.len());
            ins[k][1] = Value::from(rng.gen_range(1..u32::MAX as u64));
            Some(i)
        }
        // an unknown op, or another op in this node's place
        3 => {
            node["op"] = if rng.gen_bool(0.5) {
                Value::from("NoSuchOperator")
            } else {
                Value::from(ops[rng.gen_range(0..ops.len())].clone())
            };
            Some(i)
        }
        // an attribute with a huge or absurd value
        4..=6 => {
            let attrs = node["attrs"].as_object_mut()?;
            let keys: Vec<String> = attrs.keys().cloned().collect();
            if keys.is_empty() {
                return None;
            }
            let k = &keys[rng.gen_range(0..keys.len())];
            attrs.insert(k.clone(), Value::from(odd_attr(rng)));
            None
        }
        // a variable's shape hint, or a count parameter, that is huge
        7 => {
            let key = [
                "__shape__",
                "num_outputs",
                "num_args",
                "num_hidden",
                "num_filter",
            ][rng.gen_range(0..5)];
            if !node["attrs"].is_object() {
                node["attrs"] = Value::Object(serde_json::Map::new());
            }
            node["attrs"][key] = Value::from(odd_attr(rng));
            None
        }
        // a field of the wrong type, or missing
        8 | 9 => {
            let key = ["op", "name", "inputs", "attrs"][rng.gen_range(0..4)];
            let obj = node.as_object_mut()?;
            if rng.gen_bool(0.3) {
                obj.remove(key);
            } else {
                obj.insert(key.to_string(), odd_value(rng));
            }
            Some(i)
        }
        // an input entry of the wrong form
        10 => {
            let ins = node["inputs"].as_array_mut().filter(|a| !a.is_empty())?;
            let k = rng.gen_range(0..ins.len());
            ins[k] = odd_value(rng);
            Some(i)
        }
        // a node removed (later ids shift) or duplicated
        11 => {
            let nodes = root["nodes"].as_array_mut()?;
            if rng.gen_bool(0.5) {
                nodes.remove(i);
            } else {
                let copy = nodes[i].clone();
                nodes.insert(i, copy);
            }
            None
        }
        // heads and arg_nodes naming nodes that do not exist
        12 => {
            let key = ["heads", "arg_nodes", "node_row_ptr"][rng.gen_range(0..3)];
            if let Some(a) = root[key].as_array_mut().filter(|a| !a.is_empty()) {
                let k = rng.gen_range(0..a.len());
                a[k] = if key == "heads" {
                    serde_json::json!([n + rng.gen_range(0..10), 0, 0])
                } else {
                    odd_value(rng)
                };
            } else {
                root[key] = odd_value(rng);
            }
            None
        }
        // a control dependency on a later node
        _ => {
            node["control_deps"] = serde_json::json!([rng.gen_range(i..n + 3)]);
            Some(i)
        }
    }
}

fn ops_of(root: &Value) -> Vec<String> {
    let mut ops: Vec<String> = root["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["op"].as_str().map(str::to_string))
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

// ---- tests ---------------------------------------------------------------------------------

fn rounds() -> usize {
    std::env::var("MXRT_GRAPH_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300)
}

#[test]
fn every_sample_loads_infers_binds_and_predicts() {
    for s in samples() {
        let o = run_case(&s.name, &s.json, &s.input, &s.params, true);
        assert!(
            o.loaded && o.inferred && o.bound && o.predicted,
            "{}: {o:?}",
            s.name
        );
    }
}

#[test]
fn truncations_fail_cleanly() {
    for s in samples().iter().filter(|s| s.json.len() < 1 << 20) {
        let len = s.json.len();
        let cuts = 200.min(len);
        for c in 0..cuts {
            let at = c * len / cuts;
            let Some(t) = s.json.get(..at) else { continue };
            let o = run_case(&s.name, t, &s.input, &s.params, false);
            assert!(!o.loaded, "{}: a truncation at {at} loaded", s.name);
        }
    }
}

#[test]
fn byte_mutations_never_crash() {
    let mut rng = StdRng::seed_from_u64(0x6a50);
    for s in samples().iter().filter(|s| s.json.len() < 1 << 20) {
        for r in 0..rounds() {
            let mut b = s.json.clone().into_bytes();
            for _ in 0..rng.gen_range(1..=4) {
                let k = rng.gen_range(0..b.len());
                match rng.gen_range(0..4) {
                    0 => b[k] = rng.r#gen(),
                    1 => b[k] = b"0123456789[]{},:\"-eE."[rng.gen_range(0..21)],
                    2 => {
                        b.remove(k);
                    }
                    _ => b.insert(k, b"9"[0]),
                }
            }
            let text = String::from_utf8_lossy(&b).into_owned();
            let case = format!("{} byte mutation {r}", s.name);
            run_case(&case, &text, &s.input, &s.params, r % 10 == 0);
        }
    }
}

#[test]
fn structural_mutations_fail_with_the_node_named() {
    let mut rng = StdRng::seed_from_u64(0x9a7f);
    let mut refused = 0;
    for s in samples().iter().filter(|s| s.json.len() < 1 << 20) {
        let root: Value = serde_json::from_str(&s.json).unwrap();
        let ops = ops_of(&root);
        for r in 0..rounds() {
            let mut m = root.clone();
            let mut named = Vec::new();
            let n_mutations = rng.gen_range(1..=2);
            for _ in 0..n_mutations {
                if let Some(i) = mutate(&mut m, &mut rng, &ops) {
                    named.push(i);
                }
            }
            let text = m.to_string();
            let case = format!("{} structural mutation {r}", s.name);
            // bind and run the small graphs' mutations (the big ones' only now and then)
            let execute = s.json.len() < 10_000 || r % 20 == 0;
            let o = run_case(&case, &text, &s.input, &s.params, execute);
            // the one mutation made names a node: the refusal must name it
            if !o.loaded && n_mutations == 1 && named.len() == 1 {
                refused += 1;
                let i = named[0];
                let name = m["nodes"][i]["name"].as_str().unwrap_or("\u{0}");
                assert!(
                    o.error.contains(&format!("node {i}"))
                        || o.error.contains(name)
                        || o.error.contains("not JSON"),
                    "{case}: the message does not name node {i} ({name}): {}",
                    o.error
                );
            }
        }
    }
    assert!(refused > 0, "no structural mutation was refused");
}

#[test]
fn cycles_and_self_references_are_refused() {
    // a node reading itself, and two nodes reading each other
    let self_ref = r#"{"nodes":[{"op":"null","name":"data","inputs":[]},
        {"op":"relu","name":"r","inputs":[[1,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]}"#;
    let pair = r#"{"nodes":[{"op":"null","name":"data","inputs":[]},
        {"op":"elemwise_add","name":"a","inputs":[[0,0,0],[2,0,0]]},
        {"op":"relu","name":"b","inputs":[[1,0,0]]}],"arg_nodes":[0],"heads":[[2,0,0]]}"#;
    for (case, text) in [("self reference", self_ref), ("pair", pair)] {
        let o = run_case(case, text, &[2, 2], &empty_params(), true);
        assert!(!o.loaded, "{case} loaded");
        assert!(o.error.contains("node 1"), "{case}: {}", o.error);
    }
}

#[test]
fn huge_counts_and_shapes_are_errors() {
    // each a graph the loader may accept, which inference or binding must refuse or bound
    let cases = [
        (
            "SliceChannel with 10^12 outputs",
            r#"{"nodes":[{"op":"null","name":"data","inputs":[]},
            {"op":"SliceChannel","name":"s","attrs":{"num_outputs":"1000000000000"},
             "inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]}"#,
        ),
        (
            "Concat with 2^32 arguments",
            r#"{"nodes":[{"op":"null","name":"data","inputs":[]},
            {"op":"Concat","name":"c","attrs":{"num_args":"4294967296"},
             "inputs":[[0,0,0]]}],"arg_nodes":[0],"heads":[[1,0,0]]}"#,
        ),
        (
            "FullyConnected with 10^12 units",
            r#"{"nodes":[{"op":"null","name":"data","inputs":[]},
            {"op":"null","name":"w","inputs":[]},{"op":"null","name":"b","inputs":[]},
            {"op":"FullyConnected","name":"fc","attrs":{"num_hidden":"1000000000000"},
             "inputs":[[0,0,0],[1,0,0],[2,0,0]]}],"arg_nodes":[0,1,2],"heads":[[3,0,0]]}"#,
        ),
        (
            "a shape hint of 2^64 elements",
            r#"{"nodes":[{"op":"null","name":"data","inputs":[]},
            {"op":"null","name":"w","attrs":{"__shape__":"(4294967296, 4294967296)"},"inputs":[]},
            {"op":"elemwise_add","name":"a","inputs":[[0,0,0],[1,0,0]]}],
            "arg_nodes":[0,1],"heads":[[2,0,0]]}"#,
        ),
        (
            "zeros of 10^15 elements",
            r#"{"nodes":[{"op":"_zeros","name":"z","attrs":{"shape":"(1000000, 1000000000)"},
             "inputs":[]}],"arg_nodes":[],"heads":[[0,0,0]]}"#,
        ),
    ];
    for (case, text) in cases {
        let o = run_case(case, text, &[2, 2], &empty_params(), true);
        assert!(!o.bound && !o.predicted, "{case}: ran: {o:?}");
        // the predict API allocates what inference gives: an error, never an abort
        let c_text = CString::new(text).unwrap();
        assert!(
            !predict(case, &c_text, &[2, 2], &empty_params()),
            "{case}: predicted"
        );
    }
}
