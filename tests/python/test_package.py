"""MXNet's own Python package (the unmodified `mxnet==1.9.1` wheel) imports on libmxrt and builds
the same functions as on libmxnet.so; what mxrt does not implement fails with a clear error."""
import pytest

from conftest import json_results, libmxrt


@pytest.fixture(scope="module")
def facts():
    return json_results("package_facts.py", "mxnet"), json_results("package_facts.py", str(libmxrt()))


@pytest.mark.parametrize("key", ["version", "nd_op", "nd_internal", "nd_random", "io_iters", "docs",
                                 "array", "shape", "reshape", "row", "slice", "load", "zeros"])
def test_same_on_both_libraries(facts, key):
    real, ours = facts
    assert ours[key] == real[key]


def test_the_generated_op_namespace_is_complete(facts):
    real, _ = facts
    assert len(real["nd_op"]) + len(real["nd_internal"]) > 600
    assert real["zeros"]["ok"] == [[0.0, 0.0], [0.0, 0.0]]


def test_what_is_not_built_fails_clearly(facts):
    real, ours = facts
    assert "ok" in real["unimplemented"]
    assert ours["unimplemented"]["error"] == \
        "MXImperativeInvokeEx: operator _contrib_DeformableConvolution is not implemented by mxrt"
    # a missing file is an error naming the iterator and the file, on both libraries
    assert "error" in real["data_iter"]
    assert ours["data_iter"]["error"].startswith(
        "MXDataIterCreateIter: ImageDetRecordIter: cannot open /nonexistent.rec")
