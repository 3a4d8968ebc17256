//! MXNet's own Python package (the `mxnet==1.9.1` wheel, unmodified) on libmxrt and on the
//! wheel's libmxnet.so: `tests/python/package_facts.py` runs on each and the facts are compared.
//! Runs when `MXRT_MXNET_PYTHON` names the venv's python (make test sets it).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The cdylib of this build (make test builds it before the tests).
fn libmxrt() -> PathBuf {
    let lib = root().join("target/release/libmxrt.so");
    assert!(
        lib.exists(),
        "{} not built: run `make lib` first",
        lib.display()
    );
    lib
}

fn facts(python: &str, library: Option<&Path>) -> Value {
    let mut cmd = Command::new(python);
    cmd.arg(root().join("tests/python/package_facts.py"));
    match library {
        Some(lib) => cmd.env("MXNET_LIBRARY_PATH", lib),
        None => cmd.env_remove("MXNET_LIBRARY_PATH"),
    };
    let out = cmd.output().expect("the venv's python runs");
    assert!(
        out.status.success(),
        "package_facts.py failed on {library:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("package_facts.py prints JSON")
}

#[test]
fn the_package_imports_and_builds_the_same_functions_on_both_libraries() {
    let Ok(python) = std::env::var("MXRT_MXNET_PYTHON") else {
        eprintln!(
            "MXRT_MXNET_PYTHON not set: skipping the Python package test (make test runs it)"
        );
        return;
    };
    let real = facts(&python, None);
    let ours = facts(&python, Some(&libmxrt()));
    // what the package generates from the op table, and the NDArray calls that need no operator
    for key in [
        "version",
        "nd_op",
        "nd_internal",
        "nd_random",
        "io_iters",
        "docs",
        "array",
        "shape",
        "reshape",
        "row",
        "slice",
        "load",
    ] {
        assert_eq!(
            ours[key], real[key],
            "{key} differs between libmxrt and libmxnet"
        );
    }
    assert!(
        real["nd_op"].as_array().unwrap().len() + real["nd_internal"].as_array().unwrap().len()
            > 600
    );
    // operators that work give MXNet's result; ones mxrt does not implement yet (and data
    // iterators) fail clearly, never silently
    assert_eq!(
        real["zeros"]["ok"],
        serde_json::json!([[0.0, 0.0], [0.0, 0.0]])
    );
    assert_eq!(ours["zeros"], real["zeros"]);
    assert_eq!(
        ours["unimplemented"]["error"],
        "MXImperativeInvokeEx: operator Convolution is not implemented by mxrt"
    );
    assert!(real["unimplemented"]["ok"].is_array());
    assert_eq!(
        ours["data_iter"]["error"],
        "MXDataIterCreateIter: data iterator CSVIter is not implemented by mxrt yet"
    );
}
