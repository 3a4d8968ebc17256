"""The Executor and Module APIs (executor_script.py) give the same outcomes on libmxrt and on
libmxnet.so: bind and simple_bind with every grad_req form, forward and backward values,
executor gradients equal to autograd's, auxiliary states, reshape, the debug string Module
parses, the monitor callback, Module fit/score/predict/checkpoints, BucketingModule, and the
refusals; freed executor and CachedOp handles are refused on mxrt."""
import json

from conftest import assert_close, json_results, libmxrt, run_script


def names():
    proc = run_script("executor_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def test_scenario_matches_mxnet(scenario):
    real = json_results("executor_script.py", "mxnet")[scenario]
    ours = json_results("executor_script.py", str(libmxrt()))[scenario]
    if "error" in real:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    assert_close(real["ok"], ours["ok"], 1e-3, 2e-4)


def test_freed_handles_are_refused():
    proc = run_script("executor_script.py", str(libmxrt()), args=("--freed",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {"forward_rc": -1, "invoke_rc": -1}
