"""The Symbol API (symbol_script.py) gives the same outcomes on libmxrt and on libmxnet.so: the
same names, attributes, debug strings, inferred shapes and dtypes, the same refusals, and JSON
equal byte for byte; each library loads the graph files the other wrote."""
import json

import pytest

from conftest import json_results, libmxrt, run_script


def names():
    proc = run_script("symbol_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def test_scenario_matches_mxnet(scenario):
    real = json_results("symbol_script.py", "mxnet")[scenario]
    ours = json_results("symbol_script.py", str(libmxrt()))[scenario]
    if "error" in real:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    assert ours["ok"] == real["ok"]


@pytest.mark.parametrize("writer,reader", [("mxnet", "mxrt"), ("mxrt", "mxnet")])
def test_graph_files_load_on_the_other_library(tmp_path, writer, reader):
    lib = {"mxnet": "mxnet", "mxrt": str(libmxrt())}
    proc = run_script("symbol_script.py", lib[writer], args=("--write-json", str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    read = run_script("symbol_script.py", lib[reader], args=("--read-json", str(tmp_path)))
    assert read.returncode == 0, read.stderr[-2000:]
    same = run_script("symbol_script.py", lib[writer], args=("--read-json", str(tmp_path)))
    assert same.returncode == 0, same.stderr[-2000:]
    assert json.loads(read.stdout) == json.loads(same.stdout)
