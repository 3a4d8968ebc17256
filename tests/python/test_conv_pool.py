"""Convolution, Deconvolution and Pooling (conv_pool_script.py) on libmxrt against libmxnet.so:
forward outputs and autograd gradients over a grid of parameters, the errors of bad parameters,
and a small Gluon CNN (deferred initialisation, imperative) trained for a few steps."""

import pytest

from conftest import close, json_results, libmxrt

SCRIPT = "conv_pool_script.py"

# Cases MXNet 1.9.1 cannot run on CPU (its oneDNN kernels refuse the descriptor): libmxrt's
# results are checked against the script's direct float64 reference instead.
MXNET_REFUSES = {
    "deconv_2d_target": "could not create a descriptor",
    "deconv_1d": "could not create a descriptor",
}

# Cases where MXNet 1.9.1's gradient is not the gradient of its forward: libmxrt's is checked
# by the adjoint identity <pool(x), h> = <x, dx> of linear pooling instead (case: why).
DIFFERS_FROM_MXNET = {
    "pool_1d_avg_full": "MXNet's 1-D backward divides the clipped last window by the kernel size, "
                        "its forward by the window's size",
}

# The error cases where libmxrt names the parameter MXNet's message names or implies.
NAMED_PARAMETER = {
    "bad_conv_no_kernel": "kernel", "bad_conv_no_num_filter": "num_filter",
    "bad_conv_stride_dims": "stride", "bad_conv_pad_dims": "pad", "bad_conv_bad_group": "num_group",
    "bad_conv_nhwc": "layout", "bad_conv_bad_cudnn_tune": "cudnn_tune", "bad_conv_4d_kernel": "kernel",
    "bad_conv_v1_1d": "kernel", "bad_deconv_bad_adj": "adj", "bad_deconv_big_target": "target_shape",
    "bad_pool_lp_no_p": "p_value", "bad_pool_no_kernel": "kernel", "bad_pool_kernel_rank": "kernel",
    "bad_pool_zero_stride": "stride", "bad_pool_bad_type": "pool_type",
    "bad_pool_same_2d": "pooling_convention", "bad_pool_v1_lp": "pool_type",
    "bad_pool_v1_count_include_pad": "count_include_pad",
}


def tolerance(case):
    if "f16" in case:
        return 2e-2, 2e-2
    return (1e-9, 1e-10) if case.endswith("float64") else (1e-4, 2e-5)


def results():
    return json_results(SCRIPT, "mxnet"), json_results(SCRIPT, str(libmxrt()))


def case_names():
    # the case names, from MXNet's run (cached by json_results when the tests run)
    return sorted(json_results(SCRIPT, "mxnet"))


@pytest.fixture(scope="module")
def both():
    return results()


@pytest.mark.parametrize("case", [c for c in case_names()
                                  if not c.startswith(("bad_", "second_order")) and c != "gluon_cnn_training"])
def test_forward_and_gradients_match_mxnet(both, case):
    real, ours = both
    got = ours[case]
    assert "ok" in got, f"mxrt fails: {got.get('error')} (MXNet: {real[case]})"
    rtol, atol = tolerance(case)
    if case in MXNET_REFUSES:
        assert MXNET_REFUSES[case] in real[case].get("error", ""), real[case]
    else:
        assert "ok" in real[case], real[case]
    if case.startswith("deconv_"):
        assert close(got["ok"], got["reference"], 1e-4, 2e-5, skip=("adjoint_gap",)), "mxrt differs from the direct reference"
    if case in MXNET_REFUSES:
        return
    want = real[case]["ok"]
    if case in DIFFERS_FROM_MXNET:
        assert close(got["ok"]["y"], want["y"], rtol, atol, skip=("adjoint_gap",)), "forward differs from MXNet's"
        assert abs(got["ok"]["adjoint_gap"]) < 1e-4, got["ok"]["adjoint_gap"]
        assert abs(want["adjoint_gap"]) > 1e-3, "MXNet's gradient is right now: remove the exception"
        return
    assert close(got["ok"], want, rtol, atol, skip=("adjoint_gap",)), "mxrt's output or gradients differ from MXNet's"
    if isinstance(got["ok"], dict) and "adjoint_gap" in got["ok"]:
        assert abs(got["ok"]["adjoint_gap"]) < 1e-4


@pytest.mark.parametrize("case", [c for c in case_names() if c.startswith("bad_")])
def test_bad_parameters_fail_naming_op_and_parameter(both, case):
    real, ours = both
    assert "error" in real[case], f"MXNet accepts it: {real[case]}"
    assert "error" in ours[case], f"mxrt accepts it: {ours[case]}"
    msg = ours[case]["error"]
    op = "Pooling" if "_pool_" in case else "Deconvolution" if "deconv" in case else "Convolution"
    assert f"operator {op}" in msg, msg
    if case in NAMED_PARAMETER:
        assert NAMED_PARAMETER[case] in msg, msg


def test_gluon_cnn_trains_as_on_mxnet(both):
    real, ours = both
    want, got = real["gluon_cnn_training"], ours["gluon_cnn_training"]
    assert "ok" in want, want
    assert "ok" in got, got
    # deferred initialisation inferred the same parameter shapes
    assert got["ok"]["shapes"] == want["ok"]["shapes"]
    for a, b in zip(got["ok"]["losses"], want["ok"]["losses"]):
        assert abs(a - b) <= 1e-5 + 1e-4 * abs(b), (got["ok"]["losses"], want["ok"]["losses"])


@pytest.mark.parametrize("case", [c for c in case_names() if c.startswith("second_order")])
def test_second_order_gradients_beyond_mxnet(both, case):
    """MXNet 1.9.1 has no gradient for its convolution's and pooling's backward ops; libmxrt's
    second-order gradients satisfy the adjoint identities of the first-order ones."""
    real, ours = both
    got = ours[case]
    assert "ok" in got, got
    assert got["ok"]["hv_gap"] < 1e-4 and got["ok"]["w_gap"] < 1e-4, got["ok"]
    if "ok" in real[case]:
        assert real[case]["ok"]["hv_gap"] < 1e-4, real[case]
