"""CachedOp and Gluon's hybridize (cached_op_script.py) give the same outcomes on libmxrt and on
libmxnet.so: hybridized forward and training with and without static_alloc/static_shape,
deferred initialisation, several inputs and outputs, BatchNorm and Dropout in both modes,
export and SymbolBlock.imports, CachedOp called directly (out=, recorded), and the refusals."""

from conftest import assert_close, json_results, libmxrt, run_script


def names():
    proc = run_script("cached_op_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def test_scenario_matches_mxnet(scenario):
    real = json_results("cached_op_script.py", "mxnet")[scenario]
    ours = json_results("cached_op_script.py", str(libmxrt()))[scenario]
    if "error" in real:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    assert_close(real["ok"], ours["ok"], 1e-3, 2e-4)
