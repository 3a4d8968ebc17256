"""MXNet's C predict API (predict_script.py, through ctypes) gives the same outcomes on libmxrt
and on libmxnet.so: create, forward, output shapes, types and values, reshape, partial outputs,
a forward node by node, the multi-thread handles, dtypes given to MXPredCreateEx, the monitor,
MXNDList*, the refusals; `autograd.get_symbol` of recorded graphs. On libmxrt alone: NULL,
freed and wrong-kind handles are -1 with messages naming the function and argument. And
c_examples/predict.c, compiled here, reproduces MXNet's logits for a model exported by
MXNet's own library."""
import json
import os
import subprocess
import sys

from conftest import assert_close, ROOT, json_results, libmxrt, run_script


def names():
    proc = run_script("predict_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def test_scenario_matches_mxnet(scenario):
    real = json_results("predict_script.py", "mxnet")[scenario]
    ours = json_results("predict_script.py", str(libmxrt()))[scenario]
    assert "ok" in real, f"the scenario fails on libmxnet.so: {real['error']}"
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    assert_close(real["ok"], ours["ok"], 1e-3, 2e-4)


def test_scenarios_check_something():
    real = json_results("predict_script.py", "mxnet")
    assert real["forward_matches_the_executor"]["ok"] == {"max_diff_below_1e-5": True}
    assert all(rc == -1 for rc in real["creation_errors"]["ok"].values())
    errs = real["call_errors"]["ok"]
    assert errs.pop("ok_after_errors") == 0 and all(rc == -1 for rc in errs.values())
    assert real["reshape_of_a_parameter_is_refused"]["ok"] == {"rc": -1}
    steps = real["partial_forward"]["ok"]["steps_left"]
    assert steps == list(range(len(steps) - 1, -1, -1))
    sym = real["autograd_get_symbol"]["ok"]
    assert sym.pop("not_recorded") == "error"
    gluon = sym.pop("gluon")
    assert (gluon["args"], gluon["aux"], gluon["reloaded_args"]) == (5, 2, 5), gluon
    assert [op for op in gluon["ops"] if op != "null"][:3] == \
        ["FullyConnected", "BatchNorm", "Activation"], gluon
    for case in sym.values():
        assert case["num_args"] == case["expected_args"] and case["value"] == case["recorded"]


def test_mxrt_refusals_name_function_and_argument():
    proc = run_script("predict_script.py", str(libmxrt()), args=("--mxrt-only",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout)
    want = {
        "unknown_key": "MXPredSetInput: cannot find input key nope",
        "short_input": "MXPredSetInput: size: 191 values given for input data",
        "null_data": "MXPredSetInput: data is NULL",
        "null_json": "MXPredCreate: symbol_json_str is NULL",
        "corrupt_params": "MXPredCreate: param_bytes",
        "bad_device": "MXPredCreate: dev_type/dev_id",
        "type_of_output_2": "MXPredGetOutputType: Index exceed number of outputs",
        "negative_step": "MXPredPartialForward: step must be non-negative",
        "freed_forward": "MXPredForward: handle",
        "double_free": "MXPredFree: handle",
        "null_forward": "MXPredForward: handle is NULL",
        "ndlist_freed": "MXNDListFree: handle",
    }
    for k, msg in want.items():
        rc, text = r[k]
        assert rc == -1 and msg in text, f"{k}: {r[k]}"
    assert "not a live Predictor handle" in r["freed_forward"][1]
    assert "is a Predictor handle, expected a NDList handle" in r["ndlist_freed"][1] \
        or "not a live NDList handle" in r["ndlist_freed"][1]
    assert r["null_free"] == [0, ""]
    assert r["type_of_output_1"] == [0, 0]
    assert r["step_past_end"] == [0, 0]
    assert r["threads_agree"] is True


def test_c_example_reproduces_mxnet(tmp_path):
    """examples/predict_model.py on libmxnet.so writes the model and MXNet's logits;
    c_examples/predict.c on libmxrt checks its own against them."""
    env = {k: v for k, v in os.environ.items() if k != "MXNET_LIBRARY_PATH"}
    model = tmp_path / "model"
    gen = subprocess.run([sys.executable, str(ROOT / "examples" / "predict_model.py"), str(model)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0, gen.stderr[-2000:]
    lib = libmxrt().resolve()
    exe = tmp_path / "predict"
    cc = subprocess.run(["cc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-pthread",
                         f"-I{ROOT / 'include'}", str(ROOT / "c_examples" / "predict.c"),
                         "-o", str(exe), f"-L{lib.parent}", f"-Wl,-rpath,{lib.parent}",
                         "-l:" + lib.name, "-lm"], capture_output=True, text=True, timeout=120)
    assert cc.returncode == 0, cc.stderr[-2000:]
    run = subprocess.run([str(exe), str(model)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "logits equal MXNet's" in run.stdout and "predict: ok" in run.stdout, run.stdout
