"""Convolution's fast paths (conv_fast_script.py) on libmxrt against libmxnet.so: Winograd
F(4x4, 3x3) layers, the cases that fall back to im2col + GEMM, few-channel and 1x1 layers;
outputs and every gradient, on one and two intra-op threads, and Winograd against libmxrt's own
im2col + GEMM results."""

import pytest

from conftest import assert_close, json_results, libmxrt

SCRIPT = "conv_fast_script.py"


def scaled(real, ours, rtol, atol_rel, path):
    """`assert_close` of each array with an absolute tolerance relative to the array's magnitude
    (the Winograd transforms round like a sum of the products, not like each product)."""
    scale = max([abs(v) for v in real] or [0.0])
    assert_close(real, ours, rtol, atol_rel * scale, path)


def compare(real, ours, case):
    assert "ok" in real, real
    assert "ok" in ours, f"mxrt fails: {ours.get('error')}"
    real, ours = real["ok"], ours["ok"]
    assert real["shape"] == ours["shape"]
    if case.endswith("float64"):
        tol = (1e-9, 1e-12)
    elif case.endswith("float16"):
        tol = (2e-2, 1e-2)
    else:
        # MXNet's float32 tests: rtol 1e-3, atol 1e-4 (relative to the values' magnitude here)
        tol = (1e-3, 1e-4)
    scaled(real["y"], ours["y"], *tol, f"{case}.y")
    assert len(real["grads"]) == len(ours["grads"])
    for i, (a, b) in enumerate(zip(real["grads"], ours["grads"])):
        scaled(a, b, *tol, f"{case}.grads[{i}]")


def case_names():
    return sorted(json_results(SCRIPT, "mxnet"))


# libmxrt's settings: one and two intra-op threads, and one output row per block of columns
SETTINGS = {
    "1thread": (("OMP_NUM_THREADS", "1"),),
    "2threads": (("OMP_NUM_THREADS", "2"),),
    "row_blocks": (("OMP_NUM_THREADS", "2"), ("MXRT_CONV_COL_BYTES", "1")),
    # the smallest Winograd tile blocks (48 tiles): several blocks per thread
    "wino_small_blocks": (("OMP_NUM_THREADS", "2"), ("MXRT_WINOGRAD_BLOCK_KB", "1")),
}


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("case", case_names())
def test_matches_mxnet(case, setting):
    # MXNet refuses float16 convolutions on CPU: its float32 result is the reference then
    real = json_results(SCRIPT, "mxnet")[case.replace("float16", "float32")]
    ours = json_results(SCRIPT, str(libmxrt()), SETTINGS[setting])[case]
    compare(real, ours, case)


@pytest.mark.parametrize("case", [c for c in case_names() if "wino" in c and c.endswith("float32")])
def test_winograd_matches_im2col(case):
    wino = json_results(SCRIPT, str(libmxrt()), (("OMP_NUM_THREADS", "2"),))[case]
    im2col = json_results(SCRIPT, str(libmxrt()),
                          (("OMP_NUM_THREADS", "2"), ("MXRT_CONV_WINOGRAD", "0")))[case]
    compare(im2col, wino, case)
    # the switch really changes the kernel: float32 rounding differs somewhere
    assert wino["ok"] != im2col["ok"]
