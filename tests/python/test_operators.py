"""Every case of op_cases.py gives MXNet's outcome on libmxrt, on its threaded engine and on
NaiveEngine: the same values (within a float tolerance), shapes and dtypes, or both fail."""
import math

import pytest

from conftest import json_results, libmxrt

# Cases where MXNet 1.9.1 has undefined behaviour or crashes and mxrt reports an error instead:
# the case name and the start of mxrt's message.
MXRT_ERRORS = {
    # MXNet reads 25 elements of a 24-element array
    "reshape_bad": "MXImperativeInvokeEx: operator Reshape: cannot reshape [2, 3, 4] (24 elements) to [5, 5]",
}

ENGINES = {"threaded": (), "naive": (("MXNET_ENGINE_TYPE", "NaiveEngine"),)}


# Sparse results are compared by storage type and dense values; their parts (stored rows, values)
# too where MXNet defines them: MXNet's kernels for the other ops may keep explicit zeros, leave
# rows unsorted or report more values than the array stores.
SPARSE_PARTS_COMPARED = ("sparse_cast", "sparse_zeros", "sparse_csr_matrix", "sparse_row_sparse_array",
                         "sparse_scalar", "sparse_unary", "sparse_copyto", "sparse_save_load")


def differs(ours, real, path):
    """Where two outcomes differ, or None."""
    if isinstance(real, dict) and "stype" in real:
        if not isinstance(ours, dict) or ours.get("stype") != real["stype"]:
            return f"{path}: storage {ours.get('stype') if isinstance(ours, dict) else ours} vs {real['stype']}"
        keys = [k for k in real if k != "stype"] if path.startswith(SPARSE_PARTS_COMPARED) else ["dense"]
        for k in keys:
            d = differs(ours.get(k), real[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(real, list) and isinstance(ours, list):
        if len(ours) != len(real):
            return f"{path}: {len(ours)} results vs {len(real)}"
        for i, (x, y) in enumerate(zip(ours, real)):
            d = differs(x, y, f"{path}.{i}")
            if d:
                return d
        return None
    if isinstance(real, dict) and "values" in real:
        if not isinstance(ours, dict) or (ours["shape"], ours["dtype"]) != (real["shape"], real["dtype"]):
            return f"{path}: {ours if not isinstance(ours, dict) else (ours['shape'], ours['dtype'])} vs {(real['shape'], real['dtype'])}"
        for i, (x, y) in enumerate(zip(ours["values"], real["values"])):
            if x is None or y is None:  # NaN
                same = x is None and y is None
            elif isinstance(y, int):  # integer dtypes: exactly
                same = x == y
            else:
                same = x == y or abs(x - y) <= 1e-5 + 1e-4 * abs(y) or (math.isinf(x) and x == y)
            if not same:
                return f"{path}[{i}]: {x} vs {y}"
        return None
    return None if ours == real else f"{path}: {ours} vs {real}"


@pytest.mark.parametrize("engine", list(ENGINES))
def test_case_matches_mxnet(op_case, engine):
    real = json_results("op_cases.py", "mxnet")[op_case]
    ours = json_results("op_cases.py", str(libmxrt()), ENGINES[engine])[op_case]
    if op_case in MXRT_ERRORS:
        assert ours.get("error", "").startswith(MXRT_ERRORS[op_case]), ours
        return
    if "ok" in real:
        assert "ok" in ours, f"MXNet gives a result, mxrt fails: {ours}"
        d = differs(ours["ok"], real["ok"], op_case)
        assert d is None, d
    else:
        # both fail; the messages are each library's own
        assert "error" in ours, f"MXNet fails ({real['error']}), mxrt gives {ours}"


def test_errors_name_the_operator_and_the_problem():
    ours = json_results("op_cases.py", str(libmxrt()))
    expected = {
        "unknown_param": "operator sum: unknown parameter 'axiss'",
        "missing_param": "operator clip: required parameter 'a_max'",
        "broadcast_mismatch": "cannot be broadcast together",
        "pad_bad": "operator Pad: padding on the first two axes must be zero",
        "broadcast_like_empty_axes": "operator broadcast_like: lhs_axes and rhs_axes must not be empty",
    }
    for case, text in expected.items():
        assert text in ours[case].get("error", ""), (case, ours[case])


def test_the_suite_covers_the_operator_families():
    assert len(json_results("op_cases.py", "mxnet")) > 170
