"""Autograd and imperative Gluon training (autograd_script.py) give the same outcomes on libmxrt
and on libmxnet.so: values within float32 rounding, the same refusals."""
import math

import pytest

from conftest import json_results, libmxrt, run_script


def names():
    proc = run_script("autograd_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def differs(ours, real, path, rtol=2e-3, atol=2e-4):
    if isinstance(real, dict) and isinstance(ours, dict):
        if set(real) != set(ours):
            return f"{path}: keys {sorted(ours)} vs {sorted(real)}"
        for k in real:
            d = differs(ours[k], real[k], f"{path}.{k}", rtol, atol)
            if d:
                return d
        return None
    if isinstance(real, list) and isinstance(ours, list):
        if len(real) != len(ours):
            return f"{path}: {len(ours)} items vs {len(real)}"
        for i, (x, y) in enumerate(zip(ours, real)):
            d = differs(x, y, f"{path}[{i}]", rtol, atol)
            if d:
                return d
        return None
    if isinstance(real, float) and isinstance(ours, (int, float)) and not isinstance(ours, bool):
        if math.isnan(real) and math.isnan(ours):
            return None
        return None if abs(ours - real) <= atol + rtol * abs(real) else f"{path}: {ours} vs {real}"
    return None if ours == real else f"{path}: {ours} vs {real}"


def test_scenario_matches_mxnet(scenario):
    real = json_results("autograd_script.py", "mxnet")[scenario]
    ours = json_results("autograd_script.py", str(libmxrt()))[scenario]
    if "error" in real:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"mxrt fails: {ours['error']}"
    d = differs(ours["ok"], real["ok"], scenario)
    assert d is None, d
