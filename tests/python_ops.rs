//! MXNet's operators through its unmodified Python package, on libmxrt and on the wheel's
//! libmxnet.so: `tests/python/op_cases.py` runs every case on each library and the outcomes are
//! compared case by case (values within a float tolerance, shapes, dtypes, or both failing).
//! Runs when `MXRT_MXNET_PYTHON` names the venv's python (make test sets it).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run_cases(python: &str, library: Option<&Path>, env: &[(&str, &str)]) -> Value {
    let mut cmd = Command::new(python);
    cmd.arg(root().join("tests/python/op_cases.py"));
    match library {
        Some(lib) => cmd.env("MXNET_LIBRARY_PATH", lib),
        None => cmd.env_remove("MXNET_LIBRARY_PATH"),
    };
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("the venv's python runs");
    assert!(
        out.status.success(),
        "op_cases.py failed on {library:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("op_cases.py prints JSON")
}

/// Where the two outcomes differ, if they do.
fn compare(ours: &Value, real: &Value, path: &str) -> Option<String> {
    match (ours, real) {
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return Some(format!("{path}: {} results vs {}", a.len(), b.len()));
            }
            a.iter()
                .zip(b)
                .enumerate()
                .find_map(|(i, (x, y))| compare(x, y, &format!("{path}.{i}")))
        }
        (Value::Object(a), Value::Object(b)) if a.contains_key("values") => {
            if a["shape"] != b["shape"] || a["dtype"] != b["dtype"] {
                return Some(format!(
                    "{path}: shape {} {} vs {} {}",
                    a["shape"], a["dtype"], b["shape"], b["dtype"]
                ));
            }
            let (xs, ys) = (a["values"].as_array()?, b["values"].as_array()?);
            xs.iter().zip(ys).enumerate().find_map(|(i, (x, y))| {
                let (x, y) = (x.as_f64(), y.as_f64());
                let same = match (x, y) {
                    (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-5 + 1e-4 * y.abs(),
                    (None, None) => true, // NaN on both
                    _ => false,
                };
                (!same).then(|| format!("{path}[{i}]: {x:?} vs {y:?}"))
            })
        }
        _ => (ours != real).then(|| format!("{path}: {ours} vs {real}")),
    }
}

/// Cases where MXNet 1.9.1 has undefined behaviour and mxrt reports an error instead.
const MXRT_ERRORS: &[(&str, &str)] = &[(
    // MXNet reads 25 elements of a 24-element array
    "reshape_bad",
    "operator Reshape: cannot reshape [2, 3, 4] (24 elements) to [5, 5]",
)];

#[test]
fn operators_give_mxnet_results_through_the_python_package() {
    let Ok(python) = std::env::var("MXRT_MXNET_PYTHON") else {
        eprintln!(
            "MXRT_MXNET_PYTHON not set: skipping the Python operator test (make test runs it)"
        );
        return;
    };
    let lib = root().join("target/release/libmxrt.so");
    assert!(
        lib.exists(),
        "{} not built: run `make lib` first",
        lib.display()
    );
    let real = run_cases(&python, None, &[]);
    let ours = run_cases(&python, Some(&lib), &[]);
    // the same again on the synchronous engine: results must not depend on scheduling
    let naive = run_cases(&python, Some(&lib), &[("MXNET_ENGINE_TYPE", "NaiveEngine")]);
    let real = real.as_object().unwrap();
    assert!(real.len() > 150, "only {} cases ran", real.len());
    let mut failures = vec![];
    for (name, want) in real {
        if let Some((_, msg)) = MXRT_ERRORS.iter().find(|(n, _)| n == name) {
            let got = ours[name]["error"].as_str().unwrap_or_default();
            if !got.contains(msg) {
                failures.push(format!(
                    "{name}: expected mxrt's error '{msg}', got {}",
                    ours[name]
                ));
            }
            continue;
        }
        for (label, got) in [("threaded", &ours[name]), ("naive", &naive[name])] {
            let differs = match (want.get("ok"), got.get("ok")) {
                (Some(w), Some(g)) => compare(g, w, name),
                // both fail: the outcome matches (the messages are each library's own)
                (None, None) => None,
                _ => Some(format!("{name}: mxrt {got} vs MXNet {want}")),
            };
            if let Some(d) = differs {
                failures.push(format!("[{label}] {d}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} case(s) differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // mxrt's errors name the op and the problem
    let err = |case: &str| ours[case]["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        err("unknown_param").contains("operator sum: unknown parameter 'axiss'"),
        "{}",
        err("unknown_param")
    );
    assert!(
        err("missing_param").contains("operator clip: required parameter 'a_max'"),
        "{}",
        err("missing_param")
    );
    assert!(
        err("broadcast_mismatch").contains("cannot be broadcast together"),
        "{}",
        err("broadcast_mismatch")
    );
}

#[test]
fn random_operators_are_seeded_and_have_their_distributions() {
    let Ok(python) = std::env::var("MXRT_MXNET_PYTHON") else {
        return;
    };
    let lib = root().join("target/release/libmxrt.so");
    let out = Command::new(&python)
        .arg(root().join("tests/python/random_checks.py"))
        .env("MXNET_LIBRARY_PATH", &lib)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "random_checks.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("all random checks passed"), "{text}");
}
