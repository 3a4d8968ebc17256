"""Operator errors reach Python where MXNet raises them: at the call for what MXNet checks when
an op is invoked, at the next wait for what it checks in the kernel (error_timing.py)."""
from conftest import json_results, libmxrt

# MXNet's per-element samplers draw from invalid parameters without a word; mxrt fails the op
# (at the wait, where kernel errors surface) instead of returning values from no distribution.
STRICTER = {"sample_normal_negative": ("none", "wait")}


def test_errors_surface_where_mxnet_raises_them():
    real = json_results("error_timing.py", "mxnet")
    ours = json_results("error_timing.py", str(libmxrt()))
    assert real["normal_negative_scale"] == "wait" and real["shape_mismatch"] == "call", real
    for case, (theirs, mine) in STRICTER.items():
        assert (real.pop(case), ours.pop(case)) == (theirs, mine), case
    assert ours == real
