"""Elementwise fusion of CachedOp graphs (fusion_script.py): each scenario's values match numpy
and libmxnet.so's, and mxrt gives the same bits with fusion on and off (MXRT_FUSION=0)."""

import pytest

from conftest import assert_close, json_results, libmxrt, run_script


def names():
    proc = run_script("fusion_script.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", names())


def results(library, fusion=True):
    lib = "mxnet" if library == "mxnet" else str(libmxrt())
    env = () if fusion else (("MXRT_FUSION", "0"),)
    return json_results("fusion_script.py", lib, env)


def test_scenario(scenario):
    real = results("mxnet")[scenario]
    fused = results("mxrt")[scenario]
    unfused = results("mxrt", fusion=False)[scenario]
    assert "ok" in real, f"MXNet fails: {real['error']}"
    assert "ok" in fused, f"mxrt fails: {fused['error']}"
    assert "ok" in unfused, f"mxrt with MXRT_FUSION=0 fails: {unfused['error']}"
    for lib, r in [("mxnet", real), ("mxrt", fused)]:
        for e in r["ok"]["err"]:
            # float16 steps round to 11 bits
            tol = 2e-3 if "float16" in r["ok"]["dtypes"] or scenario == "mixed_dtypes" else 1e-5
            assert e < tol, f"{scenario} on {lib}: {e} from numpy"
    assert fused["ok"]["dtypes"] == real["ok"]["dtypes"]
    assert_close(fused["ok"]["values"], real["ok"]["values"], 1e-4, 1e-4)
    assert fused["ok"]["bits"] == unfused["ok"]["bits"], "fusion changed the results' bits"
