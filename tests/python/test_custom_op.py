"""Custom operators (custom_script.py: mx.operator.CustomOp/CustomOpProp registered from Python)
give the same outcomes on libmxrt and on libmxnet.so: values and gradients within float32
rounding, errors surfacing at the same place (the call or the next wait), the library working
afterwards, every delete callback run once, the profiler's names. Under NaiveEngine both
libraries are compared again (errors then surface at the call on both)."""
import pytest

from conftest import json_results, libmxrt, run_script
from test_autograd import differs

NAIVE = (("MXNET_ENGINE_TYPE", "NaiveEngine"),)

# Scenarios run on libmxrt only (libmxnet.so crashes on them, or mxrt shows more), with the
# outcome expected there.
MXRT_ONLY = {
    # MXNet 1.9.1 segfaults: it calls the delete callback of the list the creator never filled
    "error_creator_raises": ["call", [2.0, 3.0]],
    # the engine ops of a custom operator are in mxrt's aggregate table (MXNet leaves them out)
    "profiler_shows_the_custom_engine_ops": [True, True, True],
}


ALL = (("CUSTOM_SCRIPT_MXRT_ONLY", "1"),)


def names():
    """(scenarios compared with MXNet, mxrt-only scenarios) as the script lists them."""
    proc = run_script("custom_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = proc.stdout.split()
    return ([n for n in listed if not n.endswith("*")],
            [n[:-1] for n in listed if n.endswith("*")])


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names()[0])


def compare(ours, real, scenario):
    if "error" in real:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    d = differs(ours["ok"], real["ok"], scenario)
    assert d is None, d


def test_scenario_matches_mxnet(scenario):
    real = json_results("custom_script.py", "mxnet")[scenario]
    ours = json_results("custom_script.py", str(libmxrt()), ALL)[scenario]
    compare(ours, real, scenario)


def test_scenario_matches_mxnet_on_naive_engine(scenario):
    real = json_results("custom_script.py", "mxnet", NAIVE)[scenario]
    ours = json_results("custom_script.py", str(libmxrt()), NAIVE)[scenario]
    compare(ours, real, scenario)


def test_mxrt_only_scenarios_are_listed_here():
    assert set(MXRT_ONLY) == set(names()[1])


@pytest.mark.parametrize("only", sorted(MXRT_ONLY))
def test_mxrt_only_scenario(only):
    ours = json_results("custom_script.py", str(libmxrt()), ALL)[only]
    assert ours == {"ok": MXRT_ONLY[only]}, ours
