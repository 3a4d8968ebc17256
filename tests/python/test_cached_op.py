"""CachedOp and Gluon's hybridize (cached_op_script.py) give the same outcomes on libmxrt and on
libmxnet.so: hybridized forward and training with and without static_alloc/static_shape,
deferred initialisation, several inputs and outputs, BatchNorm and Dropout in both modes,
export and SymbolBlock.imports, CachedOp called directly (out=, recorded), and the refusals."""
import math

from conftest import json_results, libmxrt, run_script


def names():
    proc = run_script("cached_op_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def close(a, b, path="result"):
    """Values equal within float32 rounding; structure equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and sorted(a) == sorted(b), f"{path}: keys {sorted(a)} vs {b}"
        for k in a:
            close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: {a} vs {b}"
        for i, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-3, abs_tol=2e-4), \
            f"{path}: MXNet {a}, mxrt {b}"
    else:
        assert a == b, f"{path}: MXNet {a!r}, mxrt {b!r}"


def test_scenario_matches_mxnet(scenario):
    real = json_results("cached_op_script.py", "mxnet")[scenario]
    ours = json_results("cached_op_script.py", str(libmxrt()))[scenario]
    if "error" in real:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    close(real["ok"], ours["ok"])
