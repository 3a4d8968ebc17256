"""Every case of grad_cases.py: libmxrt's float32 gradients equal libmxnet.so's, libmxrt's
float64 gradients equal central differences of the forward, and a backward MXNet refuses is
refused on libmxrt too."""
import math

import pytest

from conftest import json_results, libmxrt, run_script

# Cases where libmxrt differentiates what MXNet 1.9.1 cannot (case name: MXNet's refusal).
BEYOND_MXNET = {
    "grad_add": "Operator _grad_add is non-differentiable",
    # MXNet's _square_sum takes row_sparse arrays only
    "square_sum": "Operator not implemented: operator = _square_sum",
    "sort": "Invalid Parameter format for axis expect int or None but value=''",
    # MXNet has no backward for SparseEmbedding's weight as a dense array
    "sparse_embedding": "Operator not implemented: operator = _backward_SparseEmbedding",
    # MXNet's CPU kernels have no LSTMP backward
    "rnn_lstmp_bi": "No training support for LSTM with projection on CPU currently",
}


# Cases where MXNet 1.9.1's gradient is wrong: libmxrt's is checked against central differences
# only (case name: why).
DIFFERS_FROM_MXNET = {
    "leaky_selu": "MXNet's selu backward gives λ(α + y) below zero; the derivative is y + λα",
    "softmax_activation_instance_3d": "MXNet's backward of instance mode normalises along axis 1, "
                                      "its forward along the last axis",
}


def close(ours, theirs, rtol, atol):
    if ours is None or theirs is None:
        return ours is theirs
    if len(ours) != len(theirs):
        return False
    for x, y in zip(ours, theirs):
        if math.isnan(x) and math.isnan(y):
            continue
        if not abs(x - y) <= atol + rtol * abs(y):
            return False
    return True


def grad_case_names():
    proc = run_script("grad_cases.py", "mxnet", args=("--list",))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def pytest_generate_tests(metafunc):
    if "grad_case" in metafunc.fixturenames:
        metafunc.parametrize("grad_case", grad_case_names())


TOL = {"float32": (1e-4, 1e-5), "float64": (1e-9, 1e-10), "float16": (2e-2, 2e-3)}


def test_gradient_matches_mxnet_and_central_differences(grad_case):
    real = json_results("grad_cases.py", "mxnet")[grad_case]
    ours = json_results("grad_cases.py", str(libmxrt()), (("MXRT_GRAD_NUMERIC", "1"),))[grad_case]
    if grad_case in BEYOND_MXNET:
        assert BEYOND_MXNET[grad_case] in real.get("error", ""), real
    if "error" in real and grad_case not in BEYOND_MXNET:
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"
        return
    assert "ok" in ours, f"MXNet gives {real}, mxrt fails: {ours.get('error')}"
    if grad_case not in BEYOND_MXNET and real["ok"] == "differentiated":
        assert ours["ok"] == "differentiated"
        return
    if grad_case in DIFFERS_FROM_MXNET:
        assert "numeric" in ours, "a case that differs from MXNet needs central differences"
    for dtype, grads in (ours["ok"] if grad_case in BEYOND_MXNET | DIFFERS_FROM_MXNET
                         else real["ok"]).items():
        rtol, atol = TOL[dtype]
        for i, (g, h) in enumerate(zip(ours["ok"][dtype], grads)):
            assert close(g, h, rtol, atol), f"{dtype} gradient of input {i}: {g} vs MXNet's {h}"
    if "numeric" in ours:
        for i, (g, h) in enumerate(zip(ours["analytic64"], ours["numeric"])):
            assert close(g, h, 1e-4, 1e-5), f"input {i}: float64 gradient {g} vs central differences {h}"
